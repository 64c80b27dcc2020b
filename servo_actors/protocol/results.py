"""What the servo posts: the params of HELLO and GOODBYE, the results of the commands
(DESCRIPTION, MEASUREMENT, ADJUSTMENT) and the progress posted under a result event."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from servo_actors.protocol.shapes import Descriptor, Metric, State
from servo_actors.protocol.wire_types import Event, FreeDict, Number, ServoStatusName, WireModel, Word

__all__ = [
    "AdjustmentResult",
    "DescriptionResult",
    "GoodbyeParam",
    "HelloParam",
    "MeasurementResult",
    "Progress",
    "RESULT_MODELS",
    "ResultStatus",
]


class HelloParam(WireModel):
    agent: str
    telemetry: FreeDict = Field(default_factory=dict)


class GoodbyeParam(WireModel):
    reason: str


class ResultStatus(WireModel):
    """The status fields every result carries."""

    status: ServoStatusName
    reason: Word
    message: str | None = None
    cmd_uid: str | None = None


class DescriptionResult(ResultStatus):
    descriptor: Descriptor | None = None

    @model_validator(mode="after")
    def _ok_has_descriptor(self) -> DescriptionResult:
        if self.status == "ok" and self.descriptor is None:
            raise ValueError("an ok DESCRIPTION needs a descriptor")
        return self


class MeasurementResult(ResultStatus):
    metrics: dict[str, Metric] | None = None
    annotations: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _ok_has_metrics(self) -> MeasurementResult:
        if self.status == "ok" and self.metrics is None:
            raise ValueError("an ok MEASUREMENT needs metrics")
        return self


class AdjustmentResult(ResultStatus):
    state: State | None = None

    @model_validator(mode="after")
    def _ok_has_state(self) -> AdjustmentResult:
        if self.status == "ok" and self.state is None:
            raise ValueError("an ok ADJUSTMENT needs a state")
        return self


class Progress(WireModel):
    """A progress post under a result event. It has no ``status`` key: that tells it from a result."""

    progress: Number = Field(ge=0, le=100)
    runtime: Number = Field(default=0, ge=0)
    cmd_uid: str | None = None
    message: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_status(cls, data: Any) -> Any:
        if isinstance(data, dict) and "status" in data:
            raise ValueError("progress has no status key (a status makes it a result)")
        return data


RESULT_MODELS: dict[str, type[ResultStatus]] = {
    Event.DESCRIPTION: DescriptionResult,
    Event.MEASUREMENT: MeasurementResult,
    Event.ADJUSTMENT: AdjustmentResult,
}
"""The model of each result event's result."""
