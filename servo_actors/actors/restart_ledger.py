"""RestartLedger: which connectors were restarted, and why, from what the runtime already hears.

The supervisor does not announce restarts; the runtime hears their traces in answers it receives
anyway, and this ledger reads them (pure: no I/O, no clock; one call per message):

- every ``Status`` (a liveness ping's answer, every ``liveness.interval``), ``Ready`` and
  ``Cancelled`` lists each child's ``generation`` (a new one at every spawn) and ``restarts`` (the
  crashes the supervisor counted against restart intensity);
- a ``Done`` whose part of a connector has reason ``timeout`` means the supervisor killed it at
  the operation's deadline (unless the connector itself said ``timeout``: then it is not killed,
  and its next listing shows it still ready in the same generation);
- the runtime itself says when it sends a cancel (``cancel_sent``), and when it starts a fresh
  supervisor (``reset``).

A child whose ``restarts`` grew crashed that many times (reason ``crash``). A child with a new
generation was also restarted by its deadline (``deadline``) if one is pending, and by a cancel
in flight (``cancel``); with neither nor a crash, because a sibling crashed (``crash``, strategies
one_for_all/rest_for_one), or, for a connector placed on member systems, because its host was lost
(``host-lost``: never a crash there, as the supervisor counts none). Listings come at least every ``liveness.interval`` and with every
cancel's answer, so restarts of one connector rarely fall between two of them; when they do,
each cause is counted once (a cancel that catches a deadline's kill before its respawn would be
counted as a second restart: the deadline's respawn takes milliseconds, a cancel a round trip).
Thespian does not keep the order of messages, so a deadline's ``Done`` may arrive just after the
listing that shows the fresh generation: such an unexplained restart waits for the next message
before it is called a crash. ``SupervisorFailed`` is an escalation.

>>> from servo_actors.actors import messages as m
>>> seen = []
>>> ledger = RestartLedger(lambda *event: seen.append(event), lambda *event: seen.append(event))
>>> ledger.seen(m.Ready("r1", (m.ChildStatus("prom", "ready", 11, 1, 0),), 10, 10))
>>> ledger.cancel_sent()
>>> ledger.seen(m.Cancelled("c1", (m.ChildStatus("prom", "ready", 12, 2, 0),)))
>>> seen
[('prom', 'cancel', 2, 12)]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servo_actors.actors import messages as m

DEADLINE_REASON = "timeout"
"""The reason of a part the supervisor ended at the operation's deadline (``Supervisor._deadline``)."""
KILLED_STATES = ("killing", "queued")
"""States of a child between its kill and its respawn."""

RestartHook = Callable[[str, str, int | None, int | None], None]
"""``(connector, reason, generation, pid)``."""
EscalationHook = Callable[[str, str], None]
"""``(connector, message)``."""


class RestartLedger:
    """Turns the supervisor's answers into restart and escalation events (see module docstring)."""

    def __init__(self, on_restart: RestartHook, on_escalation: EscalationHook) -> None:
        self._on_restart = on_restart
        self._on_escalation = on_escalation
        self._known: dict[str, tuple[int, int]] = {}  # name -> (generation, restarts)
        self._latest: tuple[m.ChildStatus, ...] = ()
        self._deadlines: set[str] = set()
        self._unexplained: dict[str, m.ChildStatus] = {}
        self._cancelling = False

    def connector_pids(self) -> list[int]:
        """PIDs of this host's connector processes in the latest listing (some may have exited
        since); a connector on a member system (``where``) has a PID of that host, not listed."""
        return [
            child.pid
            for child in self._latest
            if child.pid is not None and child.state != "down" and getattr(child, "where", None) is None
        ]

    def reset(self, reason: str | None = None) -> None:
        """A fresh supervisor (start, microreboot): forget every generation. With ``reason``, each
        connector seen running counts as restarted for it (a microreboot restarts them all)."""
        if reason is not None:
            for child in self._latest:
                if child.state != "down":
                    self._on_restart(child.name, reason, None, None)
        self._known.clear()
        self._latest = ()
        self._deadlines.clear()
        self._unexplained.clear()
        self._cancelling = False

    def cancel_sent(self) -> None:
        """Every fresh generation until the cancel is answered is the cancel's doing."""
        self._cancelling = True

    def seen(self, message: Any) -> None:
        """Read one message from the supervisor (anything else is ignored)."""
        if isinstance(message, (m.Ready, m.Status, m.Cancelled)):
            self._settle(deadlines=set())
            self._children(message.children)
            if isinstance(message, m.Cancelled):
                self._cancelling = False
        elif isinstance(message, m.Done):
            ended = {name for name, part in message.result.parts.items() if part.reason == DEADLINE_REASON}
            self._settle(deadlines=ended)
            self._deadlines |= ended
        elif isinstance(message, m.SupervisorFailed):
            self._on_escalation(message.connector, message.message)

    def _settle(self, deadlines: set[str]) -> None:
        """Restarts left unexplained by the previous listing: a deadline if this Done says so."""
        for name, child in self._unexplained.items():
            reason = "deadline" if name in deadlines else "crash"
            deadlines.discard(name)
            self._on_restart(name, reason, child.generation, child.pid)
        self._unexplained.clear()

    def _children(self, children: tuple[m.ChildStatus, ...]) -> None:
        for child in children:
            name = child.name
            known = self._known.get(name)
            self._known[name] = (child.generation, child.restarts)
            if known is None:
                continue
            generation, restarts = known
            crashes = max(0, child.restarts - restarts)
            for _ in range(crashes):
                self._on_restart(name, "crash", child.generation, child.pid)
            respawned = generation != 0 and child.generation != generation
            if not respawned:
                if name in self._deadlines and child.state not in KILLED_STATES:
                    self._deadlines.discard(name)  # a timeout the connector reported itself: not killed
                continue
            # Several restarts may fall between two listings: each known cause counts once.
            explained = crashes > 0
            if name in self._deadlines:
                self._deadlines.discard(name)
                self._on_restart(name, "deadline", child.generation, child.pid)
                explained = True
            if self._cancelling:
                self._on_restart(name, "cancel", child.generation, child.pid)
                explained = True
            if not explained and getattr(child, "where", None) is not None:
                # Placed on member systems: restarted without a crash because its host was lost.
                self._on_restart(name, "host-lost", child.generation, child.pid)
            elif not explained:
                self._unexplained[name] = child
        self._latest = children


__all__ = ["RestartLedger"]
