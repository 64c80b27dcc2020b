"""Reading what a ``command`` connector's command printed: the JSON of describe, measure and
adjust, checked against the contract, with a failure naming what is wrong."""

from __future__ import annotations

import json
import math
from typing import Any

from servo_actors.connectors.base import ConnectorFailure

__all__ = ["parse_adjusted", "parse_description", "parse_json", "parse_measurement"]


def _bad_output(operation: str, what: str) -> ConnectorFailure:
    return ConnectorFailure(f"{operation} command printed {what}", reason="bad-output")


def parse_json(operation: str, stdout: str) -> Any:
    """The JSON document ``operation``'s command printed; ConnectorFailure (bad-output) when none."""
    if not stdout.strip():
        raise _bad_output(operation, "nothing; expected a JSON object on stdout")
    try:
        return json.loads(stdout)
    except json.JSONDecodeError as exc:
        excerpt = stdout.strip()[:80]
        raise _bad_output(
            operation, f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): {excerpt!r}"
        ) from None


def _object(operation: str, value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad_output(operation, f"{where} as {type(value).__name__}; expected a JSON object")
    return value


def _parse_components(operation: str, value: Any) -> dict[str, Any]:
    components = _object(operation, value, '"components"')
    for component, body in components.items():
        settings = _object(operation, body, f'component "{component}"').get("settings")
        for setting, spec in _object(operation, settings, f'"{component}.settings"').items():
            _object(operation, spec, f'setting "{component}.{setting}"')
    return components


def parse_description(document: Any) -> dict[str, Any]:
    """describe's ``components`` and ``metrics``, each of the contract's shape."""
    document = _object("describe", document, "its output")
    extra = set(document) - {"components", "metrics"}
    if extra:
        raise _bad_output("describe", f"unexpected keys {sorted(extra)}; expected components and metrics")
    components = _parse_components("describe", document.get("components", {}))
    metrics = _object("describe", document.get("metrics", {}), '"metrics"')
    for name, spec in metrics.items():
        _object("describe", spec, f'metric "{name}"')
    return {"components": components, "metrics": metrics}


def parse_adjusted(document: Any) -> dict[str, Any]:
    """The ``components`` an adjust command reports as applied."""
    document = _object("adjust", document, "its output")
    if "components" not in document:
        raise _bad_output(
            "adjust", 'a JSON object without "components"; print nothing or {"components": {...}}'
        )
    return _parse_components("adjust", document["components"])


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def parse_measurement(document: Any, units: dict[str, str | None], requested: list[str]) -> dict[str, Any]:
    """measure's ``metrics`` (those ``requested``, each with its unit from ``units``) and
    ``annotations``, from either form: ``{"metrics": {...}, "annotations": {...}}`` or ``{"name": number}``."""
    document = _object("measure", document, "its output")
    wanted = set(requested)
    if isinstance(document.get("metrics"), dict):
        annotations = _object("measure", document.get("annotations", {}), '"annotations"')
        metrics: dict[str, Any] = {}
        for name, reading in document["metrics"].items():
            reading = _object("measure", reading, f'metric "{name}"')
            if "value" in reading:
                if not _is_number(reading["value"]):
                    raise _bad_output("measure", f'metric "{name}" with a value that is not a number')
            elif not isinstance(reading.get("values"), list):
                raise _bad_output("measure", f'metric "{name}" without "value" or a "values" list')
            if name in wanted:
                metrics[name] = {"unit": units.get(name), **reading}
        return {"metrics": metrics, "annotations": annotations}
    metrics = {}
    for name, value in document.items():
        if not _is_number(value):
            raise _bad_output(
                "measure",
                f'"{name}": {value!r}; expected {{"metrics": {{...}}, "annotations": {{...}}}} or {{"name": number}}',
            )
        if name in wanted:
            metrics[name] = {"unit": units.get(name), "value": value}
    return {"metrics": metrics, "annotations": {}}
