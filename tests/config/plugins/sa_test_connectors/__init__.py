"""Connectors that exist only for the config and CLI tests: real classes in a real importable package.

The tests put ``tests/config/plugins`` on ``sys.path`` (or ``PYTHONPATH`` for a subprocess), which
also makes the ``sa_test_connectors-1.0.dist-info`` next to this package an installed distribution
with entry points in the ``servo_actors.connectors`` group.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from servo_actors.config import Duration
from servo_actors.connectors import Connector


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: int = Field(1, ge=1)
    period: Duration = 1.0


class StrictConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str
    api_token: SecretStr | None = None
    limits: Limits = Limits()


class StrictConnector(Connector):
    """A connector whose config must have a url and may have limits."""

    config_model = StrictConfig


class CrashingConfig(BaseModel):
    @model_validator(mode="before")
    @classmethod
    def _bug(cls, data: Any) -> Any:
        raise TypeError("a bug in this config model")


class CrashingModelConnector(Connector):
    """A connector whose config model itself is broken (raises something pydantic does not catch)."""

    config_model = CrashingConfig


class NotAConnector:
    """A class that is not a Connector subclass."""
