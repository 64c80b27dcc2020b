"""Finding every process a servo under test started, by a marker in its environment.

A test starts the servo with ``SERVO_ACTORS_TEST_MARK=<unique marker>`` in its environment; every
process it forks or executes inherits it, so ``marked_pids(marker)`` lists them all (the admin,
the logger, the supervisor, each connector and their children), wherever they were re-parented.
"""

from __future__ import annotations

import os

__all__ = ["MARKER_VAR", "marked_pids"]

MARKER_VAR = "SERVO_ACTORS_TEST_MARK"


def marked_pids(marker: str) -> list[int]:
    """Live (not zombie) processes whose environment carries ``marker``."""
    needle = f"{MARKER_VAR}={marker}".encode()
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read()
            with open(f"/proc/{entry}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ.split(b"\0") and state != "Z":
            found.append(int(entry))
    return found
