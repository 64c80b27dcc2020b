"""RemoteHosts: the leader's supervisor's view of its member systems, and its way to use them.

The supervisor owns one (in convention mode) and calls it from its actor thread; it never blocks
and reads no clock (``now`` is passed in), so it is tested with a fake clock and a recording
``send``. It turns what arrives from Thespian and from member agents into events about the
supervisor's children, and the supervisor's wishes into messages to member agents:

- ``handle(msg, sender, now)``: a convention message (``ActorSystemConventionUpdate``, or one of
  ``member_messages``) -> events; None for any other message.
- ``tick(now)``: heartbeats out; silent members lost; spawns that waited out the placement grace
  given up -> events.
- ``spawn(spec, generation, now)``: start this generation on a member offering the connector's
  capability. With none there yet, it waits (a member joining takes it at once) until the grace
  ends, then ``Unplaced`` (its parts fail ``host-unavailable``).
- ``kill(name, generation, now)``: True when the generation is gone already (never placed, or
  its member is lost); else a kill went out and ``RemoteGone`` follows. Safe to repeat.

Events, each about one generation of one child (``name``, ``generation``):

- ``RemoteSpawned``: the process exists on ``member`` (its PID there; never killed from here).
- ``RemoteSpawnFailed``: the member could not start it (a crash of the start).
- ``RemoteGone``: its process is gone (``killed`` when a kill did it; else it exited or crashed).
- ``HostLost``: its member is lost, and the process with it: not a crash (``host-lost``).
- ``Unplaced``: no member offered its capability within the grace (``host-unavailable``).
- ``Placeable``: these connectors can be placed now (a member offering them joined).

A lost member is also deregistered from the leader's Thespian admin, so that when it registers
again (restarted, or its network back) the admin announces it anew and it is attached again.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from thespian.actors import ActorSystemConventionUpdate

from servo_actors.actors.convention.settings import ConventionSettings
from servo_actors.actors.rules import member_messages as mm
from servo_actors.actors.rules.messages import ChildSpec
from servo_actors.actors.rules.placement import Placement

__all__ = [
    "Event",
    "HOST_LOST",
    "HostLost",
    "KILL_RESEND",
    "Placeable",
    "RemoteGone",
    "RemoteHosts",
    "RemoteSpawnFailed",
    "RemoteSpawned",
    "Unplaced",
]

HOST_LOST = "host-lost"
KILL_RESEND = 0.5
"""Seconds before a repeated kill of one generation goes to its member again."""

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RemoteSpawned:
    name: str
    generation: int
    member: str
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


@dataclass(frozen=True)
class HostLost:
    name: str
    generation: int
    message: str


@dataclass(frozen=True)
class Unplaced:
    name: str
    generation: int
    message: str


@dataclass(frozen=True)
class Placeable:
    names: tuple[str, ...]


Event = RemoteSpawned | RemoteSpawnFailed | RemoteGone | HostLost | Unplaced | Placeable

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


@dataclass
class _Generation:
    """The current generation of one placed child, and where it is."""

    spec: ChildSpec
    generation: int
    member: str | None = None
    """Its member once sent there; None while it waits for one."""
    kill_sent_at: float | None = None


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
        self._current: dict[str, _Generation] = {}
        self._next_heartbeat = now

    # ----- queries -----------------------------------------------------------------------------

    def placed(self, name: str) -> bool:
        return self.placement.placed(name)

    def where(self, name: str) -> str:
        """Where ``name`` runs, for people (see ``Placement.describe``)."""
        return self.placement.describe(name)

    def members(self) -> list[tuple[str, int | None, bool]]:
        """``(name, agent pid, attached)`` of every member system known."""
        return [(link.name, link.pid, link.attached) for link in self._links.values()]

    def next_due(self) -> float:
        """When ``tick`` has something to do next (a heartbeat, a grace ending)."""
        due = self._next_heartbeat
        for name, current in self._current.items():
            if current.member is None:
                ends = self.placement.waiting_until(name)
                if ends is not None:
                    due = min(due, ends)
        return due

    # ----- messages ----------------------------------------------------------------------------

    def handle(self, msg: Any, sender: Any, now: float) -> list[Event] | None:
        if isinstance(msg, ActorSystemConventionUpdate):
            return self._announced(msg, now)
        if not isinstance(msg, _MEMBER_MESSAGES):
            return None
        if getattr(msg, "incarnation", self.incarnation) != self.incarnation:
            return []  # for an earlier actor system of this servo
        link = self._links.get(msg.member)
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
            return self._lose(link, now, "it no longer serves this servo (it restarted, or lost us)")
        current = self._current.get(getattr(msg, "name", ""))
        if current is None or current.generation != getattr(msg, "generation", None):
            return []  # a generation replaced since (its own answers came first)
        if isinstance(msg, mm.HostSpawned):
            return [RemoteSpawned(msg.name, msg.generation, link.name, msg.address, msg.pid)]
        if isinstance(msg, mm.HostSpawnFailed):
            self._forget(msg.name, now)
            return [RemoteSpawnFailed(msg.name, msg.generation, msg.error)]
        if isinstance(msg, mm.HostGone):
            self._forget(msg.name, now)
            return [RemoteGone(msg.name, msg.generation, msg.exit_code, msg.killed)]
        return []

    def _announced(self, msg: ActorSystemConventionUpdate, now: float) -> list[Event]:
        capabilities = msg.remoteCapabilities or {}
        name = capabilities.get(mm.MEMBER_CAPABILITY)
        agent = capabilities.get(mm.AGENT_CAPABILITY)
        if not isinstance(name, str) or agent is None:
            _log.warning(
                "actor system %s joined the convention but is no servo-actors agent; ignored",
                msg.remoteAdminAddress,
            )
            return []
        if not msg.remoteAdded:
            # Thespian also says "removed, added" when a member registers afresh before it heard
            # our answer: a member is lost by its heartbeats (or its own word), never by this.
            return []
        events: list[Event] = []
        old = self._links.get(name)
        if old is not None and old.agent != agent:
            events += self._lose(old, now, "it joined again (its agent restarted)", deregister=False)
        elif old is not None:
            old.admin = msg.remoteAdminAddress
            if old.attached:
                return []  # the same agent registering again: nothing changed
        if name not in self._links:
            self._links[name] = _Link(name, msg.remoteAdminAddress, agent, now)
        s = self.settings
        self._send(agent, mm.Attach(s.leader, self.incarnation, s.interval, s.timeout))
        return events

    def _attached(self, link: _Link, msg: mm.Attached, now: float) -> list[Event]:
        if link.attached:
            return []
        link.attached, link.pid, link.refused = True, msg.pid, None
        self.placement.member_joined(link.name, msg.capabilities, now)
        offered = ", ".join(f"{k}={v}" if v else k for k, v in sorted(msg.capabilities.items())) or "none"
        _log.info("member %s joined (agent pid %d; capabilities: %s)", link.name, msg.pid, offered)
        # Waiting spawns go there at once; the rest may be placed again by the supervisor.
        for name, current in self._current.items():
            if current.member is None:
                self._place(name, current, now)
        placeable = tuple(
            name
            for name in self.placement.wants
            if name not in self._current and self.placement.candidates(name)
        )
        return [Placeable(placeable)] if placeable else []

    def _lose(self, link: _Link, now: float, why: str, *, deregister: bool = True) -> list[Event]:
        self._links.pop(link.name, None)
        if deregister:
            # So that its next registration is announced again (Thespian keeps members ~22 min).
            self._deregister(link.admin)
        if not link.attached:
            return []
        self.placement.member_lost(link.name, now)
        events: list[Event] = []
        lost = [name for name, current in self._current.items() if current.member == link.name]
        for name in lost:
            current = self._current.pop(name)
            message = f"connector {name!r} was on member {link.name}, which is lost: {why}"
            events.append(HostLost(name, current.generation, message))
        _log.warning(
            "member %s lost: %s%s",
            link.name,
            why,
            f"; its connectors {', '.join(lost)} are gone" if lost else "",
        )
        return events

    # ----- time --------------------------------------------------------------------------------

    def tick(self, now: float) -> list[Event]:
        """Heartbeats when due; members silent for ``timeout`` (or never attached) lost; spawns
        past the placement grace given up."""
        events: list[Event] = []
        timeout = self.settings.timeout
        for name in self.placement.lost_members(now):
            link = self._links.get(name)
            if link is not None:
                events += self._lose(
                    link, now, f"not heard from for {timeout:g}s (supervisor.convention.heartbeat)"
                )
        for link in list(self._links.values()):
            if not link.attached and now - link.asked_at >= timeout:
                self._lose(link, now, "it did not answer")
        for name, current in list(self._current.items()):
            if current.member is None and self.placement.unavailable(name, now):
                del self._current[name]
                events.append(Unplaced(name, current.generation, self._unavailable_message(name)))
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + self.settings.interval
            beat = mm.Heartbeat(self.incarnation)
            for link in self._links.values():
                if link.attached:
                    self._send(link.agent, beat)
        return events

    def _unavailable_message(self, name: str) -> str:
        want = self.placement.wants[name]
        return (
            f"connector {name!r} needs a member offering {want}, and none has joined "
            f"(servo-actors agent --capability {want.capability}{'=' + want.value if want.value else ''})"
        )

    # ----- connectors --------------------------------------------------------------------------

    def spawn(self, spec: ChildSpec, generation: int, now: float) -> list[Event]:
        """Start this generation of ``spec`` on a member (see module docstring); ``Unplaced`` at
        once when the connector has waited out its grace already."""
        name = spec.name
        self._forget(name, now)
        current = _Generation(spec, generation)
        self._current[name] = current
        if self._place(name, current, now):
            return []
        if self.placement.unavailable(name, now):
            del self._current[name]
            return [Unplaced(name, generation, self._unavailable_message(name))]
        return []

    def _place(self, name: str, current: _Generation, now: float) -> bool:
        member = self.placement.choose(name, now)
        link = self._links.get(member) if member is not None else None
        if link is None or not link.attached:
            if member is not None:  # cannot happen: placement knows attached members only
                self.placement.release(name, now)
            return False
        current.member = member
        self._send(link.agent, mm.SpawnHost(self.incarnation, current.spec, current.generation))
        return True

    def kill(self, name: str, generation: int, now: float) -> bool:
        """Kill this generation; True when it is gone already (see module docstring)."""
        current = self._current.get(name)
        if current is None or current.generation != generation:
            return True
        link = self._links.get(current.member) if current.member is not None else None
        if link is None or not link.attached:
            self._forget(name, now)
            return True
        if current.kill_sent_at is None or now - current.kill_sent_at >= KILL_RESEND:
            current.kill_sent_at = now
            self._send(link.agent, mm.KillHost(self.incarnation, name, generation))
        return False

    def _forget(self, name: str, now: float) -> None:
        """``name``'s current generation is over: its member hosts it no more."""
        if self._current.pop(name, None) is not None:
            self.placement.release(name, now)

    def reconfigure(self, settings: ConventionSettings) -> None:
        """New placements and heartbeat settings (a reconfigure); members stay attached. The leader's
        address cannot change here: a new one needs a new actor system."""
        self.settings = settings
        self.placement.wants = settings.wants()
        self.placement.timeout, self.placement.grace = settings.timeout, settings.grace

    def detach_all(self) -> None:
        """The supervisor stops: every member kills what it hosts for it (best effort)."""
        for link in self._links.values():
            if link.attached:
                self._send(link.agent, mm.Detach(self.incarnation))
