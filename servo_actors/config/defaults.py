"""The supervisor's defaults, written once (durations in seconds).

``config/supervisor_section.py`` and ``config/models.py`` declare them as the defaults of
``supervisor.*`` and ``connectors[].restart`` in servo.yaml; ``actors/rules/messages.py`` gives
them to ``ChildSpec`` and ``SupervisorSettings``, so a spec or settings built in code (tests,
benchmarks) behaves as an empty servo.yaml would.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BACKOFF_JITTER",
    "BACKOFF_MAX",
    "BACKOFF_MIN",
    "DESCENDANT_TRACKING",
    "FAILED_RETRY",
    "LIVENESS_IDLE_INTERVAL",
    "LIVENESS_INTERVAL",
    "LIVENESS_TIMEOUT",
    "MAX_RESTARTS",
    "MAX_RESULT_BYTES",
    "OPERATION_GRACE",
    "PERIOD",
    "RESTART",
    "SHUTDOWN_TIMEOUT",
    "STARTUP_TIMEOUT",
    "STRATEGY",
]

STRATEGY: Final = "one_for_one"
"""What a crash restarts (supervisor.strategy)."""
MAX_RESTARTS: Final = 5
"""Restart intensity: restarts within PERIOD before a connector is marked failed (supervisor.max_restarts)."""
PERIOD: Final = 30.0
"""The window of the restart intensity (supervisor.period)."""
SHUTDOWN_TIMEOUT: Final = 1.0
"""Grace before SIGKILL when stopping a connector (supervisor.shutdown_timeout)."""
BACKOFF_MIN: Final = 0.1
"""Delay before the first restart after a crash (supervisor.restart_backoff.min)."""
BACKOFF_MAX: Final = 30.0
"""Longest delay between restarts (supervisor.restart_backoff.max)."""
BACKOFF_JITTER: Final = 0.2
"""Random spread of a restart delay, as a fraction of it (supervisor.restart_backoff.jitter)."""
OPERATION_GRACE: Final = 30.0
"""Added to an operation's expected time for its deadline (supervisor.operation_grace)."""
STARTUP_TIMEOUT: Final = 30.0
"""How long a fresh connector's startup() may take (supervisor.startup_timeout)."""
FAILED_RETRY: Final = 300.0
"""How often a connector marked failed is tried again (supervisor.failed_retry)."""
MAX_RESULT_BYTES: Final = 4 * 1024 * 1024
"""Most bytes one connector's result may pickle to (supervisor.max_result_bytes)."""
DESCENDANT_TRACKING: Final = "auto"
"""How the processes a connector starts are contained (supervisor.descendant_tracking)."""
LIVENESS_INTERVAL: Final = 1.0
"""How often the servo pings its supervisor while busy (supervisor.liveness.interval)."""
LIVENESS_IDLE_INTERVAL: Final = 5.0
"""How often it pings, and how often the supervisor looks at its children, while idle (a SLEEP,
nothing in flight: supervisor.liveness.idle_interval)."""
LIVENESS_TIMEOUT: Final = 5.0
"""A ping unanswered this long: the actor system is lost (supervisor.liveness.timeout)."""
RESTART: Final = "permanent"
"""When a connector is restarted (connectors[].restart)."""
