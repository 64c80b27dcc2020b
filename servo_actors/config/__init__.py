"""servo.yaml: models, loading, environment overrides, validation errors.

::

    from servo_actors.config import load_apps, load_config, require_optimizer, read_token

    apps = load_apps("servo.yaml")             # every application (one per YAML document)
    config = load_config("servo.yaml")         # ConfigError listing every problem, if any
    optimizer = require_optimizer(config)      # ConfigError when no optimizer is configured
    token = read_token(optimizer)              # SecretStr | None

Connector types are resolved, and their settings validated, by the ``connector_check`` a caller
passes (``servo_actors.connectors.registry.connector_settings_problems``): without one, loading
imports no connector code.
"""

from servo_actors.config.applications import ServoApps
from servo_actors.config.display import ConnectorSettings, effective_config
from servo_actors.config.fields import Duration
from servo_actors.config.loading import (
    CONFIG_PATH_ENV,
    DEFAULT_CONFIG_PATH,
    ConnectorCheck,
    config_path,
    load_apps,
    load_config,
    require_optimizer,
)
from servo_actors.config.models import ConnectorSpec, ServoConfig
from servo_actors.config.optimizer_section import Backoff, MetricsConfig, OptimizerConfig, Settings, Timeouts
from servo_actors.config.problems import ConfigProblem
from servo_actors.config.secrets import read_token
from servo_actors.config.supervisor_section import RestartBackoff, SupervisorConfig

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
    "ServoApps",
    "ServoConfig",
    "Settings",
    "SupervisorConfig",
    "Timeouts",
    "config_path",
    "effective_config",
    "load_apps",
    "load_config",
    "read_token",
    "require_optimizer",
]
