"""Messages between a leader's supervisor and the member agents of its convention: plain data.

Pickled by module path like every actor message (``messages.py``), authenticated by the
convention's shared key (``message_auth``) before they are unpickled.

Joining: a member system registers with the leader's Thespian admin (Thespian's convention),
its capabilities carrying the address of its ``MemberAgent`` (``AGENT_CAPABILITY``). The leader's
admin tells its supervisor (``ActorSystemConventionUpdate``), which sends ``Attach``; the agent
answers ``Attached`` (or ``AttachRefused`` when it already serves another leader). From then on
both sides send a ``Heartbeat`` every ``interval`` and count the other lost after ``timeout``
seconds of silence.

Connectors: the supervisor sends ``SpawnHost``; the agent starts a ``ConnectorHost`` as its own
child (so the kill is local to the member: process group, descendants, cgroup) and hands it a
``HostInit`` whose ``reply_to`` is the supervisor, so everything else goes straight between the
supervisor and the host; it answers ``HostSpawned`` (or ``HostSpawnFailed``). ``KillHost`` kills
one; ``HostGone`` says a host's process is gone (killed, crashed or exited), once.
``Detach`` (the leader stops) kills everything the agent hosts for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servo_actors.actors.rules.messages import ChildSpec

AGENT_CAPABILITY = "servo-actors.agent"
"""Thespian capability of a member system: the address of its MemberAgent."""
MEMBER_CAPABILITY = "servo-actors.member"
"""Thespian capability of a member system: its name (the ``HOST:PORT`` it listens on)."""
OFFERS_CAPABILITY = "servo-actors.capabilities"
"""Thespian capability of a member system: ``{NAME: VALUE}`` it offers connectors."""
JOIN_CAPABILITY = "servo-actors.join-attempt"
"""Thespian capability a member changes to make its admin register with the leader again."""


# ----- leader -> member agent --------------------------------------------------------------------


@dataclass(frozen=True)
class Attach:
    """Serve this leader: heartbeat every ``interval`` seconds, count it lost after ``timeout``."""

    leader: str
    """The leader's name for people and logs (its ``HOST:PORT``)."""
    incarnation: str
    """Unique per leader actor system: a restarted leader is a new one."""
    interval: float
    timeout: float


@dataclass(frozen=True)
class Detach:
    """The leader is stopping: kill every connector hosted for it and wait for another."""

    incarnation: str


@dataclass(frozen=True)
class SpawnHost:
    """Start a fresh connector host for ``spec`` (its ``generation`` as the supervisor counts them)."""

    incarnation: str
    spec: ChildSpec
    generation: int


@dataclass(frozen=True)
class KillHost:
    """SIGKILL the host of ``name`` of this ``generation`` (group, descendants, cgroup)."""

    incarnation: str
    name: str
    generation: int


# ----- both ways -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Heartbeat:
    """I am here. From a member, ``member`` names it and ``hosting`` lists ``(name, generation)``
    of its live hosts."""

    incarnation: str
    member: str = ""
    hosting: tuple[tuple[str, int], ...] = ()


# ----- member agent -> leader --------------------------------------------------------------------


@dataclass(frozen=True)
class Attached:
    """The agent serves the leader of ``incarnation`` now."""

    incarnation: str
    member: str
    pid: int
    capabilities: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AttachRefused:
    incarnation: str
    member: str
    reason: str


@dataclass(frozen=True)
class NotAttached:
    """An answer to a leader the agent does not serve (any more): it must attach again."""

    incarnation: str
    member: str


@dataclass(frozen=True)
class HostSpawned:
    member: str
    name: str
    generation: int
    pid: int
    address: Any


@dataclass(frozen=True)
class HostSpawnFailed:
    member: str
    name: str
    generation: int
    error: str


@dataclass(frozen=True)
class HostGone:
    """The host's process is gone: ``exit_code`` (negative: a signal; None: unknown), ``killed``
    when a ``KillHost`` (or a detach) did it."""

    member: str
    name: str
    generation: int
    exit_code: int | None
    killed: bool


# ----- the agent process <-> its member agent ----------------------------------------------------


@dataclass(frozen=True)
class MemberSettings:
    """What ``servo-actors agent`` was told (durations in seconds)."""

    member: str
    """This member's name: the ``HOST:PORT`` its system listens on."""
    join: str
    """The leader's ``HOST:PORT``."""
    capabilities: dict[str, str]
    rejoin_min: float = 0.5
    rejoin_max: float = 30.0


@dataclass(frozen=True)
class Configure:
    """From the agent process: join the convention with these settings; answered ``MemberStatus``."""

    request_id: str
    settings: MemberSettings


@dataclass(frozen=True)
class GetMemberStatus:
    request_id: str


@dataclass(frozen=True)
class MemberStatus:
    request_id: str
    pid: int
    leader: str | None
    """The leader served now (its name), or None while joining."""
    hosting: tuple[tuple[str, int, int], ...]
    """``(name, generation, pid)`` of every live host."""
    join_attempts: int
