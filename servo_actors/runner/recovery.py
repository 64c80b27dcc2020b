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

from servo_actors.actors.rules.restart_policy import RestartIntensity
from servo_actors.actors.runtime.system_link import SupervisorLost
from servo_actors.config import ServoConfig
from servo_actors.errors import SupervisorError
from servo_actors.observability import events
from servo_actors.protocol.progress_lane import in_background
from servo_actors.runner.state import RunnerState
from servo_actors.signals import StopRequested

__all__ = ["TICK_INTERVAL", "Recovery"]

log = logging.getLogger(__name__)

TICK_INTERVAL = 0.25
"""Longest the loop waits on a request to the optimizer (HELLO, WHATS_NEXT, a result, the open
progress post) before it ticks the watchdog again: a lost actor system is noticed within this plus
the watchdog's own bound (``supervisor.liveness``), however long the optimizer takes."""

_T = TypeVar("_T")


class Recovery:
    """The runner's recovery: microreboots of a lost actor system, and requests to the optimizer
    awaited while the watchdog ticks. Holds the microreboots' intensity."""

    def __init__(self, state: RunnerState) -> None:
        self._state = state
        self.microreboots = _intensity(state.config)

    def reset_intensity(self, config: ServoConfig) -> None:
        """A reload changed ``supervisor.microreboots``: count afresh under the new bound."""
        self.microreboots = _intensity(config)

    def connectors_started(self) -> None:
        """The connectors answered or are known not to be up: the probes and metrics say which."""
        state = self._state
        assert state.runtime is not None
        names = [spec.name for spec in state.config.connectors]
        events.connectors_ready(names)
        if state.root is not None:
            state.root.up(state.config.app or "")
        not_up = state.runtime.not_up_why
        if not_up:
            listed = "; ".join(f"{name} ({why})" for name, why in sorted(not_up.items()))
            log.warning(
                "serving the optimizer without connectors that are not up: %s; their parts of each "
                "command fail naming them while the supervisor keeps restarting them",
                listed,
            )
            events.connectors_not_up(names, state.runtime.not_up)

    def heal(self) -> None:
        """A lost actor system (already killed by the runtime) is replaced by a fresh one here."""
        state = self._state
        assert state.runtime is not None
        state.runtime.poll()
        lost = state.runtime.lost
        if lost is not None and not self.recover(lost):
            raise StopRequested(state.stop_name())

    def recover(self, lost: SupervisorLost) -> bool:
        """Microreboots until one holds; SupervisorError past the intensity, False when stopped.

        One application of several (``state.root``): the tree's rules decide whether and when
        (its backoff, waited out on this loop's thread only) each microreboot happens."""
        state = self._state
        assert state.runtime is not None
        app = state.config.app or ""
        while True:
            if state.root is not None:
                if not state.root.lost(app, str(lost), state.signals.stop):
                    return False
            elif self.microreboots.record(time.monotonic()):
                reboots = state.config.supervisor.microreboots
                raise SupervisorError(
                    f"{lost}; more than {reboots.max} microreboots within {reboots.period:g}s "
                    "(supervisor.microreboots): giving up"
                )
            events.microreboot(str(lost))
            started = time.monotonic()
            try:
                if not state.runtime.reboot(stop=state.signals.stop):
                    return False
            except SupervisorLost as again:
                lost = again
                continue
            log.info("microreboot done in %.2fs: fresh connectors answer", time.monotonic() - started)
            self.connectors_started()
            return True

    def await_optimizer(self, call: Callable[[], _T], *, heal: bool) -> _T:
        """``call()``, a request to the optimizer, on a worker while the watchdog ticks (see
        ``wait_ticking``); its return value, or the exception it raised."""
        future = in_background(call)
        self.wait_ticking(future, heal=heal)
        return future.result()

    def wait_ticking(self, future: Future[Any], *, heal: bool) -> None:
        """Wait until ``future`` is done, ticking the watchdog every ``TICK_INTERVAL``.

        With ``heal`` (between commands) a lost actor system is replaced at once (a microreboot);
        without (a command in flight) it is only noticed: the operation resolves ``failed`` and the
        loop heals before its next poll. A stop ends the request (the client watches the same
        event). If anything ends the wait early (a stop while healing, microreboots past their
        intensity), the run is ending: the request is stopped with it, never left polling.
        """
        state = self._state
        assert state.runtime is not None
        try:
            while not wait_for_future([future], timeout=TICK_INTERVAL).done:
                if heal:
                    self.heal()
                else:
                    state.runtime.poll()
        except BaseException:
            if not future.done():
                state.signals.stop.set()
            raise


def _intensity(config: ServoConfig) -> RestartIntensity:
    reboots = config.supervisor.microreboots
    return RestartIntensity(reboots.max, reboots.period)
