"""Supervision rules, one test per rule (after Erlang/OTP's supervisor_SUITE), with real processes.

Children are chaos connectors ``a``, ``b``, ``c`` started in that order; ``b`` is the one that
exits (``os._exit``) when measured. Which PIDs change afterwards shows which children restarted.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from servo_actors.actors.linux import processes
from servo_actors.actors.rules import messages as m

pytestmark = pytest.mark.timeout(60)


def _trio(
    kit, *, exit_code: int = 3, b_restart: str = "permanent", a_restart: str = "permanent"
) -> list[dict]:
    b = kit.chaos("b", faults={"measure": {"action": "exit", "exit_code": exit_code}})
    b["restart"] = b_restart
    a = kit.chaos("a")
    a["restart"] = a_restart
    return [a, b, kit.chaos("c")]


def _crash_b(runtime, kit) -> tuple[dict, dict]:
    """Measure (b exits), then wait until nothing is starting; PIDs before and after."""
    before = kit.pids(runtime)
    result = runtime.run("measure")
    part = result.parts["b"]
    assert (part.status, part.reason) == ("failed", "connector-crashed"), part
    kit.wait_for(lambda: all(s in ("ready", "down") for s in kit.states(runtime).values()), timeout=10)
    return before, kit.pids(runtime)


def _changed(before: dict, after: dict) -> set[str]:
    return {name for name in before if after.get(name) != before[name]}


@pytest.mark.parametrize(
    ("strategy", "restarted"),
    [("one_for_one", {"b"}), ("one_for_all", {"a", "b", "c"}), ("rest_for_one", {"b", "c"})],
)
def test_strategy_restarts_the_crashed_child_and_the_siblings_it_names(
    start_runtime, kit, strategy, restarted
) -> None:
    runtime = start_runtime(*_trio(kit), strategy=strategy)
    before, after = _crash_b(runtime, kit)
    assert _changed(before, after) == restarted
    for name in restarted:
        assert not processes.is_running(before[name])
    assert set(kit.states(runtime).values()) == {"ready"}


def test_permanent_child_restarts_even_after_a_normal_exit(start_runtime, kit) -> None:
    runtime = start_runtime(*_trio(kit, exit_code=0))
    before, after = _crash_b(runtime, kit)
    assert _changed(before, after) == {"b"}
    assert kit.states(runtime)["b"] == "ready"


def test_transient_child_restarts_after_an_abnormal_exit(start_runtime, kit) -> None:
    runtime = start_runtime(*_trio(kit, exit_code=3, b_restart="transient"))
    before, after = _crash_b(runtime, kit)
    assert _changed(before, after) == {"b"} and kit.states(runtime)["b"] == "ready"


def test_transient_child_stays_down_after_a_normal_exit(start_runtime, kit) -> None:
    runtime = start_runtime(*_trio(kit, exit_code=0, b_restart="transient"))
    _crash_b(runtime, kit)
    assert kit.states(runtime) == {"a": "ready", "b": "down", "c": "ready"}
    # A child that is down takes no part in operations any more.
    assert set(runtime.run("describe").parts) == {"a", "c"}


def test_temporary_child_is_never_restarted(start_runtime, kit) -> None:
    runtime = start_runtime(*_trio(kit, exit_code=3, b_restart="temporary"))
    before, after = _crash_b(runtime, kit)
    assert kit.states(runtime)["b"] == "down"
    assert after["a"] == before["a"] and after["c"] == before["c"]


def test_one_for_all_kills_a_temporary_sibling_without_restarting_it(start_runtime, kit) -> None:
    runtime = start_runtime(*_trio(kit, a_restart="temporary"), strategy="one_for_all")
    before, after = _crash_b(runtime, kit)
    assert kit.states(runtime) == {"a": "down", "b": "ready", "c": "ready"}
    assert not processes.is_running(before["a"])
    assert _changed(before, after) == {"a", "b", "c"}


def test_restart_intensity_exceeded_marks_that_connector_failed_and_the_others_go_on(
    start_runtime, kit
) -> None:
    runtime = start_runtime(
        *_trio(kit), max_restarts=2, period=60, restart_backoff={"min": 0.01, "max": 0.02}, failed_retry=3600
    )
    for _ in range(2):
        _crash_b(runtime, kit)
    survivors = kit.pids(runtime)
    result = runtime.run("measure")
    assert result.status == "failed"
    kit.wait_for(lambda: kit.states(runtime)["b"] == "failed", timeout=5)
    # Not terminal: b has no process, a and c keep theirs and serve.
    kit.wait_for(lambda: not processes.is_running(survivors["b"]), timeout=5)
    assert runtime.failure is None
    assert kit.states(runtime) == {"a": "ready", "b": "failed", "c": "ready"}
    assert processes.is_running(survivors["a"]) and processes.is_running(survivors["c"])
    assert runtime.not_up == {"b": "crash-loop"}
    described = runtime.run("describe")
    assert described.parts["a"].ok and described.parts["c"].ok
    part = described.parts["b"]
    assert (part.status, part.reason) == ("failed", "crash-loop")
    assert "connector 'b' is not up" in part.message and "exit code 3" in part.message


def test_a_crash_looping_connector_backs_off_instead_of_spinning(start_runtime, kit, tmp_path: Path) -> None:
    switch = tmp_path / "crash"
    startups = tmp_path / "startups"
    crash = {"action": "exit", "exit_code": 1, "only_if_file": str(switch)}
    runtime = start_runtime(
        kit.chaos("looping", faults={"measure": crash, "startup": crash}, state_file=str(startups)),
        max_restarts=1000,
        restart_backoff={"min": 0.1, "max": 0.4, "jitter": 0.2},
    )
    switch.touch()
    runtime.run("measure")
    time.sleep(1.5)  # the scenario: the restarts of 1.5 s of a crash loop are counted
    loops = len(startups.read_text().splitlines())
    # Without backoff a crash loop restarts every ~15 ms (~100 times here); with it, a handful.
    assert 3 <= loops <= 12, loops
    switch.unlink()
    kit.wait_for(lambda: kit.states(runtime)["looping"] == "ready", timeout=5)
    assert runtime.run("check").ok


def test_cancel_brings_every_connector_back_fresh(start_runtime, kit, tmp_path: Path) -> None:
    state = tmp_path / "startups"
    runtime = start_runtime(
        kit.chaos("a", state_file=str(state)),
        kit.chaos("stuck", faults={"adjust": "sleep"}, components={"web": {"settings": {}}}),
    )
    first = runtime.run("measure").data["annotations"]
    second = runtime.run("measure").data["annotations"]
    assert int(second["a.operations"]) > int(first["a.operations"])
    op = runtime.begin("adjust", components={"web": {"settings": {}}})
    assert runtime.wait(op, 0.3) is None
    runtime.cancel()
    assert op.result.status == "cancelled" and op.result.reason == "cancelled"
    fresh = runtime.run("measure").data["annotations"]
    # New process, startup() ran again, state reset.
    assert fresh["a.pid"] != second["a.pid"] and fresh["stuck.pid"] != second["stuck.pid"]
    assert fresh["a.startups"] == "2"
    assert int(fresh["a.operations"]) == int(first["a.operations"])
    assert not processes.is_running(int(second["stuck.pid"]))


def test_two_cancels_in_a_row_and_a_cancel_during_startup_are_fine(start_runtime, kit) -> None:
    runtime = start_runtime(
        kit.chaos("a"), kit.chaos("slow", faults={"startup": {"action": "sleep", "seconds": 0.3}})
    )
    runtime.cancel()
    runtime.cancel()
    first = kit.pids(runtime)
    # A cancel sent while the previous one's connectors are still starting.
    runtime._link.system.tell(runtime._link.supervisor, m.Cancel("early"))
    runtime.cancel()
    assert set(kit.states(runtime).values()) == {"ready"}
    assert not set(kit.pids(runtime).values()) & set(first.values())
    assert runtime.run("check").ok


def test_a_cancel_while_fresh_hosts_wait_to_be_forked_forks_each_connector_once(start_runtime, kit) -> None:
    # The supervisor forks one host per turn of its loop (the rest wait in a queue), so a second
    # cancel arrives while most of the first one's hosts are not forked yet: those must never be.
    runtime = start_runtime(*(kit.chaos(f"c{i}") for i in range(12)))
    supervisor = runtime.status().supervisor_pid
    before = set(kit.pids(runtime).values())
    runtime._link.system.tell(runtime._link.supervisor, m.Cancel("first"))
    runtime._link.system.tell(runtime._link.supervisor, m.Cancel("second"))
    runtime.cancel()
    assert set(kit.states(runtime).values()) == {"ready"}
    pids = kit.pids(runtime)
    assert not set(pids.values()) & before
    # Exactly one live host per connector: none forked for a spawn the later cancel dropped.
    hosts = kit.wait_for(
        lambda: (
            (found := sorted(s.pid for s in processes.children_of(supervisor) if processes.is_running(s.pid)))
            == sorted(pids.values())
            and found
        ),
        timeout=5,
    )
    assert len(hosts) == 12
    assert runtime.run("check").ok


def test_cancel_during_a_restart_backoff_restarts_at_once(start_runtime, kit, tmp_path: Path) -> None:
    switch = tmp_path / "crash"
    crash = {"action": "exit", "exit_code": 1, "only_if_file": str(switch)}
    runtime = start_runtime(
        kit.chaos("looping", faults={"measure": crash, "startup": crash}),
        max_restarts=1000,
        restart_backoff={"min": 30, "max": 30},
    )
    switch.touch()
    runtime.run("measure")
    # Crashed at measure, restarted at once, crashed at startup: now waiting out a 30 s backoff.
    kit.wait_for(lambda: kit.states(runtime)["looping"] == "queued", timeout=5)
    switch.unlink()
    started = time.monotonic()
    runtime.cancel()  # answered without waiting for it: its starts are known to fail
    assert time.monotonic() - started < 10
    kit.wait_for(lambda: kit.states(runtime)["looping"] == "ready", timeout=10)


def test_stop_kills_a_connector_hung_in_shutdown_after_its_timeout(kit, tmp_path: Path) -> None:
    from servo_actors.actors import ServoRuntime

    config = kit.servo_config(
        kit.chaos("hangs_at_exit", faults={"shutdown": "sleep"}),
        kit.chaos("hangs_in_measure", faults={"measure": "sleep"}),
        shutdown_timeout=0.3,
    )
    runtime = ServoRuntime(config, run_dir=tmp_path / "run")
    runtime.start()
    members = runtime.members()
    runtime.begin("measure")
    started = time.monotonic()
    runtime.stop()
    assert time.monotonic() - started < 2.0
    assert [pid for pid in members if processes.is_running(pid)] == []
    runtime.stop()  # idempotent


def test_restart_replaces_the_connectors_with_a_new_config(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("old"))
    old_pid = kit.pids(runtime)["old"]
    runtime.restart(kit.servo_config(kit.chaos("new1"), kit.chaos("new2")))
    assert kit.states(runtime) == {"new1": "ready", "new2": "ready"}
    assert not processes.is_running(old_pid)
    assert set(runtime.run("describe").parts) == {"new1", "new2"}


def test_many_cancels_leave_the_supervisor_tracking_only_live_children(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("a"), kit.chaos("b"))
    for _ in range(25):
        runtime.cancel()
    # Thespian never forgets a child address by itself; the supervisor prunes them a tick later.
    status = kit.wait_for(lambda: (s := runtime.status()).tracked_addresses <= 2 and s, timeout=5)
    assert status.tracked_addresses == 2


def test_a_cancel_reports_the_operation_cancelled_before_the_connectors_are_back(start_runtime, kit) -> None:
    runtime = start_runtime(
        kit.chaos("slow", faults={"startup": {"action": "sleep", "seconds": 0.5}, "measure": "sleep"})
    )
    op = runtime.begin("measure")
    assert runtime.wait(op, 0.2) is None
    request = runtime.begin_cancel()
    # The kills went out at once: the operation is answered while the fresh connector still starts.
    result = runtime.wait(op, 0.4)
    assert result is not None and result.status == "cancelled"
    assert not runtime.wait_cancel(request, 0.01)
    assert runtime.wait_cancel(request, 10)
    assert kit.states(runtime) == {"slow": "ready"}
