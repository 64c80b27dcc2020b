"""Range-query results in wire shape: series ids, the step a range query may use, and the
conversion of Prometheus's series (NaN/Inf dropped). Pure: no HTTP here."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_POINTS_PER_SERIES",
    "RangeResult",
    "effective_step",
    "series_id",
    "wire_series",
    "wire_timestamp",
]

MAX_POINTS_PER_SERIES = 11_000
"""Prometheus refuses a range query whose step would give a series more points than this."""


def series_id(labels: Mapping[str, str]) -> str:
    """The stable id of a series: its labels sorted, as ``{code="200",job="web"}``."""
    return "{" + ",".join(f'{key}="{_escape_label(value)}"' for key, value in sorted(labels.items())) + "}"


def effective_step(start: float, end: float, step: float) -> float:
    """``step``, raised (to the next millisecond) when it would give more than MAX_POINTS_PER_SERIES."""
    smallest = (end - start) / (MAX_POINTS_PER_SERIES - 1)
    if step >= smallest:
        return step
    return math.ceil(smallest * 1000) / 1000


@dataclass
class RangeResult:
    """What one range query returned: the series in wire shape, and what had to be changed."""

    values: list[dict[str, Any]]
    step: float
    step_raised: bool
    dropped_points: int


def wire_series(raw: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Range-query results in wire shape, and how many NaN/Inf points were dropped (not JSON)."""
    series, dropped = [], 0
    for item in raw:
        data = []
        for stamp, text in item["values"]:
            value = float(text)
            if math.isfinite(value):
                data.append([wire_timestamp(stamp), value])
            else:
                dropped += 1
        series.append({"id": series_id(item["metric"]), "data": data})
    return series, dropped


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def wire_timestamp(stamp: float) -> float | int:
    """Whole-second timestamps as ints, as the wire example shows them."""
    stamp = float(stamp)
    return int(stamp) if stamp.is_integer() else round(stamp, 3)
