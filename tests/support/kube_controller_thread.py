"""The thread that drives the controllers: a pass on every store change, and one when something is
due to change with time alone (a pod becoming ready, a restart count growing); nothing in between."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

IDLE_PASS = 2.0
"""Longest wait between two passes when nothing is due (a cheap safety net)."""
MIN_WAIT = 0.01
"""Shortest wait between two passes, so a burst of due moments cannot spin the thread."""


class ControllerThread:
    """Runs ``run_pass`` when woken (a store change) or when ``next_due()`` (monotonic time) comes."""

    def __init__(self, run_pass: Callable[[], None], next_due: Callable[[], float | None]) -> None:
        self._run_pass = run_pass
        self._next_due = next_due
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kube-controllers", daemon=True)
        self.errors: list[BaseException] = []

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def _wait_seconds(self) -> float:
        due = self._next_due()
        if due is None:
            return IDLE_PASS
        return min(IDLE_PASS, max(MIN_WAIT, due - time.monotonic()))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self._run_pass()
            except Exception as exc:  # noqa: BLE001 - kept for the test to see, the loop goes on
                self.errors.append(exc)
            self._wake.wait(self._wait_seconds())
