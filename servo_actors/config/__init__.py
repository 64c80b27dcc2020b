"""servo.yaml: models, loading, environment overrides, validation errors."""

from servo_actors.config.models import (
    Backoff,
    ConnectorSpec,
    Duration,
    OptimizerConfig,
    RestartBackoff,
    ServoConfig,
    Settings,
    SupervisorConfig,
    Timeouts,
)

__all__ = [
    "Backoff",
    "ConnectorSpec",
    "Duration",
    "OptimizerConfig",
    "RestartBackoff",
    "ServoConfig",
    "Settings",
    "SupervisorConfig",
    "Timeouts",
]
