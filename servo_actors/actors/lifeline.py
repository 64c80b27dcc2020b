"""Lifeline: every process of an actor system dies once the servo process that started it is gone.

The supervisor watches the servo process, and each host dies with the supervisor; but when the
supervisor (or the admin) has died first, nothing would end the admin and the logger after the
servo goes, and they would accept connections for good. So, per actor system, the servo process
makes a pipe and keeps its write end. Every process forked for that system inherits the read end
and closes the write end at once (an ``os.register_at_fork`` hook), so the servo holds the only
write end. A watcher thread in each of those processes blocks reading the pipe: the read returns
end-of-file exactly when the servo is gone (however it died) or has cut the lifeline
(``ActorSystemHandle.kill``). The watcher then SIGKILLs every process of its session (orphaned
subprocesses of connectors included) and then its own process.

Both ends are close-on-exec: a program a connector or the servo executes never holds them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

from servo_actors.actors import processes

SWEEP_TIMEOUT = 2.0
"""Seconds a watcher spends SIGKILLing its session before it kills its own process."""
WATCHER_NAME = "servo-lifeline"

_held: list[Lifeline] = []
"""Lifelines whose write end this process holds (only ever in the servo process)."""
_forking: Lifeline | None = None
"""The lifeline of the actor system being forked right now, if any."""
_watched_fd: int | None = None
"""In an actor process: the read end its watcher reads."""
_owner_sid: int | None = None
"""In an actor process: the servo's session, which a watcher must never sweep."""


class Lifeline:
    """One actor system's pipe; the servo process holds the write end until ``cut``."""

    def __init__(self) -> None:
        # os.pipe() makes both ends non-inheritable (O_CLOEXEC).
        self.read_fd, self.write_fd = os.pipe()
        self.owner_sid = os.getsid(0)
        self._cut = False
        _held.append(self)

    @property
    def cut_already(self) -> bool:
        return self._cut

    def cut(self) -> None:
        """Close both ends here: every process holding the read end sees end-of-file and dies."""
        if self._cut:
            return
        self._cut = True
        with contextlib.suppress(ValueError):
            _held.remove(self)
        for fd in (self.write_fd, self.read_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


@contextlib.contextmanager
def forking(lifeline: Lifeline) -> Iterator[None]:
    """Processes forked meanwhile belong to ``lifeline``'s actor system (the admin, its parent)."""
    global _forking
    _forking = lifeline
    try:
        yield
    finally:
        _forking = None


def watching() -> bool:
    """Whether this process is an actor process on a lifeline."""
    return _watched_fd is not None


def _end_of_everything() -> None:
    me, sid = os.getpid(), os.getsid(0)
    # Never the servo's own session: a process forked before setsid (Thespian's daemonizing
    # intermediate) is still in it, and that session may hold the user's shell.
    if sid > 1 and sid != _owner_sid:
        processes.kill_session(sid, exclude=(me,), timeout=SWEEP_TIMEOUT, own=True)
    os.kill(me, signal.SIGKILL)


def _watch(fd: int) -> None:
    while True:
        try:
            if not os.read(fd, 1):
                break
        except OSError:
            break  # the pipe is unusable: the servo can no longer be watched, so end as if gone
    _end_of_everything()


def _start_watcher(fd: int) -> None:
    # Started with every signal blocked (a thread inherits its creator's mask), so the kernel
    # delivers signals such as Thespian's SIGCHLD to the main thread, whose select they must wake.
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        threading.Thread(target=_watch, args=(fd,), name=WATCHER_NAME, daemon=True).start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _after_fork_in_child() -> None:
    global _watched_fd, _owner_sid, _forking
    if _held:
        # Forked from the servo: drop every write end, keep only the read end of the system being
        # forked (if any), so ``cut`` of one system never reaches another one's processes.
        chosen = _forking
        for lifeline in _held:
            keep = (lifeline.read_fd,) if lifeline is chosen else ()
            for fd in (lifeline.write_fd, lifeline.read_fd):
                if fd not in keep:
                    with contextlib.suppress(OSError):
                        os.close(fd)
        _held.clear()
        _forking = None
        if chosen is not None:
            _watched_fd, _owner_sid = chosen.read_fd, chosen.owner_sid
    if _watched_fd is not None:
        # Threads do not survive fork: each forked process needs a watcher of its own.
        _start_watcher(_watched_fd)


os.register_at_fork(after_in_child=_after_fork_in_child)
