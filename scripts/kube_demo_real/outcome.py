"""The one JSON line `scripts/kube-demo --json` prints, with the same keys for `--app real` and
`--app model` (docs/interface.md; docs/kube-cluster.md shows the values):

- ``slo_p99_ms``: the p99 latency objective (ms); ``rate_rps`` and ``path``: the load offered
  during every measurement (null with `--app model`, whose model reads no load);
- ``baseline`` and ``recommendation``: ``{setting: value}`` as `describe` names them; the
  recommendation is what the demo left applied, so it is the baseline again when the optimizer's
  recommendation was not adopted (servo_actors/demo/adoption.py);
- ``baseline_cost`` and ``recommendation_cost``: their cost;
- ``measured``: ``{"baseline": READINGS, "recommendation": READINGS}``, each ``{metric: {"mean",
  "spread", "values"}}`` (spread: the sample standard deviation); with `--app real` the demo's own
  re-measurements under the same load, with `--app model` the optimizer's readings of those
  settings. When the recommendation was not adopted, ``measured`` also has ``"candidate"``: the
  readings of the optimizer's recommendation that was not applied (`--app real` only).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

KEYS = (
    "slo_p99_ms",
    "rate_rps",
    "path",
    "baseline",
    "recommendation",
    "baseline_cost",
    "recommendation_cost",
    "measured",
)


def outcome_line(
    *,
    slo_p99_ms: float,
    rate_rps: float | None,
    path: str | None,
    baseline: Mapping[str, Any],
    recommendation: Mapping[str, Any],
    baseline_cost: float | None,
    recommendation_cost: float | None,
    measured: Mapping[str, Any],
) -> str:
    """The object as one line of JSON, its keys exactly KEYS."""
    values = {
        "slo_p99_ms": slo_p99_ms,
        "rate_rps": rate_rps,
        "path": path,
        "baseline": dict(baseline),
        "recommendation": dict(recommendation),
        "baseline_cost": baseline_cost,
        "recommendation_cost": recommendation_cost,
        "measured": dict(measured),
    }
    return json.dumps({key: values[key] for key in KEYS})


def readings(values: Mapping[str, Iterable[float]]) -> dict[str, dict[str, Any]]:
    """``{metric: {"mean", "spread", "values"}}`` of each metric's readings (none: left out)."""
    summaries = {}
    for name, given in sorted(values.items()):
        numbers = [float(v) for v in given]
        if numbers:
            spread = statistics.stdev(numbers) if len(numbers) > 1 else 0.0
            summaries[name] = {"mean": statistics.fmean(numbers), "spread": spread, "values": numbers}
    return summaries


def step_readings(driver_state: Mapping[str, Any], numbers: Iterable[int]) -> dict[str, dict[str, Any]]:
    """The optimizer's readings of the steps ``numbers`` (``/admin/state``'s driver part), per metric."""
    wanted = set(numbers)
    collected: dict[str, list[float]] = {}
    for step in driver_state.get("steps", []):
        if step.get("n") in wanted and step.get("status") == "ok":
            for name, value in (step.get("metrics") or {}).items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    collected.setdefault(name, []).append(float(value))
    return readings(collected)
