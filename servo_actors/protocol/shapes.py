"""The parts several messages share: a descriptor's settings and metrics (DESCRIPTION), the state
(ADJUST and ADJUSTMENT take the descriptor's shape), and measured metrics (MEASUREMENT)."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from servo_actors.protocol.wire_types import Number, PointNumber, Scalar, WireModel

__all__ = [
    "Application",
    "Component",
    "Descriptor",
    "MeasurementInfo",
    "Metric",
    "MetricInfo",
    "Setting",
    "State",
    "TimeSeries",
]


# --- descriptor and state -----------------------------------------------------------------------


class Setting(WireModel):
    """One setting of a component.

    In a descriptor (and an ADJUSTMENT state) it is typed: ``range`` needs ``min``, ``max`` and
    ``step``; ``enum`` needs ``values``. In an ADJUST command's state it is only ``{"value": v}``.
    """

    type: Literal["range", "enum"] | None = None
    value: Scalar | None = None
    min: Number | None = None
    max: Number | None = None
    step: Number | None = None
    values: list[Scalar] | None = None
    unit: str | None = None
    pinned: bool | None = None

    @model_validator(mode="after")
    def _fields_of_its_type(self) -> Setting:
        if self.type == "range":
            missing = [name for name in ("min", "max", "step") if getattr(self, name) is None]
            if missing:
                raise ValueError(f"a range setting needs {', '.join(missing)}")
        elif self.type == "enum" and self.values is None:
            raise ValueError("an enum setting needs values")
        return self


class Component(WireModel):
    settings: dict[str, Setting]


class Application(WireModel):
    components: dict[str, Component]


class MetricInfo(WireModel):
    unit: str | None = None


class MeasurementInfo(WireModel):
    metrics: dict[str, MetricInfo]


class Descriptor(WireModel):
    """DESCRIPTION's ``descriptor``: settings per component, and the metrics on offer."""

    application: Application
    measurement: MeasurementInfo | None = None


class State(WireModel):
    """ADJUST's and ADJUSTMENT's ``state``: the shape of ``descriptor``, ``{"application":
    {"components": ...}, "measurement": {"metrics": ...}}`` (ADJUST may leave ``measurement`` out)."""

    application: Application
    measurement: MeasurementInfo | None = None


# --- measurements -------------------------------------------------------------------------------


class TimeSeries(WireModel):
    """One series of a metric: ``{"id": "...", "data": [[epoch_seconds, value], ...]}``."""

    id: str | None = None
    data: list[tuple[PointNumber, PointNumber]]


class Metric(WireModel):
    """A measured metric: several time series (``values``), or a single reading (``value``)."""

    unit: str | None = None
    values: list[TimeSeries] | None = None
    value: Number | None = None

    @model_validator(mode="after")
    def _has_data(self) -> Metric:
        if self.values is None and self.value is None:
            raise ValueError("a metric needs values (time series) or value (a single reading)")
        return self
