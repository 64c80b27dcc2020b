"""The connector API: a plain class with describe/measure/adjust/check. No Thespian here.

A connector runs in its own OS process, hosted by a generic actor. It may block, loop or crash:
the host enforces deadlines and cancels by killing the process, so a connector never needs to
clean up after a cancel or guard against being restarted.

Example::

    from servo_actors.connectors import Connector

    class Hello(Connector):
        def describe(self):
            return {"components": {"web": {"settings": {
                "replicas": {"type": "range", "min": 1, "max": 4, "step": 1, "value": 2}}}},
                "metrics": {"greetings": {"unit": "count"}}}

        def measure(self, metrics, control, progress):
            progress(100, "said hello")
            return {"metrics": {"greetings": {"unit": "count", "value": 1}}, "annotations": {}}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel

from servo_actors.errors import ConnectorError
from servo_actors.protocol.statuses import normalise_failure

__all__ = [
    "Connector",
    "ConnectorFailure",
    "Control",
    "ProgressFn",
]

ProgressFn = Callable[..., None]
"""``progress(percent, message="")``: report how far the running operation is (0-100)."""


@dataclass(frozen=True)
class Control:
    """How a MEASURE or ADJUST should run (docs/protocol.md, "MEASURE and MEASUREMENT": ``control``), durations in seconds."""

    duration: float = 0.0
    warmup: float = 0.0
    delay: float = 0.0
    settlement: float = 0.0
    userdata: dict[str, Any] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def expected_seconds(self) -> float:
        """How long the operation is expected to take when all goes well."""
        return self.warmup + self.duration + self.delay + self.settlement


class ConnectorFailure(ConnectorError):
    """Raise to end an operation with a status other than ``ok`` and a reason word.

    ``raise ConnectorFailure("p99 above 250 ms", status="aborted", reason="slo-violation")``
    Any other exception gives ``failed`` with the exception's type and message.

    ``status`` is one of ``failed``, ``rejected``, ``aborted``, ``cancelled``; ``reason`` one word.
    Anything else is made so here (an unknown status is ``failed``; ``"slo violation"`` becomes
    ``slo-violation``), and the message says what the connector wrote, so the optimizer always
    gets a valid result and people the original words.
    """

    def __init__(self, message: str, *, status: str = "failed", reason: str = "failed") -> None:
        status, reason, checked = normalise_failure(status, reason, str(message))
        super().__init__(checked)
        self.status = status
        self.reason = reason
        self.message = checked or ""


class Connector:
    """Base class of every connector. Override what the connector does; the rest is a no-op.

    ``self.name`` and ``self.config`` are set before ``startup``. ``config`` is an instance of
    ``config_model`` when the class sets one, else the raw dict from servo.yaml.
    """

    config_model: ClassVar[type[BaseModel] | None] = None

    def __init__(self, name: str, config: Any = None) -> None:
        model = type(self).config_model
        if model is not None and not isinstance(config, model):
            config = model.model_validate(config or {})  # a raw dict, as tests and scripts pass it
        self.name = name
        self.config = config

    @classmethod
    def operation_seconds(cls, config: Any, operation: str, control: Control) -> float:
        """The longest ``operation`` may take with this ``config`` and ``control``, when that can be
        longer than the control's own times (warmup + duration + delay + settlement).

        The supervisor kills a connector still at it past the operation's deadline: the longest
        time any connector declares here (or the control's times, if longer), plus
        ``supervisor.operation_grace``. A connector that waits for something of its own, a
        rollout with a timeout, say, declares that wait, so a slow but healthy operation is not
        killed as ``timeout``. ``config`` is as in ``self.config``. Called in the servo before
        each operation, not in the connector's process: it must be quick and do no I/O. The
        default, 0, leaves the deadline to the control.
        """
        return 0.0

    @classmethod
    def config_warnings(cls, config: Any) -> list[str]:
        """What ``validate`` should warn about in this ``config`` beyond its shape: something it
        names outside the file that is not there (a missing file, say), each a sentence that
        ``check`` would also say. ``config`` is as in ``self.config``. Called in the CLI's process,
        not the connector's: it must be quick, touch no network and run nothing. The default: none.
        """
        return []

    def startup(self) -> None:
        """Runs in the connector's fresh process, before any operation."""

    def shutdown(self) -> None:
        """Best effort on an orderly stop; a kill may come instead."""

    def describe(self) -> dict[str, Any]:
        """``{"components": {...}, "metrics": {...}}`` in the wire shapes of docs/protocol.md."""
        return {"components": {}, "metrics": {}}

    def measure(self, metrics: list[str], control: Control, progress: ProgressFn) -> dict[str, Any]:
        """``{"metrics": {...}, "annotations": {...}}`` for the requested metrics it describes."""
        return {"metrics": {}, "annotations": {}}

    def adjust(self, components: dict[str, Any], control: Control, progress: ProgressFn) -> dict[str, Any]:
        """Apply ``{component: {"settings": {setting: {"value": v}}}}``; return the components in force."""
        return {}

    def check(self) -> list[dict[str, Any]]:
        """``[{"name": str, "success": bool, "message": str}, ...]``."""
        return []
