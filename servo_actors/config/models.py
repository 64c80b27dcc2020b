"""Pydantic models of servo.yaml (interface.md). Plain data: no behaviour beyond validation.

This module holds the top: ``ServoConfig`` and its ``ConnectorSpec`` list. The sections are in
``optimizer_section`` (``optimizer``, ``settings``), ``supervisor_section`` (``supervisor``) and
``checks_section`` (``checks``), the shared field types and base model in ``fields``.

Field docstrings become descriptions in ``servo-actors schema``. Loading the file, environment
overrides and turning validation errors into one readable ``ConfigError`` live in ``loading.py``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator

from servo_actors.config import defaults
from servo_actors.config.checks_section import ChecksConfig
from servo_actors.config.fields import Duration, StrictModel
from servo_actors.config.optimizer_section import OptimizerConfig, Settings
from servo_actors.config.provenance import Provenance
from servo_actors.config.supervisor_section import (
    PlacementConfig,
    SupervisorConfig,
)

__all__ = ["ConnectorSpec", "ServoConfig"]


class ConnectorSpec(StrictModel):
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


class ServoConfig(StrictModel):
    """servo.yaml."""

    optimizer: OptimizerConfig | None = None
    """The optimizer to talk to; needed by `run`, not by check/describe/measure/adjust."""
    servo_uid: str | None = None
    """Sent with every request (env ``SERVO_UID``)."""
    settings: Settings = Settings()
    supervisor: SupervisorConfig = SupervisorConfig()
    connectors: list[ConnectorSpec] = Field(default_factory=list)
    """Ordered; names are unique."""
    checks: ChecksConfig = ChecksConfig()
    """The defaults of ``check`` and ``run --check`` (an option on the command line wins)."""

    # The file it was loaded from, as the user named it, which of its documents (1-based) when it
    # holds several, and where each value came from; set by the loader.
    _source: str | None = PrivateAttr(None)
    _document: int | None = PrivateAttr(None)
    _provenance: Provenance | None = PrivateAttr(None)

    @property
    def source(self) -> str | None:
        """The path of the file this configuration was loaded from (as given), or None."""
        return self._source

    @property
    def document(self) -> int | None:
        """Which YAML document of its file this is (1-based) when the file holds several, else None."""
        return self._document

    @property
    def app(self) -> str | None:
        """The application this configuration serves (``optimizer.id``, ORG/APP), or None."""
        return self.optimizer.id if self.optimizer is not None else None

    @property
    def provenance(self) -> Provenance:
        """Where each value came from (the file, a variable, a default); all defaults when not loaded."""
        return self._provenance or Provenance(self._source or "")

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

    @field_validator("checks")
    @classmethod
    def _checked_connectors_exist(cls, checks: ChecksConfig, info: ValidationInfo) -> ChecksConfig:
        specs = info.data.get("connectors")
        if not isinstance(specs, list) or not checks.connectors:
            return checks  # connectors that did not validate are reported on their own
        known = [spec.name for spec in specs]
        unknown = [name for name in checks.connectors if name not in known]
        if unknown:
            raise ValueError(
                f"connectors: no connector {', '.join(map(repr, unknown))} in this configuration "
                f"(known: {', '.join(known) or 'none'})"
            )
        return checks
