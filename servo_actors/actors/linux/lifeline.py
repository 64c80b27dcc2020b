"""Lifeline: every process of an actor system dies once the servo process that started it is gone.

The supervisor watches the servo process, and each host dies with the supervisor; but when the
supervisor (or the admin) has died first, nothing would end the admin and the logger after the
servo goes, and they would accept connections for good. So, per actor system, the servo process
makes a pipe and keeps its write end. Every process forked for that system inherits the read end
and closes the write end at once (an ``os.register_at_fork`` hook), so the servo holds the only
write end, and the read end sees end-of-file exactly when the servo is gone (however it died) or
has cut the lifeline (``ActorSystemHandle.kill``). Then:

- The processes Thespian starts for the system (its daemonizing intermediate, the admin, the
  logger, the supervisor: ``SWEEPER_DEPTH`` forks from the servo) each run a watcher thread that
  SIGKILLs every process of the session (orphaned subprocesses of connectors included), then its
  own process.
- Deeper ones (connector hosts, and what they fork) are started and killed on every cancel, so
  they pay no thread: the kernel itself SIGKILLs them (``O_ASYNC`` on their own open file of the
  pipe, with SIGKILL as the I/O signal: ~50 us to arm, no thread, works even if the process hangs).

Both ends are close-on-exec: a program a connector or the servo executes never holds them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator

from servo_actors.actors.linux import processes

SWEEP_TIMEOUT = 2.0
"""Seconds a watcher spends SIGKILLing its session before it kills its own process."""
LAST_WORDS_HEAD_START = 0.3
"""Seconds the admin's and logger's watchers leave the supervisor's (``before_end``) to kill the
orphans it adopted, before they kill the session and the supervisor with it."""
WATCHER_NAME = "servo-lifeline"
SWEEPER_DEPTH = 3
"""Forks from the servo within which a process runs a sweeping watcher thread: Thespian's
daemonizing intermediate (1), the admin (2), the logger and the supervisor (3)."""

_held: list[Lifeline] = []
"""Lifelines whose write end this process holds (only ever in the servo process)."""
_forking: Lifeline | None = None
"""The lifeline of the actor system being forked right now, if any."""
_watched_fd: int | None = None
"""In an actor process: the read end its watcher reads."""
_owner_sid: int | None = None
"""In an actor process: the servo's session, which a watcher must never sweep."""
_depth = 0
"""How many forks this process is from the servo process (0 in the servo)."""
_last_words: Callable[[], None] | None = None
"""In an actor process: what its watcher runs before the session kill (``before_end``)."""


class Lifeline:
    """One actor system's pipe; the servo process holds the write end until ``cut``."""

    def __init__(self) -> None:
        # os.pipe() makes both ends non-inheritable (O_CLOEXEC).
        self.read_fd, self.write_fd = os.pipe()
        self.owner_sid = os.getsid(0)
        self._cut = False
        _held.append(self)

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


def before_end(last_words: Callable[[], None]) -> None:
    """Run ``last_words`` in this actor process's watcher before it kills the session: the
    supervisor kills there the orphans it adopted as subreaper and the cgroups of its connectors,
    which a session kill would miss (they left the session)."""
    global _last_words
    _last_words = last_words


def owner_gone() -> bool:
    """In an actor process: whether the process holding this system's lifeline (the servo, or an
    agent) is gone, i.e. the pipe is at end-of-file. Exact, with no race against what the kernel
    kills at that moment: both follow from the same close. False outside an actor process."""
    fd = _watched_fd
    if fd is None:
        return False
    try:
        # Nothing is ever written to the pipe: readable means end-of-file.
        readable, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _end_of_everything() -> None:
    me = os.getpid()
    try:
        if _last_words is not None:
            with contextlib.suppress(Exception):  # the session kill below must happen regardless
                _last_words()
        else:
            time.sleep(LAST_WORDS_HEAD_START)
        sid = os.getsid(0)
        # Never the servo's own session: a process forked before setsid (Thespian's daemonizing
        # intermediate) is still in it, and that session may hold the user's shell.
        if sid > 1 and sid != _owner_sid:
            processes.kill_session(sid, exclude=(me,), timeout=SWEEP_TIMEOUT, own=True)
    finally:
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


def _arm_kernel_kill(fd: int) -> int | None:
    """Have the kernel SIGKILL this process when the pipe of ``fd`` loses its last writer.

    The I/O signal's owner belongs to an open file (shared across fork), so this process opens
    the pipe afresh for itself. Returns that new descriptor, or None when it cannot be armed.
    """
    try:
        own = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.fcntl(own, fcntl.F_SETOWN, os.getpid())
        fcntl.fcntl(own, fcntl.F_SETSIG, signal.SIGKILL)
        fcntl.fcntl(own, fcntl.F_SETFL, fcntl.fcntl(own, fcntl.F_GETFL) | os.O_ASYNC)
    except OSError:
        os.close(own)
        return None
    try:
        gone = os.read(own, 1) == b""
    except BlockingIOError:
        gone = False  # the servo still holds the write end
    if gone:  # it went before this process was armed: no signal is coming
        os.kill(os.getpid(), signal.SIGKILL)
    return own


def _after_fork_in_child() -> None:
    global _watched_fd, _owner_sid, _forking, _depth
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
            _watched_fd, _owner_sid, _depth = chosen.read_fd, chosen.owner_sid, 0
    if _watched_fd is None:
        return
    _depth += 1
    if _depth > SWEEPER_DEPTH:
        own = _arm_kernel_kill(_watched_fd)
        if own is not None:
            with contextlib.suppress(OSError):
                os.close(_watched_fd)
            _watched_fd = own
            return
    # Threads do not survive fork: each forked process needs a watcher of its own.
    _start_watcher(_watched_fd)


os.register_at_fork(after_in_child=_after_fork_in_child)
