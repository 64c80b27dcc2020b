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
always with a request id, through the ``SystemLink`` it holds (system_link.py): the answers kept by
request id until asked for, the liveness watch of the system's processes, and the loss of the
system (``lost``: killed at once, the operation in flight resolves ``failed`` with reason
``supervisor-lost``), after which ``reboot`` starts a fresh one (a microreboot; the runner decides
how often, see ``supervisor.microreboots``). Progress and results of operations no longer current
are dropped. All calls are made from one thread. Every wait is bounded or watched; ``stop`` kills
whatever is left.

It has a lifecycle (``start``, ``stop``, ``reboot``, ``restart``) and operations: one in flight
at a time (``begin``, ``wait``, ``run``; an ``Operation``, operation.py), followed to its result
through its progress, and cancelled (``begin_cancel``, ``wait_cancel``; a ``CancelRequest``). An
operation whose actor system is lost under it resolves ``failed`` with reason ``supervisor-lost``.
The child specs and the supervisor's settings are built from the config by ``supervisor/child_specs.py``.
Nothing is sent to a supervisor that is stopped (SIGSTOP; see ``SystemLink.tell``): a cancel
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
from collections.abc import Callable, Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

from servo_actors.actors.convention.settings import system_options
from servo_actors.actors.linux import processes
from servo_actors.actors.rules import messages as m
from servo_actors.actors.rules.restart_ledger import RestartLedger
from servo_actors.actors.rules.results import OperationResult, aggregate
from servo_actors.actors.rules.supervision_operation import operation_deadline
from servo_actors.actors.runtime.declared_times import DeclaredTimes
from servo_actors.actors.runtime.operation import CancelRequest, Operation
from servo_actors.actors.runtime.operation_path import CANCEL_DEADLINE, OperationPath
from servo_actors.actors.runtime.system_link import LOST_REASON, SupervisorLost, SystemLink
from servo_actors.actors.supervisor.child_specs import child_specs, supervisor_settings
from servo_actors.actors.transport.system import ActorSystemHandle
from servo_actors.config.models import ServoConfig
from servo_actors.connectors.base import Control
from servo_actors.errors import SupervisorError
from servo_actors.observability import events
from servo_actors.vocabulary import OPERATIONS

__all__ = [
    "CANCELLED_RESULT_WAIT",
    "CANCEL_MARGIN",
    "RESULT_MARGIN",
    "START_MARGIN",
    "STATUS_TIMEOUT",
    "STOP_CHECK",
    "STOP_MARGIN",
    "RootSystem",
    "ServoRuntime",
]

START_MARGIN = 5.0
"""Seconds added to the connectors' startup budget before a bounded ``start``/``restart`` gives up."""
STOP_MARGIN = 0.5
"""Seconds added to the longest shutdown timeout before ``stop`` stops waiting and kills."""
STATUS_TIMEOUT = 5.0
CANCEL_MARGIN = 2.0
"""Seconds added to ``startup_timeout`` between warnings while fresh connectors are awaited."""
STOP_CHECK = 0.1
"""How often a long wait (fresh connectors after a cancel or start) looks at its stop event."""
CANCELLED_RESULT_WAIT = 1.0
"""Seconds ``cancel`` waits for the cancelled operation's result once the connectors are back."""
RESULT_MARGIN = 5.0
"""Seconds past an operation's deadline before the runtime decides the supervisor will not answer."""

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
        """The shared system, running; SupervisorError if it is lost (its restart is the root's
        decision, not a joining application's)."""
        ...


class ServoRuntime:
    """One servo's supervised connectors (see module docstring).

    With ``root``, one application's connectors in the actor system ``root`` shares: its
    supervisor joins that system, and a loss kills (and ``reboot`` restarts) that supervisor and
    its connectors only, never another application's (``system_link.kill_subtree``).
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
        self._link = SystemLink(
            liveness.interval,
            liveness.timeout,
            liveness.idle_interval,
            handle=self._receive,
            on_lost=self._lost_under_operation,
            subtree_only=root is not None,
        )
        self._exit_hook: Callable[[], None] | None = None
        self._op: Operation | None = None
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
        link = self._link
        if link.system is not None:
            return True
        # In convention mode: on supervisor.convention.listen, with the shared key (convention.py);
        # read first, so an unusable secret file (ConfigError) leaves nothing behind.
        options = system_options(self._config) if self._root is None else {}
        self._op = None
        self._restarts.reset()
        _bound_external_tells(self._config.supervisor.liveness.timeout)
        if self._root is not None:
            try:
                system = ActorSystemHandle.joining(self._root.running_system())
            except SupervisorError as exc:
                # The root lost meanwhile (its admin died as this application rebooted): not
                # terminal, as any loss; the next reboot finds the root started afresh.
                raise link.refused(f"the servo's actor system cannot be joined: {exc}") from None
        else:
            if self._run_dir is None:
                self._run_dir = Path(tempfile.mkdtemp(prefix=f"servo-actors-{os.getpid()}-"))
            system = ActorSystemHandle(self._run_dir, **options)
        if self._exit_hook is None:
            # Through a weak reference: the hook must not keep an abandoned runtime alive.
            self._exit_hook = functools.partial(_stop_at_exit, weakref.ref(self))
            atexit.register(self._exit_hook)
        try:
            from servo_actors.actors.supervisor.actor import Supervisor

            link.connect(system, Supervisor)
            request = m.Start(
                link.new_id("start"),
                self._settings,
                self._specs,
                os.getpid(),
                processes.start_ticks(os.getpid()),
            )
            link.tell(request)
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
        self._link.kill()
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
            lost = self._link.lost
            if lost is not None:
                raise lost
            waiting = ", ".join(f"{c.name} ({c.state})" for c in self.status().children if c.state != "ready")
            raise SupervisorError(f"connectors did not all answer within {budget:g}s of {what}: {waiting}")
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
        link = self._link
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
            reply = link.await_answer(request_id, min(STOP_CHECK, max(0.0, warn_at - now)))
            if reply is not None:
                return reply
            if link.lost is not None or link.system is None:
                return None
            if stop is not None and stop.is_set():
                return None

    def _not_ready(self) -> str:
        """The connectors not ready now, in words (for the warnings of a long wait)."""
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
        link = self._link
        if self._exit_hook is not None:
            atexit.unregister(self._exit_hook)
            self._exit_hook = None
        system = link.system
        if system is None:
            self._remove_run_dir()
            return
        try:
            if system.running and link.supervisor is not None and link.lost is None:
                request = m.Stop(link.new_id("stop"))
                link.tell(request)
                if link.deferring:
                    # Stopped (SIGSTOP): it cannot stop anything, and waiting on it would only
                    # delay the kill below, which does it all.
                    _log.debug("the supervisor is stopped: no orderly stop; killing the actor system")
                else:
                    longest = max((s.shutdown_timeout for s in self._specs), default=0.0)
                    link.await_answer(request.request_id, longest + STOP_MARGIN)
        except SupervisorError as exc:
            _log.debug("no orderly stop (%s); killing the actor system", exc)
        except Exception as exc:  # the kill below is what guarantees the outcome
            _log.warning("orderly stop of the connectors failed (%s); killing them", exc)
        finally:
            link.kill()
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
        self._link.require_running()
        specs, settings = child_specs(config), supervisor_settings(config)
        self._config, self._specs, self._settings = config, specs, settings
        self._declared = DeclaredTimes(specs)
        request = m.Reconfigure(self._link.new_id("reconfigure"), settings, specs)
        self._link.tell(request)
        return self._await_ready(request.request_id, "restart", stop=stop)

    # ----- state -------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._link.started

    @property
    def session_id(self) -> int | None:
        """The session id shared by every process of this runtime's actor system."""
        return self._link.session_id

    @property
    def lost(self) -> SupervisorLost | None:
        """Set once the actor system was lost (see module docstring) and killed; ``reboot`` clears it."""
        return self._link.lost

    @property
    def failure(self) -> SupervisorError | None:
        """Set once the actor system was lost (``lost``: a ``reboot`` may bring it back). A connector
        past its restart intensity is not a failure of the runtime: it is marked failed, the others
        go on (``not_up``). Reading this polls the system at most every
        ``system_link.FAILURE_POLL_INTERVAL``."""
        return self._link.failure

    def poll(self) -> None:
        """Handle the messages that have already arrived (progress, results, failure) and check the
        actor system's processes (a liveness ping may go out); never waits."""
        self._link.poll()

    def idle_wait(self, seconds: float, wake_fds: Iterable[int] = ()) -> None:
        """Wait up to ``seconds`` with nothing in flight (a SLEEP), ending early when a process of
        the actor system ends or one of ``wake_fds`` is readable (``SystemLink.idle_wait``)."""
        self._link.idle_wait(seconds, wake_fds)

    def members(self) -> list[int]:
        """Live PIDs of every process of the actor system (admin, logger, supervisor, connectors)."""
        return self._link.members()

    def own_processes(self) -> dict[str, int]:
        """The watched processes of the actor system: ``supervisor``, ``Thespian admin``, ``Thespian
        logger`` -> PID (known once the supervisor has answered ``start``)."""
        return self._link.own_processes()

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
        self._link.require_running()
        request = m.GetStatus(self._link.new_id("status"))
        self._link.tell(request)
        reply = self._link.await_answer(request.request_id, timeout)
        if reply is None:
            raise SupervisorError(f"the supervisor did not answer a status request within {timeout:g}s")
        return reply

    # ----- operations --------------------------------------------------------------------------

    def begin(
        self,
        operation: str,
        *,
        metrics: list[str] | None = None,
        components: dict[str, Any] | None = None,
        control: Control | None = None,
    ) -> Operation:
        """Start ``operation`` on the connectors and return at once; see ``wait``."""
        if operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r} (expected one of {', '.join(OPERATIONS)})")
        self._link.require_running()
        control = control or Control()
        declared = self._declared.for_operation(operation, control)
        request = m.Begin(
            self._link.new_id(operation),
            operation,
            tuple(metrics) if metrics is not None else None,
            components,
            control,
            declared,
        )
        longest = max(declared.values(), default=0.0)
        grace = self._settings.operation_grace
        deadline = operation_deadline(request, time.monotonic(), grace, longest) + RESULT_MARGIN
        self._op = Operation(request.request_id, operation, deadline)
        with contextlib.suppress(SupervisorLost):
            self._link.tell(request)  # lost: the operation has resolved failed (supervisor-lost)
        return self._op

    def wait(self, op: Operation, timeout: float) -> OperationResult | None:
        """The result of ``op``, or None if it has not finished within ``timeout`` seconds.

        Meanwhile ``op.progress``/``op.message`` follow the connectors' progress() calls.
        """
        link = self._link
        if op.result is None and link.system is not None:
            deadline = time.monotonic() + max(0.0, timeout)
            while op.result is None and link.system is not None:
                now = time.monotonic()
                if op is self._op and now > op.deadline:
                    # The supervisor enforces the operation's deadline itself: past it and a margin,
                    # it is broken, whatever its process looks like.
                    link.lose(f"the supervisor did not answer {op.operation} by its deadline")
                    break
                remaining = deadline - now
                if remaining <= 0:
                    break
                link.handle_next(remaining)
        return op.result

    def run(
        self, operation: str, *, on_progress: Callable[[float, str], None] | None = None, **kwargs: Any
    ) -> OperationResult:
        """``operation`` to its result through the one operation path (``OperationPath``);
        ``on_progress(percent, message)`` on each progress. SupervisorLost if the system is lost."""
        result = OperationPath(self).result(operation, on_progress=on_progress, **kwargs)
        lost = self._link.lost
        if result.reason == LOST_REASON and lost is not None:
            raise lost
        return result

    def cancel(self, stop: threading.Event | None = None) -> bool:
        """Kill every connector at once and start them all fresh; return when all answer again.

        The operation in flight, if any, resolves to status ``cancelled``. Equivalent to
        ``finish_cancel(begin_cancel(), stop)``.
        """
        return self.finish_cancel(self.begin_cancel(), stop)

    def finish_cancel(self, request: CancelRequest, stop: threading.Event | None = None) -> bool:
        """Wait for the fresh connectors after ``begin_cancel``; True once they answer.

        The supervisor answers once each fresh connector answers or is known not to be up (its
        start failed: at the latest at ``startup_timeout``), so this wait is bounded by the
        connectors' start-up; a warning goes out every ``startup_timeout`` plus a margin should it
        last longer. It ends at once (True) when the system is lost: the caller finds out from
        ``lost``/``failure``. With ``stop``, it ends
        early (False) once that is set: a servo told to exit does not wait for connectors it is
        about to kill anyway.
        """
        budget = self._settings.startup_timeout + CANCEL_MARGIN
        warn_at = time.monotonic() + budget
        started = time.monotonic()
        while not self.wait_cancel(request, STOP_CHECK):
            if self._link.lost is not None or self._link.system is None:
                return True
            if stop is not None and stop.is_set():
                return False
            now = time.monotonic()
            if now >= warn_at:
                warn_at = now + budget
                _log.warning(
                    "connectors not all back %.0fs after a cancel (%s); the supervisor keeps restarting them",
                    now - started,
                    self._not_ready(),
                )
        return True

    def begin_cancel(self) -> CancelRequest:
        """Send the cancel and return at once: the kills go out now, the fresh connectors follow.

        The operation in flight resolves to ``cancelled`` within moments (its result arrives with
        the next ``wait``/``wait_cancel``), so a caller may report the cancellation before the
        connectors are back; ``wait_cancel`` then waits for them.
        """
        link = self._link
        op = self._op if self._op is not None and self._op.result is None else None
        request = CancelRequest(link.new_id("cancel"), op)
        if link.lost is not None:
            # Nothing left to kill: the lost system went with everything in it.
            request.done = True
            return request
        link.require_running()
        # A cancel does not wait for liveness.timeout on a supervisor that cannot take it.
        link.watchdog.hurry("supervisor", time.monotonic(), CANCEL_DEADLINE, "a cancel")
        try:
            link.tell(m.Cancel(request.request_id, op.request_id if op is not None else None))
        except SupervisorLost:
            request.done = True
        return request

    def wait_cancel(self, request: CancelRequest, timeout: float) -> bool:
        """True once every connector answers again after ``request``; False after ``timeout`` seconds."""
        if not request.done:
            reply = self._link.await_answer(request.request_id, timeout)
            if reply is None:
                return False
            request.done = True
            self._link.watchdog.calm()
        op = request.operation
        if op is not None and op.result is None:
            # The supervisor sent the op's cancelled result first, but Thespian does not keep the
            # order of messages between two actors: it may still be on its way.
            self.wait(op, CANCELLED_RESULT_WAIT)
            if op.result is None:
                problem = ("cancelled", "cancelled", f"{op.operation} was cancelled")
                op.result = aggregate(op.operation, [], extra_problem=problem)
        return True

    @property
    def current(self) -> Operation | None:
        """The operation begun last (finished or not)."""
        return self._op

    # ----- messages ----------------------------------------------------------------------------

    def _receive(self, message: Any) -> bool:
        """One message from the supervisor, for the link (``SystemLink``'s ``handle``): counted for
        observability; progress and results of operations are handled here (True), anything else
        is left to the link (an answer it keeps for its asker)."""
        events.actor_system_answered()
        self._restarts.seen(message)
        if isinstance(message, (m.Ready, m.Status, m.Cancelled)):
            events.connectors_not_up((spec.name for spec in self._specs), self._restarts.not_up())
        op = self._op
        if isinstance(message, m.Progress):
            if op is not None and op.result is None and message.request_id == op.request_id:
                if message.percent >= op.progress:
                    op.progress, op.message, op.connector = (
                        message.percent,
                        message.message,
                        message.connector,
                    )
                if op.on_progress is not None:
                    op.on_progress(op.progress, op.message)
            return True
        if isinstance(message, m.Done):
            # A result already settled (cancelled while its Done was late, or lost) stays as it is.
            if op is not None and message.request_id == op.request_id and op.result is None:
                op.result = message.result
                events.operation_finished(op.operation, time.monotonic() - op.started)
            # A result of an operation no longer current: nobody waits for it.
            return True
        return False

    def _lost_under_operation(self, text: str) -> None:
        """The actor system was lost (``text`` says why): the operation in flight resolves failed."""
        op = self._op
        if op is not None and op.result is None:
            op.result = aggregate(op.operation, [], extra_problem=("failed", LOST_REASON, text))
