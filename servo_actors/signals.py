"""Signals: SIGTERM/SIGINT ask for a stop, SIGHUP asks for a configuration reload. One installer.

The handler only records what arrived, sets an event and writes a byte to a pipe; it never
raises. A handler that raises unwinds from wherever the main thread happens to be (inside a
library call, a flush, a lock), a frame there that catches the exception swallows the stop, and
nothing is left to see it. Instead every wait of a long-running command watches the event (or the
pipe, ``wake_fd``, for a wait in ``select``), so a stop takes effect within one short wait slice,
whatever is hung, and a second signal finds the handler still in place.

Every command takes the signals through this module:

- the entry point (``servo_actors.__main__``) calls ``take_over_process()`` before it imports the
  rest of the program, so a signal during start-up is recorded, never lost and never a traceback;
- a long-running command (``run``, ``demo``, ``optimizer serve``, ``agent``, and ``check``,
  ``describe``, ``measure``, ``adjust``) runs inside ``watching()`` and checks ``watcher.stop`` at
  its waits;
- any other command gets the default dispositions back with ``give_back_process()`` (Ctrl-C
  raises KeyboardInterrupt there, as in any short Python program); a stop recorded before that is
  delivered again at once.

::

    with watching() as watcher:
        while not watcher.stop.is_set():
            watcher.sleep(1.0)          # ends at once on a signal
    exit(128 + watcher.stop_signum if watcher.stop_signum else 0)
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

from servo_actors.errors import ServoError

__all__ = [
    "RELOAD_SIGNALS",
    "STOP_SIGNALS",
    "SignalWatcher",
    "StopRequested",
    "give_back_process",
    "process_watcher",
    "take_over_process",
    "watching",
]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""Signals that ask a command to stop."""
RELOAD_SIGNALS = (signal.SIGHUP,)
"""Signals that ask ``run`` to read its configuration again."""


class StopRequested(ServoError):
    """Raised by the loop when it finds a stop requested in the middle of a command."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(f"stopped by {signal_name}")
        self.signal_name = signal_name
        # Should it reach the CLI, the exit status a shell gives a process ended by that signal.
        number = getattr(signal.Signals, signal_name, None) if isinstance(signal_name, str) else None
        self.exit_code = 128 + int(number) if number is not None else 1


class _WakingEvent(threading.Event):
    """An Event whose ``set`` also wakes whoever waits on the watcher's pipe (from any thread).

    Its lock is reentrant: the handler runs on the main thread between two bytecodes, possibly
    while that same thread holds the event's lock (in ``set``, ``clear`` or ``wait``); with the
    plain lock of ``threading.Event`` the handler's ``set`` would wait for itself forever.
    """

    def __init__(self, wake: Callable[[], None]) -> None:
        super().__init__()
        self._cond = threading.Condition(threading.RLock())
        self._wake = wake

    def set(self) -> None:
        super().set()
        self._wake()


class SignalWatcher:
    """Records SIGTERM, SIGINT (and SIGHUP) on the main thread; nested ``install``/``restore`` pairs.

    Each ``install`` takes the signals not already taken and ``restore`` gives back what the
    matching ``install`` took, so an inner user (the runner inside ``run``) neither loses a signal
    that came before it nor hands the signals back to Python while the outer command still runs.
    """

    def __init__(self) -> None:
        self.stop: threading.Event = _WakingEvent(self._stopped)
        self._children: list[SignalWatcher] = []
        self.stop_signal: str | None = None
        """The name of the first stop signal received (None: none, or a stop asked for by code)."""
        self.stop_signum: int | None = None
        """Its number, for exit codes of 128 + signal."""
        self._reload = threading.Event()
        self._levels: list[dict[int, object]] = []  # per install: what each signal had before
        self._wake: tuple[int, int] | None = None
        # Reentrant: the handler may run on the main thread while it holds the lock (restore).
        self._wake_lock = threading.RLock()

    @property
    def installed(self) -> bool:
        return bool(self._levels)

    def install(self, *, reload: bool = True) -> SignalWatcher:
        """Take SIGTERM and SIGINT, and SIGHUP too with ``reload``; must run on the main thread."""
        with self._wake_lock:
            if self._wake is None:
                pipe = os.pipe()
                for fd in pipe:
                    os.set_blocking(fd, False)
                self._wake = pipe
        taken = {signum for level in self._levels for signum in level}
        wanted = STOP_SIGNALS + (RELOAD_SIGNALS if reload else ())
        level: dict[int, object] = {}
        # Blocked while they are taken one by one: a SIGINT between the SIGTERM and the SIGINT
        # handler would still meet the default one (KeyboardInterrupt). A signal that arrives
        # meanwhile stays pending and reaches this watcher once unblocked.
        previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
        try:
            for signum in wanted:
                if signum not in taken:
                    level[signum] = signal.signal(signum, self._handle)
            self._levels.append(level)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        return self

    def restore(self) -> None:
        """Undo the latest ``install``; the last one also closes the wake pipe."""
        if not self._levels:
            return
        for signum, handler in self._levels.pop().items():
            signal.signal(signum, handler)  # type: ignore[arg-type]  # a handler that signal.signal returned; None (set outside Python) would raise here
        if self._levels:
            return
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

    def sleep(self, seconds: float) -> bool:
        """Wait up to ``seconds``, less if a stop comes (at once, on any thread); True if stopped."""
        if self.stop.is_set():
            return True
        fd = self.wake_fd
        if fd is None:
            return self.stop.wait(seconds)
        deadline = time.monotonic() + seconds
        try:
            ready = select.select([fd], [], [], max(0.0, seconds))[0]
        except (OSError, ValueError):  # closed by a restore meanwhile: wait on the event instead
            ready = [fd]
        if self.stop.is_set():
            return True
        remaining = deadline - time.monotonic()
        if ready and remaining > 0:
            # Woken by something else than a stop (a SIGHUP's byte stays for the loop that reloads):
            # the rest of the wait is on the event, so a readable pipe never makes a caller spin.
            return self.stop.wait(remaining)
        return False

    def child(self) -> SignalWatcher:
        """A watcher for one part of this process (one application's loop of a servo of several):
        stopped on its own (its ``stop`` set) or whenever this one stops, with this one's signal;
        it never takes a signal itself. Its wake pipe is its own: ``close`` it when done."""
        child = SignalWatcher()
        with child._wake_lock:
            pipe = os.pipe()
            for fd in pipe:
                os.set_blocking(fd, False)
            child._wake = pipe
        self._children.append(child)
        if self.stop.is_set():
            child._stop_with(self)
        return child

    def close(self) -> None:
        """Close a ``child``'s wake pipe and forget it (it no longer follows its parent's stop)."""
        with self._wake_lock:
            pipe, self._wake = self._wake, None
            for fd in pipe or ():
                os.close(fd)

    def _stopped(self) -> None:
        self.wake()
        for child in list(self._children):
            child._stop_with(self)

    def _stop_with(self, parent: SignalWatcher) -> None:
        if self.stop_signal is None:
            self.stop_signal, self.stop_signum = parent.stop_signal, parent.stop_signum
        self.stop.set()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum in RELOAD_SIGNALS:
            self._reload.set()
            self.wake()
        else:
            if self.stop_signal is None:
                self.stop_signal = signal.Signals(signum).name
                self.stop_signum = signum
            self.stop.set()  # wakes too

    def take_reload(self) -> bool:
        """True once per SIGHUP received since the last call."""
        if self._reload.is_set():
            self._reload.clear()
            return True
        return False


_process_watcher: SignalWatcher | None = None


def take_over_process() -> SignalWatcher:
    """Record SIGTERM and SIGINT for this whole process from now on (the entry point, first thing).

    Idempotent. Never undone by ``watching``: only ``give_back_process`` hands the signals back.
    """
    global _process_watcher
    if _process_watcher is None:
        _process_watcher = SignalWatcher().install(reload=False)
    return _process_watcher


def process_watcher() -> SignalWatcher | None:
    """The watcher ``take_over_process`` installed, or None (a library use, an in-process test)."""
    return _process_watcher


def give_back_process() -> None:
    """The default dispositions back, for a command that never waits on anything a stop must end.

    A stop signal recorded before this is delivered again now, under the default disposition:
    SIGINT raises KeyboardInterrupt, SIGTERM ends the process, as if it had just arrived.
    """
    global _process_watcher
    watcher, _process_watcher = _process_watcher, None
    if watcher is None:
        return
    while watcher.installed:
        watcher.restore()
    if watcher.stop_signum is not None:
        signal.raise_signal(watcher.stop_signum)


@contextlib.contextmanager
def watching(*, reload: bool = False) -> Iterator[SignalWatcher]:
    """The watcher a long-running command checks at its waits, installed for the block.

    The process's own (``take_over_process``), so what arrived during start-up is there, else a
    watcher installed for this block only and removed after it (an in-process caller, a test).
    """
    watcher = _process_watcher or SignalWatcher()
    watcher.install(reload=reload)
    try:
        yield watcher
    finally:
        watcher.restore()
