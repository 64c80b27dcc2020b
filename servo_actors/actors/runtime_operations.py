"""The operations of ``ServoRuntime``: one in flight at a time (``Operation``), followed to its
result through its progress, and cancelled (``CancelRequest``): ``RuntimeOperations``, the part of
``ServoRuntime`` on top of its link to the actor system (``SystemLink``).

Progress and results of operations no longer current are dropped. An operation whose actor
system is lost under it resolves ``failed`` with reason ``supervisor-lost``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servo_actors.actors.declared_times import DeclaredTimes
from servo_actors.actors.operation_path import CANCEL_DEADLINE, OperationPath
from servo_actors.actors.rules import messages as m
from servo_actors.actors.rules.results import OperationResult, aggregate
from servo_actors.actors.rules.supervision_operation import operation_deadline
from servo_actors.actors.system_link import LOST_REASON, SupervisorLost, SystemLink
from servo_actors.connectors.base import Control
from servo_actors.observability import events
from servo_actors.vocabulary import OPERATIONS

__all__ = [
    "CANCELLED_RESULT_WAIT",
    "CANCEL_MARGIN",
    "CancelRequest",
    "Operation",
    "RESULT_MARGIN",
    "RuntimeOperations",
    "STOP_CHECK",
]

CANCEL_MARGIN = 2.0
"""Seconds added to ``startup_timeout`` between warnings while fresh connectors are awaited."""
STOP_CHECK = 0.1
"""How often a long wait (fresh connectors after a cancel or start) looks at its stop event."""
CANCELLED_RESULT_WAIT = 1.0
"""Seconds ``cancel`` waits for the cancelled operation's result once the connectors are back."""
RESULT_MARGIN = 5.0
"""Seconds past an operation's deadline before the runtime decides the supervisor will not answer."""

_log = logging.getLogger(__name__)


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
        self.started = time.monotonic()
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


class RuntimeOperations(SystemLink):
    """Operations on the connectors through the supervisor (see module docstring).

    The subclass sets ``_declared`` and ``_settings`` (from the config) and says what is not ready
    yet (``_not_ready``, for the warnings of a long cancel).
    """

    _declared: DeclaredTimes
    _settings: m.SupervisorSettings

    def __init__(
        self,
        liveness_interval: float,
        liveness_timeout: float,
        liveness_idle_interval: float | None = None,
        *,
        subtree_only: bool = False,
    ) -> None:
        super().__init__(
            liveness_interval, liveness_timeout, liveness_idle_interval, subtree_only=subtree_only
        )
        self._op: Operation | None = None
        self._children: tuple[m.ChildStatus, ...] = ()

    def _not_ready(self) -> str:
        """The connectors not ready now, in words; the subclass's."""
        raise NotImplementedError

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
        declared = self._declared.for_operation(operation, control)
        request = m.Begin(
            self._new_id(operation),
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
            self._tell(request)  # lost: the operation has resolved failed (supervisor-lost)
        return self._op

    def wait(self, op: Operation, timeout: float) -> OperationResult | None:
        """The result of ``op``, or None if it has not finished within ``timeout`` seconds.

        Meanwhile ``op.progress``/``op.message`` follow the connectors' progress() calls.
        """
        if op.result is None and self._system is not None:
            deadline = time.monotonic() + max(0.0, timeout)
            while op.result is None and self._system is not None:
                now = time.monotonic()
                if op is self._op and now > op.deadline:
                    # The supervisor enforces the operation's deadline itself: past it and a margin,
                    # it is broken, whatever its process looks like.
                    self._lose(f"the supervisor did not answer {op.operation} by its deadline")
                    break
                remaining = deadline - now
                if remaining <= 0:
                    break
                self._receive(self._listen(remaining))
        return op.result

    def run(
        self, operation: str, *, on_progress: Callable[[float, str], None] | None = None, **kwargs: Any
    ) -> OperationResult:
        """``operation`` to its result through the one operation path (``OperationPath``);
        ``on_progress(percent, message)`` on each progress. SupervisorLost if the system is lost."""
        result = OperationPath(self).result(operation, on_progress=on_progress, **kwargs)
        if result.reason == LOST_REASON and self._lost is not None:
            raise self._lost
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
            if self._lost is not None or self._system is None:
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
        op = self._op if self._op is not None and self._op.result is None else None
        request = CancelRequest(self._new_id("cancel"), op)
        if self._lost is not None:
            # Nothing left to kill: the lost system went with everything in it.
            request.done = True
            return request
        self._require_running()
        # A cancel does not wait for liveness.timeout on a supervisor that cannot take it.
        self._watchdog.hurry("supervisor", time.monotonic(), CANCEL_DEADLINE, "a cancel")
        try:
            self._tell(m.Cancel(request.request_id, op.request_id if op is not None else None))
        except SupervisorLost:
            request.done = True
        return request

    def wait_cancel(self, request: CancelRequest, timeout: float) -> bool:
        """True once every connector answers again after ``request``; False after ``timeout`` seconds."""
        if not request.done:
            reply = self._await(request.request_id, timeout)
            if reply is None:
                return False
            request.done = True
            self._children = reply.children
            self._watchdog.calm()
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

    def _operation_message(self, message: Any) -> bool:
        """Progress or the result of an operation: handled here (True); anything else is not."""
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
        op = self._op
        if op is not None and op.result is None:
            op.result = aggregate(op.operation, [], extra_problem=("failed", LOST_REASON, text))
