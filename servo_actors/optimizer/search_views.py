"""What a ``SearchDriver`` (search.py) shows and stores: its command in flight and its JSON views.

Holds ``InFlight`` (the command handed out and not yet answered) and the pure functions that turn
the driver's records into JSON: each step (``step_json``, ``steps_json``), the recommendation
(``best_json``), the confirmation (``confirmation_json``), the command in flight
(``current_json``), the search space (``space_json``), and the state file's document
(``state_document``). ``/admin/state`` and the state file show what these return; search.py
decides the commands and keeps the records.

What a step shows:

- ``settings``: what the ADJUST result says is in force (else what was asked for).
- ``metrics``: one number per metric (``steps.reduce_metrics``); a metric with no usable point is
  absent.
- ``status``: the servo's status (``ok``, ``failed``, ``rejected``, ``aborted``, ``cancelled``),
  ``failed`` with reason ``lost`` when no result came after ``COMMAND_ATTEMPTS`` issues.
- ``feasible``: status ``ok`` and every constraint met; a constraint on a missing metric is not met.
- ``objective``: the objective metric's value (None when missing).
- ``rejected``: a confirmation showed its settings do not hold up (confirm.py).

The recommendation (``best``) is chosen by ``confirm.recommend``: among the points (all steps at
one set of settings) whose readings all hold and that are no worse than a baseline that holds,
confirmed ones first, then more readings, then the best objective. One not confirmed is labelled
``confirmed: false``, with a note, counted from the steps, saying why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from servo_actors.optimizer.confirm import (
    Point,
    baseline_point,
    cancelled_confirmations,
    evidence,
    holds,
    points,
    recommend,
    rejected_steps,
    verdict,
)
from servo_actors.optimizer.plan import Objective, Plan, plan_summary
from servo_actors.optimizer.space import SearchSpace, Settings
from servo_actors.optimizer.steps import STATE_VERSION, StepRecord, assess
from servo_actors.readable import counted

__all__ = [
    "InFlight",
    "baseline_json",
    "best_json",
    "confirmation_json",
    "current_json",
    "space_json",
    "state_document",
    "step_json",
    "steps_json",
]


@dataclass
class InFlight:
    """The command handed out and not yet answered."""

    kind: Literal["describe", "baseline", "adjust", "measure"]
    n: int
    command: dict[str, Any]
    settings: Settings | None = None
    attempts: int = 1
    confirms: int | None = None
    cancelled: str | None = None
    progress: float | None = None
    message: str | None = None

    def uid(self) -> str | None:
        return self.command.get("cmd_uid")


def step_json(objective: Objective, record: StepRecord, rejected: set[int] | None = None) -> dict[str, Any]:
    """One step as ``/admin/state`` and the state file show it."""
    judged = assess(objective, record)
    return {
        "n": record.n,
        "settings": record.settings,
        "metrics": record.metrics,
        "status": record.status,
        "reason": record.reason,
        "message": record.message,
        "feasible": judged.feasible,
        "objective": judged.objective,
        "constraints": judged.constraints,
        "finished_at": record.finished_at,
        "confirms": record.confirms,
        "rejected": record.n in rejected if rejected is not None else False,
    }


def steps_json(plan: Plan, steps: Sequence[StepRecord]) -> list[dict[str, Any]]:
    """Every step, each marked ``rejected`` when a confirmation showed it does not hold up."""
    rejected = rejected_steps(plan.objective, steps, plan.confirm)
    return [step_json(plan.objective, record, rejected) for record in steps]


def best_json(plan: Plan, steps: Sequence[StepRecord], phase: str) -> dict[str, Any] | None:
    """The recommendation (None before any step), with a note on how far it is confirmed."""
    chosen = recommend(plan.objective, steps, plan.confirm)
    if chosen is None:
        return None
    point = chosen.point
    names = sorted({name for record in point.readings for name in record.metrics})
    metrics = {name: value for name in names if (value := point.mean(name)) is not None}
    note = _recommendation_note(plan, steps, phase, point, chosen.confirmed)
    return {
        "step": point.first,
        "settings": point.settings,
        "metrics": metrics,
        "objective": point.mean(plan.objective.metric),
        "uncertainty": {name: point.standard_error(name) for name in names},
        "readings": len(point.readings),
        "steps": [record.n for record in point.readings],
        "confirmed": chosen.confirmed,
        "note": note,
        "constraints": [e.as_json() for e in chosen.evidence],
    }


def baseline_json(plan: Plan, steps: Sequence[StepRecord]) -> dict[str, Any] | None:
    """The baseline's settings as a point: the means of all its readings (step 0 and any later
    step at the same settings), so it compares with the recommendation like for like."""
    every = points(steps)
    point = baseline_point(every)
    if point is None or not point.readings:
        return None
    names = sorted({name for record in point.readings for name in record.metrics})
    return {
        "step": 0,
        "settings": point.settings,
        "metrics": {name: value for name in names if (value := point.mean(name)) is not None},
        "objective": point.mean(plan.objective.metric),
        "readings": len(point.readings),
        "steps": [record.n for record in point.readings],
        "holds": holds(plan.objective, point),
    }


def _recommendation_note(
    plan: Plan, steps: Sequence[StepRecord], phase: str, point: Point, confirmed: bool
) -> str:
    """How far the recommendation is confirmed, and why no further, counted from the steps."""
    spec = plan.confirm
    readings = len(point.readings)
    if spec.repeats == 0:
        return f"confirmation is off (confirm.repeats: 0): {counted(readings, 'reading')}"
    cancelled = cancelled_confirmations(steps)
    if confirmed:
        note = f"{counted(readings, 'reading')}, every constraint held by {spec.sigmas:g} standard errors"
        if cancelled:
            note += f" ({counted(cancelled, 'confirmation step')} cancelled and measured again)"
        return note
    every = points(steps)
    if point is baseline_point(every) and readings >= 1 + spec.repeats:
        # Kept although not confirmed: what runs already needs no proof, and nothing better held up.
        return (
            f"the baseline, kept: {counted(readings, 'reading')}, every one holding, but not by "
            f"{spec.sigmas:g} standard errors; no better-looking setting held up"
        )
    note = f"{readings} of {1 + spec.repeats} readings"
    turned_down = [p for p in every if p.confirmations and verdict(plan.objective, p, spec) == "rejected"]
    if phase not in ("done", "failed"):
        return note + (" (being measured again)" if point.confirmations else " (not measured again yet)")
    if cancelled >= spec.cancels:
        why = f"confirmation stopped after {counted(cancelled, 'cancelled confirmation step')} (confirm.cancels: {spec.cancels})"
    elif phase == "failed":
        why = "the optimization failed before confirmation ended"
    elif turned_down:
        why = (
            f"{counted(len(turned_down), 'better-looking setting')} measured again did not hold up, "
            f"and confirm.candidates ({spec.candidates}) allows no more"
        )
    else:
        why = "confirmation ended"
    shown = "not measured again" if not point.confirmations else "measured again too few times"
    return f"{note} ({shown}: {why})"


def confirmation_json(plan: Plan, steps: Sequence[StepRecord]) -> dict[str, Any]:
    """The confirmation settings and every point measured again, in the order they were examined."""
    spec = plan.confirm
    examined = []
    # In the order they were examined.
    for point in sorted((p for p in points(steps) if p.confirmations), key=lambda p: p.confirmations[0].n):
        if point.confirmations:
            judged = evidence(plan.objective, point, spec.sigmas)
            examined.append(
                {
                    "step": point.first,
                    "settings": point.settings,
                    "readings": len(point.readings),
                    "verdict": verdict(plan.objective, point, spec),
                    "constraints": [e.as_json() for e in judged],
                }
            )
    return {**spec.model_dump(), "examined": examined, "cancelled": cancelled_confirmations(steps)}


def current_json(inflight: InFlight | None) -> dict[str, Any] | None:
    """The command in flight (None when there is none)."""
    if inflight is None:
        return None
    return {
        "cmd": inflight.command.get("cmd"),
        "cmd_uid": inflight.uid(),
        "step": inflight.n,
        "kind": inflight.kind,
        "settings": inflight.settings,
        "attempt": inflight.attempts,
        "progress": inflight.progress,
        "message": inflight.message,
        "cancelled": inflight.cancelled,
    }


def space_json(space: SearchSpace | None) -> list[dict[str, Any]]:
    """The described settings (empty before DESCRIBE), pinned ones included."""
    if space is None:
        return []
    return [
        {
            "setting": p.label,
            "type": p.kind,
            "min": p.minimum if p.kind == "range" else None,
            "max": p.maximum if p.kind == "range" else None,
            "step": p.step if p.kind == "range" else None,
            "values": list(p.values) if p.kind == "enum" else None,
            "pinned": p.pinned,
            "value": p.value,
        }
        for p in space.parameters
    ]


def state_document(plan: Plan, steps: Sequence[StepRecord], phase: str) -> dict[str, Any]:
    """What the state file holds (``steps.load_steps`` reads it back)."""
    return {
        "version": STATE_VERSION,
        "app": plan.app,
        "plan": plan_summary(plan),
        "steps": steps_json(plan, steps),
        "best": best_json(plan, steps, phase),
    }
