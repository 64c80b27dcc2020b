"""The connector registry: a connector ``type`` resolved to its class, and its settings validated.

A type is a built-in name, an installed entry point (group ``servo_actors.connectors``), or
``package.module:Class``. This is the one place that resolves a type; the layers above config (the
CLI, the runtime) call it. The config layer keeps each connector's settings as the raw mapping plus
the type name, so loading a YAML file imports no connector module; its loader and its display take
this module's checks as arguments::

    from servo_actors.config import effective_config, load_apps
    from servo_actors.connectors.registry import connector_settings_problems, effective_settings

    apps = load_apps("servo.yaml", connector_check=connector_settings_problems)  # types resolved too
    shown = effective_config(apps.first, connector_settings=effective_settings)  # as each model has it
    cls = resolve_connector_type("wait")     # ConfigError naming the type when it cannot be had

Imports are dynamic (importlib), never ``eval``, so naming one connector type never imports the others.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from servo_actors.config.problems import ConfigProblem, problems_from_validation
from servo_actors.connectors.base import Connector
from servo_actors.errors import ConfigError

__all__ = [
    "BUILTIN_CONNECTORS",
    "ENTRY_POINT_GROUP",
    "ConnectorTypeInfo",
    "available_connector_types",
    "connector_class_at",
    "connector_settings_problems",
    "connector_type_infos",
    "effective_settings",
    "resolve_connector_type",
    "validate_connector_config",
]

BUILTIN_CONNECTORS: dict[str, str] = {
    "prometheus": "servo_actors.connectors.prometheus:PrometheusConnector",
    "command": "servo_actors.connectors.command:CommandConnector",
    "wait": "servo_actors.connectors.wait:WaitConnector",
    "loadgen": "servo_actors.connectors.loadgen:LoadgenConnector",
    "synthetic": "servo_actors.connectors.synthetic:SyntheticConnector",
    "chaos": "servo_actors.connectors.chaos:ChaosConnector",
    "kubernetes": "servo_actors.connectors.kubernetes:KubernetesConnector",
    "kube_metrics": "servo_actors.connectors.kubernetes.kube_metrics:KubeMetricsConnector",
}
ENTRY_POINT_GROUP = "servo_actors.connectors"
_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def available_connector_types() -> dict[str, str]:
    """Every type name a config may use, with the import path it stands for."""
    types = dict(BUILTIN_CONNECTORS)
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        types.setdefault(entry.name, entry.value)
    return types


@dataclass(frozen=True)
class ConnectorTypeInfo:
    """A connector type a config may name: where it comes from and what it imports."""

    name: str
    target: str
    """``package.module:Class``."""
    origin: str
    """``built-in``, or ``entry point (DIST)`` for an installed plugin."""
    shadowed: bool = False
    """An entry point whose name a built-in type already takes (configs get the built-in)."""


def connector_type_infos() -> list[ConnectorTypeInfo]:
    """Every connector type: the built-in ones, then each installed entry point."""
    infos = [ConnectorTypeInfo(name, target, "built-in") for name, target in BUILTIN_CONNECTORS.items()]
    seen = set(BUILTIN_CONNECTORS)
    for entry in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = entry.dist.name if entry.dist is not None else "unknown distribution"
        infos.append(ConnectorTypeInfo(entry.name, entry.value, f"entry point ({dist})", entry.name in seen))
        seen.add(entry.name)
    return infos


def resolve_connector_type(type_name: str) -> type[Connector]:
    """The Connector subclass for ``type_name``; ConfigError naming the type when it cannot be had.

    A built-in name is looked up without scanning the installed entry points (built-ins win anyway).
    """
    target = BUILTIN_CONNECTORS.get(type_name) or available_connector_types().get(type_name)
    if target is None:
        if not _IMPORT_PATH.fullmatch(type_name):
            known = ", ".join(sorted(available_connector_types()))
            raise ConfigError(
                f"unknown connector type {type_name!r} (known: {known}; or use package.module:Class)"
            )
        target = type_name
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import failure of a plugin is a config problem, reported by name
        raise ConfigError(f"connector type {type_name!r}: cannot import {module_name}: {exc}") from None
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Connector)):
        raise ConfigError(f"connector type {type_name!r}: {target} is not a Connector subclass")
    return cls


def connector_class_at(import_path: str | None, type_name: str) -> type[Connector]:
    """The class at ``import_path`` (``module:Class``, as ``resolve_connector_type`` resolved it
    earlier, so already imported in a forked process), else ``type_name`` resolved afresh (which
    scans installed entry points: slow)."""
    if not import_path:
        return resolve_connector_type(type_name)
    module_name, _, qualname = import_path.partition(":")
    found: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found  # type: ignore[no-any-return]  # the path was made from a resolved Connector class


def validate_connector_config(connector_class: type[Any], config: Mapping[str, Any]) -> Any:
    """What a connector of ``connector_class`` gets as ``self.config``: an instance of its
    ``config_model`` validated from ``config``, or a plain dict copy when it has none.

    Raises pydantic's ValidationError; ``connector_settings_problems`` turns it into
    ``connectors[i].config.KEY`` problems.
    """
    model = getattr(connector_class, "config_model", None)
    if model is None:
        return dict(config)
    return model.model_validate(dict(config))


def connector_settings_problems(
    type_name: str, settings: Mapping[str, Any], *, source: str, index: int
) -> list[ConfigProblem]:
    """What is wrong with connector ``index`` of ``source``: its type (it must resolve) and its
    settings (they must validate against the type's ``config_model``); an empty list when nothing.

    ``config.load_apps`` calls this (given as its ``connector_check``) for each entry that has no problem of
    its own, so every problem of the file is reported together.
    """
    key = f"connectors[{index}]"
    try:
        connector_class = resolve_connector_type(type_name)
    except ConfigError as exc:
        return [ConfigProblem(source, f"{key}.type", exc.detail)]
    try:
        validate_connector_config(connector_class, settings)
    except ValidationError as exc:
        model = connector_class.config_model
        assert model is not None  # only a config_model raises ValidationError here
        return problems_from_validation(
            exc, model=model, source=source, prefix=("connectors", index, "config")
        )
    except Exception as exc:  # a connector's own validator crashed: still a problem with this entry
        message = f"{connector_class.__name__}.config_model failed: {type(exc).__name__}: {exc}"
        return [ConfigProblem(source, f"{key}.config", message)]
    return []


def effective_settings(type_name: str, settings: Mapping[str, Any]) -> Any:
    """The connector's settings as its ``config_model`` has them, or None when the type cannot be
    resolved or the settings do not validate (the display then shows them as written).

    ``config.effective_config`` takes it as its ``connector_settings``."""
    try:
        return validate_connector_config(resolve_connector_type(type_name), settings)
    except (ConfigError, ValueError):
        return None
