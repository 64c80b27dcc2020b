"""``wait``: a connector that only lets time pass during a measurement, reporting progress.

Useful when the metrics come from elsewhere (Prometheus scrapes the app while load runs) and the
servo just has to hold the measurement open for ``warmup + duration + delay``. It describes
nothing and returns no metrics::

    connectors:
      - name: hold
        type: wait
        config: {progress_interval: 5s}

``wait_with_progress`` is the waiting loop itself; other built-in connectors (``synthetic``,
``loadgen``) reuse it for their own timed phases.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pydantic import field_validator

from servo_actors.config.fields import Duration, StrictModel
from servo_actors.connectors.base import Connector, Control, ProgressFn
from servo_actors.durations import format_duration

__all__ = [
    "DEFAULT_PROGRESS_INTERVAL",
    "WaitConfig",
    "WaitConnector",
    "wait_with_progress",
]

DEFAULT_PROGRESS_INTERVAL = 1.0
"""Seconds between two progress reports while waiting."""


def wait_with_progress(
    seconds: float,
    progress: ProgressFn,
    *,
    interval: float,
    message: Callable[[float], str],
    start_percent: float = 0.0,
    end_percent: float = 100.0,
) -> None:
    """Sleep ``seconds`` in steps of at most ``interval``, calling ``progress`` after each step.

    Progress goes linearly from ``start_percent`` to ``end_percent``; ``message(elapsed)`` gives
    the text of each report. A zero wait still reports ``end_percent`` once, so a caller always
    hears that the phase is over. The deadline is on the monotonic clock, so a slow progress
    callback shortens the next sleep instead of stretching the wait.
    """
    if interval <= 0:
        raise ValueError(f"progress interval must be more than 0, not {interval}")
    began = time.monotonic()
    deadline = began + seconds
    while True:
        remaining = deadline - time.monotonic()
        if remaining > 0:
            time.sleep(min(interval, remaining))
        elapsed = min(time.monotonic() - began, seconds)
        fraction = elapsed / seconds if seconds > 0 else 1.0
        percent = start_percent + (end_percent - start_percent) * fraction
        progress(round(percent), message(elapsed))
        if time.monotonic() >= deadline:
            return


class WaitConfig(StrictModel):
    """Configuration of ``wait``."""

    progress_interval: Duration = DEFAULT_PROGRESS_INTERVAL

    @field_validator("progress_interval")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be more than 0")
        return value


class WaitConnector(Connector):
    """Waits ``warmup + duration + delay`` on every MEASURE; describes and returns nothing."""

    config_model = WaitConfig
    config: WaitConfig

    def measure(self, metrics: list[str], control: Control, progress: ProgressFn) -> dict[str, Any]:
        total = control.warmup + control.duration + control.delay
        wait_with_progress(
            total,
            progress,
            interval=self.config.progress_interval,
            message=lambda elapsed: f"waited {format_duration(elapsed)} of {format_duration(total)}",
        )
        return {"metrics": {}, "annotations": {}}
