"""The search space: the described settings, their grids, and how the search moves and measures them.

Settings are nested like the wire: ``{"web": {"cpu": 1.5, "gc": "g1"}}``. A ``SearchSpace`` is
built from the described components: ``range`` settings on their ``step`` grid (continuous when
the step is 0), ``enum`` settings, ``pinned`` ones fixed at their value.

The search measures distances in *unit coordinates*: each range maps to [0, 1], on a log scale
when it spans a factor of ``LOG_SCALE_RATIO`` or more (cores 0.25-4, replicas 1-10: resources act
multiplicatively, so 1 -> 2 replicas is as big a move as 4 -> 8). An enum becomes one indicator per
value, scaled so that two different values are 1 apart.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "CONTINUOUS_NEIGHBOUR",
    "ENUM_SCALE",
    "GRID_DECIMALS",
    "LOG_SCALE_RATIO",
    "Parameter",
    "SearchSpace",
    "Settings",
    "nest",
    "parameter_from_description",
]

Settings = dict[str, dict[str, Any]]

# Settings values on a float grid are rounded to this many decimals (0.1 + 0.2 is 0.3 here).
GRID_DECIMALS = 10
# A positive range whose max is at least this many times its min is measured on a log scale.
LOG_SCALE_RATIO = 4.0
# A continuous range's neighbours are this far away, in unit coordinates.
CONTINUOUS_NEIGHBOUR = 0.05
# Each enum indicator is scaled by this, so that two different values are 1 apart.
ENUM_SCALE = math.sqrt(0.5)


@dataclass(frozen=True)
class Parameter:
    """One described setting. ``kind`` is ``"range"`` (min/max/step) or ``"enum"`` (values)."""

    component: str
    name: str
    kind: Literal["range", "enum"]
    value: Any = None
    minimum: float = 0.0
    maximum: float = 0.0
    step: float = 0.0
    values: tuple[Any, ...] = ()
    pinned: bool = False

    @property
    def label(self) -> str:
        return f"{self.component}.{self.name}"

    @property
    def grid_points(self) -> int | None:
        """How many values a stepped range or an enum can take; None for a continuous range."""
        if self.kind == "enum":
            return len(self.values)
        if self.step <= 0:
            return None
        return int(math.floor((self.maximum - self.minimum) / self.step + 1e-9)) + 1

    @property
    def free(self) -> bool:
        """Whether the search may change it: not pinned and more than one value to choose from."""
        if self.pinned:
            return False
        points = self.grid_points
        return self.maximum > self.minimum if points is None else points > 1

    @property
    def log_scale(self) -> bool:
        """Whether unit coordinates are logarithmic (a positive range spanning LOG_SCALE_RATIO or more)."""
        return self.kind == "range" and self.minimum > 0 and self.maximum >= LOG_SCALE_RATIO * self.minimum

    @property
    def width(self) -> int:
        """How many features ``SearchSpace.encode`` gives this setting."""
        return len(self.values) if self.kind == "enum" else 1

    @property
    def _integral(self) -> bool:
        return all(
            isinstance(x, int) and not isinstance(x, bool) for x in (self.minimum, self.maximum, self.step)
        )

    def snap(self, value: Any) -> Any:
        """The nearest allowed value: on the step grid within [min, max], or one of the enum values."""
        if self.kind == "enum":
            if value not in self.values:
                raise ValueError(f"{self.label}: {value!r} is not one of {list(self.values)}")
            return value
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"{self.label}: {value!r} is not a number")
        points = self.grid_points
        if points is None:
            return min(max(float(value), self.minimum), self.maximum)
        index = min(max(round((value - self.minimum) / self.step), 0), points - 1)
        return self.value_at(index)

    def snap_or_lowest(self, value: Any) -> Any:
        """``snap(value)``, or the lowest allowed value when ``value`` cannot be snapped."""
        try:
            return self.snap(value)
        except ValueError:
            return self.values[0] if self.kind == "enum" else self.minimum

    def sample(self, rng: random.Random) -> Any:
        """A uniformly random allowed value."""
        if self.kind == "enum":
            return rng.choice(self.values)
        points = self.grid_points
        if points is None:
            return rng.uniform(self.minimum, self.maximum)
        return self.value_at(rng.randrange(points))

    def unit(self, value: Any) -> float:
        """Where a (snapped) range value lies in [0, 1]: linearly, or logarithmically for ``log_scale``."""
        if self.maximum <= self.minimum:
            return 0.0
        if self.log_scale:
            return math.log(float(value) / self.minimum) / math.log(self.maximum / self.minimum)
        return (float(value) - self.minimum) / (self.maximum - self.minimum)

    def from_unit(self, position: float) -> float:
        """The range value at ``position`` in [0, 1] (clamped), before snapping."""
        position = min(max(position, 0.0), 1.0)
        if self.log_scale:
            return self.minimum * (self.maximum / self.minimum) ** position
        return self.minimum + position * (self.maximum - self.minimum)

    def move(self, value: Any, delta: float, rng: random.Random) -> Any:
        """A range value ``delta`` away in unit coordinates, on the grid.

        The grid index is rounded up or down at random in proportion to how close it is, so a
        move smaller than a grid step still happens with matching probability (a replicas count
        of 1-10 would otherwise never move by a small radius).
        """
        target = self.from_unit(self.unit(value) + delta)
        points = self.grid_points
        if points is None:
            return target
        exact = (target - self.minimum) / self.step
        index = math.floor(exact)
        if rng.random() < exact - index:
            index += 1
        return self.value_at(min(max(index, 0), points - 1))

    def neighbours(self, value: Any) -> list[Any]:
        """The values next to ``value``: one grid step either side, or every other enum value."""
        if self.kind == "enum":
            return [v for v in self.values if v != value]
        points = self.grid_points
        if points is None:
            around = (
                self.from_unit(self.unit(value) + d) for d in (-CONTINUOUS_NEIGHBOUR, CONTINUOUS_NEIGHBOUR)
            )
            return [v for v in around if v != value]
        index = self._index(value)
        return [self.value_at(i) for i in (index - 1, index + 1) if 0 <= i < points]

    def value_at(self, index: int) -> Any:
        """The value at grid ``index`` of a stepped range (0 is the minimum)."""
        if self._integral:
            return int(self.minimum + index * self.step)
        return round(self.minimum + index * self.step, GRID_DECIMALS)

    def _index(self, value: Any) -> int:
        """Grid index of an allowed value (stepped ranges and enums)."""
        if self.kind == "enum":
            return self.values.index(value)
        return round((self.snap(value) - self.minimum) / self.step)


def parameter_from_description(component: str, name: str, described: Mapping[str, Any]) -> Parameter:
    """A ``Parameter`` from a described setting; ValueError naming it when the description is unusable."""
    label = f"{component}.{name}"
    kind = described.get("type", "range")
    pinned = bool(described.get("pinned", False))
    value = described.get("value")
    if kind == "enum":
        values = described.get("values")
        if not isinstance(values, list) or not values:
            raise ValueError(f"{label}: an enum setting needs a non-empty list of values")
        return Parameter(component, name, "enum", value=value, values=tuple(values), pinned=pinned)
    if kind != "range":
        raise ValueError(f"{label}: unknown setting type {kind!r} (range or enum)")
    numbers = {}
    for key, default in (("min", None), ("max", None), ("step", 0)):
        number = described.get(key, default)
        if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
            raise ValueError(f"{label}: {key} must be a number, not {number!r}")
        numbers[key] = number
    if numbers["min"] > numbers["max"]:
        raise ValueError(f"{label}: min {numbers['min']} is above max {numbers['max']}")
    if numbers["step"] < 0:
        raise ValueError(f"{label}: step must not be negative")
    return Parameter(
        component,
        name,
        "range",
        value=value,
        minimum=numbers["min"],
        maximum=numbers["max"],
        step=numbers["step"],
        pinned=pinned,
    )


@dataclass(frozen=True)
class SearchSpace:
    """Every described setting; the free ones are what the search moves."""

    parameters: tuple[Parameter, ...]

    @classmethod
    def from_components(cls, components: Mapping[str, Any]) -> SearchSpace:
        """From ``descriptor.application.components``; ValueError naming the bad setting."""
        parameters = []
        for component, body in components.items():
            settings = body.get("settings", {}) if isinstance(body, Mapping) else None
            if not isinstance(settings, Mapping):
                raise ValueError(f"{component}: settings must be a mapping")
            for name, described in settings.items():
                if not isinstance(described, Mapping):
                    raise ValueError(f"{component}.{name}: a setting must be a mapping")
                parameters.append(parameter_from_description(component, name, described))
        return cls(tuple(parameters))

    @property
    def free(self) -> tuple[Parameter, ...]:
        return tuple(p for p in self.parameters if p.free)

    def current(self) -> Settings:
        """The described values (as they are, even when off the grid)."""
        return nest((p, p.value) for p in self.parameters)

    def snap(self, settings: Mapping[str, Mapping[str, Any]]) -> Settings:
        """Every free setting snapped to what it allows; the others at their described value.

        A free setting that is missing or cannot be snapped (a step stored before the description
        changed) takes its described value, snapped.
        """
        chosen = []
        for p in self.parameters:
            if not p.free:
                chosen.append((p, p.value))
                continue
            try:
                chosen.append((p, p.snap(settings.get(p.component, {}).get(p.name, p.value))))
            except ValueError:
                chosen.append((p, p.snap_or_lowest(p.value)))
        return nest(chosen)

    def sample(self, rng: random.Random) -> Settings:
        """Uniformly random settings (pinned ones at their value): the random-search baseline."""
        return nest((p, p.sample(rng) if p.free else p.value) for p in self.parameters)

    def key(self, settings: Mapping[str, Mapping[str, Any]]) -> tuple[Any, ...]:
        """What makes two settings the same point, for not trying a point twice."""
        return tuple(_normal(settings.get(p.component, {}).get(p.name)) for p in self.free)

    def encode(self, settings: Mapping[str, Mapping[str, Any]]) -> list[float]:
        """Features of snapped settings for the surrogate: unit coordinates, enum indicators."""
        row: list[float] = []
        for p in self.free:
            value = settings[p.component][p.name]
            if p.kind == "enum":
                row.extend(ENUM_SCALE if value == v else 0.0 for v in p.values)
            else:
                row.append(p.unit(value))
        return row

    def replace(self, settings: Settings, changes: Mapping[str, Any]) -> Settings:
        """``settings`` with the values in ``changes`` (keyed by label) put in."""
        return nest((p, changes.get(p.label, settings[p.component][p.name])) for p in self.parameters)


def nest(pairs: Iterable[tuple[Parameter, Any]]) -> Settings:
    """``{component: {name: value}}`` from (parameter, value) pairs."""
    nested: Settings = {}
    for p, value in pairs:
        nested.setdefault(p.component, {})[p.name] = value
    return nested


def _normal(value: Any) -> Any:
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    return round(float(value), GRID_DECIMALS) if is_number else value
