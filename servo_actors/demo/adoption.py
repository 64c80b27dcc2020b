"""Whether a run's recommendation may be applied, or the baseline stays in place.

A demo (or any tool) that applies what the optimizer recommends applies it only when it is
*confirmed* (measured again, every constraint held with the margin: optimizer/confirm.py) and
*better* than the baseline on the objective. Anything else (an unconfirmed point, the baseline
itself, a point no better than it) leaves the baseline's settings in place, with the reason.

Pure: reads ``/admin/state``'s ``driver`` part, the same JSON the summary reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Adoption:
    """What to leave the application with: ``settings`` (nested by component), and why."""

    settings: dict[str, Any]
    recommendation: bool  # True: the recommendation; False: the baseline
    reason: str


def adoption(driver_state: dict[str, Any]) -> Adoption | None:
    """The settings to apply after a run; None when there is no baseline reading to fall back on."""
    step0 = next((s for s in driver_state.get("steps", []) if s.get("n") == 0), None)
    if step0 is None or not step0.get("settings"):
        return None
    kept = step0["settings"]
    # The baseline as a point (all its readings) when the optimizer gives it, else step 0 alone.
    baseline = driver_state.get("baseline") or {
        "objective": step0.get("objective"),
        "holds": step0.get("status") == "ok" and bool(step0.get("feasible")),
    }
    best = driver_state.get("best")
    if not best:
        return Adoption(kept, False, "the optimization ended without a recommendation")
    if best.get("step") == 0:
        return Adoption(kept, False, "the recommendation is the baseline")
    if not best.get("confirmed"):
        note = best.get("note") or "not measured again enough"
        return Adoption(kept, False, f"the recommendation (step {best.get('step')}) is not confirmed: {note}")
    objective = driver_state.get("plan", {}).get("objective", {})
    sense = "maximize" if "maximize" in objective else "minimize"
    before, after = baseline.get("objective"), best.get("objective")
    if baseline.get("holds") and _number(before):
        if not _number(after):
            return Adoption(
                kept, False, f"the recommendation (step {best.get('step')}) has no objective value"
            )
        better = after < before if sense == "minimize" else after > before
        if not better:
            return Adoption(
                kept,
                False,
                f"the recommendation (step {best.get('step')}) is no better than the baseline "
                f"({objective.get(sense)} {after:.4g} against {before:.4g})",
            )
    return Adoption(
        best["settings"], True, f"the recommendation (step {best.get('step')}) is confirmed and better"
    )


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
