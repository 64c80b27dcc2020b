"""The ``prometheus`` connector's configuration: ``PrometheusConfig`` and its ``PrometheusMetric`` list."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from servo_actors.config.fields import Duration, StrictModel
from servo_actors.durations import format_duration

__all__ = ["AbsentPolicy", "DEFAULT_BASE_URL", "MIN_FAST_FAIL_PERIOD", "PrometheusConfig", "PrometheusMetric"]

DEFAULT_BASE_URL = "http://127.0.0.1:9090"
MIN_FAST_FAIL_PERIOD = 0.1
"""The shortest allowed ``fast_fail_period``: each evaluation is an HTTP query per condition."""

AbsentPolicy = Literal["ignore", "zero", "warn", "fail"]


class PrometheusMetric(StrictModel):
    """One metric: a PromQL query evaluated over the window every ``step`` seconds.

    ``absent`` says what an empty result means: ``ignore`` (no series), ``zero`` (one series of
    zeros), ``warn`` (no series and an annotation) or ``fail`` (the measurement fails).
    """

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$")
    unit: str = ""
    query: str
    step: Duration = 1.0
    absent: AbsentPolicy = "ignore"

    @field_validator("query")
    @classmethod
    def _query_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("query must not be empty")
        return value.strip()

    @field_validator("step")
    @classmethod
    def _step_positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("step must be more than 0")
        return value


class PrometheusConfig(StrictModel):
    """The connector's ``config`` section."""

    base_url: str = DEFAULT_BASE_URL
    timeout: Duration = 10.0
    retries: int = Field(1, ge=0, le=10)
    fast_fail_period: Duration = 5.0
    """How often the optimizer's SLO conditions are evaluated during the measurement window."""
    fast_fail_span: Duration | None = None
    """null: an evaluation reads each series' current value (an instant query); a duration: the
    mean of each series over that much time before the evaluation (a range query at the metric's step)."""
    fast_fail_skip: Duration = 0.0
    """No evaluation until this long after the measurement window began (the warmup never is)."""
    fast_fail_treat_zero_as_missing: bool = False
    """A value of exactly 0 counts as no data (not a violation; it breaks a streak), for metrics
    that read 0 when nothing was measured."""
    metrics: list[PrometheusMetric] = Field(min_length=1)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value.rstrip("/")

    @field_validator("timeout")
    @classmethod
    def _timeout_positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("timeout must be more than 0")
        return value

    @field_validator("fast_fail_period")
    @classmethod
    def _period_not_tiny(cls, value: float) -> float:
        if value < MIN_FAST_FAIL_PERIOD:
            raise ValueError(f"fast_fail_period must be at least {format_duration(MIN_FAST_FAIL_PERIOD)}")
        return value

    @field_validator("fast_fail_span")
    @classmethod
    def _span_positive(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError("fast_fail_span must be more than 0 (or null for the current value)")
        return value

    @field_validator("fast_fail_skip")
    @classmethod
    def _skip_not_negative(cls, value: float) -> float:
        if value < 0:
            raise ValueError("fast_fail_skip must not be negative")
        return value

    @field_validator("metrics")
    @classmethod
    def _unique_names(cls, metrics: list[PrometheusMetric]) -> list[PrometheusMetric]:
        seen: set[str] = set()
        for metric in metrics:
            if metric.name in seen:
                raise ValueError(f"metric name {metric.name!r} is used twice")
            seen.add(metric.name)
        return metrics
