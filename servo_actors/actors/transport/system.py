"""The Thespian actor system of one servo: start it on its own loopback port, and kill all of it.

Thespian facts this module works around (docs/architecture.md, measured with 4.0.1):

- Every socket binds ``0.0.0.0`` whatever ``THESPIAN_BASE_IPADDR`` says, and accepts pickled
  messages without authentication. ``patch_thespian`` makes a wildcard listen bind bind
  127.0.0.1 instead (one property of ``IPActorAddress``), or the one address a convention system
  is told to listen on (``listen``); the environment variable makes the advertised addresses the
  same; and every message carries an HMAC under this run's key (or the convention's shared key),
  checked before anything is unpickled (``message_auth``). The patches are applied in this
  process before the admin is forked, so every actor process inherits them, after a self-check
  that the internals they touch are all there (``thespian_internals``).
- When this process dies, every process of the system follows, whatever died first: each holds
  the read end of a pipe only this process can write to (``lifeline``).
- The admin daemonizes (``setsid`` in an intermediate child, then a second fork): every process
  of the system shares that session, which is how ``kill`` finds all of it and nothing else.
  The intermediate child is our direct child and a session leader: that is how we learn the
  session id the moment the admin is up.
- ``ActorSystem.shutdown()`` leaves hung actors orphaned and the admin alive for the transmit
  timeout, so ``kill`` SIGKILLs the session instead, and the transmit timeout is lowered so a
  stray admin would not linger for minutes anyway.
- The parent of a child actor reaps it inside Thespian; ``patch_thespian`` also records the exit
  code there so the supervisor can tell a normal exit (0) from a crash (Erlang's transient rule).
- A parent actor learns a child's PID at ``createActor`` (``child_pid``), and Thespian never
  forgets a child's address (``forget_child`` prunes them); its listen queue of 100 overflows when
  ~50 fresh actors connect at once (``LISTEN_BACKLOG``).

This module starts and kills the system (``ActorSystemHandle``) and patches Thespian for it. Beside
it: a parent's children as Thespian keeps them (``child_actors``: PIDs, exit
codes, forgetting), the ports (``ports``) and the admin's logging (``admin_logging``).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from servo_actors.actors.linux import lifeline, processes
from servo_actors.actors.transport import message_auth, thespian_patches
from servo_actors.actors.transport.admin_logging import (
    THESPIAN_LOG_NAME,
    log_definitions,
    quiet_forked_admin,
)
from servo_actors.actors.transport.child_actors import (
    record_exit_code,
)
from servo_actors.actors.transport.ports import (
    LOOPBACK,
    check_listen_address,
    free_loopback_port,
    port_is_taken,
)
from servo_actors.actors.transport.thespian_internals import check_thespian
from servo_actors.endpoints import Endpoint
from servo_actors.errors import SupervisorError

__all__ = [
    "ADMIN_PORT_ATTEMPTS",
    "ActorSystemHandle",
    "KILL_TIMEOUT",
    "LISTEN_BACKLOG",
    "TRANSMIT_TIMEOUT",
    "patch_thespian",
    "sessions_started",
    "wait_until_gone",
]

TRANSMIT_TIMEOUT = timedelta(seconds=5)
"""Thespian gives up on an undeliverable message after this (its default is 5 minutes)."""
LISTEN_BACKLOG = 1024
"""Listen queue of every actor's socket (Thespian: 100; the kernel caps it at net.core.somaxconn)."""
KILL_TIMEOUT = 2.0
"""Seconds ``kill`` waits for SIGKILLed processes to disappear before reporting survivors."""
ADMIN_PORT_ATTEMPTS = 3
"""Fresh ports tried when the port meant for the admin is taken (see ``_start_admin``)."""

_listen_host = LOOPBACK
"""The address every socket of the actor systems this process starts binds (inherited by fork)."""

_started_sessions: list[int] = []
_start_lock = threading.Lock()
"""Held while an actor system starts or an endpoint joins one: both read and set process-wide state
(Thespian's address and log file in the environment, the message key), and a start finds its admin
among this process's new sessions, which a start on another thread would confuse."""

_log = logging.getLogger(__name__)
_patched = False


def patch_thespian() -> None:
    """Loopback-only listen binds, exit-code capture, short transmit timeout, deeper listen queue,
    authenticated messages, and the cheaper paths of ``thespian_patches``.

    Checks the Thespian internals first (SupervisorError naming what is missing), every time: the
    patches are applied once, but a later start must not run on internals that changed since.
    """
    global _patched
    check_thespian()
    message_auth.ensure_key()
    message_auth.patch_transport()
    if _patched:
        return
    import thespian.system.transport as transport
    import thespian.system.transport.TCPTransport as tcp_transport
    from thespian.system.multiprocCommon import MultiProcReplicator
    from thespian.system.transport.IPBase import IPActorAddress

    def listen_bind_args(self: Any) -> tuple[tuple[Any, ...]]:
        host, *rest = self.bindname
        if host in ("", "0.0.0.0", None):
            # Read at call time: the address of the system this process belongs to.
            return ((_listen_host, *rest),)
        return (self.bindname,)

    IPActorAddress.bindArgs = property(listen_bind_args)

    original_liveness = MultiProcReplicator._checkChildLiveness

    def recording_liveness(child_info: Any) -> bool:
        proc = getattr(child_info, "childProc", None)
        pid = getattr(proc, "pid", None)
        # Read before the original reaps it: a zombie still shows its start time. (The waitid
        # first, so a running child costs one system call, not a /proc read.)
        exited = isinstance(pid, int) and processes.exit_status_nowait(pid) is not None
        started = processes.start_ticks(pid) if exited and isinstance(pid, int) else None
        alive = original_liveness(child_info)
        if not alive and proc is not None and proc.exitcode is not None and pid:
            record_exit_code(pid, started, proc.exitcode)
        return alive

    MultiProcReplicator._checkChildLiveness = staticmethod(recording_liveness)
    # Read at call time from the module global (transport/__init__.py), so setting it works
    # whenever thespian was first imported.
    transport.DEFAULT_MAX_TRANSMIT_PERIOD = TRANSMIT_TIMEOUT
    # Also read at call time. A cancel has every fresh host connect to the supervisor while it is
    # still busy forking the others: at Thespian's 100 the queue overflows with ~50 connectors,
    # and a dropped handshake costs a one-second TCP retransmission.
    tcp_transport.LISTEN_DEPTH = LISTEN_BACKLOG
    thespian_patches.install()
    _patched = True


def sessions_started() -> tuple[int, ...]:
    """Session ids of every actor system this process started (so tests can prove none survive)."""
    return tuple(_started_sessions)


def _session_leader_children() -> set[int]:
    me = os.getpid()
    return {s.pid for s in processes.children_of(me) if s.sid == s.pid}


class ActorSystemHandle:
    """One servo's actor system: started on a free loopback port, killed by its session id.

    ``start`` returns once the admin answers; ``session_id`` then names every process of the
    system. ``kill`` is the only way it ends (SIGKILL of the session, bounded), and is idempotent.

    A system of a convention (``convention.py``, ``agent.py``) is given instead the address its
    admin must listen on (``listen``: every socket of the system binds that address, the admin
    that port), Thespian ``capabilities`` to add, and the convention's shared message ``key``.
    ``admin_port`` is the port to try first in local mode (then free ones): tests use it to make
    the admin's port one another servo holds.
    """

    def __init__(
        self,
        run_dir: Path,
        *,
        listen: Endpoint | None = None,
        capabilities: dict[str, Any] | None = None,
        key: bytes | None = None,
        admin_port: int | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.endpoint = listen
        self.capabilities = dict(capabilities or {})
        self._key = key
        self._first_port = admin_port
        self.admin_port: int | None = None
        self.session_id: int | None = None
        self._asys: Any = None
        self._lifeline: lifeline.Lifeline | None = None
        self._owner: ActorSystemHandle | None = None

    @classmethod
    def joining(cls, owner: ActorSystemHandle) -> ActorSystemHandle:
        """Another endpoint of ``owner``'s system, for one application of a servo of several:
        ``start`` connects it to the running admin (no process is started), ``listen`` hears only
        what is sent to this endpoint (the answers of the actors it told), and ``kill`` closes it
        and nothing else: the system stays ``owner``'s. Each endpoint is used by one thread."""
        handle = cls(owner.run_dir)
        handle._owner = owner
        return handle

    @property
    def running(self) -> bool:
        return self._asys is not None

    @property
    def log_path(self) -> Path:
        return self.run_dir / THESPIAN_LOG_NAME

    def start(self) -> None:
        """Start the admin (forked from this process) on a fresh loopback port, or on ``listen``;
        for an endpoint ``joining`` another system, connect to its admin instead."""
        with _start_lock:
            if self._owner is not None:
                self._join(self._owner)
            else:
                self._start()

    def _join(self, owner: ActorSystemHandle) -> None:
        from thespian.actors import ActorSystem

        port = owner.admin_port
        if (
            not owner.running
            or port is None
            or not port_is_taken(LOOPBACK if owner.endpoint is None else owner.endpoint.host, port)
        ):
            # Thespian would start a new admin here, forked from this thread: never.
            raise SupervisorError("the servo's actor system is not running: no application can join it")
        try:
            self._asys = ActorSystem("multiprocTCPBase", {"Admin Port": port}, transientUnique=True)
        except Exception as exc:  # Thespian raises several unrelated types here
            raise SupervisorError(f"cannot join the actor system on port {port}: {exc}") from None
        self.admin_port, self.session_id = port, owner.session_id

    def _start(self) -> None:
        global _listen_host
        if self._key is not None:
            message_auth.install_key(self._key)
        patch_thespian()
        import thespian.system.utilis as utilis

        self.run_dir.mkdir(parents=True, exist_ok=True)
        _listen_host = self.endpoint.host if self.endpoint is not None else LOOPBACK
        os.environ["THESPIAN_BASE_IPADDR"] = _listen_host
        os.environ["THESPLOG_FILE"] = str(self.log_path)
        # Thespian caches its log path on first use; forget it so this system logs to its run dir.
        utilis._thesplog_file = None
        utilis._thesplog_old_file = None
        message_auth.reset_refusal_reports()
        line = lifeline.Lifeline()
        # The admin is forked from here, the supervisor and the hosts from it: objects that exist
        # now are moved out of the collector's reach, so no collection in a child writes to their
        # pages and the copies stay shared (the servo's PSS; each host freezes its own too).
        gc.freeze()
        try:
            self._start_admin(line)
        except BaseException:
            line.cut()
            raise
        self._lifeline = line

    def _start_admin(self, line: lifeline.Lifeline) -> None:
        """Fork the admin on a port of its own. A port that is taken (another servo's admin on it:
        a race between picking a free port and binding it, or ``admin_port``) is never handed to
        Thespian, which would take the listener there for an admin, wait 11-14 s for it to answer
        (it refuses our messages: another key) and fail: a free port is picked at once instead, and
        the log says so in one line. (In convention mode the address is given: refused at once.)
        """
        from thespian.actors import ActorSystem

        last_error: Exception | None = None
        wanted = self._first_port
        for _attempt in range(ADMIN_PORT_ATTEMPTS if self.endpoint is None else 1):
            before = _session_leader_children()
            if self.endpoint is not None:
                check_listen_address(self.endpoint)
                port = self.endpoint.port
            else:
                port, wanted = (wanted or free_loopback_port()), None
                if port_is_taken(LOOPBACK, port):
                    _log.warning(
                        "the actor system's port %s:%d is taken (another servo's actor system?); "
                        "starting it on a free port instead",
                        LOOPBACK,
                        port,
                    )
                    last_error = SupervisorError(f"port {port} is taken")
                    continue
            capabilities = {**self.capabilities, "Admin Port": port, "Process Startup Method": "fork"}
            try:
                with quiet_forked_admin(), lifeline.forking(line):
                    asys = ActorSystem(
                        "multiprocTCPBase",
                        capabilities,
                        logDefs=log_definitions(self.run_dir),
                        transientUnique=True,
                    )
            except Exception as exc:  # Thespian raises several unrelated types here
                last_error = exc
                self._kill_new_sessions(before)
                continue
            new = sorted(_session_leader_children() - before)
            if len(new) != 1:
                # No admin of ours was forked: the port answered as someone else's system.
                self._close_external(asys)
                last_error = SupervisorError(f"port {port} is held by another actor system")
                self._kill_new_sessions(before)
                continue
            self._asys, self.admin_port, self.session_id = asys, port, new[0]
            _started_sessions.append(new[0])
            return
        raise SupervisorError(f"could not start the actor system: {last_error}")

    def _kill_new_sessions(self, before: set[int]) -> None:
        for sid in sorted(_session_leader_children() - before):
            processes.kill_session(sid, timeout=KILL_TIMEOUT)
            self._reap(sid)

    def create_actor(self, actor_class: type) -> Any:
        return self._asys.createActor(actor_class)

    def tell(self, address: Any, message: Any) -> None:
        self._asys.tell(address, message)

    def listen(self, timeout: float) -> Any:
        """The next message for this process, or None after ``timeout`` seconds."""
        return self._asys.listen(timedelta(seconds=max(0.0, timeout)))

    def members(self) -> list[int]:
        """Live PIDs of every process of this system."""
        return processes.session_members(self.session_id) if self.session_id else []

    def kill(self, timeout: float = KILL_TIMEOUT) -> list[int]:
        """SIGKILL every process of the system and release this side's socket; survivors returned."""
        survivors: list[int] = []
        if self._owner is not None:  # an endpoint of another's system: only it is closed
            if self._asys is not None:
                self._close_external(self._asys)
                self._asys = None
            return survivors
        if self._lifeline is not None:
            # Every process of the system now sees end-of-file and kills itself and its session.
            self._lifeline.cut()
            self._lifeline = None
        if self.session_id is not None:
            survivors = processes.kill_session(self.session_id, timeout=timeout)
            self._reap(self.session_id)
        if self._asys is not None:
            self._close_external(self._asys)
            self._asys = None
        return survivors

    @staticmethod
    def _reap(sid: int) -> None:
        # The admin's intermediate parent is our child: collect its exit status once it is gone.
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(sid, os.WNOHANG)

    @staticmethod
    def _close_external(asys: Any) -> None:
        # ActorSystem.shutdown() would message an admin we just killed and wait; close our
        # transport (this process's listening socket) directly instead.
        transport = getattr(getattr(asys, "_systemBase", None), "transport", None)
        if transport is not None:
            with contextlib.suppress(Exception):
                transport.close()
        asys._systemBase = None


def wait_until_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait up to ``timeout`` seconds for ``pids`` to exit; the ones still running are returned."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid in pids if processes.is_running(pid)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(processes.KILL_POLL_INTERVAL)
