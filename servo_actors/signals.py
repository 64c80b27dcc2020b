"""Signals for the control loop: SIGTERM/SIGINT end the run, SIGHUP asks for a configuration reload.

The handler only records what arrived and sets an event: every wait of the loop (the optimizer
client's requests and backoff sleeps, an operation in flight, SLEEP) watches that event, so a stop
takes effect within one short wait slice, whatever is hung.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType


class StopRequested(Exception):
    """Raised by the loop when it finds a stop requested in the middle of a command."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


class SignalWatcher:
    """Installs handlers for SIGTERM, SIGINT and SIGHUP on the main thread; ``restore()`` undoes it."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.stop_signal: str | None = None
        self._reload = threading.Event()
        self._previous: dict[int, object] = {}

    def install(self) -> SignalWatcher:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            self._reload.set()
            return
        if self.stop_signal is None:
            self.stop_signal = signal.Signals(signum).name
        self.stop.set()

    def take_reload(self) -> bool:
        """True once per SIGHUP received since the last call."""
        if self._reload.is_set():
            self._reload.clear()
            return True
        return False
