"""Connectors for tests/observability only: importable by servo processes through PYTHONPATH.

``Noisy`` writes to its stdout and stderr every way there is, and floods them.

``Chatty`` logs what it is told to say at every step (INFO), so that tests can follow a connector's
log lines into the servo's log, and check that a token said there is redacted.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from typing import Any

from servo_actors.connectors import Connector

log = logging.getLogger("obs_test_connectors.chatty")
CHILD_TIMEOUT = 30.0
"""Generous bound on Noisy's subprocess: only a hang breaks it."""
PAUSE = 1.5
"""How long Noisy pauses in the middle of a line: longer than output_capture.PARTIAL_LINE_WAIT."""


class Chatty(Connector):
    """``config: {say: TEXT}``; describes one metric ``words`` and measures it as 1."""

    def startup(self) -> None:
        log.info("chatty starts and says %s", self.config.get("say", ""))

    def describe(self) -> dict[str, Any]:
        log.info("chatty describes and says %s", self.config.get("say", ""))
        return {"components": {}, "metrics": {"words": {"unit": "count"}}}

    def measure(self, metrics: list[str], control: Any, progress: Any) -> dict[str, Any]:
        log.info("chatty measures and says %s", self.config.get("say", ""))
        return {"metrics": {"words": {"unit": "count", "value": 1}}, "annotations": {}}


NOISY_CHILD = (
    "import os, sys; print('child says hello on stdout', flush=True);"
    " sys.stderr.write('child says hello on stderr\\n'); sys.stderr.flush();"
    " os.write(1, b'child writes to fd 1 directly\\n')"
)
"""What Noisy's subprocess does: it inherits the host's descriptors 1 and 2."""


class Noisy(Connector):
    """Writes to its stdout and stderr every way there is while it measures: ``print()``,
    ``sys.stderr``, ``os.write`` to descriptors 1 and 2, a subprocess that writes to both, a line
    that pauses before its newline, a line of ``long_line`` bytes, then ``flood_lines`` lines of ``flood_bytes``
    bytes each (a connector gone wild). Config: ``{long_line: N, flood_lines: N, flood_bytes: N}``."""

    def describe(self) -> dict[str, Any]:
        return {"components": {}, "metrics": {"noise": {"unit": "count"}}}

    def measure(self, metrics: list[str], control: Any, progress: Any) -> dict[str, Any]:
        print("noisy prints on stdout")
        print("noisy prints on stderr", file=sys.stderr)
        os.write(1, b"noisy writes to fd 1\n")
        os.write(2, b"noisy writes to fd 2\n")
        subprocess.run([sys.executable, "-c", NOISY_CHILD], check=True, timeout=CHILD_TIMEOUT)
        sys.stdout.write("noisy pauses without a newline")
        sys.stdout.flush()
        time.sleep(PAUSE)
        print("noisy ends the line")
        print("x" * int(self.config.get("long_line", 0)))
        line = b"f" * int(self.config.get("flood_bytes", 10)) + b"\n"
        for _ in range(int(self.config.get("flood_lines", 0))):
            os.write(1, line)
        return {"metrics": {"noise": {"unit": "count", "value": 1}}, "annotations": {}}
