"""ProgressLane: progress posts of one operation, at most one in flight, every reply read.

The optimizer may answer any progress post ``cancel`` (or ``unexpected-event``, ``invalid``), so a
progress reply must never be dropped; yet waiting for it on the control loop would hold up the
operation it reports on. The lane runs each post on a worker and hands back a ``Future``:

- ``offer(param)`` starts a post at once, or returns None while the previous one is still open (a
  heartbeat that cannot go out now is skipped, never queued: there is no backlog to drain later);
- ``verdict()`` is the first answer other than ``ok`` (or None): it ends the operation, and the
  lane takes no more posts;
- ``open_post`` is the post still in flight, if any: before the operation's result goes out, the
  caller waits for it (``settle``), so a ``cancel`` answered to it is acted on first and the
  command gets exactly one result.

The worker is injected (``spawn``), so the rules are tested without threads or sleeps::

    >>> pending = []
    >>> lane = ProgressLane(lambda param: OptimizerStatus(status="ok"), spawn=pending.append)
    >>> first = lane.offer({"progress": 10})
    >>> lane.offer({"progress": 20}) is None, lane.skipped      # one in flight at most
    (True, 1)
    >>> pending.pop()()                                          # the worker runs the post
    >>> first.result().status, lane.open_post is None, lane.verdict() is None
    ('ok', True, True)
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from servo_actors.protocol.commands import OptimizerStatus

log = logging.getLogger(__name__)

Post = Callable[[dict[str, Any]], OptimizerStatus | None]
"""Posts one progress param; the optimizer's status, or None if not delivered."""
Spawn = Callable[[Callable[[], None]], None]
"""Runs a callable off the caller's thread (or, in tests, whenever the test chooses)."""


def spawn_daemon(work: Callable[[], None]) -> None:
    """Run ``work`` on a new daemon thread: a post abandoned at exit never holds the process."""
    threading.Thread(target=work, name="optimizer-progress", daemon=True).start()


def in_background(call: Callable[[], Any], spawn: Spawn = spawn_daemon) -> Future[Any]:
    """``call()`` on a worker; its Future holds the return value or the exception it raised."""
    future: Future[Any] = Future()
    future.set_running_or_notify_cancel()

    def work() -> None:
        try:
            future.set_result(call())
        except BaseException as exc:  # the waiter gets every failure, the worker never dies silently
            future.set_exception(exc)

    # The worker runs in the caller's context: its log lines name the caller's application.
    context = contextvars.copy_context()
    spawn(lambda: context.run(work))
    return future


class ProgressLane:
    """At most one progress post of one operation in flight (see the module docstring)."""

    def __init__(self, post: Post, *, spawn: Spawn = spawn_daemon) -> None:
        self._post = post
        self._spawn = spawn
        self._open: Future[OptimizerStatus | None] | None = None
        self._verdict: OptimizerStatus | None = None
        self.posted = 0
        """Posts started."""
        self.skipped = 0
        """Offers refused because a post was still open."""

    @property
    def open_post(self) -> Future[OptimizerStatus | None] | None:
        """The post still in flight, or None."""
        self._collect()
        return self._open

    @property
    def busy(self) -> bool:
        return self.open_post is not None

    def offer(self, param: dict[str, Any]) -> Future[OptimizerStatus | None] | None:
        """Start posting ``param``; None (and nothing sent) while a post is open or after a verdict."""
        if self.busy:
            self.skipped += 1
            return None
        if self._verdict is not None:
            return None
        self.posted += 1
        future = in_background(lambda: self._post(param), self._spawn)
        self._open = future
        self._collect()  # a worker that ran at once is read at once
        return future

    def verdict(self) -> OptimizerStatus | None:
        """The first reply other than ``ok`` among the finished posts: it ends the operation."""
        self._collect()
        return self._verdict

    def _collect(self) -> None:
        """Read the open post if it has finished: its reply may be the verdict."""
        future = self._open
        if future is None or not future.done():
            return
        self._open = None
        try:
            reply = future.result()
        except Exception as exc:  # the client does not raise; if it ever does, the post is lost
            log.error("a progress post failed: %s: %s", type(exc).__name__, exc)
            return
        if reply is not None and reply.status != "ok" and self._verdict is None:
            self._verdict = reply


__all__ = ["ProgressLane", "in_background", "spawn_daemon"]
