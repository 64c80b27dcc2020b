"""Models of servo.yaml's ``supervisor`` section: restart intensity and backoff, liveness,
microreboots, the convention of member systems and where a connector is placed."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from servo_actors.config import defaults
from servo_actors.config.fields import (
    CAPABILITY_PATTERN,
    DEFAULT_MAX_RESULT_BYTES,
    DescendantTracking,
    Duration,
    StrictModel,
    positive,
)
from servo_actors.endpoints import parse_endpoint

__all__ = [
    "ConventionConfig",
    "Heartbeat",
    "Liveness",
    "Microreboots",
    "PlacementConfig",
    "RestartBackoff",
    "SupervisorConfig",
]


class RestartBackoff(StrictModel):
    """Delay before restarting a crash-looping connector: exponential with jitter."""

    min: Duration = defaults.BACKOFF_MIN
    """Delay before the first restart after a crash."""
    max: Duration = defaults.BACKOFF_MAX
    """Longest delay between restarts."""
    jitter: float = Field(defaults.BACKOFF_JITTER, ge=0.0, le=1.0)
    """Random spread, as a fraction of the delay (0-1)."""

    @model_validator(mode="after")
    def _ordered(self) -> RestartBackoff:
        if self.min > self.max:
            raise ValueError("min must not exceed max")
        return self


class Liveness(StrictModel):
    """How the servo watches its own actor system (the supervisor, Thespian's admin and logger)."""

    interval: Duration = defaults.LIVENESS_INTERVAL
    """How often the supervisor is pinged (it answers at once in every state)."""
    idle_interval: Duration = defaults.LIVENESS_IDLE_INTERVAL
    """How often it is pinged while the servo is idle (a SLEEP, nothing in flight), and how often
    the supervisor then looks at its children's processes: an idle servo wakes rarely. A death is
    still noticed at once (Linux 5.3 and later: the servo waits on the processes' pidfds); a hang
    within ``idle_interval + timeout``; a connector's crash shows in /metrics within this."""
    timeout: Duration = defaults.LIVENESS_TIMEOUT
    """A ping unanswered, or one of those processes stopped, this long: the actor system is lost,
    killed and started afresh (a microreboot). A death is noticed within a fraction of a second.
    Generous: a supervisor forking dozens of fresh connectors on a loaded machine answers late."""

    _positive = field_validator("interval", "idle_interval", "timeout")(positive)


class Microreboots(StrictModel):
    """Restart intensity of the servo's own actor system: at most ``max`` microreboots within
    ``period``, else the run ends (GOODBYE failure, exit 1)."""

    max: int = Field(3, ge=0)
    """Microreboots allowed within period."""
    period: Duration = 300.0
    """The window of the microreboot intensity."""

    _period_positive = field_validator("period")(positive)


class Heartbeat(StrictModel):
    """How the servo and its member systems watch each other (both ways)."""

    interval: Duration = 1.0
    """How often each side sends a heartbeat."""
    timeout: Duration = 5.0
    """Silence after which the other side counts as lost: the servo fails the parts of that
    member's connectors (host-lost) and places them again; a member kills what it hosts."""

    _positive = field_validator("interval", "timeout")(positive)

    @model_validator(mode="after")
    def _timeout_above_interval(self) -> Heartbeat:
        if self.timeout <= self.interval:
            raise ValueError("timeout must be longer than interval (several heartbeats may be missed)")
        return self


class ConventionConfig(StrictModel):
    """Makes the servo's actor system the leader of a Thespian convention that member systems
    (``servo-actors agent``) join; connectors with a placement run on them."""

    listen: str
    """HOST:PORT this servo's actor system listens on (every socket of it, that address only); the
    agents' --join."""
    secret_file: str
    """File holding the key shared with every agent (at least 32 bytes, mode 600); relative to
    this file. Every message between the systems is authenticated with it."""
    heartbeat: Heartbeat = Heartbeat()
    placement_grace: Duration = 3.0
    """How long a placed connector waits for a member offering its capability before its parts
    fail with reason host-unavailable."""

    @field_validator("listen")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        return str(parse_endpoint(value))

    @field_validator("secret_file")
    @classmethod
    def _path_not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is empty")
        return value


class PlacementConfig(StrictModel):
    """Where a connector runs: on a member system offering this capability."""

    capability: str = Field(pattern=CAPABILITY_PATTERN)
    """The capability a member must offer (``servo-actors agent --capability NAME``)."""
    value: str | None = None
    """If set, the member must offer the capability with exactly this value (``NAME=VALUE``)."""


class SupervisorConfig(StrictModel):
    """Supervision of the connector processes (OTP-style; docs/recovery.md)."""

    # Each default is written once, in config/defaults.py (actors/messages.py uses them too).

    strategy: Literal["one_for_one", "one_for_all", "rest_for_one"] = defaults.STRATEGY
    """What a crash restarts: that connector, all of them, or it and those after it."""
    max_restarts: int = Field(defaults.MAX_RESTARTS, ge=0)
    """Restart intensity, per connector: more than this many restarts within period, or failed
    starts in a row, and the connector is marked failed (the others go on)."""
    period: Duration = defaults.PERIOD
    """The window of the restart intensity."""
    shutdown_timeout: Duration = defaults.SHUTDOWN_TIMEOUT
    """Grace before SIGKILL when stopping a connector (0: kill at once)."""
    restart_backoff: RestartBackoff = RestartBackoff()
    operation_grace: Duration = defaults.OPERATION_GRACE
    """Added to an operation's expected time (warmup + duration + delay + settlement) for its deadline."""
    startup_timeout: Duration = defaults.STARTUP_TIMEOUT
    """How long a fresh connector's startup() may take before it counts as a failed start (its
    part of each command then fails naming it; the servo does not wait for it)."""
    failed_retry: Duration = defaults.FAILED_RETRY
    """A connector past its restart intensity is marked failed; it is tried again this often."""
    run_dir: str | None = None
    """Where the actor system keeps its logs (connectors.log, Thespian's own). Default: a temporary
    directory removed when the servo exits; set it to keep connector logs after the run."""
    max_result_bytes: int = Field(DEFAULT_MAX_RESULT_BYTES, ge=1)
    """Most bytes one connector's result may take (as sent, pickled); larger fails its part with
    reason result-too-large."""
    descendant_tracking: DescendantTracking = defaults.DESCENDANT_TRACKING
    """How every process a connector starts is found and killed with it, even one that left its
    session or process group: each connector in its own cgroup (cgroup-v2: cgroup.kill; cgroup-v1:
    the freezer hierarchy) besides the process tree and a child subreaper (subreaper: those two
    alone). auto: the first cgroup kind this machine lets the servo write, else subreaper."""
    liveness: Liveness = Liveness()
    microreboots: Microreboots = Microreboots()
    convention: ConventionConfig | None = None
    """Connectors on other hosts (absent: local mode, every socket on loopback)."""

    _period_positive = field_validator("period", "startup_timeout", "failed_retry")(positive)
