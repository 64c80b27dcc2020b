"""One servo per identity: two servos with the same ``servo_uid`` against one optimizer livelock.

Each takes the command the other was given; every post of one is answered ``invalid`` (``unexpected
cmd_uid``), and without a word in the log both spin forever. ``IdentityGuard`` notices it two ways:

- locally, at start-up: a lock file (``flock``) per identity, in the per-user runtime directory
  (``$XDG_RUNTIME_DIR/servo-actors``, else ``/tmp/servo-actors-UID``, mode 0700). A second servo
  of the same identity on this machine is told at once, with the PID holding it.
- from the optimizer's answers, anywhere: ``CONFLICT_STREAK`` consecutive commands whose posts
  were answered ``invalid`` / ``unexpected cmd_uid`` (with no result taken in between).

While a conflict lasts the servo says so (an error, once) and polls at most every
``backoff.max`` (lengthened by jitter, so two servos drift apart and one gets through); the first
command the optimizer accepts again ends it. The holder writes its state into the lock file, which
``servo-actors check`` reads (``check_identity``).

An identity is the optimizer's endpoint (its id in the URL, plus host and port) and the
``servo_uid``: two embedded optimizers on different ports are different optimizers.

::

    guard = IdentityGuard.for_config(config, previous=None)   # takes the lock; logs a conflict
    client = OptimizerClient(..., watcher=guard)              # the client reports answers, asks for delays
    ...
    guard.release()
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import random
import stat
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from servo_actors.config import ServoConfig

log = logging.getLogger(__name__)

CONFLICT_STREAK = 3
"""Consecutive commands answered ``invalid``/``unexpected cmd_uid`` that make a conflict."""
CONFLICT_JITTER = 0.5
"""Polls during a conflict wait ``backoff.max * (1 + up to this)``: two servos drift apart."""
LOCK_ATTEMPTS = 3
"""Tries at the lock before it counts as held (``check`` probes it for an instant)."""
LOCK_RETRY_DELAY = 0.05
"""Seconds between those tries."""
RUNTIME_DIR_ENV = "XDG_RUNTIME_DIR"
MAX_LOCK_FILE_BYTES = 64 * 1024
"""Most of a lock file read (it holds a small JSON state)."""
MAX_STALE_SWEEP = 100
"""Lock files looked at, at most, when a servo starts and removes those of killed servos."""


def runtime_dir() -> Path | None:
    """The per-user directory for lock files (created 0700), or None if none is safe to use."""
    base = os.environ.get(RUNTIME_DIR_ENV)
    candidate = (
        Path(base) / "servo-actors" if base else Path(tempfile.gettempdir()) / f"servo-actors-{os.getuid()}"
    )
    try:
        candidate.mkdir(mode=0o700, parents=bool(base), exist_ok=True)
        info = os.lstat(candidate)
    except OSError as exc:
        log.warning("no runtime directory for the servo identity lock (%s): %s", candidate, exc)
        return None
    # In a shared /tmp another user could have made it first: use it only if it is ours and private.
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        log.warning(
            "not using %s for the servo identity lock: not a private directory of this user", candidate
        )
        return None
    return candidate


def identity_key(config: ServoConfig) -> str:
    """Who this servo is to its optimizer: endpoint and servo_uid (a short hash, for file names)."""
    assert config.optimizer is not None
    text = f"{config.optimizer.servo_url}\0{config.servo_uid or ''}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def describe_identity(config: ServoConfig) -> str:
    assert config.optimizer is not None
    uid = repr(config.servo_uid) if config.servo_uid else "none"
    return f"optimizer {config.optimizer.id} at {config.optimizer.servo_url}, servo_uid {uid}"


def lock_path(config: ServoConfig, directory: Path | None = None) -> Path | None:
    directory = directory if directory is not None else runtime_dir()
    return directory / f"identity-{identity_key(config)}.lock" if directory is not None else None


def _read_state(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            state = json.loads(handle.read(MAX_LOCK_FILE_BYTES) or b"{}")
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


class IdentityGuard:
    """The lock and the conflict detector of one identity. ``observe``/``poll_delay`` are what the
    optimizer client calls (``protocol.client.AnswerWatcher``); thread-safe."""

    def __init__(
        self,
        key: str,
        description: str,
        *,
        backoff_max: float,
        path: Path | None,
        rng: random.Random | None = None,
    ) -> None:
        self.key = key
        self.description = description
        self.backoff_max = backoff_max
        self.path = path
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._streak = 0
        self._last_refused: str | None = None
        self._held_elsewhere = False
        self.conflict: str | None = None
        """Why this servo believes another one has its identity; None while it does not."""

    @classmethod
    def for_config(cls, config: ServoConfig, previous: IdentityGuard | None = None) -> IdentityGuard:
        """The guard of ``config``'s identity, its lock taken: ``previous`` if the identity is the same."""
        key = identity_key(config)
        if previous is not None:
            if previous.key == key:
                previous.backoff_max = config.settings.backoff.max
                return previous
            previous.release()
        path = lock_path(config)
        if path is not None:
            sweep_stale_locks(path.parent)
        guard = cls(key, describe_identity(config), backoff_max=config.settings.backoff.max, path=path)
        guard.acquire()
        return guard

    # --- the lock file ----------------------------------------------------------------------------

    def acquire(self, *, attempts: int = LOCK_ATTEMPTS) -> bool:
        """Take the lock; False (and an error in the log) if another servo here holds it."""
        if self.path is None or self._fd is not None:
            return True
        for attempt in range(attempts):
            fd = self._try_lock(self.path)
            if fd is not None:
                with self._lock:
                    self._fd = fd
                    was_held, self._held_elsewhere = self._held_elsewhere, False
                    if was_held:
                        self.conflict = None
                if was_held:
                    log.warning("the other local servo with this identity is gone: identity conflict over")
                self._write_state()
                return True
            if attempt + 1 < attempts:
                time.sleep(LOCK_RETRY_DELAY)
        if self._held_elsewhere:
            return False  # said already
        self._held_elsewhere = True
        holder = _read_state(self.path).get("pid", "?")
        self._set_conflict(
            f"another servo (pid {holder}) on this machine has the same identity ({self.description}); "
            "give each servo its own servo_uid (SERVO_UID)"
        )
        return False

    @staticmethod
    def _try_lock(path: Path) -> int | None:
        # Lock files are removed on release: after locking, make sure the file is still the one
        # at the path (else another servo removed it meanwhile, and a new one may be locked too).
        for _ in range(LOCK_ATTEMPTS):
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            except OSError as exc:
                log.warning("cannot open the servo identity lock %s: %s", path, exc)
                return None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return None
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
            os.close(fd)
        return None  # replaced again and again: someone else is busy with it, count it as held

    def release(self) -> None:
        """Give up the lock and remove its file (only the holder does)."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is None or self.path is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(fd)

    def _write_state(self) -> None:
        fd = self._fd
        if fd is None:
            return
        state = {
            "pid": os.getpid(),
            "identity": self.description,
            "since": time.time(),
            "conflict": self.conflict,
        }
        data = json.dumps(state).encode()
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        except OSError as exc:
            log.debug("cannot write the servo identity lock %s: %s", self.path, exc)

    # --- the optimizer's answers ------------------------------------------------------------------

    def observe(self, event: str, param: dict[str, Any] | None, reply: Any) -> None:
        """The optimizer answered ``reply`` (an OptimizerStatus, or None if unknown) to a post of ``param``."""
        if reply is None:
            return
        uid = (param or {}).get("cmd_uid")
        refused = reply.status == "invalid" and "cmd_uid" in (reply.reason or "")
        # Only a result the optimizer takes ends a streak: a stolen command's first progress posts
        # are answered ok too, before the other servo's poll takes the command away.
        is_result = isinstance(param, dict) and "status" in param
        if not refused and not is_result:
            return
        with self._lock:
            if not refused:
                self._streak = 0
                self._last_refused = None
                # A second local servo is a conflict for as long as it holds the lock.
                resolved = None if self._held_elsewhere else self.conflict
                if resolved is not None:
                    self.conflict = None
            elif uid is None or uid == self._last_refused:
                return  # one command counts once, however many of its posts were refused
            else:
                self._last_refused = uid
                self._streak += 1
                resolved = None
                streak = self._streak
        if not refused:
            if resolved is not None:
                log.warning("the optimizer accepts this servo's commands again: identity conflict over")
                self._write_state()
            return
        if streak == CONFLICT_STREAK:
            self._set_conflict(
                f"the optimizer refused {streak} commands in a row as 'unexpected cmd_uid': another servo "
                f"with the same identity ({self.description}) is probably polling it; "
                "give each servo its own servo_uid (SERVO_UID)"
            )

    def poll_delay(self) -> float:
        """Seconds to wait before the next poll: 0, or at least ``backoff.max`` during a conflict."""
        if self._held_elsewhere:
            self.acquire(attempts=1)  # the other local servo may have gone
        with self._lock:
            if self.conflict is None:
                return 0.0
        return self.backoff_max * (1.0 + CONFLICT_JITTER * self._rng.random())

    def _set_conflict(self, why: str) -> None:
        with self._lock:
            self.conflict = why
        log.error("identity conflict: %s; polling at most every %.1fs until it ends", why, self.backoff_max)
        self._write_state()


def sweep_stale_locks(directory: Path) -> int:
    """Remove the lock files nobody holds (their servo was SIGKILLed); how many were removed.

    Safe against a servo taking one meanwhile: a file is removed only while locked here, and a
    servo that locked it first checks after locking that it is still the file at the path.
    """
    removed = 0
    for path in sorted(directory.glob("identity-*.lock"))[:MAX_STALE_SWEEP]:
        fd = IdentityGuard._try_lock(path)
        if fd is None:
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed += 1
        os.close(fd)
    return removed


def check_identity(config: ServoConfig) -> tuple[bool, str]:
    """``servo-actors check``'s identity line: ``(success, message)``.

    Fails when a servo of this identity runs here and reports a conflict (from the optimizer's
    answers, or a second local servo); succeeds when none runs, or one runs without a conflict.
    """
    path = lock_path(config)
    who = describe_identity(config)
    if path is None or not path.exists():
        return True, f"no servo with this identity runs here ({who})"
    fd = IdentityGuard._try_lock(path)
    if fd is not None:
        # Nobody holds it (a servo that died): ours for an instant, then gone.
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)
        return True, f"no servo with this identity runs here ({who})"
    state = _read_state(path)
    if state.get("conflict"):
        return (
            False,
            f"the servo with this identity (pid {state.get('pid', '?')}) reports: {state['conflict']}",
        )
    return (
        True,
        f"a servo with this identity runs here (pid {state.get('pid', '?')}), no conflict reported ({who})",
    )


__all__ = [
    "CONFLICT_STREAK",
    "IdentityGuard",
    "check_identity",
    "identity_key",
    "lock_path",
    "runtime_dir",
    "sweep_stale_locks",
]
