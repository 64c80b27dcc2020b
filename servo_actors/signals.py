"""Signals for the control loop: SIGTERM/SIGINT end the run, SIGHUP asks for a configuration reload.

The handler only records what arrived, sets an event and writes a byte to a pipe: every wait of
the loop (the optimizer client's requests and backoff sleeps, an operation in flight) watches that
event, so a stop takes effect within one short wait slice, whatever is hung; a SLEEP waits on the
pipe (``wake_fd``), so a signal ends its wait at once without it waking to look.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType


class StopRequested(Exception):
    """Raised by the loop when it finds a stop requested in the middle of a command."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


class _WakingEvent(threading.Event):
    """An Event whose ``set`` also wakes whoever waits on the watcher's pipe (from any thread)."""

    def __init__(self, wake: Callable[[], None]) -> None:
        super().__init__()
        self._wake = wake

    def set(self) -> None:
        super().set()
        self._wake()


class SignalWatcher:
    """Installs handlers for SIGTERM, SIGINT and SIGHUP on the main thread; ``restore()`` undoes it."""

    def __init__(self) -> None:
        self.stop: threading.Event = _WakingEvent(self.wake)
        self.stop_signal: str | None = None
        self._reload = threading.Event()
        self._previous: dict[int, object] = {}
        self._wake: tuple[int, int] | None = None
        # Reentrant: the handler may run on the main thread while it holds the lock (restore).
        self._wake_lock = threading.RLock()

    def install(self) -> SignalWatcher:
        with self._wake_lock:
            if self._wake is None:
                pipe = os.pipe()
                for fd in pipe:
                    os.set_blocking(fd, False)
                self._wake = pipe
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]  # a handler that signal.signal returned; None (set outside Python) would raise here
        self._previous.clear()
        with self._wake_lock:  # never a write to a descriptor closed (and maybe reused) meanwhile
            pipe, self._wake = self._wake, None
            for fd in pipe or ():
                os.close(fd)

    @property
    def wake_fd(self) -> int | None:
        """Readable once a signal arrived (or ``wake`` was called) since the last ``drain_wake``;
        None while not installed."""
        return self._wake[0] if self._wake is not None else None

    def wake(self) -> None:
        """Make ``wake_fd`` readable (safe from any thread and from the signal handler)."""
        with self._wake_lock:
            if self._wake is not None:
                with contextlib.suppress(OSError):  # full: it is readable already
                    os.write(self._wake[1], b"!")

    def drain_wake(self) -> None:
        with self._wake_lock:
            if self._wake is not None:
                with contextlib.suppress(OSError):
                    while os.read(self._wake[0], 512):
                        pass

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            self._reload.set()
            self.wake()
        else:
            if self.stop_signal is None:
                self.stop_signal = signal.Signals(signum).name
            self.stop.set()  # wakes too

    def take_reload(self) -> bool:
        """True once per SIGHUP received since the last call."""
        if self._reload.is_set():
            self._reload.clear()
            return True
        return False
