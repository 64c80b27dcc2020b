"""Restart rules as pure functions and small classes: which children restart, how often, how soon.

Nothing here touches processes or reads the clock: callers pass ``now`` (seconds on a monotonic
clock) and a ``random.Random`` for jitter, so the rules are tested without sleeping.

The rules follow Erlang/OTP's ``supervisor``:

- restart type: ``permanent`` children always restart, ``transient`` ones only after an abnormal
  exit, ``temporary`` ones never (and are then forgotten).
- strategy: which siblings restart with a crashed child (``one_for_one``: none; ``one_for_all``:
  all; ``rest_for_one``: the ones started after it).
- intensity: more than ``max_restarts`` restarts within ``period`` seconds and the supervisor gives
  up instead of looping.

Added to OTP: exponential backoff with jitter between restarts of a child that keeps crashing,
forgotten once the child has been quiet for ``period`` seconds.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "RESTART_TYPES",
    "RestartBackoff",
    "RestartIntensity",
    "STRATEGIES",
    "restart_targets",
    "should_restart",
]

RESTART_TYPES = ("permanent", "transient", "temporary")
STRATEGIES = ("one_for_one", "one_for_all", "rest_for_one")


def should_restart(restart: str, *, abnormal: bool) -> bool:
    """Whether a child of this restart type comes back after exiting (``abnormal``: not exit code 0)."""
    if restart == "permanent":
        return True
    if restart == "transient":
        return abnormal
    if restart == "temporary":
        return False
    raise ValueError(f"unknown restart type {restart!r} (expected one of {', '.join(RESTART_TYPES)})")


def restart_targets(strategy: str, order: Sequence[str], crashed: str) -> list[str]:
    """The children to stop and start again, in start order, when ``crashed`` must restart.

    ``order`` is every running child in start order; ``crashed`` is always part of the answer.
    """
    if crashed not in order:
        raise ValueError(f"{crashed!r} is not one of the children {list(order)}")
    if strategy == "one_for_one":
        return [crashed]
    if strategy == "one_for_all":
        return list(order)
    if strategy == "rest_for_one":
        return list(order[order.index(crashed) :])
    raise ValueError(f"unknown strategy {strategy!r} (expected one of {', '.join(STRATEGIES)})")


@dataclass
class RestartIntensity:
    """Counts restarts in a sliding window; ``record`` says when the limit is exceeded.

    >>> limit = RestartIntensity(max_restarts=1, period=10.0)
    >>> limit.record(0.0), limit.record(5.0), limit.record(30.0)
    (False, True, False)
    """

    max_restarts: int
    period: float
    _times: deque[float] = field(default_factory=deque, repr=False)

    def record(self, now: float) -> bool:
        """Count one restart at ``now``; True when that makes more than ``max_restarts`` in ``period``."""
        self._times.append(now)
        while self._times and self._times[0] <= now - self.period:
            self._times.popleft()
        return len(self._times) > self.max_restarts

    def reset(self) -> None:
        self._times.clear()

    @property
    def recent(self) -> int:
        """Restarts counted in the current window (as of the last ``record``)."""
        return len(self._times)


@dataclass
class RestartBackoff:
    """Delay before restarting a child that keeps crashing: 0, then ``minimum`` doubling to ``maximum``.

    The first crash after a quiet spell restarts at once (a single crash is not a loop); each further
    crash within ``quiet_period`` of the previous one doubles the delay. ``jitter`` spreads each delay
    by up to that fraction either way, so children crashing together do not restart in lockstep.
    """

    minimum: float
    maximum: float
    jitter: float
    quiet_period: float
    _streak: int = 0
    _last_crash: float | None = None

    def next_delay(self, now: float, rng: random.Random) -> float:
        """Record a crash at ``now`` and return how long to wait before the restart."""
        if self._last_crash is None or now - self._last_crash >= self.quiet_period:
            self._streak = 0
        self._last_crash = now
        self._streak += 1
        if self._streak == 1:
            return 0.0
        # Cap the exponent too: a float overflow would be a bug waiting for a long crash loop.
        base = min(self.maximum, self.minimum * 2.0 ** min(self._streak - 2, 62))
        spread = base * self.jitter * (2.0 * rng.random() - 1.0)
        return max(0.0, min(self.maximum, base + spread))

    def reset(self) -> None:
        self._streak = 0
        self._last_crash = None

    @property
    def streak(self) -> int:
        """Crashes in the current streak (0 after a reset)."""
        return self._streak
