"""The supervision rules on a fake clock, one test per rule (after Erlang/OTP's supervisor_SUITE).

Children ``a``, ``b``, ``c`` start all at once; ``b`` is the one that exits. The world
(``tests/support/supervision_world.py``) plays the processes and the runtime, so a 30-second
backoff or a startup that never answers takes microseconds. The same rules run under the Thespian
shell with real processes in test_actors_supervision.py.
"""

from __future__ import annotations

import pytest
from supervision_world import KILLED, RUNTIME, SupervisionWorld, child_spec

from servo_actors.actors.rules import messages as m
from servo_actors.actors.rules.results import ConnectorOutcome
from servo_actors.actors.rules.supervision import KILL_CHECK_FIRST, KILL_CHECK_MAX, PROGRESS_INTERVAL
from servo_actors.actors.rules.supervision_events import (
    ChildExited,
    ChildReplied,
    FinalSweep,
    Kill,
    OperationRequested,
    Reply,
    SendToChild,
    Spawn,
)
from servo_actors.connectors.base import Control

EXITS = {"normal": 0, "abnormal": 3, "killed": KILLED}
RESTARTS = {
    # (restart type, exit) -> is the child started again?
    ("permanent", "normal"): True,
    ("permanent", "abnormal"): True,
    ("permanent", "killed"): True,
    ("transient", "normal"): False,
    ("transient", "abnormal"): True,
    ("transient", "killed"): True,
    ("temporary", "normal"): False,
    ("temporary", "abnormal"): False,
    ("temporary", "killed"): False,
}
QUICK_BACKOFF = {"backoff_min": 0.01, "backoff_max": 0.02}


def started(*specs: m.ChildSpec, **settings) -> SupervisionWorld:
    """A world whose children have all started and answered."""
    world = SupervisionWorld()
    request = world.start(*specs, **settings)
    world.ready_all()
    assert isinstance(world.answer(request), m.Ready)
    return world


def trio(b_restart: str = "permanent", **settings) -> SupervisionWorld:
    return started(child_spec("a"), child_spec("b", b_restart), child_spec("c"), **settings)


def changed(before: dict[str, int], after: dict[str, int]) -> set[str]:
    return {name for name in before if after[name] != before[name]}


def assert_one_process_each(world: SupervisionWorld) -> None:
    for status in world.rules.statuses():
        alive = world.alive(status.name)
        assert len(alive) <= 1, alive
        if alive:
            assert alive[0].generation == status.generation


# ----- starting --------------------------------------------------------------------------------


def test_children_start_all_at_once_and_the_start_is_answered_once_all_answer() -> None:
    world = SupervisionWorld()
    request = world.start(child_spec("a"), child_spec("b"), child_spec("c"))
    assert [s.name for s in world.spawns] == ["a", "b", "c"]
    world.ready("c")
    world.ready("a")
    assert request not in world.answers
    world.ready("b")
    ready = world.answer(request)
    assert [c.state for c in ready.children] == ["ready"] * 3
    assert all(c.down_reason is None and c.history == () for c in ready.children)


def test_a_start_with_no_children_is_ready_at_once() -> None:
    world = SupervisionWorld()
    assert world.answer(world.start()).children == ()


# ----- the matrix: strategy x restart type x exit ----------------------------------------------


@pytest.mark.parametrize("exit_kind", list(EXITS))
@pytest.mark.parametrize("restart", ["permanent", "transient", "temporary"])
@pytest.mark.parametrize("strategy", ["one_for_one", "one_for_all"])
def test_an_exit_restarts_per_strategy_restart_type_and_exit(
    strategy: str, restart: str, exit_kind: str
) -> None:
    world = trio(restart, strategy=strategy)
    before = world.generations()
    old = {name: world.current(name) for name in before}
    world.exits("b", EXITS[exit_kind])
    world.advance(0.0)  # the first crash after a quiet spell restarts without delay
    world.ready_all()
    after, states = world.generations(), world.states()
    if not RESTARTS[(restart, exit_kind)]:
        # OTP: a child that is not restarted takes no sibling with it, whatever the strategy.
        assert states == {"a": "ready", "b": "down", "c": "ready"}
        assert changed(before, after) == set() and world.kills == []
    elif strategy == "one_for_one":
        assert states == {"a": "ready", "b": "ready", "c": "ready"}
        assert changed(before, after) == {"b"} and world.kills == []
    else:
        assert states == {"a": "ready", "b": "ready", "c": "ready"}
        assert changed(before, after) == {"a", "b", "c"}
        assert {(k.name, k.generation) for k in world.kills} == {
            ("a", old["a"].generation),
            ("c", old["c"].generation),
        }
    assert not any(p.alive for p in old.values() if after[p.name] != p.generation)
    assert_one_process_each(world)
    assert world.escalations == []


def test_rest_for_one_restarts_the_crashed_child_and_those_started_after_it() -> None:
    world = trio(strategy="rest_for_one")
    before = world.generations()
    world.exits("b", 3)
    world.ready_all()
    assert changed(before, world.generations()) == {"b", "c"}


def test_one_for_all_kills_a_temporary_sibling_without_restarting_it() -> None:
    world = started(child_spec("a", "temporary"), child_spec("b"), child_spec("c"), strategy="one_for_all")
    world.exits("b", 3)
    world.ready_all()
    assert world.states() == {"a": "down", "b": "ready", "c": "ready"}
    assert world.alive("a") == []


def test_restarted_siblings_start_again_all_at_once() -> None:
    world = trio(strategy="one_for_all")
    spawned = len(world.spawns)
    world.exits("b", 3)
    assert sorted(s.name for s in world.spawns[spawned:]) == ["a", "b", "c"]
    history = {c.name: c.history for c in world.rules.statuses()}
    assert [reason for _, reason in history["b"]] == ["crash"]
    assert [reason for _, reason in history["a"]] == ["crash"]  # taken along by b's crash


def test_a_crash_during_an_operation_fails_its_part_and_the_siblings_it_takes() -> None:
    world = trio(strategy="one_for_all")
    request = world.begin("measure")
    world.reply("a", request)
    world.exits("b", 3)
    result = world.answer(request).result
    assert result.parts["a"].ok
    assert (result.parts["b"].status, result.parts["b"].reason) == ("failed", "connector-crashed")
    assert "exit code 3" in result.parts["b"].message
    assert result.parts["c"].reason == "connector-restarted"


# ----- restart intensity and backoff ------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["one_for_one", "one_for_all", "rest_for_one"])
def test_restart_intensity_exceeded_marks_that_connector_failed_and_the_others_go_on(strategy: str) -> None:
    world = trio(strategy=strategy, max_restarts=2, period=60, failed_retry=300, **QUICK_BACKOFF)
    for _ in range(2):
        world.exits("b", 3)
        world.advance(1.0)
        world.ready_all()
    assert world.escalations == [] and set(world.states().values()) == {"ready"}
    request = world.begin("measure")
    world.reply("a", request)
    world.exits("b", 3)
    [escalation] = world.escalations
    assert escalation.connector == "b"
    assert "connector 'b' failed (exit code 3): more than 2 restarts within 60s" in escalation.message
    assert "tried again every 300s (supervisor.failed_retry)" in escalation.message
    # Not terminal: b is failed, without a process; a and c go on serving.
    world.ready_all()
    assert world.states()["b"] == "failed" and world.alive("b") == []
    assert world.states()["a"] == world.states()["c"] == "ready"
    world.reply("c", request)  # giving up on b takes no sibling with it, whatever the strategy
    result = world.answer(request).result
    assert (result.parts["b"].status, result.parts["b"].reason) == ("failed", "connector-crashed")
    # The next operation: b's part fails at once naming why, the others answer.
    describe = world.begin("describe")
    world.reply("a", describe)
    world.reply("c", describe)
    part = world.answer(describe).result.parts["b"]
    assert (part.status, part.reason) == ("failed", "crash-loop")
    assert "connector 'b' is not up" in part.message and "supervisor.failed_retry" in part.message
    assert world.answer(describe).result.parts["a"].ok
    # A cancel does not restart a failed connector early...
    cancel = world.cancel()
    world.ready_all()
    assert isinstance(world.answer(cancel), m.Cancelled) and world.states()["b"] == "failed"
    # ...its retry comes after failed_retry, and an answer brings it back.
    world.advance(299.0)
    assert world.states()["b"] == "failed"
    world.advance(2.0)
    assert world.states()["b"] == "starting"
    world.ready("b")
    assert set(world.states().values()) == {"ready"}
    assert world.rules.statuses()[1].history[-1][1] == "retry"


def test_a_failed_connector_whose_retry_fails_is_failed_again_at_once() -> None:
    world = SupervisionWorld()
    start = world.start(
        child_spec("a"),
        child_spec("b"),
        startup_timeout=5.0,
        max_restarts=2,
        failed_retry=60,
        **QUICK_BACKOFF,
    )
    world.ready("a")
    for _ in range(3):
        world.startup_fails("b", "RuntimeError: no database")
        world.advance(0.1)
    assert world.states()["b"] == "failed" and len(world.escalations) == 1
    assert (
        "3 failed starts in a row" in world.escalations[0].message
        or "restarts within" in world.escalations[0].message
    )
    assert isinstance(world.answer(start), m.Ready)
    world.advance(60.0)
    assert world.states()["b"] == "starting"
    world.startup_fails("b", "RuntimeError: no database")
    world.advance(0.1)
    assert world.states()["b"] == "failed" and len(world.escalations) == 2


def test_failed_starts_in_a_row_trip_whatever_their_pace() -> None:
    """A start-up timeout longer than period / max_restarts cannot outrun the count (OTP: intensity
    is counted in restarts): the sixth failed start of six marks it failed."""
    world = SupervisionWorld()
    world.start(child_spec("a"), child_spec("b"), startup_timeout=8.0, max_restarts=5, period=30)
    world.ready("a")
    for _ in range(5):
        world.advance(world.next_wakeup() - world.now)
        while world.states()["b"] != "starting":
            world.advance(world.next_wakeup() - world.now)
        assert world.escalations == []
    while not world.escalations:
        world.advance(world.next_wakeup() - world.now)
    assert world.states()["b"] in ("killing", "failed")
    assert "6 failed starts in a row" in world.escalations[0].message
    assert world.states()["a"] == "ready"
    # Each of them counted once, with its reason and a generation of its own.
    history = world.rules.statuses()[1].history
    assert [reason for _, reason in history] == ["start-timeout"] * 5
    assert len({generation for generation, _ in history}) == 5


def test_restarts_beyond_the_period_do_not_add_up() -> None:
    world = trio(max_restarts=1, period=10, **QUICK_BACKOFF)
    for _ in range(5):
        world.exits("b", 3)
        world.advance(11.0)
        world.ready_all()
    assert world.escalations == []


def test_a_crash_loop_backs_off_exponentially_and_forgets_after_a_quiet_period() -> None:
    world = started(
        child_spec("a"), backoff_min=1.0, backoff_max=4.0, backoff_jitter=0.0, period=30, max_restarts=99
    )
    delays = []
    for _ in range(5):
        spawned = len(world.spawns)
        crashed_at = world.now
        world.exits("a", 3)
        while len(world.spawns) == spawned:
            world.advance(world.next_wakeup() - world.now)
        delays.append(round(world.now - crashed_at, 6))
        world.ready("a")
    assert delays == [0.0, 1.0, 2.0, 4.0, 4.0]
    world.advance(31.0)
    world.exits("a", 3)
    assert world.states()["a"] == "starting"  # quiet for a period: at once again


def test_an_exit_during_backoff_spawns_nothing_early() -> None:
    world = started(child_spec("a"), backoff_min=5.0, backoff_max=5.0, backoff_jitter=0.0, max_restarts=99)
    world.exits("a", 3)
    world.ready("a")
    world.exits("a", 3)
    spawned = len(world.spawns)
    world.advance(4.9)
    assert len(world.spawns) == spawned and world.states()["a"] == "queued"
    world.advance(0.2)
    assert world.states()["a"] == "starting"


# ----- startup ------------------------------------------------------------------------------------


def test_a_fresh_child_that_never_answers_is_killed_and_started_again() -> None:
    world = SupervisionWorld()
    request = world.start(child_spec("a"), startup_timeout=5.0, max_restarts=3, period=100, **QUICK_BACKOFF)
    first = world.current("a")
    world.advance(5.0)
    assert [k.generation for k in world.kills] == [first.generation]
    assert not first.alive and world.states()["a"] == "starting"
    assert world.current("a").generation > first.generation
    assert world.rules.statuses()[0].restarts == 1
    # The start is answered at its failed start: nobody waits for a connector known not to be up.
    [child] = world.answer(request).children
    assert child.down_reason == "start-timeout"
    assert world.rules.statuses()[0].history == ((world.current("a").generation, "start-timeout"),)
    # It answers this time: up again, the failure counted once.
    world.ready("a")
    [status] = world.rules.statuses()
    assert status.state == "ready" and status.down_reason is None and status.restarts == 1
    assert world.escalations == []


def test_a_child_that_never_answers_is_marked_failed_only_when_intensity_is_exceeded() -> None:
    world = SupervisionWorld()
    request = world.start(child_spec("a"), startup_timeout=5.0, max_restarts=3, period=100, **QUICK_BACKOFF)
    for _ in range(3):
        world.advance(5.1)
        assert world.escalations == []
    world.advance(5.1)
    [escalation] = world.escalations
    assert "startup took longer than 5s" in escalation.message
    assert world.alive() == []
    assert world.answer(request).children[0].down_reason == "start-timeout"
    assert world.states() == {"a": "failed"}


def test_a_startup_that_raises_is_a_crash() -> None:
    world = SupervisionWorld()
    world.start(child_spec("a"), **QUICK_BACKOFF)
    first = world.current("a")
    world.startup_fails("a", "ValueError: no config")
    assert [k.generation for k in world.kills] == [first.generation]
    world.advance(0.0)
    assert world.current("a").generation > first.generation


# ----- cancel ---------------------------------------------------------------------------------


def test_cancel_kills_everything_and_starts_all_fresh_without_counting() -> None:
    world = trio(max_restarts=0)
    before = world.generations()
    request = world.begin("measure")
    cancel = world.cancel(request)
    result = world.answer(request).result
    assert (result.status, result.reason) == ("cancelled", "cancelled")
    assert cancel not in world.answers  # answered once the fresh connectors are back
    assert world.states() == {"a": "starting", "b": "starting", "c": "starting"}  # all at once, no order
    world.ready_all()
    assert isinstance(world.answer(cancel), m.Cancelled)
    assert changed(before, world.generations()) == {"a", "b", "c"}
    assert world.escalations == [] and all(c.restarts == 0 for c in world.rules.statuses())


def test_cancel_during_start() -> None:
    world = SupervisionWorld()
    start = world.start(child_spec("a"), child_spec("b"), child_spec("c"))
    world.ready("a")  # b is starting, c queued behind it
    cancel = world.cancel()
    assert world.states() == {"a": "starting", "b": "starting", "c": "starting"}
    world.ready_all()
    assert isinstance(world.answer(start), m.Ready) and isinstance(world.answer(cancel), m.Cancelled)
    assert_one_process_each(world)


def test_cancel_during_restart() -> None:
    world = trio(strategy="one_for_all", backoff_min=1.0, backoff_max=1.0, backoff_jitter=0.0)
    world.lose_exit_notices = True  # a and c stay killing until their kills are checked again
    world.exits("b", 3, notice=True)
    assert world.states() == {"a": "killing", "b": "starting", "c": "killing"}
    cancel = world.cancel()
    world.lose_exit_notices = False
    world.advance(KILL_CHECK_MAX)
    world.ready_all()
    assert isinstance(world.answer(cancel), m.Cancelled)
    assert set(world.states().values()) == {"ready"}
    assert [c.restarts for c in world.rules.statuses()] == [0, 1, 0]
    assert_one_process_each(world)


def test_cancel_during_backoff_starts_at_once() -> None:
    world = started(child_spec("a"), backoff_min=30.0, backoff_max=30.0, max_restarts=99)
    world.exits("a", 3)
    world.ready("a")
    world.exits("a", 3)
    assert world.states()["a"] == "queued"
    cancel = world.cancel()
    assert world.states()["a"] == "starting"
    world.ready("a")
    assert isinstance(world.answer(cancel), m.Cancelled)


def test_cancel_during_cancel() -> None:
    world = trio()
    first = world.cancel()
    fresh = world.generations()
    second = world.cancel()  # the first one's connectors are still starting
    assert changed(fresh, world.generations()) == {"a", "b", "c"}
    world.ready_all()
    assert isinstance(world.answer(first), m.Cancelled) and isinstance(world.answer(second), m.Cancelled)
    assert_one_process_each(world)


def test_a_begin_arriving_after_its_cancel_is_answered_cancelled() -> None:
    world = trio()
    cancel = world.cancel("measure-late")
    world.ready_all()
    world.answer(cancel)
    world.feed(OperationRequested(m.Begin("measure-late", "measure"), RUNTIME))
    assert world.answer("measure-late").result.status == "cancelled"


# ----- exit notices ------------------------------------------------------------------------------


def test_a_lost_exit_notice_of_a_kill_is_found_by_repeating_the_kill() -> None:
    world = trio()
    world.lose_exit_notices = True
    old = world.current("a")
    cancel = world.cancel()
    assert world.states()["a"] == "killing" and not old.alive
    world.advance(KILL_CHECK_FIRST)
    kills = [k for k in world.kills if k.generation == old.generation]
    assert len(kills) == 2  # the kill, then the check that found it gone
    world.ready_all()
    assert isinstance(world.answer(cancel), m.Cancelled)


def test_a_cancel_storm_does_not_pile_up_wakeups() -> None:
    # Thespian cannot cancel a wakeup: the rules ask for one only when none is due by then.
    world = trio()
    most = 0
    for _ in range(100):
        request = world.begin("measure", Control(duration=30.0))
        world.advance(0.01)
        world.cancel(request)
        world.advance(KILL_CHECK_FIRST)
        world.ready_all()
        most = max(most, world.pending_wakeups)
    assert most <= 3, most


def test_a_kill_is_checked_again_at_growing_intervals_until_the_process_is_gone() -> None:
    world = trio()
    world.lose_exit_notices = True
    old = world.current("a")
    world.cancel()
    old.alive, old.reported = True, True  # a process that survives SIGKILL (e.g. in the kernel)
    checks = []
    for _ in range(8):
        world.advance(world.next_wakeup() - world.now)
        checks.append(world.now)
    gaps = [round(later - earlier, 6) for earlier, later in zip(checks, checks[1:], strict=False)]
    assert gaps[0] == pytest.approx(2 * KILL_CHECK_FIRST) and max(gaps) <= KILL_CHECK_MAX
    assert world.states()["a"] == "killing"
    assert len([k for k in world.kills if k.generation == old.generation]) >= 8


def test_a_lost_exit_notice_of_a_crash_is_found_by_the_process_check() -> None:
    world = trio()
    world.lose_exit_notices = True
    world.exits("b", 3)
    assert world.states()["b"] == "ready"
    world.lose_exit_notices = False
    world.poll()
    assert world.states()["b"] == "starting"


def test_a_late_reply_from_an_older_generation_is_ignored() -> None:
    world = started(child_spec("a"), operation_grace=1.0)
    request = world.begin("measure", Control(duration=2.0))
    old = world.current("a")
    world.advance(3.0)  # past the deadline: killed, part "timeout"
    result = world.answer(request).result
    assert (result.parts["a"].status, result.parts["a"].reason) == ("failed", "timeout")
    world.ready("a")
    world.reply("a", request, generation=old.generation)
    assert len(world.answers[request]) == 1
    second = world.begin("describe")
    world.reply("a", second, generation=old.generation)
    assert second not in world.answers
    world.reply("a", second)
    assert world.answer(second).result.ok


def test_an_exit_notice_for_an_older_generation_changes_nothing() -> None:
    world = trio()
    old = world.current("b")
    world.cancel()
    world.ready_all()
    world.feed(ChildExited("b", old.generation, 3))
    assert set(world.states().values()) == {"ready"} and world.escalations == []


# ----- operations --------------------------------------------------------------------------------


def test_an_operation_goes_to_every_ready_child_and_is_answered_once() -> None:
    world = trio()
    request = world.begin("describe")
    calls = [e for kind, _, e in world.log if kind == "effect" and isinstance(e, SendToChild)]
    assert sorted(c.name for c in calls) == ["a", "b", "c"]
    for name in "abc":
        world.reply(name, request)
    assert world.answer(request).result.ok


def test_a_child_restarting_when_an_operation_begins_joins_it_once_ready() -> None:
    world = started(child_spec("a"), child_spec("b"), **QUICK_BACKOFF)
    world.exits("b", 3)  # restarting: starting again
    request = world.begin("describe")
    world.reply("a", request)
    assert request not in world.answers
    world.ready("b")
    assert world.current("b").calls()[0].request_id == request
    world.reply("b", request)
    assert world.answer(request).result.ok


def test_past_the_deadline_the_connectors_still_at_it_are_killed() -> None:
    world = trio(operation_grace=5.0)
    request = world.begin("measure", Control(warmup=1.0, duration=10.0))
    world.reply("a", request)
    world.advance(15.9)
    assert request not in world.answers
    world.advance(0.2)
    result = world.answer(request).result
    assert result.parts["a"].ok
    assert [result.parts[n].reason for n in "bc"] == ["timeout", "timeout"]
    assert "did not finish measure in time" in result.parts["b"].message
    world.ready_all()
    # Deadline kills are not crashes: not counted, no backoff.
    assert [c.restarts for c in world.rules.statuses()] == [0, 0, 0]


def test_a_connector_declared_time_widens_the_deadline() -> None:
    world = trio(operation_grace=5.0)
    request = world.begin("adjust", Control(settlement=10.0), declared={"b": 60.0})
    world.advance(64.9)
    assert request not in world.answers and world.kills == []
    world.advance(0.2)
    assert world.answer(request).result.parts["a"].reason == "timeout"


def test_operations_refused_while_busy_and_while_stopping() -> None:
    world = started(child_spec("a"), child_spec("b"))
    running = world.begin("measure")
    busy = world.answer(world.begin("describe")).result
    assert (busy.status, busy.reason) == ("rejected", "busy")
    world.reply("a", running)
    world.stop()  # a shuts down gracefully (it takes a while), b is killed
    result = world.answer(running).result
    assert (result.parts["b"].status, result.parts["b"].reason) == ("cancelled", "stopping")
    stopping = world.answer(world.begin("describe")).result
    assert (stopping.status, stopping.reason) == ("rejected", "stopping")


def test_progress_is_forwarded_only_for_the_current_operation() -> None:
    world = trio()
    request = world.begin("measure")
    world.report_progress("a", request, 50)
    world.report_progress("a", "measure-old", 70)
    world.reply("a", request)
    world.report_progress("a", request, 90)  # its part is done
    assert [(p.request_id, p.percent, p.connector) for p in world.progress] == [(request, 50, "a")]


def test_progress_is_merged_to_one_answer_per_interval_keeping_the_highest_percent() -> None:
    world = trio()
    request = world.begin("measure")
    world.report_progress("a", request, 10)  # the first goes at once
    world.report_progress("b", request, 40)
    world.report_progress("c", request, 30)  # lower than b's: merged away
    assert [(p.percent, p.connector) for p in world.progress] == [(10, "a")]
    world.advance(PROGRESS_INTERVAL / 2)
    assert len(world.progress) == 1
    world.advance(PROGRESS_INTERVAL)  # the wakeup the rules asked for brings the merged one
    assert [(p.percent, p.connector) for p in world.progress] == [(10, "a"), (40, "b")]
    world.advance(PROGRESS_INTERVAL * 5)  # nothing new: nothing sent, no wakeup left
    assert len(world.progress) == 2
    assert world.pending_wakeups <= 1  # only the operation's deadline
    world.report_progress("c", request, 60)  # an interval has passed: at once
    assert [p.percent for p in world.progress] == [10, 40, 60]


def test_a_flood_of_progress_sends_at_most_one_answer_per_interval() -> None:
    world = trio()
    request = world.begin("measure")
    steps = 1000
    for step in range(steps):  # 1000 reports over one second, from all three
        world.report_progress("abc"[step % 3], request, step / 10)
        world.advance(1.0 / steps)
    assert len(world.progress) <= 1.0 / PROGRESS_INTERVAL + 1
    world.advance(PROGRESS_INTERVAL)
    assert world.progress[-1].percent == (steps - 1) / 10  # the last (highest) is not lost


def test_merged_progress_is_dropped_once_the_operation_is_answered() -> None:
    world = started(child_spec("a"))
    request = world.begin("measure")
    world.report_progress("a", request, 10)
    world.report_progress("a", request, 20)  # merged, waiting for the interval
    world.reply("a", request)
    world.advance(PROGRESS_INTERVAL * 2)
    assert [p.percent for p in world.progress] == [10]  # the answer came first: no progress after it
    assert world.answer(request).result.status == "ok"


def test_an_adjust_of_a_component_nobody_owns_is_rejected() -> None:
    world = started(child_spec("a"))
    request = world.new_id("adjust")
    world.feed(OperationRequested(m.Begin(request, "adjust", components={"web": {}, "db": {}}), RUNTIME))
    proc = world.current("a")
    world.feed(ChildReplied("a", proc.generation, request, ConnectorOutcome("a"), ("web",)))
    result = world.answer(request).result
    assert (result.status, result.reason) == ("rejected", "unknown-component")
    assert "db" in result.message


# ----- stop and reconfigure ----------------------------------------------------------------------


def test_stop_shuts_idle_children_down_gracefully_and_kills_busy_ones() -> None:
    world = started(child_spec("a"), child_spec("b"))
    request = world.begin("measure")
    world.reply("a", request)
    stop = world.stop()
    assert isinstance(world.current("a").inbox[-1], m.HostShutdown)
    assert [k.name for k in world.kills] == ["b"]
    assert stop not in world.answers
    world.shutdown_done("a")
    effects = [e for kind, _, e in world.log if kind == "effect"]
    sweep = next(i for i, e in enumerate(effects) if isinstance(e, FinalSweep))
    stopped = next(i for i, e in enumerate(effects) if isinstance(e, Reply) and e.message == m.Stopped(stop))
    assert sweep < stopped  # orphans are gone before the servo hears it may exit
    assert world.alive() == [] and world.rules.statuses() == ()


def test_a_child_hung_in_shutdown_is_killed_after_its_timeout() -> None:
    world = started(child_spec("a", shutdown_timeout=2.0))
    stop = world.stop()
    world.advance(1.9)
    assert world.kills == []
    world.advance(0.2)
    assert [k.name for k in world.kills] == ["a"] and isinstance(world.answer(stop), m.Stopped)


def test_reconfigure_replaces_the_children_once_the_old_ones_are_down() -> None:
    world = started(child_spec("old"))
    replacement = m.Reconfigure(
        "reconfigure-1", m.SupervisorSettings(), (child_spec("new1"), child_spec("new2"))
    )
    world.stop(replacement)
    world.shutdown_done("old")
    assert [s.name for s in world.spawns][-2:] == ["new1", "new2"]
    world.ready_all()
    assert [c.name for c in world.answer("reconfigure-1").children] == ["new1", "new2"]


def test_a_second_stop_answers_the_first_at_once() -> None:
    world = started(child_spec("a"))
    first = world.stop()
    second = world.stop()
    assert isinstance(world.answer(first), m.Stopped)
    world.shutdown_done("a")
    assert isinstance(world.answer(second), m.Stopped)


def test_every_spawn_is_a_new_generation_of_one_child() -> None:
    world = trio()
    world.cancel()
    world.ready_all()
    world.cancel()
    world.ready_all()
    generations = [s.generation for s in world.spawns]
    assert len(set(generations)) == len(generations) == 9
    assert all(isinstance(s, Spawn) for s in world.spawns)
    assert all(isinstance(k, Kill) for k in world.kills)
