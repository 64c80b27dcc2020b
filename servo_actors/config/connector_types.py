"""Deprecated: moved to ``servo_actors.connectors.registry`` (README, "Migration notes").

The old names still import from here for one release. They are forwarded on first use, so that
importing ``servo_actors.config`` never imports the connectors layer (nothing in servo_actors
uses this module; the layers contract in .importlinter forbids config to import connectors).
"""

from __future__ import annotations

import importlib
from typing import Any

MOVED_NAMES = (
    "BUILTIN_CONNECTORS",
    "ENTRY_POINT_GROUP",
    "ConnectorTypeInfo",
    "available_connector_types",
    "connector_class_at",
    "connector_type_infos",
    "resolve_connector_type",
    "validate_connector_config",
)
"""The names this module used to define, now in ``servo_actors.connectors.registry``."""
__all__ = ["MOVED_NAMES"]

REGISTRY_MODULE = "servo_actors.connectors.registry"


def __getattr__(name: str) -> Any:
    """The registry's ``name``, for the names this module used to define."""
    if name in MOVED_NAMES:
        return getattr(importlib.import_module(REGISTRY_MODULE), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
