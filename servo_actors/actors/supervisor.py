"""Supervisor: starts one ConnectorHost per connector, fans operations out, kills and restarts.

It never blocks: everything is a reaction to a message, a ``ChildActorExited`` or a wakeup, and
every kill is a non-blocking ``killpg(SIGKILL)`` followed by waiting for the exit (with a wakeup
that checks the PID is gone, in case the notice is late).

A child's life: ``queued`` (no process; waits for ``not_before`` and for the child it must start
after) -> ``starting`` (spawned; its ``startup()`` runs) -> ``ready`` -> ``killing`` (SIGKILL sent;
``then`` says whether it is queued again or stays ``down`` once the process is gone).

Rules (Erlang/OTP's, see ``restart_policy``): an unplanned exit or a failed startup restarts the
child if its restart type says so, together with the siblings the strategy names, after a backoff
that grows while it keeps crashing; more than ``max_restarts`` restarts in ``period`` and the
supervisor kills everything and reports a terminal ``SupervisorFailed`` naming the connector.
Kills the supervisor orders itself (cancel, deadline, stop) are not crashes: no backoff, no count.

Every process it creates shares the actor system's session; if the servo process that owns the
system disappears, the supervisor SIGKILLs the whole session, itself last.
"""

from __future__ import annotations

import gc
import logging
import os
import random
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from thespian.actors import Actor, ChildActorExited, PoisonMessage, WakeupMessage

from servo_actors.actors import descendants, lifeline, processes, system
from servo_actors.actors import messages as m
from servo_actors.actors.host import NOT_INVOLVED, ConnectorHost
from servo_actors.actors.restart_policy import (
    RestartBackoff,
    RestartIntensity,
    restart_targets,
    should_restart,
)
from servo_actors.actors.results import ConnectorOutcome, aggregate

KILL_CHECK_FIRST = 0.002
KILL_CHECK_MAX = 0.1
"""After a SIGKILL the PID is checked at KILL_CHECK_FIRST seconds, doubling up to KILL_CHECK_MAX:
ChildActorExited alone is not enough, Thespian misses some when several children die at once."""
TICK_BUSY = 0.25
TICK_IDLE = 1.0
"""Seconds between the supervisor's periodic checks (the owning servo process is alive, every child
process too, startups and the operation are within their time): TICK_BUSY while an operation,
start, cancel or stop is in flight, TICK_IDLE otherwise (an idle servo should not burn CPU). One
timer chain for all of them, rather than a wakeup per spawn or operation, which Thespian cannot
cancel and would pile up."""
SELF_DESTRUCT_TIMEOUT = 2.0
"""Seconds the supervisor spends killing its session once the owner is gone."""
CANCELLED_IDS_KEPT = 16
"""Ids of cancelled operations remembered in case their Begin arrives after the Cancel."""

_log = logging.getLogger(__name__)

# Child states.
QUEUED, STARTING, READY, KILLING, DOWN = "queued", "starting", "ready", "killing", "down"
UNSETTLED = (QUEUED, STARTING, KILLING)


@dataclass
class _Child:
    spec: m.ChildSpec
    backoff: RestartBackoff
    state: str = QUEUED
    generation: int = 0
    address: Any = None
    pid: int | None = None
    not_before: float = 0.0
    after: str | None = None
    then: str = QUEUED
    busy: str | None = None
    restarts: int = 0
    graceful: bool = False
    spawned_at: float = 0.0

    def status(self) -> m.ChildStatus:
        return m.ChildStatus(self.spec.name, self.state, self.pid, self.generation, self.restarts)


@dataclass
class _Operation:
    begin: m.Begin
    owner: Any
    parts: dict[str, ConnectorOutcome | None]
    deadline: float
    dispatched: set[str] = field(default_factory=set)
    claimed: set[str] = field(default_factory=set)

    def pending(self) -> list[str]:
        return [name for name, outcome in self.parts.items() if outcome is None]


@dataclass
class _Stopping:
    request_id: str
    owner: Any
    replacement: m.Reconfigure | None


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
        self._settings = m.SupervisorSettings()
        self._children: list[_Child] = []
        self._owner: Any = None
        self._owner_pid: int | None = None
        self._owner_started: int | None = None
        self._owner_sid: int | None = None
        self._intensity = RestartIntensity(5, 30.0)
        self._rng = random.Random()
        self._op: _Operation | None = None
        self._ready_waiters: list[tuple[str, Any]] = []
        self._cancel_waiters: list[tuple[str, Any]] = []
        self._stopping: _Stopping | None = None
        self._failure: str | None = None
        self._next_generation = 0
        self._pump_at: float | None = None
        self._forget: list[tuple[float, Any]] = []
        self._cancelled_ids: deque[str] = deque(maxlen=CANCELLED_IDS_KEPT)
        self._tick_token = 0
        self._tick_at = float("inf")

    # ----- dispatch ----------------------------------------------------------------------------

    def receiveMessage(self, msg: Any, sender: Any) -> None:
        # Never raise: Thespian would retry the message and then return it as poison.
        try:
            self._receive(msg, sender)
        except Exception:
            _log.exception("supervisor failed on %r", msg)

    def _receive(self, msg: Any, sender: Any) -> None:
        if isinstance(msg, (m.HostProgress, m.HostReply, m.HostReady)):
            self._from_host(msg)
        elif isinstance(msg, ChildActorExited):
            child = self._by_address(msg.childAddress)
            # Thespian sends duplicates, and a stale address can compare equal to a fresh child's
            # not yet connected one: believe the notice only for a process known to be gone.
            if child is not None and child.pid is not None and not processes.is_running(child.pid):
                self._process_gone(child, self._exit_code(child.pid))
            self._poll_children()
        elif isinstance(msg, WakeupMessage):
            self._wakeup(msg.payload)
        elif isinstance(msg, (m.HostStartupFailed, m.HostShutdownDone)):
            self._from_host(msg)
        elif isinstance(msg, m.Begin):
            self._begin(msg, sender)
        elif isinstance(msg, m.Cancel):
            self._cancel(msg, sender)
        elif isinstance(msg, m.Start):
            self._start(msg, sender)
        elif isinstance(msg, m.GetStatus):
            self.send(sender, self._status(msg.request_id))
        elif isinstance(msg, m.Stop):
            self._begin_stopping(_Stopping(msg.request_id, sender, None))
        elif isinstance(msg, m.Reconfigure):
            self._begin_stopping(_Stopping(msg.request_id, sender, msg))
        elif isinstance(msg, PoisonMessage):
            _log.error("a message the supervisor sent could not be handled: %s", msg.details)
        self._after_event()

    def _after_event(self) -> None:
        self._pump()
        self._check_settled()
        if self._busy() and self._tick_at - _now() > TICK_BUSY:
            self._schedule_tick(TICK_BUSY)

    def _busy(self) -> bool:
        return (
            self._op is not None
            or self._stopping is not None
            or any(child.state in UNSETTLED for child in self._children)
        )

    def _schedule_tick(self, delay: float) -> None:
        # A new token retires the pending tick: one chain of ticks at a time.
        self._tick_token += 1
        self._tick_at = _now() + delay
        self.wakeupAfter(timedelta(seconds=delay), ("tick", self._tick_token))

    # ----- lookups -----------------------------------------------------------------------------

    def _by_name(self, name: str) -> _Child | None:
        for child in self._children:
            if child.spec.name == name:
                return child
        return None

    def _by_address(self, address: Any) -> _Child | None:
        for child in self._children:
            if child.address is not None and child.address == address:
                return child
        return None

    def _current(self, name: str, generation: int) -> _Child | None:
        """The child a host message is from, or None when it comes from a replaced generation."""
        child = self._by_name(name)
        if child is None or child.generation != generation or child.state in (QUEUED, DOWN):
            return None
        return child

    def _status(self, request_id: str) -> m.Status:
        return m.Status(
            request_id,
            tuple(c.status() for c in self._children),
            os.getpid(),
            os.getsid(0),
            self._failure,
            system.tracked_child_addresses(self),
        )

    # ----- requests from the runtime -----------------------------------------------------------

    def _start(self, msg: m.Start, sender: Any) -> None:
        if self._owner is not None:
            return
        self._owner, self._owner_pid, self._owner_started = sender, msg.owner_pid, msg.owner_started
        owner = processes.proc_stat(msg.owner_pid)
        self._owner_sid = owner.sid if owner else None
        self._install(msg.settings, msg.children)
        self._ready_waiters.append((msg.request_id, sender))
        self._schedule_tick(TICK_BUSY)
        # Tells the runtime our PID at once, so it can notice our death while children start.
        self.send(sender, self._status(f"{msg.request_id}:started"))

    def _install(self, settings: m.SupervisorSettings, specs: tuple[m.ChildSpec, ...]) -> None:
        self._settings = settings
        self._intensity = RestartIntensity(settings.max_restarts, settings.period)
        self._children = [
            _Child(
                spec=spec,
                backoff=RestartBackoff(
                    settings.backoff_min, settings.backoff_max, settings.backoff_jitter, settings.period
                ),
            )
            for spec in specs
        ]
        # Start in order: each child waits for the one before it to answer.
        previous = None
        for child in self._children:
            child.after = previous
            previous = child.spec.name

    def _begin(self, msg: m.Begin, sender: Any) -> None:
        problem = None
        if msg.request_id in self._cancelled_ids:
            problem = ("cancelled", "cancelled", f"{msg.operation} was cancelled")
        elif self._failure is not None:
            problem = ("failed", "supervisor-failed", self._failure)
        elif self._stopping is not None:
            problem = ("rejected", "stopping", "the servo is stopping")
        elif self._op is not None:
            problem = ("rejected", "busy", f"{self._op.begin.operation} is still running")
        if problem is not None:
            result = aggregate(msg.operation, [], extra_problem=problem)
            self.send(sender, m.Done(msg.request_id, result))
            return
        names = [
            c.spec.name
            for c in self._children
            if c.state != DOWN and not (c.state == KILLING and c.then == DOWN)
        ]
        expected = msg.control.expected_seconds if msg.operation in ("measure", "adjust") else 0.0
        deadline = _now() + expected + self._settings.operation_grace
        self._op = _Operation(msg, sender, dict.fromkeys(names), deadline)
        for child in self._children:
            if child.state == READY:
                self._dispatch(child)
        self._maybe_finish()

    def _dispatch(self, child: _Child) -> None:
        op = self._op
        name = child.spec.name
        if op is None or name not in op.parts or op.parts[name] is not None or name in op.dispatched:
            return
        begin = op.begin
        op.dispatched.add(name)
        child.busy = begin.request_id
        call = m.HostCall(
            begin.request_id,
            child.generation,
            begin.operation,
            begin.metrics,
            begin.components,
            begin.control,
        )
        self.send(child.address, call)

    def _cancel(self, msg: m.Cancel, sender: Any) -> None:
        self._cancel_waiters.append((msg.request_id, sender))
        if msg.operation_id is not None and (
            self._op is None or self._op.begin.request_id != msg.operation_id
        ):
            self._cancelled_ids.append(msg.operation_id)  # its Begin is still on the way
        if self._stopping is not None or self._failure is not None:
            return  # answered once settled (stopping) or straight away (failed: nothing to restart)
        self._abandon_operation("cancelled", "cancelled", "was cancelled")
        now = _now()
        for child in self._children:
            if child.state == DOWN or (child.state == KILLING and child.then == DOWN):
                continue
            # All at once: no ordering, no backoff; every connector comes back fresh.
            child.not_before, child.after = now, None
            self._kill(child, then=QUEUED)

    def _begin_stopping(self, stopping: _Stopping) -> None:
        if self._stopping is not None:
            # Already stopping: the later request replaces the earlier one, which is answered
            # at once (a replaced Reconfigure with no children).
            earlier = self._stopping
            self._stopping = stopping
            if earlier.replacement is not None:
                self.send(earlier.owner, m.Ready(earlier.request_id, (), os.getpid(), os.getsid(0)))
            else:
                self.send(earlier.owner, m.Stopped(earlier.request_id))
            return
        self._stopping = stopping
        self._abandon_operation("cancelled", "stopping", "was stopped")
        for child in self._children:
            if child.state == READY and child.busy is None:
                child.graceful = True
                self.send(child.address, m.HostShutdown(child.generation))
                timeout = child.spec.shutdown_timeout
                self.wakeupAfter(timedelta(seconds=timeout), ("shutdown", child.spec.name, child.generation))
            else:
                self._kill(child, then=DOWN)

    def _abandon_operation(self, status: str, reason: str, why: str) -> None:
        op = self._op
        if op is None:
            return
        for name in op.pending():
            message = f"{op.begin.operation} {why} before connector {name!r} finished"
            op.parts[name] = ConnectorOutcome(name, status, reason, message)
        self._finish_operation()

    # ----- messages from hosts -----------------------------------------------------------------

    def _from_host(self, msg: Any) -> None:
        child = self._current(msg.name, msg.generation)
        if child is None:
            return  # a replaced generation: its answers no longer count
        if isinstance(msg, m.HostReady):
            if child.pid is None:  # only if Thespian did not tell us at spawn (see system.child_pid)
                child.pid = msg.pid
                if child.state == KILLING:
                    self._signal_kill(child.pid)
            if child.state == STARTING:
                child.state = READY
                self._dispatch(child)
        elif isinstance(msg, m.HostProgress):
            op = self._op
            if op is not None and op.begin.request_id == msg.request_id and op.parts.get(msg.name, 1) is None:
                self.send(op.owner, m.Progress(msg.request_id, msg.percent, msg.message, msg.name))
        elif isinstance(msg, m.HostReply):
            self._host_reply(child, msg)
        elif isinstance(msg, m.HostStartupFailed):
            if child.state == STARTING:
                self._failed(child, f"startup raised {msg.error}", abnormal=True)
        elif isinstance(msg, m.HostShutdownDone):
            self._kill(child, then=DOWN)

    def _host_reply(self, child: _Child, msg: m.HostReply) -> None:
        if child.busy == msg.request_id:
            child.busy = None
        op = self._op
        if op is None or op.begin.request_id != msg.request_id or op.parts.get(msg.name, 1) is not None:
            return
        op.parts[msg.name] = msg.outcome
        op.claimed.update(msg.claimed)
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        if self._op is not None and not self._op.pending():
            self._finish_operation()

    def _finish_operation(self) -> None:
        op, self._op = self._op, None
        assert op is not None
        begin = op.begin
        parts = [p for p in op.parts.values() if p is not None and p.reason != NOT_INVOLVED]
        problem = None
        if begin.operation == "adjust" and all(p.ok for p in parts):
            unowned = sorted(set(begin.components or {}) - op.claimed)
            if unowned:
                problem = (
                    "rejected",
                    "unknown-component",
                    f"no connector owns component(s) {', '.join(unowned)}",
                )
        self.send(
            op.owner, m.Done(begin.request_id, aggregate(begin.operation, parts, extra_problem=problem))
        )

    def _fail_part(self, child: _Child, status: str, reason: str, message: str) -> None:
        child.busy = None
        op = self._op
        name = child.spec.name
        if op is not None and op.parts.get(name, 1) is None:
            op.parts[name] = ConnectorOutcome(name, status, reason, message)
            self._maybe_finish()

    # ----- processes ---------------------------------------------------------------------------

    def _spawn(self, child: _Child) -> None:
        self._next_generation += 1
        child.generation = self._next_generation
        child.pid, child.busy, child.graceful = None, None, False
        child.state, child.spawned_at = STARTING, _now()
        child.address = self.createActor(ConnectorHost)
        child.pid = system.child_pid(self, child.address)
        self.send(child.address, m.HostInit(child.spec, child.generation, os.getpid()))

    def _kill(self, child: _Child, *, then: str) -> None:
        """SIGKILL the child's process group; ``then`` (queued/down) applies once the process is gone."""
        if child.state in (QUEUED, DOWN):
            child.state = then if then == DOWN else child.state
            return
        child.then = then
        if child.state == KILLING:
            return
        child.state = KILLING
        if child.pid is not None:
            self._signal_kill(child.pid)
        self._schedule_reap(child, 0)

    @staticmethod
    def _signal_kill(pid: int) -> None:
        # With its group, its descendants and its cgroup: whatever session its subprocesses moved to.
        descendants.kill_tree(pid)

    def _schedule_reap(self, child: _Child, attempt: int) -> None:
        delay = min(KILL_CHECK_MAX, KILL_CHECK_FIRST * 2**attempt)
        self.wakeupAfter(timedelta(seconds=delay), ("reap", child.spec.name, child.generation, attempt))

    @staticmethod
    def _exit_code(pid: int | None) -> int | None:
        code = system.pop_exit_code(pid)
        if code is None and pid is not None:
            code = processes.exit_status_nowait(pid)
        return code

    def _poll_children(self) -> None:
        """Notice processes that are gone without a ChildActorExited (see KILL_CHECK_MAX)."""
        for child in self._children:
            if child.pid is not None and child.state in (STARTING, READY, KILLING):
                if not processes.is_running(child.pid):
                    self._process_gone(child, self._exit_code(child.pid))

    def _process_gone(self, child: _Child, exit_code: int | None) -> None:
        state = child.state
        if child.address is not None:
            self._forget.append((_now(), child.address))
        child.address, child.pid = None, None
        descendants.sweep(descendants.thespian_children(self))
        if state == KILLING:
            child.state = child.then
            if child.state == DOWN:
                self._fail_part(
                    child, "failed", "connector-stopped", f"connector {child.spec.name!r} was stopped"
                )
            return
        if state in (STARTING, READY):
            child.state = QUEUED  # no process any more; _failed decides whether it stays queued
            self._failed(child, processes.exit_description(exit_code), abnormal=exit_code != 0, gone=True)

    def _reap_check(self, child: _Child, attempt: int) -> None:
        if child.state != KILLING:
            return
        if child.pid is not None and processes.is_running(child.pid):
            self._signal_kill(child.pid)
        elif child.pid is None and self._unknown_children():
            # PID never learnt (see system.child_pid): sweep our children no generation claims.
            processes.kill_pids(self._unknown_children())
        else:
            self._process_gone(child, self._exit_code(child.pid))
            return
        self._schedule_reap(child, attempt + 1)

    def _unknown_children(self) -> list[int]:
        known = {c.pid for c in self._children if c.pid is not None}
        return [s.pid for s in processes.children_of(os.getpid()) if s.alive and s.pid not in known]

    # ----- failures and restarts ---------------------------------------------------------------

    def _failed(self, child: _Child, why: str, *, abnormal: bool, gone: bool = False) -> None:
        """An exit or startup failure nobody asked for: restart per type, strategy and intensity."""
        name = child.spec.name
        operation = self._op.begin.operation if self._op else "operation"
        self._fail_part(
            child, "failed", "connector-crashed", f"connector {name!r} crashed during {operation} ({why})"
        )
        if self._stopping is not None or not should_restart(child.spec.restart, abnormal=abnormal):
            self._end(child, gone)
            return
        now = _now()
        if self._intensity.record(now):
            self._escalate(child, why)
            return
        delay = child.backoff.next_delay(now, self._rng)
        running = [c.spec.name for c in self._children if c.state != DOWN]
        previous = None
        for target_name in restart_targets(self._settings.strategy, running, name):
            target = self._by_name(target_name)
            assert target is not None
            if target is not child:
                self._fail_part(
                    target,
                    "failed",
                    "connector-restarted",
                    f"connector {target_name!r} was stopped because {name!r} crashed ({self._settings.strategy})",
                )
                if target.spec.restart == "temporary":
                    self._kill(target, then=DOWN)  # OTP: a temporary sibling is not restarted
                    continue
            target.not_before, target.after = now + delay, previous
            previous = target_name
            if target is child and gone:
                target.state = QUEUED
            else:
                self._kill(target, then=QUEUED)
        child.restarts += 1
        _log.warning("connector %s failed (%s); restarting in %.2fs", name, why, delay)

    def _end(self, child: _Child, gone: bool) -> None:
        if gone:
            child.state = DOWN
        else:
            self._kill(child, then=DOWN)

    def _escalate(self, child: _Child, why: str) -> None:
        name = child.spec.name
        # Intensity counts the restarts of all children (OTP): name the one that crossed the line.
        self._failure = (
            f"connector {name!r} failed ({why}) after {self._settings.max_restarts} restarts within "
            f"{self._settings.period:g}s (supervisor.max_restarts); the supervisor gave up"
        )
        _log.error("%s", self._failure)
        for each in self._children:
            self._kill(each, then=DOWN)
        self._abandon_operation("failed", "supervisor-failed", f"failed ({self._failure})")
        if self._owner is not None:
            self.send(self._owner, m.SupervisorFailed(name, self._failure))

    # ----- scheduling --------------------------------------------------------------------------

    def _pump(self) -> None:
        """Spawn every queued child whose time has come and whose predecessor has answered."""
        if self._stopping is not None or self._failure is not None:
            return
        now = _now()
        earliest = None
        for child in self._children:
            if child.state != QUEUED:
                continue
            if child.after is not None:
                before = self._by_name(child.after)
                if before is not None and before.state in UNSETTLED:
                    continue
            if now < child.not_before:
                earliest = child.not_before if earliest is None else min(earliest, child.not_before)
                continue
            self._spawn(child)
        if earliest is not None and (
            self._pump_at is None or earliest < self._pump_at or self._pump_at <= now
        ):
            self._pump_at = earliest
            self.wakeupAfter(timedelta(seconds=max(0.0, earliest - now)), ("pump",))

    def _check_settled(self) -> None:
        if self._stopping is not None:
            if all(c.state == DOWN for c in self._children):
                self._stopped()
            return
        if not (self._ready_waiters or self._cancel_waiters):
            return
        if self._failure is None and any(c.state in UNSETTLED for c in self._children):
            return
        statuses = tuple(c.status() for c in self._children)
        for request_id, sender in self._ready_waiters:
            self.send(sender, m.Ready(request_id, statuses, os.getpid(), os.getsid(0)))
        for request_id, sender in self._cancel_waiters:
            self.send(sender, m.Cancelled(request_id, statuses))
        self._ready_waiters, self._cancel_waiters = [], []

    def _stopped(self) -> None:
        descendants.sweep_until_clean(descendants.thespian_children(self))  # the servo may exit next
        stopping, self._stopping = self._stopping, None
        assert stopping is not None
        if stopping.replacement is None:
            self.send(stopping.owner, m.Stopped(stopping.request_id))
            self._children = []
            return
        self._failure = None
        self._install(stopping.replacement.settings, stopping.replacement.children)
        self._ready_waiters.append((stopping.request_id, stopping.owner))

    def _wakeup(self, payload: Any) -> None:
        if not isinstance(payload, tuple) or not payload:
            return
        kind = payload[0]
        if kind == "pump":
            self._pump_at = None
        elif kind == "tick":
            if payload[1] == self._tick_token:
                self._tick()
        elif kind in ("reap", "shutdown"):
            child = self._by_name(payload[1])
            if child is None or child.generation != payload[2]:
                return
            if kind == "reap":
                self._reap_check(child, payload[3])
            elif child.graceful and child.state == READY:
                self._kill(child, then=DOWN)

    def _tick(self) -> None:
        # Re-armed first: should anything below raise, the periodic checks must not stop.
        self._schedule_tick(TICK_BUSY if self._busy() else TICK_IDLE)
        if self._owner_pid is not None and not processes.is_running(self._owner_pid, self._owner_started):
            self._self_destruct()
        now = _now()
        self._poll_children()
        descendants.sweep(descendants.thespian_children(self))
        for child in self._children:
            if child.state == STARTING and now - child.spawned_at > self._settings.startup_timeout:
                why = f"startup took longer than {self._settings.startup_timeout:g}s"
                self._failed(child, why, abnormal=True)
        if self._op is not None and now >= self._op.deadline:
            self._deadline()
        # Addresses of children gone for a tick: Thespian has handled their exit by now.
        while self._forget and now - self._forget[0][0] >= TICK_BUSY:
            system.forget_child(self, self._forget.pop(0)[1])

    def _deadline(self) -> None:
        op = self._op
        assert op is not None
        now = _now()
        for name in op.pending():
            child = self._by_name(name)
            if child is not None and child.state in (STARTING, READY):
                message = f"connector {name!r} did not finish {op.begin.operation} in time; it was killed and restarted"
                child.busy, child.not_before, child.after = None, now, None
                self._kill(child, then=QUEUED)
            else:
                message = f"connector {name!r} was not running (restarting) before the {op.begin.operation} deadline"
            op.parts[name] = ConnectorOutcome(name, "failed", "timeout", message)
        self._finish_operation()

    def _self_destruct(self) -> None:
        """The servo that owns this system is gone: kill every process of the session, then ourselves."""
        for child in self._children:
            if child.pid is not None:
                descendants.kill_tree(child.pid)
        descendants.sweep_until_clean(set())  # hosts included: we are about to exit
        me, admin, sid = os.getpid(), os.getppid(), os.getsid(0)
        if sid > 1 and sid != self._owner_sid:
            # Before the session: killing Thespian's logger ends the admin, and so (parent death) us.
            descendants.release_session(sid, timeout=SELF_DESTRUCT_TIMEOUT, reap=True)
            processes.kill_session(sid, exclude=(me, admin), timeout=SELF_DESTRUCT_TIMEOUT, own=True)
            processes.kill_pids([admin])
        os.kill(me, signal.SIGKILL)
