"""How long connectors say an operation may take, beyond what its control says.

A connector whose operation can outlast the control's times (a Kubernetes ADJUST waits up to its
rollout ``timeout``, then maybe as long again for a rollback) declares it with the classmethod
``Connector.operation_seconds``. The runtime asks every connector that overrides it before each
operation and sends the answers with the ``Begin``; the operation's deadline, in the supervisor
and in the runtime's watch on the supervisor, is the longest declared time, or the control's own
times if longer, plus ``supervisor.operation_grace`` (``supervision_operation.operation_deadline``).

>>> from servo_actors.actors.rules.messages import ChildSpec
>>> times = DeclaredTimes([ChildSpec("w", "wait", import_path="servo_actors.connectors.wait:WaitConnector")])
>>> times.for_operation("adjust", Control(settlement=5))
{}
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Any

from servo_actors.actors.rules import messages as m
from servo_actors.connectors.base import Connector, Control
from servo_actors.connectors.registry import connector_class_at

__all__ = [
    "DECLARED_MAX",
    "DeclaredTimes",
]

DECLARED_MAX = 7 * 24 * 3600.0
"""Most seconds a declaration counts for (a week): a deadline stays a deadline."""

_log = logging.getLogger(__name__)


def _declares(cls: type[Connector]) -> bool:
    return (
        getattr(cls.operation_seconds, "__func__", None) is not vars(Connector)["operation_seconds"].__func__
    )


class DeclaredTimes:
    """The connectors of ``specs`` that declare times, each with its validated config (once)."""

    def __init__(self, specs: Iterable[m.ChildSpec]) -> None:
        self._declaring: list[tuple[str, type[Connector], Any]] = []
        for spec in specs:
            cls = connector_class_at(spec.import_path, spec.type)
            if _declares(cls):
                config = (
                    cls.config_model.model_validate(spec.config) if cls.config_model else dict(spec.config)
                )
                self._declaring.append((spec.name, cls, config))

    def for_operation(self, operation: str, control: Control) -> dict[str, float]:
        """Connector name -> seconds it declares for ``operation`` (only those above 0).

        A declaration that raises or is not a finite number counts as none, with a warning: the
        operation then runs within the control's times, as if the connector declared nothing.
        """
        declared: dict[str, float] = {}
        for name, cls, config in self._declaring:
            try:
                seconds = float(cls.operation_seconds(config, operation, control))
            except Exception as exc:  # connector code: whatever it raises
                _log.warning("connector %r: operation_seconds raised %s: %s", name, type(exc).__name__, exc)
                continue
            if not math.isfinite(seconds):
                _log.warning(
                    "connector %r: operation_seconds returned %r, not a number of seconds", name, seconds
                )
            elif seconds > 0:
                declared[name] = min(seconds, DECLARED_MAX)
        return declared
