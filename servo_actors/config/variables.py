"""Every variable the configuration takes, applied to the file's data: the process's environment
over the ``.env`` file beside servo.yaml, ``OPSANI_*`` and ``SERVO_UID`` (``environment``) and
``SERVO_<CONNECTOR>_<FIELD>`` (``connector_env``); and what each set, labelled for people.

A label is ``env NAME`` for a variable of the process and ``PATH/.env NAME`` for one read from the
file; validation errors and ``config --sources`` name it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servo_actors.config.connector_env import apply_connector_env
from servo_actors.config.dotenv_file import read_dotenv
from servo_actors.config.environment import apply_env_overrides
from servo_actors.config.problems import ConfigProblem, Loc, key_path
from servo_actors.config.provenance import env_label

__all__ = ["apply_variables", "relabel_problems"]


def apply_variables(raw: dict[str, Any], file: Path, env: Mapping[str, str]) -> dict[Loc, str]:
    """Write the variables into ``raw`` (the file's data, changed in place); each key they set ->
    the label of the variable that set it."""
    dotenv_path, dotenv = read_dotenv(file)
    variables = {**dotenv, **env}

    def label(name: str) -> str:
        return env_label(name, None if env.get(name, "").strip() else str(dotenv_path))

    applied = {**apply_env_overrides(raw, variables), **apply_connector_env(raw, variables, label=label)}
    return {loc: label(name) for loc, name in applied.items()}


def relabel_problems(problems: list[ConfigProblem], env_sources: Mapping[Loc, str]) -> list[ConfigProblem]:
    """``problems`` with each one at or under a key a variable set naming that variable as its source."""
    keys = {key_path(loc): label for loc, label in env_sources.items()}
    relabelled = []
    for problem in problems:
        label = next(
            (
                label
                for key, label in keys.items()
                if problem.key == key or problem.key.startswith((f"{key}.", f"{key}["))
            ),
            None,
        )
        relabelled.append(dataclasses.replace(problem, source=label) if label else problem)
    return relabelled
