"""What the demo prints from the optimizer's record: a step's line, settings, the closing summary.

Pure text from ``/admin/state``'s JSON (no I/O, no clock), apart from the run so the wording can
be read and tested on its own (tests/optimizer_server/test_optimizer_demo_summary.py).
"""

from __future__ import annotations

import math
from typing import Any

from servo_actors.readable import counted, number_text

__all__ = ["described_settings", "settings_text", "step_line", "summary_lines"]


def summary_lines(driver_state: dict[str, Any]) -> list[str]:
    """The demo's closing summary: baseline against recommendation, per setting and per metric.

    ``driver_state`` is ``/admin/state``'s ``driver`` part. The recommendation's metrics, and the
    baseline's, are the means of their readings; each constraint is shown with its standard error and reading count.
    Improvement is in percent of the baseline, positive when the recommendation is better: lower
    for a minimized objective, higher for a maximized one. Metrics that are neither the objective
    nor constrained show their change only. One verdict runs through every line: a recommendation
    that is not confirmed never has a constraint line saying it holds.
    """
    best = driver_state.get("best")
    baseline = _baseline(driver_state)
    if not best or not baseline:
        return ["summary: no baseline reading and recommendation to compare"]
    plan = driver_state.get("plan", {})
    objective = plan.get("objective", {})
    sense = "minimize" if "minimize" in objective else "maximize"
    target = objective.get(sense)
    confirmed = bool(best.get("confirmed"))
    verdict = "confirmed" if confirmed else "NOT CONFIRMED"
    note = best.get("note") or ""
    lines = [
        f"summary: baseline (step 0) -> recommendation (step {best['step']}), {verdict}"
        + (f": {note}" if note else "")
    ]
    flat_base, flat_best = _flat(baseline.get("settings") or {}), _flat(best.get("settings") or {})
    changes = [
        f"{k} {number_text(flat_base.get(k))} -> {number_text(v)}"
        for k, v in flat_best.items()
        if flat_base.get(k) != v
    ]
    lines.append("  settings: " + (", ".join(changes) if changes else "unchanged"))
    limits: dict[str, list[str]] = {}
    for judged in best.get("constraints") or []:
        metric = str(judged["constraint"]).split()[0]
        limits.setdefault(metric, []).append(str(judged["constraint"]).split(" ", 1)[1])
    names = [target] + sorted(n for n in best.get("metrics", {}) if n != target)
    lines.append(f"  {'metric':<16}{'baseline':>12}{'recommended':>14}{'change':>10}   note")
    for name in names:
        before, after = baseline.get("metrics", {}).get(name), best.get("metrics", {}).get(name)
        if before is None or after is None:
            continue
        change = (after - before) / abs(before) * 100 if before else math.nan
        shown = f"{change:+.1f} %" if math.isfinite(change) else "-"
        if name == target:
            better = (-change if sense == "minimize" else change) + 0.0  # never "-0.0 % better"
            note = f"objective ({sense}): {better:.1f} % better" if math.isfinite(better) else "objective"
            if math.isfinite(better) and better < 0:
                note = f"objective ({sense}): {-better:.1f} % worse"
        elif name in limits:
            note = "limit " + ", ".join(limits[name])
        else:
            note = ""
        lines.append(
            f"  {name:<16}{number_text(before):>12}{number_text(after):>14}{shown:>10}   {note}".rstrip()
        )
    for judged in best.get("constraints") or []:
        spread = judged.get("uncertainty")
        value = number_text(judged.get("value")) + (f" ± {spread:.2g}" if spread is not None else "")
        readings = judged.get("readings")
        lines.append(
            f"  {judged['constraint']}: {value} ({counted(readings, 'reading')}) {_verdict(judged, confirmed)}"
        )
    return lines


def _baseline(driver_state: dict[str, Any]) -> dict[str, Any] | None:
    """The baseline as a point (the means of all its readings), else step 0's own reading."""
    if driver_state.get("baseline"):
        return dict(driver_state["baseline"])
    step = next((s for s in driver_state.get("steps", []) if s.get("n") == 0), None)
    return step if step is not None and step.get("status") == "ok" else None


def _verdict(judged: dict[str, Any], confirmed: bool) -> str:
    """One constraint's line, in the words of the recommendation's verdict."""
    if not judged.get("met"):
        return "does NOT hold"
    if judged.get("uncertainty") is None and not confirmed:
        return "holds in a single reading: no margin yet, not confirmed"
    if not judged.get("met_with_margin"):
        return "holds, but NOT with margin"
    return "holds with margin" if confirmed else "holds with margin so far: not confirmed"


def _flat(settings: dict[str, Any]) -> dict[str, Any]:
    return {
        f"{component}.{name}": value
        for component, values in settings.items()
        if isinstance(values, dict)
        for name, value in values.items()
    }


def described_settings(detail: dict[str, Any]) -> dict[str, Any]:
    components = detail.get("data", {}).get("components", {})
    return {
        f"{name}.{key}": setting.get("value")
        for name, body in components.items()
        for key, setting in body.get("settings", {}).items()
    }


def step_line(step: dict[str, Any]) -> str:
    metrics = step.get("metrics") or {}
    shown = " ".join(
        f"{k}={number_text(metrics[k])}" for k in ("cost", "p99_latency", "error_rate") if k in metrics
    )
    if step.get("confirms") is not None:
        shown += f"  [confirming step {step['confirms']}]"
    mark = (
        "feasible"
        if step.get("feasible")
        else (step.get("status") if step.get("status") != "ok" else "violates")
    )
    return f"step {step['n']:>2}: {settings_text(step.get('settings') or {})}  {shown}  [{mark}]"


def settings_text(settings: dict[str, Any]) -> str:
    """``cpu=1 memory=2`` from flat ``{"web.cpu": 1}`` or nested ``{"web": {"cpu": 1}}`` settings."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update({name: inner for name, inner in value.items()})
        else:
            flat[key.split(".")[-1]] = value
    return " ".join(f"{k}={number_text(v)}" for k, v in sorted(flat.items())) or "-"
