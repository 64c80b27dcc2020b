"""Confirmation: a recommendation must hold up when its settings are measured again.

A search that hugs a constraint's bound finds steps that look feasible only because one noisy
reading fell on the right side of it. So before settings are *recommended*, they are measured
again (``ConfirmSpec.repeats`` more times) and kept only when every constraint holds with a
margin of ``sigmas`` standard errors: for ``p99_latency <= 250`` with readings averaging 240 and a
standard error of 4, ``240 + 2 * 4 = 248 <= 250`` holds; with a standard error of 6 it does not.

Every step measured at the same settings is a reading of one *point* (``points``): the search may
repeat settings, and confirmation steps (``StepRecord.confirms``) add readings on purpose. Only
completed (``ok``) steps are readings. A cancelled step (someone pressed Abort) is no reading: it
counts neither for nor against its point. A point is judged from its readings:

- it *holds* when it has readings, each of them meets every constraint, and they measured the
  objective;
- ``confirmed``: it holds, with at least ``1 + repeats`` readings, and every constraint is met by
  their mean with the margin;
- ``rejected``: a reading that misses a constraint, enough readings that miss the margin, or a
  confirmation step that failed (a service that fails when measured again is no recommendation);
- ``pending``: otherwise (fewer readings than confirmation needs).

The *candidates* are the points that hold and are not rejected, and that are no worse on the
objective than the baseline (step 0) when the baseline holds. The baseline is always a candidate
while it holds, even unconfirmed (it is what runs already: keeping it needs no proof), so a
recommendation never costs more than a baseline that holds.

``recommend`` picks among the candidates: confirmed points first, then those with more readings
(counted up to the ``1 + repeats`` confirmation needs), then the best objective, then the earliest.
``next_to_confirm`` walks the candidates best objective first: the first confirmed one ends the
confirmation; the first pending one is measured again, as long as at most ``candidates`` points
have been examined and fewer than ``cancels`` confirmation steps were cancelled (each cancelled
step is measured again, so a cancel does not use up the confirmation).

Pure: no I/O, no clock; the driver (search.py) turns its answers into ADJUST/MEASURE steps.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from servo_actors.optimizer.plan import ConfirmSpec, Constraint, Objective
from servo_actors.optimizer.steps import StepRecord, finite

Verdict = Literal["confirmed", "rejected", "pending"]
# Statuses of a confirmation step that count against its point (a cancel is no evidence).
_FAILING = ("failed", "rejected", "aborted")
# Numbers in settings keys are compared at this many decimals (1 and 1.0 are the same setting).
_KEY_DECIMALS = 10


def settings_key(settings: Any) -> str:
    """What makes two steps' settings the same point: numbers compared as floats, keys sorted."""

    def normal(value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): normal(v) for k, v in value.items()}
        if isinstance(value, int | float) and not isinstance(value, bool):
            return round(float(value), _KEY_DECIMALS)
        return value

    return json.dumps(normal(settings), sort_keys=True, default=str)


@dataclass
class Point:
    """Every step measured at one set of settings."""

    settings: dict[str, Any]
    # What names the point: the first step that measured these settings (an ``ok`` step), else the
    # first step at them. A step cancelled before it measured anything never names what others measured.
    first: int
    readings: list[StepRecord] = field(default_factory=list)  # ok steps, in order
    confirmations: list[StepRecord] = field(default_factory=list)  # confirmation steps, any status

    def values(self, metric: str) -> list[float]:
        return [float(r.metrics[metric]) for r in self.readings if finite(r.metrics.get(metric))]

    def mean(self, metric: str) -> float | None:
        values = self.values(metric)
        return statistics.fmean(values) if values else None

    def standard_error(self, metric: str) -> float | None:
        """The standard error of the mean of ``metric``'s readings; None with fewer than two."""
        values = self.values(metric)
        if len(values) < 2:
            return None
        return statistics.stdev(values) / math.sqrt(len(values))


@dataclass(frozen=True)
class Evidence:
    """One constraint at one point: the mean of its readings, its uncertainty, and the verdict."""

    constraint: Constraint
    value: float | None
    uncertainty: float | None  # standard error of the mean; None with a single reading
    readings: int
    met: bool  # the mean meets the bound (no margin)
    met_with_margin: bool  # the mean, moved toward the bound by sigmas x uncertainty, meets it

    def as_json(self) -> dict[str, Any]:
        return {
            "constraint": str(self.constraint),
            "value": self.value,
            "uncertainty": self.uncertainty,
            "readings": self.readings,
            "met": self.met,
            "met_with_margin": self.met_with_margin,
        }


def points(steps: Iterable[StepRecord]) -> list[Point]:
    """Steps grouped by settings, in order of first appearance; only ``ok`` steps are readings.

    A point is named (``first``) by its first reading: settings first tried by a step that was
    cancelled (no values) and measured by later ones are "the settings of step 19", not of the
    cancelled step.
    """
    found: dict[str, Point] = {}
    for step in steps:
        key = settings_key(step.settings)
        point = found.get(key)
        if point is None:
            point = found[key] = Point(step.settings, step.n)
        if step.status == "ok":
            if not point.readings:
                point.first = step.n
            point.readings.append(step)
        if step.confirms is not None:
            point.confirmations.append(step)
    return list(found.values())


def evidence(objective: Objective, point: Point, sigmas: float) -> list[Evidence]:
    """Each constraint of ``objective`` judged on ``point``'s readings."""
    judged = []
    for constraint in objective.constraints:
        value = point.mean(constraint.metric)
        error = point.standard_error(constraint.metric)
        margin = sigmas * error if error is not None else 0.0
        judged.append(
            Evidence(
                constraint,
                value,
                error,
                len(point.values(constraint.metric)),
                constraint.holds(value),
                _holds_with_margin(constraint, value, margin),
            )
        )
    return judged


def holds(objective: Objective, point: Point) -> bool:
    """Every reading of ``point`` meets every constraint, and they measured the objective."""
    if not point.readings or point.mean(objective.metric) is None:
        return False
    return all(
        constraint.holds(
            reading.metrics.get(constraint.metric) if finite(reading.metrics.get(constraint.metric)) else None
        )
        for reading in point.readings
        for constraint in objective.constraints
    )


def verdict(objective: Objective, point: Point, spec: ConfirmSpec) -> Verdict:
    """``confirmed``, ``rejected`` or ``pending`` (see the module docstring)."""
    if any(step.status in _FAILING for step in point.confirmations):
        return "rejected"
    if point.readings and not holds(objective, point):
        return "rejected"
    if spec.repeats > 0 and len(point.readings) >= 1 + spec.repeats:
        judged = evidence(objective, point, spec.sigmas)
        ok = all(e.met_with_margin and e.readings >= 1 + spec.repeats for e in judged)
        return "confirmed" if ok else "rejected"
    return "pending"


def baseline_point(every: Sequence[Point]) -> Point | None:
    """The point of the baseline (step 0): the settings the search started from."""
    return next((point for point in every if point.first == 0 or any(r.n == 0 for r in point.readings)), None)


def candidates(objective: Objective, every: Sequence[Point], spec: ConfirmSpec) -> list[Point]:
    """Points that may be recommended, best objective first (ties: earliest).

    They hold and are not rejected; when the baseline is such a point, none is worse than it.
    """
    base = baseline_point(every)
    found = [
        p for p in every if holds(objective, p) and (p is base or verdict(objective, p, spec) != "rejected")
    ]
    found.sort(key=lambda point: (_signed(objective, point), point.first))
    if base is not None and base in found:
        ceiling = _signed(objective, base)
        found = [point for point in found if _signed(objective, point) <= ceiling]
    return found


def cancelled_confirmations(steps: Iterable[StepRecord]) -> int:
    """Confirmation steps that were cancelled (each is measured again, up to ``ConfirmSpec.cancels``)."""
    return sum(1 for step in steps if step.confirms is not None and step.status == "cancelled")


def next_to_confirm(objective: Objective, steps: Sequence[StepRecord], spec: ConfirmSpec) -> Point | None:
    """The point to measure again next, or None when confirmation is over."""
    if spec.repeats == 0 or cancelled_confirmations(steps) >= spec.cancels:
        return None
    every = points(steps)
    examined = sum(1 for point in every if point.confirmations)
    for point in candidates(objective, every, spec):
        if verdict(objective, point, spec) == "confirmed":
            return None
        if point.confirmations or examined < spec.candidates:
            return point
        return None
    return None


@dataclass(frozen=True)
class Recommendation:
    point: Point
    confirmed: bool
    evidence: list[Evidence]


def recommend(objective: Objective, steps: Sequence[StepRecord], spec: ConfirmSpec) -> Recommendation | None:
    """The candidate to recommend (see the module docstring), or None when no point holds."""
    needed = 1 + spec.repeats
    chosen: Point | None = None
    best_key: tuple[int, int, float, int] | None = None
    for point in candidates(objective, points(steps), spec):
        confirmed = verdict(objective, point, spec) == "confirmed"
        key = (
            0 if confirmed else 1,
            -min(len(point.readings), needed),
            _signed(objective, point),
            point.first,
        )
        if best_key is None or key < best_key:
            chosen, best_key = point, key
    if chosen is None or best_key is None:
        return None
    return Recommendation(chosen, best_key[0] == 0, evidence(objective, chosen, spec.sigmas))


def rejected_steps(objective: Objective, steps: Sequence[StepRecord], spec: ConfirmSpec) -> set[int]:
    """Numbers of the steps whose settings were measured again and did not hold up."""
    numbers: set[int] = set()
    every = points(steps)
    base = baseline_point(every)
    for point in every:
        if point is base and holds(objective, point):
            continue  # the settings in place: kept while every reading holds, margin or not
        if point.confirmations and verdict(objective, point, spec) == "rejected":
            numbers.update(step.n for step in point.readings)
            numbers.update(step.n for step in point.confirmations)
    return numbers


def _signed(objective: Objective, point: Point) -> float:
    """The point's objective as a number to minimize (infinite when it has none)."""
    value = point.mean(objective.metric)
    if value is None:
        return math.inf
    return value if objective.sense == "minimize" else -value


def _holds_with_margin(constraint: Constraint, value: float | None, margin: float) -> bool:
    if value is None or not math.isfinite(value):
        return False
    if constraint.op in ("<=", "<"):
        return constraint.holds(value + margin)
    if constraint.op in (">=", ">"):
        return constraint.holds(value - margin)
    return constraint.holds(value)  # "==": a margin has no direction to go


__all__ = [
    "Evidence",
    "Point",
    "Recommendation",
    "baseline_point",
    "cancelled_confirmations",
    "candidates",
    "evidence",
    "holds",
    "next_to_confirm",
    "points",
    "recommend",
    "rejected_steps",
    "settings_key",
    "verdict",
]
