"""Pydantic models of servo.yaml (interface.md). Plain data: no behaviour beyond validation.

Field docstrings become descriptions in ``servo-actors schema``. Loading the file, environment
overrides and turning validation errors into one readable ``ConfigError`` live in ``loading.py``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from servo_actors.config import defaults
from servo_actors.config.listen import format_listen, parse_listen
from servo_actors.durations import parse_duration
from servo_actors.endpoints import parse_endpoint

__all__ = [
    "APP_RE",
    "Backoff",
    "CAPABILITY_PATTERN",
    "ConnectorSpec",
    "ConventionConfig",
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_RESULT_BYTES",
    "DescendantTracking",
    "Duration",
    "Heartbeat",
    "Liveness",
    "MetricsConfig",
    "Microreboots",
    "ORG_RE",
    "OptimizerConfig",
    "PlacementConfig",
    "RestartBackoff",
    "ServoConfig",
    "Settings",
    "SupervisorConfig",
    "Timeouts",
    "split_optimizer_id",
]

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_DURATION_PATTERN = rf"^\s*(?:{_NUMBER}|(?:{_NUMBER}(?:ns|us|µs|ms|s|m|h|d))+)\s*$"

Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    # The schema says what a user may write (a number or a string like "5s"), not the float it becomes.
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": _DURATION_PATTERN},
            ],
            "description": "seconds, or a string such as '250ms', '5s', '1m30s', '2h'",
        }
    ),
]
"""Seconds; accepts numbers and strings like ``250ms``, ``5s``, ``1m30s``, ``2h``."""

ORG_RE = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9.-]{4,49}$")
APP_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
DEFAULT_BASE_URL = "https://api.opsani.com"
DEFAULT_MAX_RESULT_BYTES = defaults.MAX_RESULT_BYTES
"""Default bound of one connector's result, pickled (supervisor.max_result_bytes; config.defaults)."""
DescendantTracking = Literal["auto", "cgroup-v2", "cgroup-v1", "subreaper"]
CAPABILITY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
"""A capability's name, as ``servo-actors agent --capability NAME[=VALUE]`` offers it."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True, use_attribute_docstrings=True)


def split_optimizer_id(value: str) -> tuple[str, str]:
    """``("example.com", "web")`` from ``"example.com/web"``; ValueError naming the rule broken."""
    org, sep, app = value.partition("/")
    if not sep:
        raise ValueError(f"{value!r} is not ORG/APP")
    if not ORG_RE.match(org):
        raise ValueError(f"ORG {org!r} must be 5-50 characters of [A-Za-z0-9.-], not starting with '-'")
    if not APP_RE.match(app):
        raise ValueError(f"APP {app!r} must be 1-64 characters of [A-Za-z0-9_.-]")
    return org, app


def _positive(value: float) -> float:
    if value <= 0:
        raise ValueError("must be more than 0")
    return value


class OptimizerConfig(_Strict):
    """Which optimizer to talk to and how to authenticate (protocol.md). Env ``OPSANI_*`` override it."""

    id: str
    """The optimizer, ``ORG/APP`` (env ``OPSANI_OPTIMIZER``)."""
    base_url: str = DEFAULT_BASE_URL
    """The API root (env ``OPSANI_BASE_URL``)."""
    url: str | None = None
    """The full URL up to, not including, ``servo``; replaces base_url and id in the URL (env ``OPSANI_URL``)."""
    token: SecretStr | None = None
    """The API token, a secret (env ``OPSANI_TOKEN``); or use token_file."""
    token_file: str | None = None
    """A file holding the token, whitespace stripped (env ``OPSANI_TOKEN_FILE``)."""

    # Where each field came from ({"id": "env OPSANI_OPTIMIZER", "token_file": "servo.yaml"}), set
    # by the loader, so that errors found later (an unreadable token file) name what to fix.
    _sources: dict[str, str] = PrivateAttr(default_factory=dict)

    @field_validator("id")
    @classmethod
    def _id_is_org_app(cls, value: str) -> str:
        split_optimizer_id(value)
        return value

    @field_validator("base_url", "url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value.rstrip("/")

    @field_validator("token")
    @classmethod
    def _token_not_empty(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("is empty")
        return value

    @field_validator("token_file")
    @classmethod
    def _path_not_empty(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("is empty")
        return value

    @model_validator(mode="after")
    def _one_token_source(self) -> OptimizerConfig:
        if self.token is not None and self.token_file is not None:
            raise ValueError("set token or token_file, not both")
        return self

    @property
    def organization(self) -> str:
        return split_optimizer_id(self.id)[0]

    @property
    def app_name(self) -> str:
        return split_optimizer_id(self.id)[1]

    @property
    def servo_url(self) -> str:
        """The endpoint every exchange is POSTed to (protocol.md)."""
        if self.url:
            return f"{self.url}/servo"
        return f"{self.base_url}/accounts/{self.organization}/applications/{self.app_name}/servo"


class Timeouts(_Strict):
    """HTTP timeouts for every request to the optimizer."""

    connect: Duration = 5.0
    """Time to establish the connection."""
    read: Duration = 60.0
    """Time to wait for the reply once connected."""

    _timeouts_positive = field_validator("connect", "read")(_positive)


class Backoff(_Strict):
    """Retries of optimizer requests: exponential from min, doubling, with jitter, capped at max."""

    min: Duration = 1.0
    """Wait before the first retry."""
    max: Duration = 60.0
    """Longest wait between retries (also the wait after a 4xx refusal)."""
    max_time: Duration = 600.0
    """How long a result post is retried before it is dropped; polling never gives up."""

    _max_positive = field_validator("max")(_positive)

    @model_validator(mode="after")
    def _ordered(self) -> Backoff:
        if self.min > self.max:
            raise ValueError("min must not exceed max")
        return self


class MetricsConfig(_Strict):
    """The servo's own Prometheus metrics and health endpoints; nothing listens unless ``listen`` is set."""

    listen: str | None = None
    """HOST:PORT (an IP address or localhost) where /metrics, /healthz and /readyz are served, e.g.
    127.0.0.1:9464; null: off. ``run --metrics-listen HOST:PORT`` overrides it."""
    stall_after: Duration = 180.0
    """/healthz answers 503 once the control loop has not turned (no answer from the optimizer nor
    from the actor system) for this long. Keep it above timeouts.connect + timeouts.read and above
    supervisor.liveness.interval + timeout."""
    exit_linger: Duration = 30.0
    """After a terminal failure (exit 1: too many microreboots), go on
    serving this long before exiting, so that a scrape records the failure (/healthz then answers
    503 saying why); SIGTERM or SIGINT end the wait at once. Keep it above the scrape interval."""

    _stall_positive = field_validator("stall_after")(_positive)

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return format_listen(*parse_listen(value))


class Settings(_Strict):
    """How the servo talks to the optimizer."""

    progress_interval: Duration = 5.0
    """How often progress (and so cancel detection) goes out during MEASURE and ADJUST."""
    timeouts: Timeouts = Timeouts()
    backoff: Backoff = Backoff()
    metrics: MetricsConfig = MetricsConfig()

    _interval_positive = field_validator("progress_interval")(_positive)


class RestartBackoff(_Strict):
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


class Liveness(_Strict):
    """How the servo watches its own actor system (the supervisor, Thespian's admin and logger)."""

    interval: Duration = 1.0
    """How often the supervisor is pinged (it answers at once in every state)."""
    timeout: Duration = 5.0
    """A ping unanswered, or one of those processes stopped, this long: the actor system is lost,
    killed and started afresh (a microreboot). A death is noticed within a fraction of a second.
    Generous: a supervisor forking dozens of fresh connectors on a loaded machine answers late."""

    _positive = field_validator("interval", "timeout")(_positive)


class Microreboots(_Strict):
    """Restart intensity of the servo's own actor system: at most ``max`` microreboots within
    ``period``, else the run ends (GOODBYE failure, exit 1)."""

    max: int = Field(3, ge=0)
    """Microreboots allowed within period."""
    period: Duration = 300.0
    """The window of the microreboot intensity."""

    _period_positive = field_validator("period")(_positive)


class Heartbeat(_Strict):
    """How the servo and its member systems watch each other (both ways)."""

    interval: Duration = 1.0
    """How often each side sends a heartbeat."""
    timeout: Duration = 5.0
    """Silence after which the other side counts as lost: the servo fails the parts of that
    member's connectors (host-lost) and places them again; a member kills what it hosts."""

    _positive = field_validator("interval", "timeout")(_positive)

    @model_validator(mode="after")
    def _timeout_above_interval(self) -> Heartbeat:
        if self.timeout <= self.interval:
            raise ValueError("timeout must be longer than interval (several heartbeats may be missed)")
        return self


class ConventionConfig(_Strict):
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


class PlacementConfig(_Strict):
    """Where a connector runs: on a member system offering this capability."""

    capability: str = Field(pattern=CAPABILITY_PATTERN)
    """The capability a member must offer (``servo-actors agent --capability NAME``)."""
    value: str | None = None
    """If set, the member must offer the capability with exactly this value (``NAME=VALUE``)."""


class SupervisorConfig(_Strict):
    """Supervision of the connector processes (OTP-style; architecture.md)."""

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

    _period_positive = field_validator("period", "startup_timeout", "failed_retry")(_positive)


class ConnectorSpec(_Strict):
    """One connector: a child of the supervisor, in its own process."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
    """Unique name: letters, digits, '_', '.', '-' (at most 63)."""
    type: str
    """A built-in type, an installed entry point (group servo_actors.connectors), or package.module:Class."""
    restart: Literal["permanent", "transient", "temporary"] = defaults.RESTART
    """permanent: always restarted; transient: only after a crash; temporary: never."""
    shutdown_timeout: Duration | None = None
    """Grace before SIGKILL for this connector; default: supervisor.shutdown_timeout."""
    config: dict[str, Any] = Field(default_factory=dict)
    """The connector's own settings, validated by its config_model."""
    placement: PlacementConfig | None = None
    """Run on a member system offering a capability (needs supervisor.convention); absent: here."""


class ServoConfig(_Strict):
    """servo.yaml."""

    optimizer: OptimizerConfig | None = None
    """The optimizer to talk to; needed by `run`, not by check/describe/measure/adjust."""
    servo_uid: str | None = None
    """Sent with every request (env ``SERVO_UID``)."""
    settings: Settings = Settings()
    supervisor: SupervisorConfig = SupervisorConfig()
    connectors: list[ConnectorSpec] = Field(default_factory=list)
    """Ordered; names are unique."""

    # The file it was loaded from, as the user named it; set by the loader.
    _source: str | None = PrivateAttr(None)

    @property
    def source(self) -> str | None:
        """The path of the file this configuration was loaded from (as given), or None."""
        return self._source

    @field_validator("connectors")
    @classmethod
    def _unique_names(cls, specs: list[ConnectorSpec], info: ValidationInfo) -> list[ConnectorSpec]:
        seen: set[str] = set()
        for spec in specs:
            if spec.name in seen:
                raise ValueError(f"connector name {spec.name!r} is used twice")
            seen.add(spec.name)
        supervisor = info.data.get("supervisor")
        placed = [spec.name for spec in specs if spec.placement is not None]
        if placed and isinstance(supervisor, SupervisorConfig) and supervisor.convention is None:
            raise ValueError(
                f"connector(s) {', '.join(placed)} have a placement, which needs supervisor.convention "
                "(listen, secret_file) so that member systems can join"
            )
        return specs
