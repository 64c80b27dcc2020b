"""Loading servo.yaml: find the file, read it, apply the environment, validate everything at once.

::

    apps = load_apps()                     # -c PATH, else $SERVO_CONFIG, else ./servo.yaml
    config = load_config()                 # the same, for a file of one document (one application)
    optimizer = require_optimizer(config)  # only where an optimizer is needed (run)

Connector types are not resolved here: each connector's ``config`` stays the raw mapping with its
type name, so loading a file imports no connector (plugin) code. The layers above pass a
``connector_check`` (``servo_actors.connectors.registry.connector_settings_problems``), whose
problems join the file's others.

Every problem found is reported together in one ConfigError, one line each, so a user fixes the
file in one pass rather than one error per run::

    servo.yaml: optimizer.id: ORG 'ab' must be 5-50 characters of [A-Za-z0-9.-], not starting with '-'
    servo.yaml: connectors[1].type: unknown connector type 'foo' (known: ...)
    servo.yaml: connectors[2].config.url: is required but missing
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from servo_actors.config.applications import (
    ServoApps,
    document_source,
    servo_wide_problems,
    unique_app_problems,
)
from servo_actors.config.environment import ENVIRONMENT_SOURCE, SINGLE_APP_ENV, env_value
from servo_actors.config.models import ServoConfig
from servo_actors.config.optimizer_section import OptimizerConfig
from servo_actors.config.problems import ConfigProblem, config_error, problems_from_validation
from servo_actors.config.provenance import Provenance
from servo_actors.config.variables import apply_variables, relabel_problems
from servo_actors.config.yaml_file import read_yaml_documents
from servo_actors.errors import ConfigError
from servo_actors.logs import register_secret

__all__ = [
    "CONFIG_PATH_ENV",
    "DEFAULT_CONFIG_PATH",
    "ConnectorCheck",
    "config_path",
    "load_apps",
    "load_config",
    "require_optimizer",
]

log = logging.getLogger(__name__)

DEFAULT_CONFIG_PATH = "servo.yaml"
CONFIG_PATH_ENV = "SERVO_CONFIG"


class ConnectorCheck(Protocol):
    """What is wrong with connector ``index`` of ``source`` (its type and its settings), as
    problems keyed ``connectors[INDEX].type`` / ``connectors[INDEX].config...``; empty when nothing."""

    def __call__(
        self, type_name: str, settings: Mapping[str, Any], *, source: str, index: int
    ) -> list[ConfigProblem]: ...


def config_path(path: str | Path | None = None, env: Mapping[str, str] = os.environ) -> Path:
    """The file to load: ``path``, else ``$SERVO_CONFIG``, else ``./servo.yaml``."""
    if path is not None and str(path):
        return Path(path)
    return Path(env.get(CONFIG_PATH_ENV) or DEFAULT_CONFIG_PATH)


def load_apps(
    path: str | Path | None = None,
    env: Mapping[str, str] = os.environ,
    *,
    connector_check: ConnectorCheck | None = None,
) -> ServoApps:
    """Every application of the file, validated, after environment overrides.

    A file of one document is one application (``load_config`` gives it alone). With several,
    each document needs an optimizer (ORG/APP unique across them), the servo-wide keys are the
    first document's (``applications.SERVO_WIDE``), and the environment's ``OPSANI_OPTIMIZER``
    and ``OPSANI_URL`` (which name one application) are refused; ``OPSANI_BASE_URL``, the token
    variables and ``SERVO_UID`` apply to every application.

    With a ``connector_check``, each connector entry that has no problem of its own is checked by
    it (``servo_actors.connectors.registry`` resolves the type and validates its ``config``);
    without one, connector types are not looked at. Raises one ConfigError listing every problem as
    ``SOURCE: key.path: what is wrong``, where SOURCE names the document when there are several
    (``servo.yaml document 2 (acme.com/web)``).
    """
    file = config_path(path, env)
    source = str(file)
    documents = read_yaml_documents(file, source=source)
    several = len(documents) > 1
    if several:
        single = [name for name in SINGLE_APP_ENV if env_value(env, name) is not None]
        if single:
            raise ConfigError(
                f"{' and '.join(single)} name one application, and the file holds {len(documents)} "
                "documents (one per application): set each document's optimizer instead",
                source=ENVIRONMENT_SOURCE,
            )
    problems: list[ConfigProblem] = []
    if several:
        problems += unique_app_problems(documents, source)
        problems += servo_wide_problems(documents, source)
    configs: list[ServoConfig] = []
    for index, raw in enumerate(documents, start=1):
        optimizer = raw.get("optimizer")
        app = optimizer.get("id") if isinstance(optimizer, dict) else None
        where = document_source(source, index, app) if several else source
        config, found = _load_document(raw, file, where, env, connector_check)
        problems += found
        if config is not None:
            config._document = index if several else None
            configs.append(config)
    if problems or len(configs) != len(documents):
        raise config_error(problems)
    log.debug("loaded %s: %d application(s)", source, len(configs))
    return ServoApps(source, tuple(configs))


def load_config(
    path: str | Path | None = None,
    env: Mapping[str, str] = os.environ,
    *,
    connector_check: ConnectorCheck | None = None,
) -> ServoConfig:
    """The validated configuration of a one-application file (see ``load_apps``), after the
    variables (``config.variables``: the environment's, over the ``.env`` file's beside the
    configuration file).

    A file of several documents is a ConfigError here naming its applications: the callers that
    take several use ``load_apps``.
    """
    apps = load_apps(path, env, connector_check=connector_check)
    if apps.several:
        raise ConfigError(
            f"holds {len(apps)} applications ({', '.join(apps.names)}); this takes one document",
            source=apps.source,
        )
    return apps.first


def _load_document(
    raw: dict[str, Any],
    file: Path,
    source: str,
    env: Mapping[str, str],
    connector_check: ConnectorCheck | None,
) -> tuple[ServoConfig | None, list[ConfigProblem]]:
    """One document: its configuration (None when it has problems) and its problems."""
    _anchor_token_file(raw, file)
    _anchor_secret_file(raw, file)
    _anchor_ca_bundle(raw, file)
    file_data = copy.deepcopy(raw)  # as the file has it, for config --sources
    env_sources = apply_variables(raw, file, env)

    problems: list[ConfigProblem] = []
    config: ServoConfig | None = None
    try:
        config = ServoConfig.model_validate(raw)
    except ValidationError as exc:
        problems += problems_from_validation(exc, model=ServoConfig, source=source, env_sources=env_sources)
    if connector_check is not None:
        problems += relabel_problems(
            _connector_problems(raw.get("connectors"), source, connector_check, already=problems), env_sources
        )
    if problems or config is None:
        return None, problems

    config._source = str(file)
    config._provenance = Provenance(source, file_data, env_sources)
    if config.optimizer is not None:
        config.optimizer._sources = {
            key: env_sources.get(("optimizer", key), source) for key in config.optimizer.model_fields_set
        }
        register_secret(config.optimizer.token)
    return config, []


def require_optimizer(config: ServoConfig) -> OptimizerConfig:
    """``config.optimizer``, or a ConfigError saying how to configure one."""
    if config.optimizer is None:
        raise ConfigError(
            "no optimizer is configured: add an optimizer section with id: ORG/APP, or set OPSANI_OPTIMIZER",
            source=config.source,
            key="optimizer",
        )
    return config.optimizer


def _anchor_token_file(raw: dict[str, Any], file: Path) -> None:
    """Make a relative ``token_file`` written in the file relative to the file, not to the cwd."""
    section = raw.get("optimizer")
    if not isinstance(section, dict):
        return
    token_file = section.get("token_file")
    if isinstance(token_file, str) and token_file.strip():
        if not os.path.isabs(os.path.expanduser(token_file)):
            section["token_file"] = str(file.parent / token_file)


def _anchor_secret_file(raw: dict[str, Any], file: Path) -> None:
    """As ``_anchor_token_file``, for ``supervisor.convention.secret_file``."""
    supervisor = raw.get("supervisor")
    convention = supervisor.get("convention") if isinstance(supervisor, dict) else None
    if not isinstance(convention, dict):
        return
    secret_file = convention.get("secret_file")
    if isinstance(secret_file, str) and secret_file.strip():
        if not os.path.isabs(os.path.expanduser(secret_file)):
            convention["secret_file"] = str(file.parent / secret_file)


def _anchor_ca_bundle(raw: dict[str, Any], file: Path) -> None:
    """As ``_anchor_token_file``, for ``settings.ca_bundle``."""
    settings = raw.get("settings")
    ca_bundle = settings.get("ca_bundle") if isinstance(settings, dict) else None
    if isinstance(ca_bundle, str) and ca_bundle.strip():
        if not os.path.isabs(os.path.expanduser(ca_bundle)):
            settings["ca_bundle"] = str(file.parent / ca_bundle)  # type: ignore[index]  # a dict, checked above


def _connector_problems(
    entries: object, source: str, check: ConnectorCheck, *, already: list[ConfigProblem]
) -> list[ConfigProblem]:
    """``check`` on each raw connector entry.

    Works on the raw entries so that it runs even when another part of the file is wrong; an
    entry that already has a problem of its own (no name, a type that is not a string) is skipped.
    """
    if not isinstance(entries, list):
        return []
    problems = []
    for index, entry in enumerate(entries):
        key = f"connectors[{index}]"
        if any(p.key == key or p.key.startswith((f"{key}.", f"{key}[")) for p in already):
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
            continue
        problems += check(entry["type"], entry.get("config") or {}, source=source, index=index)
    return problems
