"""The environment variables a ``command`` connector's command receives: the control's times and
the settings an adjust asks for."""

from __future__ import annotations

import json
import re
from typing import Any

from servo_actors.connectors.base import ConnectorFailure, Control
from servo_actors.connectors.command.config import _env_text
from servo_actors.connectors.command.process import _seconds

__all__ = ["setting_env_name"]


def _control_env(control: Control) -> dict[str, str]:
    return {
        "SERVO_CONTROL_DURATION": _seconds(control.duration),
        "SERVO_CONTROL_WARMUP": _seconds(control.warmup),
        "SERVO_CONTROL_DELAY": _seconds(control.delay),
        "SERVO_CONTROL_SETTLEMENT": _seconds(control.settlement),
        "SERVO_CONTROL_USERDATA": json.dumps(control.userdata),
    }


def setting_env_name(component: str, setting: str) -> str:
    """``SERVO_WEB_CPU`` for ``("web", "cpu")``; ``SERVO_MY_APP_GC_TYPE`` for ``("my-app", "gc.type")``."""
    return re.sub(r"[^A-Z0-9]", "_", f"SERVO_{component}_{setting}".upper())


def _settings_env(components: dict[str, Any]) -> dict[str, str]:
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
            text = _env_text(wanted["value"])
            if "\0" in text:
                raise _rejected(f"adjust: {where}: a value cannot contain a NUL byte")
            env[name], origin[name] = text, where
    return env


def _rejected(message: str) -> ConnectorFailure:
    return ConnectorFailure(message, status="rejected", reason="invalid-value")
