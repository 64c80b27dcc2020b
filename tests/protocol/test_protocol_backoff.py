"""The retry arithmetic, on a controlled clock and random source: no sleeping here."""

from __future__ import annotations

import random

import pytest

from servo_actors.config.optimizer_section import Backoff
from servo_actors.protocol.backoff import (
    JITTER,
    MIN_DELAY,
    BackoffPolicy,
    RetrySchedule,
    refusal_delay,
    retry_delay,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_doubles_from_min_and_caps_at_max() -> None:
    policy = BackoffPolicy(min=1.0, max=10.0, max_time=100.0, jitter=0.0)
    assert [retry_delay(policy, n, random.Random(1)) for n in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert retry_delay(policy, 10_000, random.Random(1)) == 10.0  # no float overflow


@pytest.mark.parametrize("seed", range(20))
def test_jitter_stays_within_min_and_max(seed: int) -> None:
    policy = BackoffPolicy(min=1.0, max=10.0, max_time=100.0)
    rng = random.Random(seed)
    for attempt in range(12):
        base = min(2.0**attempt, 10.0)
        delay = retry_delay(policy, attempt, rng)
        assert 1.0 <= delay <= 10.0
        assert base * (1 - JITTER / 2) - 1e-9 <= delay <= base * (1 + JITTER / 2) + 1e-9


def test_jitter_spreads_servos_apart() -> None:
    policy = BackoffPolicy(min=1.0, max=60.0, max_time=600.0)
    delays = {retry_delay(policy, 3, random.Random(seed)) for seed in range(10)}
    assert len(delays) == 10


def test_refusal_waits_at_least_max() -> None:
    policy = BackoffPolicy(min=0.1, max=5.0, max_time=60.0)
    rng = random.Random(3)
    assert all(5.0 <= refusal_delay(policy, rng) <= 5.0 * (1 + JITTER) for _ in range(100))


def test_zero_min_cannot_make_a_hot_loop() -> None:
    policy = BackoffPolicy(min=0.0, max=0.0, max_time=1.0)
    assert retry_delay(policy, 0, random.Random(0)) >= MIN_DELAY
    assert refusal_delay(policy, random.Random(0)) >= MIN_DELAY


def test_from_config() -> None:
    policy = BackoffPolicy.from_config(Backoff(min="250ms", max="1m", max_time="10m"))
    assert (policy.min, policy.max, policy.max_time) == (0.25, 60.0, 600.0)


def test_result_schedule_gives_up_once_the_next_attempt_would_pass_max_time() -> None:
    clock = FakeClock()
    schedule = RetrySchedule(
        BackoffPolicy(min=1.0, max=4.0, max_time=10.0, jitter=0.0),
        gives_up=True,
        clock=clock,
        rng=random.Random(0),
    )
    waited = []
    while (delay := schedule.next_delay()) is not None:
        waited.append(delay)
        clock.now += delay + 0.1  # the attempt itself takes a little time
    assert waited == [1.0, 2.0, 4.0]  # 7.3 s elapsed; another 4 s would pass 10 s
    assert schedule.elapsed() <= 10.0


def test_polling_schedule_never_gives_up_and_goes_on_at_max_after_max_time() -> None:
    clock = FakeClock()
    policy = BackoffPolicy(min=0.5, max=30.0, max_time=2.0, jitter=0.0)
    schedule = RetrySchedule(policy, gives_up=False, clock=clock, rng=random.Random(0))
    first = [schedule.next_delay() for _ in range(3)]
    assert first == [0.5, 1.0, 2.0]  # before max_time: exponential
    clock.now += 2.0
    assert [schedule.next_delay() for _ in range(3)] == [30.0, 30.0, 30.0]  # past it: max, forever
    clock.now += 10**6
    assert schedule.next_delay() == 30.0


def test_at_least_lengthens_a_wait_and_counts_toward_giving_up() -> None:
    clock = FakeClock()
    policy = BackoffPolicy(min=0.1, max=1.0, max_time=5.0, jitter=0.0)
    schedule = RetrySchedule(policy, gives_up=True, clock=clock, rng=random.Random(0))
    assert schedule.next_delay(at_least=3.0) == 3.0
    clock.now += 3.0
    assert schedule.next_delay(at_least=3.0) is None  # 3 + 3 > 5
