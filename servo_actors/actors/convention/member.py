"""MemberAgent: on a member system (``servo-actors agent``), hosts the connectors its leader places.

One per member system, created by the agent process and configured with ``Configure``. It:

- makes its system join the leader's convention: it puts its own address, the member's name and
  the capabilities it offers into the system's Thespian capabilities, then sets the convention
  address, so its admin registers with the leader's admin; the leader's supervisor is told and
  sends ``Attach``. Until attached it makes its admin register again and again (a changed
  capability does that), with bounded exponential backoff (``rejoin_min``..``rejoin_max``);
- serves one leader at a time, heartbeats with it both ways and counts it lost after its
  ``timeout`` of silence: then, as on ``Detach``, it kills everything it hosts and joins again;
- starts each connector host as its own child on ``SpawnHost`` (the host answers the leader's
  supervisor directly, see ``HostInit.reply_to``) and kills it on ``KillHost``: the process
  group, its descendants and its cgroup, exactly as the supervisor does locally; ``HostGone``
  tells the leader once the process is gone, whoever ended it.

Nothing it starts outlives the agent process: every process of the member system holds the
agent's lifeline (``lifeline.py``), and this actor's watcher kills its hosts, their orphans and
cgroups first (``descendants.last_sweep``).

``LeaderWatch`` is the timing (pure, fake-clock tested); the actor does what it says.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from thespian.actors import Actor, ChildActorExited, PoisonMessage, WakeupMessage

from servo_actors.actors.host.actor import ConnectorHost
from servo_actors.actors.linux import descendants, lifeline, processes
from servo_actors.actors.rules import member_messages as mm
from servo_actors.actors.rules import messages as m
from servo_actors.actors.transport import child_actors
from servo_actors.protocol.backoff import BackoffPolicy, retry_delay

__all__ = [
    "CONVENTION_ADDRESS_CAPABILITY",
    "IDLE_TICK",
    "KILL_CHECK_FIRST",
    "KILL_CHECK_MAX",
    "LeaderWatch",
    "MIN_TICK",
    "MemberAgent",
]

CONVENTION_ADDRESS_CAPABILITY = "Convention Address.IPv4"
"""Thespian's capability naming the leader admin a system registers with."""
KILL_CHECK_FIRST = 0.002
KILL_CHECK_MAX = 0.1
"""After a SIGKILL the PID is checked at KILL_CHECK_FIRST seconds, doubling up to KILL_CHECK_MAX."""
IDLE_TICK = 1.0
"""Longest sleep of the agent between two looks at its hosts (an exit notice may be missed)."""
MIN_TICK = 0.01
"""Shortest sleep: no wakeup storm whatever the settings."""

_log = logging.getLogger(__name__)


@dataclass
class LeaderWatch:
    """The member's view of its leader: whom it serves, whether it is still there, when to try
    joining again. Pure: every method takes ``now``.

    >>> watch = LeaderWatch(BackoffPolicy(min=0.5, max=4.0, max_time=float("inf"), jitter=0.0))
    >>> watch.join_due(0.0), watch.join_attempted(0.0, random.Random(0)), watch.join_due(0.4)
    (True, 0.5, False)
    >>> watch.attach("run-1", "10.0.0.5:1900", interval=1.0, timeout=5.0, now=1.0)
    >>> watch.heartbeat_due(1.0), watch.leader_lost(5.9), watch.leader_lost(6.0)
    (True, False, True)
    """

    rejoin: BackoffPolicy
    incarnation: str | None = None
    leader: str | None = None
    interval: float = 1.0
    timeout: float = 5.0
    heard_at: float = 0.0
    next_heartbeat: float = 0.0
    join_attempts: int = 0
    next_join: float = 0.0

    @property
    def attached(self) -> bool:
        return self.incarnation is not None

    def attach(self, incarnation: str, leader: str, *, interval: float, timeout: float, now: float) -> None:
        self.incarnation, self.leader = incarnation, leader
        self.interval, self.timeout = interval, timeout
        self.heard_at, self.next_heartbeat = now, now
        self.join_attempts = 0

    def detach(self, now: float) -> None:
        """Serve nobody; try joining at once (the leader may be back already)."""
        self.incarnation = self.leader = None
        self.join_attempts, self.next_join = 0, now

    def heard(self, incarnation: str, now: float) -> bool:
        """A message of leader ``incarnation`` arrived; False when it is not the one served."""
        if incarnation != self.incarnation:
            return False
        self.heard_at = max(self.heard_at, now)
        return True

    def leader_lost(self, now: float) -> bool:
        return self.attached and now - self.heard_at >= self.timeout

    def heartbeat_due(self, now: float) -> bool:
        return self.attached and now >= self.next_heartbeat

    def heartbeat_sent(self, now: float) -> None:
        self.next_heartbeat = now + self.interval

    def join_due(self, now: float) -> bool:
        return not self.attached and now >= self.next_join

    def join_attempted(self, now: float, rng: random.Random) -> float:
        """Count a registration sent at ``now``; the wait before the next one is returned."""
        delay = retry_delay(self.rejoin, self.join_attempts, rng)
        self.join_attempts += 1
        self.next_join = now + delay
        return delay

    def next_due(self, now: float) -> float:
        """When something is next to do (a heartbeat, the leader's deadline, a join attempt)."""
        if self.attached:
            return min(self.next_heartbeat, self.heard_at + self.timeout)
        return self.next_join


@dataclass
class _Hosted:
    name: str
    generation: int
    address: Any
    pid: int | None
    started: int | None = None
    """Start time of the process (with the PID, it names this process for good)."""
    killing: bool = False


def _now() -> float:
    return time.monotonic()


class MemberAgent(Actor):
    """The member side of a convention (see module docstring). Driven by ``agent.py``."""

    def __init__(self) -> None:
        super().__init__()
        processes.set_parent_death_signal()  # dies with its admin, its hosts with it
        descendants.become_subreaper()  # orphans of the connectors' processes come to us
        descendants.release_stale_sessions()
        lifeline.before_end(self._last_words)
        self._settings: mm.MemberSettings | None = None
        self._watch = LeaderWatch(BackoffPolicy(min=0.5, max=30.0, max_time=float("inf")))
        self._leader_address: Any = None
        self._hosts: dict[str, _Hosted] = {}
        self._rng = random.Random()
        self._tick_token = 0
        self._tick_at = float("inf")
        self._dying = False

    def _last_words(self) -> None:
        # The agent process is gone (its lifeline): its hosts die now, and must not be reported
        # as crashes to a leader that will find the member lost anyway.
        self._dying = True
        descendants.last_sweep()

    # ----- dispatch ----------------------------------------------------------------------------

    def receiveMessage(self, msg: Any, sender: Any) -> None:
        # Never raise: Thespian would retry the message and then return it as poison.
        try:
            self._receive(msg, sender)
        except Exception:
            _log.exception("member agent failed on %s", type(msg).__name__)
        self._schedule()

    def _receive(self, msg: Any, sender: Any) -> None:
        now = _now()
        if isinstance(msg, mm.Heartbeat):
            if not self._watch.heard(msg.incarnation, now):
                self.send(sender, mm.NotAttached(msg.incarnation, self._name))
        elif isinstance(msg, WakeupMessage):
            if msg.payload == ("tick", self._tick_token):
                self._tick_at = float("inf")
                self._tick(now)
            elif isinstance(msg.payload, tuple) and msg.payload[:1] == ("reap",):
                self._reap_check(*msg.payload[1:])
        elif isinstance(msg, ChildActorExited):
            self._poll_hosts()
        elif isinstance(msg, mm.SpawnHost):
            if self._from_leader(msg.incarnation, sender, now):
                self._spawn(msg)
        elif isinstance(msg, mm.KillHost):
            if self._from_leader(msg.incarnation, sender, now):
                self._kill(msg.name, msg.generation)
        elif isinstance(msg, mm.Attach):
            self._attach(msg, sender, now)
        elif isinstance(msg, mm.Detach):
            if self._from_leader(msg.incarnation, sender, now):
                _log.info("leader %s detached; hosting nothing until a leader attaches", self._watch.leader)
                self._drop_leader(now)
        elif isinstance(msg, mm.Configure):
            self._configure(msg, sender, now)
        elif isinstance(msg, mm.GetMemberStatus):
            self.send(sender, self._status(msg.request_id))
        elif isinstance(msg, PoisonMessage):
            _log.warning(
                "a message of the member agent could not be delivered: %s", type(msg.poisonMessage).__name__
            )

    @property
    def _name(self) -> str:
        return self._settings.member if self._settings else "?"

    def _status(self, request_id: str) -> mm.MemberStatus:
        hosting = tuple(
            sorted((h.name, h.generation, h.pid or 0) for h in self._hosts.values() if not h.killing)
        )
        return mm.MemberStatus(
            request_id, os.getpid(), self._watch.leader, hosting, self._watch.join_attempts
        )

    def _from_leader(self, incarnation: str, sender: Any, now: float) -> bool:
        if self._watch.heard(incarnation, now):
            return True
        self.send(sender, mm.NotAttached(incarnation, self._name))
        return False

    # ----- joining -----------------------------------------------------------------------------

    def _configure(self, msg: mm.Configure, sender: Any, now: float) -> None:
        if self._settings is None:
            settings = msg.settings
            self._settings = settings
            self._watch.rejoin = BackoffPolicy(
                min=settings.rejoin_min, max=settings.rejoin_max, max_time=float("inf")
            )
            self.updateCapability(mm.AGENT_CAPABILITY, self.myAddress)
            self.updateCapability(mm.MEMBER_CAPABILITY, settings.member)
            self.updateCapability(mm.OFFERS_CAPABILITY, dict(settings.capabilities))
            # Last: this one makes the admin register with the leader, carrying the ones above.
            self.updateCapability(CONVENTION_ADDRESS_CAPABILITY, settings.join)
            self._watch.join_attempted(now, self._rng)
        self.send(sender, self._status(msg.request_id))

    def _join(self, now: float) -> None:
        # A changed capability makes Thespian's admin register with the convention leader again.
        assert self._settings is not None
        self.updateCapability(mm.JOIN_CAPABILITY, self._watch.join_attempts + 1)
        delay = self._watch.join_attempted(now, self._rng)
        _log.debug("registering with leader %s again; next attempt in %.1fs", self._settings.join, delay)

    def _attach(self, msg: mm.Attach, sender: Any, now: float) -> None:
        watch = self._watch
        if watch.attached and watch.incarnation != msg.incarnation and not watch.leader_lost(now):
            why = f"member {self._name} already serves the servo at {watch.leader}"
            self.send(sender, mm.AttachRefused(msg.incarnation, self._name, why))
            return
        if watch.attached and watch.incarnation != msg.incarnation:
            self._drop_leader(now)
        if watch.incarnation != msg.incarnation:
            _log.info("serving the servo at %s", msg.leader)
        watch.attach(msg.incarnation, msg.leader, interval=msg.interval, timeout=msg.timeout, now=now)
        self._leader_address = sender
        capabilities = dict(self._settings.capabilities) if self._settings else {}
        self.send(sender, mm.Attached(msg.incarnation, self._name, os.getpid(), capabilities))

    def _drop_leader(self, now: float) -> None:
        """Serve nobody: kill every host (no answer is owed to a leader that is gone) and join again."""
        for hosted in list(self._hosts.values()):
            if hosted.pid is not None:
                descendants.kill_tree(hosted.pid)
        self._watch.detach(now)
        self._leader_address = None
        for hosted in list(self._hosts.values()):
            hosted.killing = True
            self._schedule_reap(hosted, 0)

    # ----- hosts -------------------------------------------------------------------------------

    def _spawn(self, msg: mm.SpawnHost) -> None:
        name, generation = msg.spec.name, msg.generation
        old = self._hosts.get(name)
        if old is not None and old.pid is not None:
            descendants.kill_tree(old.pid)  # the leader replaced it: never two of one connector
        try:
            address = self.createActor(ConnectorHost)
            pid = child_actors.child_pid(self, address)
            self.send(address, m.HostInit(msg.spec, generation, os.getpid(), self._leader_address))
        except Exception as exc:  # Thespian raises several unrelated types when a fork fails
            self._to_leader(mm.HostSpawnFailed(self._name, name, generation, f"{type(exc).__name__}: {exc}"))
            return
        started = processes.start_ticks(pid) if pid is not None else None
        self._hosts[name] = _Hosted(name, generation, address, pid, started)
        self._to_leader(mm.HostSpawned(self._name, name, generation, pid or 0, address))

    def _kill(self, name: str, generation: int) -> None:
        hosted = self._hosts.get(name)
        if hosted is None or hosted.generation != generation:
            self._to_leader(mm.HostGone(self._name, name, generation, None, True))  # gone already
            return
        hosted.killing = True
        if hosted.pid is not None:
            descendants.kill_tree(hosted.pid)
        self._schedule_reap(hosted, 0)

    def _schedule_reap(self, hosted: _Hosted, attempt: int) -> None:
        delay = min(KILL_CHECK_MAX, KILL_CHECK_FIRST * 2**attempt)
        self.wakeupAfter(timedelta(seconds=delay), ("reap", hosted.name, hosted.generation, attempt))

    def _reap_check(self, name: str, generation: int, attempt: int) -> None:
        hosted = self._hosts.get(name)
        if hosted is None or hosted.generation != generation:
            return
        if hosted.pid is not None and processes.is_running(hosted.pid, hosted.started):
            descendants.kill_tree(hosted.pid)
            self._schedule_reap(hosted, attempt + 1)
            return
        self._gone(hosted)

    def _poll_hosts(self) -> None:
        for hosted in list(self._hosts.values()):
            if hosted.pid is None or not processes.is_running(hosted.pid, hosted.started):
                self._gone(hosted)
        descendants.sweep(descendants.thespian_children(self))

    def _gone(self, hosted: _Hosted) -> None:
        if self._hosts.get(hosted.name) is not hosted:
            return
        del self._hosts[hosted.name]
        code = child_actors.pop_exit_code(hosted.pid, hosted.started)
        if code is None and hosted.pid is not None:
            code = processes.exit_status_nowait(hosted.pid)
        if code is None:  # reaped by multiprocessing when another host was forked
            code = child_actors.reaped_exit_code(self, hosted.pid)
        descendants.sweep(descendants.thespian_children(self))
        with contextlib.suppress(Exception):
            child_actors.forget_child(self, hosted.address)
        self._to_leader(mm.HostGone(self._name, hosted.name, hosted.generation, code, hosted.killing))

    def _to_leader(self, message: Any) -> None:
        # With the agent process gone, its hosts die of its lifeline at once: reported, they would
        # look like crashes to a leader that finds the member lost anyway.
        if self._leader_address is not None and not self._dying and not lifeline.owner_gone():
            self.send(self._leader_address, message)

    # ----- time --------------------------------------------------------------------------------

    def _tick(self, now: float) -> None:
        watch = self._watch
        if watch.leader_lost(now):
            _log.warning(
                "the servo at %s has not been heard from for %.1fs: killing its connectors, joining again",
                watch.leader,
                now - watch.heard_at,
            )
            self._drop_leader(now)
        if watch.heartbeat_due(now):
            hosting = tuple((h.name, h.generation) for h in self._hosts.values() if not h.killing)
            self._to_leader(mm.Heartbeat(watch.incarnation or "", self._name, hosting))
            watch.heartbeat_sent(now)
        if self._settings is not None and watch.join_due(now):
            self._join(now)
        self._poll_hosts()

    def _schedule(self) -> None:
        """One chain of wakeups: at the next thing due, at most ``IDLE_TICK`` away."""
        if self._settings is None:
            return
        now = _now()
        due = min(self._watch.next_due(now), now + IDLE_TICK)
        if due >= self._tick_at - MIN_TICK:
            return
        self._tick_token += 1
        self._tick_at = due
        self.wakeupAfter(timedelta(seconds=max(MIN_TICK, due - now)), ("tick", self._tick_token))
