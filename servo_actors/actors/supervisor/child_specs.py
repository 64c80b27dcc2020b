"""What the supervisor is given to run, built from the config: each connector's ``ChildSpec``
(its type resolved and its config validated, so a wrong one fails before anything starts) and the
supervisor's settings. ``ServoRuntime`` builds them at ``__init__`` and again at ``restart``."""

from __future__ import annotations

from pydantic import ValidationError

from servo_actors.actors.convention.settings import convention_settings
from servo_actors.actors.rules import messages as m
from servo_actors.config.models import ServoConfig
from servo_actors.connectors.registry import resolve_connector_type, validate_connector_config
from servo_actors.errors import ConfigError

__all__ = ["child_specs", "supervisor_settings"]


def _validation_text(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'config'}: {e['msg']}" for e in error.errors())


def child_specs(config: ServoConfig) -> tuple[m.ChildSpec, ...]:
    """The supervisor's child specs; ConfigError naming the connector whose type or config is wrong."""
    default_shutdown = config.supervisor.shutdown_timeout
    specs = []
    for index, spec in enumerate(config.connectors):
        where = f"connectors[{index}] ({spec.name})"
        try:
            cls = resolve_connector_type(spec.type)
        except ConfigError as exc:
            raise ConfigError(exc.detail, key=f"{where}.type") from None
        try:
            validate_connector_config(cls, spec.config)
        except ValidationError as exc:
            raise ConfigError(_validation_text(exc), key=f"{where}.config") from None
        timeout = spec.shutdown_timeout if spec.shutdown_timeout is not None else default_shutdown
        import_path = f"{cls.__module__}:{cls.__qualname__}"
        specs.append(
            m.ChildSpec(
                spec.name,
                spec.type,
                spec.restart,
                timeout,
                dict(spec.config),
                import_path,
                max_result_bytes=config.supervisor.max_result_bytes,
                descendant_tracking=config.supervisor.descendant_tracking,
            )
        )
    return tuple(specs)


def supervisor_settings(config: ServoConfig) -> m.SupervisorSettings:
    """The supervisor's settings from ``config.supervisor`` (and its convention, if any)."""
    sup = config.supervisor
    return m.SupervisorSettings(
        strategy=sup.strategy,
        max_restarts=sup.max_restarts,
        period=sup.period,
        backoff_min=sup.restart_backoff.min,
        backoff_max=sup.restart_backoff.max,
        backoff_jitter=sup.restart_backoff.jitter,
        operation_grace=sup.operation_grace,
        startup_timeout=sup.startup_timeout,
        failed_retry=sup.failed_retry,
        idle_interval=sup.liveness.idle_interval,
        convention=convention_settings(config),
    )
