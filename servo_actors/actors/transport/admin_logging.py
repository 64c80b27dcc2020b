"""The logging of an actor system's admin: where Thespian and the connectors log (files in the run
directory), and keeping the forked admin off the user's terminal.

Apart from ``system``: plain ``logging`` configuration, no Thespian; ``system`` hands it to the
admin it forks.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["CONNECTOR_LOG_NAME", "THESPIAN_LOG_NAME", "log_definitions", "quiet_forked_admin"]

THESPIAN_LOG_NAME = "thespian.log"
CONNECTOR_LOG_NAME = "connectors.log"


def log_definitions(run_dir: Path) -> dict[str, Any]:
    """Thespian's logger process: connector logging goes to a file in the run directory."""
    return {
        "version": 1,
        "formatters": {"plain": {"format": "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"}},
        "handlers": {
            "file": {
                "class": "logging.FileHandler",
                "filename": str(run_dir / CONNECTOR_LOG_NAME),
                "formatter": "plain",
                "level": "INFO",
            }
        },
        "root": {"handlers": ["file"], "level": "INFO"},
    }


@contextlib.contextmanager
def quiet_forked_admin() -> Iterator[None]:
    """The admin is forked with this process's logging set-up, stderr handler included: it would
    print its INFO chatter ("++++ Actor System gen ... started") on the user's terminal. Raise the
    root level while it is forked, so the admin keeps only warnings; this process gets its level back.
    """
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        root.setLevel(level)
