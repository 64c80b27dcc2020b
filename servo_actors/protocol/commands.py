"""What the optimizer sends: the commands that answer WHATS_NEXT (DESCRIBE, MEASURE, ADJUST,
SLEEP) and its status answer to anything else. They tolerate extra keys, kept on dump."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field

from servo_actors.protocol.shapes import State
from servo_actors.protocol.wire_types import (
    CommandName,
    FreeDict,
    OptimizerStatusName,
    WireDuration,
    WireModel,
    none_as_empty,
)

__all__ = [
    "AdjustCommand",
    "AdjustParam",
    "COMMAND_MODELS",
    "Command",
    "Control",
    "DescribeCommand",
    "DescribeParam",
    "MeasureCommand",
    "MeasureParam",
    "OptimizerStatus",
    "SLEEP_DEFAULT_SECONDS",
    "SleepCommand",
    "SleepParam",
]

# SLEEP without a duration sleeps this long (docs/protocol.md, "SLEEP").
SLEEP_DEFAULT_SECONDS = 120.0


def _metric_names(value: Any) -> Any:
    # MEASURE names metrics as a list, or as a {name: {"unit": ...}} map whose keys count.
    if value is None:
        return []
    if isinstance(value, dict):
        return list(value)
    return value


class Control(WireModel):
    """How a MEASURE or ADJUST should run. Durations are seconds (floats)."""

    duration: WireDuration = 0.0
    warmup: WireDuration = 0.0
    delay: WireDuration = 0.0
    settlement: WireDuration = 0.0
    load: FreeDict = Field(default_factory=dict)
    environment: FreeDict = Field(default_factory=dict)
    userdata: FreeDict = Field(default_factory=dict)
    """Free for the user; ``userdata.slo`` holds service-level conditions."""


class DescribeParam(WireModel):
    pass


class MeasureParam(WireModel):
    metrics: Annotated[list[str], BeforeValidator(_metric_names)] = Field(default_factory=list)
    """Names of the metrics wanted (empty: the optimizer named none)."""
    control: Annotated[Control, BeforeValidator(none_as_empty)] = Field(default_factory=Control)


class AdjustParam(WireModel):
    state: State
    control: Annotated[Control, BeforeValidator(none_as_empty)] = Field(default_factory=Control)


class SleepParam(WireModel):
    duration: Annotated[
        WireDuration, BeforeValidator(lambda v: SLEEP_DEFAULT_SECONDS if v is None else v)
    ] = SLEEP_DEFAULT_SECONDS
    data: dict[str, Any] | None = None


class DescribeCommand(WireModel):
    cmd: Literal["DESCRIBE"]
    cmd_uid: str | None = None
    param: Annotated[DescribeParam, BeforeValidator(none_as_empty)] = Field(default_factory=DescribeParam)


class MeasureCommand(WireModel):
    cmd: Literal["MEASURE"]
    cmd_uid: str | None = None
    param: Annotated[MeasureParam, BeforeValidator(none_as_empty)] = Field(default_factory=MeasureParam)


class AdjustCommand(WireModel):
    cmd: Literal["ADJUST"]
    cmd_uid: str | None = None
    param: AdjustParam


class SleepCommand(WireModel):
    """No cmd_uid and no result: the servo sleeps ``param.duration`` seconds, then polls again."""

    cmd: Literal["SLEEP"]
    cmd_uid: str | None = None
    param: Annotated[SleepParam, BeforeValidator(none_as_empty)] = Field(default_factory=SleepParam)


Command = DescribeCommand | MeasureCommand | AdjustCommand | SleepCommand

COMMAND_MODELS: dict[str, type[BaseModel]] = {
    CommandName.DESCRIBE: DescribeCommand,
    CommandName.MEASURE: MeasureCommand,
    CommandName.ADJUST: AdjustCommand,
    CommandName.SLEEP: SleepCommand,
}
"""The model of each command, by its ``cmd``."""


class OptimizerStatus(WireModel):
    """The optimizer's answer to anything but WHATS_NEXT: ``{"status": "ok"}``, ``cancel``..."""

    status: OptimizerStatusName
    message: str | None = None
    reason: str | None = None
