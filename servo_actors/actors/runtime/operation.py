"""What the runtime hands its callers to follow their requests: ``Operation``, an operation in
flight followed to its result through its progress, and ``CancelRequest``, a cancel in flight
(``ServoRuntime.begin`` and ``ServoRuntime.begin_cancel`` make them; the runtime fills them in as
the supervisor's answers arrive).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from servo_actors.actors.rules.results import OperationResult

__all__ = ["CancelRequest", "Operation"]


@dataclass
class CancelRequest:
    """A cancel in flight (see ``ServoRuntime.begin_cancel``); ``done`` once all connectors answer."""

    request_id: str
    operation: Operation | None
    done: bool = False


class Operation:
    """An operation in flight: ``progress`` (0-100, the highest reported) and ``message`` follow it."""

    def __init__(self, request_id: str, operation: str, deadline: float) -> None:
        self.request_id = request_id
        self.operation = operation
        self.deadline = deadline
        self.started = time.monotonic()
        self.progress = 0.0
        self.message = ""
        self.connector: str | None = None
        self.result: OperationResult | None = None
        self.on_progress: Callable[[float, str], None] | None = None

    @property
    def done(self) -> bool:
        return self.result is not None

    def __repr__(self) -> str:
        state = self.result.status if self.result else f"{self.progress:.0f}%"
        return f"<Operation {self.operation} {self.request_id} {state}>"
