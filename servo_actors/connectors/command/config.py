"""The ``command`` connector's configuration: ``CommandConfig`` and how its values are read."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator

from servo_actors.config.fields import Duration, StrictModel
from servo_actors.connectors.wait import DEFAULT_PROGRESS_INTERVAL

__all__ = ["CommandCheck", "CommandConfig", "DEFAULT_TIMEOUT", "env_text"]

DEFAULT_TIMEOUT = 60.0
"""Seconds a command may run (beyond the time its control asks for) before it is killed."""


def _stringify_env(value: Any) -> Any:
    # YAML reads `PORT: 8080` as a number; environment values are strings.
    if isinstance(value, dict):
        return {
            key: env_text(item) if isinstance(item, bool | int | float) else item
            for key, item in value.items()
        }
    return value


def env_text(value: Any) -> str:
    """A value as an environment variable holds it: strings as they are, the rest as JSON (``true``, ``1.5``)."""
    return value if isinstance(value, str) else json.dumps(value)


def _checks_by_name(value: Any) -> Any:
    return {"check": value} if isinstance(value, str) else value


class CommandCheck(StrictModel):
    """One check given as a mapping: its command and what ``check`` shows with its result
    (``connectors.check_result``: the remedy is text for a person, never run)."""

    run: str
    remedy: str | None = None
    severity: Literal["critical", "common", "warning"] = "common"
    tags: list[str] = Field(default_factory=list)
    id: str | None = None

    @field_validator("run")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("an empty command")
        return value


class CommandConfig(StrictModel):
    """Configuration of ``command``: a shell command per operation, all optional."""

    describe: str | None = None
    measure: str | None = None
    adjust: str | None = None
    check: Annotated[dict[str, str | CommandCheck], BeforeValidator(_checks_by_name)] = Field(
        default_factory=dict
    )
    timeout: Duration = DEFAULT_TIMEOUT
    env: Annotated[dict[str, str], BeforeValidator(_stringify_env)] = Field(default_factory=dict)
    cwd: str | None = None
    shell: str = "/bin/sh"
    # How often measure and adjust report progress while their command runs.
    progress_interval: Duration = DEFAULT_PROGRESS_INTERVAL

    @field_validator("timeout", "progress_interval")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be more than 0")
        return value

    @field_validator("describe", "measure", "adjust")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("an empty command; leave the key out instead")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, item in value.items():
            if not name or "=" in name or "\0" in name or "\0" in item:
                raise ValueError(f"{name!r} cannot be an environment variable (name or value)")
        return value
