"""RestartLedger: restarts and their reasons, read from the supervisor's listings (pure, no processes).

Every listing carries each child's latest restarts (``ChildStatus.history``: the generation each
restart started, and why, as the rules decided it). One case per rule, then a model: a simulated
supervisor restarts connectors for every reason, listings arrive now and then (several restarts
may fall between two; the same listing may come twice), and the ledger's count per connector and
reason equals the truth, with one generation number per restart.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from servo_actors.actors.rules import messages as m
from servo_actors.actors.rules.restart_ledger import RestartLedger
from servo_actors.actors.rules.supervision import RESTART_HISTORY


class Recorder:
    def __init__(self) -> None:
        self.restarts: list[tuple[str, str]] = []
        self.generations: list[tuple[str, int | None]] = []
        self.escalations: list[tuple[str, str]] = []
        self.ledger = RestartLedger(self.restart, self.escalate)

    def restart(self, name: str, reason: str, generation: int | None, pid: int | None) -> None:
        self.restarts.append((name, reason))
        self.generations.append((name, generation))

    def escalate(self, name: str, message: str) -> None:
        self.escalations.append((name, message))


def child(
    name: str,
    generation: int,
    *history: tuple[int, str],
    state: str = "ready",
    down_reason: str | None = None,
) -> m.ChildStatus:
    pid = 1000 + generation if state not in ("queued", "failed") else None
    return m.ChildStatus(
        name, state, pid, generation, len(history), down_reason=down_reason, history=tuple(history)
    )


def status(*children: m.ChildStatus) -> m.Status:
    return m.Status("ping-1", children, 10, 10)


def test_the_first_start_is_no_restart_and_a_listing_seen_twice_counts_once() -> None:
    rec = Recorder()
    rec.ledger.seen(status(child("a", 0, state="queued"), child("b", 0, state="queued")))
    rec.ledger.seen(m.Ready("start-1", (child("a", 1), child("b", 2)), 10, 10))
    rec.ledger.seen(status(child("a", 1), child("b", 2)))
    assert rec.restarts == []
    listing = status(child("a", 3, (3, "crash")), child("b", 2))
    rec.ledger.seen(listing)
    rec.ledger.seen(listing)
    assert rec.restarts == [("a", "crash")] and rec.generations == [("a", 3)]


def test_restarts_before_the_first_listing_count_too() -> None:
    """A connector that failed to start before Ready: its restarts are in the first listing."""
    rec = Recorder()
    rec.ledger.seen(m.Ready("start-1", (child("a", 4, (3, "start-timeout"), (4, "start-timeout")),), 10, 10))
    assert rec.restarts == [("a", "start-timeout")] * 2 and rec.generations == [("a", 3), ("a", 4)]


def test_each_restart_between_two_listings_counts_once_with_its_own_reason_and_generation() -> None:
    rec = Recorder()
    rec.ledger.seen(m.Ready("start-1", (child("a", 1),), 10, 10))
    rec.ledger.seen(status(child("a", 5, (2, "deadline"), (3, "crash"), (5, "cancel"))))
    assert rec.restarts == [("a", "deadline"), ("a", "crash"), ("a", "cancel")]
    assert rec.generations == [("a", 2), ("a", 3), ("a", 5)]


def test_a_microreboot_restarts_what_ran_and_starts_a_new_baseline() -> None:
    rec = Recorder()
    rec.ledger.seen(m.Ready("start-1", (child("a", 7), child("b", 8, state="down")), 10, 10))
    assert rec.ledger.connector_pids() == [1007]
    rec.ledger.reset("microreboot")
    assert rec.ledger.connector_pids() == []
    rec.ledger.seen(m.Ready("start-2", (child("a", 1), child("b", 2)), 11, 11))
    assert rec.restarts == [("a", "microreboot")]


def test_connectors_not_up_are_named_with_why() -> None:
    rec = Recorder()
    rec.ledger.seen(
        status(
            child("a", 1),
            child("b", 3, (3, "start-timeout"), state="starting", down_reason="start-timeout"),
            child("c", 2, state="failed", down_reason="crash-loop"),
        )
    )
    assert rec.ledger.not_up() == {"b": "start-timeout", "c": "crash-loop"}


def test_an_escalation_names_the_connector() -> None:
    rec = Recorder()
    rec.ledger.seen(m.ConnectorFailed("a", "connector 'a' failed ... marked failed"))
    assert rec.escalations == [("a", "connector 'a' failed ... marked failed")]


# ----- a model of the supervisor, listings now and then --------------------------------------------


@dataclass
class Model:
    """Children ``a``, ``b``, ``c`` of a simulated supervisor; ``truth`` counts what it did."""

    names: tuple[str, ...] = ("a", "b", "c")
    generation: int = 0
    current: dict[str, int] = field(default_factory=dict)
    history: dict[str, deque[tuple[int, str]]] = field(default_factory=dict)
    truth: Counter[tuple[str, str]] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        for name in self.names:
            self.generation += 1
            self.current[name] = self.generation
            self.history[name] = deque(maxlen=RESTART_HISTORY)

    def restart(self, name: str, reason: str) -> None:
        self.generation += 1
        self.current[name] = self.generation
        self.history[name].append((self.generation, reason))
        self.truth[(name, reason)] += 1

    def listing(self) -> tuple[m.ChildStatus, ...]:
        return tuple(child(name, self.current[name], *self.history[name]) for name in self.names)


REASONS = ["crash", "start-timeout", "deadline", "cancel", "retry"]
EVENTS = st.lists(
    st.tuples(st.sampled_from(REASONS + ["listing", "listing-twice"]), st.sampled_from(["a", "b", "c"])),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(EVENTS)
def test_the_ledger_counts_what_the_supervisor_did(events: list[tuple[str, str]]) -> None:
    model, rec = Model(), Recorder()
    rec.ledger.seen(m.Ready("start-1", model.listing(), 10, 10))
    since_listing: Counter[str] = Counter()
    for kind, name in events:
        if kind.startswith("listing"):
            for _ in range(2 if kind == "listing-twice" else 1):
                rec.ledger.seen(status(*model.listing()))
            since_listing.clear()
        elif since_listing[name] < RESTART_HISTORY:  # the documented bound between two listings
            model.restart(name, kind)
            since_listing[name] += 1
    rec.ledger.seen(status(*model.listing()))
    assert Counter(rec.restarts) == model.truth
    generations = [g for _, g in rec.generations]
    assert len(generations) == len(set(generations))  # one generation number per restart
