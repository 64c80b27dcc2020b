"""When to post progress for a running MEASURE or ADJUST, and what percentage to claim.

Pure: the clock is passed in, so the schedule is tested without sleeping.

>>> p = ProgressSchedule(started=100.0, expected_seconds=10.0, interval=5.0)
>>> p.next_due
105.0
>>> p.percent(now=102.0, reported=0.0)
20.0
>>> p.percent(now=102.0, reported=55.0)
55.0
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "ProgressSchedule",
    "RUNNING_CEILING",
]

# A running operation never claims to be done: 100 % is what the result says.
RUNNING_CEILING = 99.0


@dataclass
class ProgressSchedule:
    started: float
    expected_seconds: float
    interval: float
    next_due: float = field(init=False)

    def __post_init__(self) -> None:
        self.next_due = self.started + self.interval

    def percent(self, now: float, reported: float) -> float:
        """The larger of elapsed/expected time and what the connectors report, below 100."""
        by_time = 100.0 * (now - self.started) / self.expected_seconds if self.expected_seconds > 0 else 0.0
        return round(min(RUNNING_CEILING, max(0.0, by_time, reported)), 1)

    def runtime(self, now: float) -> float:
        return round(now - self.started, 3)

    def due(self, now: float) -> bool:
        return now >= self.next_due

    def sent(self, now: float) -> None:
        """A progress post went out at ``now``; the next is due one interval later (never in the past)."""
        self.next_due = max(self.next_due + self.interval, now + self.interval / 2)
