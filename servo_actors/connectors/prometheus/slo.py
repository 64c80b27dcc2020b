"""The service-level conditions a measurement is cut short on: ``SloCondition`` (as the optimizer
sends it in ``userdata.slo.conditions``) and ``ViolationStreak`` (evaluations in a row)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SloCondition", "ViolationStreak"]


class SloCondition(BaseModel):
    """A service-level condition from ``userdata.slo.conditions`` (extra keys are the optimizer's)."""

    model_config = ConfigDict(extra="ignore")

    metric: str
    threshold: float
    keep: Literal["below", "above"] = "below"
    trigger_count: int = Field(1, ge=1)

    def violated_by(self, value: float) -> bool:
        return value > self.threshold if self.keep == "below" else value < self.threshold


class ViolationStreak:
    """How many evaluations in a row broke one condition; tripped at its ``trigger_count``.

    >>> streak = ViolationStreak(SloCondition(metric="p99", threshold=0.1, trigger_count=2))
    >>> [streak.observe(v) for v in (0.3, 0.05, 0.3, 0.3)]
    [False, False, False, True]

    ``None`` (no data) is not a violation, and breaks the streak like a good value does.
    """

    def __init__(self, condition: SloCondition) -> None:
        self.condition = condition
        self.count = 0

    def observe(self, value: float | None) -> bool:
        self.count = self.count + 1 if value is not None and self.condition.violated_by(value) else 0
        return self.count >= self.condition.trigger_count
