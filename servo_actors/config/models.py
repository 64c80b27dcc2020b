"""Pydantic models of servo.yaml (interface.md). Plain data: no behaviour beyond validation."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, field_validator, model_validator

from servo_actors.durations import parse_duration

Duration = Annotated[float, BeforeValidator(parse_duration)]
"""Seconds; accepts numbers and strings like ``250ms``, ``5s``, ``1m30s``, ``2h``."""

ORG_RE = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9.-]{4,49}$")
APP_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
DEFAULT_BASE_URL = "https://api.opsani.com"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


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


class OptimizerConfig(_Strict):
    id: str
    base_url: str = DEFAULT_BASE_URL
    url: str | None = None
    token: SecretStr | None = None
    token_file: str | None = None

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
    connect: Duration = 5.0
    read: Duration = 60.0


class Backoff(_Strict):
    min: Duration = 1.0
    max: Duration = 60.0
    max_time: Duration = 600.0

    @model_validator(mode="after")
    def _ordered(self) -> Backoff:
        if self.min > self.max:
            raise ValueError("min must not exceed max")
        return self


class Settings(_Strict):
    progress_interval: Duration = 5.0
    timeouts: Timeouts = Timeouts()
    backoff: Backoff = Backoff()

    @field_validator("progress_interval")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be more than 0")
        return value


class RestartBackoff(_Strict):
    min: Duration = 0.1
    max: Duration = 30.0
    jitter: float = Field(0.2, ge=0.0, le=1.0)


class SupervisorConfig(_Strict):
    strategy: Literal["one_for_one", "one_for_all", "rest_for_one"] = "one_for_one"
    max_restarts: int = Field(5, ge=0)
    period: Duration = 30.0
    shutdown_timeout: Duration = 1.0
    restart_backoff: RestartBackoff = RestartBackoff()
    # Added to every operation's expected time to make its deadline (architecture.md).
    operation_grace: Duration = 30.0
    # How long startup() of a fresh connector may take before it counts as a crash.
    startup_timeout: Duration = 30.0


class ConnectorSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
    type: str
    restart: Literal["permanent", "transient", "temporary"] = "permanent"
    shutdown_timeout: Duration | None = None
    config: dict[str, Any] = Field(default_factory=dict)


class ServoConfig(_Strict):
    optimizer: OptimizerConfig | None = None
    servo_uid: str | None = None
    settings: Settings = Settings()
    supervisor: SupervisorConfig = SupervisorConfig()
    connectors: list[ConnectorSpec] = Field(default_factory=list)

    @field_validator("connectors")
    @classmethod
    def _unique_names(cls, specs: list[ConnectorSpec]) -> list[ConnectorSpec]:
        seen: set[str] = set()
        for spec in specs:
            if spec.name in seen:
                raise ValueError(f"connector name {spec.name!r} is used twice")
            seen.add(spec.name)
        return specs
