"""HealthState: what /healthz and /readyz answer. Pure: the clock is an argument, nothing blocks.

**Healthy** (liveness): the control loop turned within ``stall_after`` seconds. The loop *turns*
when something it waits on answers: an exchange with the optimizer completes (whatever its HTTP
status: the loop is doing its job, retrying), or the servo's actor system answers (a liveness
ping, progress, a result) while no request to the optimizer is open. The runner keeps checking
its actor system while it waits on the optimizer, so those answers do not count then: a hung
optimizer request stalls the loop as surely as a deadlock or a supervisor stopped with SIGSTOP,
and a stopped servo process does not answer the probe at all.

**Ready** (readiness): the connectors have started (and not been lost since: a microreboot is
under way) and the last exchange with the optimizer got an HTTP 2xx answer.

Each answer is a ``Verdict``: ``ok`` and a JSON body that says why not.

>>> now = [0.0]
>>> state = HealthState(stall_after=10.0, clock=lambda: now[0])
>>> state.liveness().ok, state.readiness().body["reasons"]
(True, ['the connectors are starting', 'the optimizer has not been reached yet'])
>>> state.connectors_ready(); state.optimizer_answered()
>>> now[0] = 12.5
>>> state.liveness().body["reasons"]
['the control loop has not turned for 12.5s (settings.metrics.stall_after: 10s)']
>>> state.turned(); state.liveness().ok, state.readiness().ok
(True, True)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

NOT_STARTED = "the connectors are starting"
NOT_REACHED = "the optimizer has not been reached yet"


@dataclass(frozen=True)
class Verdict:
    ok: bool
    body: dict[str, Any] = field(default_factory=dict)


class HealthState:
    """The state behind /healthz and /readyz (see module docstring).

    Written by the runner's thread, read by the HTTP server's threads: every field is replaced
    whole (one reference store), so a reader sees either the old value or the new one.
    """

    def __init__(self, stall_after: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_after = stall_after
        self._clock = clock
        self._turned_at = clock()  # starting counts as a turn: probes pass while the servo starts
        self._requests_open = 0  # requests to the optimizer in flight (several threads post)
        self._requests_lock = threading.Lock()
        self._connectors: str | None = NOT_STARTED
        self._optimizer: str | None = NOT_REACHED
        self._command: str | None = None
        self._ended: str | None = None

    # ----- written by the loop -------------------------------------------------------------------

    def turned(self) -> None:
        """The loop got an answer from the optimizer (the hot path: one store)."""
        self._turned_at = self._clock()

    def actor_system_answered(self) -> None:
        """The actor system answered: a turn, unless the loop is waiting on the optimizer."""
        if not self._requests_open:
            self._turned_at = self._clock()

    def request_began(self) -> None:
        with self._requests_lock:
            self._requests_open += 1

    def request_ended(self) -> None:
        with self._requests_lock:
            self._requests_open = max(0, self._requests_open - 1)

    def connectors_ready(self) -> None:
        self._connectors = None

    def connectors_down(self, why: str) -> None:
        self._connectors = why

    def optimizer_answered(self) -> None:
        self._optimizer = None

    def optimizer_failed(self, problem: str) -> None:
        self._optimizer = f"the last request to the optimizer failed: {problem}"

    def ended(self, why: str) -> None:
        """The run is over (a terminal failure): unhealthy and not ready from now on, saying why."""
        self._ended = f"the run ended: {why}"
        self._connectors = self._ended

    def command(self, text: str | None) -> None:
        """The command in hand (``MEASURE c3``), shown in both bodies; None between commands."""
        self._command = text

    # ----- read by the probes --------------------------------------------------------------------

    def liveness(self) -> Verdict:
        idle = max(0.0, self._clock() - self._turned_at)
        reasons = [] if self._ended is None else [self._ended]
        if idle > self.stall_after and self._ended is None:
            reasons.append(
                f"the control loop has not turned for {idle:.1f}s "
                f"(settings.metrics.stall_after: {self.stall_after:g}s)"
            )
        body = {
            "status": "unhealthy" if reasons else "ok",
            "reasons": reasons,
            "last_turn_seconds_ago": round(idle, 3),
            "stall_after_seconds": self.stall_after,
            "command": self._command,
        }
        return Verdict(not reasons, body)

    def readiness(self) -> Verdict:
        connectors, optimizer = self._connectors, self._optimizer
        reasons = [reason for reason in (connectors, optimizer) if reason is not None]
        body = {
            "status": "not ready" if reasons else "ready",
            "reasons": reasons,
            "connectors": "started" if connectors is None else connectors,
            "optimizer": "reached" if optimizer is None else optimizer,
            "command": self._command,
        }
        return Verdict(not reasons, body)


class AppsHealth:
    """The health of a servo of several applications: a ``HealthState`` each (``of``), and the
    probes' answers over all of them. /healthz is ok while every application's loop turns; /readyz
    is ok while every application is ready; both bodies give each application's own under
    ``apps``, so a probe that fails names the application."""

    def __init__(
        self, apps: list[str], stall_after: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._stall_after, self._clock = stall_after, clock
        self.states = {app: HealthState(stall_after, clock=clock) for app in apps}

    def of(self, app: str) -> HealthState:
        """``app``'s state (a new one for an application a reload added)."""
        state = self.states.get(app)
        if state is None:
            state = self.states[app] = HealthState(self._stall_after, clock=self._clock)
        return state

    def forget(self, app: str) -> None:
        """``app`` was removed (a reload): the probes no longer answer for it."""
        self.states.pop(app, None)

    def liveness(self) -> Verdict:
        return self._over(
            {app: state.liveness() for app, state in list(self.states.items())}, "unhealthy", "ok"
        )

    def readiness(self) -> Verdict:
        return self._over(
            {app: state.readiness() for app, state in list(self.states.items())}, "not ready", "ready"
        )

    @staticmethod
    def _over(verdicts: dict[str, Verdict], bad: str, good: str) -> Verdict:
        failing = [app for app, verdict in verdicts.items() if not verdict.ok]
        body = {
            "status": bad if failing else good,
            "reasons": [
                f"{app}: {reason}" for app in failing for reason in verdicts[app].body.get("reasons", [])
            ],
            "apps": {app: verdict.body for app, verdict in verdicts.items()},
        }
        return Verdict(not failing, body)


__all__ = ["AppsHealth", "HealthState", "Verdict"]
