"""Retry arithmetic for the optimizer client: when to try again, and when to give up.

Pure: the random source and the clock are arguments, so the rules are tested without sleeping.

- Retry ``n`` (0 = the first) waits ``min * 2**n``, spread by ``±jitter/2`` and kept within
  ``[min, max]``: the first retry comes after about ``min``, and no wait exceeds ``max``.
- After a refusal (401, 403, 400...) the wait is at least ``max``: a refused servo never hammers.
- A schedule that gives up (result posts) ends once the next attempt would start after
  ``max_time``; one that never gives up (WHATS_NEXT polling) goes on, at ``max`` once ``max_time``
  has passed.

>>> import random
>>> policy = BackoffPolicy(min=1.0, max=8.0, max_time=20.0, jitter=0.0)
>>> [retry_delay(policy, n, random.Random(0)) for n in range(5)]
[1.0, 2.0, 4.0, 8.0, 8.0]
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from servo_actors.config.optimizer_section import Backoff

__all__ = [
    "BackoffPolicy",
    "JITTER",
    "MIN_DELAY",
    "RetrySchedule",
    "refusal_delay",
    "retry_delay",
]

JITTER = 0.2
"""Spread of each wait, as a fraction of it: waits of servos that failed together drift apart."""
MIN_DELAY = 0.01
"""No wait is shorter than this, whatever the config says: ``min: 0`` must not make a hot loop."""
_MAX_DOUBLINGS = 64  # 2**64 * any sane min is past any max; keeps the float from overflowing


@dataclass(frozen=True)
class BackoffPolicy:
    """``min``/``max``/``max_time`` in seconds, as ``settings.backoff`` gives them."""

    min: float
    max: float
    max_time: float
    jitter: float = JITTER

    def __post_init__(self) -> None:
        # Frozen dataclass: normalize through object.__setattr__ so every use sees the floor.
        floor = max(self.min, MIN_DELAY)
        object.__setattr__(self, "min", floor)
        object.__setattr__(self, "max", max(self.max, floor))

    @classmethod
    def from_config(cls, backoff: Backoff) -> BackoffPolicy:
        return cls(min=backoff.min, max=backoff.max, max_time=backoff.max_time)


def retry_delay(policy: BackoffPolicy, attempt: int, rng: random.Random) -> float:
    """The wait before retry number ``attempt`` (0 = the first retry), within ``[min, max]``."""
    base = min(policy.min * 2.0 ** min(max(attempt, 0), _MAX_DOUBLINGS), policy.max)
    spread = 1.0 + policy.jitter * (rng.random() - 0.5)
    return min(policy.max, max(policy.min, base * spread))


def refusal_delay(policy: BackoffPolicy, rng: random.Random) -> float:
    """The wait after a refusal (401, 403, 400...): ``max``, lengthened by up to ``jitter``."""
    return policy.max * (1.0 + policy.jitter * rng.random())


class RetrySchedule:
    """The retries of one logical call (one result post, or polling until a command comes).

    ``next_delay()`` after each failed attempt says how long to wait, or None to give up.
    """

    def __init__(
        self,
        policy: BackoffPolicy,
        *,
        gives_up: bool,
        clock: Callable[[], float],
        rng: random.Random,
    ) -> None:
        self.policy = policy
        self.gives_up = gives_up
        self._clock = clock
        self._rng = rng
        self.started_at = clock()
        self.failures = 0

    def elapsed(self) -> float:
        return self._clock() - self.started_at

    def next_delay(self, *, at_least: float = 0.0) -> float | None:
        """The wait before the next attempt, at least ``at_least``; None when it is time to give up."""
        elapsed = self.elapsed()
        attempt = self.failures
        if not self.gives_up and elapsed >= self.policy.max_time:
            attempt = _MAX_DOUBLINGS  # past max_time polling goes on at max
        delay = max(retry_delay(self.policy, attempt, self._rng), at_least)
        self.failures += 1
        if self.gives_up and elapsed + delay > self.policy.max_time:
            return None
        return delay
