"""HealthState: what /healthz and /readyz answer, driven by a fake clock."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from servo_actors.observability.health import HealthState


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_healthy_while_the_loop_turns_within_the_bound_and_unhealthy_past_it() -> None:
    clock = Clock()
    state = HealthState(stall_after=5.0, clock=clock)
    clock.now += 5.0
    assert state.liveness().ok
    clock.now += 0.1
    verdict = state.liveness()
    assert not verdict.ok
    assert verdict.body["status"] == "unhealthy"
    assert verdict.body["reasons"] == [
        "the control loop has not turned for 5.1s (settings.metrics.stall_after: 5s)"
    ]
    assert verdict.body["last_turn_seconds_ago"] == 5.1
    state.turned()
    assert state.liveness().ok and state.liveness().body["reasons"] == []


def test_the_actor_system_answering_is_no_turn_while_a_request_to_the_optimizer_hangs() -> None:
    # The runner checks its actor system while it waits on the optimizer: those answers must not
    # hide a hung request.
    clock = Clock()
    state = HealthState(stall_after=5.0, clock=clock)
    state.actor_system_answered()
    state.request_began()
    for _ in range(4):
        clock.now += 2.0
        state.actor_system_answered()
    assert not state.liveness().ok
    state.request_ended()
    state.turned()  # the request completed
    assert state.liveness().ok
    clock.now += 4.0
    state.actor_system_answered()  # no request open: a turn
    clock.now += 4.0
    assert state.liveness().ok


def test_ready_needs_started_connectors_and_a_reached_optimizer_and_says_which_is_missing() -> None:
    state = HealthState(stall_after=5.0, clock=Clock())
    body = state.readiness().body
    assert not state.readiness().ok
    assert body["connectors"] == "the connectors are starting"
    assert body["optimizer"] == "the optimizer has not been reached yet"
    state.connectors_ready()
    state.optimizer_failed("POST WHATS_NEXT: HTTP 503")
    assert state.readiness().body["reasons"] == [
        "the last request to the optimizer failed: POST WHATS_NEXT: HTTP 503"
    ]
    state.optimizer_answered()
    assert state.readiness().ok and state.readiness().body["status"] == "ready"
    state.connectors_down("a microreboot is under way (the supervisor died)")
    assert state.readiness().body["reasons"] == ["a microreboot is under way (the supervisor died)"]


def test_both_bodies_name_the_command_in_hand() -> None:
    state = HealthState(stall_after=5.0, clock=Clock())
    state.command("MEASURE c3")
    assert state.liveness().body["command"] == state.readiness().body["command"] == "MEASURE c3"


def test_a_run_that_ended_is_unhealthy_and_not_ready_saying_why_however_recent_its_last_turn() -> None:
    state = HealthState(stall_after=5.0, clock=Clock())
    state.connectors_ready()
    state.optimizer_answered()
    state.ended("the supervisor gave up")
    assert state.liveness().body["reasons"] == ["the run ended: the supervisor gave up"]
    assert not state.readiness().ok and "the run ended" in state.readiness().body["connectors"]


@given(
    st.lists(st.floats(min_value=0.0, max_value=20.0), max_size=20), st.floats(min_value=0.1, max_value=10.0)
)
def test_liveness_is_exactly_whether_the_last_turn_is_within_stall_after(
    gaps: list[float], bound: float
) -> None:
    clock = Clock()
    state = HealthState(stall_after=bound, clock=clock)
    last = clock.now
    for gap in gaps:
        clock.now += gap
        assert state.liveness().ok == (clock.now - last <= bound)
        if gap < bound / 2:  # turns now and then
            state.turned()
            last = clock.now
