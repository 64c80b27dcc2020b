"""The supervision rules under random interleavings of everything that can happen (hypothesis).

Operations, cancels, reconfigures, answers from current and replaced processes, crashes with any
exit code, failed startups, lost exit notices and time passing, in any order. After every step:

- never two generations of one child alive;
- no child stays starting past its startup deadline (it is killed, and a new one started);
- no request is answered twice.

Exit notices may be lost (then the process check or a repeated kill finds the exit) or arrive
twice, late; answers may come from processes already replaced.

And once the world calms down (notices arrive again, processes answer, time passes): every
operation, cancel and start has been answered exactly once, and every child is ready again,
unless its restart intensity was exceeded: then it is failed (escalated once for each time),
with no process, and the others are ready.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from supervision_world import SupervisionWorld, child_spec

from servo_actors.actors.rules import messages as m
from servo_actors.actors.rules.supervision_events import ChildExited
from servo_actors.connectors.base import Control

NAMES = ("a", "b", "c")
STARTUP_TIMEOUT = 5.0
SHUTDOWN_TIMEOUT = 1.0
BACKOFF_MAX = 2.0
CALM_ROUNDS = 40
"""Rounds of "every process answers, time passes" after which everything must have settled."""
CALM_STEP = 10.0
"""Seconds per calm round: past every backoff, startup and shutdown timeout."""


class SupervisionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.world = SupervisionWorld()
        self.settings = m.SupervisorSettings()
        self.waiting: list[str] = []
        """Requests (start, operations, cancels, reconfigures) that must be answered once."""
        self.replied: set[tuple[int, str]] = set()

    @initialize(
        strategy=st.sampled_from(["one_for_one", "one_for_all", "rest_for_one"]),
        max_restarts=st.integers(1, 30),
        seed=st.integers(0, 2**16),
    )
    def start(self, strategy: str, max_restarts: int, seed: int) -> None:
        self.world = SupervisionWorld(seed=seed)
        chosen = {
            "strategy": strategy,
            "max_restarts": max_restarts,
            "period": 20.0,
            "backoff_min": 0.1,
            "backoff_max": BACKOFF_MAX,
            "operation_grace": 3.0,
            "startup_timeout": STARTUP_TIMEOUT,
        }
        self.settings = m.SupervisorSettings(**chosen)
        self.waiting.append(self.world.start(*self._specs(), **chosen))

    def _specs(self) -> tuple[m.ChildSpec, ...]:
        return tuple(child_spec(name, shutdown_timeout=SHUTDOWN_TIMEOUT) for name in NAMES)

    def _state(self, name: str) -> str | None:
        return self.world.states().get(name)

    def _newest_alive(self, name: str) -> Any:
        proc = self.world.current(name)
        return proc if proc is not None and proc.alive else None

    # ----- what the processes do ---------------------------------------------------------------

    @rule(name=st.sampled_from(NAMES))
    def startup_returns(self, name: str) -> None:
        if self._state(name) == "starting" and self._newest_alive(name):
            self.world.ready(name)

    @rule(name=st.sampled_from(NAMES))
    def startup_raises(self, name: str) -> None:
        if self._state(name) == "starting" and self._newest_alive(name):
            self.world.startup_fails(name)

    @rule(name=st.sampled_from(NAMES), code=st.sampled_from([0, 3, -9, -11, None]), notice=st.booleans())
    def process_exits(self, name: str, code: int | None, notice: bool) -> None:
        if self._newest_alive(name):
            self.world.exits(name, code, notice=notice)

    @rule(pick=st.integers(0, 50), ok=st.booleans())
    def process_answers(self, pick: int, ok: bool) -> None:
        """Some process (of any generation, replaced or not) answers a call it was sent."""
        calls = [
            (proc, call)
            for proc in self.world.processes.values()
            for call in proc.calls()
            if (proc.generation, call.request_id) not in self.replied
        ]
        if calls:
            proc, call = calls[pick % len(calls)]
            self.replied.add((proc.generation, call.request_id))
            self.world.reply(proc.name, call.request_id, "ok" if ok else "failed", generation=proc.generation)

    @rule(name=st.sampled_from(NAMES))
    def shutdown_returns(self, name: str) -> None:
        proc = self._newest_alive(name)
        if proc is not None and any(isinstance(msg, m.HostShutdown) for msg in proc.inbox):
            self.world.shutdown_done(name)

    @rule(pick=st.integers(0, 50))
    def duplicate_exit_notice(self, pick: int) -> None:
        """Thespian repeats exit notices, late: one for a process that is long gone arrives again."""
        gone = [proc for proc in self.world.processes.values() if proc.reported]
        if gone:
            proc = gone[pick % len(gone)]
            self.world.feed(ChildExited(proc.name, proc.generation, proc.exit_code))

    @rule(lose=st.booleans())
    def exit_notices(self, lose: bool) -> None:
        self.world.lose_exit_notices = lose

    @rule()
    def process_check(self) -> None:
        self.world.poll()

    # ----- what the runtime does ---------------------------------------------------------------

    @rule(operation=st.sampled_from(["describe", "check", "measure", "adjust"]), seconds=st.floats(0, 4))
    def begin(self, operation: str, seconds: float) -> None:
        self.waiting.append(self.world.begin(operation, Control(duration=seconds)))

    @rule(name_the_operation=st.booleans())
    def cancel(self, name_the_operation: bool) -> None:
        operations = [r for r in self.waiting if not r.startswith(("start", "cancel", "reconfigure"))]
        operation_id = operations[-1] if name_the_operation and operations else None
        self.waiting.append(self.world.cancel(operation_id))

    @rule()
    def reconfigure(self) -> None:
        request = self.world.new_id("reconfigure")
        self.world.stop(m.Reconfigure(request, self.settings, self._specs()))
        self.waiting.append(request)

    @rule(seconds=st.sampled_from([0.0, 0.001, 0.01, 0.1, 0.5, 1.0, 3.0, 6.0]))
    def time_passes(self, seconds: float) -> None:
        self.world.advance(seconds)

    # ----- always ------------------------------------------------------------------------------

    @invariant()
    def never_two_generations_of_one_child_alive(self) -> None:
        generations = self.world.generations()
        for name in NAMES:
            alive = self.world.alive(name)
            assert len(alive) <= 1, (name, alive)
            if alive:
                assert alive[0].generation == generations.get(name), (name, alive, generations)

    @invariant()
    def no_child_starting_past_its_deadline(self) -> None:
        for status in self.world.rules.statuses():
            if status.state == "starting":
                proc = self.world.processes[status.generation]
                assert self.world.now <= proc.spawned_at + STARTUP_TIMEOUT, (status, proc)

    @invariant()
    def nothing_answered_twice(self) -> None:
        for request, answers in self.world.answers.items():
            assert len(answers) <= 1, (request, answers)

    def teardown(self) -> None:
        world = self.world
        if not self.waiting:
            return  # initialize did not run
        world.lose_exit_notices = False
        world.poll()
        for _ in range(CALM_ROUNDS):
            world.ready_all()
            for name in NAMES:
                self.shutdown_returns(name)
            world.advance(CALM_STEP)
            if self._settled():
                break
        for request in self.waiting:
            assert len(world.answers.get(request, [])) == 1, (request, world.answers.get(request))
        states = world.states()
        assert set(states.values()) <= {"ready", "failed"}, states
        failed = {name for name, state in states.items() if state == "failed"}
        assert failed <= {e.connector for e in world.escalations}, (failed, world.escalations)
        assert all(world.alive(name) == [] for name in failed)

    def _settled(self) -> bool:
        states = set(self.world.states().values())
        answered = all(self.world.answers.get(r) for r in self.waiting)
        return answered and states <= {"ready", "failed"}


SupervisionMachine.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_supervision_properties = SupervisionMachine.TestCase
