"""Every process of the actor system exits once the servo's main process is gone, whatever died first.

The double fault of issue 9 item 11: the supervisor (or the admin) dies while the servo sleeps,
then the servo's main process is SIGKILLed. Before the lifeline, the admin and the logger lived on
for good and accepted connections. Tested on a real ``servo-actors run`` process against the
embedded optimizer, and in-process by cutting a runtime's lifeline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from marked_processes import MARKER_VAR, marked_pids
from waiting import wait_until

from servo_actors.actors.linux import lifeline, processes
from servo_actors.optimizer.server import OptimizerServer

pytestmark = pytest.mark.timeout(120)
GONE_BOUND = 10.0
"""Generous bound on 'every process is gone' (measured: a few ms); only a hang breaks it."""
READY_BOUND = 30.0
"""Generous bound on a servo process reaching its first SLEEP."""
LONG_SLEEP = 120.0
"""What the optimizer tells the servo to sleep: the double fault happens while it sleeps."""


class SleepDriver:
    """An optimizer that has nothing to do: every command is a long SLEEP."""

    def next_command(self) -> dict[str, Any]:
        return {"cmd": "SLEEP", "param": {"duration": LONG_SLEEP}}

    def progress_reply(self, command: dict[str, Any], progress: dict[str, Any]) -> None:
        return None

    def on_result(self, command: dict[str, Any], event: str, result: dict[str, Any]) -> None:
        return None

    def on_cancelled(self, command: dict[str, Any], reason: str) -> None:
        return None

    def state(self) -> dict[str, Any]:
        return {}


class Servo:
    """A ``servo-actors run`` process with two connectors, told to sleep by the optimizer."""

    def __init__(self, tmp_path: Path, server: OptimizerServer) -> None:
        self.marker = uuid.uuid4().hex
        config = {
            "optimizer": {"id": server.app, "base_url": server.url},
            "settings": {"timeouts": {"connect": "2s", "read": "5s"}},
            "connectors": [{"name": "a", "type": "chaos"}, {"name": "b", "type": "chaos"}],
        }
        path = tmp_path / "servo.yaml"
        path.write_text(yaml.safe_dump(config))
        self.log_path = tmp_path / "servo.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "servo_actors", "-c", str(path), "run"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, MARKER_VAR: self.marker},
            cwd=tmp_path,
        )
        self.server = server
        self.actors: dict[str, Any] = {}

    def sleeping(self) -> bool:
        history = self.server.state()["history"]
        return any((entry.get("reply") or {}).get("cmd") == "SLEEP" for entry in history)

    def actor_processes(self) -> dict[str, Any] | None:
        """admin, logger, supervisor and the two hosts of this servo's actor system (PIDs), once all run.

        The admin is the member whose parent is not a member (Thespian's daemonizing parent has
        exited); under it the logger and the supervisor, which is the parent of the hosts.
        """
        servo_sid = os.getsid(self.proc.pid)
        members = {pid: processes.proc_stat(pid) for pid in marked_pids(self.marker)}
        members = {pid: stat for pid, stat in members.items() if stat is not None and stat.sid != servo_sid}
        admin = [pid for pid, stat in members.items() if stat.ppid not in members]
        if len(admin) != 1:
            return None
        under_admin = [pid for pid, stat in members.items() if stat.ppid == admin[0]]
        hosts = {pid: stat.ppid for pid, stat in members.items() if stat.ppid in under_admin}
        supervisor = set(hosts.values())
        logger = [pid for pid in under_admin if pid not in supervisor]
        if len(supervisor) != 1 or len(hosts) != 2 or len(logger) != 1:
            return None
        return {
            "admin": admin[0],
            "logger": logger[0],
            "supervisor": supervisor.pop(),
            "hosts": sorted(hosts),
        }

    def close(self) -> list[int]:
        """Kill whatever is left (the leak check); the PIDs that were still alive."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        self._log.close()
        left = marked_pids(self.marker)
        processes.kill_pids(left)
        return left


@pytest.fixture
def servo(tmp_path: Path) -> Iterator[Callable[[], Servo]]:
    started: list[Servo] = []
    servers: list[OptimizerServer] = []

    def start() -> Servo:
        server = OptimizerServer(SleepDriver(), app="example.com/web", host="127.0.0.1", port=0).start()
        servers.append(server)
        servo = Servo(tmp_path, server)
        started.append(servo)
        wait_until(servo.sleeping, READY_BOUND, what="the servo's first SLEEP")
        servo.actors = wait_until(
            servo.actor_processes, READY_BOUND, what="admin, logger, supervisor, two hosts"
        )
        return servo

    yield start
    leaks = {servo.proc.pid: left for servo in started if (left := servo.close())}
    for server in servers:
        server.stop()
    assert leaks == {}, f"processes of the servo survived it (servo pid: leaked pids): {leaks}"


def _kill_and_wait(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not processes.is_running(pid), GONE_BOUND, what=f"pid {pid} gone")


@pytest.mark.parametrize("first", ["supervisor", "admin", None])
def test_every_process_follows_the_servo_whatever_died_first(servo, first: str | None) -> None:
    running = servo()
    if first is not None:
        _kill_and_wait(running.actors[first])
        time.sleep(0.5)  # the servo sleeps on, unaware; the survivors must not depend on its noticing
        assert running.proc.poll() is None
        assert marked_pids(running.marker), "the double fault needs survivors to test"
    started = time.monotonic()
    running.proc.kill()
    running.proc.wait(30)
    wait_until(lambda: not marked_pids(running.marker), GONE_BOUND, what="every process of the servo gone")
    print(f"all gone {1e3 * (time.monotonic() - started):.1f} ms after the servo's SIGKILL")


def _pipe_ends(pid: int, inode: int) -> list[str]:
    """For each fd of ``pid`` on the pipe ``inode``: 'w', 'r', or 'r+async' (armed in the kernel)."""
    ends = []
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return ends
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != f"pipe:[{inode}]":
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as handle:
                flags = int(next(line for line in handle if line.startswith("flags:")).split()[1], 8)
        except (OSError, StopIteration):
            continue
        if flags & os.O_ACCMODE == os.O_WRONLY:
            ends.append("w")
        else:
            ends.append("r+async" if flags & os.O_ASYNC else "r")
    return ends


def test_only_the_servo_holds_the_write_end_and_exec_programs_hold_neither(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("a"), kit.chaos("b", faults={"measure": {"action": "subprocess"}}))
    grandchild = int(runtime.run("measure").data["annotations"]["b.subprocess"])
    inode = os.fstat(runtime._link.system._lifeline.read_fd).st_ino
    assert "w" in _pipe_ends(os.getpid(), inode)
    members = runtime.members()
    hosts = [child.pid for child in runtime.status().children]
    assert grandchild in members and set(hosts) <= set(members)
    ends = {pid: _pipe_ends(pid, inode) for pid in members}
    assert ends.pop(grandchild) == []  # a program a connector executes: neither end
    # Connector hosts are armed in the kernel (no thread); admin, logger, supervisor watch with one.
    assert {pid: ends.pop(pid) for pid in hosts} == {pid: ["r+async"] for pid in hosts}
    assert len(ends) == 3 and all(found == ["r"] for found in ends.values()), ends


def test_a_process_armed_in_the_kernel_is_killed_by_it_without_a_thread(monkeypatch) -> None:
    monkeypatch.setattr(lifeline, "SWEEPER_DEPTH", 0)  # the first fork is armed like a host
    line = lifeline.Lifeline()
    try:
        with lifeline.forking(line):
            pid = os.fork()
        if pid == 0:  # the child: a watcher thread must not be what kills it
            if threading.active_count() == 1:
                time.sleep(GONE_BOUND * 3)
            os._exit(3)
        inode = os.fstat(line.read_fd).st_ino
        wait_until(lambda: _pipe_ends(pid, inode) == ["r+async"], GONE_BOUND, what="the child armed")
        line.cut()
        deadline = time.monotonic() + GONE_BOUND
        while (done := os.waitpid(pid, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
            time.sleep(0.01)
        if done == (0, 0):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        assert done[0] == pid and os.WIFSIGNALED(done[1]) and os.WTERMSIG(done[1]) == signal.SIGKILL
    finally:
        line.cut()


def test_cutting_the_lifeline_ends_a_system_whose_supervisor_died_first(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("a"), kit.chaos("b", faults={"measure": {"action": "subprocess"}}))
    grandchild = int(runtime.run("measure").data["annotations"]["b.subprocess"])
    status = runtime.status()
    _kill_and_wait(status.supervisor_pid)
    members = runtime.members()
    assert grandchild in members and len(members) >= 3  # admin, logger, the orphaned subprocess
    other = start_runtime(kit.chaos("x"))  # another system of this process must not be touched
    keep = other.members()
    runtime._link.system._lifeline.cut()
    wait_until(lambda: not runtime.members(), GONE_BOUND, what="every process of the cut system gone")
    assert all(processes.is_running(pid) for pid in keep)
    assert other.run("check").ok
