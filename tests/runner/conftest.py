"""Fixtures for end-to-end tests of the control loop: a real servo process (`servo-actors run`)
against the embedded optimizer over loopback HTTP, with real signals.

Every servo process gets a unique marker in its environment; every process it starts (actor
system, connectors, their children) inherits it. After the test, any live process carrying the
marker is a leak: it is killed and the test fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from marked_processes import MARKER_VAR, marked_pids
from waiting import wait_until

from servo_actors.actors.linux import processes
from servo_actors.optimizer.server import OptimizerServer

LEAK_GRACE = 5.0
"""Seconds a stopped servo's processes get to disappear before the test counts them as leaked."""
EXIT_TIMEOUT = 20.0
"""Generous bound on a servo's exit after a signal: only a hang breaks it."""


class ServoProcess:
    """A `servo-actors run` subprocess with its own config file and log."""

    def __init__(
        self,
        tmp_path: Path,
        config: dict[str, Any] | list[dict[str, Any]],
        marker: str,
        args: tuple[str, ...] = (),
    ) -> None:
        self.dir = tmp_path
        self.config_path = tmp_path / "servo.yaml"
        self.write_config(config)
        self.log_path = tmp_path / "servo.log"
        self.marker = marker
        env = {**os.environ, MARKER_VAR: marker, "PYTHONUNBUFFERED": "1"}
        command = [sys.executable, "-m", "servo_actors", "-c", str(self.config_path), "run", *args]
        self._log = open(self.log_path, "w")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path
        )

    def write_config(self, config: dict[str, Any] | list[dict[str, Any]]) -> None:
        """One document, or a list of them (a servo of several applications)."""
        documents = config if isinstance(config, list) else [config]
        self.config_path.write_text(yaml.safe_dump_all(documents))

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = EXIT_TIMEOUT) -> int:
        return self.proc.wait(timeout)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def stop(self) -> None:
        processes.stop_child(self.proc, EXIT_TIMEOUT)
        self._log.close()


@pytest.fixture
def servo(tmp_path: Path) -> Iterator[Callable[..., ServoProcess]]:
    """``servo(config_dict, *run_args)`` starts a servo process; all of them are checked for leaks."""
    started: list[ServoProcess] = []

    def start(config: dict[str, Any] | list[dict[str, Any]], *args: str) -> ServoProcess:
        # A second servo in one test gets its own directory: its config and log stay apart.
        directory = tmp_path / f"servo-{len(started)}" if started else tmp_path
        directory.mkdir(exist_ok=True)
        process = ServoProcess(directory, config, uuid.uuid4().hex, args)
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
            leaks[process.proc.pid] = alive
            for pid in alive:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    if leaks:
        pytest.fail(f"processes of the servo survived it (servo pid: leaked pids): {leaks}")


@pytest.fixture
def optimizer() -> Iterator[Callable[..., OptimizerServer]]:
    """``optimizer(driver, app=...)`` starts an embedded optimizer on a free loopback port."""
    servers: list[OptimizerServer] = []

    def start(driver: Any, app: str = "example.com/web") -> OptimizerServer:
        server = OptimizerServer(driver, app=app, host="127.0.0.1", port=0)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def servo_config(
    server: OptimizerServer, connectors: list[dict[str, Any]], **settings: Any
) -> dict[str, Any]:
    """A servo.yaml (as a dict) pointed at ``server``, with fast progress and short backoff."""
    return {
        "optimizer": {"id": server.app, "base_url": server.url},
        "settings": {
            "progress_interval": settings.pop("progress_interval", "200ms"),
            "timeouts": {"connect": "2s", "read": "5s"},
            "backoff": {"min": "50ms", "max": "500ms", "max_time": "30s"},
            **settings,
        },
        "connectors": connectors,
    }


def check_trace(history: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Check a recorded exchange against docs/protocol.md; the posts for each cmd_uid, in order.

    HELLO first and GOODBYE last; every command with a cmd_uid answered by at most one result (a
    result is owed unless the optimizer answered ``unexpected-event``/``invalid`` to its progress,
    or the servo was stopped during it); no progress after the result; progress never has a status.
    """
    events = [entry["event"] for entry in history if entry.get("event")]
    assert events[0] == "HELLO", events[:3]
    assert events[-1] == "GOODBYE", events[-3:]
    assert events.count("HELLO") == 1 and events.count("GOODBYE") == 1
    posts: dict[str, list[dict[str, Any]]] = {}
    issued: list[str] = []
    for entry in history:
        reply = entry.get("reply") or {}
        if entry.get("event") == "WHATS_NEXT" and reply.get("cmd_uid"):
            issued.append(reply["cmd_uid"])
            posts[reply["cmd_uid"]] = []
        elif entry.get("event") in ("DESCRIPTION", "MEASUREMENT", "ADJUSTMENT"):
            uid = (entry.get("param") or {}).get("cmd_uid")
            assert uid in posts, f"a post for {uid!r}, which was never issued"
            posts[uid].append(entry)
    for uid in issued:
        results = [p for p in posts[uid] if "status" in p["param"]]
        assert len(results) <= 1, f"{uid} answered {len(results)} times"
        if results:
            last = posts[uid].index(results[0])
            assert last == len(posts[uid]) - 1, f"{uid}: a post after its result"
            assert results[0]["param"]["status"] in ("ok", "failed", "rejected", "aborted", "cancelled")
            assert isinstance(results[0]["param"]["reason"], str) and " " not in results[0]["param"]["reason"]
    return posts


@dataclass
class Entry:
    """One command a QueueDriver sends, and what came of it."""

    command: dict[str, Any]
    progress: list[Any] = field(default_factory=list)
    result_reply: Any = None
    cancel_after: float | None = None
    cmd_uid: str | None = None
    progress_posts: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    cancelled: bool = False
    finished: threading.Event = field(default_factory=threading.Event)
    cancel_timer: threading.Timer | None = None
    """The Abort timer of ``cancel_after`` once the command was sent: join it before the next
    command exists, so the Abort cannot hit that one."""


class QueueDriver:
    """An optimizer driver the test feeds: ``push`` commands, then wait on ``entry.finished``.

    An entry is finished when its result arrives, or when the servo polls again without one (after
    ``unexpected-event``/``invalid``, or a cancel answered to the result). With nothing queued it
    answers SLEEP for ``idle_sleep`` seconds. ``cancel_after`` presses the server's Abort that long
    after the command is sent (``driver.server`` must be set).
    """

    def __init__(self, idle_sleep: float = 0.2) -> None:
        self.idle_sleep = idle_sleep
        self.queue: deque[Entry] = deque()
        self.sent: list[Entry] = []
        self.server: OptimizerServer | None = None
        self._current: Entry | None = None
        self._uids = 0

    def push(self, command: dict[str, Any], **options: Any) -> Entry:
        entry = Entry(command=command, **options)
        self.queue.append(entry)
        return entry

    def next_command(self) -> dict[str, Any]:
        if self._current is not None:
            self._current.finished.set()
            self._current = None
        if not self.queue:
            return {"cmd": "SLEEP", "param": {"duration": self.idle_sleep}}
        entry = self.queue.popleft()
        self.sent.append(entry)
        self._current = entry
        if entry.cancel_after is not None and self.server is not None:
            timer = threading.Timer(entry.cancel_after, self.server.cancel)
            timer.daemon = True
            entry.cancel_timer = timer
            timer.start()
        return entry.command

    def progress_reply(self, command: dict[str, Any], progress: dict[str, Any]) -> dict[str, Any] | None:
        entry = self._entry(command)
        entry.progress_posts.append(progress)
        if entry.progress:
            answer = entry.progress.pop(0)
            return None if answer == "ok" else _named(answer)
        return None

    def on_result(self, command: dict[str, Any], event: str, result: dict[str, Any]) -> dict[str, Any] | None:
        entry = self._entry(command)
        entry.result = result
        entry.finished.set()
        return None if entry.result_reply in (None, "ok") else _named(entry.result_reply)

    def on_cancelled(self, command: dict[str, Any], reason: str) -> None:
        entry = self._entry(command)
        entry.cancelled = True

    def state(self) -> dict[str, Any]:
        return {"queued": len(self.queue), "sent": len(self.sent)}

    def _entry(self, command: dict[str, Any]) -> Entry:
        assert self._current is not None, f"no command in flight for {command}"
        self._current.cmd_uid = command.get("cmd_uid")
        return self._current


def _named(answer: Any) -> dict[str, Any]:
    if isinstance(answer, dict):
        return answer
    if answer == "invalid":
        return {"status": "invalid", "reason": "unexpected cmd_uid"}
    if answer == "cancel":
        return {"status": "cancel", "reason": "test"}
    return {"status": answer}


def own_processes(connector_pid: int) -> dict[str, int]:
    """The servo's own actor-system processes, found from one of its connectors: the supervisor is
    the connector's parent, the admin the supervisor's, the logger the admin's other child."""
    stat = processes.proc_stat(connector_pid)
    assert stat is not None, f"connector {connector_pid} is gone"
    supervisor = stat.ppid
    admin_stat = processes.proc_stat(supervisor)
    assert admin_stat is not None, f"supervisor {supervisor} is gone"
    admin = admin_stat.ppid
    logger = [s.pid for s in processes.children_of(admin) if s.pid != supervisor and s.alive]
    assert len(logger) == 1, logger
    return {"supervisor": supervisor, "admin": admin, "logger": logger[0]}


class RunnerKit:
    """Helpers handed out by the ``kit`` fixture (importlib mode: test modules do not import conftest)."""

    servo_config = staticmethod(servo_config)
    own_processes = staticmethod(own_processes)
    check_trace = staticmethod(check_trace)
    wait_until = staticmethod(wait_until)
    marked_pids = staticmethod(marked_pids)
    QueueDriver = QueueDriver


@pytest.fixture
def kit() -> type[RunnerKit]:
    return RunnerKit
