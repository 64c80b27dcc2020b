"""The agent process (``servo-actors agent``): a member system that hosts the connectors placed on it.

::

    options = AgentOptions(listen=parse_endpoint("10.0.0.7:1901"), join=parse_endpoint("10.0.0.5:1900"),
                           capabilities={"loadgen-host": ""}, secret_file=Path("/etc/servo/convention.key"))
    exit_code = run_agent(options, stop_event)    # returns once stop_event is set: 0

It starts its own actor system listening exactly on ``listen`` (every socket of it), authenticated
with the shared key from ``secret_file``, creates the ``MemberAgent`` (``member.py``) and tells it
to join the leader at ``join``. Then it waits: the member agent joins, rejoins while the leader is
away, and hosts what the leader places. The agent logs each change of leader. When ``stop`` is set
(SIGTERM/SIGINT) it kills its whole actor system (every connector it hosts with it, their process
groups, descendants and cgroups) and returns 0. Should its member agent or admin die, it kills
what is left and returns 1.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servo_actors.actors.linux import descendants, processes
from servo_actors.actors.rules import member_messages as mm
from servo_actors.actors.transport import message_auth
from servo_actors.actors.transport.system import ActorSystemHandle
from servo_actors.endpoints import Endpoint
from servo_actors.errors import SupervisorError

__all__ = [
    "AgentFailed",
    "AgentOptions",
    "DEFAULT_REJOIN_MAX",
    "DEFAULT_REJOIN_MIN",
    "LISTEN_SLICE",
    "STARTUP_TIMEOUT",
    "STATUS_INTERVAL",
    "SYSTEM_CAPABILITIES",
    "run_agent",
]

STARTUP_TIMEOUT = 10.0
"""Seconds the member agent has to answer its configuration."""
STATUS_INTERVAL = 1.0
"""Seconds between two looks at the member agent (its leader, its process)."""
LISTEN_SLICE = 0.1
"""Longest wait for a message before the stop event is looked at again."""
DEFAULT_REJOIN_MIN = 0.5
DEFAULT_REJOIN_MAX = 30.0
"""Bounds of the backoff between two registrations with a leader that does not answer."""
SYSTEM_CAPABILITIES = {"AllowRemoteActorSources": "no"}
"""Thespian capabilities of every convention system: no actor code is loaded from peers."""

_log = logging.getLogger(__name__)
_ids = itertools.count(1)


@dataclass(frozen=True)
class AgentOptions:
    listen: Endpoint
    join: Endpoint
    capabilities: dict[str, str]
    secret_file: Path
    rejoin_min: float = DEFAULT_REJOIN_MIN
    rejoin_max: float = DEFAULT_REJOIN_MAX
    run_dir: Path | None = None


class AgentFailed(SupervisorError):
    """The member system could not start, or a process of it died."""


def run_agent(options: AgentOptions, stop: threading.Event) -> int:
    """Serve as a member until ``stop`` is set (0), or until the member system fails (1).

    SupervisorError (with nothing left running) when the secret file is unusable or the system
    cannot start (the address is taken or not this host's).
    """
    if options.listen == options.join:
        raise AgentFailed(f"--listen and --join are both {options.listen}: an agent cannot join itself")
    key = message_auth.key_from_file(options.secret_file)
    if stop.is_set():  # during start-up: no system is started only to be stopped
        return 0
    own_run_dir = options.run_dir is None
    run_dir = options.run_dir or Path(tempfile.mkdtemp(prefix=f"servo-actors-agent-{os.getpid()}-"))
    handle = ActorSystemHandle(
        run_dir, listen=options.listen, capabilities=dict(SYSTEM_CAPABILITIES), key=key
    )
    try:
        handle.start()
        if stop.is_set():  # a stop while the system started: nothing was joined yet
            return 0
        agent = handle.create_actor(_member_agent_class())
        settings = mm.MemberSettings(
            member=str(options.listen),
            join=str(options.join),
            capabilities=dict(options.capabilities),
            rejoin_min=options.rejoin_min,
            rejoin_max=options.rejoin_max,
        )
        request = mm.Configure(f"configure-{next(_ids)}", settings)
        handle.tell(agent, request)
        status = _await(handle, request.request_id, STARTUP_TIMEOUT, stop)
        if status is None and stop.is_set():
            return 0
        if status is None:
            raise AgentFailed(f"the member agent did not answer within {STARTUP_TIMEOUT:g}s")
        offered = ", ".join(f"{k}={v}" if v else k for k, v in sorted(options.capabilities.items())) or "none"
        _log.info(
            "member %s (pid %d) joining the servo at %s; capabilities: %s",
            options.listen,
            os.getpid(),
            options.join,
            offered,
        )
        return _serve(handle, agent, status.pid, options.join, stop)
    finally:
        _kill(handle)
        if own_run_dir:
            shutil.rmtree(run_dir, ignore_errors=True)


def _member_agent_class() -> type:
    from servo_actors.actors.convention.member import MemberAgent

    return MemberAgent


def _serve(
    handle: ActorSystemHandle, agent: Any, agent_pid: int, join: Endpoint, stop: threading.Event
) -> int:
    """Wait for ``stop``, logging each change of leader; 1 if the member agent dies meanwhile."""
    leader: str | None = None
    next_status = 0.0
    pending: str | None = None
    while not stop.is_set():
        now = time.monotonic()
        if not processes.is_running(agent_pid):
            _log.error("the member agent (pid %d) died; stopping", agent_pid)
            return 1
        if now >= next_status and pending is None:
            pending = f"status-{next(_ids)}"
            handle.tell(agent, mm.GetMemberStatus(pending))
            next_status = now + STATUS_INTERVAL
        message = handle.listen(LISTEN_SLICE)
        if isinstance(message, mm.MemberStatus) and message.request_id == pending:
            pending = None
            if message.leader != leader:
                if message.leader is not None:
                    _log.info("serving the servo at %s", message.leader)
                else:
                    _log.warning(
                        "the servo at %s is gone: its connectors here were killed; joining %s again",
                        leader,
                        join,
                    )
                leader = message.leader
        elif pending is not None and time.monotonic() >= next_status + STATUS_INTERVAL:
            pending = None  # unanswered: ask again (the process check above catches a dead agent)
    return 0


def _await(handle: ActorSystemHandle, request_id: str, timeout: float, stop: threading.Event) -> Any:
    """The answer to ``request_id``; None after ``timeout`` or once ``stop`` is set."""
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0 and not stop.is_set():
        message = handle.listen(min(remaining, LISTEN_SLICE))
        if getattr(message, "request_id", None) == request_id:
            return message
    return None


def _kill(handle: ActorSystemHandle) -> None:
    survivors = handle.kill()
    if handle.session_id is not None:  # processes that left the session, in its cgroups
        survivors += descendants.release_session(handle.session_id)
    if survivors:
        _log.error("processes %s of the member system survived SIGKILL", survivors)
