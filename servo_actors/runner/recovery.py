"""Keeping the servo's own actor system alive under the loop: microreboots and the watchdog's ticks.

A lost actor system (supervisor, Thespian admin or logger dead, stopped or not answering) is
killed by the runtime and replaced here by a fresh one (a microreboot); more than
``supervisor.microreboots.max`` within ``period`` raise ``SupervisorError`` (the run ends). Every
request to the optimizer is awaited here too, ticking the watchdog every ``TICK_INTERVAL``, so a
loss is noticed however long the optimizer takes. Apart from the loop: this is the crash-only
recovery, the loop only decides when to call it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_for_future
from typing import Any, TypeVar

from servo_actors.actors.system_link import SupervisorLost
from servo_actors.errors import SupervisorError
from servo_actors.observability import events
from servo_actors.protocol.progress_lane import in_background
from servo_actors.runner.state import RunnerState
from servo_actors.signals import StopRequested

__all__ = ["TICK_INTERVAL", "RunnerRecovery"]

log = logging.getLogger(__name__)

TICK_INTERVAL = 0.25
"""Longest the loop waits on a request to the optimizer (HELLO, WHATS_NEXT, a result, the open
progress post) before it ticks the watchdog again: a lost actor system is noticed within this plus
the watchdog's own bound (``supervisor.liveness``), however long the optimizer takes."""

_T = TypeVar("_T")


class RunnerRecovery(RunnerState):
    """The runner's recovery: microreboots of a lost actor system, and requests to the optimizer
    awaited while the watchdog ticks."""

    def _connectors_started(self) -> None:
        """The connectors answered or are known not to be up: the probes and metrics say which."""
        assert self.runtime is not None
        names = [spec.name for spec in self.config.connectors]
        events.connectors_ready(names)
        not_up = self.runtime.not_up_why
        if not_up:
            listed = "; ".join(f"{name} ({why})" for name, why in sorted(not_up.items()))
            log.warning(
                "serving the optimizer without connectors that are not up: %s; their parts of each "
                "command fail naming them while the supervisor keeps restarting them",
                listed,
            )
            events.connectors_not_up(names, self.runtime.not_up)

    def _heal(self) -> None:
        """A lost actor system (already killed by the runtime) is replaced by a fresh one here."""
        assert self.runtime is not None
        self.runtime.poll()
        lost = self.runtime.lost
        if lost is not None and not self._recover(lost):
            raise StopRequested(self._stop_name())

    def _recover(self, lost: SupervisorLost) -> bool:
        """Microreboots until one holds; SupervisorError past the intensity, False when stopped."""
        assert self.runtime is not None
        while True:
            reboots = self.config.supervisor.microreboots
            if self._microreboots.record(time.monotonic()):
                raise SupervisorError(
                    f"{lost}; more than {reboots.max} microreboots within {reboots.period:g}s "
                    "(supervisor.microreboots): giving up"
                )
            events.microreboot(str(lost))
            started = time.monotonic()
            try:
                if not self.runtime.reboot(stop=self.signals.stop):
                    return False
            except SupervisorLost as again:
                lost = again
                continue
            log.info("microreboot done in %.2fs: fresh connectors answer", time.monotonic() - started)
            self._connectors_started()
            return True

    def _await_optimizer(self, call: Callable[[], _T], *, heal: bool) -> _T:
        """``call()``, a request to the optimizer, on a worker while the watchdog ticks (see
        ``_wait_ticking``); its return value, or the exception it raised."""
        future = in_background(call)
        self._wait_ticking(future, heal=heal)
        return future.result()

    def _wait_ticking(self, future: Future[Any], *, heal: bool) -> None:
        """Wait until ``future`` is done, ticking the watchdog every ``TICK_INTERVAL``.

        With ``heal`` (between commands) a lost actor system is replaced at once (a microreboot);
        without (a command in flight) it is only noticed: the operation resolves ``failed`` and the
        loop heals before its next poll. A stop ends the request (the client watches the same
        event). If anything ends the wait early (a stop while healing, microreboots past their
        intensity), the run is ending: the request is stopped with it, never left polling.
        """
        assert self.runtime is not None
        try:
            while not wait_for_future([future], timeout=TICK_INTERVAL).done:
                if heal:
                    self._heal()
                else:
                    self.runtime.poll()
        except BaseException:
            if not future.done():
                self.signals.stop.set()
            raise
