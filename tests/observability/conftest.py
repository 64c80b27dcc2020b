"""Fixtures for the servo's own metrics, health endpoints and logs.

- ``servo``: ``servo(config, *run_args)`` starts a real ``servo-actors run`` subprocess (JSON logs,
  the test connectors of ``plugins/`` importable); after the test every process that carries its
  environment marker must be gone (else it is killed and the test fails).
- ``optimizer``: ``optimizer(driver)`` an embedded optimizer on a free loopback port.
- ``kit``: helpers (importlib mode: test modules do not import this file).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from marked_processes import MARKER_VAR, marked_pids
from waiting import wait_until

from servo_actors.actors.linux import processes
from servo_actors.optimizer.scripted import ScriptedDriver
from servo_actors.optimizer.server import OptimizerServer

PLUGINS = Path(__file__).parent / "plugins"
LEAK_GRACE = 5.0
"""Seconds a stopped servo's processes get to disappear before they count as leaked."""
EXIT_TIMEOUT = 20.0
"""Generous bound on a servo's exit after a signal: only a hang breaks it."""
PROBE_TIMEOUT = 2.0
"""Seconds for one request to the servo's metrics server."""
APP = "example.com/web"


class ServoProcess:
    """A ``servo-actors --log-format json run`` subprocess with its own config file and log."""

    def __init__(self, directory: Path, config: dict[str, Any], args: tuple[str, ...]) -> None:
        self.dir = directory
        self.config_path = directory / "servo.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = directory / "servo.log"
        self.marker = uuid.uuid4().hex
        pythonpath = os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, MARKER_VAR: self.marker, "PYTHONUNBUFFERED": "1", "PYTHONPATH": pythonpath}
        command = [sys.executable, "-m", "servo_actors", "-c", str(self.config_path), "--log-format", "json"]
        self._log = open(self.log_path, "w")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(
            [*command, "run", *args], stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=directory
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def log_lines(self) -> list[dict[str, Any]]:
        """Every line of the log as JSON (a line that is not JSON fails the test)."""
        return [json.loads(line) for line in self.log().splitlines() if line.strip()]

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = EXIT_TIMEOUT) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        processes.stop_child(self.proc, EXIT_TIMEOUT)
        self._log.close()


@pytest.fixture
def servo(tmp_path: Path) -> Iterator[Callable[..., ServoProcess]]:
    started: list[ServoProcess] = []

    def start(config: dict[str, Any], *args: str) -> ServoProcess:
        directory = tmp_path / f"servo-{len(started)}"
        directory.mkdir()
        process = ServoProcess(directory, config, args)
        started.append(process)
        return process

    yield start
    leaks: dict[int, list[int]] = {}
    for process in started:
        process.stop()
        deadline = time.monotonic() + LEAK_GRACE
        while (alive := marked_pids(process.marker)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive:
            leaks[process.pid] = alive
            for pid in alive:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    if leaks:
        pytest.fail(f"processes of the servo survived it (servo pid: leaked pids): {leaks}")


@pytest.fixture
def optimizer() -> Iterator[Callable[..., OptimizerServer]]:
    servers: list[OptimizerServer] = []

    def start(driver: Any) -> OptimizerServer:
        server = OptimizerServer(driver, app=APP, host="127.0.0.1", port=0)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def servo_config(
    server: OptimizerServer, connectors: list[dict[str, Any]], **sections: Any
) -> dict[str, Any]:
    """A servo.yaml (as a dict) pointed at ``server``: fast progress, short backoff, and ``sections``
    merged in (``settings={...}`` adds to the settings, ``supervisor={...}`` is the supervisor)."""
    settings = {
        "progress_interval": "200ms",
        "timeouts": {"connect": "2s", "read": "5s"},
        "backoff": {"min": "50ms", "max": "300ms", "max_time": "30s"},
        **sections.pop("settings", {}),
    }
    return {
        "optimizer": {"id": APP, "base_url": server.url},
        "settings": settings,
        "connectors": connectors,
        **sections,
    }


def scripted(script: list[dict[str, Any]], *, sleep: str = "60s", token: str | None = None) -> ScriptedDriver:
    plan: dict[str, Any] = {"app": APP, "script": script, "sleep": sleep}
    if token is not None:
        plan["token"] = token
    return ScriptedDriver.from_plan(plan)


def chaos(name: str, **config: Any) -> dict[str, Any]:
    return {"name": name, "type": "chaos", "config": config}


def probe(address: str, path: str) -> requests.Response:
    """GET ``path`` from the servo's metrics server at ``address`` (HOST:PORT)."""
    return requests.get(f"http://{address}{path}", timeout=PROBE_TIMEOUT)


def probe_or_none(address: str, path: str) -> requests.Response | None:
    """Like ``probe``, None while nothing answers yet."""
    try:
        return probe(address, path)
    except requests.ConnectionError:
        return None


def free_port() -> int:
    return processes_free_port()


def processes_free_port() -> int:
    from servo_actors.actors.transport.ports import free_loopback_port

    return free_loopback_port()


def servo_pids(marker: str) -> list[int]:
    return marked_pids(marker)


def supervisor_pid(servo_pid: int, marker: str) -> int:
    """The supervisor of the servo's actor system: the process whose children are connector hosts
    (found as the marked process whose parent is the admin, itself not the servo's child)."""
    marked = set(marked_pids(marker))
    stats = {pid: processes.proc_stat(pid) for pid in marked}
    for pid, stat in stats.items():
        if stat is None or stat.ppid not in marked or stat.ppid == servo_pid:
            continue
        parent = stats.get(stat.ppid)
        # The admin's children are the logger and the supervisor; only the supervisor has children.
        if parent is not None and parent.ppid not in marked and processes.children_of(pid):
            return pid
    raise AssertionError(f"no supervisor among the servo's processes {sorted(marked)}")


class ObservabilityKit:
    """Helpers handed out by the ``kit`` fixture."""

    servo_config = staticmethod(servo_config)
    scripted = staticmethod(scripted)
    chaos = staticmethod(chaos)
    probe = staticmethod(probe)
    probe_or_none = staticmethod(probe_or_none)
    wait_until = staticmethod(wait_until)
    free_port = staticmethod(free_port)
    marked_pids = staticmethod(marked_pids)
    supervisor_pid = staticmethod(supervisor_pid)


@pytest.fixture
def kit() -> type[ObservabilityKit]:
    return ObservabilityKit
