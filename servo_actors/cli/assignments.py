"""``adjust``'s arguments: ``COMPONENT.SETTING=VALUE`` parsed, then checked and converted against
what the connectors describe, into the ADJUST request.

Apart from the command: pure functions of the arguments and the description (no connectors,
nothing printed), tested on their own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from servo_actors.cli.operation_output import number_text
from servo_actors.errors import UsageError

__all__ = ["STEP_TOLERANCE", "convert_value", "nearest_on_grid", "parse_assignments", "resolve_assignments"]

STEP_TOLERANCE = 1e-6
"""How far from the step grid (in steps) a value may be: absorbs float error such as 0.1 + 0.2."""


def parse_assignments(arguments: Sequence[str]) -> list[tuple[str, str]]:
    """``["web.cpu=1.5"]`` -> ``[("web.cpu", "1.5")]``; UsageError for anything else or a repeat.

    >>> parse_assignments(["web.cpu=1.5", "web.gc=g1"])
    [('web.cpu', '1.5'), ('web.gc', 'g1')]
    """
    found: list[tuple[str, str]] = []
    for argument in arguments:
        target, equals, raw = argument.partition("=")
        component, dot, setting = target.strip().rpartition(".")
        if not equals or not dot or not component or not setting:
            raise UsageError(f"{argument!r} is not COMPONENT.SETTING=VALUE (e.g. web.cpu=1.5)")
        if any(target.strip() == seen for seen, _ in found):
            raise UsageError(f"{target.strip()} is given more than once")
        found.append((target.strip(), raw.strip()))
    return found


def _locate(target: str, components: dict[str, Any]) -> tuple[str, str]:
    """Split ``target`` at the dot that names a described component and setting (names may hold dots)."""
    parts = target.split(".")
    for index in range(len(parts) - 1, 0, -1):
        component, setting = ".".join(parts[:index]), ".".join(parts[index:])
        if setting in ((components.get(component) or {}).get("settings") or {}):
            return component, setting
    for index in range(len(parts) - 1, 0, -1):
        component, setting = ".".join(parts[:index]), ".".join(parts[index:])
        if component in components:
            known = ", ".join((components[component] or {}).get("settings") or {}) or "none"
            raise UsageError(f"unknown setting {setting!r} in {target} (settings of {component}: {known})")
    component = target.rpartition(".")[0]
    raise UsageError(
        f"unknown component {component!r} in {target} (known: {', '.join(components) or 'none'})"
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def convert_value(where: str, setting: dict[str, Any], raw: str) -> Any:
    """``raw`` as the value ``setting`` (a described setting) accepts, or UsageError naming ``where``.

    Range: a number within [min, max] on the grid min + k * step, an int when min and step are
    ints. Enum: one of its values (as declared). Any other type: a number if it reads as one,
    else the text.
    """
    if setting.get("pinned"):
        raise UsageError(f"{where} is pinned: it cannot be adjusted")
    kind = setting.get("type")
    if kind == "enum":
        for value in setting.get("values") or []:
            if str(value) == raw:
                return value
        choices = ", ".join(str(v) for v in setting.get("values") or [])
        raise UsageError(f"{where}={raw!r} is not one of its values: {choices}")
    try:
        number = float(raw)
    except ValueError:
        if kind == "range":
            raise UsageError(f"{where}={raw!r} is not a number") from None
        return raw
    if not math.isfinite(number):
        raise UsageError(f"{where}={raw!r} is not a finite number")
    if kind != "range":
        return int(number) if number.is_integer() and "." not in raw else number
    low, high, step = setting.get("min"), setting.get("max"), setting.get("step")
    if (low is not None and number < low) or (high is not None and number > high):
        raise UsageError(f"{where}={raw} is outside its range {number_text(low)}..{number_text(high)}")
    if step and low is not None:
        steps = (number - low) / step
        if abs(steps - round(steps)) > STEP_TOLERANCE:
            nearest = " or ".join(number_text(v) for v in nearest_on_grid(number, low, high, step))
            raise UsageError(
                f"{where}={raw} is not on the step {number_text(step)} from {number_text(low)} (nearest: {nearest})"
            )
    if _is_int(step) and (low is None or _is_int(low)):
        return int(round(number))
    return number


def nearest_on_grid(number: float, low: float, high: float | None, step: float) -> list[float]:
    """The valid values either side of ``number`` on the grid ``low + k * step`` (one at an end of
    the range), rounded so that float error does not show (1.25, not 1.2500000000000002).

    >>> nearest_on_grid(1.3, 0.25, 4, 0.125)
    [1.25, 1.375]
    >>> nearest_on_grid(3.95, 0.25, 4, 0.125)
    [3.875, 4.0]
    >>> nearest_on_grid(9.5, 1, 10, 2)
    [9]
    """
    below = low + math.floor((number - low) / step) * step
    found = [below, below + step]
    if high is not None:
        found = [v for v in found if v <= high + step * STEP_TOLERANCE]
    integral = _is_int(low) and _is_int(step)
    return [int(round(v)) if integral else round(v, 12) for v in found]


def resolve_assignments(assignments: Sequence[tuple[str, str]], components: dict[str, Any]) -> dict[str, Any]:
    """The ADJUST request ``{component: {"settings": {setting: {"value": v}}}}`` for ``assignments``,
    checked against the described ``components``; UsageError names the first one that is wrong."""
    request: dict[str, Any] = {}
    for target, raw in assignments:
        component, setting = _locate(target, components)
        value = convert_value(target, components[component]["settings"][setting], raw)
        request.setdefault(component, {"settings": {}})["settings"][setting] = {"value": value}
    return request
