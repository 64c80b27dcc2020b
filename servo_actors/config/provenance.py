"""Where each value of the configuration came from: the file, an environment variable, ``.env``, or
a default. ``servo-actors config --sources`` shows it; validation errors name the variable.

The loader records the file as it was read (before any variable applied) and which keys the
variables set; a key is the variable's when it, or a key above it, was set by one, else the file's
when the file has it, else a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servo_actors.config.problems import Loc

__all__ = ["DEFAULT_SOURCE", "Provenance", "env_label"]

DEFAULT_SOURCE = "default"


def env_label(variable: str, dotenv_file: str | None = None) -> str:
    """``env NAME`` for a variable of the process, ``PATH NAME`` for one read from a ``.env`` file."""
    return f"{dotenv_file} {variable}" if dotenv_file else f"env {variable}"


@dataclass(frozen=True)
class Provenance:
    """The origins of one loaded configuration."""

    file: str
    """The configuration file, as the user named it."""
    file_data: dict[str, Any] = field(default_factory=dict, repr=False)
    """The file's data as read, before any variable applied (out of repr: it may hold a token)."""
    variables: Mapping[Loc, str] = field(default_factory=dict)
    """Key set by a variable -> its label (``env_label``)."""

    def source_of(self, loc: Loc) -> str:
        """The label of the variable that set ``loc`` (or a key above it), else the file, else default."""
        for length in range(len(loc), 0, -1):
            label = self.variables.get(loc[:length])
            if label is not None:
                return label
        return self.file if _present(self.file_data, loc) else DEFAULT_SOURCE


def _present(data: Any, loc: Loc) -> bool:
    current = data
    for part in loc:
        if isinstance(part, int) and isinstance(current, list) and part < len(current):
            current = current[part]
        elif isinstance(part, int) and isinstance(current, str):
            return True  # one string the model split into a list (``checks.name: a,b``)
        elif isinstance(part, str) and isinstance(current, dict) and part in current:
            current = current[part]
        else:
            return False
    return True
