"""Fixtures for the convention tests: a leader servo and member agents as real, separate processes,
on two "hosts".

- ``hosts`` (parametrized): ``loopback`` (127.0.0.1 and 127.0.0.2 of this machine, always) and
  ``netns`` (two network namespaces joined by a veth pair, created and removed by the fixture;
  skipped, saying why, where the machine does not allow them).
- ``secret_file``: a fresh shared key, mode 600.
- ``agent(...)``: starts ``servo-actors agent`` on the member host.
- ``leader(connectors, ...)``: a leader ServoRuntime (``leader_harness.py``) on the leader host.

Every process gets a marker in its environment that all it starts inherit: after the test, a live
process carrying it is a leak (killed, and the test fails).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from queue import Empty, Queue
from typing import Any

import netns
import pytest
import yaml
from marked_processes import MARKER_VAR, marked_pids

from servo_actors.actors.linux import processes

LEAK_GRACE = 8.0
"""Seconds stopped processes get to disappear before they count as leaked."""
EXIT_TIMEOUT = 20.0
"""Generous bound on a process's exit after a signal: only a hang breaks it."""
ANSWER_TIMEOUT = 60.0
"""Generous bound on one harness command: only a hang breaks it."""
HARNESS = Path(__file__).parent / "leader_harness.py"


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


@dataclass
class Hosts:
    """Where the leader and the member run: addresses and, for namespaces, the command prefix."""

    kind: str
    leader_ip: str
    member_ip: str
    namespaces: netns.TwoNamespaces | None = None

    def leader_prefix(self) -> list[str]:
        return self.namespaces.exec_prefix(self.namespaces.leader_ns) if self.namespaces else []

    def member_prefix(self) -> list[str]:
        return self.namespaces.exec_prefix(self.namespaces.member_ns) if self.namespaces else []

    def leader_port(self) -> int:
        # Thespian counts two local addresses on one port as one system: different ports always.
        return free_port(self.leader_ip) if self.namespaces is None else 19100

    def member_port(self, index: int = 0) -> int:
        return free_port(self.member_ip) if self.namespaces is None else 19201 + index

    def cut(self) -> None:
        assert self.namespaces is not None, "only namespaces can be cut apart"
        self.namespaces.cut()

    def restore(self) -> None:
        assert self.namespaces is not None
        self.namespaces.restore()


@pytest.fixture(scope="module")
def two_namespaces() -> Iterator[netns.TwoNamespaces]:
    why = netns.unavailable()
    if why is not None:
        pytest.skip(f"two-host tests on network namespaces skipped: {why}")
    made = netns.TwoNamespaces.create()
    try:
        yield made
    finally:
        made.remove()


@pytest.fixture(params=["loopback", pytest.param("netns", marks=pytest.mark.root)])
def hosts(request: pytest.FixtureRequest) -> Hosts:
    if request.param == "loopback":
        return Hosts("loopback", "127.0.0.1", "127.0.0.2")
    made = request.getfixturevalue("two_namespaces")
    made.restore()  # a test that cut it may have failed before restoring it
    return Hosts("netns", made.leader_ip, made.member_ip, made)


@pytest.fixture
def loopback_hosts() -> Hosts:
    return Hosts("loopback", "127.0.0.1", "127.0.0.2")


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "convention.key"
    path.write_text(secrets.token_urlsafe(48))
    path.chmod(0o600)
    return path


class Tracked:
    """A process of the test with its log; stopped (SIGTERM, then SIGKILL) at teardown."""

    def __init__(self, command: list[str], log_path: Path, marker: str, stdin: Any = None) -> None:
        self.marker = marker
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 (closed in stop())
        env = {**os.environ, MARKER_VAR: marker, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            command,
            stdout=self._log if stdin is None else subprocess.PIPE,
            stderr=self._log,
            env=env,
            stdin=stdin,
            text=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def pids(self) -> list[int]:
        """Every live process of it (itself and all it started)."""
        return marked_pids(self.marker)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = EXIT_TIMEOUT) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        processes.stop_child(self.proc, EXIT_TIMEOUT)
        self._log.close()


class Agent(Tracked):
    def __init__(
        self, hosts: Hosts, tmp_path: Path, *, join: str, secret: Path, index: int, args: tuple[str, ...]
    ) -> None:
        self.listen = f"{hosts.member_ip}:{hosts.member_port(index)}"
        self.run_dir = tmp_path / f"agent-{index}"
        command = [
            *hosts.member_prefix(),
            sys.executable,
            "-m",
            "servo_actors",
            "agent",
            "--listen",
            self.listen,
            "--join",
            join,
            "--secret-file",
            str(secret),
            "--rejoin-min",
            "100ms",
            "--rejoin-max",
            "1s",
            "--run-dir",
            str(self.run_dir),
            *args,
        ]
        super().__init__(command, tmp_path / f"agent-{index}.log", uuid.uuid4().hex)


class Leader(Tracked):
    """The harness: ``ask(cmd, **fields)`` sends one command and returns its answer."""

    def __init__(self, hosts: Hosts, tmp_path: Path, config: dict[str, Any], index: int) -> None:
        directory = tmp_path / f"leader-{index}"
        directory.mkdir()
        self.config_path = directory / "servo.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.run_dir = directory / "run"
        command = [
            *hosts.leader_prefix(),
            sys.executable,
            str(HARNESS),
            str(self.config_path),
            str(self.run_dir),
        ]
        super().__init__(command, directory / "leader.log", uuid.uuid4().hex, stdin=subprocess.PIPE)
        self._answers: Queue[str] = Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._answers.put(line)

    def ask(self, cmd: str, bound: float = ANSWER_TIMEOUT, **fields: Any) -> dict[str, Any]:
        """Send one command; its answer (AssertionError naming the log after ``bound`` seconds)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd, **fields}) + "\n")
        self.proc.stdin.flush()
        try:
            answer = json.loads(self._answers.get(timeout=bound))
        except Empty:
            raise AssertionError(
                f"the leader did not answer {cmd} within {bound}s; log:\n{self.log()}"
            ) from None
        return answer

    def status(self) -> dict[str, dict[str, Any]]:
        answer = self.ask("status")
        assert answer["ok"], answer
        return {child["name"]: child for child in answer["children"]}

    def stop(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "stop"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(EXIT_TIMEOUT)
            except (BrokenPipeError, subprocess.TimeoutExpired, OSError):
                pass
        super().stop()


def leader_config(
    hosts: Hosts,
    secret: Path,
    connectors: list[dict[str, Any]],
    port: int,
    supervisor: dict[str, Any],
    **convention: Any,
) -> dict[str, Any]:
    return {
        "supervisor": {
            "convention": {
                "listen": f"{hosts.leader_ip}:{port}",
                "secret_file": str(secret),
                "heartbeat": convention.pop("heartbeat", {"interval": "500ms", "timeout": "3s"}),
                **convention,
            },
            "restart_backoff": {"min": "50ms", "max": "500ms"},
            **supervisor,
        },
        "connectors": connectors,
    }


@dataclass
class Convention:
    """One test's leader and agents; all stopped and checked for leaks at teardown."""

    hosts: Hosts
    tmp_path: Path
    secret: Path
    leader_port: int
    started: list[Tracked]

    @property
    def leader_address(self) -> str:
        return f"{self.hosts.leader_ip}:{self.leader_port}"

    def config(
        self, connectors: list[dict[str, Any]], supervisor: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A leader's servo.yaml (as a dict) with these connectors."""
        return leader_config(self.hosts, self.secret, connectors, self.leader_port, supervisor or {})

    def agent(self, *args: str, secret: Path | None = None, join: str | None = None) -> Agent:
        index = sum(isinstance(t, Agent) for t in self.started)
        started = Agent(
            self.hosts,
            self.tmp_path,
            join=join or self.leader_address,
            secret=secret or self.secret,
            index=index,
            args=args,
        )
        self.started.append(started)
        return started

    def leader(
        self,
        connectors: list[dict[str, Any]],
        *,
        start: bool = True,
        supervisor: dict[str, Any] | None = None,
        **convention: Any,
    ) -> Leader:
        """A leader harness with these connectors (started unless ``start`` is False); ``supervisor``
        adds settings, ``convention`` overrides those of supervisor.convention."""
        index = sum(isinstance(t, Leader) for t in self.started)
        config = leader_config(
            self.hosts, self.secret, connectors, self.leader_port, supervisor or {}, **convention
        )
        started = Leader(self.hosts, self.tmp_path, config, index)
        self.started.append(started)
        if start:
            answer = started.ask("start")
            assert answer["ok"], f"{answer}\n{started.log()}"
        return started


@pytest.fixture
def convention(hosts: Hosts, tmp_path: Path, secret_file: Path) -> Iterator[Convention]:
    made = Convention(hosts, tmp_path, secret_file, hosts.leader_port(), [])
    yield made
    _stop_all(made)


@pytest.fixture
def loopback_convention(loopback_hosts: Hosts, tmp_path: Path, secret_file: Path) -> Iterator[Convention]:
    """A convention on loopback only (for what a test process outside a namespace must reach)."""
    made = Convention(loopback_hosts, tmp_path, secret_file, loopback_hosts.leader_port(), [])
    yield made
    _stop_all(made)


def _stop_all(made: Convention) -> None:
    leaks: dict[int, list[int]] = {}
    for tracked in reversed(made.started):
        tracked.stop()
    for tracked in made.started:
        deadline = time.monotonic() + LEAK_GRACE
        while (alive := tracked.pids()) and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive:
            leaks[tracked.pid] = alive
            for pid in alive:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    if leaks:
        pytest.fail(f"processes survived (started pid: leaked pids): {leaks}")
