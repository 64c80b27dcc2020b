"""Supervision rules as a pure state machine: events in, effects out, the clock passed in.

``Supervision.handle(event, now)`` is the whole interface: ``now`` is seconds on a monotonic
clock (the shell's ``time.monotonic()``, a test's fake clock), and what comes back is a list of
effects for the shell to perform in order (``supervision_events``). Nothing here touches a
process, a socket or the clock, so every rule is tested on a fake clock without sleeping
(``tests/actors/test_supervision_rules.py``), and random interleavings by hypothesis.

The rules (Erlang/OTP's ``supervisor``, with ``restart_policy`` for the arithmetic):

- Children start independently, all at once: a healthy connector never waits behind a sick one.
  ``Ready`` (and a cancel's ``Cancelled``) is answered once every child is up or known not to be:
  a child whose start failed (it raised, exited, or passed ``startup_timeout``) carries a
  ``down_reason`` (``start-timeout``, ``crash-loop``) until it is up, and nobody waits for it. So
  a start is answered within ``startup_timeout``, whatever the connectors do.
- An exit nobody asked for, a startup that raises, or a startup that takes longer than
  ``startup_timeout`` is a crash: the child restarts if its restart type says so (permanent;
  transient after an abnormal exit; temporary never), after a backoff that grows while it keeps
  crashing; a crash of a child that was up takes the siblings its strategy names with it (a failed
  start takes none: they cannot share state with a connector that never started).
- Restart intensity is counted per child, OTP's rule in both of its forms: more than
  ``max_restarts`` restarts within ``period``, or more than ``max_restarts`` failed starts in a row
  (whatever their pace: a start-up timeout cannot outrun a count of restarts), and the child is
  marked FAILED (``Escalate``, not terminal): no process, its parts fail at once naming why, one
  fresh start every ``failed_retry`` seconds, and the others carry on. Nothing else ends a child:
  a lost exit notice is found by repeating the kill, and a cancel at any moment (during a start,
  a restart, a backoff, another cancel) kills what runs and starts it fresh.
- A child that is not up when an operation begins: one starting for the first time (or fresh
  after a cancel) is waited for, within the operation's deadline; one whose starts fail
  (``down_reason``) or that is FAILED has its part failed at once with that reason. Every restart
  is recorded in the child's ``history`` with its reason, one entry per new generation.
- Kills the supervisor orders itself (cancel, deadline, stop) are not crashes: no backoff, no
  count. An operation's deadline is its control's times (or what a connector declared) plus
  ``operation_grace``; past it the connectors still at it are killed, their part ``timeout``.
- Every operation is answered exactly once; a stop or reconfigure waits for every child to be
  down (graceful ``shutdown()`` within its timeout, else SIGKILL).
- A child placed on member systems (``placement.py``) may lose its host or find none: its part
  fails ``host-lost`` or ``host-unavailable``. Neither is a crash (no backoff, no count against
  intensity): a lost one starts again at once wherever a host can take it, an unplaced one waits
  (WAITING: its parts fail at once) until a host can (``HostAvailable``), or a cancel tries again.

Why one module: ``Supervision`` is one state machine over one state (the
children, the operation in flight, the effects of the event being handled), and its operation
handling and its restart handling act on each other within a single event: a crash, a failed
start, a lost host or a stop fails the operation's part (``_failed``, ``_give_up``,
``_child_exited``, ``_child_host_lost`` call ``_fail_part``); an operation's deadline, a cancel
or a stop kills and restarts children (``_deadline``, ``_cancel``, ``_begin_stopping`` call
``_kill``); a child that comes up is given its part (``_child_ready`` calls ``_dispatch``). Cut in
two, each half would call the other's private methods on the shared state, so the cut would
separate nothing. What is separable already is apart: the operation's bookkeeping
(``supervision_operation.OperationInFlight``), the events and effects (``supervision_events``),
the restart arithmetic (``restart_policy``) and the placement on hosts (``placement``).
"""

from __future__ import annotations

import heapq
import logging
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from servo_actors.actors.rules import messages as m
from servo_actors.actors.rules.exits import exit_description
from servo_actors.actors.rules.restart_policy import (
    RestartBackoff,
    RestartIntensity,
    restart_targets,
    should_restart,
)
from servo_actors.actors.rules.results import ConnectorOutcome
from servo_actors.actors.rules.supervision_events import (
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
from servo_actors.actors.rules.supervision_operation import OperationInFlight, operation_deadline, refused
from servo_actors.vocabulary import CRASH_LOOP, HOST_UNAVAILABLE, START_TIMEOUT

__all__ = [
    "CANCELLED_IDS_KEPT",
    "DOWN",
    "FAILED",
    "HOST_LOST",
    "KILLING",
    "KILL_CHECK_FIRST",
    "KILL_CHECK_MAX",
    "NEVER",
    "PROGRESS_INTERVAL",
    "QUEUED",
    "READY",
    "RESTART_CANCEL",
    "RESTART_CRASH",
    "RESTART_DEADLINE",
    "RESTART_HISTORY",
    "RESTART_RETRY",
    "STARTING",
    "Supervision",
    "WAITING",
    "kill_check_delay",
]

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
HOST_LOST = "host-lost"
"""Reason of the part of a child whose host is lost (HOST_UNAVAILABLE: no host can take it)."""
FAILED = ChildState.FAILED
RESTART_HISTORY = 16
"""Restarts of a child kept in its listing (``ChildStatus.history``): far more than can happen
between two listings (one goes out every ``liveness.interval`` and with every cancel's answer)."""
RESTART_CRASH, RESTART_DEADLINE, RESTART_CANCEL, RESTART_RETRY = "crash", "deadline", "cancel", "retry"
"""Reasons of a restart in ``history`` (with START_TIMEOUT and HOST_LOST)."""
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
    intensity: RestartIntensity | None = None
    down_reason: str | None = None
    """START_TIMEOUT or CRASH_LOOP while its starts fail (None once it answers)."""
    down_why: str = ""
    """The latest failure, in words, while ``down_reason`` is set."""
    start_failures: int = 0
    """Failed starts in a row (0 once it answers)."""
    restart_reason: str | None = None
    """Why its next spawn is a restart (recorded in ``history`` at that spawn)."""
    history: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=RESTART_HISTORY))

    @property
    def name(self) -> str:
        return self.spec.name

    def status(self) -> m.ChildStatus:
        return m.ChildStatus(
            self.name,
            self.state.value,
            self.pid,
            self.generation,
            self.restarts,
            self.where,
            self.down_reason,
            self.down_why,
            tuple(self.history),
        )


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
        self._children: list[_Child] = []
        self._started = False
        self._op: OperationInFlight | None = None
        self._ready_waiters: list[tuple[str, Any]] = []
        self._cancel_waiters: list[tuple[str, Any]] = []
        self._stopping: _Stopping | None = None
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
        self._children = []
        for spec in specs:
            backoff = RestartBackoff(
                settings.backoff_min, settings.backoff_max, settings.backoff_jitter, settings.period
            )
            intensity = RestartIntensity(settings.max_restarts, settings.period)
            self._children.append(_Child(spec, backoff, intensity=intensity))

    def _begin(self, event: OperationRequested) -> None:
        begin = event.begin
        problem = None
        if begin.request_id in self._cancelled_ids:
            problem = ("cancelled", "cancelled", f"{begin.operation} was cancelled")
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
            elif child.down_reason is not None:
                self._fail_part(child, "failed", child.down_reason, self._not_up(child))
            # Otherwise it is starting fresh: its part waits for it, within the deadline.
        self._finish_if_complete()

    def _not_up(self, child: _Child) -> str:
        """Why ``child``'s part fails at once: what its starts did, and what comes next."""
        if child.state == FAILED:
            return (
                f"connector {child.name!r} is not up: {child.down_why}; the supervisor gave up on it "
                f"after {child.restarts} restarts (supervisor.max_restarts: {self._settings.max_restarts}) "
                f"and tries it again every {self._settings.failed_retry:g}s (supervisor.failed_retry)"
            )
        return f"connector {child.name!r} is not up: {child.down_why}; it is being restarted"

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
        if self._stopping is not None:
            return  # answered once settled
        self._abandon_operation("cancelled", "cancelled", "was cancelled")
        for child in self._children:
            if self._leaving(child) or FAILED in (
                child.state,
                child.then if child.state == KILLING else None,
            ):
                continue  # a FAILED child keeps its retry time: a cancel is not a way round it
            # All at once: no backoff, no count; every connector comes back fresh.
            child.not_before = self._now
            if child.state == WAITING:
                child.state = QUEUED  # a fresh try: a host may have come meanwhile
            if child.state in (STARTING, READY):
                child.restart_reason = RESTART_CANCEL
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
                if child.generation != generation or child.state in (QUEUED, DOWN, WAITING, FAILED):
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
            child.down_reason, child.down_why, child.start_failures = None, "", 0
            self._dispatch(child)

    def _child_startup_failed(self, event: ChildStartupFailed) -> None:
        child = self._current(event.name, event.generation)
        if child is not None and child.state == STARTING:
            self._failed(child, f"startup raised {event.error}", abnormal=True, start=CRASH_LOOP)

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
        start = CRASH_LOOP if state == STARTING else None
        self._failed(child, exit_description(code), abnormal=code != 0, gone=True, start=start)

    def _child_host_lost(self, event: ChildHostLost) -> None:
        child = self._current(event.name, event.generation)
        if child is None:
            return
        state = self._no_process(child)
        self._fail_part(child, "failed", HOST_LOST, event.message)
        if state == KILLING:
            child.state = child.then
        else:
            child.state, child.not_before = QUEUED, self._now  # at once, uncounted
            child.restart_reason = HOST_LOST
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
                child.state, child.not_before = QUEUED, self._now
                child.restart_reason = HOST_LOST

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
            if child is not None and child.state == READY:
                message = (
                    f"connector {name!r} did not finish {op.operation} in time; it was killed and restarted"
                )
                child.busy, child.not_before = None, self._now
                child.restart_reason = RESTART_DEADLINE
                self._kill(child, then=QUEUED)
            elif child is not None and child.state == STARTING:
                # Its own startup_timeout decides about it: killing it here would restart it without
                # counting, and operations that keep coming would keep a hung start from ever counting.
                message = f"connector {name!r} was still starting when the {op.operation} deadline passed"
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
        if child.state in (QUEUED, DOWN, WAITING, FAILED):
            if then in (DOWN, FAILED):
                child.state = then
            return
        child.then = then
        if child.state == KILLING:
            return
        child.state = KILLING
        child.startup_deadline = child.shutdown_deadline = NEVER
        child.kill_attempt, child.kill_check_at = 0, self._now + kill_check_delay(0)
        self._effects.append(Kill(child.name, child.generation, child.pid, child.where))

    def _failed(
        self, child: _Child, why: str, *, abnormal: bool, gone: bool = False, start: str | None = None
    ) -> None:
        """An exit or startup failure nobody asked for: restart per type, strategy and intensity.

        ``start``: the child was starting (START_TIMEOUT or CRASH_LOOP): it is not up, its part
        fails with that reason, and no sibling is taken with it.
        """
        name = child.name
        operation = self._op.operation if self._op else "operation"
        if start is not None:
            child.start_failures += 1
            child.down_reason, child.down_why = start, f"its start failed ({why})"
            self._fail_part(child, "failed", start, f"connector {name!r} did not start ({why})")
        else:
            self._fail_part(
                child, "failed", "connector-crashed", f"connector {name!r} crashed during {operation} ({why})"
            )
        if self._stopping is not None or not should_restart(child.spec.restart, abnormal=abnormal):
            if gone:
                child.state = DOWN
            else:
                self._kill(child, then=DOWN)
            return
        child.restarts += 1
        child.restart_reason = START_TIMEOUT if start == START_TIMEOUT else RESTART_CRASH
        assert child.intensity is not None
        within_period = child.intensity.record(self._now)
        if within_period or child.start_failures > self._settings.max_restarts:
            self._give_up(child, why, gone=gone, in_a_row=not within_period)
            return
        delay = child.backoff.next_delay(self._now, self._rng)
        strategy = self._settings.strategy
        if start is not None:
            targets = [name]  # siblings share no state with a connector that never started
        else:
            running = [c.name for c in self._children if c.state not in (DOWN, FAILED)]
            targets = restart_targets(strategy, running, name)
        for target_name in targets:
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
                if target.state in (STARTING, READY):
                    target.restart_reason = RESTART_CRASH
            target.not_before = self._now + delay
            if target is child and gone:
                target.state = QUEUED
            else:
                self._kill(target, then=QUEUED)
        _log.warning("connector %s failed (%s); restarting in %.2fs", name, why, delay)

    def _give_up(self, child: _Child, why: str, *, gone: bool, in_a_row: bool) -> None:
        """Restart intensity exceeded for ``child``: FAILED, tried again every ``failed_retry``."""
        settings = self._settings
        if in_a_row:
            limit = f"{child.start_failures} failed starts in a row"
        else:
            limit = f"more than {settings.max_restarts} restarts within {settings.period:g}s"
        message = (
            f"connector {child.name!r} failed ({why}): {limit} (supervisor.max_restarts: "
            f"{settings.max_restarts}); marked failed, the others go on; tried again every "
            f"{settings.failed_retry:g}s (supervisor.failed_retry)"
        )
        _log.error("%s", message)
        if child.down_reason is None:
            child.down_reason, child.down_why = CRASH_LOOP, f"it kept crashing ({why})"
        child.not_before = self._now + settings.failed_retry
        child.restart_reason = RESTART_RETRY
        if gone:
            child.state = FAILED
        else:
            self._kill(child, then=FAILED)
        self._effects.append(Escalate(child.name, message))

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
                self._failed(child, why, abnormal=True, start=START_TIMEOUT)
            elif child.state == READY and now >= child.shutdown_deadline:
                self._kill(child, then=DOWN)
        if self._op is not None and now >= self._op.deadline:
            self._deadline()
        self._send_progress()

    def _pump(self) -> None:
        """Spawn every queued child whose time has come (and a FAILED one whose retry is due)."""
        if self._stopping is not None:
            return
        for child in self._children:
            if child.state not in (QUEUED, FAILED) or self._now < child.not_before:
                continue
            if child.state == FAILED:
                # One fresh try: a failed start marks it FAILED again at once, an answer clears it.
                assert child.intensity is not None
                child.intensity.reset()
                child.start_failures = self._settings.max_restarts
            self._next_generation += 1
            if child.generation:  # it had a process before: this spawn is a restart
                child.history.append((self._next_generation, child.restart_reason or RESTART_CRASH))
            child.generation, child.restart_reason = self._next_generation, None
            child.state, child.pid, child.where, child.busy = STARTING, None, None, None
            child.startup_deadline = self._now + self._settings.startup_timeout
            self._effects.append(Spawn(child.name, child.generation, child.spec))

    @staticmethod
    def _awaited(child: _Child) -> bool:
        """Whether a start or a cancel still waits for ``child``: on its way up, not known sick."""
        return child.state in UNSETTLED and child.down_reason is None

    def _settle(self) -> bool:
        """Answer the requests waiting for the children to settle; True if new children came in."""
        if self._stopping is not None:
            if all(c.state == DOWN for c in self._children):
                return self._stopped()
            return False
        if not (self._ready_waiters or self._cancel_waiters):
            return False
        if any(self._awaited(c) for c in self._children):
            return False
        statuses = self.statuses()
        for request_id, reply_to in self._ready_waiters:
            self._effects.append(Reply(reply_to, m.Ready(request_id, statuses, self._pid, self._sid)))
        for request_id, reply_to in self._cancel_waiters:
            self._effects.append(Reply(reply_to, m.Cancelled(request_id, statuses)))
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
        self._install(stopping.replacement.settings, stopping.replacement.children)
        self._ready_waiters.append((stopping.request_id, stopping.reply_to))
        return True

    def _next_due(self) -> float:
        """The earliest moment a rule fires on its own (a backoff ends, a deadline passes)."""
        due = self._op.deadline if self._op is not None else NEVER
        if self._op is not None and self._op.progress_pending is not None:
            due = min(due, self._op.progress_sent_at + PROGRESS_INTERVAL)
        spawning = self._stopping is None
        for child in self._children:
            if child.state in (QUEUED, FAILED) and spawning and child.not_before > self._now:
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
