"""The optimizer wire protocol: pydantic models of every message, and the HTTP client.

``models`` is plain data (validation and serialization only; it gathers the names of
``wire_types``, ``shapes``, ``commands``, ``results``, ``reading`` and ``writing``);
``client.OptimizerClient`` speaks
it over HTTP with the retry rules of protocol.md; ``backoff`` holds the pure retry arithmetic.
"""

from servo_actors.protocol.models import (
    RESULT_EVENT,
    AdjustCommand,
    Command,
    CommandName,
    Control,
    DescribeCommand,
    Envelope,
    Event,
    MeasureCommand,
    OptimizerStatus,
    SleepCommand,
    adjustment_result,
    description_result,
    envelope,
    failure_result,
    goodbye_param,
    hello_param,
    measurement_result,
    parse_envelope,
    parse_param,
    parse_reply,
    progress_param,
    to_wire,
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
