"""Writing a ``Conversion`` as servo.yaml: block-style YAML with a comment at the end of every line
whose meaning changed, a header naming the servox file, and the list of what was not converted.

PyYAML cannot write comments, so the structure is written here and each scalar by PyYAML (its
quoting is right for every value). The result is read back by the tests with the project's loader.
"""

from __future__ import annotations

from typing import Any

import yaml

from servo_actors.servox_import.conversion import Conversion, Path

__all__ = ["write_yaml"]

_INDENT = 2


def write_yaml(conversion: Conversion, *, header: bool = True) -> str:
    """The servo.yaml text of ``conversion``."""
    lines: list[str] = []
    if header:
        lines.append(
            f"# Converted from the servox configuration {conversion.source} by servo-actors import-servox."
        )
        lines.append("# A comment ending a line says how its meaning differs from servox's.")
        for note in conversion.notes:
            lines.append(f"# Note: {note}")
        if conversion.not_converted:
            lines.append("# Not converted (no equivalent in servo-actors; see docs/coming-from-servox.md):")
            lines.extend(f"#   - {item}" for item in conversion.not_converted)
    lines.extend(_mapping(conversion.data, 0, (), conversion.comments))
    return "\n".join(lines) + "\n"


def _scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30, allow_unicode=True)
    return text.removesuffix("\n").removesuffix("\n...").removesuffix("\n")


def _is_block(value: Any) -> bool:
    return isinstance(value, dict | list) and bool(value)


def _with_comment(line: str, comment: str | None) -> str:
    if not comment:
        return line
    return f"{line}  # {' '.join(comment.split())}"


def _mapping(data: dict[str, Any], indent: int, path: Path, comments: dict[Path, str]) -> list[str]:
    lines = []
    pad = " " * indent
    for key, value in data.items():
        here = (*path, key)
        if _is_block(value):
            lines.append(_with_comment(f"{pad}{_scalar(key)}:", comments.get(here)))
            if isinstance(value, dict):
                lines.extend(_mapping(value, indent + _INDENT, here, comments))
            else:
                lines.extend(_sequence(value, indent + _INDENT, here, comments))
        else:
            lines.append(_with_comment(f"{pad}{_scalar(key)}: {_scalar(value)}", comments.get(here)))
    return lines


def _sequence(items: list[Any], indent: int, path: Path, comments: dict[Path, str]) -> list[str]:
    lines = []
    pad = " " * indent
    for index, item in enumerate(items):
        here = (*path, index)
        if isinstance(item, dict) and item:
            inner = _mapping(item, indent + _INDENT, here, comments)
            inner[0] = f"{pad}- {inner[0][indent + _INDENT :]}"
            if here in comments:
                inner[0] = _with_comment(inner[0], comments[here])
            lines.extend(inner)
        elif isinstance(item, list) and item:
            lines.append(_with_comment(f"{pad}-", comments.get(here)))
            lines.extend(_sequence(item, indent + _INDENT, here, comments))
        else:
            lines.append(_with_comment(f"{pad}- {_scalar(item)}", comments.get(here)))
    return lines
