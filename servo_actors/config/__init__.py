"""servo.yaml: models, loading, environment overrides, validation errors.

::

    from servo_actors.config import load_config, require_optimizer, read_token

    config = load_config("servo.yaml")         # ConfigError listing every problem, if any
    optimizer = require_optimizer(config)      # ConfigError when no optimizer is configured
    token = read_token(optimizer)              # SecretStr | None
"""

from servo_actors.config.connector_types import (
    BUILTIN_CONNECTORS,
    ENTRY_POINT_GROUP,
    ConnectorTypeInfo,
    available_connector_types,
    connector_type_infos,
    resolve_connector_type,
    validate_connector_config,
)
from servo_actors.config.display import effective_config
from servo_actors.config.loading import (
    CONFIG_PATH_ENV,
    DEFAULT_CONFIG_PATH,
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
    "BUILTIN_CONNECTORS",
    "CONFIG_PATH_ENV",
    "DEFAULT_CONFIG_PATH",
    "ENTRY_POINT_GROUP",
    "Backoff",
    "ConfigProblem",
    "ConnectorSpec",
    "ConnectorTypeInfo",
    "Duration",
    "MetricsConfig",
    "OptimizerConfig",
    "RestartBackoff",
    "ServoConfig",
    "Settings",
    "SupervisorConfig",
    "Timeouts",
    "available_connector_types",
    "config_path",
    "connector_type_infos",
    "effective_config",
    "load_config",
    "read_token",
    "require_optimizer",
    "resolve_connector_type",
    "validate_connector_config",
]
