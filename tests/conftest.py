"""Shared by every test folder.

- ``no_actor_system_survives`` (autouse): fails any test after which a process of an actor system
  it started in-process is still alive (they are killed first, so one leak does not cascade).
  Tests that start servo processes check those by an environment marker (tests/runner).
- ``run_cli``: the real CLI in-process, stdout and stderr apart.
- ``test_plugins``: the test-only connector package in tests/config/plugins, importable for one test.
- ``tests/support`` holds helpers any test may import (``import browser``).
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from servo_actors.actors import processes, system
from servo_actors.cli import cli

SUPPORT = str(Path(__file__).parent / "support")
PLUGINS = Path(__file__).parent / "config" / "plugins"
if SUPPORT not in sys.path:
    sys.path.insert(0, SUPPORT)

SURVIVOR_GRACE = 3.0
"""Seconds a stopped system's processes get to disappear before the test is failed."""


@pytest.fixture(autouse=True)
def no_actor_system_survives() -> Iterator[None]:
    before = set(system.sessions_started())
    yield
    started = [sid for sid in system.sessions_started() if sid not in before]
    deadline = time.monotonic() + SURVIVOR_GRACE
    survivors: dict[int, list[int]] = {}
    for sid in started:
        while (alive := processes.session_members(sid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive:
            survivors[sid] = alive
            processes.kill_session(sid)
    if survivors:
        pytest.fail(f"actor-system processes survived the test (session: pids): {survivors}")


def make_runner() -> CliRunner:
    """A CliRunner keeping stdout and stderr apart (click 8.1 needs asking; 8.2+ always does)."""
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


@pytest.fixture
def run_cli() -> Callable[..., Result]:
    """``run_cli(args, env=None)``: the real CLI in-process; exceptions are not swallowed."""

    def run(args: Sequence[str], env: dict[str, str | None] | None = None) -> Result:
        return make_runner().invoke(cli, list(args), env=env, catch_exceptions=False)

    return run


@pytest.fixture
def test_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``sa_test_connectors`` importable (and its entry points installed) for this test only."""
    monkeypatch.syspath_prepend(str(PLUGINS))
    importlib.invalidate_caches()
    yield PLUGINS
    for name in [name for name in sys.modules if name.startswith("sa_test_connectors")]:
        del sys.modules[name]
