"""A search step: what it records, how it is judged against the objective, how it is stored.

The state file (JSON) holds ``{"version": 1, "app": ..., "plan": ..., "steps": [...], "best": ...}``.
Only each step's ``n``, ``settings``, ``status``, ``reason``, ``message``, ``metrics``,
``finished_at`` and ``confirms`` are read back: whether it was feasible, its objective and the best so far are
recomputed with the plan in force. It is written whole each time, atomically (a sibling
temporary file, fsync, rename), so a crash leaves the old file or the new one, never half.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servo_actors.config.problems import config_error, problems_from_validation
from servo_actors.errors import ConfigError
from servo_actors.optimizer.plan import Objective
from servo_actors.optimizer.space import Settings
from servo_actors.optimizer.trials import Trial, constraint_margin

__all__ = [
    "Assessment",
    "STATE_VERSION",
    "STATUSES",
    "StepRecord",
    "applied_settings",
    "assess",
    "finite",
    "load_steps",
    "reduce_metrics",
    "step_trial",
    "write_atomically",
]

STATE_VERSION = 1
STATUSES = ("ok", "failed", "rejected", "aborted", "cancelled")


def reduce_metrics(metrics: object) -> dict[str, float]:
    """One number per metric from a MEASUREMENT's ``metrics``.

    Time series: the mean of every point of every series (series are instances or label sets of
    one quantity, so every point weighs the same). A single reading ``{"value": v}``: ``v``.
    Points that are not finite numbers are skipped; a metric with no usable point is left out.
    """
    reduced: dict[str, float] = {}
    if not isinstance(metrics, Mapping):
        return reduced
    for name, body in metrics.items():
        if not isinstance(body, Mapping):
            continue
        if isinstance(body.get("values"), list):
            points = [
                point[1]
                for series in body["values"]
                if isinstance(series, Mapping) and isinstance(series.get("data"), list)
                for point in series["data"]
                if isinstance(point, list | tuple) and len(point) >= 2 and finite(point[1])
            ]
            if points:
                reduced[str(name)] = sum(points) / len(points)
        elif finite(body.get("value")):
            reduced[str(name)] = float(body["value"])
    return reduced


def finite(value: object) -> bool:
    """A real number that is neither NaN nor infinite (bools are not numbers here)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class StepRecord:
    """One finished step, as stored in the state file."""

    n: int
    settings: Settings
    status: str
    reason: str | None = None
    message: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    finished_at: float = 0.0
    confirms: int | None = None  # a confirmation step: the first step at these settings (confirm.py)


@dataclass(frozen=True)
class Assessment:
    """A step judged against the plan's objective."""

    feasible: bool
    objective: float | None
    violation: float
    constraints: list[dict[str, Any]]


def assess(objective: Objective, record: StepRecord) -> Assessment:
    """Whether ``record`` met every constraint, its objective value and its total violation."""
    checks = []
    violation = 0.0 if record.status == "ok" else math.inf
    for constraint in objective.constraints:
        value = record.metrics.get(constraint.metric)
        checks.append({"constraint": str(constraint), "value": value, "met": constraint.holds(value)})
        violation += constraint.violation(value)
    value = record.metrics.get(objective.metric)
    return Assessment(violation == 0.0, value, violation, checks)


def step_trial(objective: Objective, record: StepRecord) -> Trial:
    """A step as the strategy sees it: its score (lower is better), violation and constraint margins."""
    judged = assess(objective, record)
    score = None
    if judged.objective is not None:
        score = judged.objective if objective.sense == "minimize" else -judged.objective
    # Per constraint, how far from its bound: the strategy models each one (inf when unknown).
    margins = tuple(
        constraint_margin(record.metrics.get(c.metric), c.op, c.bound) if record.status == "ok" else math.inf
        for c in objective.constraints
    )
    return Trial(
        record.settings, score, judged.violation, informative=record.status != "cancelled", margins=margins
    )


def applied_settings(requested: Settings, state: object) -> Settings:
    """The settings in force: the ADJUSTMENT's ``state`` where it says, what was asked for elsewhere."""
    applied = {component: dict(values) for component, values in requested.items()}
    try:
        components = state["application"]["components"]  # type: ignore[index]  # untrusted JSON: a wrong shape is caught below
        for component, body in components.items():
            for name, setting in body["settings"].items():
                if component in applied and name in applied[component] and "value" in setting:
                    applied[component][name] = setting["value"]
    except (TypeError, KeyError, AttributeError):
        pass  # a partial or odd state: keep what was asked for
    return applied


class _StoredStep(BaseModel):
    model_config = ConfigDict(extra="ignore")  # derived keys (feasible, objective...) are recomputed

    n: int = Field(ge=0)
    settings: dict[str, dict[str, Any]]
    status: Literal["ok", "failed", "rejected", "aborted", "cancelled"]
    reason: str | None = None
    message: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    finished_at: float = 0.0
    confirms: int | None = Field(None, ge=0)


class _StoredState(BaseModel):
    model_config = ConfigDict(extra="ignore")

    version: Literal[1]
    app: str
    steps: list[_StoredStep]


def load_steps(path: Path, app: str) -> list[StepRecord]:
    """The steps stored in ``path`` (none if it does not exist); ConfigError naming it when unusable."""
    source = str(path)
    if not path.exists():
        if not path.parent.is_dir():
            raise ConfigError(f"the directory {path.parent} does not exist", source=source)
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(
            f"corrupt optimizer state file ({exc}); move it away to start afresh", source=source
        ) from None
    if not isinstance(data, dict):
        raise ConfigError("corrupt optimizer state file: not a JSON object", source=source)
    try:
        stored = _StoredState.model_validate(data)
    except ValidationError as exc:
        raise config_error(problems_from_validation(exc, model=_StoredState, source=source)) from None
    if stored.app != app:
        raise ConfigError(
            f"this state file is for app {stored.app!r}, the plan is for {app!r}; use another state file",
            source=source,
            key="app",
        )
    numbers = [step.n for step in stored.steps]
    if numbers != sorted(set(numbers)):
        raise ConfigError(
            "corrupt optimizer state file: step numbers repeat or are out of order",
            source=source,
            key="steps",
        )
    return [StepRecord(**step.model_dump()) for step in stored.steps]


def write_atomically(path: Path, text: str) -> None:
    """Readers see the old file or the new one, never half of one: write a sibling, fsync, rename."""
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
