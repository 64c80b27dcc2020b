"""The environment variables a ``command`` connector's command receives: the control's times and
the settings an adjust asks for."""

from __future__ import annotations

import json
import re
from typing import Any

from servo_actors.connectors.base import ConnectorFailure, Control
from servo_actors.connectors.command.config import env_text
from servo_actors.connectors.command.process import seconds_text

__all__ = ["control_env", "setting_env_name", "settings_env"]


def control_env(control: Control) -> dict[str, str]:
    """The ``SERVO_CONTROL_*`` variables of a measure: the control's times and its userdata."""
    return {
        "SERVO_CONTROL_DURATION": seconds_text(control.duration),
        "SERVO_CONTROL_WARMUP": seconds_text(control.warmup),
        "SERVO_CONTROL_DELAY": seconds_text(control.delay),
        "SERVO_CONTROL_SETTLEMENT": seconds_text(control.settlement),
        "SERVO_CONTROL_USERDATA": json.dumps(control.userdata),
    }


def setting_env_name(component: str, setting: str) -> str:
    """``SERVO_WEB_CPU`` for ``("web", "cpu")``; ``SERVO_MY_APP_GC_TYPE`` for ``("my-app", "gc.type")``."""
    return re.sub(r"[^A-Z0-9]", "_", f"SERVO_{component}_{setting}".upper())


def settings_env(components: dict[str, Any]) -> dict[str, str]:
    """One variable per setting an adjust asks for (``setting_env_name``), its value as text;
    ConnectorFailure (rejected) when the request is malformed or two settings share a name."""
    env: dict[str, str] = {}
    origin: dict[str, str] = {}
    for component, body in components.items():
        settings = body.get("settings") if isinstance(body, dict) else None
        if not isinstance(settings, dict):
            raise _rejected(f"adjust: {component}: expected {{'settings': {{name: {{'value': v}}}}}}")
        for setting, wanted in settings.items():
            where = f"{component}.{setting}"
            if not isinstance(wanted, dict) or "value" not in wanted:
                raise _rejected(f"adjust: {where}: expected {{'value': v}}, got {wanted!r}")
            name = setting_env_name(component, setting)
            if name in env:
                raise _rejected(f"adjust: {where} and {origin[name]} would both be passed as {name}")
            text = env_text(wanted["value"])
            if "\0" in text:
                raise _rejected(f"adjust: {where}: a value cannot contain a NUL byte")
            env[name], origin[name] = text, where
    return env


def _rejected(message: str) -> ConnectorFailure:
    return ConnectorFailure(message, status="rejected", reason="invalid-value")
