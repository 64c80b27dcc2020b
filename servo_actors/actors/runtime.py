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

It owns one actor system (its own loopback port and session) and talks only to the Supervisor,
always with a request id: an external ``listen`` returns the next message of any kind, so answers
to anything but the current request (late progress, results of abandoned operations) are dropped.
All calls are made from one thread. Every wait is bounded; ``stop`` kills whatever is left.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import logging
import os
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servo_actors.actors import descendants, processes
from servo_actors.actors import messages as m
from servo_actors.actors.results import OPERATIONS, OperationResult, aggregate
from servo_actors.actors.system import ActorSystemHandle
from servo_actors.config.connector_types import resolve_connector_type
from servo_actors.config.models import ServoConfig
from servo_actors.connectors.base import Control
from servo_actors.errors import ConfigError, SupervisorError

START_MARGIN = 5.0
"""Seconds added to the connectors' startup budget before ``start``/``restart`` give up."""
CANCEL_MARGIN = 2.0
"""Seconds added to ``startup_timeout`` before ``cancel`` gives up waiting for fresh connectors."""
CANCEL_STOP_CHECK = 0.1
"""How often ``finish_cancel`` looks at its stop event while the connectors come back."""
CANCELLED_RESULT_WAIT = 1.0
"""Seconds ``cancel`` waits for the cancelled operation's result once the connectors are back."""
STOP_MARGIN = 0.5
"""Seconds added to the longest shutdown timeout before ``stop`` stops waiting and kills."""
RESULT_MARGIN = 5.0
"""Seconds past an operation's deadline before ``run`` decides the supervisor will not answer."""
POLL_INTERVAL = 0.25
"""Seconds ``run`` waits per round (progress callbacks fire between rounds)."""
STATUS_TIMEOUT = 5.0
LIVENESS_INTERVAL = 0.25
"""Longest listen before checking that the supervisor process is still alive."""
DRAIN_SLICE = 0.0002
"""Seconds per listen when draining without waiting (Thespian's listen(0) never reads anything)."""
FAILURE_POLL_INTERVAL = 0.1
"""``failure`` drains arrived messages at most this often (a drain costs a fraction of a ms)."""
DRAIN_LIMIT = 100
"""Most messages one drain handles, so a chatty connector cannot keep ``failure`` from returning."""

_log = logging.getLogger(__name__)
_ids = itertools.count(1)


@dataclass
class CancelRequest:
    """A cancel in flight (see ``ServoRuntime.begin_cancel``); ``done`` once all connectors answer."""

    request_id: str
    operation: Operation | None
    done: bool = False


class Operation:
    """An operation in flight: ``progress`` (0-100, the highest reported) and ``message`` follow it."""

    def __init__(self, request_id: str, operation: str, deadline: float) -> None:
        self.request_id = request_id
        self.operation = operation
        self.deadline = deadline
        self.progress = 0.0
        self.message = ""
        self.connector: str | None = None
        self.result: OperationResult | None = None
        self.on_progress: Callable[[float, str], None] | None = None

    @property
    def done(self) -> bool:
        return self.result is not None

    def __repr__(self) -> str:
        state = self.result.status if self.result else f"{self.progress:.0f}%"
        return f"<Operation {self.operation} {self.request_id} {state}>"


def _validation_text(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'config'}: {e['msg']}" for e in error.errors())


def child_specs(config: ServoConfig) -> tuple[m.ChildSpec, ...]:
    """The supervisor's child specs; ConfigError naming the connector whose type or config is wrong."""
    default_shutdown = config.supervisor.shutdown_timeout
    specs = []
    for index, spec in enumerate(config.connectors):
        where = f"connectors[{index}] ({spec.name})"
        try:
            cls = resolve_connector_type(spec.type)
        except ConfigError as exc:
            raise ConfigError(exc.detail, key=f"{where}.type") from None
        if cls.config_model is not None:
            try:
                cls.config_model.model_validate(spec.config)
            except ValidationError as exc:
                raise ConfigError(_validation_text(exc), key=f"{where}.config") from None
        timeout = spec.shutdown_timeout if spec.shutdown_timeout is not None else default_shutdown
        import_path = f"{cls.__module__}:{cls.__qualname__}"
        specs.append(
            m.ChildSpec(
                spec.name,
                spec.type,
                spec.restart,
                timeout,
                dict(spec.config),
                import_path,
                max_result_bytes=config.supervisor.max_result_bytes,
                descendant_tracking=config.supervisor.descendant_tracking,
            )
        )
    return tuple(specs)


def supervisor_settings(config: ServoConfig) -> m.SupervisorSettings:
    sup = config.supervisor
    return m.SupervisorSettings(
        strategy=sup.strategy,
        max_restarts=sup.max_restarts,
        period=sup.period,
        backoff_min=sup.restart_backoff.min,
        backoff_max=sup.restart_backoff.max,
        backoff_jitter=sup.restart_backoff.jitter,
        operation_grace=sup.operation_grace,
        startup_timeout=sup.startup_timeout,
    )


def _stop_at_exit(ref: weakref.ref[ServoRuntime]) -> None:
    runtime = ref()
    if runtime is not None:
        with contextlib.suppress(Exception):
            runtime.stop()


class ServoRuntime:
    """One servo's supervised connectors (see module docstring)."""

    def __init__(self, config: ServoConfig, *, run_dir: Path | None = None) -> None:
        self._config = config
        self._specs = child_specs(config)
        self._settings = supervisor_settings(config)
        if run_dir is None and config.supervisor.run_dir:
            run_dir = Path(config.supervisor.run_dir).expanduser()
        self._own_run_dir = run_dir is None
        self._run_dir = Path(run_dir) if run_dir is not None else None
        self._system: ActorSystemHandle | None = None
        self._supervisor: Any = None
        self._op: Operation | None = None
        self._failure: SupervisorError | None = None
        self._children: tuple[m.ChildStatus, ...] = ()
        self._supervisor_pid: int | None = None
        self._polled_at = 0.0
        self._exit_hook: Callable[[], None] | None = None

    # ----- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> ServoRuntime:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def started(self) -> bool:
        return self._system is not None and self._system.running

    @property
    def run_dir(self) -> Path | None:
        return self._run_dir

    @property
    def session_id(self) -> int | None:
        """The session id shared by every process of this runtime's actor system."""
        return self._system.session_id if self._system else None

    def start(self) -> None:
        """Start the actor system, the supervisor and every connector; return once all answered.

        Raises SupervisorError when a connector cannot be started (restart intensity exceeded, or
        not ready within the connectors' startup budget); nothing is left running then.
        """
        if self._system is not None:
            return
        self._failure, self._op, self._supervisor_pid = None, None, None
        if self._run_dir is None:
            self._run_dir = Path(tempfile.mkdtemp(prefix=f"servo-actors-{os.getpid()}-"))
        self._system = ActorSystemHandle(self._run_dir)
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
            self._await_ready(request.request_id, "start")
        except BaseException:
            self.stop()
            raise

    def _startup_budget(self) -> float:
        return self._settings.startup_timeout * max(1, len(self._specs)) + START_MARGIN

    def _await_ready(self, request_id: str, what: str) -> None:
        reply = self._await(request_id, self._startup_budget())
        if self._failure is not None:
            raise self._failure
        if reply is None:
            waiting = ", ".join(f"{c.name} ({c.state})" for c in self.status().children if c.state != "ready")
            raise SupervisorError(
                f"connectors did not all answer within {self._startup_budget():g}s of {what}: {waiting}"
            )
        self._children = reply.children

    def stop(self) -> None:
        """Stop every connector (graceful up to its shutdown timeout, then SIGKILL) and kill the system.

        Idempotent, bounded by the longest shutdown timeout plus a fraction of a second, and it
        leaves no process of the system behind.
        """
        system = self._system
        if system is None:
            return
        if self._exit_hook is not None:
            atexit.unregister(self._exit_hook)
            self._exit_hook = None
        try:
            if system.running and self._supervisor is not None:
                request = m.Stop(self._new_id("stop"))
                self._tell(request)
                longest = max((s.shutdown_timeout for s in self._specs), default=0.0)
                self._await(request.request_id, longest + STOP_MARGIN)
        except SupervisorError as exc:
            _log.debug("no orderly stop (%s); killing the actor system", exc)
        except Exception as exc:  # the kill below is what guarantees the outcome
            _log.warning("orderly stop of the connectors failed (%s); killing them", exc)
        finally:
            self._system = None
            self._supervisor = None
            survivors = system.kill()
            if system.session_id is not None:  # processes that left the session, in its cgroups
                survivors += descendants.release_session(system.session_id)
            if survivors:
                _log.error("processes %s of the actor system survived SIGKILL", survivors)
            if self._own_run_dir and self._run_dir is not None:
                shutil.rmtree(self._run_dir, ignore_errors=True)
                self._run_dir = None

    def restart(self, config: ServoConfig) -> None:
        """Replace the connectors with those of ``config`` (SIGHUP reload); returns once all answer."""
        self._require_running()
        specs, settings = child_specs(config), supervisor_settings(config)
        self._config, self._specs, self._settings, self._failure = config, specs, settings, None
        request = m.Reconfigure(self._new_id("reconfigure"), settings, specs)
        self._tell(request)
        self._await_ready(request.request_id, "restart")

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
        self._require_running()
        control = control or Control()
        request = m.Begin(
            self._new_id(operation),
            operation,
            tuple(metrics) if metrics is not None else None,
            components,
            control,
        )
        expected = control.expected_seconds if operation in ("measure", "adjust") else 0.0
        deadline = time.monotonic() + expected + self._settings.operation_grace + RESULT_MARGIN
        self._op = Operation(request.request_id, operation, deadline)
        self._tell(request)
        return self._op

    def wait(self, op: Operation, timeout: float) -> OperationResult | None:
        """The result of ``op``, or None if it has not finished within ``timeout`` seconds.

        Meanwhile ``op.progress``/``op.message`` follow the connectors' progress() calls.
        """
        if op.result is None and self._system is not None:
            deadline = time.monotonic() + max(0.0, timeout)
            while op.result is None and self._system is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._receive(self._listen(remaining))
        return op.result

    def run(
        self, operation: str, *, on_progress: Callable[[float, str], None] | None = None, **kwargs: Any
    ) -> OperationResult:
        """``begin`` then ``wait`` until the result; ``on_progress(percent, message)`` on each progress."""
        op = self.begin(operation, **kwargs)
        op.on_progress = on_progress
        while True:
            result = self.wait(op, POLL_INTERVAL)
            if result is not None:
                return result
            if self._system is None:
                raise SupervisorError(f"the runtime stopped while {operation} was running")
            if time.monotonic() > op.deadline:
                raise SupervisorError(f"the supervisor did not answer {operation} by its deadline")

    def cancel(self) -> None:
        """Kill every connector at once and start them all fresh; return when all answer again.

        The operation in flight, if any, resolves to status ``cancelled``. Raises SupervisorError
        if the connectors are not back within ``startup_timeout`` plus a margin. Equivalent to
        ``wait_cancel(begin_cancel(), budget)``, raising when the budget runs out.
        """
        self.finish_cancel(self.begin_cancel())

    def finish_cancel(self, request: CancelRequest, stop: threading.Event | None = None) -> bool:
        """Wait for the fresh connectors after ``begin_cancel``; SupervisorError past the budget.

        With ``stop``, the wait ends early (False) once it is set: a servo told to exit does not
        wait for connectors it is about to kill anyway.
        """
        budget = self._settings.startup_timeout + CANCEL_MARGIN
        deadline = time.monotonic() + budget
        while not self.wait_cancel(request, min(CANCEL_STOP_CHECK, max(0.0, deadline - time.monotonic()))):
            if stop is not None and stop.is_set():
                return False
            if time.monotonic() >= deadline:
                raise SupervisorError(f"connectors did not answer within {budget:g}s of a cancel")
        return True

    def begin_cancel(self) -> CancelRequest:
        """Send the cancel and return at once: the kills go out now, the fresh connectors follow.

        The operation in flight resolves to ``cancelled`` within moments (its result arrives with
        the next ``wait``/``wait_cancel``), so a caller may report the cancellation before the
        connectors are back; ``wait_cancel`` then waits for them.
        """
        self._require_running(allow_failed=True)
        op = self._op if self._op is not None and self._op.result is None else None
        request = CancelRequest(self._new_id("cancel"), op)
        self._tell(m.Cancel(request.request_id, op.request_id if op is not None else None))
        return request

    def wait_cancel(self, request: CancelRequest, timeout: float) -> bool:
        """True once every connector answers again after ``request``; False after ``timeout`` seconds."""
        if not request.done:
            reply = self._await(request.request_id, timeout)
            if reply is None:
                return False
            request.done = True
            self._children = reply.children
        op = request.operation
        if op is not None and op.result is None:
            # The supervisor sent the op's cancelled result first, but Thespian does not keep the
            # order of messages between two actors: it may still be on its way.
            self.wait(op, CANCELLED_RESULT_WAIT)
            if op.result is None:
                problem = ("cancelled", "cancelled", f"{op.operation} was cancelled")
                op.result = aggregate(op.operation, [], extra_problem=problem)
        return True

    # ----- state -------------------------------------------------------------------------------

    @property
    def failure(self) -> SupervisorError | None:
        """Set once the supervisor gave up (restart intensity exceeded): the servo must stop, exit 1."""
        now = time.monotonic()
        if self._failure is None and self.started and now - self._polled_at >= FAILURE_POLL_INTERVAL:
            self._polled_at = now
            self.poll()
        return self._failure

    def poll(self) -> None:
        """Handle the messages that have already arrived (progress, results, failure); never waits."""
        for _ in range(DRAIN_LIMIT):
            if self._system is None:
                return
            message = self._system.listen(DRAIN_SLICE)
            if message is None:
                return
            self._receive(message)

    @property
    def current(self) -> Operation | None:
        """The operation begun last (finished or not)."""
        return self._op

    def status(self, timeout: float = STATUS_TIMEOUT) -> m.Status:
        """Every connector's state, PID and generation, straight from the supervisor."""
        self._require_running(allow_failed=True)
        request = m.GetStatus(self._new_id("status"))
        self._tell(request)
        reply = self._await(request.request_id, timeout)
        if reply is None:
            raise SupervisorError(f"the supervisor did not answer a status request within {timeout:g}s")
        return reply

    def members(self) -> list[int]:
        """Live PIDs of every process of the actor system (admin, logger, supervisor, connectors)."""
        return self._system.members() if self._system else []

    # ----- messages ----------------------------------------------------------------------------

    def _tell(self, message: Any) -> None:
        """Send to the supervisor (it never blocks, so this returns at once unless it is gone)."""
        if self._supervisor_pid is not None and not processes.is_running(self._supervisor_pid):
            self._supervisor_died()  # Thespian would retry a dead address for its transmit timeout
        if self._failure is not None and self._supervisor_pid is None:
            raise self._failure
        try:
            self._system.tell(self._supervisor, message)  # type: ignore[union-attr]
        except Exception as exc:  # Thespian's failures are not ServoErrors: name what is wrong
            self._failure = SupervisorError(f"the supervisor cannot be reached ({type(exc).__name__}: {exc})")
            raise self._failure from None

    @staticmethod
    def _new_id(kind: str) -> str:
        return f"{kind}-{os.getpid()}-{next(_ids)}"

    def _require_running(self, *, allow_failed: bool = False) -> None:
        if not self.started or self._supervisor is None:
            raise SupervisorError("the connector runtime is not running")
        # Only a failure already received: polling here would cost every call a millisecond, and
        # a supervisor that has failed answers any request with that failure anyway.
        if not allow_failed and self._failure is not None:
            raise self._failure

    def _await(self, request_id: str, timeout: float) -> Any:
        """Handle messages until the answer to ``request_id`` arrives; None after ``timeout``."""
        deadline = time.monotonic() + timeout
        while self._system is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            message = self._listen(remaining)
            self._receive(message)
            if self._failure is not None and self._supervisor_pid is None:
                return None  # the supervisor is gone: nobody will answer
            if getattr(message, "request_id", None) == request_id and not isinstance(
                message, (m.Progress, m.Done)
            ):
                return message
        return None

    def _listen(self, timeout: float) -> Any:
        """The next message within ``timeout``; on silence, make sure the supervisor still lives."""
        assert self._system is not None
        message = self._system.listen(min(timeout, LIVENESS_INTERVAL))
        if (
            message is None
            and self._supervisor_pid is not None
            and not processes.is_running(self._supervisor_pid)
        ):
            self._supervisor_died()
        return message

    def _supervisor_died(self) -> None:
        text = f"the supervisor (pid {self._supervisor_pid}) died; its connectors died with it"
        self._failure, self._supervisor_pid = SupervisorError(text), None
        op = self._op
        if op is not None and op.result is None:
            op.result = aggregate(op.operation, [], extra_problem=("failed", "supervisor-failed", text))

    def _receive(self, message: Any) -> None:
        op = self._op
        if isinstance(message, (m.Ready, m.Status)):
            self._supervisor_pid = message.supervisor_pid
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
        elif isinstance(message, m.Done):
            if op is not None and message.request_id == op.request_id:
                op.result = message.result
        elif isinstance(message, m.SupervisorFailed):
            self._failure = SupervisorError(message.message)
        # Anything else is an answer nobody waits for any more: dropped.
