"""The embedded optimizer both agents talk to, and a driver the benchmark feeds.

One ``OptimizerServer`` (servo_actors.optimizer.server) serves the whole run, on a free loopback
port with a token (servox refuses to run without one). Its request log is the only clock of the
benchmark: every entry has ``at`` (the request arrived) and ``replied_at`` (its answer left), from
``time.time()`` in this process. ``mark()`` / ``since()`` cut that log into phases.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from bench_support.processes import AgentProcess
from servo_actors.optimizer.server import OptimizerServer

APP = "bench.test/loop"
TOKEN = "bench-loop-token"
PROCESS_CHECK_INTERVAL = 0.5
"""Longest a wait goes without checking that the agent it waits on is still running."""
CANCEL_REPLY = {"status": "cancel", "reason": "bench", "message": "cancelled by bench_loop.py"}

History = list[dict[str, Any]]


class BenchError(Exception):
    """A phase that could not be measured (an agent exited, a wait ran out)."""


class BenchDriver:
    """Answers WHATS_NEXT from a queue the benchmark fills, else SLEEP ``idle_sleep`` seconds.

    With ``cancel_on_progress`` set, the first progress post of every command is answered
    ``cancel``. It counts what it sees (``polls``, ``results``, ``cancelled``; ``polled_after_result``
    is true once the agent has polled again after its latest result) and notifies ``changed`` on
    every change, so the benchmark waits on a condition instead of polling the request log: its
    own process stays quiet while it measures. The server calls it under its own lock; the
    benchmark appends to the queue and sets the two attributes (single atomic stores).
    """

    def __init__(self, idle_sleep: float) -> None:
        self.idle_sleep = idle_sleep
        self.cancel_on_progress = False
        self.queue: deque[dict[str, Any]] = deque()
        self.changed = threading.Condition()
        self.polls = 0
        self.results = 0
        self.cancelled = 0
        self.polled_after_result = False
        self.last_sleep: float | None = None

    def push(self, commands: Iterable[dict[str, Any]]) -> None:
        self.queue.extend(commands)

    def next_command(self) -> dict[str, Any]:
        command = self.queue.popleft() if self.queue else None
        with self.changed:
            self.polls += 1
            self.polled_after_result = True
            self.last_sleep = None if command else self.idle_sleep
            self.changed.notify_all()
        if command is not None:
            return command
        return {"cmd": "SLEEP", "param": {"duration": self.idle_sleep, "data": {"reason": "bench idle"}}}

    def progress_reply(self, command: dict[str, Any], progress: dict[str, Any]) -> dict[str, Any] | None:
        return dict(CANCEL_REPLY) if self.cancel_on_progress else None

    def on_result(self, command: dict[str, Any], event: str, result: dict[str, Any]) -> dict[str, Any] | None:
        with self.changed:
            self.results += 1
            self.cancelled += result.get("status") == "cancelled"
            self.polled_after_result = False
            self.changed.notify_all()
        return None

    def on_cancelled(self, command: dict[str, Any], reason: str) -> None:
        pass

    def state(self) -> dict[str, Any]:
        return {"queued": len(self.queue), "polls": self.polls, "results": self.results}


class BenchOptimizer:
    """The server, its driver, and waits on what the driver saw."""

    def __init__(self, idle_sleep: float) -> None:
        self.driver = BenchDriver(idle_sleep)
        self.server = OptimizerServer(self.driver, app=APP, token=TOKEN, host="127.0.0.1", port=0)

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> BenchOptimizer:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    def mark(self) -> int:
        """A point in the request log; ``since(mark)`` gives what came after it."""
        return self.server.state()["requests"]

    def since(self, mark: int) -> History:
        state = self.server.state()
        history = state["history"]
        new = state["requests"] - mark
        if new > len(history):
            raise BenchError(
                f"the optimizer dropped {new - len(history)} requests of this phase from its log"
            )
        return history[len(history) - new :] if new > 0 else []

    def wait_until(
        self,
        holds: Callable[[BenchDriver], bool],
        timeout: float,
        what: str,
        process: AgentProcess | None = None,
    ) -> None:
        """Wait until ``holds(driver)``; BenchError after ``timeout``, or if ``process`` exits first
        (the tail of its log goes into the error)."""
        deadline = time.monotonic() + timeout
        with self.driver.changed:
            while True:
                # Look at the process first: what it did just before exiting is counted by then.
                exited = process is not None and not process.running()
                if holds(self.driver):
                    return
                if exited:
                    assert process is not None
                    raise BenchError(
                        f"{process.agent} exited ({process.popen.returncode}) while waiting for {what}; "
                        f"its log ends:\n{process.log_tail()}"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
                self.driver.changed.wait(min(remaining, PROCESS_CHECK_INTERVAL))


def events(entries: History, name: str) -> History:
    return [entry for entry in entries if entry.get("event") == name]


def is_result(entry: dict[str, Any]) -> bool:
    return entry.get("event") in ("DESCRIPTION", "MEASUREMENT", "ADJUSTMENT") and "status" in (
        entry.get("param") or {}
    )
