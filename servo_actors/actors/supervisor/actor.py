"""Supervisor: the Thespian actor that performs the supervision rules on real processes.

Every rule (start order, restarts, backoff, intensity, deadlines, cancel, stop) lives in the
pure ``supervision.Supervision``; this shell only translates. Messages from the runtime and the
hosts, ``ChildActorExited`` notices and wakeups become events (``supervision_events``); the
effects that come back are performed here: ``Spawn`` forks a ``ConnectorHost``, ``Kill`` is a
non-blocking SIGKILL of the host with everything it started, ``SendToChild``/``Reply`` are sends,
``ScheduleWakeup`` is a Thespian wakeup. It never blocks.

What the shell holds apart, because it is about processes rather than rules, is its
``SupervisedProcesses`` (``supervised_processes.py``): which process each generation is, when one
is gone (looked at on every tick, as Thespian misses notices), what the connectors leave behind
(swept after every exit and on every tick), and the children on member systems. Here, besides
the translation: the servo that owns the system. If it disappears, the supervisor SIGKILLs the
whole session, itself last; the lifeline does the same should the servo die without a word
(``lifeline``).

A child placed on another host (``supervisor.convention``, ``connectors[].placement``) is started
and killed there by that host's member agent, through ``RemoteHosts`` (``remote_hosts.py``): its
process is known by the member it runs on (``where``), never by a local PID; what the member
reports becomes the same events (started, exited), plus two that are not crashes: its host is
lost (``ChildHostLost``), or no host can take it (``ChildUnplaced``).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import signal
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from thespian.actors import Actor, ChildActorExited, PoisonMessage, ThespianWatch, WakeupMessage, WatchMessage

from servo_actors.actors.convention.remote_hosts import RemoteHosts
from servo_actors.actors.linux import descendants, lifeline, processes
from servo_actors.actors.rules import messages as m
from servo_actors.actors.rules.supervision import Supervision
from servo_actors.actors.rules.supervision_events import (
    CancelRequested,
    ChildProgressed,
    ChildReady,
    ChildReplied,
    ChildShutdownDone,
    ChildStartupFailed,
    Effect,
    Escalate,
    Event,
    FinalSweep,
    Kill,
    OperationRequested,
    Reply,
    ScheduleWakeup,
    SendToChild,
    Spawn,
    StartRequested,
    StopRequested,
    Tick,
)
from servo_actors.actors.supervisor.supervised_processes import SupervisedProcesses, now
from servo_actors.actors.transport import child_actors
from servo_actors.config import defaults

__all__ = [
    "POLL_AFTER_NOTICE",
    "SELF_DESTRUCT_TIMEOUT",
    "SPAWNS_PER_TURN",
    "Supervisor",
    "TICK_BUSY",
    "TICK_IDLE",
    "TICK_MIN",
]

TICK_BUSY = 0.25
TICK_IDLE = defaults.LIVENESS_IDLE_INTERVAL
"""Seconds between the supervisor's periodic checks (the owning servo process is alive, every child
process too, orphans swept): TICK_BUSY while an operation, start, cancel or stop is in flight or an
exited child's address waits to be forgotten, otherwise the settings' ``idle_interval``
(``supervisor.liveness.idle_interval``; TICK_IDLE until they come with Start): an idle servo should
not burn CPU. A death still wakes the supervisor at once (Thespian's ChildActorExited); the tick is
the fallback for what no message announces. One timer chain for all of them, rather
than a wakeup per spawn or operation, which Thespian cannot cancel and would pile up."""
TICK_MIN = 0.05
"""Shortest wait between two ticks, whatever a convention's heartbeat interval asks."""
SELF_DESTRUCT_TIMEOUT = 2.0
"""Seconds the supervisor spends killing its session once the owner is gone."""

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _TickDue:
    token: int


@dataclass(frozen=True)
class _RulesDue:
    """A wakeup the rules asked for (``ScheduleWakeup``)."""


@dataclass(frozen=True)
class _PollDue:
    """Look at every process once the exit notices that arrived together have been read."""


POLL_AFTER_NOTICE = 0.005
"""Seconds from an exit notice to the look at every process it asks for (``_PollDue``).

A cancel of N connectors brings N notices at once; looking at all N processes on each one cost
N * N reads of ``/proc`` in the supervisor, the process every respawn waits on (about 15% of its
CPU at 50 connectors). One look a few milliseconds after the first notice sees them all."""


SPAWNS_PER_TURN = 1
"""Hosts forked per turn of the supervisor's message loop (the rest wait in a queue).

Between two turns Thespian's transport reads and writes what is ready: the hosts forked so far
connect and get their ``HostInit`` while the next ones are forked, so a cancel of N connectors is a
pipeline. Forked all in one turn, every host waited for the last fork and then for the transport
to catch up (50 connectors: the first host got its HostInit 430 ms after it was forked). The turn
is a ``ThespianWatch`` on a pipe that is kept readable while spawns wait: Thespian delivers it
after one pass of its select loop. (A wakeup would not do: Thespian skips the select when the
next wakeup is already due, so queued spawns would run back to back with no I/O between them.)
Measured (2026-12-04): 2 per turn about 2 % faster at 50 connectors, 2 ms slower at 4."""


class Supervisor(Actor):
    """Supervises the connector hosts of one servo (see module docstring). Driven by the runtime."""

    def __init__(self) -> None:
        super().__init__()
        self._children = SupervisedProcesses(self)
        self._tick_idle: float = TICK_IDLE
        # Dies with the admin, its parent; its own children die with it the same way.
        processes.set_parent_death_signal()
        descendants.become_subreaper()  # orphans of the connectors' processes come to us (descendants.py)
        descendants.release_stale_sessions()
        lifeline.before_end(descendants.last_sweep)  # the servo gone: our orphans and cgroups too
        gc.freeze()  # as in ConnectorHost: inherited objects stay out of collections (shared pages)
        self._rules = Supervision(supervisor_pid=os.getpid(), session_id=os.getsid(0))
        self._owner: Any = None
        self._owner_pid: int | None = None
        self._owner_started: int | None = None
        self._owner_sid: int | None = None
        self._tick_token = 0
        self._tick_at = float("inf")
        self._poll_due = False

    # ----- messages in -------------------------------------------------------------------------

    def receiveMessage(self, msg: Any, sender: Any) -> ThespianWatch | None:
        # Never raise: Thespian would retry the message and then return it as poison.
        try:
            self._receive(msg, sender)
        except Exception:
            _log.exception("supervisor failed on %r", msg)
        if not self._children.spawns:
            return None
        self._children.keep_spawn_turn_due()
        return ThespianWatch([self._children.spawn_ready])

    def _receive(self, msg: Any, sender: Any) -> None:
        if isinstance(msg, WakeupMessage):
            if isinstance(msg.payload, _TickDue):
                if msg.payload.token == self._tick_token:
                    self._tick()
            elif isinstance(msg.payload, _RulesDue):
                self._feed(Tick())
            elif isinstance(msg.payload, _PollDue):
                self._poll_due = False
                self._feed(*self._children.poll())
        elif isinstance(msg, WatchMessage):
            self._spawn_turn()
        elif isinstance(msg, ChildActorExited):
            proc = self._children.by_address(msg.childAddress)
            # Thespian sends duplicates, and a stale address can compare equal to a fresh child's
            # not yet connected one: believe the notice only for a process known to be gone.
            if proc is not None and proc.pid is not None and not self._children.running(proc):
                self._feed(self._children.gone(proc))
            # Which process a notice is for is not always known (see above): look at them all,
            # once for the notices that come together.
            if not self._poll_due:
                self._poll_due = True
                self.wakeupAfter(timedelta(seconds=POLL_AFTER_NOTICE), _PollDue())
        elif isinstance(msg, m.Start):
            self._start(msg, sender)
        elif isinstance(msg, m.GetStatus):
            self.send(sender, self._status(msg.request_id))  # also the runtime's liveness ping
        elif isinstance(msg, PoisonMessage):
            _log.error("a message the supervisor sent could not be handled: %s", msg.details)
        else:
            members = self._children.remote
            remote = members.handle(msg, sender, now()) if members is not None else None
            if remote is not None:
                self._feed(*self._children.from_members(remote))
            else:
                event = self._event_for(msg, sender)
                if event is not None:
                    self._feed(event)
        if self._children.sweep_due:
            # Once for every host found gone while handling this message, not once each.
            self._children.sweep_due = False
            descendants.sweep(descendants.thespian_children(self))
        delay = self._tick_delay()
        if self._tick_at - now() > delay:
            self._schedule_tick(delay)

    def _event_for(self, msg: Any, sender: Any) -> Event | None:
        """The rules' event for a message from the runtime or a host; None for anything else."""
        if isinstance(msg, m.HostProgress):
            return ChildProgressed(msg.name, msg.generation, msg.request_id, msg.percent, msg.message)
        if isinstance(msg, m.HostReply):
            return ChildReplied(msg.name, msg.generation, msg.request_id, msg.outcome, msg.claimed)
        if isinstance(msg, m.HostReady):
            proc = self._children.get(msg.generation)
            if proc is not None and proc.where is not None:
                self._children.learn_address(proc, sender)  # its member's word may still be on the way
            elif proc is not None and proc.pid is None:  # only if Thespian did not tell at spawn
                proc.pid, proc.started = msg.pid, processes.start_ticks(msg.pid)
            return ChildReady(msg.name, msg.generation, msg.pid)
        if isinstance(msg, m.HostStartupFailed):
            return ChildStartupFailed(msg.name, msg.generation, msg.error)
        if isinstance(msg, m.HostShutdownDone):
            return ChildShutdownDone(msg.name, msg.generation)
        if isinstance(msg, m.Begin):
            return OperationRequested(msg, sender, dict(msg.declared))
        if isinstance(msg, m.Cancel):
            return CancelRequested(msg.request_id, msg.operation_id, sender)
        if isinstance(msg, m.Stop):
            return StopRequested(msg.request_id, sender)
        if isinstance(msg, m.Reconfigure):
            convention = getattr(msg.settings, "convention", None)
            if self._children.remote is not None and convention is not None:
                self._children.remote.reconfigure(convention)
            return StopRequested(msg.request_id, sender, msg)
        return None

    def _start(self, msg: m.Start, sender: Any) -> None:
        if self._owner is not None:
            return
        self._owner, self._owner_pid, self._owner_started = sender, msg.owner_pid, msg.owner_started
        owner = processes.proc_stat(msg.owner_pid)
        self._owner_sid = owner.sid if owner else None
        convention = getattr(msg.settings, "convention", None)
        if convention is not None:
            self._children.remote = RemoteHosts(
                convention, send=self.send, deregister=self.deRegisterRemoteSystem, now=now()
            )
            self.notifyOnSystemRegistrationChanges(True)  # members joining are announced to us
        self._tick_idle = getattr(msg.settings, "idle_interval", TICK_IDLE)
        self._schedule_tick(TICK_BUSY)
        # Tells the runtime our PID at once, so it can notice our death while children start.
        self.send(sender, self._status(f"{msg.request_id}:started"))
        self._feed(StartRequested(msg.request_id, msg.settings, msg.children, sender))

    def _status(self, request_id: str) -> m.Status:
        statuses = self._rules.statuses()
        remote = self._children.remote
        if remote is not None:
            statuses = tuple(
                dataclasses.replace(s, where=remote.where(s.name)) if remote.placed(s.name) else s
                for s in statuses
            )
        return m.Status(
            request_id,
            statuses,
            os.getpid(),
            os.getsid(0),
            child_actors.tracked_child_addresses(self),
        )

    # ----- effects out -------------------------------------------------------------------------

    def _feed(self, *events: Event) -> None:
        """Hand ``events`` to the rules and perform the effects, and the events those lead to."""
        pending = deque(events)
        while pending:
            for effect in self._rules.handle(pending.popleft(), now()):
                try:
                    pending.extend(self._perform(effect))
                except Exception:
                    # The rest still happen; the rules' deadlines recover from the one that did not
                    # (a spawn that failed is a startup that never answers).
                    _log.exception("supervisor could not perform %r", effect)

    def _perform(self, effect: Effect) -> list[Event]:
        if isinstance(effect, Spawn):
            if self._children.remote is not None and self._children.remote.placed(effect.name):
                return self._children.spawn_remote(effect)
            self._children.spawns.append(effect)  # forked in a later turn (receiveMessage)
            return []
        if isinstance(effect, Kill):
            return self._children.kill(effect)
        if isinstance(effect, SendToChild):
            proc = self._children.get(effect.generation)
            if proc is not None and proc.address is None and proc.outbox is not None:
                proc.outbox.append(effect.message)
            elif proc is not None:
                self.send(proc.address, effect.message)
        elif isinstance(effect, Reply):
            if isinstance(effect.message, m.Stopped) and self._children.remote is not None:
                self._children.remote.detach_all()  # members drop what they hosted for us at once
            self.send(effect.to, effect.message)
        elif isinstance(effect, ScheduleWakeup):
            self.wakeupAfter(timedelta(seconds=max(0.0, effect.at - now())), _RulesDue())
        elif isinstance(effect, Escalate):
            if self._owner is not None:
                self.send(self._owner, m.ConnectorFailed(effect.connector, effect.message))
        elif isinstance(effect, FinalSweep):
            descendants.sweep_until_clean(descendants.thespian_children(self))  # the servo may exit next
        return []

    def _spawn_turn(self) -> None:
        """Fork the next ``SPAWNS_PER_TURN`` queued hosts; the rest wait for the next turn."""
        started = []
        for _ in range(min(SPAWNS_PER_TURN, len(self._children.spawns))):
            spawn = self._children.spawns.popleft()
            try:
                started.append(self._children.spawn(spawn))
            except Exception:
                # The rules' startup deadline recovers: a spawn that failed never answers.
                _log.exception("supervisor could not start %s (generation %d)", spawn.name, spawn.generation)
        self._feed(*started)

    # ----- time --------------------------------------------------------------------------------

    def _schedule_tick(self, delay: float) -> None:
        # A new token retires the pending tick: one chain of ticks at a time.
        self._tick_token += 1
        self._tick_at = now() + delay
        self.wakeupAfter(timedelta(seconds=delay), _TickDue(self._tick_token))

    def _tick_delay(self) -> float:
        # Busy while addresses wait to be forgotten too: the forgetting happens on a tick.
        delay = TICK_BUSY if self._rules.busy or self._children.forgetting else self._tick_idle
        remote = self._children.remote
        if remote is not None:  # heartbeats and placement grace keep their own time
            delay = min(delay, max(TICK_MIN, remote.next_due() - now()))
        return delay

    def _tick(self) -> None:
        # Re-armed first: should anything below raise, the periodic checks must not stop.
        self._schedule_tick(self._tick_delay())
        if self._owner_pid is not None and not processes.is_running(self._owner_pid, self._owner_started):
            self._self_destruct()
        gone = self._children.poll()
        descendants.sweep(descendants.thespian_children(self))
        members = self._children.remote
        remote = self._children.from_members(members.tick(now())) if members is not None else []
        self._feed(*gone, *remote, Tick())
        # Addresses of children gone for a tick: Thespian has handled their exit by now.
        self._children.forget_gone(now(), TICK_BUSY)

    def _self_destruct(self) -> None:
        """The servo that owns this system is gone: kill every process of the session, then ourselves."""
        if self._children.remote is not None:
            self._children.remote.detach_all()  # best effort: members also notice our silence
        for pid in self._children.local_pids():
            descendants.kill_tree(pid)
        descendants.sweep_until_clean(set())  # hosts included: we are about to exit
        me, admin, sid = os.getpid(), os.getppid(), os.getsid(0)
        if sid > 1 and sid != self._owner_sid:
            # Before the session: killing Thespian's logger ends the admin, and so (parent death) us.
            descendants.release_session(sid, timeout=SELF_DESTRUCT_TIMEOUT, reap=True)
            processes.kill_session(sid, exclude=(me, admin), timeout=SELF_DESTRUCT_TIMEOUT, own=True)
            processes.kill_pids([admin])
        os.kill(me, signal.SIGKILL)
