"""Pydantic models of the optimizer wire protocol (docs/protocol.md). Plain data, nothing else.

Reading the wire::

    >>> cmd = parse_reply({"cmd": "MEASURE", "cmd_uid": "c2",
    ...                    "param": {"metrics": ["throughput"], "control": {"duration": "5m"}}})
    >>> cmd.param.control.duration
    300.0
    >>> to_wire(cmd)
    {'cmd': 'MEASURE', 'cmd_uid': 'c2', 'param': {'metrics': ['throughput'], 'control': {'duration': 300}}}

Writing it: the ``*_result`` / ``*_param`` helpers at the end build an event's ``param`` from plain
dicts (the shapes connectors return), validate it and return the wire dict.

Rules that shape this module:

- ``to_wire`` dumps only what was set, so a message read from the wire dumps back to the same JSON
  (the examples of protocol.md round-trip exactly; durations come back as seconds).
- What the optimizer writes tolerates extra keys (``extra="allow"``, kept on dump); only the
  envelope is closed: exactly ``event``, ``param`` and ``servo_uid``.
- A wrong shape raises one ``ProtocolError`` whose ``field`` is the dotted path at fault, e.g.
  ``param.control.duration: not a duration: 'x'``. Nothing else escapes the parse functions.
- A result may carry a million points: the builders walk what they are given once in Python
  (``json_problem``: nesting and NaN), the points are validated by pydantic's core alone (no Python
  validator per number), and what they return (a ``WireParam``) is sent by ``request_body``
  without being walked again.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetPydanticSchema,
    PlainSerializer,
    StringConstraints,
    ValidationError,
    model_validator,
)
from pydantic_core import core_schema

from servo_actors import vocabulary as words
from servo_actors.config.models import Duration
from servo_actors.errors import ProtocolError
from servo_actors.protocol.json_bounds import (
    MAX_NESTING,
    TOO_DEEP,
    encode_checked,
    finite_measurement,
    first_non_finite,
    json_problem,
    nested_deeper_than,
)
from servo_actors.protocol.statuses import MAX_MESSAGE_CHARS, WORD_PATTERN, normalise_failure

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

# SLEEP without a duration sleeps this long (protocol.md).
SLEEP_DEFAULT_SECONDS = 120.0
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


# --- scalar types -------------------------------------------------------------------------------


def _show(value: Any) -> str:
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
        raise ValueError(f"expected a number, got {_show(value)}")
    return value


def _scalar(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected a number or a string, got {_show(value)}")
    return value


def _duration(value: Any) -> Any:
    # parse_duration's ValueError already says "not a duration: 'x' (use seconds, ...)".
    if value is None:
        return 0.0
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _LARGEST_SECONDS:
        raise ValueError(f"not a duration: {_show(value)} is too large")
    return value


def _seconds_out(seconds: float) -> int | float:
    # 60.0 goes out as 60, as optimizers and the protocol examples write it.
    return int(seconds) if float(seconds).is_integer() else seconds


def _empty_dict(value: Any) -> Any:
    return {} if value is None else value


def _metric_names(value: Any) -> Any:
    # MEASURE names metrics as a list, or as a {name: {"unit": ...}} map whose keys count.
    if value is None:
        return []
    if isinstance(value, dict):
        return list(value)
    return value


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
FreeDict = Annotated[dict[str, Any], BeforeValidator(_empty_dict)]
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


# --- descriptor and state -----------------------------------------------------------------------


class Setting(WireModel):
    """One setting of a component.

    In a descriptor (and an ADJUSTMENT state) it is typed: ``range`` needs ``min``, ``max`` and
    ``step``; ``enum`` needs ``values``. In an ADJUST command's state it is only ``{"value": v}``.
    """

    type: Literal["range", "enum"] | None = None
    value: Scalar | None = None
    min: Number | None = None
    max: Number | None = None
    step: Number | None = None
    values: list[Scalar] | None = None
    unit: str | None = None
    pinned: bool | None = None

    @model_validator(mode="after")
    def _fields_of_its_type(self) -> Setting:
        if self.type == "range":
            missing = [name for name in ("min", "max", "step") if getattr(self, name) is None]
            if missing:
                raise ValueError(f"a range setting needs {', '.join(missing)}")
        elif self.type == "enum" and self.values is None:
            raise ValueError("an enum setting needs values")
        return self


class Component(WireModel):
    settings: dict[str, Setting]


class Application(WireModel):
    components: dict[str, Component]


class MetricInfo(WireModel):
    unit: str | None = None


class MeasurementInfo(WireModel):
    metrics: dict[str, MetricInfo]


class Descriptor(WireModel):
    """DESCRIPTION's ``descriptor``: settings per component, and the metrics on offer."""

    application: Application
    measurement: MeasurementInfo | None = None


class State(WireModel):
    """ADJUST's and ADJUSTMENT's ``state``: the shape of ``descriptor``, ``{"application":
    {"components": ...}, "measurement": {"metrics": ...}}`` (ADJUST may leave ``measurement`` out)."""

    application: Application
    measurement: MeasurementInfo | None = None


# --- measurements -------------------------------------------------------------------------------


class TimeSeries(WireModel):
    """One series of a metric: ``{"id": "...", "data": [[epoch_seconds, value], ...]}``."""

    id: str | None = None
    data: list[tuple[PointNumber, PointNumber]]


class Metric(WireModel):
    """A measured metric: several time series (``values``), or a single reading (``value``)."""

    unit: str | None = None
    values: list[TimeSeries] | None = None
    value: Number | None = None

    @model_validator(mode="after")
    def _has_data(self) -> Metric:
        if self.values is None and self.value is None:
            raise ValueError("a metric needs values (time series) or value (a single reading)")
        return self


# --- commands (optimizer -> servo) --------------------------------------------------------------


class Control(WireModel):
    """How a MEASURE or ADJUST should run. Durations are seconds (floats)."""

    duration: WireDuration = 0.0
    warmup: WireDuration = 0.0
    delay: WireDuration = 0.0
    settlement: WireDuration = 0.0
    load: FreeDict = Field(default_factory=dict)
    environment: FreeDict = Field(default_factory=dict)
    userdata: FreeDict = Field(default_factory=dict)
    """Free for the user; ``userdata.slo`` holds service-level conditions."""


class DescribeParam(WireModel):
    pass


class MeasureParam(WireModel):
    metrics: Annotated[list[str], BeforeValidator(_metric_names)] = Field(default_factory=list)
    """Names of the metrics wanted (empty: the optimizer named none)."""
    control: Annotated[Control, BeforeValidator(_empty_dict)] = Field(default_factory=Control)


class AdjustParam(WireModel):
    state: State
    control: Annotated[Control, BeforeValidator(_empty_dict)] = Field(default_factory=Control)


class SleepParam(WireModel):
    duration: Annotated[
        WireDuration, BeforeValidator(lambda v: SLEEP_DEFAULT_SECONDS if v is None else v)
    ] = SLEEP_DEFAULT_SECONDS
    data: dict[str, Any] | None = None


class DescribeCommand(WireModel):
    cmd: Literal["DESCRIBE"]
    cmd_uid: str | None = None
    param: Annotated[DescribeParam, BeforeValidator(_empty_dict)] = Field(default_factory=DescribeParam)


class MeasureCommand(WireModel):
    cmd: Literal["MEASURE"]
    cmd_uid: str | None = None
    param: Annotated[MeasureParam, BeforeValidator(_empty_dict)] = Field(default_factory=MeasureParam)


class AdjustCommand(WireModel):
    cmd: Literal["ADJUST"]
    cmd_uid: str | None = None
    param: AdjustParam


class SleepCommand(WireModel):
    """No cmd_uid and no result: the servo sleeps ``param.duration`` seconds, then polls again."""

    cmd: Literal["SLEEP"]
    cmd_uid: str | None = None
    param: Annotated[SleepParam, BeforeValidator(_empty_dict)] = Field(default_factory=SleepParam)


Command = DescribeCommand | MeasureCommand | AdjustCommand | SleepCommand

_COMMAND_MODELS: dict[str, type[BaseModel]] = {
    CommandName.DESCRIBE: DescribeCommand,
    CommandName.MEASURE: MeasureCommand,
    CommandName.ADJUST: AdjustCommand,
    CommandName.SLEEP: SleepCommand,
}


class OptimizerStatus(WireModel):
    """The optimizer's answer to anything but WHATS_NEXT: ``{"status": "ok"}``, ``cancel``..."""

    status: OptimizerStatusName
    message: str | None = None
    reason: str | None = None


# --- events (servo -> optimizer) ----------------------------------------------------------------


class HelloParam(WireModel):
    agent: str
    telemetry: FreeDict = Field(default_factory=dict)


class GoodbyeParam(WireModel):
    reason: str


class ResultStatus(WireModel):
    """The status fields every result carries."""

    status: ServoStatusName
    reason: Word
    message: str | None = None
    cmd_uid: str | None = None


class DescriptionResult(ResultStatus):
    descriptor: Descriptor | None = None

    @model_validator(mode="after")
    def _ok_has_descriptor(self) -> DescriptionResult:
        if self.status == "ok" and self.descriptor is None:
            raise ValueError("an ok DESCRIPTION needs a descriptor")
        return self


class MeasurementResult(ResultStatus):
    metrics: dict[str, Metric] | None = None
    annotations: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _ok_has_metrics(self) -> MeasurementResult:
        if self.status == "ok" and self.metrics is None:
            raise ValueError("an ok MEASUREMENT needs metrics")
        return self


class AdjustmentResult(ResultStatus):
    state: State | None = None

    @model_validator(mode="after")
    def _ok_has_state(self) -> AdjustmentResult:
        if self.status == "ok" and self.state is None:
            raise ValueError("an ok ADJUSTMENT needs a state")
        return self


class Progress(WireModel):
    """A progress post under a result event. It has no ``status`` key: that tells it from a result."""

    progress: Number = Field(ge=0, le=100)
    runtime: Number = Field(default=0, ge=0)
    cmd_uid: str | None = None
    message: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_status(cls, data: Any) -> Any:
        if isinstance(data, dict) and "status" in data:
            raise ValueError("progress has no status key (a status makes it a result)")
        return data


RESULT_MODELS: dict[str, type[ResultStatus]] = {
    Event.DESCRIPTION: DescriptionResult,
    Event.MEASUREMENT: MeasurementResult,
    Event.ADJUSTMENT: AdjustmentResult,
}


# --- reading ------------------------------------------------------------------------------------

_M = TypeVar("_M", bound=BaseModel)


def _protocol_error(exc: ValidationError, prefix: str | None) -> ProtocolError:
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0]
    path = ".".join(str(part) for part in ((prefix,) if prefix else ()) + tuple(first["loc"]))
    message = first["msg"]
    for noise in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(noise)
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return ProtocolError(message, field=path or None)


def validate(model: type[_M], obj: Any, *, field: str | None = None, walked: bool = False) -> _M:
    """``model`` from a JSON value, or one ``ProtocolError`` whose field path starts at ``field``.

    ``walked``: the caller found ``obj`` nested no deeper than ``MAX_NESTING`` (``json_problem``).
    """
    if not isinstance(obj, dict):
        raise ProtocolError(f"expected a JSON object, got {_show(obj)}", field=field)
    if not walked and nested_deeper_than(obj, MAX_NESTING):
        # Checked before pydantic walks it: validation recurses, and a hostile reply is deep.
        raise ProtocolError(f"nested deeper than {MAX_NESTING} levels", field=field)
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise _protocol_error(exc, field) from None
    except (ValueError, TypeError, RecursionError) as exc:  # defensive: validators are ours
        raise ProtocolError(f"cannot read it: {type(exc).__name__}", field=field) from None


def parse_reply(obj: Any) -> Command | OptimizerStatus:
    """The optimizer's reply: a command when it has a ``cmd`` key, else a status.

    Raises ``ProtocolError`` (and nothing else) for any other JSON value.
    """
    if not isinstance(obj, dict):
        raise ProtocolError(f"expected a JSON object, got {_show(obj)}", field="reply")
    if "cmd" not in obj:
        return validate(OptimizerStatus, obj)
    name = obj["cmd"]
    model = _COMMAND_MODELS.get(name) if isinstance(name, str) else None
    if model is None:
        raise ProtocolError(
            f"unknown command {_show(name)} (expected DESCRIBE, MEASURE, ADJUST or SLEEP)", field="cmd"
        )
    return validate(model, obj)  # type: ignore[return-value]  # every model of _COMMAND_MODELS is a Command


def parse_envelope(obj: Any) -> Envelope:
    """A request body (the server's side); the event's param is checked by ``parse_param``."""
    return validate(Envelope, obj)


def parse_param(event: str, param: Any) -> BaseModel | None:
    """Validate an event's ``param``: a result model, ``Progress``, ``HelloParam``... or None.

    Under a result event, a param without ``status`` is progress (protocol.md).
    """
    if event == Event.WHATS_NEXT:
        if param not in (None, {}):
            raise ProtocolError("WHATS_NEXT carries no param", field="param")
        return None
    if event == Event.HELLO:
        return validate(HelloParam, param, field="param")
    if event == Event.GOODBYE:
        return validate(GoodbyeParam, param, field="param")
    result_model = RESULT_MODELS.get(event)
    if result_model is None:
        raise ProtocolError(f"unknown event {_show(event)}", field="event")
    if isinstance(param, dict) and "status" not in param:
        return validate(Progress, param, field="param")
    return validate(result_model, param, field="param")


def to_wire(model: BaseModel) -> dict[str, Any]:
    """The JSON-able dict of ``model``: only the fields that were set, extras included."""
    return model.model_dump(mode="json", exclude_unset=True)


# --- writing: event params from plain dicts -----------------------------------------------------


class WireParam(dict[str, Any]):
    """An event's ``param`` made by the builders below: validated, free of NaN and of deep nesting,
    and encodable. ``request_body`` sends it without walking it again."""


def _json_ready(built: BaseModel, what: str | None) -> WireParam:
    # Extras are kept as given: a connector's set or bytes must fail here, by name, not on send.
    # NaN and deep nesting were refused before validation (_build); the dump adds neither.
    try:
        wire = to_wire(built)
        encode_checked(wire)
    except (ValueError, TypeError, RecursionError) as exc:
        raise ProtocolError(f"cannot be sent as JSON: {str(exc)[:200]}", field=what) from None
    return WireParam(wire)


def _refuse_non_finite(value: Any, what: str | None) -> None:
    # Before pydantic dumps it: in JSON mode it would write NaN under Any as null, silently.
    where = first_non_finite(value)
    if where is not None:
        path = f"{what}.{where}" if what else where
        raise ProtocolError("is not a finite number (NaN or infinity): not JSON", field=path)


PARAM_NESTING = MAX_NESTING - 1
"""Deepest nesting of a ``param``: the envelope around it adds a level, and the whole body must
stay within ``MAX_NESTING``."""


def _refuse_problem(value: Any, problem: str | None, what: str | None, deep_field: str | None) -> None:
    """ProtocolError for what ``json_problem`` found in ``value``: a NaN first (by where, under
    ``what``), as before the walks were merged, then nesting past ``MAX_NESTING`` (``deep_field``)."""
    if problem is None:
        return
    _refuse_non_finite(value, what)
    if problem == TOO_DEEP:
        raise ProtocolError(f"nested deeper than {MAX_NESTING} levels", field=deep_field)


def _build(model: type[BaseModel], fields: dict[str, Any], what: str, *, walked: bool = False) -> WireParam:
    """``fields`` as ``model``'s wire dict. ``walked``: the caller found them free of NaN and deep
    nesting already (``json_problem``); else they are walked here, once."""
    # Drop unset optionals so the wire carries only what the caller gave.
    fields = {k: v for k, v in fields.items() if v is not None}
    if not walked:
        _refuse_problem(fields, json_problem(fields, PARAM_NESTING), what, what)
    built = validate(model, fields, field=what, walked=True)
    return _json_ready(built, what)


def _checked_envelope(event: str, param: dict[str, Any] | None, servo_uid: str | None) -> dict[str, Any]:
    """The envelope as a wire dict, free of NaN and of deep nesting; ``param`` is walked once, or
    not at all when the builders made it (a ``WireParam``)."""
    if isinstance(param, WireParam):
        shell = validate(Envelope, {"event": event, "param": {}, "servo_uid": servo_uid})
        wire = to_wire(shell)
        wire["param"] = param
        return wire
    _refuse_problem(param, json_problem(param, PARAM_NESTING), "param", None)
    built = validate(Envelope, {"event": event, "param": param, "servo_uid": servo_uid}, walked=True)
    return to_wire(built)


def envelope(event: str, param: dict[str, Any] | None, servo_uid: str | None) -> dict[str, Any]:
    """A request body: ``{"event", "param", "servo_uid"}``, ready for ``encode_body``."""
    wire = _checked_envelope(event, param, servo_uid)
    try:
        encode_checked(wire)
    except (ValueError, TypeError, RecursionError) as exc:
        raise ProtocolError(f"cannot be sent as JSON: {str(exc)[:200]}") from None
    return wire


def request_body(event: str, param: dict[str, Any] | None, servo_uid: str | None) -> bytes:
    """The bytes of a request: the envelope as strict JSON (no NaN). ProtocolError if it cannot be."""
    wire = _checked_envelope(event, param, servo_uid)
    try:
        return encode_checked(wire)
    except (ValueError, TypeError, RecursionError) as exc:
        raise ProtocolError(f"cannot be sent as JSON: {str(exc)[:200]}", field="param") from None


def hello_param(agent: str, telemetry: dict[str, Any] | None = None) -> dict[str, Any]:
    return _build(HelloParam, {"agent": agent, "telemetry": telemetry or {}}, "param")


def goodbye_param(reason: str) -> dict[str, Any]:
    return _build(GoodbyeParam, {"reason": reason}, "param")


def description_result(
    cmd_uid: str | None, *, components: dict[str, Any], metrics: dict[str, Any]
) -> dict[str, Any]:
    """An ok DESCRIPTION from connector shapes: ``components`` and ``metrics`` as ``describe`` returns."""
    descriptor = {"application": {"components": components}, "measurement": {"metrics": metrics}}
    fields = {"status": "ok", "reason": "success", "cmd_uid": cmd_uid, "descriptor": descriptor}
    return _build(DescriptionResult, fields, "param")


def measurement_result(
    cmd_uid: str | None, *, metrics: dict[str, Any], annotations: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An ok MEASUREMENT: ``metrics`` as ``{name: {"unit", "values": [series...]}|{"unit","value"}}``.

    Values that are not finite numbers (NaN, infinity) cannot be JSON: they are dropped, and the
    result's ``message`` and the ``servo_actors.dropped_values`` annotation say how many.
    """
    fields = {"status": "ok", "reason": "success", "cmd_uid": cmd_uid}
    measured = {"metrics": metrics, "annotations": annotations or {}}
    if json_problem(measured, PARAM_NESTING) is None:
        # The usual case: nothing to drop, and this was the one walk over the points.
        return _build(MeasurementResult, {**fields, **measured}, "param", walked=True)
    metrics, annotations, dropped = finite_measurement(metrics, annotations or {})
    cleaned = {"message": dropped, "metrics": metrics, "annotations": annotations or {}}
    return _build(MeasurementResult, {**fields, **cleaned}, "param")


def adjustment_result(
    cmd_uid: str | None, *, components: dict[str, Any], metrics: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An ok ADJUSTMENT whose state holds ``components`` (the values now in force) and ``metrics``
    (as ``describe`` gives them), in the shape of a DESCRIPTION's ``descriptor``."""
    fields: dict[str, Any] = {"status": "ok", "reason": "success", "cmd_uid": cmd_uid}
    state: dict[str, Any] = {"application": {"components": components}}
    if metrics is not None:
        state["measurement"] = {"metrics": metrics}
    fields["state"] = state
    return _build(AdjustmentResult, fields, "param")


def failure_result(
    event: str, cmd_uid: str | None, *, status: str, reason: str, message: str | None
) -> dict[str, Any]:
    """A result that is not ok (``failed``, ``rejected``, ``aborted``, ``cancelled``) for ``event``.

    Whatever ``status`` and ``reason`` say, the result is valid: an unknown status is ``failed``,
    a reason that is not one word is made one, and the original text goes into the message
    (``statuses.normalise_failure``).
    """
    model = RESULT_MODELS.get(event)
    if model is None:
        raise ProtocolError(f"{_show(event)} is not a result event", field="event")
    status, reason, message = normalise_failure(status, reason, message)
    uid = cmd_uid if isinstance(cmd_uid, str) else None
    fields = {"status": status, "reason": reason, "message": message, "cmd_uid": uid}
    return _build(model, fields, "param")


def progress_param(
    cmd_uid: str | None, *, progress: float, runtime: float, message: str | None = None
) -> dict[str, Any]:
    """A progress post: percent done (kept within 0-100), seconds since the command arrived."""
    progress = min(100.0, max(0.0, progress)) if math.isfinite(progress) else 0.0
    runtime = max(0.0, runtime) if math.isfinite(runtime) else 0.0
    if message is not None and len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 3] + "..."  # a connector's text, posted every interval
    fields = {"progress": progress, "runtime": runtime, "cmd_uid": cmd_uid, "message": message}
    return _build(Progress, fields, "param")
