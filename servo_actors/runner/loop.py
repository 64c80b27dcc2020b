"""The serve loop: HELLO, then WHATS_NEXT and the command it brings, until a signal ends the run.

``Runner`` is the loop (``run``, ``request_stop``, the dispatch of each command, a SLEEP, the
GOODBYE); it holds its collaborators: ``Operations`` (performing one command), ``Recovery``
(microreboots, the watchdog's ticks), ``Reload`` (SIGHUP), and the ``RunnerState`` they share.
"""

from __future__ import annotations

import logging
import time

from servo_actors import observability
from servo_actors.actors import ServoRuntime
from servo_actors.actors.runtime.system_link import SupervisorLost
from servo_actors.config import ServoConfig
from servo_actors.errors import SupervisorError
from servo_actors.observability import events
from servo_actors.protocol.commands import (
    AdjustCommand,
    Command,
    DescribeCommand,
    MeasureCommand,
    SleepCommand,
)
from servo_actors.runner.app_restarts import AppRestarts
from servo_actors.runner.operations import Operations
from servo_actors.runner.params import connector_control, json_data, settings_only, telemetry
from servo_actors.runner.recovery import Recovery
from servo_actors.runner.reload import Reload
from servo_actors.runner.state import Observer, RunnerState
from servo_actors.signals import SignalWatcher, StopRequested

__all__ = ["SLEEP_SLICE", "Runner"]

log = logging.getLogger(__name__)

SLEEP_SLICE = 60.0
"""Longest a SLEEP waits in one go. It wakes sooner: at once for a signal (a stop, a SIGHUP reload)
or the death of a process of the actor system, and whenever the watchdog must look again (about
every ``supervisor.liveness.idle_interval``): see ``ServoRuntime.idle_wait``. A bound only: the
watchdog's looks pace an idle servo's wakes, not this."""


class Runner:
    """Runs the servo against the optimizer named in ``config`` until told to stop.

    ``config_path`` is re-read on SIGHUP; a broken new file is refused and the old one kept. The
    runner holds its state (``RunnerState``) and its collaborators, each holding the state too:
    ``Recovery`` (microreboots, requests awaited while the watchdog ticks), ``Operations`` (one
    command through the operation path) and ``Reload`` (SIGHUP).
    """

    def __init__(
        self,
        config: ServoConfig,
        *,
        config_path: str | None = None,
        observer: Observer | None = None,
        signals: SignalWatcher | None = None,
        root: AppRestarts | None = None,
    ) -> None:
        self._state = RunnerState(
            config, config_path=config_path, observer=observer, signals=signals, root=root
        )
        self._recovery = Recovery(self._state)
        self._operations = Operations(self._state, self._recovery)
        self._reloading = Reload(self._state, self._recovery)

    @property
    def config(self) -> ServoConfig:
        """The configuration in force (a SIGHUP reload replaces it)."""
        return self._state.config

    @property
    def signals(self) -> SignalWatcher:
        return self._state.signals

    @property
    def runtime(self) -> ServoRuntime | None:
        """The connectors' runtime while the run lasts (a SIGHUP reload replaces it)."""
        return self._state.runtime

    """Runs the servo against the optimizer named in ``config`` until told to stop.

    ``config_path`` is re-read on SIGHUP; a broken new file is refused and the old one kept.
    """

    # --- public -------------------------------------------------------------------------------

    def run(self) -> int:
        """The exit code: 0 after SIGTERM/SIGINT or ``request_stop``; 1 after a terminal failure.

        With ``settings.metrics.listen``, /metrics, /healthz and /readyz are served meanwhile
        (by the caller instead for one application of several: ``root``).
        """
        if self._state.root is not None:
            return self._run()
        metrics = self._state.config.settings.metrics
        names = (spec.name for spec in self._state.config.connectors)
        with observability.serving(metrics, names, app=self._state.config.app or "") as server:
            try:
                code = self._run()
            except SupervisorError as exc:  # the connectors could not start at all
                events.run_ended(str(exc))
                self._linger(server)
                raise
            if code:
                self._linger(server)
            return code

    def _linger(self, server: observability.MetricsServer | None) -> None:
        """A terminal failure is in the counters: let a scrape see it (SIGTERM/SIGINT end the wait)."""
        if server is None:
            return
        self._state.signals.install()
        try:
            observability.linger(self._state.config.settings.metrics, server, self._state.signals.stop)
        finally:
            self._state.signals.restore()

    def _run(self) -> int:
        if self._state.root is None:
            self._state.signals.install()
        try:
            # The actor system forks its processes: start it before the HTTP client makes threads.
            self._state.runtime = ServoRuntime(self._state.config, root=self._state.root)
            try:
                started = self._state.runtime.start(stop=self._state.signals.stop, patient=True)
            except SupervisorLost as exc:
                started = self._recovery.recover(exc)
            if not started:
                log.info("stopped (%s) while the connectors were starting", self._state.stop_name())
                return 0
            self._recovery.connectors_started()
            self._state.client = self._state.new_client(self._state.config)
            return self._serve()
        finally:
            if self._state.runtime is not None:
                self._state.runtime.stop()
            if self._state.client is not None:
                self._state.client.close()
            if self._state.identity is not None:
                self._state.identity.release()
            if self._state.root is None:
                self._state.signals.restore()

    def request_stop(self, reason: str = "shutdown") -> None:
        """End the run as a signal would, with GOODBYE ``reason`` (safe from any thread)."""
        self._state.stop_reason = reason
        self._state.signals.stop.set()  # wakes a SLEEP too

    # --- the loop ------------------------------------------------------------------------------

    def _serve(self) -> int:
        assert self._state.client is not None and self._state.runtime is not None
        client = self._state.client
        self._recovery.await_optimizer(lambda: client.hello(telemetry(self._state.config)), heal=True)
        try:
            while not self._state.signals.stop.is_set():
                try:
                    if self._state.root is None and self._state.signals.take_reload():
                        self._reloading.reload()
                    self._recovery.heal()
                    failure = self._state.runtime.failure
                    if failure is not None:
                        raise failure
                    command = self._recovery.await_optimizer(self._state.client.whats_next, heal=True)
                    if command is None:  # stopped while polling
                        break
                    self._dispatch(command)
                except SupervisorLost:
                    # Lost at any point of the turn (even between _heal and here): not terminal,
                    # the next turn's _heal microreboots it (or stops past the intensity).
                    continue
        except StopRequested:
            pass
        except SupervisorError as exc:
            # The servo's own actor system keeps getting lost (microreboot intensity): no hot loop,
            # stop. (A connector past its restart intensity is marked failed; the loop goes on.)
            log.error("stopping: %s", exc)
            events.run_ended(str(exc))
            self._state.runtime.stop()
            self._goodbye("failure")
            return 1
        # An operation may still run: kill it first (crash-only), then say goodbye.
        self._state.runtime.stop()
        self._goodbye(self._state.stop_name())
        return 0

    def _dispatch(self, command: Command) -> None:
        events.command_received(command.cmd, command.cmd_uid)
        self._state.notify(
            "command", {"cmd": command.cmd, "cmd_uid": command.cmd_uid, "param": json_data(command.param)}
        )
        if isinstance(command, SleepCommand):
            self._sleep(command.param.duration)
        elif isinstance(command, DescribeCommand):
            self._operations.operate(command, "describe", {}, progress=False)
        elif isinstance(command, MeasureCommand):
            control = connector_control(command.param.control)
            self._operations.operate(
                command, "measure", {"metrics": list(command.param.metrics), "control": control}
            )
        elif isinstance(command, AdjustCommand):
            control = connector_control(command.param.control)
            components = command.param.state.model_dump(mode="json")["application"]["components"]
            self._operations.operate(
                command, "adjust", {"components": settings_only(components), "control": control}
            )

    def _sleep(self, seconds: float) -> None:
        assert self._state.runtime is not None
        deadline = time.monotonic() + seconds
        while not self._state.signals.stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            wake = self._state.signals.wake_fd
            self._state.runtime.idle_wait(min(remaining, SLEEP_SLICE), () if wake is None else (wake,))
            self._state.signals.drain_wake()
            if self._state.signals.stop.is_set():
                return
            if self._state.root is None and self._state.signals.take_reload():
                self._reloading.reload()
            # A death during a long SLEEP is healed now, not when the SLEEP ends; a supervisor that
            # gave up (restart intensity) ends the run now too.
            self._recovery.heal()
            if self._state.runtime.failure is not None:
                raise self._state.runtime.failure

    def _goodbye(self, reason: str) -> None:
        """GOODBYE ``reason``, said in the log too: the one line a stopped servo leaves (the client
        warns when it could not be delivered)."""
        if self._state.client is not None:
            if self._state.client.goodbye(reason) is not None:
                log.info("GOODBYE (reason %s) posted to %s", reason, self._state.client.url)
