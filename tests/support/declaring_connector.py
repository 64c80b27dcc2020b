"""Test connectors that declare how long an operation may take (``Connector.operation_seconds``).

Importable by module path from every test (tests/support is on sys.path), hence also in the
connector hosts, which are forked from the test process.
"""

from __future__ import annotations

import time
from typing import Any

from servo_actors.connectors.base import Connector, Control, ProgressFn


class SlowAdjust(Connector):
    """Owns component ``knob``; its adjust takes ``adjust_seconds``, and it declares ``declared``
    seconds for it."""

    def describe(self) -> dict[str, Any]:
        return {"components": {"knob": {"settings": {}}}, "metrics": {}}

    @classmethod
    def operation_seconds(cls, config: Any, operation: str, control: Control) -> float:
        return float(config.get("declared", 0)) if operation == "adjust" else 0.0

    def adjust(self, components: dict[str, Any], control: Control, progress: ProgressFn) -> dict[str, Any]:
        time.sleep(float(self.config.get("adjust_seconds", 0)))
        return components


class RaisingDeclaration(Connector):
    @classmethod
    def operation_seconds(cls, config: Any, operation: str, control: Control) -> float:
        raise RuntimeError("no idea")


class NotANumber(Connector):
    @classmethod
    def operation_seconds(cls, config: Any, operation: str, control: Control) -> float:
        return float("nan")
