"""What every model of servo.yaml is built from: the ``Duration`` field type, the shared patterns
and defaults, the strict base model, ``split_optimizer_id``."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, WithJsonSchema

from servo_actors.config import defaults
from servo_actors.durations import parse_duration

__all__ = [
    "APP_RE",
    "CAPABILITY_PATTERN",
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_RESULT_BYTES",
    "DescendantTracking",
    "Duration",
    "ORG_RE",
    "StrictModel",
    "positive",
    "split_optimizer_id",
]

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_DURATION_PATTERN = rf"^\s*(?:{_NUMBER}|(?:{_NUMBER}(?:ns|us|µs|ms|s|m|h|d))+)\s*$"

Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    # The schema says what a user may write (a number or a string like "5s"), not the float it becomes.
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": _DURATION_PATTERN},
            ],
            "description": "seconds, or a string such as '250ms', '5s', '1m30s', '2h'",
        }
    ),
]
"""Seconds; accepts numbers and strings like ``250ms``, ``5s``, ``1m30s``, ``2h``."""

ORG_RE = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9.-]{4,49}$")
APP_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
DEFAULT_BASE_URL = "https://api.opsani.com"
DEFAULT_MAX_RESULT_BYTES = defaults.MAX_RESULT_BYTES
"""Default bound of one connector's result, pickled (supervisor.max_result_bytes; config.defaults)."""
DescendantTracking = Literal["auto", "cgroup-v2", "cgroup-v1", "subreaper"]
CAPABILITY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
"""A capability's name, as ``servo-actors agent --capability NAME[=VALUE]`` offers it."""


class StrictModel(BaseModel):
    """The one base of the models that read the project's inputs (servo.yaml, plans, connector
    configs): an unknown key is an error, defaults are validated too, and a field's docstring is
    its description in the JSON schema. A model adds to this config, never replaces it."""

    model_config = ConfigDict(extra="forbid", validate_default=True, use_attribute_docstrings=True)


def split_optimizer_id(value: str) -> tuple[str, str]:
    """``("example.com", "web")`` from ``"example.com/web"``; ValueError naming the rule broken."""
    org, sep, app = value.partition("/")
    if not sep:
        raise ValueError(f"{value!r} is not ORG/APP")
    if not ORG_RE.fullmatch(org):
        raise ValueError(f"ORG {org!r} must be 5-50 characters of [A-Za-z0-9.-], not starting with '-'")
    if not APP_RE.fullmatch(app):
        raise ValueError(f"APP {app!r} must be 1-64 characters of [A-Za-z0-9_.-]")
    return org, app


def positive(value: float) -> float:
    """``value``, or ValueError when it is not above 0: a ``field_validator`` of the sections."""
    if value <= 0:
        raise ValueError("must be more than 0")
    return value
