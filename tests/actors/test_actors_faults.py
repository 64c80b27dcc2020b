"""Every chaos fault in every operation, through real processes: what the result says, and that a
killed connector really is gone and replaced.

One runtime per fault: connector ``on_<op>`` carries the fault in ``<op>`` only, so each operation
hits its own connector (measure and adjust also ask the others for their description: their parts
may fail too, which is why only the target's part is checked).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from servo_actors.actors.linux import processes

pytestmark = pytest.mark.timeout(90)

GRACE = 0.5
OPERATIONS = ("describe", "check", "measure", "adjust")
HANGS = ("sleep", "socket_read", "busy", "ignore_sigterm")
COMPONENT = {"settings": {"knob": {"type": "range", "min": 0, "max": 9, "step": 1, "value": 1}}}

# fault -> (status, reason, words the message must contain, is the process replaced?)
EXPECTED = {
    "sleep": ("failed", "timeout", ["did not finish"], True),
    "socket_read": ("failed", "timeout", ["did not finish"], True),
    "busy": ("failed", "timeout", ["did not finish"], True),
    "ignore_sigterm": ("failed", "timeout", ["did not finish"], True),
    "exit": ("failed", "connector-crashed", ["crashed", "exit code 3"], True),
    "segfault": ("failed", "connector-crashed", ["crashed", "SIGSEGV"], True),
    "raise": ("failed", "connector-error", ["raised RuntimeError", "chaos"], False),
    "failure": ("aborted", "slo-violation", ["chaos"], False),
    "raise_unprintable": ("failed", "connector-error", ["raised UnprintableError", "<unprintable"], False),
}
FAULT_CONFIG = {"exit": {"exit_code": 3}, "failure": {"status": "aborted", "reason": "slo-violation"}}


def _connectors(kit, fault: str) -> list[dict]:
    spec = {"action": fault, **FAULT_CONFIG.get(fault, {})}
    return [
        kit.chaos(
            f"on_{op}",
            faults={op: spec},
            components={f"part_{op}": COMPONENT},
            metrics={f"metric_{op}": {"unit": "count"}},
        )
        for op in OPERATIONS
    ]


def _request(op: str) -> dict:
    if op == "measure":
        return {"metrics": ["metric_measure"]}
    if op == "adjust":
        return {"components": {"part_adjust": {"settings": {"knob": {"value": 5}}}}}
    return {}


@pytest.mark.parametrize("fault", list(EXPECTED))
def test_fault_in_each_operation(start_runtime, kit, fault: str) -> None:
    runtime = start_runtime(*_connectors(kit, fault), operation_grace=GRACE, max_restarts=100)
    status, reason, words, replaced = EXPECTED[fault]
    for op in OPERATIONS:
        target = f"on_{op}"
        kit.wait_for(lambda: all(s == "ready" for s in kit.states(runtime).values()), timeout=10)
        before = kit.pids(runtime)[target]
        result = runtime.run(op, **_request(op))
        part = result.parts[target]
        assert (part.status, part.reason) == (status, reason), (op, part)
        assert target in part.message and all(w in part.message for w in words), part.message
        assert result.status == status
        if replaced:
            # SIGKILL was sent before the result: the process is gone within moments.
            kit.wait_for(lambda b=before: not processes.is_running(b), timeout=2)
            kit.wait_for(lambda t=target, b=before: kit.pids(runtime)[t] not in (None, b), timeout=10)
        else:
            assert kit.pids(runtime)[target] == before
    # The servo goes on: every connector answers again (all but the one whose check is faulty).
    kit.wait_for(lambda: all(s == "ready" for s in kit.states(runtime).values()), timeout=10)
    parts = runtime.run("check").parts
    assert all(part.ok for name, part in parts.items() if name != "on_check"), parts


def test_ignore_sigterm_really_ignores_it_and_sigkill_still_works(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("stubborn", faults={"measure": "ignore_sigterm"}), operation_grace=30)
    pid = kit.pids(runtime)["stubborn"]
    op = runtime.begin("measure")
    kit.wait_for(lambda: runtime.wait(op, 0.05) is None and op.progress >= 5, timeout=10)
    # The worker has reached the fault once the kernel shows SIGTERM ignored for its process.
    kit.wait_for(lambda: _ignores(pid, signal.SIGTERM), timeout=10, what="the worker ignoring SIGTERM")
    os.kill(pid, signal.SIGTERM)
    time.sleep(0.3)  # the scenario: a SIGTERM that killed would end the process well within this
    assert processes.is_running(pid), "SIGTERM should have been ignored"
    runtime.cancel()
    assert not processes.is_running(pid)
    assert op.result.status == "cancelled"


def _ignores(pid: int, signum: int) -> bool:
    """Whether the kernel shows ``signum`` ignored (SIG_IGN) for process ``pid`` (/proc/PID/status)."""
    with open(f"/proc/{pid}/status") as status:
        mask = next(line.split()[1] for line in status if line.startswith("SigIgn:"))
    return bool(int(mask, 16) & (1 << (signum - 1)))


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        (
            {"action": "raise", "exception": "ValueError", "message": "no config"},
            "startup raised ValueError: no config",
        ),
        ({"action": "exit", "exit_code": 4}, "exit code 4"),
        ({"action": "segfault"}, "killed by SIGSEGV"),
        ({"action": "sleep"}, "startup took longer than 0.5s"),
        ({"action": "socket_read"}, "startup took longer than 0.5s"),
        ({"action": "busy"}, "startup took longer than 0.5s"),
    ],
)
def test_a_startup_that_never_succeeds_marks_the_connector_failed_and_the_others_serve(
    start_runtime, kit, tmp_path, fault, words
) -> None:
    state = tmp_path / "startups"
    runtime = start_runtime(
        kit.chaos("fine"),
        kit.chaos("doomed", faults={"startup": fault}, state_file=str(state)),
        max_restarts=1,
        startup_timeout=0.5,
        restart_backoff={"min": 0.01, "max": 0.05},
        failed_retry=3600,
    )
    kit.wait_for(lambda: kit.states(runtime)["doomed"] == "failed", timeout=20)
    reason = "start-timeout" if "took longer" in words else "crash-loop"
    assert runtime.not_up == {"doomed": reason}
    result = runtime.run("describe")
    assert result.parts["fine"].ok
    part = result.parts["doomed"]
    assert (part.status, part.reason) == ("failed", reason)
    assert "connector 'doomed' is not up" in part.message and words in part.message, part.message
    # The first start and one restart: then it was marked failed instead of looping.
    assert len(state.read_text().splitlines()) == 2


def test_a_slow_startup_is_waited_for(start_runtime, kit, tmp_path) -> None:
    started = time.monotonic()
    runtime = start_runtime(
        kit.chaos("slow", faults={"startup": {"action": "sleep", "seconds": 0.6}}), startup_timeout=5
    )
    assert time.monotonic() - started >= 0.6
    assert kit.states(runtime) == {"slow": "ready"}
    assert runtime.run("describe").ok


def _private_kib(pid: int) -> int:
    """Memory only this process holds: RSS would also count the pages a fork shares with its
    ancestors, which grow with whatever the test process holds by then."""
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as handle:
        for line in handle:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    return total


def test_memory_a_connector_holds_goes_with_its_process(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("hog", faults={"measure": {"action": "allocate", "megabytes": 64}}))
    result = runtime.run("measure")
    assert result.ok
    pid = int(result.data["annotations"]["hog.pid"])
    assert _private_kib(pid) > 64 * 1024
    runtime.cancel()
    fresh = kit.pids(runtime)["hog"]
    assert fresh != pid and _private_kib(fresh) < 64 * 1024


def test_a_connectors_subprocess_dies_with_it(start_runtime, kit, tmp_path) -> None:
    pid_file = tmp_path / "child.pid"
    runtime = start_runtime(
        kit.chaos("parent", faults={"measure": {"action": "subprocess", "pid_file": str(pid_file)}})
    )
    result = runtime.run("measure")
    assert result.ok
    child = int(pid_file.read_text())
    assert result.data["annotations"]["parent.subprocess"] == str(child)
    assert processes.is_running(child)
    assert processes.proc_stat(child).pgid == kit.pids(runtime)["parent"]
    runtime.cancel()
    kit.wait_for(lambda: not processes.is_running(child), timeout=2)
