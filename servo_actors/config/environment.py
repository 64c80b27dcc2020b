"""Environment overrides of servo.yaml (docs/protocol.md, "Endpoint and authentication"): ``OPSANI_*`` and ``SERVO_UID``.

An environment variable wins over the file. Rules that keep this unsurprising:

- An empty variable counts as unset (containers often export ``OPSANI_TOKEN=``).
- ``OPSANI_TOKEN`` replaces a ``token_file`` from the file, and ``OPSANI_TOKEN_FILE`` replaces a
  ``token``: the environment names the one token source, so the file's never clashes with it.
  Setting both variables is an error.
- ``OPSANI_OPTIMIZER`` alone is enough for an optimizer: the file needs no ``optimizer`` section.
  Without it and without a section in the file there is no optimizer to apply the other
  ``OPSANI_*`` variables to; they are ignored (``run`` then says that no optimizer is configured).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from servo_actors.config.problems import Loc
from servo_actors.errors import ConfigError
from servo_actors.logs import register_secret

__all__ = [
    "ENVIRONMENT_SOURCE",
    "OPTIMIZER_ENV",
    "SERVO_UID_ENV",
    "SINGLE_APP_ENV",
    "apply_env_overrides",
    "env_value",
]

log = logging.getLogger(__name__)

OPTIMIZER_ENV: dict[str, str] = {
    "OPSANI_OPTIMIZER": "id",
    "OPSANI_BASE_URL": "base_url",
    "OPSANI_URL": "url",
    "OPSANI_TOKEN": "token",
    "OPSANI_TOKEN_FILE": "token_file",
}
"""Environment variable → key of the ``optimizer`` section it sets."""
SINGLE_APP_ENV: tuple[str, ...] = ("OPSANI_OPTIMIZER", "OPSANI_URL")
"""The variables that name one application: refused when the file holds several."""
SERVO_UID_ENV = "SERVO_UID"
ENVIRONMENT_SOURCE = "environment"


def env_value(env: Mapping[str, str], name: str) -> str | None:
    """The stripped value of ``name``, or None when unset or empty."""
    value = env.get(name, "").strip()
    return value or None


def apply_env_overrides(raw: dict[str, Any], env: Mapping[str, str]) -> dict[Loc, str]:
    """Write the environment's values into ``raw`` (the parsed file, changed in place).

    Returns which keys the environment set, ``{("optimizer", "id"): "OPSANI_OPTIMIZER", ...}``, so
    that validation errors can name the variable rather than the file.
    """
    sources: dict[Loc, str] = {}
    values = {name: value for name in OPTIMIZER_ENV if (value := env_value(env, name)) is not None}
    if "OPSANI_TOKEN" in values:
        register_secret(values["OPSANI_TOKEN"])
    if "OPSANI_TOKEN" in values and "OPSANI_TOKEN_FILE" in values:
        raise ConfigError("set OPSANI_TOKEN or OPSANI_TOKEN_FILE, not both", source=ENVIRONMENT_SOURCE)

    section = raw.get("optimizer")
    if values and section is None and "OPSANI_OPTIMIZER" not in values:
        log.debug("%s set but no optimizer is configured: ignored", ", ".join(sorted(values)))
    elif values and isinstance(section, dict | None):
        # A section that is not a mapping is left alone for validation to report against the file.
        section = dict(section or {})
        for name, value in values.items():
            key = OPTIMIZER_ENV[name]
            section[key] = value
            sources[("optimizer", key)] = name
        if "OPSANI_TOKEN" in values:
            section.pop("token_file", None)
        if "OPSANI_TOKEN_FILE" in values:
            section.pop("token", None)
        raw["optimizer"] = section

    servo_uid = env_value(env, SERVO_UID_ENV)
    if servo_uid is not None:
        raw["servo_uid"] = servo_uid
        sources[("servo_uid",)] = SERVO_UID_ENV
    return sources
