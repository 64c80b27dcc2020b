"""The optimizer token: from ``token`` or read from ``token_file``, never shown.

The token is read when it is needed (``run``, ``validate``), not when the config is loaded, so
commands that never talk to an optimizer do not fail over a token file they do not use. Whatever
is read is registered with the log redaction filter (``servo_actors.logs``).
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import SecretStr

from servo_actors.config.optimizer_section import OptimizerConfig
from servo_actors.errors import ConfigError
from servo_actors.logs import register_secret

__all__ = [
    "optimizer_key_source",
    "read_token",
]


def read_token(optimizer: OptimizerConfig) -> SecretStr | None:
    """The token: ``optimizer.token``, or the contents of ``optimizer.token_file`` stripped of
    surrounding whitespace, or None when neither is set.

    An unreadable or empty token file raises ConfigError naming ``optimizer.token_file`` and the
    path (and the environment variable, when the path came from one), never the file's content.
    """
    if optimizer.token is not None:
        register_secret(optimizer.token)
        return optimizer.token
    if optimizer.token_file is None:
        return None
    source = optimizer_key_source(optimizer, "token_file")
    path = Path(os.path.expanduser(optimizer.token_file))
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        # The exception's text quotes the offending byte: a piece of the secret.
        raise ConfigError(
            f"{str(path)!r} is not UTF-8 text", source=source, key="optimizer.token_file"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"cannot read {str(path)!r}: {exc.strerror or type(exc).__name__}",
            source=source,
            key="optimizer.token_file",
        ) from None
    token = text.strip()
    if not token:
        raise ConfigError(f"{str(path)!r} is empty", source=source, key="optimizer.token_file")
    register_secret(token)
    return SecretStr(token)


def optimizer_key_source(optimizer: OptimizerConfig, key: str) -> str | None:
    """Where ``optimizer.<key>`` came from: ``env OPSANI_...``, the config file's path, or None."""
    return optimizer._sources.get(key)
