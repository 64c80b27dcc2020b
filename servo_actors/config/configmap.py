"""The effective configuration as a Kubernetes ConfigMap (``servo-actors config --format configmap``).

The manifest has the shape of deploy/kubernetes/configmap.yaml (``servo-config``, label
``app.kubernetes.io/name: servo``, the file under ``data.servo.yaml``), plus the version label and
an annotation listing the connectors, as servox's ``config -f configmap`` had.

A ConfigMap is no place for secrets, and the effective configuration shows them masked: every
masked value (the optimizer's ``token``, a connector's ``headers.Authorization``...) is left out of
the file, and a comment at its top names the environment variable that gives it back
(``OPSANI_TOKEN``, ``SERVO_LOAD_HEADERS__AUTHORIZATION``), to be set from a Secret. servox left the
whole ``optimizer`` section out instead; here its id and URLs stay.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from servo_actors.config.connector_env import NESTED_DELIMITER, connector_env_stem
from servo_actors.config.environment import OPTIMIZER_ENV
from servo_actors.config.problems import Loc
from servo_actors.logs import MASK

__all__ = ["CONFIGMAP_KEY", "DEFAULT_CONFIGMAP_NAME", "configmap_manifest"]

DEFAULT_CONFIGMAP_NAME = "servo-config"
CONFIGMAP_KEY = "servo.yaml"
_OPTIMIZER_VARIABLE = {key: name for name, key in OPTIMIZER_ENV.items()}


class _LiteralDumper(yaml.SafeDumper):
    """Writes a string holding newlines as a ``|`` block, so the file reads as a file."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_LiteralDumper.add_representer(str, _represent_str)


def configmap_manifest(shown: dict[str, Any], *, name: str, version: str) -> str:
    """A ConfigMap manifest holding ``shown`` (``effective_config``'s output) without its secrets."""
    data, variables = _without_secrets(shown)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False)
    if variables:
        header = "".join(
            f"# {loc}: from a Secret, as the variable {variable}\n" for loc, variable in variables
        )
        text = header + text
    connectors = [
        {"name": entry.get("name"), "type": entry.get("type")} for entry in data.get("connectors") or []
    ]
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/name": "servo", "app.kubernetes.io/version": version},
            "annotations": {"servo-actors.io/connectors": json.dumps(connectors, separators=(",", ":"))},
        },
        "data": {CONFIGMAP_KEY: text},
    }
    return yaml.dump(manifest, Dumper=_LiteralDumper, sort_keys=False, allow_unicode=True, width=1 << 30)


def _without_secrets(shown: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """``shown`` without its masked values, and (key, variable) for each one left out."""
    removed: list[tuple[str, str]] = []

    def strip(value: Any, loc: Loc) -> Any:
        if isinstance(value, dict):
            kept = {}
            for key, item in value.items():
                here = (*loc, key)
                if item == MASK:
                    removed.append((_key(here), _variable(shown, here)))
                    continue
                kept[key] = strip(item, here)
            return kept
        if isinstance(value, list):
            return [strip(item, (*loc, index)) for index, item in enumerate(value)]
        return value

    return strip(shown, ()), removed


def _key(loc: Loc) -> str:
    return "".join(
        f"[{part}]" if isinstance(part, int) else (f".{part}" if index else part)
        for index, part in enumerate(loc)
    )


def _variable(shown: dict[str, Any], loc: Loc) -> str:
    """The variable that sets the value at ``loc`` (config.connector_env's and config.environment's rules)."""
    if len(loc) == 2 and loc[0] == "optimizer" and str(loc[1]) in _OPTIMIZER_VARIABLE:
        return _OPTIMIZER_VARIABLE[str(loc[1])]
    if len(loc) > 3 and loc[0] == "connectors" and isinstance(loc[1], int) and loc[2] == "config":
        name = str(shown["connectors"][loc[1]].get("name", ""))
        return connector_env_stem(name) + NESTED_DELIMITER.join(str(part).upper() for part in loc[3:])
    return "(none: set it in the file)"
