"""Between the wire and the operations: a command's param as an operation's arguments, an
operation's result as its result event's param, HELLO's telemetry and a cancel's reason.

Pure functions, apart from the runner's state: what the protocol wants, tested on its own.
"""

from __future__ import annotations

import logging
import platform
from typing import Any

from servo_actors import USER_AGENT, __version__
from servo_actors.actors.rules.results import ConnectorOutcome, OperationResult, empty_data
from servo_actors.config.models import ServoConfig
from servo_actors.connectors.base import Control
from servo_actors.errors import ProtocolError, ServoError
from servo_actors.protocol.commands import Command, OptimizerStatus
from servo_actors.protocol.statuses import reason_word
from servo_actors.protocol.writing import (
    adjustment_result,
    description_result,
    failure_result,
    measurement_result,
)
from servo_actors.vocabulary import ADJUSTMENT, DESCRIPTION, MEASUREMENT

__all__ = [
    "cancel_reason",
    "connector_control",
    "json_data",
    "result_param",
    "settings_only",
    "telemetry",
]

log = logging.getLogger(__name__)


def result_param(
    event: str,
    command: Command,
    result: OperationResult,
    requested: list[str] | None,
    described_metrics: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The param of the result event for ``result``: always a valid result, whatever the connectors
    returned. One that breaks the protocol becomes a ``failed`` result naming what is wrong; values
    that cannot be JSON (NaN, infinity) are dropped and said so (``measurement_result``).

    A DESCRIPTION or MEASUREMENT that is not ``ok`` still carries what the connectors that answered
    produced, whatever failed the others (not up, timeout, an error, an invalid or too large
    result), under the status, reason and message naming those that failed (README, "Partial
    results"); so does one of which a connector's part does not fit the protocol: that part is left
    out and named. An ADJUSTMENT that is not ``ok`` carries no state: its settings are not known.
    """
    cmd_uid = command.cmd_uid
    status, reason = result.status, result.reason
    messages = [result.message] if status != "ok" and result.message else []
    if status != "ok" and (event == ADJUSTMENT or not result.data):
        return failure_result(event, cmd_uid, status=status, reason=reason, message=result.message)
    param, misfits = _data_param(event, command, result, requested, described_metrics)
    if misfits:
        if status == "ok":
            status, reason = "failed", "invalid-result"
        messages.append(misfits)
        log.error("%s %s: %s", command.cmd, cmd_uid, misfits)
    if status == "ok":
        return param
    if event == ADJUSTMENT:
        return failure_result(event, cmd_uid, status=status, reason=reason, message="; ".join(messages))
    if param.get("message"):
        messages.append(param["message"])  # values dropped from what is kept
    param.update(failure_result(event, cmd_uid, status=status, reason=reason, message="; ".join(messages)))
    return param


_MISFITS = (ProtocolError, ServoError, AttributeError, TypeError, ValueError, RecursionError)
"""What building a result param raises when connector data does not fit the protocol."""


def _data_param(
    event: str,
    command: Command,
    result: OperationResult,
    requested: list[str] | None,
    described_metrics: dict[str, Any] | None,
) -> tuple[dict[str, Any], str | None]:
    """The ``ok`` param of ``result``'s data, and None; or, when some connector's part does not fit
    the protocol, the param of the parts that do and a message naming each one that does not."""
    data = result.data if isinstance(result.data, dict) else {}
    try:
        return _ok_param(event, command, data, requested, described_metrics), None
    except _MISFITS as exc:
        whole = f"connector results do not fit the protocol: {exc}"
    answered = [part for part in result.parts.values() if part.ok]
    fitting: list[ConnectorOutcome] = []
    problems: list[str] = []
    for part in answered:
        try:
            _ok_param(event, command, part.data, requested, described_metrics, quiet=True)
        except _MISFITS as exc:
            problems.append(
                f"the {command.cmd} result of connector {part.connector!r} does not fit the protocol: {exc}"
            )
        else:
            fitting.append(part)
    if problems:
        try:
            kept = _ok_param(event, command, _merged(event, fitting), requested, described_metrics)
        except _MISFITS:
            pass  # the parts fit one by one, not together: none is kept
        else:
            return kept, "; ".join(problems)
    return _ok_param(event, command, _merged(event, []), None, described_metrics), whole


def _merged(event: str, parts: list[ConnectorOutcome]) -> dict[str, Any]:
    """The data of ``parts`` merged as the supervisor merges them (``results.aggregate``)."""
    data = empty_data(_OPERATION_OF_EVENT[event])
    for part in parts:
        for key, merged in data.items():
            merged.update(part.data.get(key) or {})
    return data


_OPERATION_OF_EVENT = {DESCRIPTION: "describe", MEASUREMENT: "measure", ADJUSTMENT: "adjust"}


def _ok_param(
    event: str,
    command: Command,
    data: dict[str, Any],
    requested: list[str] | None,
    described_metrics: dict[str, Any] | None,
    *,
    quiet: bool = False,
) -> dict[str, Any]:
    """The ``ok`` param of ``data``; raises when it does not fit the protocol. ``quiet``: a trial
    (one connector's part alone), whose dropped values are not logged."""
    cmd_uid = command.cmd_uid
    if event == DESCRIPTION:
        return description_result(
            cmd_uid, components=data.get("components", {}), metrics=data.get("metrics", {})
        )
    if event == MEASUREMENT:
        metrics = data.get("metrics", {})
        if requested and isinstance(metrics, dict):
            # Only requested metrics reach the optimizer (interface.md).
            metrics = {name: value for name, value in metrics.items() if name in requested}
        param = measurement_result(cmd_uid, metrics=metrics, annotations=data.get("annotations", {}))
        if param.get("message") and not quiet:
            log.warning("%s %s: %s", command.cmd, cmd_uid, param["message"])
        return param
    return adjustment_result(cmd_uid, components=data.get("components", {}), metrics=described_metrics)


def telemetry(config: ServoConfig) -> dict[str, Any]:
    """What HELLO tells the optimizer about this servo."""
    return {
        "servo_actors.version": __version__,
        "agent": USER_AGENT,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "connectors": [{"name": spec.name, "type": spec.type} for spec in config.connectors],
    }


def connector_control(wire: Any) -> Control:
    """The connectors' ``Control`` from a command's wire control (its mappings copied)."""
    return Control(
        duration=wire.duration,
        warmup=wire.warmup,
        delay=wire.delay,
        settlement=wire.settlement,
        userdata=dict(wire.userdata),
        load=dict(wire.load),
        environment=dict(wire.environment),
    )


def settings_only(components: dict[str, Any]) -> dict[str, Any]:
    """``{component: {"settings": {setting: {"value": v}}}}``, the shape ``adjust`` receives."""
    return {
        name: {
            "settings": {
                key: {"value": setting.get("value")} for key, setting in (body.get("settings") or {}).items()
            }
        }
        for name, body in components.items()
    }


def cancel_reason(reply: OptimizerStatus) -> tuple[str, str]:
    """A reason word and a message from the optimizer's ``cancel``: its reason may be any text
    (``user/abort``, a sentence); the word is made from it and the text kept in the message."""
    text = (reply.reason or "").strip()
    word = reason_word(text, fallback="cancelled")
    message = reply.message or "cancelled by the optimizer"
    if text and text != word:
        message = f"{message} (reason: {text!r})"
    return word, message


def json_data(param: Any) -> Any:
    """A command's param as JSON data (a pydantic model dumped; anything else as it is), for a log event."""
    return param.model_dump(mode="json") if hasattr(param, "model_dump") else param
