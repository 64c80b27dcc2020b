"""RestartLedger: restarts and their reasons, read from the supervisor's answers (pure, no processes).

One case per rule, then a model: a simulated supervisor restarts connectors for every reason, the
runtime's answers arrive with a result sometimes overtaken by the next listing (Thespian does not
keep the order of messages), and the ledger's count per connector and reason equals the truth.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from servo_actors.actors import messages as m
from servo_actors.actors.restart_ledger import RestartLedger
from servo_actors.actors.results import ConnectorOutcome, aggregate


class Recorder:
    def __init__(self) -> None:
        self.restarts: list[tuple[str, str]] = []
        self.escalations: list[tuple[str, str]] = []
        self.ledger = RestartLedger(self.restart, self.escalate)

    def restart(self, name: str, reason: str, generation: int | None, pid: int | None) -> None:
        self.restarts.append((name, reason))

    def escalate(self, name: str, message: str) -> None:
        self.escalations.append((name, message))


def child(name: str, generation: int, restarts: int = 0, state: str = "ready") -> m.ChildStatus:
    return m.ChildStatus(name, state, 1000 + generation if state != "queued" else None, generation, restarts)


def status(*children: m.ChildStatus) -> m.Status:
    return m.Status("ping-1", children, 10, 10, None)


def done(*timed_out: str, ok: tuple[str, ...] = ()) -> m.Done:
    parts = [ConnectorOutcome(name, "failed", "timeout", f"{name} did not finish") for name in timed_out]
    parts += [ConnectorOutcome(name) for name in ok]
    return m.Done("measure-1", aggregate("measure", parts))


def test_the_first_listing_is_a_baseline_and_a_never_spawned_child_is_not_a_restart() -> None:
    rec = Recorder()
    rec.ledger.seen(status(child("a", 0, state="queued"), child("b", 0, state="queued")))
    rec.ledger.seen(m.Ready("start-1", (child("a", 1), child("b", 2)), 10, 10))
    rec.ledger.seen(status(child("a", 1), child("b", 2)))
    assert rec.restarts == []


def test_a_cancel_restarts_every_connector_once_even_seen_halfway() -> None:
    rec = Recorder()
    rec.ledger.seen(m.Ready("start-1", (child("a", 1), child("b", 2)), 10, 10))
    rec.ledger.cancel_sent()
    rec.ledger.seen(status(child("a", 3, state="starting"), child("b", 2, state="killing")))
    rec.ledger.seen(m.Cancelled("cancel-1", (child("a", 3), child("b", 4))))
    rec.ledger.seen(status(child("a", 3), child("b", 4)))
    assert sorted(rec.restarts) == [("a", "cancel"), ("b", "cancel")]


def test_crashes_are_counted_by_the_supervisors_restart_count() -> None:
    rec = Recorder()
    rec.ledger.seen(m.Ready("start-1", (child("a", 1), child("b", 2)), 10, 10))
    rec.ledger.seen(status(child("a", 5, restarts=3), child("b", 2)))
    assert rec.restarts == [("a", "crash")] * 3


def test_a_deadline_counts_whether_its_result_comes_before_or_after_the_listing() -> None:
    before = Recorder()
    before.ledger.seen(m.Ready("start-1", (child("a", 1),), 10, 10))
    before.ledger.seen(done("a"))
    before.ledger.seen(status(child("a", 2)))
    after = Recorder()
    after.ledger.seen(m.Ready("start-1", (child("a", 1),), 10, 10))
    after.ledger.seen(status(child("a", 2)))
    after.ledger.seen(done("a"))
    assert before.restarts == after.restarts == [("a", "deadline")]


def test_a_timeout_the_connector_reports_itself_is_not_a_restart() -> None:
    rec = Recorder()
    rec.ledger.seen(m.Ready("start-1", (child("a", 1),), 10, 10))
    rec.ledger.seen(done("a"))
    rec.ledger.seen(status(child("a", 1)))  # still ready, same process: nobody killed it
    rec.ledger.cancel_sent()
    rec.ledger.seen(m.Cancelled("cancel-1", (child("a", 2),)))
    assert rec.restarts == [("a", "cancel")]


def test_a_sibling_restarted_for_a_crash_counts_as_crash() -> None:
    rec = Recorder()
    rec.ledger.seen(m.Ready("start-1", (child("a", 1), child("b", 2)), 10, 10))
    rec.ledger.seen(status(child("a", 3, restarts=1), child("b", 4)))  # one_for_all
    rec.ledger.seen(status(child("a", 3, restarts=1), child("b", 4)))
    assert sorted(rec.restarts) == [("a", "crash"), ("b", "crash")]


def test_a_deadline_and_a_crash_between_two_listings_both_count() -> None:
    rec = Recorder()
    rec.ledger.seen(m.Ready("start-1", (child("a", 1),), 10, 10))
    rec.ledger.seen(done("a"))
    rec.ledger.seen(status(child("a", 3, restarts=1)))
    assert sorted(rec.restarts) == [("a", "crash"), ("a", "deadline")]


def test_a_microreboot_restarts_what_ran_and_starts_a_new_baseline() -> None:
    rec = Recorder()
    rec.ledger.seen(m.Ready("start-1", (child("a", 7), child("b", 8, state="down")), 10, 10))
    assert rec.ledger.connector_pids() == [1007]
    rec.ledger.reset("microreboot")
    assert rec.ledger.connector_pids() == []
    rec.ledger.seen(m.Ready("start-2", (child("a", 1), child("b", 2)), 11, 11))
    assert rec.restarts == [("a", "microreboot")]


def test_an_escalation_names_the_connector() -> None:
    rec = Recorder()
    rec.ledger.seen(m.SupervisorFailed("a", "connector 'a' failed ... the supervisor gave up"))
    assert rec.escalations == [("a", "connector 'a' failed ... the supervisor gave up")]


# ----- a model of the supervisor, and messages delivered a little out of order --------------------


@dataclass
class Model:
    """Children ``a``, ``b``, ``c`` of a simulated supervisor; ``truth`` counts what it did."""

    names: tuple[str, ...] = ("a", "b", "c")
    generation: int = 0
    children: dict[str, list[int]] = field(default_factory=dict)  # name -> [generation, restarts]
    truth: Counter[tuple[str, str]] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        for name in self.names:
            self.children[name] = [self.spawn(), 0]

    def spawn(self) -> int:
        self.generation += 1
        return self.generation

    def listing(self) -> tuple[m.ChildStatus, ...]:
        return tuple(child(name, gen, restarts) for name, (gen, restarts) in self.children.items())

    def crash(self, name: str) -> None:
        self.children[name][0] = self.spawn()
        self.children[name][1] += 1
        self.truth[(name, "crash")] += 1

    def deadline(self, name: str) -> m.Done:
        self.children[name][0] = self.spawn()
        self.truth[(name, "deadline")] += 1
        return done(name, ok=tuple(other for other in self.names if other != name))

    def cancel(self) -> m.Cancelled:
        for name in self.names:
            self.children[name][0] = self.spawn()
            self.truth[(name, "cancel")] += 1
        return m.Cancelled("cancel-1", self.listing())


EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["crash", "deadline", "cancel"]), st.sampled_from(["a", "b", "c"]), st.booleans()
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(EVENTS)
def test_the_ledger_counts_what_the_supervisor_did(events: list[tuple[str, str, bool]]) -> None:
    model, rec = Model(), Recorder()
    rec.ledger.seen(m.Ready("start-1", model.listing(), 10, 10))
    for kind, name, overtaken in events:
        delivered: list[Any] = []
        if kind == "crash":
            model.crash(name)
        elif kind == "deadline":
            result = model.deadline(name)
            # The listing after it may overtake the result (a liveness ping answered meanwhile).
            delivered = [status(*model.listing()), result] if overtaken else [result]
        else:
            rec.ledger.cancel_sent()
            delivered = [model.cancel()]
        for message in delivered:
            rec.ledger.seen(message)
        rec.ledger.seen(status(*model.listing()))  # the next liveness ping's answer
    assert Counter(rec.restarts) == model.truth
