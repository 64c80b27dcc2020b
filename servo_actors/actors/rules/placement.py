"""Placement: which member system hosts each placed connector, and when a member counts as lost.

Pure: no actors, no sockets, no clock. The leader's supervisor (through ``remote_hosts``) tells it
what happens (a member joined, was heard from, hosts or no longer hosts a connector) with the time
it happened, and asks what to do:

- ``choose(name, now)``: a member offering the connector's capability (the one hosting the fewest
  connectors, then the first to join), or None while there is none.
- ``lost_members(now)``: members not heard from for ``timeout`` seconds (a heartbeat goes both
  ways every ``interval``; a member system killed or cut off goes silent).
- ``member_lost(member, now)``: forget it; the connectors it hosted need a member again.
- ``unavailable(name, now)``: a connector has been without a member for ``grace`` seconds: its
  part of each operation fails at once (``host-unavailable``) instead of waiting. The grace lets
  members that are still joining (the servo just started, or a member is coming back) take their
  connectors before an operation fails for nothing.

>>> placement = Placement({"load": Requirement("loadgen-host")}, timeout=5.0, grace=3.0, now=0.0)
>>> placement.choose("load", 0.5) is None, placement.unavailable("load", 2.0), placement.unavailable("load", 3.0)
(True, False, True)
>>> placement.member_joined("10.0.0.7:1901", {"loadgen-host": ""}, 4.0)
[]
>>> placement.choose("load", 4.0), placement.unavailable("load", 4.0)
('10.0.0.7:1901', False)
>>> placement.lost_members(8.9), placement.lost_members(9.0)
([], ['10.0.0.7:1901'])
>>> placement.member_lost("10.0.0.7:1901", 9.0)
['load']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_GRACE",
    "Member",
    "Placement",
    "Requirement",
]

DEFAULT_GRACE = 3.0
"""Seconds a placed connector waits for a member before its parts fail ``host-unavailable``."""


@dataclass(frozen=True)
class Requirement:
    """What a member must offer to host a connector: a capability, with this value if one is given."""

    capability: str
    value: str | None = None

    def met_by(self, capabilities: Mapping[str, str]) -> bool:
        if self.capability not in capabilities:
            return False
        return self.value is None or capabilities[self.capability] == self.value

    def __str__(self) -> str:
        return self.capability if self.value is None else f"{self.capability}={self.value}"


@dataclass
class Member:
    """A member system as the leader knows it."""

    name: str
    """Its identity: the address its system listens on (``HOST:PORT``)."""
    capabilities: dict[str, str]
    joined_at: float
    heard_at: float
    hosting: set[str] = field(default_factory=set)


class Placement:
    """Members, their capabilities and liveness, and where each placed connector runs (see module)."""

    def __init__(
        self, wants: Mapping[str, Requirement], *, timeout: float, grace: float = DEFAULT_GRACE, now: float
    ) -> None:
        self.wants = dict(wants)
        self.timeout = timeout
        self.grace = grace
        self._members: dict[str, Member] = {}
        self._where: dict[str, str] = {}
        # Since when each placed connector has had no member (all of them, at first).
        self._homeless_since: dict[str, float] = dict.fromkeys(self.wants, now)

    # ----- members -----------------------------------------------------------------------------

    @property
    def members(self) -> tuple[Member, ...]:
        return tuple(self._members.values())

    def member(self, name: str) -> Member | None:
        return self._members.get(name)

    def member_joined(self, name: str, capabilities: Mapping[str, str], now: float) -> list[str]:
        """``name`` joined (again): the connectors it hosted before, if it had not been lost, are
        returned (their processes went with its previous incarnation)."""
        gone = self.member_lost(name, now) if name in self._members else []
        self._members[name] = Member(name, dict(capabilities), now, now)
        return gone

    def heard(self, name: str, now: float) -> None:
        """A message from ``name`` arrived at ``now``."""
        member = self._members.get(name)
        if member is not None and now > member.heard_at:
            member.heard_at = now

    def lost_members(self, now: float) -> list[str]:
        """Members silent for ``timeout`` seconds or more (still known until ``member_lost``)."""
        return [m.name for m in self._members.values() if now - m.heard_at >= self.timeout]

    def member_lost(self, name: str, now: float) -> list[str]:
        """Forget member ``name``; the connectors it hosted (returned, sorted) need a member again."""
        member = self._members.pop(name, None)
        if member is None:
            return []
        hosted = sorted(member.hosting)
        for connector in hosted:
            self._where.pop(connector, None)
            self._homeless_since[connector] = now
        return hosted

    # ----- connectors --------------------------------------------------------------------------

    def placed(self, name: str) -> bool:
        """Whether connector ``name`` runs on a member (has a placement requirement)."""
        return name in self.wants

    def where(self, name: str) -> str | None:
        """The member hosting ``name`` now, or None."""
        return self._where.get(name)

    def candidates(self, name: str) -> list[str]:
        """Members that could host ``name``: fewest connectors first, then the earliest joined."""
        want = self.wants.get(name)
        if want is None:
            return []
        fitting = [m for m in self._members.values() if want.met_by(m.capabilities)]
        fitting.sort(key=lambda m: (len(m.hosting), m.joined_at, m.name))
        return [m.name for m in fitting]

    def choose(self, name: str, now: float) -> str | None:
        """The member that is to host ``name`` (recorded as hosting it), or None while none fits."""
        current = self._where.get(name)
        if current is not None:
            return current
        found = self.candidates(name)
        if not found:
            self._homeless_since.setdefault(name, now)
            return None
        member = found[0]
        self._members[member].hosting.add(name)
        self._where[name] = member
        self._homeless_since.pop(name, None)
        return member

    def release(self, name: str, now: float) -> str | None:
        """``name`` no longer runs where it did (stopped, or killed to be placed again); its
        member (returned) hosts it no more. The grace starts again only if no member fits."""
        member = self._where.pop(name, None)
        if member is not None and member in self._members:
            self._members[member].hosting.discard(name)
        if name in self.wants:
            self._homeless_since.setdefault(name, now)
        return member

    def unavailable(self, name: str, now: float) -> bool:
        """Whether ``name`` has had no member for ``grace`` seconds and none fits now."""
        if name not in self.wants or name in self._where or self.candidates(name):
            return False
        since = self._homeless_since.get(name)
        return since is not None and now - since >= self.grace

    def waiting_until(self, name: str) -> float | None:
        """When ``name``'s grace ends, while it waits for a member; else None."""
        since = self._homeless_since.get(name)
        if since is None or name not in self.wants or name in self._where:
            return None
        return since + self.grace

    def describe(self, name: str) -> str:
        """Where ``name`` runs, for people: ``local``, ``10.0.0.7:1901``, or ``waiting for a member
        offering loadgen-host``."""
        if name not in self.wants:
            return "local"
        member = self._where.get(name)
        if member is not None:
            return member
        return f"waiting for a member offering {self.wants[name]}"
