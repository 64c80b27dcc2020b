"""The worker thread of a connector's host: it runs one job at a time (startup, an operation,
shutdown) and hands the actor thread what came of it, progress included.

Apart from the actor (``host``): a Thespian actor blocked inside ``receiveMessage`` is deaf, so the
connector runs here, on one worker thread of the host process, which posts events (progress,
result) to a queue and wakes the actor thread with a byte on a pipe it watches. ``HostWorker`` is
that thread's side, an object the host holds once it knows its connector (``ConnectorHost._begin``);
it imports no Thespian. The worker catches everything; should it end all the same, its job fails
at once (``job_failed``) and the next job gets a fresh thread.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import threading
from collections.abc import Callable
from typing import Any

from servo_actors.actors.host.connector_calls import (
    ConnectorCalls,
    InvalidResult,
    build_connector,
    failure_outcome,
)
from servo_actors.actors.rules import messages as m
from servo_actors.actors.rules.exits import CHANNEL_LOST_EXIT
from servo_actors.actors.rules.results import ConnectorOutcome
from servo_actors.actors.transport.plain_data import (
    NotPlainData,
    ResultTooLarge,
    describe_exception,
    progress_percent,
    safe_text,
    type_name,
)
from servo_actors.connectors.base import ConnectorFailure

__all__ = [
    "HOST_ERROR",
    "HostWorker",
    "INVALID_RESULT",
    "MAX_EXIT_CODE",
    "PROGRESS_MESSAGE_LIMIT",
    "RESULT_TOO_LARGE",
]

RESULT_TOO_LARGE = "result-too-large"
"""Reason of a part whose result pickles to more than the connector's ``max_result_bytes``."""
INVALID_RESULT = "invalid-result"
"""Reason of a part whose result is not plain data of the operation's shape."""
HOST_ERROR = "host-error"
"""Reason of a part the host itself failed (should never be seen: everything is caught)."""
PROGRESS_MESSAGE_LIMIT = 500
"""Most characters of a progress message forwarded."""
MAX_EXIT_CODE = 255


class HostWorker:
    """The worker thread of one connector's host, for ``spec`` at ``generation``.

    The actor thread starts jobs (``startup``, ``operate``, ``shutdown``); each ends with one event
    in ``next_event`` (``ready``, ``startup-failed``, ``reply``, ``shutdown-done`` or
    ``worker-ended``), and the latest progress waits in ``take_progress``; each of them writes a
    byte to ``wake_fd``, the pipe the actor thread watches.
    """

    def __init__(self, spec: m.ChildSpec, generation: int, wake_fd: int) -> None:
        self.spec = spec
        self.generation = generation
        self._wake_w = wake_fd
        self.busy: str | None = None
        """The job in hand (startup, shutdown or a request id), None when idle."""
        self.calls: ConnectorCalls | None = None
        """The connector's calls, once its startup succeeded."""
        self._events: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        # The latest progress of the operation, not a queue: a connector calling progress() in a
        # loop (from any thread) costs one slot, and the actor thread forwards only the latest.
        self._progress_lock = threading.Lock()
        self._progress: tuple[str, float, str] | None = None
        self._work: queue.SimpleQueue[tuple[str, Callable[[], tuple[Any, ...]]]] | None = None
        self._thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def thread_ended(self) -> bool:
        """A job is in hand and the thread that runs it is gone (it never should be)."""
        return self.busy is not None and self._thread is not None and not self._thread.is_alive()

    def forget_thread(self) -> None:
        """The thread said it ended: the next job starts a fresh one."""
        self._thread = None

    def startup(self) -> None:
        self._start("startup", self._startup_work)

    def operate(self, call: m.HostCall) -> None:
        self._start(call.request_id, lambda: self._operation_work(call))

    def shutdown(self) -> None:
        self._start("shutdown", self._shutdown_work)

    def take_progress(self) -> tuple[str, float, str] | None:
        """The latest progress not yet taken (request id, percent, message), or None."""
        with self._progress_lock:
            progress, self._progress = self._progress, None
        return progress

    def next_event(self) -> tuple[Any, ...] | None:
        try:
            return self._events.get_nowait()
        except queue.Empty:
            return None

    def job_failed(self, label: str, why: str) -> tuple[Any, ...]:
        """The event that ends job ``label`` (startup, shutdown or a request id) as failed."""
        return self._job_failed(label, why)

    def wake(self) -> None:
        self._wake()

    def _job_failed(self, label: str, why: str) -> tuple[Any, ...]:
        """The event that ends job ``label`` (startup, shutdown or a request id) as failed."""
        name = self.name
        if label == "startup":
            return ("startup-failed", f"the host failed: {why}")
        if label == "shutdown":
            return ("shutdown-done",)
        outcome = ConnectorOutcome(name, "failed", HOST_ERROR, f"connector {name!r}: the host failed: {why}")
        return ("reply", label, outcome, ())

    # ----- worker thread -----------------------------------------------------------------------

    def _start(self, label: str, work: Callable[[], tuple[Any, ...]]) -> None:
        """Hand ``work`` to the worker thread (started on first use, and again should it end)."""
        self.busy = label
        if self._thread is None or self._work is None or not self._thread.is_alive():
            self._work = queue.SimpleQueue()
            self._thread = threading.Thread(target=self._worker_loop, args=(self._work,), daemon=True)
            self._thread.name = "connector"
            self._thread.start()
        self._work.put((label, work))

    def _worker_loop(self, jobs: queue.SimpleQueue[tuple[str, Callable[[], tuple[Any, ...]]]]) -> None:
        label: str | None = None
        try:
            while True:
                label, work = jobs.get()
                self._post(self._run_job(label, work))
                label = None
        finally:
            # Only if something escaped _run_job, which catches everything: the actor thread fails
            # the job at once instead of leaving its part to time out.
            self._post(("worker-ended", label))

    def _run_job(self, label: str, work: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
        try:
            return work()
        except SystemExit as exc:
            # A connector that calls sys.exit(code) ends its process with that code; 0 is a
            # normal exit (a transient connector then stays down).
            code = exc.code
            os._exit(code if type(code) is int and 0 <= code <= MAX_EXIT_CODE else (0 if code is None else 1))
        except BaseException as exc:  # what escaped the job's own handlers: fail it by name
            return self._job_failed(label, describe_exception(exc))

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"!")
        except BlockingIOError:
            pass  # full: the actor thread has wake-ups enough
        except OSError:
            # The pipe is gone (the connector closed descriptors it does not own, Thespian's sockets
            # with them): this host can never answer again. It ends now; the supervisor names the
            # exit code (``exits.CHANNEL_LOST_EXIT``) in the part, instead of waiting for its deadline.
            os._exit(CHANNEL_LOST_EXIT)

    def _post(self, event: tuple[Any, ...]) -> None:
        self._events.put(event)
        self._wake()

    def _startup_work(self) -> tuple[Any, ...]:
        try:
            connector = build_connector(self.spec)
            connector.startup()
        except SystemExit:
            raise
        except BaseException as exc:  # anything a plugin raises is its failure, reported by name
            return ("startup-failed", describe_exception(exc))
        self.calls = ConnectorCalls(connector, self.spec.max_result_bytes)
        return ("ready",)

    def _shutdown_work(self) -> tuple[Any, ...]:
        assert self.calls is not None
        with contextlib.suppress(Exception):  # best effort: the process is killed next anyway
            self.calls.connector.shutdown()
        return ("shutdown-done",)

    def _progress_function(self, request_id: str) -> Callable[..., None]:
        def progress(percent: float = 0.0, message: str = "") -> None:
            # Called by connector code, from any thread: never raises, never blocks for long.
            value = progress_percent(percent)
            if value is None:
                return
            text = safe_text(message, PROGRESS_MESSAGE_LIMIT)
            with self._progress_lock:
                fresh = self._progress is None
                self._progress = (request_id, value, text)
            if fresh:
                self._wake()

        return progress

    def _operation_work(self, call: m.HostCall) -> tuple[Any, ...]:
        assert self.calls is not None
        name = self.name
        claimed: tuple[str, ...] = ()
        try:
            data, claimed, reason = self.calls.run(call, self._progress_function(call.request_id))
            outcome = ConnectorOutcome(name, "ok", reason, None, data)
        except ConnectorFailure as failure:
            outcome = failure_outcome(name, failure)
        except ResultTooLarge as exc:
            outcome = self._too_large(call, str(exc))
        except (NotPlainData, InvalidResult) as exc:
            outcome = ConnectorOutcome(name, "failed", INVALID_RESULT, self._invalid(call, exc))
        except SystemExit:
            raise
        except BaseException as exc:  # a connector bug must not take the host's reply with it
            said = safe_text(exc)
            said = f": {said}" if said else " (with no message)"
            message = f"connector {name!r} raised {type_name(exc)} in {call.operation}{said}"
            outcome = ConnectorOutcome(name, "failed", "connector-error", message)
        size = len(pickle.dumps(m.HostReply(call.request_id, name, self.generation, outcome, claimed)))
        if size > self.spec.max_result_bytes:
            outcome, claimed = self._too_large(call, f"{size} bytes"), ()
        return ("reply", call.request_id, outcome, claimed)

    def _invalid(self, call: m.HostCall, exc: Exception) -> str:
        """What was invalid: the operation's result, or that of describe(), which it needed."""
        name, text = self.name, safe_text(exc)
        needed = getattr(exc, "call", None)
        if needed is not None and needed != f"{call.operation}()":
            return (
                f"connector {name!r}: {needed} returned an invalid result, needed by {call.operation}: {text}"
            )
        return f"connector {name!r} returned an invalid {call.operation} result: {text}"

    def _too_large(self, call: m.HostCall, size: str) -> ConnectorOutcome:
        limit = self.spec.max_result_bytes
        message = (
            f"connector {self.name!r} returned a {call.operation} result of {size} (pickled), over the "
            f"limit of {limit} bytes (supervisor.max_result_bytes)"
        )
        return ConnectorOutcome(self.name, "failed", RESULT_TOO_LARGE, message)
