"""Supervisor: the Thespian actor that performs the supervision rules on real processes.

Every rule (start order, restarts, backoff, intensity, deadlines, cancel, stop) lives in the
pure ``supervision.Supervision``; this shell only translates. Messages from the runtime and the
hosts, ``ChildActorExited`` notices and wakeups become events (``supervision_events``); the
effects that come back are performed here: ``Spawn`` forks a ``ConnectorHost``, ``Kill`` is a
non-blocking SIGKILL of the host with everything it started, ``SendToChild``/``Reply`` are sends,
``ScheduleWakeup`` is a Thespian wakeup. It never blocks.

What the shell owns itself, because it is about processes rather than rules:

- which process each generation is (``ChildProcess``: address, PID and start time), and when one
  is gone: a ``ChildActorExited`` is believed only for a process that no longer runs, and every
  process is looked at on each tick, as Thespian misses notices when several children die at
  once. A kill is confirmed the same way (the rules repeat ``Kill`` until ``ChildExited``).
- what the connectors leave behind: the supervisor is a child subreaper, sweeps orphans after
  every exit and on every tick, and sweeps until clean before it answers a stop
  (``descendants``).
- the servo that owns the system: if it disappears, the supervisor SIGKILLs the whole session,
  itself last; the lifeline does the same should the servo die without a word (``lifeline``).

``_spawn_process`` and ``_kill_process`` are the seams where a child placed on another host would
be started and killed differently.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from thespian.actors import Actor, ChildActorExited, PoisonMessage, WakeupMessage

from servo_actors.actors import descendants, lifeline, processes, system
from servo_actors.actors import messages as m
from servo_actors.actors.host import ConnectorHost
from servo_actors.actors.supervision import Supervision
from servo_actors.actors.supervision_events import (
    CancelRequested,
    ChildExited,
    ChildProgressed,
    ChildReady,
    ChildReplied,
    ChildShutdownDone,
    ChildStarted,
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

TICK_BUSY = 0.25
TICK_IDLE = 1.0
"""Seconds between the supervisor's periodic checks (the owning servo process is alive, every child
process too, orphans swept): TICK_BUSY while an operation, start, cancel or stop is in flight,
TICK_IDLE otherwise (an idle servo should not burn CPU). One timer chain for all of them, rather
than a wakeup per spawn or operation, which Thespian cannot cancel and would pile up."""
SELF_DESTRUCT_TIMEOUT = 2.0
"""Seconds the supervisor spends killing its session once the owner is gone."""

_log = logging.getLogger(__name__)


@dataclass
class ChildProcess:
    """The process of one generation of a child, as the shell knows it (until it is gone)."""

    name: str
    generation: int
    address: Any
    pid: int | None
    started: int | None
    """Start time (clock ticks since boot): with the PID it names this process and no later one."""
    where: str | None = None


@dataclass(frozen=True)
class _TickDue:
    token: int


@dataclass(frozen=True)
class _RulesDue:
    """A wakeup the rules asked for (``ScheduleWakeup``)."""


def unclaimed_children(
    children: Iterable[processes.ProcStat], claimed: set[int], hosts: set[int] | None
) -> list[int]:
    """Live children of the supervisor that are no generation's known process and no host at all.

    The fallback when a generation's PID was never learnt: such a process is killed, but never a
    host Thespian started (``hosts``: a sibling's fresh process, PID known or not); with ``hosts``
    unknown, nothing is.
    """
    if hosts is None:
        return []
    return [c.pid for c in children if c.alive and c.pid not in claimed and c.pid not in hosts]


def _now() -> float:
    return time.monotonic()


class Supervisor(Actor):
    """Supervises the connector hosts of one servo (see module docstring). Driven by the runtime."""

    def __init__(self) -> None:
        super().__init__()
        # Dies with the admin, its parent; its own children die with it the same way.
        processes.set_parent_death_signal()
        descendants.become_subreaper()  # orphans of the connectors' processes come to us (descendants.py)
        descendants.release_stale_sessions()
        lifeline.before_end(descendants.last_sweep)  # the servo gone: our orphans and cgroups too
        gc.freeze()  # as in ConnectorHost: inherited objects stay out of collections (shared pages)
        self._rules = Supervision(supervisor_pid=os.getpid(), session_id=os.getsid(0))
        self._processes: dict[int, ChildProcess] = {}
        self._owner: Any = None
        self._owner_pid: int | None = None
        self._owner_started: int | None = None
        self._owner_sid: int | None = None
        self._forget: list[tuple[float, Any]] = []
        self._tick_token = 0
        self._tick_at = float("inf")

    # ----- messages in -------------------------------------------------------------------------

    def receiveMessage(self, msg: Any, sender: Any) -> None:
        # Never raise: Thespian would retry the message and then return it as poison.
        try:
            self._receive(msg, sender)
        except Exception:
            _log.exception("supervisor failed on %r", msg)

    def _receive(self, msg: Any, sender: Any) -> None:
        if isinstance(msg, WakeupMessage):
            if isinstance(msg.payload, _TickDue):
                if msg.payload.token == self._tick_token:
                    self._tick()
            elif isinstance(msg.payload, _RulesDue):
                self._feed(Tick())
        elif isinstance(msg, ChildActorExited):
            proc = self._by_address(msg.childAddress)
            # Thespian sends duplicates, and a stale address can compare equal to a fresh child's
            # not yet connected one: believe the notice only for a process known to be gone.
            gone = []
            if proc is not None and proc.pid is not None and not self._running(proc):
                gone.append(self._gone(proc))
            self._feed(*gone, *self._poll_processes())
        elif isinstance(msg, m.Start):
            self._start(msg, sender)
        elif isinstance(msg, m.GetStatus):
            self.send(sender, self._status(msg.request_id))  # also the runtime's liveness ping
        elif isinstance(msg, PoisonMessage):
            _log.error("a message the supervisor sent could not be handled: %s", msg.details)
        else:
            event = self._event_for(msg, sender)
            if event is not None:
                self._feed(event)
        if self._rules.busy and self._tick_at - _now() > TICK_BUSY:
            self._schedule_tick(TICK_BUSY)

    def _event_for(self, msg: Any, sender: Any) -> Event | None:
        """The rules' event for a message from the runtime or a host; None for anything else."""
        if isinstance(msg, m.HostProgress):
            return ChildProgressed(msg.name, msg.generation, msg.request_id, msg.percent, msg.message)
        if isinstance(msg, m.HostReply):
            return ChildReplied(msg.name, msg.generation, msg.request_id, msg.outcome, msg.claimed)
        if isinstance(msg, m.HostReady):
            proc = self._processes.get(msg.generation)
            if proc is not None and proc.pid is None:  # only if Thespian did not tell at spawn
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
            return StopRequested(msg.request_id, sender, msg)
        return None

    def _start(self, msg: m.Start, sender: Any) -> None:
        if self._owner is not None:
            return
        self._owner, self._owner_pid, self._owner_started = sender, msg.owner_pid, msg.owner_started
        owner = processes.proc_stat(msg.owner_pid)
        self._owner_sid = owner.sid if owner else None
        self._schedule_tick(TICK_BUSY)
        # Tells the runtime our PID at once, so it can notice our death while children start.
        self.send(sender, self._status(f"{msg.request_id}:started"))
        self._feed(StartRequested(msg.request_id, msg.settings, msg.children, sender))

    def _status(self, request_id: str) -> m.Status:
        return m.Status(
            request_id,
            self._rules.statuses(),
            os.getpid(),
            os.getsid(0),
            self._rules.failure,
            system.tracked_child_addresses(self),
        )

    # ----- effects out -------------------------------------------------------------------------

    def _feed(self, *events: Event) -> None:
        """Hand ``events`` to the rules and perform the effects, and the events those lead to."""
        pending = deque(events)
        while pending:
            for effect in self._rules.handle(pending.popleft(), _now()):
                try:
                    pending.extend(self._perform(effect))
                except Exception:
                    # The rest still happen; the rules' deadlines recover from the one that did not
                    # (a spawn that failed is a startup that never answers).
                    _log.exception("supervisor could not perform %r", effect)

    def _perform(self, effect: Effect) -> list[Event]:
        if isinstance(effect, Spawn):
            return [self._spawn_process(effect)]
        if isinstance(effect, Kill):
            return self._kill(effect)
        if isinstance(effect, SendToChild):
            proc = self._processes.get(effect.generation)
            if proc is not None:
                self.send(proc.address, effect.message)
        elif isinstance(effect, Reply):
            self.send(effect.to, effect.message)
        elif isinstance(effect, ScheduleWakeup):
            self.wakeupAfter(timedelta(seconds=max(0.0, effect.at - _now())), _RulesDue())
        elif isinstance(effect, Escalate):
            if self._owner is not None:
                self.send(self._owner, m.SupervisorFailed(effect.connector, effect.message))
        elif isinstance(effect, FinalSweep):
            descendants.sweep_until_clean(descendants.thespian_children(self))  # the servo may exit next
        return []

    def _spawn_process(self, spawn: Spawn) -> ChildStarted:
        """Fork a ConnectorHost for this generation and hand it its spec."""
        address = self.createActor(ConnectorHost)
        pid = system.child_pid(self, address)
        started = processes.start_ticks(pid) if pid is not None else None
        self._processes[spawn.generation] = ChildProcess(spawn.name, spawn.generation, address, pid, started)
        self.send(address, m.HostInit(spawn.spec, spawn.generation, os.getpid()))
        return ChildStarted(spawn.name, spawn.generation, pid)

    def _kill(self, kill: Kill) -> list[Event]:
        proc = self._processes.get(kill.generation)
        if proc is None:  # already reported gone (or never started): the rules ignore a repeat
            return [ChildExited(kill.name, kill.generation, None)]
        if self._kill_process(proc):
            return [self._gone(proc)]
        return []

    def _kill_process(self, proc: ChildProcess) -> bool:
        """SIGKILL ``proc`` with its group, descendants and cgroup if it still runs; True once gone."""
        if proc.pid is None:
            proc.pid = system.child_pid(self, proc.address)  # PID never learnt: ask Thespian again
            proc.started = processes.start_ticks(proc.pid) if proc.pid is not None else None
        if proc.pid is not None:
            if not self._running(proc):
                return True
            descendants.kill_tree(proc.pid)
            return False
        claimed = {p.pid for p in self._processes.values() if p.pid is not None}
        hosts = descendants.thespian_children(self)
        strays = unclaimed_children(processes.children_of(os.getpid()), claimed, hosts)
        for pid in strays:
            descendants.kill_tree(pid)
        return not strays

    # ----- processes ---------------------------------------------------------------------------

    @staticmethod
    def _running(proc: ChildProcess) -> bool:
        return proc.pid is not None and processes.is_running(proc.pid, proc.started)

    def _by_address(self, address: Any) -> ChildProcess | None:
        for proc in self._processes.values():
            if proc.address is not None and proc.address == address:
                return proc
        return None

    def _gone(self, proc: ChildProcess) -> ChildExited:
        """``proc`` no longer runs: forget it, sweep what it left, and say how it ended."""
        self._processes.pop(proc.generation, None)
        self._forget.append((_now(), proc.address))
        code = system.pop_exit_code(proc.pid, proc.started)
        if code is None and proc.pid is not None:
            code = processes.exit_status_nowait(proc.pid)
        descendants.sweep(descendants.thespian_children(self))
        return ChildExited(proc.name, proc.generation, code)

    def _poll_processes(self) -> list[Event]:
        """Exits nobody told us about (see the module docstring)."""
        return [
            self._gone(proc)
            for proc in list(self._processes.values())
            if proc.pid is not None and not self._running(proc)
        ]

    # ----- time --------------------------------------------------------------------------------

    def _schedule_tick(self, delay: float) -> None:
        # A new token retires the pending tick: one chain of ticks at a time.
        self._tick_token += 1
        self._tick_at = _now() + delay
        self.wakeupAfter(timedelta(seconds=delay), _TickDue(self._tick_token))

    def _tick(self) -> None:
        # Re-armed first: should anything below raise, the periodic checks must not stop.
        self._schedule_tick(TICK_BUSY if self._rules.busy else TICK_IDLE)
        if self._owner_pid is not None and not processes.is_running(self._owner_pid, self._owner_started):
            self._self_destruct()
        gone = self._poll_processes()
        descendants.sweep(descendants.thespian_children(self))
        self._feed(*gone, Tick())
        # Addresses of children gone for a tick: Thespian has handled their exit by now.
        now = _now()
        while self._forget and now - self._forget[0][0] >= TICK_BUSY:
            system.forget_child(self, self._forget.pop(0)[1])

    def _self_destruct(self) -> None:
        """The servo that owns this system is gone: kill every process of the session, then ourselves."""
        for proc in self._processes.values():
            if proc.pid is not None:
                descendants.kill_tree(proc.pid)
        descendants.sweep_until_clean(set())  # hosts included: we are about to exit
        me, admin, sid = os.getpid(), os.getppid(), os.getsid(0)
        if sid > 1 and sid != self._owner_sid:
            # Before the session: killing Thespian's logger ends the admin, and so (parent death) us.
            descendants.release_session(sid, timeout=SELF_DESTRUCT_TIMEOUT, reap=True)
            processes.kill_session(sid, exclude=(me, admin), timeout=SELF_DESTRUCT_TIMEOUT, own=True)
            processes.kill_pids([admin])
        os.kill(me, signal.SIGKILL)
