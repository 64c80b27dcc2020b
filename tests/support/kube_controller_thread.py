"""The thread that drives the controllers: a pass on every store change, and a bounded tick while
something changes with time alone (pods becoming ready, restart counts growing)."""

from __future__ import annotations

import threading
from collections.abc import Callable

MAX_TICK = 0.25
"""Longest wait between two passes (also while nothing is due: a slow safety net, no hot loop)."""
MIN_TICK = 0.02


class ControllerThread:
    """Runs ``Controllers.reconcile`` on every store change and at a bounded tick while something is due."""

    def __init__(self, run_pass: Callable[[], None], due: Callable[[], bool],
                 rollout_seconds: Callable[[], float]) -> None:
        self._run_pass = run_pass
        self._due = due
        self._rollout_seconds = rollout_seconds
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

    @property
    def tick(self) -> float:
        return min(MAX_TICK, max(MIN_TICK, self._rollout_seconds() / 4))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self._run_pass()
            except Exception as exc:  # noqa: BLE001 - kept for the test to see, the loop goes on
                self.errors.append(exc)
            self._wake.wait(self.tick if self._due() else MAX_TICK)
