"""Resolving a connector ``type`` to its class: a built-in name, an entry point, or ``package.module:Class``.

Imports are dynamic (importlib), never ``eval``, so naming one connector type never imports the others.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servo_actors.errors import ConfigError

BUILTIN_CONNECTORS: dict[str, str] = {
    "prometheus": "servo_actors.connectors.prometheus:PrometheusConnector",
    "command": "servo_actors.connectors.command:CommandConnector",
    "wait": "servo_actors.connectors.wait:WaitConnector",
    "loadgen": "servo_actors.connectors.loadgen:LoadgenConnector",
    "synthetic": "servo_actors.connectors.synthetic:SyntheticConnector",
    "chaos": "servo_actors.connectors.chaos:ChaosConnector",
    "kubernetes": "servo_actors.connectors.kubernetes:KubernetesConnector",
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


def validate_connector_config(connector_class: type[Any], config: Mapping[str, Any]) -> Any:
    """What a connector of ``connector_class`` gets as ``self.config``: an instance of its
    ``config_model`` validated from ``config``, or a plain dict copy when it has none.

    Raises pydantic's ValidationError; the loader turns it into ``connectors[i].config.KEY`` errors.
    """
    model = getattr(connector_class, "config_model", None)
    if model is None:
        return dict(config)
    return model.model_validate(dict(config))


def resolve_connector_type(type_name: str) -> type[Any]:
    """The Connector subclass for ``type_name``; ConfigError naming the type when it cannot be had."""
    from servo_actors.connectors.base import Connector

    target = available_connector_types().get(type_name)
    if target is None:
        if not _IMPORT_PATH.match(type_name):
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


def connector_class_at(import_path: str | None, type_name: str) -> type[Any]:
    """The class at ``import_path`` (``module:Class``, as ``resolve_connector_type`` resolved it
    earlier, so already imported in a forked process), else ``type_name`` resolved afresh (which
    scans installed entry points: slow)."""
    if not import_path:
        return resolve_connector_type(type_name)
    module_name, _, qualname = import_path.partition(":")
    found: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found
