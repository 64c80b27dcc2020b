"""One operation in flight under the supervisor: a part per connector, a deadline, one answer.

Plain data and pure functions (the supervision rules own it): the parts fill in as connectors
answer, crash or are killed; once none is pending, ``result`` merges them into the one
``OperationResult`` the runtime gets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servo_actors.actors.rules import messages as m
from servo_actors.actors.rules.results import NOT_INVOLVED, ConnectorOutcome, OperationResult, aggregate
from servo_actors.vocabulary import NOT_UP_REASONS

__all__ = [
    "OperationInFlight",
    "TIMED_OPERATIONS",
    "operation_deadline",
    "refused",
]

TIMED_OPERATIONS = ("measure", "adjust")
"""Operations whose control says how long they take (the others get only the grace)."""


def operation_deadline(begin: m.Begin, now: float, grace: float, declared: float = 0.0) -> float:
    """When ``begin`` must be answered: its control's times, or the longest a connector declared
    for it if that is longer, plus ``grace`` (supervisor.operation_grace)."""
    expected = begin.control.expected_seconds if begin.operation in TIMED_OPERATIONS else 0.0
    return now + max(expected, declared) + grace


@dataclass
class OperationInFlight:
    """``parts``: connector name -> its outcome, None while pending (in start order)."""

    begin: m.Begin
    reply_to: Any
    parts: dict[str, ConnectorOutcome | None]
    deadline: float
    dispatched: set[str] = field(default_factory=set)
    claimed: set[str] = field(default_factory=set)
    progress_pending: m.Progress | None = None
    """Progress merged since the last one was answered (``supervision.PROGRESS_INTERVAL``)."""
    progress_sent_at: float = float("-inf")

    @property
    def request_id(self) -> str:
        return self.begin.request_id

    @property
    def operation(self) -> str:
        return self.begin.operation

    def pending(self) -> list[str]:
        return [name for name, outcome in self.parts.items() if outcome is None]

    def is_pending(self, name: str) -> bool:
        """Whether ``name`` takes part and has no outcome yet."""
        return name in self.parts and self.parts[name] is None

    def settle(self, name: str, outcome: ConnectorOutcome, claimed: tuple[str, ...] = ()) -> bool:
        """Record ``name``'s outcome if its part is still pending; True if it was."""
        if not self.is_pending(name):
            return False
        self.parts[name] = outcome
        self.claimed.update(claimed)
        return True

    def settle_pending(self, status: str, reason: str, why: str) -> None:
        """Every pending part ends ``status``/``reason``: "<operation> <why> before connector X finished"."""
        for name in self.pending():
            message = f"{self.operation} {why} before connector {name!r} finished"
            self.parts[name] = ConnectorOutcome(name, status, reason, message)

    def result(self) -> OperationResult:
        """The merged answer (parts of connectors not involved in an adjust are left out, and so
        are those of connectors that are not up when every component is owned by one that is)."""
        parts = [p for p in self.parts.values() if p is not None and p.reason != NOT_INVOLVED]
        if self.operation == "adjust" and not set(self.begin.components or {}) - self.claimed:
            parts = [p for p in parts if p.ok or p.reason not in NOT_UP_REASONS]
        problem = None
        if self.operation == "adjust" and all(p.ok for p in parts):
            unowned = sorted(set(self.begin.components or {}) - self.claimed)
            if unowned:
                problem = (
                    "rejected",
                    "unknown-component",
                    f"no connector owns component(s) {', '.join(unowned)}",
                )
        return aggregate(self.operation, parts, extra_problem=problem)


def refused(begin: m.Begin, status: str, reason: str, message: str) -> m.Done:
    """The answer to an operation that does not run at all."""
    return m.Done(begin.request_id, aggregate(begin.operation, [], extra_problem=(status, reason, message)))
