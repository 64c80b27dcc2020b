"""Fixtures for tests that start actor systems.

(``no_actor_system_survives``, which fails any test that leaves a process of an actor system it
started, is in tests/conftest.py and applies to every test.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

from servo_actors.actors import ServoRuntime
from servo_actors.config.models import ServoConfig


def chaos(name: str, **config: Any) -> dict[str, Any]:
    """A connector entry of type chaos."""
    return {"name": name, "type": "chaos", "config": config}


def servo_config(*connectors: dict[str, Any], **supervisor: Any) -> ServoConfig:
    return ServoConfig.model_validate({"connectors": list(connectors), "supervisor": supervisor})


@pytest.fixture
def start_runtime(tmp_path: Path) -> Iterator[Callable[..., ServoRuntime]]:
    """``start_runtime(*connectors, **supervisor_settings)``: a started runtime, stopped after the test."""
    runtimes: list[ServoRuntime] = []

    def start(*connectors: dict[str, Any], **supervisor: Any) -> ServoRuntime:
        run_dir = tmp_path / f"run{len(runtimes)}"
        runtime = ServoRuntime(servo_config(*connectors, **supervisor), run_dir=run_dir)
        runtimes.append(runtime)
        runtime.start()
        return runtime

    yield start
    for runtime in runtimes:
        runtime.stop()


def pids(runtime: ServoRuntime) -> dict[str, int | None]:
    """Connector name -> PID of its current process, from the supervisor."""
    return {child.name: child.pid for child in runtime.status().children}


def states(runtime: ServoRuntime) -> dict[str, str]:
    return {child.name: child.state for child in runtime.status().children}


class ActorTestKit:
    """Helpers for actor tests, handed out by the ``kit`` fixture (importlib mode: no test imports)."""

    chaos = staticmethod(chaos)
    servo_config = staticmethod(servo_config)
    pids = staticmethod(pids)
    states = staticmethod(states)
    wait_for = staticmethod(wait_until)


@pytest.fixture
def kit() -> type[ActorTestKit]:
    return ActorTestKit
