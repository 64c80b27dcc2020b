"""Reading the wire: a JSON value as a model, or one ``ProtocolError`` whose ``field`` is the
dotted path at fault, e.g. ``param.control.duration: not a duration: 'x'``. Nothing else escapes
the parse functions. ``to_wire`` dumps only what was set, so a message read from the wire dumps
back to the same JSON (durations come back as seconds)::

    >>> cmd = parse_reply({"cmd": "MEASURE", "cmd_uid": "c2",
    ...                    "param": {"metrics": ["throughput"], "control": {"duration": "5m"}}})
    >>> cmd.param.control.duration
    300.0
    >>> to_wire(cmd)
    {'cmd': 'MEASURE', 'cmd_uid': 'c2', 'param': {'metrics': ['throughput'], 'control': {'duration': 300}}}
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from servo_actors.errors import ProtocolError
from servo_actors.protocol.commands import COMMAND_MODELS, Command, OptimizerStatus
from servo_actors.protocol.json_bounds import MAX_NESTING, nested_deeper_than
from servo_actors.protocol.results import RESULT_MODELS, GoodbyeParam, HelloParam, Progress
from servo_actors.protocol.wire_types import Envelope, Event, show_value

__all__ = ["parse_envelope", "parse_param", "parse_reply", "to_wire", "validate"]

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
        raise ProtocolError(f"expected a JSON object, got {show_value(obj)}", field=field)
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
        raise ProtocolError(f"expected a JSON object, got {show_value(obj)}", field="reply")
    if "cmd" not in obj:
        return validate(OptimizerStatus, obj)
    name = obj["cmd"]
    model = COMMAND_MODELS.get(name) if isinstance(name, str) else None
    if model is None:
        raise ProtocolError(
            f"unknown command {show_value(name)} (expected DESCRIBE, MEASURE, ADJUST or SLEEP)", field="cmd"
        )
    return validate(model, obj)  # type: ignore[return-value]  # every model of COMMAND_MODELS is a Command


def parse_envelope(obj: Any) -> Envelope:
    """A request body (the server's side); the event's param is checked by ``parse_param``."""
    return validate(Envelope, obj)


def parse_param(event: str, param: Any) -> BaseModel | None:
    """Validate an event's ``param``: a result model, ``Progress``, ``HelloParam``... or None.

    Under a result event, a param without ``status`` is progress (docs/protocol.md, "Progress and cancellation").
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
        raise ProtocolError(f"unknown event {show_value(event)}", field="event")
    if isinstance(param, dict) and "status" not in param:
        return validate(Progress, param, field="param")
    return validate(result_model, param, field="param")


def to_wire(model: BaseModel) -> dict[str, Any]:
    """The JSON-able dict of ``model``: only the fields that were set, extras included."""
    return model.model_dump(mode="json", exclude_unset=True)
