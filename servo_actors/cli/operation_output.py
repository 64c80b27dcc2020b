"""What ``check``, ``describe``, ``measure`` and ``adjust`` print: the ``--json`` object, the
rows of their tables, and the tables with their colours.

Apart from the commands: how a result looks, not how it is obtained; shared by all four (and by
the messages of ``assignments``, which show numbers as the tables do).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from servo_actors.cli.context import color_enabled, format_table

if TYPE_CHECKING:
    from servo_actors.actors import OperationResult, ServoRuntime
    from servo_actors.config import ServoConfig

__all__ = [
    "StyledCell",
    "adjust_rows",
    "measure_rows",
    "number_text",
    "json_payload",
    "connector_placement",
    "placement_text",
    "settings_rows",
    "status_word",
    "styled_table",
    "with_placement",
]


def json_payload(result: OperationResult) -> dict[str, Any]:
    """The ``--json`` shape (module docstring)."""
    return {
        "operation": result.operation,
        "status": result.status,
        "reason": result.reason,
        "message": result.message,
        "data": result.data,
        "connectors": {
            name: {"status": part.status, "reason": part.reason, "message": part.message}
            for name, part in result.parts.items()
        },
    }


def number_text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "-" if value is None else str(value)


def _bounds(setting: dict[str, Any]) -> str | None:
    if setting.get("type") == "enum" or "values" in setting:
        return "|".join(str(v) for v in setting.get("values") or [])
    if "min" in setting or "max" in setting:
        step = f" step {number_text(setting['step'])}" if setting.get("step") is not None else ""
        return f"{number_text(setting.get('min'))}..{number_text(setting.get('max'))}{step}"
    return None


def settings_rows(components: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for component, body in components.items():
        for name, setting in ((body or {}).get("settings") or {}).items():
            kind = setting.get("type") or "-"
            if setting.get("pinned"):
                kind += " (pinned)"
            rows.append(
                [
                    component,
                    name,
                    kind,
                    number_text(setting.get("value")),
                    _bounds(setting),
                    setting.get("unit"),
                ]
            )
    return rows


class StyledCell(str):
    """A table cell with a colour: ``format_table`` sees plain text, ``styled_table`` adds the colour."""

    style: dict[str, Any]

    def __new__(cls, text: str, **style: Any) -> StyledCell:
        cell = super().__new__(cls, text)
        cell.style = style
        return cell


def styled_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """``format_table``, then colour for ``StyledCell`` cells (after aligning: escapes have no width)."""
    text = format_table(headers, rows)
    if not color_enabled(sys.stdout):
        return text
    lines = text.split("\n")
    columns = [(match.start(), match.end()) for match in re.finditer(r"-+", lines[1])]
    for number, row in enumerate(rows, start=2):
        line = lines[number]
        for (start, end), cell in reversed(list(zip(columns, row, strict=True))):
            if isinstance(cell, StyledCell) and cell:
                plain = line[start:end].rstrip()
                line = line[:start] + click.style(plain, **cell.style) + line[start + len(plain) :]
        lines[number] = line
    return "\n".join(lines)


def status_word(ok: bool) -> StyledCell:
    return StyledCell("ok", fg="green") if ok else StyledCell("FAILED", fg="red", bold=True)


def measure_rows(metrics: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for name, metric in metrics.items():
        unit = (metric or {}).get("unit") or None
        if metric.get("values") is None:
            value = number_text(metric.get("value"))
            rows.append([name, "-", 1, value, value, unit])
            continue
        for series in metric.get("values") or []:
            values = [point[1] for point in series.get("data") or []]
            mean = number_text(sum(values) / len(values)) if values else None
            last = number_text(values[-1]) if values else None
            rows.append([name, series.get("id"), len(values), mean, last, unit])
    return rows


def adjust_rows(components: dict[str, Any], request: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for component, body in components.items():
        asked = (request.get(component) or {}).get("settings") or {}
        for name, setting in ((body or {}).get("settings") or {}).items():
            value = number_text(setting.get("value"))
            rows.append(
                [
                    component,
                    name,
                    StyledCell(value, bold=True) if name in asked else value,
                    setting.get("unit"),
                ]
            )
    return rows


def connector_placement(runtime: ServoRuntime, config: ServoConfig) -> dict[str, str] | None:
    """Where each connector runs (``local``, a member's ``HOST:PORT``, or what it waits for), in
    convention mode only (None otherwise: the output stays as it always was)."""
    if config.supervisor.convention is None:
        return None
    status = runtime.status()
    return {child.name: getattr(child, "where", None) or "local" for child in status.children}


def with_placement(payload: dict[str, Any], placement: dict[str, str] | None) -> dict[str, Any]:
    if placement is not None:
        payload["placement"] = placement
    return payload


def placement_text(placement: dict[str, str] | None) -> str:
    if placement is None:
        return ""
    return "\n\n" + styled_table(
        ["CONNECTOR", "RUNS ON"], [[name, where] for name, where in placement.items()]
    )
