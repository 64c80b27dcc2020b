"""Fixtures for check/describe/measure/adjust: the real CLI as a process, and proof nothing is left.

Every command runs as ``python -m servo_actors -c CONFIG ...`` with a config file in ``tmp_path``,
so the real supervisor, actor system and connector processes start and stop each time.

Leak check: each process started here carries a unique ``SERVO_OPS_TEST_TAG`` in its environment,
which every process it forks or spawns inherits (the actor system's admin, the supervisor, the
connector hosts, a command connector's shell). After each test no live process may carry the tag;
survivors are killed (by PID) and the test fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from waiting import wait_until

from servo_actors.actors.linux import processes

RUN_TIMEOUT = 45.0
"""Seconds one CLI run may take before the test counts it as hung (runs take ~0.5 s)."""
SURVIVOR_GRACE = 5.0
"""Seconds a finished run's processes get to disappear before the test fails."""
TAG_VARIABLE = "SERVO_OPS_TEST_TAG"
CLEAN_PREFIXES = ("OPSANI_", "SERVO_", "NO_COLOR")


def tagged_processes(tag: str) -> list[int]:
    """Live PIDs whose environment holds ``TAG_VARIABLE=tag``."""
    needle = f"{TAG_VARIABLE}={tag}".encode()
    found = []
    for stat in processes.all_processes():
        if not stat.alive or stat.pid == os.getpid():
            continue
        try:
            with open(f"/proc/{stat.pid}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
        except OSError:
            continue
        if needle in environ:
            found.append(stat.pid)
    return found


class Servo:
    """Runs the CLI against one config file in a test's ``tmp_path``."""

    def __init__(self, tmp_path: Path, tag: str) -> None:
        self.dir = tmp_path
        self.tag = tag
        self.config_path = tmp_path / "servo.yaml"

    def write_config(self, *connectors: dict[str, Any], **top: Any) -> Path:
        self.config_path.write_text(yaml.safe_dump({**top, "connectors": list(connectors)}, sort_keys=False))
        return self.config_path

    def env(self, **extra: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(CLEAN_PREFIXES)}
        return {**base, TAG_VARIABLE: self.tag, **extra}

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "servo_actors", "-l", "warning", "-c", str(self.config_path), *args]

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args),
            cwd=self.dir,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
        )

    def run_json(self, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
        result = self.run(*args, "--json")
        return result, json.loads(result.stdout)

    def start(self, *args: str, **popen: Any) -> subprocess.Popen[str]:
        """The CLI in the background, in a session of its own (so it gets signals only from us)."""
        return subprocess.Popen(
            self.argv(*args),
            cwd=self.dir,
            env=self.env(**popen.pop("env", {})),
            start_new_session=True,
            text=True,
            **popen,
        )


@pytest.fixture
def servo(tmp_path: Path) -> Iterator[Servo]:
    tag = uuid.uuid4().hex
    yield Servo(tmp_path, tag)
    deadline = time.monotonic() + SURVIVOR_GRACE
    while (alive := tagged_processes(tag)) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive:
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        pytest.fail(f"processes of the CLI run survived the test: {alive}")


def table_rows(text: str) -> list[list[str]]:
    """The data rows of every table in ``text`` (cells split on runs of 2+ spaces; rules dropped)."""
    import re

    rows = []
    for line in text.splitlines():
        if not line.strip() or set(line.replace(" ", "")) == {"-"}:
            continue
        rows.append(re.split(r" {2,}", line.strip()))
    return rows


class OpsKit:
    """Helpers handed out by the ``kit`` fixture (importlib mode: tests cannot import conftest)."""

    table_rows = staticmethod(table_rows)
    wait_until = staticmethod(wait_until)
    tagged_processes = staticmethod(tagged_processes)


@pytest.fixture
def kit() -> type[OpsKit]:
    return OpsKit
