"""The wire protocol's shared types: the words (events, commands, statuses), the scalar types
every message part is built of, the base of the parts (``WireModel``) and the envelope.

- What the optimizer writes tolerates extra keys (``extra="allow"`` on ``WireModel``, kept on
  dump); only the envelope is closed: exactly ``event``, ``param`` and ``servo_uid``.
- The points of a time series (``PointNumber``) are validated by pydantic's core alone: no Python
  validator per number, as a result may carry a million of them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    GetPydanticSchema,
    PlainSerializer,
    StringConstraints,
)
from pydantic_core import core_schema

from servo_actors import vocabulary as words
from servo_actors.config.fields import Duration
from servo_actors.protocol.json_bounds import MAX_NESTING, nested_deeper_than
from servo_actors.protocol.statuses import WORD_PATTERN

__all__ = [
    "CommandName",
    "Envelope",
    "Event",
    "FreeDict",
    "Number",
    "OptimizerStatusName",
    "PointNumber",
    "RESULT_EVENT",
    "Scalar",
    "ServoStatusName",
    "WireDuration",
    "WireModel",
    "Word",
    "none_as_empty",
    "show_value",
]

# An int this large cannot become a float; no real duration comes near it.
_LARGEST_SECONDS = 10**300


class Event(StrEnum):
    """What the servo posts (the words are the vocabulary's)."""

    HELLO = words.HELLO
    WHATS_NEXT = words.WHATS_NEXT
    DESCRIPTION = words.DESCRIPTION
    MEASUREMENT = words.MEASUREMENT
    ADJUSTMENT = words.ADJUSTMENT
    GOODBYE = words.GOODBYE


class CommandName(StrEnum):
    """What the optimizer answers a WHATS_NEXT with (the words are the vocabulary's)."""

    DESCRIBE = words.DESCRIBE
    MEASURE = words.MEASURE
    ADJUST = words.ADJUST
    SLEEP = words.SLEEP


RESULT_EVENT: dict[str, Event] = {CommandName(cmd): Event(event) for cmd, event in words.RESULT_EVENT.items()}
"""The event that carries a command's result and progress (SLEEP has none)."""

# Types of the statuses: the same words as the vocabulary's OPTIMIZER_STATUSES and SERVO_STATUSES
# (a Literal must spell them out; tests/protocol/test_protocol_vocabulary.py checks they agree).
OptimizerStatusName = Literal["ok", "invalid", "unexpected-event", "cancel"]
ServoStatusName = Literal["ok", "failed", "rejected", "aborted", "cancelled"]


def show_value(value: Any) -> str:
    """``value`` as an error message names it: its repr, cut short (deep nesting only named)."""
    if nested_deeper_than(value, MAX_NESTING):
        return f"a {type(value).__name__} nested deeper than {MAX_NESTING} levels"
    try:
        text = repr(value)
    except Exception:  # a connector's object with a broken __repr__ still gets named
        text = f"a {type(value).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."


def _number(value: Any) -> Any:
    # JSON numbers only: no bools, no numeric strings (a lax parse would hide a broken optimizer).
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {show_value(value)}")
    return value


def _scalar(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected a number or a string, got {show_value(value)}")
    return value


def _duration(value: Any) -> Any:
    # parse_duration's ValueError already says "not a duration: 'x' (use seconds, ...)".
    if value is None:
        return 0.0
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _LARGEST_SECONDS:
        raise ValueError(f"not a duration: {show_value(value)} is too large")
    return value


def _seconds_out(seconds: float) -> int | float:
    # 60.0 goes out as 60, as optimizers and the protocol examples write it.
    return int(seconds) if float(seconds).is_integer() else seconds


def none_as_empty(value: Any) -> Any:
    """A validator: null reads as an empty object."""
    return {} if value is None else value


Number = Annotated[int | float, BeforeValidator(_number)]
"""A JSON number; ints stay ints so values go back out as they came in."""
PointNumber = Annotated[
    int | float,
    GetPydanticSchema(
        lambda _type, _handler: core_schema.union_schema(
            [core_schema.int_schema(strict=True), core_schema.float_schema(strict=True)],
            custom_error_type="number_type",
            custom_error_message="expected a number",
        )
    ),
]
"""``Number`` for the points of a time series, checked by pydantic's core alone: a Python validator
called for each of a million numbers would take seconds. The same rules: no bools, no strings."""
Scalar = Annotated[int | float | str, BeforeValidator(_scalar)]
WireDuration = Annotated[Duration, BeforeValidator(_duration), PlainSerializer(_seconds_out)]
"""Seconds; reads ``30``, ``30.5``, ``"250ms"``, ``"1h30m"`` (null is 0); writes a number."""
FreeDict = Annotated[dict[str, Any], BeforeValidator(none_as_empty)]
Word = Annotated[str, StringConstraints(pattern=WORD_PATTERN)]
"""A reason: one word such as ``success``, ``timeout``, ``slo-violation``."""


class WireModel(BaseModel):
    """Base of every message part: tolerant of extra keys, which are kept on dump."""

    model_config = ConfigDict(extra="allow")


# --- envelope -----------------------------------------------------------------------------------


class Envelope(BaseModel):
    """Every request body: exactly these three keys, nothing more, nothing less."""

    model_config = ConfigDict(extra="forbid")

    event: Event
    param: dict[str, Any] | None
    servo_uid: str | None
