"""ServoRuntime: the one object the runner and the CLI use to run connectors as supervised actors.

Example::

    with ServoRuntime(config) as runtime:
        result = runtime.run("measure", control=Control(duration=5))
        op = runtime.begin("measure", control=Control(duration=60))
        while (result := runtime.wait(op, timeout=1.0)) is None:
            print(op.progress, op.message)      # post progress to the optimizer ...
            if cancel_requested:
                runtime.cancel()                # ... op resolves to status "cancelled"
        # or, to answer the optimizer before the connectors are back:
        request = runtime.begin_cancel()        # kills go out now; op resolves to "cancelled"
        runtime.wait_cancel(request, timeout=30)  # True once every fresh connector answers

Callers perform operations through ``OperationPath`` (operation_path.py), the one loop that drives
an operation from ``begin`` to its result or cancellation; ``run`` is that path with no extras.

It owns one actor system (its own loopback port and session) and talks only to the Supervisor,
always with a request id, through ``SystemLink`` (system_link.py, its base's base): the answers kept by
request id until asked for, the liveness watch of the system's processes, and the loss of the
system (``lost``: killed at once, the operation in flight resolves ``failed`` with reason
``supervisor-lost``), after which ``reboot`` starts a fresh one (a microreboot; the runner decides
how often, see ``supervisor.microreboots``). Progress and results of operations no longer current
are dropped. All calls are made from one thread. Every wait is bounded or watched; ``stop`` kills
whatever is left.

Its operations (``begin``, ``wait``, ``run``, the cancels) are ``RuntimeOperations``
(runtime_operations.py, between the two); this module holds the lifecycle: ``start``, ``stop``,
``reboot``, ``restart``. The child specs and the supervisor's settings are built from the config
by ``child_specs.py``.
Nothing is sent to a supervisor that is stopped (SIGSTOP; see ``SystemLink._tell``): a cancel
waits on a stopped supervisor only for ``CANCEL_DEADLINE``, and ``stop`` not at all: then the
system is killed.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import shutil
import tempfile
import threading
import time
import weakref
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

from servo_actors.actors.child_specs import child_specs, supervisor_settings
from servo_actors.actors.convention.settings import system_options
from servo_actors.actors.declared_times import DeclaredTimes
from servo_actors.actors.linux import processes
from servo_actors.actors.rules import messages as m
from servo_actors.actors.rules.restart_ledger import RestartLedger
from servo_actors.actors.runtime_operations import (
    STOP_CHECK,
    RuntimeOperations,
)
from servo_actors.actors.system_link import SupervisorLost
from servo_actors.actors.transport.system import ActorSystemHandle
from servo_actors.config.models import ServoConfig
from servo_actors.errors import SupervisorError
from servo_actors.observability import events

__all__ = ["START_MARGIN", "STATUS_TIMEOUT", "STOP_MARGIN", "RootSystem", "ServoRuntime"]

START_MARGIN = 5.0
"""Seconds added to the connectors' startup budget before a bounded ``start``/``restart`` gives up."""
STOP_MARGIN = 0.5
"""Seconds added to the longest shutdown timeout before ``stop`` stops waiting and kills."""
STATUS_TIMEOUT = 5.0

_log = logging.getLogger(__name__)


def _bound_external_tells(seconds: float) -> None:
    """An external ``tell`` waits for the receiver's acknowledgement, for 60 s by default: a stopped
    supervisor would block the runtime that long. Read by Thespian at call time."""
    import thespian.system.systemBase as system_base

    system_base.MAX_TELL_PERIOD = timedelta(seconds=seconds)


def _stop_at_exit(ref: weakref.ref[ServoRuntime]) -> None:
    runtime = ref()
    if runtime is not None:
        with contextlib.suppress(Exception):
            runtime.stop()


class RootSystem(Protocol):
    """The actor system a servo of several applications shares (``ServoTree``): each application's
    runtime joins it instead of starting one of its own."""

    def running_system(self) -> ActorSystemHandle:
        """The shared system, running: started again first if it was lost (the root's restart)."""
        ...


class ServoRuntime(RuntimeOperations):
    """One servo's supervised connectors (see module docstring).

    With ``root``, one application's connectors in the actor system ``root`` shares: its
    supervisor joins that system, and a loss kills (and ``reboot`` restarts) that supervisor and
    its connectors only, never another application's (``SystemLink.kill_subtree``).
    """

    def __init__(
        self, config: ServoConfig, *, run_dir: Path | None = None, root: RootSystem | None = None
    ) -> None:
        self._root = root
        self._config = config
        self._specs = child_specs(config)
        self._declared = DeclaredTimes(self._specs)
        self._settings = supervisor_settings(config)
        if run_dir is None and config.supervisor.run_dir:
            run_dir = Path(config.supervisor.run_dir).expanduser()
        self._own_run_dir = run_dir is None
        self._run_dir = Path(run_dir) if run_dir is not None else None
        liveness = config.supervisor.liveness
        super().__init__(
            liveness.interval, liveness.timeout, liveness.idle_interval, subtree_only=root is not None
        )
        # Restarts and escalations, read from the supervisor's answers (observability).
        self._restarts = RestartLedger(events.connector_restarted, events.escalated)
        events.track_children(self._restarts)

    # ----- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> ServoRuntime:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def run_dir(self) -> Path | None:
        return self._run_dir

    def start(self, *, stop: threading.Event | None = None, patient: bool = False) -> bool:
        """Start the actor system, the supervisor and every connector; True once each answered or
        is known not to be up (its start failed: raised, exited or passed ``startup_timeout``;
        ``not_up`` names them, and the supervisor keeps restarting them): so within about
        ``startup_timeout``, whatever the connectors do.

        Raises SupervisorError when the supervisor does not answer within that budget; nothing is
        left running then. With
        ``patient`` there is no budget: the wait goes on while the supervisor keeps restarting the
        connectors (and answers its liveness pings), with a warning every budget. With ``stop``,
        the wait ends within ``STOP_CHECK`` of it being set: False, and nothing is left running.
        """
        if self._system is not None:
            return True
        # In convention mode: on supervisor.convention.listen, with the shared key (convention.py);
        # read first, so an unusable secret file (ConfigError) leaves nothing behind.
        options = system_options(self._config) if self._root is None else {}
        self._op, self._supervisor_pid, self._lost = None, None, None
        self._answers.clear()
        self._watchdog.reset()
        self._restarts.reset()
        _bound_external_tells(self._config.supervisor.liveness.timeout)
        if self._root is not None:
            try:
                self._system = ActorSystemHandle.joining(self._root.running_system())
            except SupervisorError as exc:
                # The root lost meanwhile (its admin died as this application rebooted): not
                # terminal, as any loss; the next reboot finds the root started afresh.
                self._lost = SupervisorLost(f"the servo's actor system cannot be joined: {exc}")
                raise self._lost from None
        else:
            if self._run_dir is None:
                self._run_dir = Path(tempfile.mkdtemp(prefix=f"servo-actors-{os.getpid()}-"))
            self._system = ActorSystemHandle(self._run_dir, **options)
        # Through a weak reference: the hook must not keep an abandoned runtime alive.
        self._exit_hook = functools.partial(_stop_at_exit, weakref.ref(self))
        atexit.register(self._exit_hook)
        try:
            self._system.start()
            from servo_actors.actors.supervisor import Supervisor

            self._supervisor = self._system.create_actor(Supervisor)
            request = m.Start(
                self._new_id("start"),
                self._settings,
                self._specs,
                os.getpid(),
                processes.start_ticks(os.getpid()),
            )
            self._tell(request)
            ready = self._await_ready(request.request_id, "start", stop=stop, patient=patient)
        except BaseException:
            self.stop()
            raise
        if not ready:
            self.stop()
        return ready

    def reboot(self, *, stop: threading.Event | None = None) -> bool:
        """A microreboot: kill what is left of the actor system and start a fresh one (patiently).

        True once the fresh connectors answer; False if ``stop`` was set meanwhile (nothing is left
        running then). SupervisorLost if the fresh system is lost too, SupervisorError if its
        connectors cannot start (restart intensity exceeded).
        """
        self._restarts.reset("microreboot")
        self._kill_system()
        return self.start(stop=stop, patient=True)

    def _startup_budget(self) -> float:
        # Connectors start all at once, and the supervisor answers once each is up or known not to
        # be (a start that failed, at the latest at startup_timeout): one timeout, not one each.
        return self._settings.startup_timeout + START_MARGIN

    def _await_ready(
        self, request_id: str, what: str, *, stop: threading.Event | None = None, patient: bool = False
    ) -> bool:
        """Wait for the supervisor's ``Ready``; False if ``stop`` was set first."""
        budget = self._startup_budget()
        reply = self._await_long(request_id, budget, what, stop=stop, patient=patient)
        if reply is None:
            if stop is not None and stop.is_set():
                return False
            if self._lost is not None:
                raise self._lost
            waiting = ", ".join(f"{c.name} ({c.state})" for c in self.status().children if c.state != "ready")
            raise SupervisorError(f"connectors did not all answer within {budget:g}s of {what}: {waiting}")
        self._children = reply.children
        return True

    def _await_long(
        self,
        request_id: str,
        budget: float,
        what: str,
        *,
        stop: threading.Event | None = None,
        patient: bool = False,
    ) -> Any:
        """The answer to ``request_id``; None after ``budget`` (unless ``patient``), once ``stop``
        is set, or once the system is lost. A patient wait warns every ``budget`` seconds."""
        started = time.monotonic()
        warn_at = started + budget
        while True:
            now = time.monotonic()
            if not patient and now >= warn_at:
                return None
            if patient and now >= warn_at:
                warn_at = now + budget
                _log.warning(
                    "connectors not all back %.0fs after %s (%s); the supervisor keeps restarting them",
                    now - started,
                    what,
                    self._not_ready(),
                )
            reply = self._await(request_id, min(STOP_CHECK, max(0.0, warn_at - now)))
            if reply is not None:
                return reply
            if self._lost is not None or self._system is None:
                return None
            if stop is not None and stop.is_set():
                return None

    def _not_ready(self) -> str:
        try:
            children = self.status().children
        except SupervisorError as exc:
            return str(exc)
        return ", ".join(f"{c.name} {c.state}" for c in children if c.state != "ready") or "all ready now"

    def stop(self) -> None:
        """Stop every connector (graceful up to its shutdown timeout, then SIGKILL) and kill the system.

        Idempotent, bounded by the longest shutdown timeout plus a fraction of a second, and it
        leaves no process of the system behind.
        """
        system = self._system
        if system is None:
            self._remove_run_dir()
            return
        if self._exit_hook is not None:
            atexit.unregister(self._exit_hook)
            self._exit_hook = None
        try:
            if system.running and self._supervisor is not None and self._lost is None:
                request = m.Stop(self._new_id("stop"))
                self._tell(request)
                if self._deferred:
                    # Stopped (SIGSTOP): it cannot stop anything, and waiting on it would only
                    # delay the kill below, which does it all.
                    _log.debug("the supervisor is stopped: no orderly stop; killing the actor system")
                else:
                    longest = max((s.shutdown_timeout for s in self._specs), default=0.0)
                    self._await(request.request_id, longest + STOP_MARGIN)
        except SupervisorError as exc:
            _log.debug("no orderly stop (%s); killing the actor system", exc)
        except Exception as exc:  # the kill below is what guarantees the outcome
            _log.warning("orderly stop of the connectors failed (%s); killing them", exc)
        finally:
            self._kill_system()
            self._remove_run_dir()

    def _remove_run_dir(self) -> None:
        if self._own_run_dir and self._run_dir is not None:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None

    def restart(self, config: ServoConfig, *, stop: threading.Event | None = None) -> bool:
        """Replace the connectors with those of ``config`` in this actor system; True once all answer.

        The old connectors are stopped first. (The runner's SIGHUP reload starts a second runtime
        instead, so that a new set that cannot start leaves the old one serving.) False if ``stop``
        was set during the wait.
        """
        self._require_running()
        specs, settings = child_specs(config), supervisor_settings(config)
        self._config, self._specs, self._settings = config, specs, settings
        self._declared = DeclaredTimes(specs)
        request = m.Reconfigure(self._new_id("reconfigure"), settings, specs)
        self._tell(request)
        return self._await_ready(request.request_id, "restart", stop=stop)

    # ----- state -------------------------------------------------------------------------------

    @property
    def not_up(self) -> dict[str, str]:
        """Connectors that are not up now, with why (``start-timeout``, ``crash-loop``, ``failed``,
        ``waiting``), as of the latest listing from the supervisor."""
        return self._restarts.not_up()

    @property
    def not_up_why(self) -> dict[str, str]:
        """As ``not_up``, each with its latest failure in words (for logs and errors)."""
        return self._restarts.not_up_why()

    def status(self, timeout: float = STATUS_TIMEOUT) -> m.Status:
        """Every connector's state, PID and generation, straight from the supervisor."""
        self._require_running()
        request = m.GetStatus(self._new_id("status"))
        self._tell(request)
        reply = self._await(request.request_id, timeout)
        if reply is None:
            raise SupervisorError(f"the supervisor did not answer a status request within {timeout:g}s")
        return reply

    # ----- messages ----------------------------------------------------------------------------

    def _receive(self, message: Any) -> None:
        if message is not None:
            events.actor_system_answered()
            self._restarts.seen(message)
            if isinstance(message, (m.Ready, m.Status, m.Cancelled)):
                events.connectors_not_up((spec.name for spec in self._specs), self._restarts.not_up())
        if isinstance(message, (m.Ready, m.Status)):
            self._supervisor_pid = message.supervisor_pid
        if self._operation_message(message):
            return
        if message is not None and isinstance(getattr(message, "request_id", None), str):
            self._keep_answer(message)
