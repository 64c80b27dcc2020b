"""The ``.env`` file beside servo.yaml: environment variables for the configuration, in a file.

Read with python-dotenv (``NAME=value`` lines, ``#`` comments, quoting, ``export NAME=...``). Its
variables are the configuration's environment (``OPSANI_*``, ``SERVO_UID``, ``SERVO_<CONNECTOR>_*``)
under the process's own: a variable set in the environment wins over the same name in ``.env``,
as python-dotenv's ``load_dotenv`` (and so servox) has it. The process's environment is never
changed: the two are merged for loading only, and each value keeps its origin for
``config --sources``.

Unlike servox, which looks for ``.env`` from the current directory upwards, the file is the one
beside servo.yaml: the configuration and its variables travel together, and a ``.env`` in some
parent directory of wherever the command runs never changes the configuration unseen.
"""

from __future__ import annotations

import logging
from io import StringIO
from pathlib import Path

from dotenv import dotenv_values

from servo_actors.errors import ConfigError

__all__ = ["DOTENV_NAME", "read_dotenv"]

log = logging.getLogger(__name__)

DOTENV_NAME = ".env"


def read_dotenv(config_file: Path) -> tuple[Path, dict[str, str]]:
    """The ``.env`` beside ``config_file`` and its variables (``{}`` when there is no such file).

    A name without a value (a bare ``NAME`` line) is left out, as is an empty value, which the
    configuration treats as unset anyway. An unreadable file raises ConfigError naming it.
    """
    path = config_file.parent / DOTENV_NAME
    if not path.is_file():
        return path, {}
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start})", source=str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", source=str(path)) from None
    # ${NAME} expands from the file's earlier lines and the environment, as load_dotenv does.
    values = dotenv_values(stream=StringIO(text))
    variables = {name: value for name, value in values.items() if value}
    log.debug("%s: %d variable(s)", path, len(variables))
    return path, variables
