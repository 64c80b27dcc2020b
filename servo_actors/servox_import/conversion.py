"""What a conversion builds: the new configuration's data, a comment for each value whose meaning
changed, and the list of what could not be carried over."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servo_actors.errors import ConfigError
from servo_actors.servox_import.quantities import duration

__all__ = ["Conversion", "Entry", "Path", "add_entry", "cannot_convert", "check_keys", "converted_duration"]

Path = tuple[str | int, ...]
"""Where a value is in the new configuration: ``("connectors", 0, "config", "timeout")``."""


@dataclass
class Conversion:
    """One servo.yaml being built from one servox document (``source`` names the servox file)."""

    source: str
    data: dict[str, Any] = field(default_factory=dict)
    comments: dict[Path, str] = field(default_factory=dict)
    """Path in ``data`` -> why its meaning differs from servox's (written on its line)."""
    not_converted: list[str] = field(default_factory=list)
    """``servox.key: why`` for each setting with no equivalent here."""
    notes: list[str] = field(default_factory=list)
    """Other things a reader should know (written in the header)."""

    def comment(self, path: Path, text: str) -> None:
        """Say why the value at ``path`` means something else than servox's did."""
        previous = self.comments.get(path)
        self.comments[path] = f"{previous}; {text}" if previous else text

    def drop(self, servox_key: str, why: str) -> None:
        """Record a servox setting that has no equivalent (listed in the output and on stderr)."""
        self.not_converted.append(f"{servox_key}: {why}")


@dataclass
class Entry:
    """One connector of the new configuration, with comments keyed from the entry (``("config", "url")``)."""

    name: str
    type: str
    config: dict[str, Any] = field(default_factory=dict)
    comments: dict[Path, str] = field(default_factory=dict)

    def comment(self, path: Path, text: str) -> None:
        previous = self.comments.get(path)
        self.comments[path] = f"{previous}; {text}" if previous else text


def add_entry(conversion: Conversion, entry: Entry) -> None:
    """Append ``entry`` to the configuration's connectors, its comments with it."""
    connectors = conversion.data.setdefault("connectors", [])
    index = len(connectors)
    connectors.append({"name": entry.name, "type": entry.type, "config": entry.config})
    for path, text in entry.comments.items():
        conversion.comment(("connectors", index, *path), text)


def check_keys(source: str, servox_key: str, settings: Any, known: set[str]) -> dict[str, Any]:
    """``settings`` as a mapping whose keys servox knows; else the error naming the first bad key."""
    if settings is None:
        return {}
    if not isinstance(settings, dict):
        raise cannot_convert(source, servox_key, f"must be a mapping, not {type(settings).__name__}")
    for key in settings:
        if key not in known:
            raise cannot_convert(
                source,
                f"{servox_key}.{key}",
                f"not a servox setting here (servox knows: {', '.join(sorted(known))})",
            )
    return settings


def cannot_convert(source: str, servox_key: str, why: str) -> ConfigError:
    """The error (exit 2) for input that cannot be converted, naming the servox key."""
    return ConfigError(f"cannot convert: {why}", source=source, key=servox_key)


def converted_duration(source: str, servox_key: str, value: Any) -> str | float:
    """servox's duration at ``servox_key`` as written here; the error naming the key if unreadable."""
    try:
        return duration(value)
    except ValueError as exc:
        raise cannot_convert(source, servox_key, str(exc)) from None
