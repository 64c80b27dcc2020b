"""Nothing listens off loopback, nothing survives: every exit path of a servo, with real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from servo_actors.actors import ServoRuntime
from servo_actors.actors.linux import processes
from servo_actors.connectors.base import Control
from servo_actors.errors import SupervisorError

pytestmark = pytest.mark.timeout(60)
ORPHAN_DEADLINE = 5.0
"""Generous bound for 'all gone' after the servo dies (the target is 2 s; the machine is shared)."""

SERVO = textwrap.dedent(
    """
    import json, signal, sys, time
    # A shell's background job inherits SIGINT ignored; the test is of a servo that takes it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from servo_actors.actors import ServoRuntime
    from servo_actors.config.models import ServoConfig

    hang = {"action": "sleep"}
    config = ServoConfig.model_validate({"connectors": [
        {"name": "calm", "type": "chaos"},
        {"name": "hung", "type": "chaos", "config": {"faults": {"measure": hang, "shutdown": hang}}},
        {"name": "parent", "type": "chaos", "config": {"faults": {"measure": {"action": "subprocess"}}}},
    ]})
    runtime = ServoRuntime(config, run_dir=sys.argv[1])
    runtime.start()
    """
)
PRINT_AND_WAIT = textwrap.dedent(
    """
    before = len(runtime.members())
    op = runtime.begin("measure")  # ``hung`` hangs, ``parent`` starts a subprocess
    deadline = time.monotonic() + 10.0  # generous: only a hang breaks it
    while len(runtime.members()) <= before and time.monotonic() < deadline:
        runtime.wait(op, 0.02)  # until the subprocess is one of the members
    print(json.dumps({"sid": runtime.session_id, "members": runtime.members()}), flush=True)
    time.sleep(600)  # the servo stays up until the test signals it
    """
)


def _start_servo(tmp_path: Path, tail: str) -> tuple[subprocess.Popen[str], dict]:
    child = subprocess.Popen(
        [sys.executable, "-c", SERVO + tail, str(tmp_path / "run")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = child.stdout.readline()
    assert line, child.stderr.read()
    return child, json.loads(line)


def _assert_all_gone(info: dict) -> None:
    deadline = time.monotonic() + ORPHAN_DEADLINE
    while processes.session_members(info["sid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = processes.session_members(info["sid"])
    if left:
        processes.kill_session(info["sid"])
    assert left == [], f"processes of the dead servo's actor system survived: {left}"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_when_the_servo_process_dies_every_actor_process_follows(tmp_path: Path, sig: int) -> None:
    servo, info = _start_servo(tmp_path, PRINT_AND_WAIT)
    try:
        # admin, logger, supervisor, three hosts, and the subprocess of ``parent``.
        assert len(info["members"]) >= 6, info
        assert servo.pid not in info["members"]
        started = time.monotonic()
        servo.send_signal(sig)
        servo.wait(timeout=10)
        _assert_all_gone(info)
        assert time.monotonic() - started < ORPHAN_DEADLINE
    finally:
        if servo.poll() is None:
            servo.kill()
            servo.wait()
        servo.stdout.close()
        servo.stderr.close()


def test_an_exception_in_the_servo_leaves_nothing_behind(kit, tmp_path: Path) -> None:
    config = kit.servo_config(
        kit.chaos("hung", faults={"measure": "sleep", "shutdown": "sleep"}), shutdown_timeout=0.2
    )
    members: list[int] = []
    with pytest.raises(RuntimeError, match="boom"), ServoRuntime(config, run_dir=tmp_path / "run") as runtime:
        runtime.begin("measure")
        members.extend(runtime.members())
        raise RuntimeError("boom")
    assert members and [pid for pid in members if processes.is_running(pid)] == []


def test_a_servo_that_exits_without_stopping_is_cleaned_up_at_exit(tmp_path: Path) -> None:
    code = SERVO + textwrap.dedent(
        """
        print(json.dumps({"sid": runtime.session_id, "members": runtime.members()}), flush=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "run")], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    _assert_all_gone(json.loads(done.stdout.splitlines()[-1]))


def test_nothing_of_the_actor_system_listens_off_loopback(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("a"), kit.chaos("b", faults={"measure": {"action": "subprocess"}}))
    runtime.run("measure")
    sockets = {pid: processes.listening_sockets(pid) for pid in runtime.members()}
    # The admin, every actor, and this process's own endpoint for the system.
    listening = {pid: found for pid, found in sockets.items() if found}
    assert len(listening) >= 4, sockets
    assert runtime._link.system.admin_port in {port for found in listening.values() for _, port in found}
    off_loopback = {
        pid: found for pid, found in listening.items() if any(addr != "127.0.0.1" for addr, _ in found)
    }
    assert off_loopback == {}
    # This process's own endpoint for talking to the system too.
    assert {addr for addr, _ in processes.listening_sockets(os.getpid())} <= {"127.0.0.1"}


def test_two_runtimes_at_once_do_not_interfere(start_runtime, kit) -> None:
    first = start_runtime(kit.chaos("x", faults={"measure": {"action": "sleep", "seconds": 0.3}}))
    second = start_runtime(kit.chaos("x"))
    assert first._link.system.admin_port != second._link.system.admin_port
    assert first.session_id != second.session_id
    assert not set(first.members()) & set(second.members())
    keep = kit.pids(second)
    op = first.begin("measure", control=Control())
    assert second.run("measure").ok
    first.cancel()
    assert op.result.status == "cancelled"
    assert kit.pids(second) == keep
    assert first.run("check").ok and second.run("check").ok


def test_stop_is_idempotent_and_needs_no_start(kit) -> None:
    runtime = ServoRuntime(kit.servo_config(kit.chaos("a")))
    runtime.stop()
    runtime.start()
    run_dir = runtime.run_dir
    assert run_dir is not None and run_dir.exists()
    runtime.stop()
    runtime.stop()
    assert not run_dir.exists()  # a run directory the runtime made itself is removed


def test_when_the_supervisor_dies_its_connectors_follow_and_the_runtime_says_so(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("a"), kit.chaos("b", faults={"measure": {"action": "subprocess"}}))
    grandchild = int(runtime.run("measure").data["annotations"]["b.subprocess"])
    status = runtime.status()
    hosts = [child.pid for child in status.children]
    os.kill(status.supervisor_pid, signal.SIGKILL)
    # The kernel kills each host when its parent dies (PR_SET_PDEATHSIG)...
    kit.wait_for(lambda: not any(processes.is_running(pid) for pid in hosts), timeout=5)
    # ... but not what a host started: that goes with the session when the runtime stops.
    with pytest.raises(SupervisorError, match="supervisor"):
        kit.wait_for(lambda: runtime.run("describe") and False, timeout=15)
    assert isinstance(runtime.failure, SupervisorError)
    runtime.stop()
    assert not processes.is_running(grandchild)
