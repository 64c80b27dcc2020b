"""RestartLedger: which connectors were restarted, and why, from what the runtime already hears.

The supervisor does not send a message per restart (a cancel of 50 connectors would queue 50 more
messages to the servo's process); instead every listing of its children (``Status``, a liveness
ping's answer every ``liveness.interval``; ``Ready``; ``Cancelled``) carries each child's latest
restarts, ``ChildStatus.history``: ``(generation started, reason)``, one entry per new generation,
its reason decided by the rules that ordered it (``crash``, ``start-timeout``, ``deadline``,
``cancel``, ``host-lost``, ``retry``). This ledger (pure: no I/O, no clock) reports each entry it
has not seen yet, once: one restart, one count, one log line, one generation number, however
many restarts fall between two listings (up to ``supervision.RESTART_HISTORY`` of one child).
The runtime adds what only it knows: a fresh supervisor (``reset``: a microreboot restarts every
connector). ``ConnectorFailed`` (restart intensity exceeded for one connector) is an escalation.

>>> from servo_actors.actors.rules import messages as m
>>> seen = []
>>> ledger = RestartLedger(lambda *event: seen.append(event), lambda *event: seen.append(event))
>>> ledger.seen(m.Ready("r1", (m.ChildStatus("prom", "ready", 11, 1, 0),), 10, 10))
>>> ledger.seen(m.Cancelled("c1", (m.ChildStatus("prom", "ready", 12, 3, 1, history=((2, "crash"), (3, "cancel"))),)))
>>> ledger.seen(m.Status("s1", (m.ChildStatus("prom", "ready", 12, 3, 1, history=((2, "crash"), (3, "cancel"))),), 10, 10))
>>> seen
[('prom', 'crash', 2, None), ('prom', 'cancel', 3, 12)]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servo_actors.actors.rules import messages as m

RestartHook = Callable[[str, str, int | None, int | None], None]
"""``(connector, reason, generation, pid)``."""
EscalationHook = Callable[[str, str], None]
"""``(connector, message)``."""


class RestartLedger:
    """Turns the supervisor's listings into restart and escalation events (see module docstring)."""

    def __init__(self, on_restart: RestartHook, on_escalation: EscalationHook) -> None:
        self._on_restart = on_restart
        self._on_escalation = on_escalation
        self._counted: dict[str, int] = {}  # name -> the newest generation already accounted for
        self._latest: tuple[m.ChildStatus, ...] = ()

    def connector_pids(self) -> list[int]:
        """PIDs of this host's connector processes in the latest listing (some may have exited
        since); a connector on a member system (``where``) has a PID of that host, not listed."""
        return [
            child.pid
            for child in self._latest
            if child.pid is not None and child.state != "down" and getattr(child, "where", None) is None
        ]

    def not_up(self) -> dict[str, str]:
        """Connectors of the latest listing that are not up, with why (``crash-loop``, ...)."""
        return {
            child.name: child.down_reason or child.state
            for child in self._latest
            if child.down_reason is not None or child.state in ("failed", "waiting")
        }

    def not_up_why(self) -> dict[str, str]:
        """As ``not_up``, each with the latest failure in words: ``crash-loop: its start failed (...)``."""
        return {
            child.name: f"{child.down_reason or child.state}: {child.down_why}"
            if child.down_why
            else child.state
            for child in self._latest
            if child.down_reason is not None or child.state in ("failed", "waiting")
        }

    def reset(self, reason: str | None = None) -> None:
        """A fresh supervisor (start, microreboot): forget every generation. With ``reason``, each
        connector seen running counts as restarted for it (a microreboot restarts them all)."""
        if reason is not None:
            for child in self._latest:
                if child.state != "down":
                    self._on_restart(child.name, reason, None, None)
        self._counted.clear()
        self._latest = ()

    def seen(self, message: Any) -> None:
        """Read one message from the supervisor (anything else is ignored)."""
        if isinstance(message, (m.Ready, m.Status, m.Cancelled)):
            self._children(message.children)
        elif isinstance(message, m.ConnectorFailed):
            self._on_escalation(message.connector, message.message)

    def _children(self, children: tuple[m.ChildStatus, ...]) -> None:
        for child in children:
            counted = self._counted.get(child.name, 0)
            for generation, reason in child.history:
                if generation > counted:
                    pid = child.pid if generation == child.generation else None
                    self._on_restart(child.name, reason, generation, pid)
            self._counted[child.name] = max(counted, child.generation)
        self._latest = children


__all__ = ["RestartLedger"]
