"""The supervision rules for children placed on member systems, on a fake clock (no processes).

A placed child's host may be lost (``ChildHostLost``) or no host may take it (``ChildUnplaced``,
then ``HostAvailable``). Neither is a crash: no backoff, no count against restart intensity, no
sibling restarted; its part of the operation fails ``host-lost`` / ``host-unavailable``, and an
unplaced child's parts fail at once while it waits. The world (tests/support/supervision_world.py)
plays the shell and the processes.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from supervision_world import SupervisionWorld, child_spec

from servo_actors.actors.rules import messages as m
from servo_actors.actors.rules.supervision_events import ChildHostLost, ChildUnplaced, HostAvailable, Kill

LOST = "connector 'b' was on member 10.0.0.7:1901, which is lost"
NONE = "connector 'b' needs a member offering loadgen-host, and none has joined"


def started(strategy: str = "one_for_all", **settings) -> SupervisionWorld:
    world = SupervisionWorld()
    request = world.start(child_spec("a"), child_spec("b"), child_spec("c"), strategy=strategy, **settings)
    world.ready_all()
    assert isinstance(world.answer(request), m.Ready)
    return world


def gen(world: SupervisionWorld, name: str) -> int:
    return world.generations()[name]


def test_a_lost_host_fails_the_part_host_lost_and_starts_the_child_again_uncounted() -> None:
    world = started(max_restarts=0)  # a single counted restart would escalate
    op = world.begin("measure")
    world.reply("a", op), world.reply("c", op)
    before = dict(world.generations())
    world.feed(ChildHostLost("b", before["b"], LOST))
    done = world.answer(op)
    assert done.result.parts["b"].reason == "host-lost" and done.result.parts["b"].message == LOST
    assert done.result.parts["a"].status == "ok"
    assert world.states()["b"] == "starting" and gen(world, "b") > before["b"]
    assert gen(world, "a") == before["a"] and gen(world, "c") == before["c"]  # no sibling restarted
    assert world.escalations == [] and "failed" not in world.states().values()
    assert {c.name: c.restarts for c in world.rules.statuses()}["b"] == 0


def test_an_unplaced_child_waits_its_parts_fail_at_once_and_it_starts_when_a_host_comes() -> None:
    world = started(max_restarts=0)
    world.feed(ChildUnplaced("b", gen(world, "b"), NONE))
    assert world.states()["b"] == "waiting"
    op = world.begin("check")
    world.reply("a", op), world.reply("c", op)
    part = world.answer(op).result.parts["b"]
    assert (part.status, part.reason, part.message) == ("failed", "host-unavailable", NONE)
    spawns = len(world.spawns)
    world.feed(HostAvailable(("other",)))
    assert world.states()["b"] == "waiting" and len(world.spawns) == spawns
    world.feed(HostAvailable(("b",)))
    assert world.states()["b"] == "starting" and world.spawns[-1].name == "b"
    assert world.escalations == []


def test_a_waiting_child_is_settled_a_start_answers_and_a_stop_puts_it_down() -> None:
    world = SupervisionWorld()
    request = world.start(child_spec("a"), child_spec("b"))
    world.ready("a")
    world.feed(ChildUnplaced("b", gen(world, "b"), NONE))
    ready = world.answer(request)
    assert [(c.name, c.state) for c in ready.children] == [("a", "ready"), ("b", "waiting")]
    stop = world.stop()
    world.shutdown_done("a")
    assert isinstance(world.answer(stop), m.Stopped)


def test_a_cancel_tries_a_waiting_child_again_and_answers_once_it_is_settled() -> None:
    world = started()
    world.feed(ChildUnplaced("b", gen(world, "b"), NONE))
    cancel = world.cancel()
    world.ready("a"), world.ready("c")
    assert world.states()["b"] == "starting"  # a fresh try: a host may have come meanwhile
    assert world.answers.get(cancel) is None
    world.feed(ChildUnplaced("b", gen(world, "b"), NONE))
    assert isinstance(world.answer(cancel), m.Cancelled)


def test_a_host_lost_while_the_child_is_being_killed_completes_the_kill() -> None:
    world = started()
    world.lose_exit_notices = True
    cancel = world.cancel()
    b = gen(world, "b")
    assert any(isinstance(k, Kill) and k.name == "b" for k in world.kills)
    world.feed(ChildHostLost("b", b, LOST))
    world.poll()
    world.ready_all()
    assert gen(world, "b") > b and isinstance(world.answer(cancel), m.Cancelled)


def test_news_of_a_replaced_generation_is_ignored() -> None:
    world = started()
    old = gen(world, "b")
    world.exits("b", 3)
    world.advance(1.0)
    world.ready_all()
    world.feed(ChildHostLost("b", old, LOST), ChildUnplaced("b", old, NONE))
    assert world.states()["b"] == "ready"


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.sampled_from(["lost", "unplaced", "available", "ready", "cancel", "measure", "tick"]), max_size=30
    )
)
def test_placement_events_in_any_order_never_escalate_and_every_operation_is_answered_once(
    steps: list[str],
) -> None:
    world = started(max_restarts=0)
    ops = []
    for step in steps:
        b = gen(world, "b")
        if step == "lost":
            world.feed(ChildHostLost("b", b, LOST))
        elif step == "unplaced":
            world.feed(ChildUnplaced("b", b, NONE))
        elif step == "available":
            world.feed(HostAvailable(("b",)))
        elif step == "ready":
            world.ready_all()
        elif step == "cancel":
            world.cancel()
        elif step == "measure":
            ops.append(world.begin("check"))
            for name in ("a", "c"):
                if world.states()[name] == "ready":
                    world.reply(name, ops[-1])
        else:
            world.advance(0.5)
    for _ in range(10):  # every deadline passes; the shell's fresh processes answer
        world.ready_all()
        world.advance(15.0)
    assert world.escalations == [] and "failed" not in world.states().values()
    for op in ops:
        assert len(world.answers[op]) == 1, (op, world.answers[op])


def test_the_restart_ledger_counts_a_placed_child_respawned_without_a_crash_as_host_lost() -> None:
    from servo_actors.actors.rules.restart_ledger import RestartLedger

    seen: list[tuple] = []
    ledger = RestartLedger(lambda *event: seen.append(event), lambda *event: seen.append(event))
    ledger.seen(m.Ready("r", (m.ChildStatus("load", "ready", 4242, 1, 0, "10.0.0.7:1901"),), 1, 1))
    assert ledger.connector_pids() == []  # a PID of the member host, not of this one
    respawned = m.ChildStatus("load", "ready", 4343, 3, 0, "10.0.0.8:1901", history=((3, "host-lost"),))
    ledger.seen(m.Status("s", (respawned,), 1, 1))
    assert seen == [("load", "host-lost", 3, 4343)]
