"""The converted servo.yaml checked as ``validate`` checks a file, before it is written.

A servox value that servox accepted but this project refuses (a range whose ``min`` is above its
``max`` passes servox's model) would otherwise be written and fail later; here it stops the
conversion with every problem named, exit 2.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from servo_actors.config import ServoConfig, load_apps
from servo_actors.config.problems import ConfigProblem, config_error, problems_from_validation
from servo_actors.connectors.registry import connector_settings_problems
from servo_actors.errors import ConfigError

__all__ = ["check_applications", "check_converted"]

RESULT = "the converted configuration"


def check_converted(text: str, *, source: str) -> None:
    """Raise ConfigError listing what is wrong with the converted ``text`` (from servox file ``source``)."""
    data: Any = yaml.safe_load(text)
    problems: list[ConfigProblem] = []
    try:
        ServoConfig.model_validate(data)
    except ValidationError as exc:
        problems += problems_from_validation(exc, model=ServoConfig, source=RESULT)
    for index, entry in enumerate(data.get("connectors") or []):
        problems += connector_settings_problems(
            entry["type"], entry.get("config") or {}, source=RESULT, index=index
        )
    if problems:
        error = config_error(problems)
        raise type(error)(
            f"{source} converts, but {RESULT} does not validate (fix the servox value named):\n{error}",
        )


def check_applications(text: str, *, source: str) -> None:
    """Raise ConfigError when the converted documents of ``text`` do not load as one servo of
    several applications (each document was checked alone already: this is what they must hold
    together, such as an ORG/APP of their own)."""
    with tempfile.TemporaryDirectory(prefix="servo-actors-import-") as folder:
        path = Path(folder, "servo.yaml")
        path.write_text(text, encoding="utf-8")
        try:
            load_apps(path, {}, connector_check=connector_settings_problems)
        except ConfigError as exc:
            raise ConfigError(
                f"{source} converts, but {RESULT}'s documents do not go together:\n{exc}"
            ) from None
