"""Processes a connector starts outside its process group and session die with it, on every kill
and on every exit of the servo, with each way of tracking them this machine allows.

The connectors start, at every measure, a child in a new session and a double-forked daemon
(chaos ``spawn_detached``), or shell commands that ``setsid`` (command connector). Every such
process carries a marker unique to the test (argv or environment); the test finds them by it,
and its cleanup kills only those, by PID.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from servo_actors.actors.linux import cgroups, descendants, processes
from servo_actors.connectors.base import Control

pytestmark = pytest.mark.timeout(120)

ROUNDS = 3
GONE_WITHIN = 10.0
"""Seconds for killed processes to disappear: generous, only a leak breaks it."""
SLEEP = 300
"""How long the stand-in processes sleep: far longer than a test, so only a kill (what is tested) ends them."""
READ_ONLY_CGROUPS = """
for mount in $(awk '$3 ~ /^cgroup/ {print $2}' /proc/self/mounts); do
    mount --bind "$mount" "$mount" && mount -o remount,bind,ro "$mount" || exit 1
done
exec "$@"
"""
"""Run in a private mount namespace: every cgroup hierarchy read-only, then exec the arguments."""
SERVO_SCRIPT = """
import json, sys
from servo_actors.actors import ServoRuntime
from servo_actors.actors.linux import cgroups
from servo_actors.config.models import ServoConfig
from servo_actors.connectors.base import Control

with open(sys.argv[1]) as handle:  # not in argv: the marker would be in every forked process's
    runtime = ServoRuntime(ServoConfig.model_validate(json.load(handle)))
runtime.start()
kinds = [kind.name for kind in cgroups.available_kinds()]
print(json.dumps({"sid": runtime.session_id, "run_dir": str(runtime.run_dir), "kinds": kinds}), flush=True)
for line in sys.stdin:
    step = line.strip()
    if step == "measure":
        result = runtime.run("measure", control=Control(duration=0))
        answer = {"status": result.status, "message": result.message}
    elif step == "cancel":
        runtime.cancel()
        answer = {}
    elif step == "stop":
        runtime.stop()
        answer = {}
    print(json.dumps(answer), flush=True)
"""
"""A servo in its own process, driven step by step on stdin (so it can be SIGKILLed, or run as
another user)."""


def _tracking_modes() -> list:
    allowed = {kind.name for kind in cgroups.available_kinds()}
    modes = []
    for mode in ("cgroup-v2", "cgroup-v1"):
        skip = pytest.mark.skipif(mode not in allowed, reason=f"{mode} is not writable on this machine")
        modes.append(pytest.param(mode, marks=skip))
    return [*modes, "subreaper"]


def marked(marker: str) -> list[int]:
    """Live PIDs whose argv or environment holds ``marker``."""
    found = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        blob = b""
        for part in ("cmdline", "environ"):
            with contextlib.suppress(OSError):
                with open(f"/proc/{entry}/{part}", "rb") as handle:
                    blob += handle.read()
        if needle in blob and processes.is_running(int(entry)):
            found.append(int(entry))
    return found


@pytest.fixture
def marker() -> Iterator[str]:
    """A marker unique to this test; whatever carries it is killed afterwards (by PID)."""
    mark = f"servo-descendants-{uuid.uuid4().hex}"
    yield mark
    leftovers = marked(mark)
    processes.kill_pids(leftovers)
    assert not leftovers, f"processes of the connector outlived the test: {leftovers}"


def _detaching_chaos(kit, marker: str) -> dict:
    fault = {"action": "spawn_detached", "seconds": SLEEP, "marker": marker}
    return kit.chaos("spawner", faults={"measure": fault})


def _setsid_commands(marker: str) -> dict:
    # Each detaches in the foreground (so before the command exits and its group is killed): a
    # shell in a new session leaves one, then two sleeps behind, orphaned.
    quiet = "</dev/null >/dev/null 2>&1"
    measure = (
        f"setsid sh -c 'sleep {SLEEP} & exit 0' {quiet}; "
        f"setsid sh -c 'sleep {SLEEP} & sleep {SLEEP} & exit 0' {quiet}; "
        "echo '{}'"
    )
    return {
        "name": "commands",
        "type": "command",
        "config": {"env": {"DESCENDANTS_MARKER": marker}, "measure": measure},
    }


def _session_cgroups(sid: int) -> list[Path]:
    return [kind.session_dir(sid) for kind in cgroups.available_kinds() if kind.session_dir(sid).exists()]


@pytest.mark.parametrize("mode", _tracking_modes())
@pytest.mark.parametrize("connector", ["chaos", "command"])
def test_detached_processes_die_with_their_connector_and_with_the_servo(
    start_runtime, kit, marker, mode, connector
) -> None:
    spec = _detaching_chaos(kit, marker) if connector == "chaos" else _setsid_commands(marker)
    runtime = start_runtime(spec, descendant_tracking=mode)
    sid = runtime.session_id
    name = spec["name"]
    for _ in range(ROUNDS):
        host = kit.pids(runtime)[name]
        result = runtime.run("measure", control=Control(duration=0))
        assert result.ok, result.message
        # They live as long as their connector, whatever session they are in: owned by its host
        # through its cgroup, or (subreaper) the host's PID in their environment.
        expected = 2 if connector == "chaos" else 3
        alive = kit.wait_for(
            lambda n=expected: len(marked(marker)) >= n and marked(marker), timeout=GONE_WITHIN
        )
        assert all(processes.proc_stat(pid).sid != sid for pid in alive)
        assert all(descendants.environment_host(pid) == host for pid in alive), alive
        if mode != "subreaper":
            assert all(cgroups.cgroup_host(pid) == host for pid in alive), alive
        runtime.cancel()
        kit.wait_for(lambda: not marked(marker), timeout=GONE_WITHIN, what="no detached process left")
    assert runtime.run("measure", control=Control(duration=0)).ok
    runtime.stop()
    kit.wait_for(lambda: not marked(marker), timeout=GONE_WITHIN, what="no detached process left")
    assert _session_cgroups(sid) == []


@pytest.mark.parametrize("mode", _tracking_modes())
def test_an_orphan_that_names_no_host_lives_only_in_a_cgroup(start_runtime, kit, mode) -> None:
    # Started with an empty environment: only a cgroup still ties it to its connector.
    duration = f"{SLEEP}.{uuid.uuid4().int % 10**12:012d}"
    quiet = "</dev/null >/dev/null 2>&1"
    measure = f"env -i setsid sh -c 'sleep {duration} & exit 0' {quiet}; echo '{{}}'"
    runtime = start_runtime(
        {"name": "bare", "type": "command", "config": {"measure": measure}}, descendant_tracking=mode
    )
    try:
        assert runtime.run("measure", control=Control(duration=0)).ok
        if mode == "subreaper":
            kit.wait_for(lambda: not marked(duration), timeout=GONE_WITHIN, what="the orphan killed")
        else:
            host = kit.pids(runtime)["bare"]
            (orphan,) = kit.wait_for(lambda: marked(duration), timeout=GONE_WITHIN)
            assert descendants.environment_host(orphan) is None
            assert cgroups.cgroup_host(orphan) == host
        runtime.stop()
        kit.wait_for(lambda: not marked(duration), timeout=GONE_WITHIN, what="no orphan left")
    finally:
        processes.kill_pids(marked(duration))


def test_a_crashing_connector_takes_its_detached_processes_along(start_runtime, kit, marker) -> None:
    spawn = {"action": "spawn_detached", "seconds": SLEEP, "marker": marker}
    runtime = start_runtime(kit.chaos("crasher", faults={"measure": spawn, "check": {"action": "exit"}}))
    assert runtime.run("measure", control=Control(duration=0)).ok
    assert marked(marker)
    assert runtime.run("check").parts["crasher"].reason == "connector-crashed"
    kit.wait_for(lambda: not marked(marker), timeout=GONE_WITHIN, what="no detached process left")


class _ServoProcess:
    """SERVO_SCRIPT running as a child of the test (see its docstring)."""

    def __init__(self, config: dict, directory: Path, read_only_cgroups: bool = False) -> None:
        config_file = directory / "servo.json"
        config_file.write_text(json.dumps(config))
        command = [sys.executable, "-c", SERVO_SCRIPT, str(config_file)]
        if read_only_cgroups:
            command = [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                READ_ONLY_CGROUPS,
                "sh",
                *command,
            ]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.hello = self._answer()

    def _answer(self) -> dict:
        ready, _, _ = select.select([self.proc.stdout], [], [], GONE_WITHIN * 3)
        assert ready, "the servo process did not answer"
        line = self.proc.stdout.readline()
        assert line, f"the servo process exited ({self.proc.wait(GONE_WITHIN)})"
        return json.loads(line)

    def step(self, what: str) -> dict:
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait(GONE_WITHIN)
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()
        sid = self.hello.get("sid")
        if sid and processes.session_members(sid):
            processes.kill_session(sid)
        if self.hello.get("run_dir"):  # left behind by a SIGKILLed servo
            shutil.rmtree(self.hello["run_dir"], ignore_errors=True)


@pytest.fixture
def servo_process(tmp_path: Path) -> Iterator:
    started: list[_ServoProcess] = []

    def start(config: dict, read_only_cgroups: bool = False) -> _ServoProcess:
        started.append(_ServoProcess(config, tmp_path, read_only_cgroups))
        return started[-1]

    yield start
    for servo in started:
        servo.close()


def _config(connector: dict, **supervisor) -> dict:
    return {"connectors": [connector], "supervisor": supervisor}


@pytest.mark.parametrize("mode", _tracking_modes())
def test_nothing_survives_a_sigkill_of_the_servo(kit, marker, servo_process, mode) -> None:
    servo = servo_process(_config(_detaching_chaos(kit, marker), descendant_tracking=mode))
    sid = servo.hello["sid"]
    assert servo.step("measure")["status"] == "ok"
    assert marked(marker)
    os.kill(servo.proc.pid, signal.SIGKILL)
    servo.proc.wait(GONE_WITHIN)
    # The supervisor notices its owner is gone (at its next tick) and kills everything.
    kit.wait_for(lambda: not marked(marker), timeout=GONE_WITHIN, what="no detached process left")
    kit.wait_for(lambda: not processes.session_members(sid), timeout=GONE_WITHIN, what="no actor left")
    kit.wait_for(lambda: not _session_cgroups(sid), timeout=GONE_WITHIN, what="no cgroup left")


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_without_writable_cgroups_the_subreaper_still_gets_everything(kit, marker, servo_process) -> None:
    # As in a container with cgroupfs mounted read-only: "auto" falls back to the subreaper.
    servo = servo_process(_config(_detaching_chaos(kit, marker)), read_only_cgroups=True)
    assert servo.hello["kinds"] == []
    for _ in range(ROUNDS):
        assert servo.step("measure")["status"] == "ok"
        assert marked(marker)
        servo.step("cancel")
        kit.wait_for(lambda: not marked(marker), timeout=GONE_WITHIN, what="no detached process left")
    assert servo.step("measure")["status"] == "ok"
    assert marked(marker)
    servo.step("stop")
    kit.wait_for(lambda: not marked(marker), timeout=GONE_WITHIN, what="no detached process left")


def test_each_host_is_in_a_cgroup_of_its_own_removed_at_stop(start_runtime, kit) -> None:
    if not cgroups.available_kinds():
        pytest.skip("no writable cgroup hierarchy on this machine")
    runtime = start_runtime(kit.chaos("one"), kit.chaos("two"))
    sid = runtime.session_id
    for pid in kit.pids(runtime).values():
        assert cgroups.cgroup_host(pid) == pid
    assert _session_cgroups(sid)
    runtime.stop()
    assert _session_cgroups(sid) == []


HYBRID_MOUNTS = """tmpfs /sys/fs/cgroup tmpfs rw 0 0
cgroup /sys/fs/cgroup/freezer cgroup rw,relatime,freezer 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
PURE_V2_MOUNTS = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n"
V1_ONLY_MOUNTS = "cgroup /sys/fs/cgroup/cpu,freezer cgroup rw,cpu,freezer 0 0\n"


@pytest.mark.parametrize(
    ("mounts", "own", "expected"),
    [
        (
            HYBRID_MOUNTS,
            "6:freezer:/a\n0::/b\n",
            (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup/freezer"), "/b", "/a"),
        ),
        (
            PURE_V2_MOUNTS,
            "0::/user.slice/servo.service\n",
            (Path("/sys/fs/cgroup"), None, "/user.slice/servo.service", None),
        ),
        (V1_ONLY_MOUNTS, "3:cpu,freezer:/c\n", (None, Path("/sys/fs/cgroup/cpu,freezer"), None, "/c")),
        ("", "", (None, None, None, None)),
    ],
)
def test_where_cgroups_are_found(mounts, own, expected) -> None:
    assert (*cgroups.parse_mounts(mounts), *cgroups.parse_own_paths(own)) == expected


def test_an_unknown_tracking_mode_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown descendant tracking 'cgroups' \\(expected one of auto, "):
        cgroups.choose_kind("cgroups")
    assert cgroups.choose_kind("subreaper") is None


@pytest.mark.parametrize("mode", [m for m in _tracking_modes() if m != "subreaper"])
def test_cgroups_of_a_session_with_no_process_left_are_released(kit, marker, mode) -> None:
    kind = cgroups.choose_kind(mode)
    dead_sid = _unused_pid()
    stale, alive = kind.host_dir(dead_sid, 1), kind.host_dir(os.getsid(0), 1)
    orphan = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({SLEEP})", marker])
    try:
        for directory in (stale, alive):
            directory.mkdir(parents=True)
        (stale / "cgroup.procs").write_text(f"{orphan.pid}\n")
        descendants.release_stale_sessions()
        assert orphan.wait(GONE_WITHIN) == -signal.SIGKILL
        # Killed at once; removed once empty (here at once, or at the next supervisor's start).
        descendants.release_stale_sessions()
        assert not stale.parent.exists()
        assert alive.exists(), "a session with live processes is not stale"
    finally:
        with contextlib.suppress(ProcessLookupError):
            orphan.kill()
        orphan.wait(GONE_WITHIN)
        for directory in (stale, alive):
            with contextlib.suppress(OSError):
                directory.rmdir()
                directory.parent.rmdir()


def _unused_pid() -> int:
    """A PID no process has now (so no session has it as its id)."""
    used = {stat.sid for stat in processes.all_processes()} | {stat.pid for stat in processes.all_processes()}
    with open("/proc/sys/kernel/pid_max") as handle:
        top = int(handle.read())
    return next(pid for pid in range(top - 1, 1, -1) if pid not in used)
