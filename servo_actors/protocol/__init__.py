"""The optimizer wire protocol: pydantic models of every message, and the HTTP client.

The models are plain data (validation and serialization only), by what they hold:
``wire_types``, ``shapes``, ``commands``, ``results``, ``reading`` and ``writing``;
``client.OptimizerClient`` speaks
it over HTTP with the retry rules of docs/protocol.md; ``backoff`` holds the pure retry arithmetic.
"""

from servo_actors.protocol.commands import (
    AdjustCommand,
    Command,
    Control,
    DescribeCommand,
    MeasureCommand,
    OptimizerStatus,
    SleepCommand,
)
from servo_actors.protocol.reading import parse_envelope, parse_param, parse_reply, to_wire
from servo_actors.protocol.wire_types import RESULT_EVENT, CommandName, Envelope, Event
from servo_actors.protocol.writing import (
    adjustment_result,
    description_result,
    envelope,
    failure_result,
    goodbye_param,
    hello_param,
    measurement_result,
    progress_param,
)

__all__ = [
    "RESULT_EVENT",
    "AdjustCommand",
    "Command",
    "CommandName",
    "Control",
    "DescribeCommand",
    "Envelope",
    "Event",
    "MeasureCommand",
    "OptimizerStatus",
    "SleepCommand",
    "adjustment_result",
    "description_result",
    "envelope",
    "failure_result",
    "goodbye_param",
    "hello_param",
    "measurement_result",
    "parse_envelope",
    "parse_param",
    "parse_reply",
    "progress_param",
    "to_wire",
]
