"""The embedded optimizer's plan file: which app, how to measure, how many steps, what to optimize.

::

    app: example.com/web
    token: null                  # when set, requests must carry it (the server checks it)
    measure: {duration: 30s, warmup: 0s, delay: 0s}
    steps: 20                    # ADJUST/MEASURE rounds after the baseline
    objective:
      minimize: cost             # or maximize: METRIC
      constraints: ["p99_latency <= 250", "error_rate < 0.01"]
    # extensions (all optional)
    seed: 0                      # the search is reproducible for a given seed
    sleep: 2m                    # SLEEP duration once the plan is done
    settlement: 0s               # ADJUST control settlement
    metrics: null                # metrics to MEASURE; default: every described one + those above
    search: {initial_samples: 4} # random samples (the baseline counts) before the local search
    confirm: {repeats: 2, sigmas: 2, candidates: 3}  # re-measure the best before recommending it

A constraint is ``METRIC OP NUMBER`` with OP one of ``<= < >= > ==``, read by a small parser
(``parse_constraint``), never ``eval``. Every error names the file and the key at fault.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from servo_actors.config.fields import Duration, StrictModel, split_optimizer_id
from servo_actors.config.problems import config_error, problems_from_validation
from servo_actors.errors import ConfigError

__all__ = [
    "ConfirmSpec",
    "Constraint",
    "ConstraintField",
    "METRIC_NAME",
    "MIN_VIOLATION",
    "MeasureSpec",
    "Objective",
    "Plan",
    "SearchOptions",
    "load_plan",
    "parse_constraint",
    "parse_plan",
    "plan_summary",
]

# A constraint that does not hold is violated by at least this much, so "violated" is never 0.
MIN_VIOLATION = 1e-9

_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
    "==": operator.eq,
}
_METRIC = r"[A-Za-z_][A-Za-z0-9_.:-]*"
_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_CONSTRAINT = re.compile(rf"^\s*({_METRIC})\s*(<=|>=|==|<|>)\s*({_NUMBER})\s*$")
METRIC_NAME = re.compile(rf"^{_METRIC}$")
"""A metric's name as a plan writes it (objective, constraints, metrics): the whole string matches."""


@dataclass(frozen=True)
class Constraint:
    """``metric op bound``, e.g. ``p99_latency <= 250``. A missing metric never meets it."""

    metric: str
    op: str
    bound: float

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.bound:g}"

    def holds(self, value: float | None) -> bool:
        if value is None or math.isnan(value):
            return False
        return _OPERATORS[self.op](value, self.bound)

    def violation(self, value: float | None) -> float:
        """0 when it holds; else how far off, relative to the bound; ``inf`` when the metric is missing."""
        if value is None or math.isnan(value):
            return math.inf
        if self.holds(value):
            return 0.0
        return max(abs(value - self.bound) / max(abs(self.bound), 1.0), MIN_VIOLATION)


def parse_constraint(text: object) -> Constraint:
    """``Constraint`` from ``"p99_latency <= 250"``; ValueError saying what is wrong. No eval."""
    if isinstance(text, Constraint):
        return text
    if not isinstance(text, str):
        raise ValueError(f"a constraint is a string like 'p99_latency <= 250', not {text!r}")
    match = _CONSTRAINT.match(text)
    if not match:
        raise ValueError(
            f"{text!r} is not a constraint: write METRIC OP NUMBER with OP one of <= < >= > ==, "
            "e.g. 'p99_latency <= 250'"
        )
    metric, op, number = match.groups()
    return Constraint(metric=metric, op=op, bound=float(number))


def _metric_name(value: str) -> str:
    if not METRIC_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a metric name")
    return value


ConstraintField = Annotated[Constraint, BeforeValidator(parse_constraint)]


class MeasureSpec(StrictModel):
    """The control of every MEASURE the plan sends (seconds)."""

    model_config = ConfigDict(frozen=True)

    duration: Duration = 30.0
    warmup: Duration = 0.0
    delay: Duration = 0.0


class Objective(StrictModel):
    """Exactly one of ``minimize`` / ``maximize``, plus constraints every good step must meet."""

    model_config = ConfigDict(frozen=True)

    minimize: str | None = None
    maximize: str | None = None
    constraints: list[ConstraintField] = Field(default_factory=list)

    @field_validator("minimize", "maximize")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return None if value is None else _metric_name(value)

    @model_validator(mode="after")
    def _exactly_one(self) -> Objective:
        if (self.minimize is None) == (self.maximize is None):
            raise ValueError("set exactly one of minimize or maximize")
        return self

    @property
    def metric(self) -> str:
        return self.minimize if self.minimize is not None else str(self.maximize)

    @property
    def sense(self) -> str:
        return "minimize" if self.minimize is not None else "maximize"


class SearchOptions(StrictModel):
    """Tuning of the search strategy (strategy.py)."""

    model_config = ConfigDict(frozen=True)

    # Random samples, the baseline included, before the local search starts.
    initial_samples: int = Field(4, ge=1, le=1000)


class ConfirmSpec(StrictModel):
    """How the best step is confirmed before it is recommended (confirm.py).

    After the search steps, the best-looking settings are measured ``repeats`` more times; they
    are recommended only if every constraint holds with a margin of ``sigmas`` standard errors of
    the mean of all their readings. Up to ``candidates`` settings are tried, best first, until one
    holds. ``repeats: 0`` turns confirmation off (the best step is then labelled unconfirmed).
    A cancelled confirmation step is no reading and is measured again, as long as fewer than
    ``cancels`` confirmation steps were cancelled in all (then confirmation stops, and says so).
    """

    model_config = ConfigDict(frozen=True)

    repeats: int = Field(2, ge=0, le=100)
    sigmas: float = Field(2.0, ge=0.0, le=10.0)
    candidates: int = Field(3, ge=1, le=100)
    cancels: int = Field(10, ge=0, le=1000)


class Plan(StrictModel):
    model_config = ConfigDict(frozen=True)

    app: str
    token: SecretStr | None = None
    measure: MeasureSpec = MeasureSpec()
    steps: int = Field(20, ge=0, le=100_000)
    objective: Objective
    seed: int = 0
    sleep: Duration = 120.0
    settlement: Duration = 0.0
    metrics: list[str] | None = None
    search: SearchOptions = SearchOptions()
    confirm: ConfirmSpec = ConfirmSpec()

    @field_validator("app")
    @classmethod
    def _org_app(cls, value: str) -> str:
        split_optimizer_id(value)
        return value

    @field_validator("metrics")
    @classmethod
    def _metric_names(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else [_metric_name(name) for name in value]


def plan_summary(plan: Plan) -> dict[str, Any]:
    """A JSON-able view of ``plan`` for ``/admin/state`` and the state file; never the token."""
    objective: dict[str, Any] = {
        plan.objective.sense: plan.objective.metric,
        "constraints": [str(c) for c in plan.objective.constraints],
    }
    return {
        "app": plan.app,
        "steps": plan.steps,
        "measure": plan.measure.model_dump(),
        "objective": objective,
        "seed": plan.seed,
        "sleep": plan.sleep,
        "settlement": plan.settlement,
        "confirm": plan.confirm.model_dump(),
    }


def parse_plan(data: object, *, source: str = "plan") -> Plan:
    """A ``Plan`` from a mapping (the parsed YAML); ConfigError naming ``source`` and the key."""
    if isinstance(data, Plan):
        return data
    if not isinstance(data, dict):
        raise ConfigError(
            f"a plan is a mapping with app, steps, objective..., not {type(data).__name__}", source=source
        )
    try:
        return Plan.model_validate(data)
    except ValidationError as exc:
        raise config_error(problems_from_validation(exc, model=Plan, source=source)) from None


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan file (YAML or JSON)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"cannot read the plan: {getattr(exc, 'strerror', None) or exc}", source=str(path)
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", source=str(path)) from None
    return parse_plan(data, source=str(path))
