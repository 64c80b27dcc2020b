"""Restart rules against a controlled clock: no sleeps, no processes."""

from __future__ import annotations

import random

import pytest

from servo_actors.actors.rules.restart_policy import (
    RestartBackoff,
    RestartIntensity,
    restart_targets,
    should_restart,
)


@pytest.mark.parametrize(
    ("restart", "abnormal", "expected"),
    [
        ("permanent", True, True),
        ("permanent", False, True),
        ("transient", True, True),
        ("transient", False, False),
        ("temporary", True, False),
        ("temporary", False, False),
    ],
)
def test_restart_type_decides_whether_a_child_comes_back(
    restart: str, abnormal: bool, expected: bool
) -> None:
    assert should_restart(restart, abnormal=abnormal) is expected


def test_unknown_restart_type_is_named() -> None:
    with pytest.raises(ValueError, match="'sometimes'"):
        should_restart("sometimes", abnormal=True)


ORDER = ["a", "b", "c", "d"]


@pytest.mark.parametrize(
    ("strategy", "crashed", "expected"),
    [
        ("one_for_one", "b", ["b"]),
        ("one_for_all", "b", ["a", "b", "c", "d"]),
        ("rest_for_one", "b", ["b", "c", "d"]),
        ("rest_for_one", "d", ["d"]),
        ("rest_for_one", "a", ["a", "b", "c", "d"]),
    ],
)
def test_strategy_names_the_children_to_restart_in_start_order(
    strategy: str, crashed: str, expected: list[str]
) -> None:
    assert restart_targets(strategy, ORDER, crashed) == expected


def test_restart_targets_reject_unknown_strategy_and_child() -> None:
    with pytest.raises(ValueError, match="strategy"):
        restart_targets("all_for_none", ORDER, "a")
    with pytest.raises(ValueError, match="'z'"):
        restart_targets("one_for_one", ORDER, "z")


def test_intensity_allows_max_restarts_within_period_and_escalates_on_the_next() -> None:
    limit = RestartIntensity(max_restarts=3, period=10.0)
    assert [limit.record(t) for t in (0.0, 1.0, 2.0)] == [False, False, False]
    assert limit.record(3.0) is True


def test_intensity_forgets_restarts_older_than_period() -> None:
    limit = RestartIntensity(max_restarts=2, period=10.0)
    assert not limit.record(0.0)
    assert not limit.record(5.0)
    # t=0 has left the window (0 <= 12 - 10): two restarts in the window, not three.
    assert not limit.record(12.0)
    assert limit.recent == 2
    assert limit.record(14.0)


def test_zero_max_restarts_escalates_on_the_first_restart() -> None:
    assert RestartIntensity(max_restarts=0, period=30.0).record(0.0)


def _backoff(jitter: float = 0.0) -> RestartBackoff:
    return RestartBackoff(minimum=0.1, maximum=1.0, jitter=jitter, quiet_period=30.0)


def test_backoff_first_crash_restarts_at_once_then_doubles_up_to_maximum() -> None:
    backoff, rng = _backoff(), random.Random(1)
    delays = [backoff.next_delay(float(t), rng) for t in range(7)]
    assert delays == pytest.approx([0.0, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0])


def test_backoff_resets_after_a_quiet_period() -> None:
    backoff, rng = _backoff(), random.Random(1)
    for t in (0.0, 1.0, 2.0):
        backoff.next_delay(t, rng)
    assert backoff.streak == 3
    # Quiet for the whole period: the next crash is a first crash again.
    assert backoff.next_delay(32.0, rng) == 0.0
    assert backoff.next_delay(33.0, rng) == pytest.approx(0.1)


def test_backoff_jitter_stays_within_its_fraction_and_varies() -> None:
    rng = random.Random(7)
    seen = set()
    for _ in range(200):
        backoff = _backoff(jitter=0.2)
        backoff.next_delay(0.0, rng)
        delay = backoff.next_delay(1.0, rng)
        assert 0.08 <= delay <= 0.12
        seen.add(round(delay, 6))
    assert len(seen) > 50


def test_backoff_never_exceeds_maximum_even_after_a_long_crash_loop() -> None:
    backoff, rng = _backoff(jitter=1.0), random.Random(3)
    delays = [backoff.next_delay(t * 0.5, rng) for t in range(2000)]
    assert max(delays) <= 1.0
    assert min(delays) >= 0.0
