"""Reading a YAML configuration file (one document, or several) into plain data, with errors that name the file and the line.

Safe loading only (no Python objects from YAML). A key written twice in one mapping is an error:
PyYAML would silently keep the last one, and a setting that is ignored without a word is the kind
of mistake that costs an afternoon.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from servo_actors.errors import ConfigError

__all__ = [
    "read_yaml_documents",
]


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys in a mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first_line = seen.get(key)
            except TypeError:  # an unhashable key; the base class reports it properly
                break
            if first_line is not None:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first written at line {first_line})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def read_yaml_documents(path: Path, *, source: str) -> list[dict[str, Any]]:
    """The top-level mapping of each YAML document in the file at ``path``, in order.

    A file of one document gives a list of one; an empty file (or one of empty documents) gives
    ``[{}]``; an empty document among others (a stray ``---`` at the end) is skipped.

    ``source`` is how errors name the file (the path as the user gave it). Raises ConfigError for a
    missing or unreadable file, a YAML syntax error (with line and column), or a document whose top
    level is not a mapping (naming the document when there are several).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            "no such file (give the path with -c/--config or SERVO_CONFIG)", source=source
        ) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a file", source=source) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start})", source=source) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", source=source) from None
    try:
        loaded = list(yaml.load_all(text, Loader=_UniqueKeyLoader))  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(_describe_yaml_error(exc), source=source) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", source=source) from None
    documents = [data for data in loaded if data is not None]
    if not documents:
        return [{}]
    for index, data in enumerate(documents, start=1):
        if not isinstance(data, dict):
            kind = "a list" if isinstance(data, list) else f"a {type(data).__name__} ({data!r:.40})"
            where = f"{source} document {index}" if len(documents) > 1 else source
            raise ConfigError(
                f"the top level must be a mapping of keys (optimizer, connectors, ...), not {kind}",
                source=where,
            )
    return documents


def _describe_yaml_error(exc: yaml.MarkedYAMLError) -> str:
    """``line 4, column 9: mapping values are not allowed here`` (1-based, as editors count)."""
    mark = exc.problem_mark or exc.context_mark
    what = exc.problem or exc.context or "not valid YAML"
    if exc.context and exc.problem:
        what = f"{exc.problem} ({exc.context})"
    if mark is None:
        return f"not valid YAML: {what}"
    return f"line {mark.line + 1}, column {mark.column + 1}: {what}"
