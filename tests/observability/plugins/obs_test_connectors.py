"""Connectors for tests/observability only: importable by servo processes through PYTHONPATH.

``Chatty`` logs what it is told to say at every step (INFO), so that tests can follow a connector's
log lines into the servo's log, and check that a token said there is redacted.
"""

from __future__ import annotations

import logging
from typing import Any

from servo_actors.connectors import Connector

log = logging.getLogger("obs_test_connectors.chatty")


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
