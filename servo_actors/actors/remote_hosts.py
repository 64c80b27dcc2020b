"""RemoteHosts: the leader's supervisor's view of its member systems, and its way to use them.

The supervisor owns one (in convention mode) and calls it from its actor thread; it never
blocks. It turns what arrives from Thespian and from member agents into a few events for the
supervisor, and the supervisor's wishes into messages to member agents:

- ``handle(msg, sender, now)``: a convention message (``ActorSystemConventionUpdate``, or one of
  ``member_messages``) -> events; None for any other message.
- ``tick(now)``: heartbeats out, silent members declared lost -> events.
- ``spawn(spec, generation, now)``: start the connector on a member offering its capability ->
  the member's name, or None while there is none (``unavailable`` says when to stop waiting).
- ``kill(name, generation)``: True if a kill went out (``RemoteGone`` follows); False if the
  member is gone already (so is the process, as far as the leader can know).
- ``release(name, now)``: the connector no longer runs where it did.

Events: ``MemberJoined``; ``MemberLost`` (every connector it hosted is gone: their parts fail
``host-lost``; not crashes); ``RemoteSpawned``, ``RemoteSpawnFailed``, ``RemoteGone`` (a host's
process is gone; ``killed`` when a kill did it).

A member lost is also deregistered from the leader's Thespian admin, so that when it registers
again (restarted, or its network back) the admin announces it anew and it is attached again.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from thespian.actors import ActorSystemConventionUpdate

from servo_actors.actors import member_messages as mm
from servo_actors.actors.convention import ConventionSettings
from servo_actors.actors.messages import ChildSpec
from servo_actors.actors.placement import Placement

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemberJoined:
    member: str


@dataclass(frozen=True)
class MemberLost:
    member: str
    connectors: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class RemoteSpawned:
    name: str
    generation: int
    address: Any
    pid: int


@dataclass(frozen=True)
class RemoteSpawnFailed:
    name: str
    generation: int
    error: str


@dataclass(frozen=True)
class RemoteGone:
    name: str
    generation: int
    exit_code: int | None
    killed: bool


Event = MemberJoined | MemberLost | RemoteSpawned | RemoteSpawnFailed | RemoteGone

_MEMBER_MESSAGES = (
    mm.Attached,
    mm.AttachRefused,
    mm.NotAttached,
    mm.Heartbeat,
    mm.HostSpawned,
    mm.HostSpawnFailed,
    mm.HostGone,
)


@dataclass
class _Link:
    """A member system the leader's admin announced."""

    name: str
    admin: Any
    agent: Any
    asked_at: float
    attached: bool = False
    pid: int | None = None
    refused: str | None = None


class RemoteHosts:
    """See module docstring. ``send(address, message)`` and ``deregister(admin_address)`` are the
    supervisor actor's ``send`` and ``deRegisterRemoteSystem``."""

    def __init__(
        self,
        settings: ConventionSettings,
        *,
        send: Callable[[Any, Any], None],
        deregister: Callable[[Any], None],
        now: float,
    ) -> None:
        self.settings = settings
        self.incarnation = uuid.uuid4().hex
        self.placement = Placement(settings.wants(), timeout=settings.timeout, grace=settings.grace, now=now)
        self._send = send
        self._deregister = deregister
        self._links: dict[str, _Link] = {}
        self._next_heartbeat = now

    # ----- queries -----------------------------------------------------------------------------

    def placed(self, name: str) -> bool:
        return self.placement.placed(name)

    def where(self, name: str) -> str:
        return self.placement.describe(name)

    def unavailable(self, name: str, now: float) -> bool:
        return self.placement.unavailable(name, now)

    def members(self) -> list[tuple[str, int | None, bool]]:
        """``(name, agent pid, attached)`` of every member system known."""
        return [(link.name, link.pid, link.attached) for link in self._links.values()]

    # ----- messages ----------------------------------------------------------------------------

    def handle(self, msg: Any, sender: Any, now: float) -> list[Event] | None:
        if isinstance(msg, ActorSystemConventionUpdate):
            return self._announced(msg, now)
        if not isinstance(msg, _MEMBER_MESSAGES):
            return None
        if getattr(msg, "incarnation", self.incarnation) != self.incarnation:
            return []  # for an earlier actor system of this servo
        link = self._link_of(msg, sender)
        if link is None:
            return []
        if isinstance(msg, mm.Attached):
            return self._attached(link, msg, now)
        if isinstance(msg, mm.AttachRefused):
            if link.refused != msg.reason:
                _log.warning("member %s refused to join: %s", link.name, msg.reason)
            link.refused = msg.reason
            return []
        if not link.attached:
            return []
        self.placement.heard(link.name, now)
        if isinstance(msg, mm.NotAttached):
            return self._lose(link, now, "it no longer serves this servo (restarted, or it lost us)")
        if isinstance(msg, mm.HostSpawned):
            return [RemoteSpawned(msg.name, msg.generation, msg.address, msg.pid)]
        if isinstance(msg, mm.HostSpawnFailed):
            return [RemoteSpawnFailed(msg.name, msg.generation, msg.error)]
        if isinstance(msg, mm.HostGone):
            return [RemoteGone(msg.name, msg.generation, msg.exit_code, msg.killed)]
        return []

    def _link_of(self, msg: Any, sender: Any) -> _Link | None:
        member = getattr(msg, "member", None)
        if isinstance(member, str) and member in self._links:
            return self._links[member]
        for link in self._links.values():
            if link.agent == sender:
                return link
        return None

    def _announced(self, msg: ActorSystemConventionUpdate, now: float) -> list[Event]:
        capabilities = msg.remoteCapabilities or {}
        name = capabilities.get(mm.MEMBER_CAPABILITY)
        agent = capabilities.get(mm.AGENT_CAPABILITY)
        if not isinstance(name, str) or agent is None:
            _log.warning("actor system %s joined the convention but is no servo-actors agent; ignored", msg.remoteAdminAddress)
            return []
        if not msg.remoteAdded:
            link = self._links.get(name)
            if link is not None and link.admin == msg.remoteAdminAddress:
                return self._lose(link, now, "it left the convention")
            return []
        events: list[Event] = []
        old = self._links.get(name)
        if old is not None and old.attached:
            events += self._lose(old, now, "it joined again (restarted)", deregister=False)
        self._links[name] = _Link(name, msg.remoteAdminAddress, agent, now)
        s = self.settings
        self._send(agent, mm.Attach(s.leader, self.incarnation, s.interval, s.timeout))
        return events

    def _attached(self, link: _Link, msg: mm.Attached, now: float) -> list[Event]:
        if link.attached:
            return []
        link.attached, link.pid, link.refused = True, msg.pid, None
        events: list[Event] = []
        gone = self.placement.member_joined(link.name, msg.capabilities, now)
        if gone:
            events.append(MemberLost(link.name, tuple(gone), "it joined again"))
        offered = ", ".join(f"{k}={v}" if v else k for k, v in sorted(msg.capabilities.items())) or "none"
        _log.info("member %s joined (agent pid %d; capabilities: %s)", link.name, msg.pid, offered)
        events.append(MemberJoined(link.name))
        return events

    def _lose(self, link: _Link, now: float, why: str, *, deregister: bool = True) -> list[Event]:
        self._links.pop(link.name, None)
        hosted = self.placement.member_lost(link.name, now) if link.attached else []
        if deregister:
            # So that its next registration is announced again (Thespian keeps members ~22 min).
            self._deregister(link.admin)
        if not link.attached:
            return []
        _log.warning(
            "member %s lost: %s%s", link.name, why, f"; its connectors {', '.join(hosted)} are gone" if hosted else ""
        )
        return [MemberLost(link.name, tuple(hosted), why)]

    # ----- time --------------------------------------------------------------------------------

    def tick(self, now: float) -> list[Event]:
        """Heartbeats when due; members silent for ``timeout`` (or never attached) lost."""
        events: list[Event] = []
        timeout = self.settings.timeout
        for name in self.placement.lost_members(now):
            link = self._links.get(name)
            if link is not None:
                events += self._lose(link, now, f"not heard from for {timeout:g}s (supervisor.convention.heartbeat)")
        for link in list(self._links.values()):
            if not link.attached and now - link.asked_at >= timeout:
                self._lose(link, now, "it did not answer")
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + self.settings.interval
            beat = mm.Heartbeat(self.incarnation)
            for link in self._links.values():
                if link.attached:
                    self._send(link.agent, beat)
        return events

    def next_due(self) -> float:
        """When ``tick`` has something to do next."""
        return self._next_heartbeat

    # ----- connectors --------------------------------------------------------------------------

    def spawn(self, spec: ChildSpec, generation: int, now: float) -> str | None:
        member = self.placement.choose(spec.name, now)
        if member is None:
            return None
        link = self._links.get(member)
        if link is None or not link.attached:  # cannot happen: placement knows attached members only
            self.placement.release(spec.name, now)
            return None
        self._send(link.agent, mm.SpawnHost(self.incarnation, spec, generation))
        return member

    def kill(self, name: str, generation: int) -> bool:
        member = self.placement.where(name)
        link = self._links.get(member) if member is not None else None
        if link is None or not link.attached:
            return False
        self._send(link.agent, mm.KillHost(self.incarnation, name, generation))
        return True

    def release(self, name: str, now: float) -> None:
        self.placement.release(name, now)

    def detach_all(self) -> None:
        """The supervisor stops: every member kills what it hosts for it (best effort)."""
        for link in self._links.values():
            if link.attached:
                self._send(link.agent, mm.Detach(self.incarnation))
