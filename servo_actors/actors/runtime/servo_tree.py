"""The root of a servo of several applications: the one actor system they share.

::

    tree = ServoTree()
    runtime = ServoRuntime(config, root=tree)   # one per application; each joins tree's system
    ...
    tree.stop()                                 # every process of the system, at once

The tree's shape (docs/architecture.md, "Several applications"): the actor system's admin and
logger are the root's; under the admin, one supervisor actor per application, each its own
process, supervising that application's connector processes with today's policy. An application
added costs its supervisor process and its connectors, nothing more.

Each application's runtime (``ServoRuntime`` with ``root``) talks to its own supervisor through
its own endpoint of the system (``ActorSystemHandle.joining``), on its own thread: it hears only
its supervisor's answers, and a loss of its supervisor kills that supervisor with its connectors
and nothing else (``SystemLink.kill_subtree``). When and whether it is started again is the
tree's rules' decision (``actors/rules/tree.py``, carried out by ``runner/app_restarts.py``): so
is the root's restart (``restart``) once its admin or logger is gone (``root_lost``; every
supervisor dies with the admin). Until then ``running_system`` refuses to hand out the lost system.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path

from servo_actors.actors.linux import descendants, processes
from servo_actors.actors.transport.ports import LOOPBACK, port_is_taken
from servo_actors.actors.transport.system import ActorSystemHandle
from servo_actors.errors import SupervisorError

__all__ = ["ServoTree"]

_log = logging.getLogger(__name__)


class ServoTree:
    """The shared actor system of a servo of several applications (module docstring)."""

    def __init__(self, run_dir: Path | None = None) -> None:
        self._lock = threading.Lock()
        self._own_run_dir = run_dir is None
        self._run_dir = run_dir or Path(tempfile.mkdtemp(prefix=f"servo-actors-{os.getpid()}-"))
        self._system: ActorSystemHandle | None = None
        self._admin: tuple[int, int | None] | None = None  # the admin's PID and start time
        self._restarts = 0
        self._stopped = False

    @property
    def restarts(self) -> int:
        """How often the whole tree was started again after its root was lost."""
        return self._restarts

    @property
    def session_id(self) -> int | None:
        """The session of every process of the tree (None before the first start)."""
        return self._system.session_id if self._system is not None else None

    def running_system(self) -> ActorSystemHandle:
        """The shared system, started on first use. SupervisorError if it is lost (its admin or
        logger gone): only ``restart`` starts it again, when the tree's rules say so.

        Safe from any thread; one start at a time."""
        with self._lock:
            system = self._system
            if system is not None and self._alive(system):
                return system
            if self._stopped:
                raise SupervisorError("the servo's actor system is stopped")
            if system is not None or self._restarts:
                raise SupervisorError("the servo's actor system is lost (its admin or logger is gone)")
            return self._start()

    def root_lost(self) -> bool:
        """Whether the shared system was started and its admin or logger is gone since."""
        with self._lock:
            return self._system is not None and not self._alive(self._system)

    def restart(self) -> ActorSystemHandle:
        """Kill what is left of the shared system (every application's subtree with it) and start
        a fresh one: the root's restart."""
        with self._lock:
            if self._stopped:
                raise SupervisorError("the servo's actor system is stopped")
            system = self._system
            self._restarts += 1
            if system is not None:
                _log.error(
                    "the servo's actor system is lost (its admin or logger is gone): starting it again"
                )
                self._kill(system)
            self._system = None
            return self._start()

    def _start(self) -> ActorSystemHandle:
        system = ActorSystemHandle(self._run_dir)
        system.start()
        self._system, self._admin = system, _admin_of(system)
        return system

    def _alive(self, system: ActorSystemHandle) -> bool:
        """Whether the admin still runs (it exits within milliseconds of its logger, too). Its
        port is no proof: the processes it forked hold the listening socket a while longer."""
        if not system.running:
            return False
        if self._admin is not None:
            pid, started = self._admin
            return processes.is_running(pid, started)
        port = system.admin_port
        return port is not None and port_is_taken(LOOPBACK, port)

    @staticmethod
    def _kill(system: ActorSystemHandle) -> None:
        survivors = system.kill()
        if system.session_id is not None:
            survivors += descendants.release_session(system.session_id)
        if survivors:
            _log.error("processes %s of the actor system survived SIGKILL", survivors)

    def stop(self) -> None:
        """Kill every process of the tree (the applications' runtimes stopped theirs first) and
        remove its run directory. Idempotent."""
        with self._lock:
            self._stopped = True  # for good: a loop still running cannot start it again
            system, self._system = self._system, None
            if system is not None:
                self._kill(system)
            if self._own_run_dir:
                shutil.rmtree(self._run_dir, ignore_errors=True)


def _admin_of(system: ActorSystemHandle) -> tuple[int, int | None] | None:
    """The admin's PID and start time: the one process of the new session whose parent is not in
    it (the logger's parent is the admin); None if that cannot be told."""
    sid = system.session_id
    if sid is None:
        return None
    members = set(processes.session_members(sid))
    outside = [
        pid for pid in members if (stat := processes.proc_stat(pid)) is not None and stat.ppid not in members
    ]
    if len(outside) != 1:
        return None
    return outside[0], processes.start_ticks(outside[0])
