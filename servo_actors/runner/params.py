"""Between the wire and the operations: a command's param as an operation's arguments, an
operation's result as its result event's param, HELLO's telemetry and a cancel's reason.

Pure functions, apart from the runner's state: what the protocol wants, tested on its own.
"""

from __future__ import annotations

import logging
import platform
from typing import Any

from servo_actors import USER_AGENT, __version__
from servo_actors.actors import OperationResult
from servo_actors.config import ServoConfig
from servo_actors.connectors import Control
from servo_actors.errors import ProtocolError, ServoError
from servo_actors.protocol.commands import Command, OptimizerStatus
from servo_actors.protocol.statuses import reason_word
from servo_actors.protocol.writing import (
    adjustment_result,
    description_result,
    failure_result,
    measurement_result,
)
from servo_actors.vocabulary import ADJUSTMENT, DESCRIPTION, MEASUREMENT, NOT_UP_REASONS

__all__ = [
    "_cancel_reason",
    "_control",
    "_data_param",
    "_dump",
    "_settings_only",
    "result_param",
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
    that cannot be JSON (NaN, infinity) are dropped and said so (``measurement_result``)."""
    cmd_uid = command.cmd_uid
    failure = None
    if result.status != "ok":
        # failure_result makes any status and reason valid, keeping the original words.
        failure = failure_result(
            event, cmd_uid, status=result.status, reason=result.reason, message=result.message
        )
        if result.reason not in NOT_UP_REASONS or event == ADJUSTMENT or not result.data:
            return failure
    param = _data_param(event, command, result, requested, described_metrics)
    if failure is not None and param.get("status") == "ok":
        # Partial: what the connectors that are up have, under the failure naming those that are not.
        param.update(failure)
    return param


def _data_param(
    event: str,
    command: Command,
    result: OperationResult,
    requested: list[str] | None,
    described_metrics: dict[str, Any] | None,
) -> dict[str, Any]:
    cmd_uid = command.cmd_uid
    try:
        data = result.data if isinstance(result.data, dict) else {}
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
            if param.get("message"):
                log.warning("%s %s: %s", command.cmd, cmd_uid, param["message"])
            return param
        return adjustment_result(cmd_uid, components=data.get("components", {}), metrics=described_metrics)
    except (ProtocolError, ServoError, AttributeError, TypeError, ValueError, RecursionError) as exc:
        message = f"connector results do not fit the protocol: {exc}"
        log.error("%s %s: %s", command.cmd, cmd_uid, message)
        return failure_result(event, cmd_uid, status="failed", reason="invalid-result", message=message)


def telemetry(config: ServoConfig) -> dict[str, Any]:
    """What HELLO tells the optimizer about this servo."""
    return {
        "servo_actors.version": __version__,
        "agent": USER_AGENT,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "connectors": [{"name": spec.name, "type": spec.type} for spec in config.connectors],
    }


def _control(wire: Any) -> Control:
    return Control(
        duration=wire.duration,
        warmup=wire.warmup,
        delay=wire.delay,
        settlement=wire.settlement,
        userdata=dict(wire.userdata),
        load=dict(wire.load),
        environment=dict(wire.environment),
    )


def _settings_only(components: dict[str, Any]) -> dict[str, Any]:
    """``{component: {"settings": {setting: {"value": v}}}}``, the shape ``adjust`` receives."""
    return {
        name: {
            "settings": {
                key: {"value": setting.get("value")} for key, setting in (body.get("settings") or {}).items()
            }
        }
        for name, body in components.items()
    }


def _cancel_reason(reply: OptimizerStatus) -> tuple[str, str]:
    """A reason word and a message from the optimizer's ``cancel``: its reason may be any text
    (``user/abort``, a sentence); the word is made from it and the text kept in the message."""
    text = (reply.reason or "").strip()
    word = reason_word(text, fallback="cancelled")
    message = reply.message or "cancelled by the optimizer"
    if text and text != word:
        message = f"{message} (reason: {text!r})"
    return word, message


def _dump(param: Any) -> Any:
    return param.model_dump(mode="json") if hasattr(param, "model_dump") else param
