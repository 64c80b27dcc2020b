"""Supervision rules as a pure state machine: events in, effects out, the clock passed in.

``Supervision.handle(event, now)`` is the whole interface: ``now`` is seconds on a monotonic
clock (the shell's ``time.monotonic()``, a test's fake clock), and what comes back is a list of
effects for the shell to perform in order (``supervision_events``). Nothing here touches a
process, a socket or the clock, so every rule is tested on a fake clock without sleeping
(``tests/actors/test_supervision_rules.py``), and random interleavings by hypothesis.

The rules (Erlang/OTP's ``supervisor``, with ``restart_policy`` for the arithmetic):

- Children start in order, each once the one before it has answered (or settled for good).
- An exit nobody asked for, a startup that raises, or a startup that takes longer than
  ``startup_timeout`` is a crash: the child restarts if its restart type says so (permanent;
  transient after an abnormal exit; temporary never), with the siblings the strategy names,
  after a backoff that grows while it keeps crashing. Each such restart counts against restart
  intensity: more than ``max_restarts`` within ``period`` and the supervisor kills everything and
  gives up (``Escalate``, terminal). Nothing else ends it: a child that never answers is killed
  and started again, a lost exit notice is found by repeating the kill, and a cancel at any
  moment (during a start, a restart, a backoff, another cancel) kills what runs and starts
  everything fresh.
- Kills the supervisor orders itself (cancel, deadline, stop) are not crashes: no backoff, no
  count. An operation's deadline is its control's times (or what a connector declared) plus
  ``operation_grace``; past it the connectors still at it are killed, their part ``timeout``.
- Every operation is answered exactly once; a stop or reconfigure waits for every child to be
  down (graceful ``shutdown()`` within its timeout, else SIGKILL).
- A child placed on member systems (``placement.py``) may lose its host or find none: its part
  fails ``host-lost`` or ``host-unavailable``. Neither is a crash (no backoff, no count against
  intensity): a lost one starts again at once wherever a host can take it, an unplaced one waits
  (WAITING: its parts fail at once) until a host can (``HostAvailable``), or a cancel tries again.
"""

from __future__ import annotations

import heapq
import logging
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servo_actors.actors import messages as m
from servo_actors.actors.processes import exit_description
from servo_actors.actors.restart_policy import (
    RestartBackoff,
    RestartIntensity,
    restart_targets,
    should_restart,
)
from servo_actors.actors.results import ConnectorOutcome
from servo_actors.actors.supervision_events import (
    UNSETTLED,
    CancelRequested,
    ChildExited,
    ChildHostLost,
    ChildProgressed,
    ChildReady,
    ChildReplied,
    ChildShutdownDone,
    ChildStarted,
    ChildStartupFailed,
    ChildState,
    ChildUnplaced,
    Effect,
    Escalate,
    Event,
    FinalSweep,
    HostAvailable,
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
from servo_actors.actors.supervision_operation import OperationInFlight, operation_deadline, refused

KILL_CHECK_FIRST = 0.002
KILL_CHECK_MAX = 0.1
"""After a kill, ``Kill`` is repeated at KILL_CHECK_FIRST seconds, doubling up to KILL_CHECK_MAX,
until the exit is reported: an exit notice can be lost (Thespian misses some when several
children die at once), and each repeat has the shell look at the process again."""
CANCELLED_IDS_KEPT = 16
"""Ids of cancelled operations remembered in case their Begin arrives after the Cancel."""
PROGRESS_INTERVAL = 0.1
"""Least seconds between two ``Progress`` answers of one operation; what comes between is merged
(the highest percent is kept, as the runtime keeps it). Unmerged, 50 connectors reporting a few
steps each queued hundreds of messages to the servo's process, and Thespian sends to one address
one at a time and to all addresses through one window of 20: a cancel's HostInit messages to the
fresh hosts waited behind them (its p99 at 50 connectors went past 500 ms)."""

QUEUED, STARTING, READY, KILLING, DOWN, WAITING = (
    ChildState.QUEUED,
    ChildState.STARTING,
    ChildState.READY,
    ChildState.KILLING,
    ChildState.DOWN,
    ChildState.WAITING,
)
HOST_LOST, HOST_UNAVAILABLE = "host-lost", "host-unavailable"
"""Reasons of the part of a child whose host is lost, or that no host can take."""
NEVER = float("inf")

_log = logging.getLogger(__name__)


def kill_check_delay(attempt: int) -> float:
    """Seconds from the ``attempt``-th kill of a generation to the next look at it."""
    return min(KILL_CHECK_MAX, KILL_CHECK_FIRST * 2.0 ** min(attempt, 30))


@dataclass
class _Child:
    spec: m.ChildSpec
    backoff: RestartBackoff
    state: ChildState = QUEUED
    generation: int = 0
    pid: int | None = None
    where: str | None = None
    not_before: float = 0.0
    after: str | None = None
    """The child that must have settled before this one starts (start order)."""
    then: ChildState = QUEUED
    busy: str | None = None
    """Request id of the operation the process is running."""
    restarts: int = 0
    startup_deadline: float = NEVER
    shutdown_deadline: float = NEVER
    """Set while a graceful shutdown runs: past it the child is killed."""
    kill_attempt: int = 0
    kill_check_at: float = NEVER
    waiting_for: str = ""
    """While WAITING: why (the message its parts fail with)."""

    @property
    def name(self) -> str:
        return self.spec.name

    def status(self) -> m.ChildStatus:
        return m.ChildStatus(self.name, self.state.value, self.pid, self.generation, self.restarts, self.where)


@dataclass
class _Stopping:
    request_id: str
    reply_to: Any
    replacement: m.Reconfigure | None


class Supervision:
    """The supervisor's rules and state (see module docstring).

    ``supervisor_pid``/``session_id`` only go into the ``Ready`` answers; ``rng`` spreads the
    restart backoff (jitter).
    """

    def __init__(self, *, supervisor_pid: int = 0, session_id: int = 0, rng: random.Random | None = None):
        self._pid, self._sid = supervisor_pid, session_id
        self._rng = rng or random.Random()
        self._settings = m.SupervisorSettings()
        self._intensity = RestartIntensity(self._settings.max_restarts, self._settings.period)
        self._children: list[_Child] = []
        self._started = False
        self._op: OperationInFlight | None = None
        self._ready_waiters: list[tuple[str, Any]] = []
        self._cancel_waiters: list[tuple[str, Any]] = []
        self._stopping: _Stopping | None = None
        self._failure: str | None = None
        self._next_generation = 0
        self._cancelled_ids: deque[str] = deque(maxlen=CANCELLED_IDS_KEPT)
        self._wakeups: list[float] = []
        """Times of the wakeups asked for and not yet due (a heap)."""
        self._now = 0.0
        self._effects: list[Effect] = []
        self._handlers: dict[type, Callable[[Any], None]] = {
            StartRequested: self._start,
            OperationRequested: self._begin,
            CancelRequested: self._cancel,
            StopRequested: self._begin_stopping,
            ChildStarted: self._child_started,
            ChildReady: self._child_ready,
            ChildStartupFailed: self._child_startup_failed,
            ChildProgressed: self._child_progressed,
            ChildReplied: self._child_replied,
            ChildShutdownDone: self._child_shutdown_done,
            ChildExited: self._child_exited,
            ChildHostLost: self._child_host_lost,
            ChildUnplaced: self._child_unplaced,
            HostAvailable: self._host_available,
            Tick: self._tick,
        }

    # ----- the interface -------------------------------------------------------------------------

    def handle(self, event: Event, now: float) -> list[Effect]:
        """Apply ``event`` at time ``now``; the effects to perform, in order."""
        self._now, self._effects = now, []
        self._handlers[type(event)](event)
        self._pump()
        if self._settle():
            self._pump()  # a reconfigure installed new children
        self._schedule()
        effects, self._effects = self._effects, []
        return effects

    @property
    def failure(self) -> str | None:
        """Why the supervisor gave up (restart intensity exceeded), or None."""
        return self._failure

    @property
    def busy(self) -> bool:
        """An operation, a stop, or a child not settled: the shell checks processes more often."""
        return (
            self._op is not None
            or self._stopping is not None
            or any(child.state in UNSETTLED for child in self._children)
        )

    def statuses(self) -> tuple[m.ChildStatus, ...]:
        return tuple(child.status() for child in self._children)

    # ----- requests from the runtime ---------------------------------------------------------------

    def _start(self, event: StartRequested) -> None:
        if self._started:
            return
        self._started = True
        self._install(event.settings, event.children)
        self._ready_waiters.append((event.request_id, event.reply_to))

    def _install(self, settings: m.SupervisorSettings, specs: tuple[m.ChildSpec, ...]) -> None:
        self._settings = settings
        self._intensity = RestartIntensity(settings.max_restarts, settings.period)
        self._children = []
        previous = None
        for spec in specs:
            backoff = RestartBackoff(
                settings.backoff_min, settings.backoff_max, settings.backoff_jitter, settings.period
            )
            # Start in order: each child waits for the one before it to answer.
            self._children.append(_Child(spec, backoff, after=previous))
            previous = spec.name

    def _begin(self, event: OperationRequested) -> None:
        begin = event.begin
        problem = None
        if begin.request_id in self._cancelled_ids:
            problem = ("cancelled", "cancelled", f"{begin.operation} was cancelled")
        elif self._failure is not None:
            problem = ("failed", "supervisor-failed", self._failure)
        elif self._stopping is not None:
            problem = ("rejected", "stopping", "the servo is stopping")
        elif self._op is not None:
            problem = ("rejected", "busy", f"{self._op.operation} is still running")
        if problem is not None:
            self._effects.append(Reply(event.reply_to, refused(begin, *problem)))
            return
        names = [c.name for c in self._children if not self._leaving(c)]
        declared = max((event.declared.get(name, 0.0) for name in names), default=0.0)
        deadline = operation_deadline(begin, self._now, self._settings.operation_grace, declared)
        self._op = OperationInFlight(begin, event.reply_to, dict.fromkeys(names), deadline)
        for child in self._children:
            if child.state == READY:
                self._dispatch(child)
            elif child.state == WAITING:
                self._fail_part(child, "failed", HOST_UNAVAILABLE, child.waiting_for)
        self._finish_if_complete()

    @staticmethod
    def _leaving(child: _Child) -> bool:
        """Down, or on its way down: takes no part in operations."""
        return child.state == DOWN or (child.state == KILLING and child.then == DOWN)

    def _dispatch(self, child: _Child) -> None:
        op = self._op
        if op is None or not op.is_pending(child.name) or child.name in op.dispatched:
            return
        begin = op.begin
        op.dispatched.add(child.name)
        child.busy = begin.request_id
        call = m.HostCall(
            begin.request_id,
            child.generation,
            begin.operation,
            begin.metrics,
            begin.components,
            begin.control,
        )
        self._effects.append(SendToChild(child.name, child.generation, call))

    def _cancel(self, event: CancelRequested) -> None:
        self._cancel_waiters.append((event.request_id, event.reply_to))
        if event.operation_id is not None and (self._op is None or self._op.request_id != event.operation_id):
            self._cancelled_ids.append(event.operation_id)  # its Begin is still on the way
        if self._stopping is not None or self._failure is not None:
            return  # answered once settled (stopping) or straight away (failed: nothing to restart)
        self._abandon_operation("cancelled", "cancelled", "was cancelled")
        for child in self._children:
            if self._leaving(child):
                continue
            # All at once: no ordering, no backoff, no count; every connector comes back fresh.
            child.not_before, child.after = self._now, None
            if child.state == WAITING:
                child.state = QUEUED  # a fresh try: a host may have come meanwhile
            self._kill(child, then=QUEUED)

    def _begin_stopping(self, event: StopRequested) -> None:
        stopping = _Stopping(event.request_id, event.reply_to, event.replacement)
        if self._stopping is not None:
            # Already stopping: the later request replaces the earlier one, which is answered
            # at once (a replaced Reconfigure with no children).
            earlier, self._stopping = self._stopping, stopping
            if earlier.replacement is not None:
                answer: Any = m.Ready(earlier.request_id, (), self._pid, self._sid)
            else:
                answer = m.Stopped(earlier.request_id)
            self._effects.append(Reply(earlier.reply_to, answer))
            return
        self._stopping = stopping
        self._abandon_operation("cancelled", "stopping", "was stopped")
        for child in self._children:
            if child.state == READY and child.busy is None:
                child.shutdown_deadline = self._now + child.spec.shutdown_timeout
                self._effects.append(
                    SendToChild(child.name, child.generation, m.HostShutdown(child.generation))
                )
            else:
                self._kill(child, then=DOWN)

    def _abandon_operation(self, status: str, reason: str, why: str) -> None:
        if self._op is not None:
            self._op.settle_pending(status, reason, why)
            self._finish_operation()

    # ----- what the children's processes do --------------------------------------------------------

    def _current(self, name: str, generation: int) -> _Child | None:
        """The child an event is about, or None when it comes from a replaced generation."""
        for child in self._children:
            if child.name == name:
                if child.generation != generation or child.state in (QUEUED, DOWN, WAITING):
                    return None
                return child
        return None

    def _child_started(self, event: ChildStarted) -> None:
        child = self._current(event.name, event.generation)
        if child is None:
            return
        child.where = event.where
        if event.pid is not None and child.pid is None:
            child.pid = event.pid
            if child.state == KILLING:
                self._effects.append(Kill(child.name, child.generation, child.pid, child.where))

    def _child_ready(self, event: ChildReady) -> None:
        child = self._current(event.name, event.generation)
        if child is None:
            return
        if child.pid is None:  # only if the shell could not tell at spawn
            child.pid = event.pid
            if child.state == KILLING:
                self._effects.append(Kill(child.name, child.generation, child.pid, child.where))
        if child.state == STARTING:
            child.state, child.startup_deadline = READY, NEVER
            self._dispatch(child)

    def _child_startup_failed(self, event: ChildStartupFailed) -> None:
        child = self._current(event.name, event.generation)
        if child is not None and child.state == STARTING:
            self._failed(child, f"startup raised {event.error}", abnormal=True)

    def _child_progressed(self, event: ChildProgressed) -> None:
        op = self._op
        if self._current(event.name, event.generation) is None or op is None:
            return
        if op.request_id == event.request_id and op.is_pending(event.name):
            progress = m.Progress(event.request_id, event.percent, event.message, event.name)
            if op.progress_pending is None or progress.percent >= op.progress_pending.percent:
                op.progress_pending = progress
            self._send_progress()

    def _send_progress(self) -> None:
        """Answer the merged progress of the operation, unless one went less than
        PROGRESS_INTERVAL ago (then ``_next_due`` brings a Tick when it may)."""
        op = self._op
        if op is None or op.progress_pending is None or self._now < op.progress_sent_at + PROGRESS_INTERVAL:
            return
        self._effects.append(Reply(op.reply_to, op.progress_pending))
        op.progress_pending, op.progress_sent_at = None, self._now

    def _child_replied(self, event: ChildReplied) -> None:
        child = self._current(event.name, event.generation)
        if child is None:
            return
        if child.busy == event.request_id:
            child.busy = None
        op = self._op
        if op is not None and op.request_id == event.request_id:
            if op.settle(event.name, event.outcome, event.claimed):
                self._finish_if_complete()

    def _child_shutdown_done(self, event: ChildShutdownDone) -> None:
        child = self._current(event.name, event.generation)
        if child is not None:
            self._kill(child, then=DOWN)

    def _child_exited(self, event: ChildExited) -> None:
        child = self._current(event.name, event.generation)
        if child is None:
            return
        state = child.state
        child.pid, child.where, child.busy = None, None, None
        child.startup_deadline = child.shutdown_deadline = child.kill_check_at = NEVER
        if state == KILLING:
            child.state = child.then
            if child.state == DOWN:
                self._fail_part(child, "failed", "connector-stopped", f"connector {child.name!r} was stopped")
            return
        child.state = QUEUED  # no process any more; _failed decides whether it stays queued
        code = event.exit_code
        self._failed(child, exit_description(code), abnormal=code != 0, gone=True)

    def _child_host_lost(self, event: ChildHostLost) -> None:
        child = self._current(event.name, event.generation)
        if child is None:
            return
        state = self._no_process(child)
        self._fail_part(child, "failed", HOST_LOST, event.message)
        if state == KILLING:
            child.state = child.then
        else:
            child.state, child.not_before, child.after = QUEUED, self._now, None  # at once, uncounted
        _log.warning("%s; starting it again", event.message)

    def _child_unplaced(self, event: ChildUnplaced) -> None:
        child = self._current(event.name, event.generation)
        if child is None:
            return
        state = self._no_process(child)
        self._fail_part(child, "failed", HOST_UNAVAILABLE, event.message)
        child.waiting_for = event.message
        child.state = DOWN if state == KILLING and child.then == DOWN else WAITING

    def _host_available(self, event: HostAvailable) -> None:
        for child in self._children:
            if child.state == WAITING and child.name in event.names:
                child.state, child.not_before, child.after = QUEUED, self._now, None

    def _no_process(self, child: _Child) -> ChildState:
        """Forget the child's process (gone, or never started); its state before, returned."""
        state = child.state
        child.pid, child.where, child.busy = None, None, None
        child.startup_deadline = child.shutdown_deadline = child.kill_check_at = NEVER
        return state

    # ----- operations ------------------------------------------------------------------------------

    def _fail_part(self, child: _Child, status: str, reason: str, message: str) -> None:
        child.busy = None
        op = self._op
        if op is not None and op.settle(child.name, ConnectorOutcome(child.name, status, reason, message)):
            self._finish_if_complete()

    def _finish_if_complete(self) -> None:
        if self._op is not None and not self._op.pending():
            self._finish_operation()

    def _finish_operation(self) -> None:
        op, self._op = self._op, None
        assert op is not None
        self._effects.append(Reply(op.reply_to, m.Done(op.request_id, op.result())))

    def _deadline(self) -> None:
        op = self._op
        assert op is not None
        for name in op.pending():
            child = self._by_name(name)
            if child is not None and child.state in (STARTING, READY):
                message = (
                    f"connector {name!r} did not finish {op.operation} in time; it was killed and restarted"
                )
                child.busy, child.not_before, child.after = None, self._now, None
                self._kill(child, then=QUEUED)
            else:
                message = (
                    f"connector {name!r} was not running (restarting) before the {op.operation} deadline"
                )
            op.settle(name, ConnectorOutcome(name, "failed", "timeout", message))
        self._finish_operation()

    # ----- kills, crashes and restarts -------------------------------------------------------------

    def _by_name(self, name: str) -> _Child | None:
        for child in self._children:
            if child.name == name:
                return child
        return None

    def _kill(self, child: _Child, *, then: ChildState) -> None:
        """Kill the child's process; ``then`` (QUEUED or DOWN) applies once it is gone."""
        if child.state in (QUEUED, DOWN, WAITING):
            if then == DOWN:
                child.state = DOWN
            return
        child.then = then
        if child.state == KILLING:
            return
        child.state = KILLING
        child.startup_deadline = child.shutdown_deadline = NEVER
        child.kill_attempt, child.kill_check_at = 0, self._now + kill_check_delay(0)
        self._effects.append(Kill(child.name, child.generation, child.pid, child.where))

    def _failed(self, child: _Child, why: str, *, abnormal: bool, gone: bool = False) -> None:
        """An exit or startup failure nobody asked for: restart per type, strategy and intensity."""
        name = child.name
        operation = self._op.operation if self._op else "operation"
        self._fail_part(
            child, "failed", "connector-crashed", f"connector {name!r} crashed during {operation} ({why})"
        )
        if self._stopping is not None or not should_restart(child.spec.restart, abnormal=abnormal):
            if gone:
                child.state = DOWN
            else:
                self._kill(child, then=DOWN)
            return
        if self._intensity.record(self._now):
            self._escalate(child, why)
            return
        delay = child.backoff.next_delay(self._now, self._rng)
        running = [c.name for c in self._children if c.state != DOWN]
        strategy = self._settings.strategy
        previous = None
        for target_name in restart_targets(strategy, running, name):
            target = self._by_name(target_name)
            assert target is not None
            if target is not child:
                self._fail_part(
                    target,
                    "failed",
                    "connector-restarted",
                    f"connector {target_name!r} was stopped because {name!r} crashed ({strategy})",
                )
                if target.spec.restart == "temporary":
                    self._kill(target, then=DOWN)  # OTP: a temporary sibling is not restarted
                    continue
            # Restarted in start order, after the backoff.
            target.not_before, target.after = self._now + delay, previous
            previous = target_name
            if target is child and gone:
                target.state = QUEUED
            else:
                self._kill(target, then=QUEUED)
        child.restarts += 1
        _log.warning("connector %s failed (%s); restarting in %.2fs", name, why, delay)

    def _escalate(self, child: _Child, why: str) -> None:
        # Intensity counts the restarts of all children (OTP): name the one that crossed the line.
        settings = self._settings
        self._failure = (
            f"connector {child.name!r} failed ({why}) after {settings.max_restarts} restarts within "
            f"{settings.period:g}s (supervisor.max_restarts); the supervisor gave up"
        )
        _log.error("%s", self._failure)
        for each in self._children:
            self._kill(each, then=DOWN)
        self._abandon_operation("failed", "supervisor-failed", f"failed ({self._failure})")
        self._effects.append(Escalate(child.name, self._failure))

    # ----- time ------------------------------------------------------------------------------------

    def _tick(self, _event: Tick) -> None:
        now = self._now
        while self._wakeups and self._wakeups[0] <= now:
            heapq.heappop(self._wakeups)
        for child in self._children:
            if child.state == KILLING and now >= child.kill_check_at:
                # No exit reported yet: look again (and kill again, should it still run).
                child.kill_attempt += 1
                child.kill_check_at = now + kill_check_delay(child.kill_attempt)
                self._effects.append(Kill(child.name, child.generation, child.pid, child.where))
            elif child.state == STARTING and now >= child.startup_deadline:
                why = f"startup took longer than {self._settings.startup_timeout:g}s"
                self._failed(child, why, abnormal=True)
            elif child.state == READY and now >= child.shutdown_deadline:
                self._kill(child, then=DOWN)
        if self._op is not None and now >= self._op.deadline:
            self._deadline()
        self._send_progress()

    def _pump(self) -> None:
        """Spawn every queued child whose time has come and whose predecessor has settled."""
        if self._stopping is not None or self._failure is not None:
            return
        for child in self._children:
            if child.state != QUEUED or self._now < child.not_before:
                continue
            before = self._by_name(child.after) if child.after is not None else None
            if before is not None and before.state in UNSETTLED:
                continue
            self._next_generation += 1
            child.generation = self._next_generation
            child.state, child.pid, child.where, child.busy = STARTING, None, None, None
            child.startup_deadline = self._now + self._settings.startup_timeout
            self._effects.append(Spawn(child.name, child.generation, child.spec))

    def _settle(self) -> bool:
        """Answer the requests waiting for the children to settle; True if new children came in."""
        if self._stopping is not None:
            if all(c.state == DOWN for c in self._children):
                return self._stopped()
            return False
        if not (self._ready_waiters or self._cancel_waiters):
            return False
        if self._failure is None and any(c.state in UNSETTLED for c in self._children):
            return False
        statuses = self.statuses()
        for request_id, reply_to in self._ready_waiters:
            ready = m.Ready(request_id, statuses, self._pid, self._sid, self._failure)
            self._effects.append(Reply(reply_to, ready))
        for request_id, reply_to in self._cancel_waiters:
            self._effects.append(Reply(reply_to, m.Cancelled(request_id, statuses, self._failure)))
        self._ready_waiters, self._cancel_waiters = [], []
        return False

    def _stopped(self) -> bool:
        stopping, self._stopping = self._stopping, None
        assert stopping is not None
        self._effects.append(FinalSweep())  # before the answer: the servo may exit next
        if stopping.replacement is None:
            self._effects.append(Reply(stopping.reply_to, m.Stopped(stopping.request_id)))
            self._children = []
            return False
        self._failure = None
        self._install(stopping.replacement.settings, stopping.replacement.children)
        self._ready_waiters.append((stopping.request_id, stopping.reply_to))
        return True

    def _next_due(self) -> float:
        """The earliest moment a rule fires on its own (a backoff ends, a deadline passes)."""
        due = self._op.deadline if self._op is not None else NEVER
        if self._op is not None and self._op.progress_pending is not None:
            due = min(due, self._op.progress_sent_at + PROGRESS_INTERVAL)
        spawning = self._stopping is None and self._failure is None
        for child in self._children:
            if child.state == QUEUED and spawning and child.not_before > self._now:
                due = min(due, child.not_before)
            due = min(due, child.startup_deadline, child.shutdown_deadline, child.kill_check_at)
        return due

    def _schedule(self) -> None:
        due = self._next_due()
        # A wakeup only if none is due by then: wakeups cannot be cancelled, so they must not pile
        # up (a stale one is only a Tick with nothing to do).
        if due != NEVER and (not self._wakeups or due < self._wakeups[0]):
            heapq.heappush(self._wakeups, due)
            self._effects.append(ScheduleWakeup(due))
