"""``OperationPath``: the one way an operation is performed on the connectors, begin to result.

Every caller goes through it: ``ServoRuntime.run``, the CLI's ``check``, ``describe``, ``measure``,
``adjust`` and ``run --check`` (cli/operations.py, cli/run_cmd.py), and the runner, for each command
of the optimizer, the describe an ADJUSTMENT's state needs and every cancel (runner.py)::

    path = OperationPath(runtime, stop=watcher.stop)
    result = path.result("measure", control=Control(duration=30))     # begin .. result
    outcome = path.perform("adjust", reporter=posts, components=...)  # ... or cancelled on the way
    path.cancel()                                                     # kill all, wait for fresh ones

One operation, in order (``perform``):

1. **stop**: a stop already asked for begins nothing (``StopRequested``);
2. **start**: ``runtime.begin`` tells the supervisor and returns the ``Operation`` with its deadline;
3. **wait** in slices (``Reporter.next_wait``, at most ``WAIT_SLICE``); the runtime reads every answer
   meanwhile: progress into the operation, restarts into its ledger (restart accounting), the
   watchdog's pings, and the result;
4. after each slice: the caller's **verdict** (the optimizer answered a progress post with a
   cancel: the operation is **cancelled**, see below, even if its result has just come), else the
   **result** ends the loop, else a **stop** raises ``StopRequested``, else the caller **reports
   progress** (a progress post, a redrawn line) and the runtime must still run and the
   operation's **deadline** must not have passed (``SupervisorError``: the runtime itself loses the
   supervisor at that deadline, so this only catches a runtime stopped under the operation);
5. once the result is in, the caller **settles** (its progress post still open is answered): a
   cancel found there wins over the result.

A cancel (``cancel``): the supervisor kills every connector at once (``begin_cancel``); the path
waits up to ``CANCEL_DEADLINE`` for the operation's ``cancelled`` result, which the supervisor sends
right after its kills, lets the caller report (``Reporter.cancelled``: the runner posts
``cancelled`` there, before the connectors are back), then waits for the fresh connectors
(``finish_cancel``, bounded by ``startup_timeout`` with warnings, ended by a stop).

A stop is only ever noticed at a wait (signals.py: the handler only records), within one slice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from servo_actors.actors.rules.results import OperationResult
from servo_actors.connectors.base import Control
from servo_actors.errors import SupervisorError
from servo_actors.signals import StopRequested

__all__ = [
    "CANCEL_DEADLINE",
    "WAIT_SLICE",
    "Connectors",
    "InFlight",
    "OperationPath",
    "Outcome",
    "Reporter",
]

WAIT_SLICE = 0.1
"""Longest one wait on an operation lasts before the path looks at a stop (seconds)."""
CANCEL_DEADLINE = 1.0
"""Seconds a cancel gives the supervisor to take it (it takes one within milliseconds, the kills
go out at once): a supervisor stopped that long while a cancel waits on it is lost then (killed
and replaced), whatever ``supervisor.liveness.timeout`` says; the path waits as long for the
kills to be confirmed (the cancelled operation's result) before the caller reports."""


class InFlight(Protocol):
    """An operation in flight, as the path reads it (``runtime.Operation``)."""

    operation: str
    deadline: float
    progress: float
    message: str
    result: OperationResult | None
    on_progress: Callable[[float, str], None] | None


_Op = TypeVar("_Op", bound=InFlight)


class Connectors(Protocol[_Op]):
    """What the path asks of the runtime (``runtime.ServoRuntime``, whose operations are ``_Op``)."""

    @property
    def started(self) -> bool: ...

    def begin(
        self,
        operation: str,
        *,
        metrics: list[str] | None = None,
        components: dict[str, Any] | None = None,
        control: Control | None = None,
    ) -> _Op: ...

    def wait(self, op: _Op, timeout: float) -> OperationResult | None: ...

    def begin_cancel(self) -> Any: ...

    def finish_cancel(self, request: Any, stop: threading.Event | None = None) -> bool: ...


class Reporter(Protocol):
    """What a caller adds to the loop: how long each wait, progress reports, a verdict that ends
    the operation. A class that names Reporter as its base gets these defaults, which do nothing
    (``describe`` in the runner, ``run``); one that does not (the CLI's progress line, kept free of
    this import) must define all six."""

    def next_wait(self, op: InFlight, now: float) -> float:
        """Seconds the next wait on ``op`` may last (the path never waits longer than WAIT_SLICE)."""
        return WAIT_SLICE

    def verdict(self) -> Any:
        """An answer that ends the operation now (the optimizer's cancel), or None."""
        return None

    def report(self, op: InFlight, now: float) -> None:
        """After a wait that brought no result: report ``op.progress``/``op.message`` if due."""
        return None

    def settle(self) -> Any:
        """Once the result is in: a verdict still to come (an open progress post's answer), or None."""
        return None

    def cancelled(self, op: InFlight, verdict: Any) -> None:
        """``verdict`` cancelled ``op``: its kills are confirmed, the fresh connectors not yet up."""
        return None

    def close(self) -> None:
        """The operation is over, however it ended."""
        return None


class _Quiet(Reporter):
    """The reporter of a caller that reports nothing."""


@dataclass
class Outcome(Generic[_Op]):
    """How an operation ended: its ``result``, or ``cancelled_by`` the caller's verdict (then the
    result, if any came, is not the operation's outcome: the cancellation is)."""

    op: _Op
    result: OperationResult | None
    cancelled_by: Any = None


class OperationPath(Generic[_Op]):
    """Performs operations on ``runtime``'s connectors; ``stop`` ends a wait (``StopRequested``
    carrying ``stop_name()``). See the module docstring for the order of things."""

    def __init__(
        self,
        runtime: Connectors[_Op],
        *,
        stop: threading.Event | None = None,
        stop_name: Callable[[], str] | None = None,
    ) -> None:
        self._runtime = runtime
        self._stop = stop
        self._stop_name = stop_name or (lambda: "stop")

    def check_stop(self) -> None:
        """StopRequested if a stop was asked for."""
        if self._stop is not None and self._stop.is_set():
            raise StopRequested(self._stop_name())

    def perform(
        self,
        operation: str,
        *,
        reporter: Reporter | None = None,
        on_progress: Callable[[float, str], None] | None = None,
        **params: Any,
    ) -> Outcome[_Op]:
        """``operation`` (``params`` as ``ServoRuntime.begin`` takes them) to its result, or to its
        cancellation by the reporter's verdict. ``on_progress(percent, message)`` on each progress
        message. StopRequested on a stop (the operation is left to whoever stops the runtime),
        SupervisorError if the runtime stops under it, SupervisorLost if it is lost before it begins."""
        runtime = self._runtime
        reporter = reporter or _Quiet()
        try:
            self.check_stop()
            op = runtime.begin(operation, **params)
            op.on_progress = on_progress
            while True:
                wait = min(WAIT_SLICE, max(0.0, reporter.next_wait(op, time.monotonic())))
                result = runtime.wait(op, wait)
                verdict = reporter.verdict()
                if verdict is not None:
                    return self._cancelled(op, result, verdict, reporter)
                if result is not None:
                    break
                self.check_stop()
                reporter.report(op, time.monotonic())
                if not runtime.started:
                    raise SupervisorError(f"the connector runtime stopped while {operation} was running")
                if time.monotonic() > op.deadline:
                    raise SupervisorError(f"the supervisor did not answer {operation} by its deadline")
            verdict = reporter.settle()
            if verdict is not None:
                return self._cancelled(op, result, verdict, reporter)
            return Outcome(op, result)
        finally:
            reporter.close()

    def result(
        self,
        operation: str,
        *,
        reporter: Reporter | None = None,
        on_progress: Callable[[float, str], None] | None = None,
        **params: Any,
    ) -> OperationResult:
        """``perform`` for a caller without verdicts: the operation's result."""
        outcome = self.perform(operation, reporter=reporter, on_progress=on_progress, **params)
        if outcome.result is None:  # only a verdict ends an operation without its result
            raise SupervisorError(f"{operation} ended without a result")
        return outcome.result

    def cancel(self, op: _Op | None = None, *, report: Callable[[], None] | None = None) -> None:
        """Kill every connector now and start them all fresh; return once every fresh one answers.

        ``op`` (the operation in flight) resolves ``cancelled``: the path waits up to
        ``CANCEL_DEADLINE`` for that, the supervisor's confirmation that its kills went out, then
        calls ``report``. StopRequested on a stop, at any wait: a servo told to exit owes no result
        and does not wait for connectors it is about to kill anyway.
        """
        runtime = self._runtime
        request = runtime.begin_cancel()
        if op is not None:
            confirm_by = time.monotonic() + CANCEL_DEADLINE
            while runtime.wait(op, WAIT_SLICE) is None and time.monotonic() < confirm_by:
                self.check_stop()
        if report is not None:
            report()
        if not runtime.finish_cancel(request, stop=self._stop):
            raise StopRequested(self._stop_name())

    def _cancelled(
        self, op: _Op, result: OperationResult | None, verdict: Any, reporter: Reporter
    ) -> Outcome[_Op]:
        self.cancel(op, report=lambda: reporter.cancelled(op, verdict))
        return Outcome(op, result, cancelled_by=verdict)
