"""Environment overrides of any connector setting: ``SERVO_<CONNECTOR>_<FIELD>``, as servox has them.

::

    SERVO_PROM_TIMEOUT=30s                          # connectors[name=prom].config.timeout = "30s"
    SERVO_PROM_BASE_URL=http://prometheus:9090      # ... .config.base_url
    SERVO_K8S_NAMESPACE=shop                        # connectors[name=k8s].config.namespace
    SERVO_K8S_DEPLOYMENTS__0__REPLICAS__MAX=8       # ... .config.deployments[0].replicas.max = 8
    SERVO_LOAD_HEADERS='{Authorization: Bearer x}'  # a mapping, in YAML's (or JSON's) flow style

- ``<CONNECTOR>`` is a connector's ``name`` in upper case, each character other than a letter or a
  digit written ``_`` (``kube-web`` -> ``KUBE_WEB``); servox used the connector's key the same way.
  When two names could match (``kube`` and ``kube_metrics``), the longer one wins.
- ``<FIELD>`` is a key of the connector's ``config``, in upper case; ``__`` goes one level down,
  into a mapping (created when the file has none) or, with a number, into the item of a list the
  file already has (0-based). servox (pydantic 1) had no nesting: a nested model or list could
  only be replaced whole, as JSON; that works here too (``SERVO_PROM_METRICS='[{...}]'``).
- The value is parsed as YAML: ``8`` is a number, ``true`` a boolean, ``30s`` a string,
  ``[a, b]`` a list. An empty variable counts as unset (as for ``OPSANI_*``).
- The variable wins over the file's value, as ``OPSANI_*`` do (docs/coming-from-servox.md says why:
  servox let the file win, which made an override useless for any key the file has, the
  common case of a file baked into an image or a ConfigMap). It also fills a key the file leaves out.
- Only connectors the file names are looked at: a variable for no connector is ignored (it may be
  meant for something else), as are the servo's own ``SERVO_CONFIG``, ``SERVO_UID``,
  ``SERVO_LOG_LEVEL``, ``SERVO_LOG_FORMAT`` and ``SERVO_ACTORS_*``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from servo_actors.config.problems import Loc, is_secret_key
from servo_actors.errors import ConfigError
from servo_actors.logs import register_secret

__all__ = [
    "CONNECTOR_ENV_PREFIX",
    "NESTED_DELIMITER",
    "RESERVED_ENV",
    "apply_connector_env",
    "connector_env_stem",
]

log = logging.getLogger(__name__)

CONNECTOR_ENV_PREFIX = "SERVO_"
NESTED_DELIMITER = "__"
RESERVED_ENV = frozenset({"SERVO_CONFIG", "SERVO_UID", "SERVO_LOG_LEVEL", "SERVO_LOG_FORMAT"})
"""The servo's own variables, never read as a connector's setting."""
_RESERVED_PREFIX = "SERVO_ACTORS_"
_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")


def connector_env_stem(name: str) -> str:
    """``SERVO_KUBE_WEB_`` for the connector named ``kube-web``: what its variables start with."""
    return f"{CONNECTOR_ENV_PREFIX}{_NOT_ALNUM.sub('_', name).upper()}_"


def apply_connector_env(
    raw: dict[str, Any], env: Mapping[str, str], *, label: Callable[[str], str] = lambda name: f"env {name}"
) -> dict[Loc, str]:
    """Write each ``SERVO_<CONNECTOR>_<FIELD>`` of ``env`` into ``raw`` (the parsed file, in place).

    Returns which keys were set, as locs from the top (``("connectors", 0, "config", "timeout")``)
    to the variable's name. Raises ConfigError naming the variable when its value is not YAML or
    its path cannot be followed (an index past a list's end, a key under a value that is not a
    mapping). ``label`` names a variable in an error (``env NAME``, or the ``.env`` file's path).
    """
    entries = raw.get("connectors")
    if not isinstance(entries, list):
        return {}
    stems: list[tuple[str, int]] = []
    for index, entry in enumerate(entries):
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            stems.append((connector_env_stem(entry["name"]), index))
    stems.sort(key=lambda item: len(item[0]), reverse=True)

    sources: dict[Loc, str] = {}
    for variable in sorted(env):
        if variable in RESERVED_ENV or variable.startswith(_RESERVED_PREFIX):
            continue
        match = next(((stem, index) for stem, index in stems if variable.startswith(stem)), None)
        if match is None:
            continue
        text = env[variable].strip()
        if not text:
            continue
        stem, index = match
        path = [part.lower() for part in variable[len(stem) :].split(NESTED_DELIMITER)]
        if not all(path):
            raise ConfigError(
                f"{variable[len(stem) :]!r} is not a key path (KEY, or KEY__SUBKEY: no empty part)",
                source=label(variable),
            )
        value = _parse_value(label(variable), text)
        entry = entries[index]
        loc: Loc = ("connectors", index, "config", *(_index_or_key(part) for part in path))
        if is_secret_key(loc):
            register_secret(text)
        config = entry.get("config")
        if config is None:
            config = entry["config"] = {}
        if not isinstance(config, dict):
            continue  # validation reports the file's config that is not a mapping
        _set_path(config, loc[3:], value, label(variable))
        sources[loc] = variable
        log.debug("connector %s: %s set from %s", entry["name"], ".".join(path), variable)
    return sources


def _index_or_key(part: str) -> str | int:
    return int(part) if part.isdigit() else part


def _parse_value(source: str, text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise ConfigError(f"the value is not a YAML value: {problem}", source=source) from None


def _set_path(target: dict[str, Any], path: Loc, value: Any, source: str) -> None:
    """``target[path[0]][path[1]]... = value``: mappings are created, list items must exist."""
    current: Any = target
    for depth, part in enumerate(path):
        last = depth == len(path) - 1
        where = ".".join(str(p) for p in path[:depth]) or "config"
        if isinstance(current, list):
            if not isinstance(part, int):
                raise ConfigError(f"{where} is a list: give an item's index, not {part!r}", source=source)
            if part >= len(current):
                raise ConfigError(
                    f"{where} has {len(current)} item(s): no index {part} (a variable can change an "
                    "item, not add one)",
                    source=source,
                )
        elif isinstance(current, dict):
            part = str(part)
            if not last and current.get(part) is None:
                current[part] = {}
        else:
            raise ConfigError(f"{where} is not a mapping or a list: nothing to set under it", source=source)
        if last:
            current[part] = value
        else:
            current = current[part]
