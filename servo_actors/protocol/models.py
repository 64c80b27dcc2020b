"""Pydantic models of the optimizer wire protocol (docs/protocol.md). Plain data, nothing else.

Reading the wire::

    >>> cmd = parse_reply({"cmd": "MEASURE", "cmd_uid": "c2",
    ...                    "param": {"metrics": ["throughput"], "control": {"duration": "5m"}}})
    >>> cmd.param.control.duration
    300.0
    >>> to_wire(cmd)
    {'cmd': 'MEASURE', 'cmd_uid': 'c2', 'param': {'metrics': ['throughput'], 'control': {'duration': 300}}}

This module gathers the names of the protocol's modules, split by what they are (import from
either; every name it exported before the split is still here):

- ``wire_types``: the words (``Event``, ``CommandName``, the status types), the scalar types,
  ``WireModel`` and the ``Envelope``;
- ``shapes``: the parts several messages share (descriptor, state, metrics);
- ``commands``: what the optimizer sends (the commands, ``OptimizerStatus``);
- ``results``: what the servo posts (HELLO/GOODBYE params, the results, ``Progress``);
- ``reading``: ``validate``, the ``parse_*`` functions and ``to_wire``;
- ``writing``: the builders of an event's ``param`` (``*_result``, ``*_param``) and the body.
"""

from __future__ import annotations

from servo_actors.protocol.commands import (
    SLEEP_DEFAULT_SECONDS,
    AdjustCommand,
    AdjustParam,
    Command,
    Control,
    DescribeCommand,
    DescribeParam,
    MeasureCommand,
    MeasureParam,
    OptimizerStatus,
    SleepCommand,
    SleepParam,
)
from servo_actors.protocol.reading import parse_envelope, parse_param, parse_reply, to_wire, validate
from servo_actors.protocol.results import (
    RESULT_MODELS,
    AdjustmentResult,
    DescriptionResult,
    GoodbyeParam,
    HelloParam,
    MeasurementResult,
    Progress,
    ResultStatus,
)
from servo_actors.protocol.shapes import (
    Application,
    Component,
    Descriptor,
    MeasurementInfo,
    Metric,
    MetricInfo,
    Setting,
    State,
    TimeSeries,
)
from servo_actors.protocol.wire_types import (
    RESULT_EVENT,
    CommandName,
    Envelope,
    Event,
    FreeDict,
    Number,
    OptimizerStatusName,
    PointNumber,
    Scalar,
    ServoStatusName,
    WireDuration,
    WireModel,
    Word,
)
from servo_actors.protocol.writing import (
    PARAM_NESTING,
    WireParam,
    adjustment_result,
    description_result,
    envelope,
    failure_result,
    goodbye_param,
    hello_param,
    measurement_result,
    progress_param,
    request_body,
)

__all__ = [
    "AdjustCommand",
    "AdjustParam",
    "AdjustmentResult",
    "Application",
    "Command",
    "CommandName",
    "Component",
    "Control",
    "DescribeCommand",
    "DescribeParam",
    "DescriptionResult",
    "Descriptor",
    "Envelope",
    "Event",
    "FreeDict",
    "GoodbyeParam",
    "HelloParam",
    "MeasureCommand",
    "MeasureParam",
    "MeasurementInfo",
    "MeasurementResult",
    "Metric",
    "MetricInfo",
    "Number",
    "OptimizerStatus",
    "OptimizerStatusName",
    "PARAM_NESTING",
    "PointNumber",
    "Progress",
    "RESULT_EVENT",
    "RESULT_MODELS",
    "ResultStatus",
    "SLEEP_DEFAULT_SECONDS",
    "Scalar",
    "ServoStatusName",
    "Setting",
    "SleepCommand",
    "SleepParam",
    "State",
    "TimeSeries",
    "WireDuration",
    "WireModel",
    "WireParam",
    "Word",
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
    "request_body",
    "to_wire",
    "validate",
]
