"""Models of servo.yaml's ``optimizer`` and ``settings`` sections: which optimizer, how to
authenticate, and how the servo talks to it (timeouts, retries, its own metrics endpoint)."""

from __future__ import annotations

import os
import re

from pydantic import PrivateAttr, SecretStr, field_validator, model_validator

from servo_actors.config.fields import (
    DEFAULT_BASE_URL,
    Duration,
    StrictModel,
    positive,
    split_optimizer_id,
)
from servo_actors.config.listen import format_listen, parse_listen

__all__ = ["Backoff", "MetricsConfig", "OptimizerConfig", "Settings", "Timeouts"]


class OptimizerConfig(StrictModel):
    """Which optimizer to talk to and how to authenticate (docs/protocol.md, "Endpoint and authentication"). Env ``OPSANI_*`` override it."""

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
        """The endpoint every exchange is POSTed to (docs/protocol.md, "Endpoint and authentication")."""
        if self.url:
            return f"{self.url}/servo"
        return f"{self.base_url}/accounts/{self.organization}/applications/{self.app_name}/servo"


class Timeouts(StrictModel):
    """HTTP timeouts for every request to the optimizer."""

    connect: Duration = 5.0
    """Time to establish the connection."""
    read: Duration = 60.0
    """Time to wait for the reply once connected."""

    _timeouts_positive = field_validator("connect", "read")(positive)


class Backoff(StrictModel):
    """Retries of optimizer requests: exponential from min, doubling, with jitter, capped at max."""

    min: Duration = 1.0
    """Wait before the first retry."""
    max: Duration = 60.0
    """Longest wait between retries (also the wait after a 4xx refusal)."""
    max_time: Duration = 600.0
    """How long a result post is retried before it is dropped; polling never gives up."""

    _max_positive = field_validator("max")(positive)

    @model_validator(mode="after")
    def _ordered(self) -> Backoff:
        if self.min > self.max:
            raise ValueError("min must not exceed max")
        return self


class MetricsConfig(StrictModel):
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

    _stall_positive = field_validator("stall_after")(positive)

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return format_listen(*parse_listen(value))


class Settings(StrictModel):
    """How the servo talks to the optimizer."""

    progress_interval: Duration = 5.0
    """How often progress (and so cancel detection) goes out during MEASURE and ADJUST."""
    timeouts: Timeouts = Timeouts()
    backoff: Backoff = Backoff()
    metrics: MetricsConfig = MetricsConfig()
    ca_bundle: str | None = None
    """A PEM file of the certificate authorities the optimizer's TLS certificate is checked against
    (a private PKI, a self-signed certificate), instead of the system's; relative to servo.yaml."""
    ssl_verify: bool = True
    """false: the optimizer's TLS certificate is not checked at all (a warning is logged at start).
    Anyone on the path can then read the token; prefer ca_bundle."""

    _interval_positive = field_validator("progress_interval")(positive)

    @field_validator("ca_bundle")
    @classmethod
    def _readable_file(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.strip():
            raise ValueError("is empty")
        path = os.path.expanduser(value)
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise ValueError(f"{value!r} is not a readable file")
        return path

    @model_validator(mode="after")
    def _verify_or_bundle(self) -> Settings:
        if self.ca_bundle is not None and not self.ssl_verify:
            raise ValueError(
                "ca_bundle is for checking the certificate, ssl_verify: false for not checking it: set one"
            )
        return self

    @property
    def tls_verify(self) -> bool | str:
        """What requests' ``verify`` takes: the CA bundle's path, or whether to check at all."""
        return self.ca_bundle if self.ca_bundle is not None else self.ssl_verify
