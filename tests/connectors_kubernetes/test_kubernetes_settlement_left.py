"""``rollout_rules.settlement_left``: the settlement still due for a workload's current pods,
counted from when the newest became Ready (the wall clock passed in: no sleeps)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from servo_actors.connectors.kubernetes.rollout_rules import (
    READY_TIME_RESOLUTION,
    ready_since,
    settlement_left,
)

READY_AT = "2026-12-06T08:00:00Z"
T0 = datetime(2026, 12, 6, 8, 0, 0, tzinfo=UTC).timestamp()
LATEST = T0 + READY_TIME_RESOLUTION
"""The latest the pod can have become Ready: its stamp is whole seconds."""


def _pod(ready: bool = True, at: str | None = READY_AT, deleting: bool = False) -> dict[str, Any]:
    condition: dict[str, Any] = {"type": "Ready", "status": "True" if ready else "False"}
    if at is not None:
        condition["lastTransitionTime"] = at
    metadata: dict[str, Any] = {"name": "web-1"}
    if deleting:
        metadata["deletionTimestamp"] = READY_AT
    return {
        "metadata": metadata,
        "status": {"conditions": [{"type": "Initialized", "status": "True"}, condition]},
    }


def test_ready_since_reads_the_ready_conditions_transition_time() -> None:
    assert ready_since(_pod()) == T0
    assert ready_since(_pod(ready=False)) is None
    assert ready_since(_pod(at=None)) is None
    assert ready_since(_pod(at="yesterday")) is None
    assert ready_since({"status": {}}) is None


@pytest.mark.parametrize(
    ("since_ready", "left"),
    [
        (0.0, 30.0),  # just Ready: the whole settlement
        (10.0, 20.0),  # the remainder
        (29.5, 0.5),
        (30.0, 0.0),  # settled
        (3600.0, 0.0),  # settled long ago: nothing
    ],
)
def test_the_settlement_counts_from_readiness(since_ready: float, left: float) -> None:
    assert settlement_left([_pod()], 30.0, LATEST + since_ready) == left


def test_the_newest_pod_counts() -> None:
    newer = _pod(at="2026-12-06T08:00:20Z")
    assert settlement_left([_pod(), newer], 30.0, LATEST + 25) == 25.0


def test_a_pod_not_ready_or_of_unknown_time_means_the_whole_settlement() -> None:
    assert settlement_left([_pod(), _pod(ready=False)], 30.0, T0 + 3600) == 30.0
    assert settlement_left([_pod(at=None)], 30.0, T0 + 3600) == 30.0


def test_a_ready_time_ahead_of_the_clock_means_the_whole_settlement() -> None:
    assert settlement_left([_pod()], 30.0, T0 - 5) == 30.0
    assert settlement_left([_pod()], 30.0, T0 + 0.5) == 30.0  # within the stamp's second


def test_no_settlement_or_no_pods_costs_nothing() -> None:
    assert settlement_left([_pod()], 0.0, T0) == 0.0
    assert settlement_left([], 30.0, T0) == 0.0
    assert settlement_left([_pod(ready=False, deleting=True)], 30.0, T0) == 0.0  # only a pod going away
