"""servo.yaml: models, loading, environment overrides, validation errors.

::

    from servo_actors.config import load_config, require_optimizer, read_token

    config = load_config("servo.yaml")         # ConfigError listing every problem, if any
    optimizer = require_optimizer(config)      # ConfigError when no optimizer is configured
    token = read_token(optimizer)              # SecretStr | None

Connector types are resolved, and their settings validated, by ``servo_actors.connectors.registry``
(whose ``load_config`` does both after this one): loading here imports no connector code.
"""

from typing import Any

from servo_actors.config import connector_types as _connector_types
from servo_actors.config.display import ConnectorSettings, effective_config
from servo_actors.config.loading import (
    CONFIG_PATH_ENV,
    DEFAULT_CONFIG_PATH,
    ConnectorCheck,
    config_path,
    load_config,
    require_optimizer,
)
from servo_actors.config.models import (
    Backoff,
    ConnectorSpec,
    Duration,
    MetricsConfig,
    OptimizerConfig,
    RestartBackoff,
    ServoConfig,
    Settings,
    SupervisorConfig,
    Timeouts,
)
from servo_actors.config.problems import ConfigProblem
from servo_actors.config.secrets import read_token

__all__ = [
    "CONFIG_PATH_ENV",
    "DEFAULT_CONFIG_PATH",
    "Backoff",
    "ConfigProblem",
    "ConnectorCheck",
    "ConnectorSettings",
    "ConnectorSpec",
    "Duration",
    "MetricsConfig",
    "OptimizerConfig",
    "RestartBackoff",
    "ServoConfig",
    "Settings",
    "SupervisorConfig",
    "Timeouts",
    "config_path",
    "effective_config",
    "load_config",
    "read_token",
    "require_optimizer",
]


def __getattr__(name: str) -> Any:
    """The connector-type names this package used to export (BUILTIN_CONNECTORS,
    resolve_connector_type, ...): deprecated, forwarded to ``servo_actors.connectors.registry``
    on first use (README, "Migration notes")."""
    if name in _connector_types.MOVED_NAMES:
        return getattr(_connector_types, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
