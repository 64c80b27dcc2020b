"""What an operation returns: one outcome per connector, aggregated into one result.

Plain data (pickled between processes by module path), plus ``aggregate``, the pure function that
merges the parts. The aggregate status is the worst of the parts in ``STATUS_SEVERITY`` order, its
reason that of the first connector (in config order) with that status, and its message a sentence
per connector at fault.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from servo_actors.protocol.statuses import normalise_failure
from servo_actors.vocabulary import OPERATIONS, STATUS_SEVERITY

__all__ = ["NOT_INVOLVED", "ConnectorOutcome", "OperationResult", "aggregate", "empty_data", "worst_status"]

NOT_INVOLVED = "not-involved"
"""Reason of an adjust part whose connector owns none of the requested components (dropped)."""
# From the vocabulary (servo_actors/vocabulary.py): OPERATIONS; STATUS_SEVERITY, best to worst (an
# aggregate takes the worst of its parts); and NOT_UP_REASONS, the reasons of the part of a
# connector that is not up: its start passed ``startup_timeout`` (START_TIMEOUT); it raised or
# exited while starting, or kept crashing (CRASH_LOOP); no host can take it (HOST_UNAVAILABLE). An operation with such a part is ``failed``
# and still carries what the connectors that are up produced (docs/recovery.md, "A connector that cannot start"); an
# ADJUST none of whose components belongs to it leaves that part out.


@dataclass
class ConnectorOutcome:
    """How one connector's part of an operation ended."""

    connector: str
    status: str = "ok"
    reason: str = "success"
    message: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Whatever a connector raised, the part carries a known status and a one-word reason (the
        # original words stay in the message): every result built from it is valid on the wire.
        if self.status != "ok":
            self.status, self.reason, self.message = normalise_failure(self.status, self.reason, self.message)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class OperationResult:
    """The aggregated answer to describe, measure, adjust or check.

    ``data`` by operation: describe ``{"components", "metrics"}``; measure ``{"metrics",
    "annotations"}``; adjust ``{"components"}``; check ``{"checks": [{"connector", "name",
    "success", "message"}]}``. ``parts`` keeps each connector's own outcome.
    """

    operation: str
    status: str
    reason: str
    message: str | None
    data: dict[str, Any]
    parts: dict[str, ConnectorOutcome] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status != "ok":
            self.status, self.reason, self.message = normalise_failure(self.status, self.reason, self.message)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def worst_status(statuses: Iterable[str]) -> str:
    """The worst status of ``statuses`` (``ok`` when empty); unknown words count as ``failed``."""
    worst = 0
    for status in statuses:
        rank = STATUS_SEVERITY.index(status) if status in STATUS_SEVERITY else STATUS_SEVERITY.index("failed")
        worst = max(worst, rank)
    return STATUS_SEVERITY[worst]


def empty_data(operation: str) -> dict[str, Any]:
    """The shape of ``data`` for ``operation`` with nothing in it."""
    if operation == "describe":
        return {"components": {}, "metrics": {}}
    if operation == "measure":
        return {"metrics": {}, "annotations": {}}
    if operation == "adjust":
        return {"components": {}}
    if operation == "check":
        return {"checks": []}
    raise ValueError(f"unknown operation {operation!r} (expected one of {', '.join(OPERATIONS)})")


def _merge_data(operation: str, parts: list[ConnectorOutcome]) -> dict[str, Any]:
    data = empty_data(operation)
    for part in parts:
        if not part.ok:
            continue
        if operation == "check":
            for check in part.data.get("checks", []):
                data["checks"].append({"connector": part.connector, **check})
            continue
        for key, merged in data.items():
            merged.update(part.data.get(key) or {})
    return data


def aggregate(
    operation: str,
    parts: list[ConnectorOutcome],
    *,
    extra_problem: tuple[str, str, str] | None = None,
) -> OperationResult:
    """Merge the parts (in config order) into one result.

    Data of parts that are not ``ok`` is left out. ``extra_problem`` is a ``(status, reason,
    message)`` found by the caller outside any part (e.g. a component nobody owns).
    """
    if extra_problem:
        # The same rules as a connector's part: a known status, a one-word reason.
        extra_problem = normalise_failure(*extra_problem)  # type: ignore[assignment]  # a str message stays a str
    statuses = [part.status for part in parts]
    if extra_problem:
        statuses.append(extra_problem[0])
    status = worst_status(statuses)
    reason = "success"
    messages: list[str] = []
    for part in parts:
        if part.ok:
            continue
        if part.message:
            messages.append(part.message)
        if part.status == status and reason == "success":
            reason = part.reason
    if extra_problem:
        messages.append(extra_problem[2])
        if extra_problem[0] == status and reason == "success":
            reason = extra_problem[1]
    return OperationResult(
        operation=operation,
        status=status,
        reason=reason,
        message="; ".join(messages) if messages else None,
        data=_merge_data(operation, parts),
        parts={part.connector: part for part in parts},
    )
