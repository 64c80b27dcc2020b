"""Writing the wire: an event's ``param`` built from plain dicts (the shapes connectors return),
validated and returned as the wire dict; and the request body around it.

A result may carry a million points: the builders walk what they are given once in Python
(``json_problem``: nesting and NaN), the points are validated by pydantic's core alone, and what
they return (a ``WireParam``) is sent by ``request_body`` without being walked again.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel

from servo_actors.errors import ProtocolError
from servo_actors.protocol.json_bounds import (
    MAX_NESTING,
    TOO_DEEP,
    encode_checked,
    finite_measurement,
    first_non_finite,
    json_problem,
)
from servo_actors.protocol.reading import to_wire, validate
from servo_actors.protocol.results import (
    RESULT_MODELS,
    AdjustmentResult,
    DescriptionResult,
    GoodbyeParam,
    HelloParam,
    MeasurementResult,
    Progress,
)
from servo_actors.protocol.statuses import MAX_MESSAGE_CHARS, normalise_failure
from servo_actors.protocol.wire_types import Envelope, show_value

__all__ = [
    "PARAM_NESTING",
    "WireParam",
    "adjustment_result",
    "description_result",
    "envelope",
    "failure_result",
    "goodbye_param",
    "hello_param",
    "measurement_result",
    "progress_param",
    "request_body",
]


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
        raise ProtocolError(f"{show_value(event)} is not a result event", field="event")
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
