"""A fake world for the supervision rules: a clock, processes and a runtime, all in memory.

``SupervisionWorld`` plays what the Thespian shell and the real processes do (trio's MockClock
and OTP's supervisor_SUITE are the models): it feeds events to a ``Supervision`` and performs
the effects that come back. ``Spawn`` makes a ``FakeProcess``; ``Kill`` ends one and reports its
exit (unless exit notices are being lost: then only a repeated ``Kill`` finds it gone, as the
shell's process check does); ``ScheduleWakeup`` goes on a timer list that ``advance`` delivers in
order as the fake clock moves. Nothing sleeps: a test of a 30-second backoff runs in microseconds.

The runtime side is played by ``start``/``begin``/``cancel``/``stop``, whose answers are collected
in ``answers`` (by request id, in arrival order, so "exactly once" can be checked).
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from servo_actors.actors.rules import messages as m
from servo_actors.actors.rules.results import ConnectorOutcome
from servo_actors.actors.rules.supervision import Supervision
from servo_actors.actors.rules.supervision_events import (
    CancelRequested,
    ChildExited,
    ChildProgressed,
    ChildReady,
    ChildReplied,
    ChildShutdownDone,
    ChildStarted,
    ChildStartupFailed,
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
from servo_actors.connectors.base import Control

RUNTIME = "runtime"
"""The address answers go to (the world plays the runtime)."""
KILLED = -9
"""Exit code of a SIGKILLed process, as the shell reports it."""


@dataclass
class FakeProcess:
    """One generation's process: alive until it crashes or is killed."""

    name: str
    generation: int
    pid: int
    spawned_at: float
    alive: bool = True
    exit_code: int | None = None
    reported: bool = False
    """Whether its exit has been reported to the rules."""
    inbox: list[Any] = field(default_factory=list)
    """``Host*`` messages the rules sent it."""

    def calls(self) -> list[m.HostCall]:
        return [msg for msg in self.inbox if isinstance(msg, m.HostCall)]


def child_spec(name: str, restart: str = "permanent", shutdown_timeout: float = 1.0) -> m.ChildSpec:
    return m.ChildSpec(name, "fake", restart, shutdown_timeout)


class SupervisionWorld:
    """Processes, clock and runtime around one ``Supervision`` (see module docstring)."""

    def __init__(self, *, seed: int = 0, now: float = 1000.0) -> None:
        self.now = now
        self.rules = Supervision(supervisor_pid=1, session_id=1, rng=random.Random(seed))
        self.processes: dict[int, FakeProcess] = {}
        self.answers: dict[str, list[Any]] = defaultdict(list)
        self.progress: list[m.Progress] = []
        self.kills: list[Kill] = []
        self.spawns: list[Spawn] = []
        self.escalations: list[Escalate] = []
        self.final_sweeps = 0
        self.lose_exit_notices = False
        self._timers: list[float] = []
        self._pids = itertools.count(100)
        self._ids = itertools.count(1)
        self.log: list[Any] = []
        """Every event fed and effect performed, in order (for a failing test's message)."""

    # ----- feeding the rules ---------------------------------------------------------------------

    def feed(self, *events: Event) -> None:
        pending = deque(events)
        while pending:
            event = pending.popleft()
            self.log.append(("event", self.now, event))
            for effect in self.rules.handle(event, self.now):
                self.log.append(("effect", self.now, effect))
                pending.extend(self._perform(effect))

    def _perform(self, effect: Any) -> list[Event]:
        if isinstance(effect, Spawn):
            self.spawns.append(effect)
            proc = FakeProcess(effect.name, effect.generation, next(self._pids), self.now)
            self.processes[effect.generation] = proc
            return [ChildStarted(effect.name, effect.generation, proc.pid)]
        if isinstance(effect, Kill):
            self.kills.append(effect)
            proc = self.processes.get(effect.generation)
            if proc is None or proc.reported:
                return [ChildExited(effect.name, effect.generation, None)] if proc is None else []
            if proc.alive:
                proc.alive, proc.exit_code = False, KILLED
                if self.lose_exit_notices:
                    return []
            proc.reported = True
            return [ChildExited(proc.name, proc.generation, proc.exit_code)]
        if isinstance(effect, SendToChild):
            proc = self.processes.get(effect.generation)
            if proc is not None and proc.alive:
                proc.inbox.append(effect.message)
        elif isinstance(effect, Reply):
            assert effect.to == RUNTIME, effect
            message = effect.message
            if isinstance(message, m.Progress):
                self.progress.append(message)
            else:
                self.answers[message.request_id].append(message)
        elif isinstance(effect, ScheduleWakeup):
            heapq.heappush(self._timers, effect.at)
        elif isinstance(effect, Escalate):
            self.escalations.append(effect)
        elif isinstance(effect, FinalSweep):
            self.final_sweeps += 1
        return []

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` on, delivering every wakeup that falls due on the way."""
        end = self.now + seconds
        while self._timers and self._timers[0] <= end:
            self.now = max(self.now, heapq.heappop(self._timers))
            self.feed(Tick())
        self.now = end

    @property
    def pending_wakeups(self) -> int:
        """Wakeups asked for and not delivered yet."""
        return len(self._timers)

    def next_wakeup(self) -> float | None:
        return self._timers[0] if self._timers else None

    # ----- the runtime's side --------------------------------------------------------------------

    def new_id(self, kind: str) -> str:
        return f"{kind}-{next(self._ids)}"

    def start(self, *specs: m.ChildSpec, **settings: Any) -> str:
        request_id = self.new_id("start")
        self.feed(StartRequested(request_id, m.SupervisorSettings(**settings), tuple(specs), RUNTIME))
        return request_id

    def begin(
        self,
        operation: str = "measure",
        control: Control | None = None,
        declared: dict[str, float] | None = None,
    ) -> str:
        request_id = self.new_id(operation)
        begin = m.Begin(request_id, operation, control=control or Control())
        self.feed(OperationRequested(begin, RUNTIME, declared or {}))
        return request_id

    def cancel(self, operation_id: str | None = None) -> str:
        request_id = self.new_id("cancel")
        self.feed(CancelRequested(request_id, operation_id, RUNTIME))
        return request_id

    def stop(self, replacement: m.Reconfigure | None = None) -> str:
        request_id = replacement.request_id if replacement is not None else self.new_id("stop")
        self.feed(StopRequested(request_id, RUNTIME, replacement))
        return request_id

    def answer(self, request_id: str) -> Any:
        """The one answer to ``request_id`` (fails if there is none or more than one)."""
        answers = self.answers.get(request_id, [])
        assert len(answers) == 1, (request_id, answers)
        return answers[0]

    # ----- the processes' side -------------------------------------------------------------------

    def current(self, name: str) -> FakeProcess | None:
        """The newest process of ``name`` (alive or not)."""
        found = [p for p in self.processes.values() if p.name == name]
        return max(found, key=lambda p: p.generation) if found else None

    def alive(self, name: str | None = None) -> list[FakeProcess]:
        return [p for p in self.processes.values() if p.alive and (name is None or p.name == name)]

    def ready(self, name: str) -> None:
        """The newest process of ``name`` finishes its startup."""
        proc = self.current(name)
        assert proc is not None and proc.alive, name
        self.feed(ChildReady(name, proc.generation, proc.pid))

    def ready_all(self) -> None:
        """Every process that has not answered yet answers (in start order, until none is left)."""
        while True:
            waiting = [c.name for c in self.rules.statuses() if c.state == "starting"]
            if not waiting:
                return
            self.ready(waiting[0])

    def startup_fails(self, name: str, error: str = "RuntimeError: boom") -> None:
        proc = self.current(name)
        assert proc is not None
        self.feed(ChildStartupFailed(name, proc.generation, error))

    def exits(self, name: str, exit_code: int | None, *, notice: bool | None = None) -> None:
        """The newest process of ``name`` exits by itself; its exit is reported if ``notice``
        (by default unless notices are being lost)."""
        proc = self.current(name)
        assert proc is not None and proc.alive, name
        proc.alive, proc.exit_code = False, exit_code
        if notice if notice is not None else not self.lose_exit_notices:
            proc.reported = True
            self.feed(ChildExited(name, proc.generation, exit_code))

    def poll(self) -> None:
        """The shell's periodic process check: exits whose notice was lost are reported."""
        for proc in list(self.processes.values()):
            if not proc.alive and not proc.reported:
                proc.reported = True
                self.feed(ChildExited(proc.name, proc.generation, proc.exit_code))

    def reply(
        self, name: str, request_id: str, status: str = "ok", *, generation: int | None = None, **data: Any
    ) -> None:
        """A process of ``name`` (the newest, or ``generation``) answers ``request_id``."""
        if generation is None:
            proc = self.current(name)
            assert proc is not None
            generation = proc.generation
        outcome = ConnectorOutcome(name, status, "success" if status == "ok" else "failed", None, data)
        self.feed(ChildReplied(name, generation, request_id, outcome))

    def report_progress(self, name: str, request_id: str, percent: float) -> None:
        proc = self.current(name)
        assert proc is not None
        self.feed(ChildProgressed(name, proc.generation, request_id, percent, f"{percent}%"))

    def shutdown_done(self, name: str) -> None:
        proc = self.current(name)
        assert proc is not None
        self.feed(ChildShutdownDone(name, proc.generation))

    # ----- what the rules say --------------------------------------------------------------------

    def states(self) -> dict[str, str]:
        return {c.name: c.state for c in self.rules.statuses()}

    def generations(self) -> dict[str, int]:
        return {c.name: c.generation for c in self.rules.statuses()}
