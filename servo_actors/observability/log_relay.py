"""Connector log lines in the servo's log, each with the connector's name, generation and PID.

How a line travels: a connector logs in its own process; Thespian's forwarder there pickles the
record to the actor system's logger process, which hands it to the handlers of the logging
configuration the servo gave Thespian (``system._log_definitions``): the run directory's
``connectors.log``, and ``RelayHandler``, which writes it to the stderr the logger process
inherited from the servo, in the servo's own format (text or JSON) with secrets redacted. Two
halves:

- ``tag_records(name, generation)``, called once by the connector's host when it starts, stamps
  ``connector``, ``generation`` and ``pid`` on every record made in that process (a host process
  runs one connector generation, so a record factory is exact and costs nothing per call site);
- ``relay_handler_config()``, the dictConfig entry of ``RelayHandler``, or None when the servo
  does not log to stderr itself (``logs.configure_logging`` was never called: a library use).

Only lines from connectors and from the servo's own code in the actor system (supervisor, hosts)
are relayed; Thespian's internal chatter stays in the run directory's logs.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from servo_actors import logs

RELAYED_LOGGER_PREFIX = "servo_actors"
"""Lines of loggers under this name are relayed even without a connector tag (supervisor, hosts)."""
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
CONNECTOR_TEXT_FORMAT = "%(asctime)s %(levelname)-7s [%(connector)s] %(name)s: %(message)s"


def tag_records(connector: str, generation: int) -> None:
    """Every log record made in this process from now on carries ``connector``, ``generation``, ``pid``."""
    make_record = logging.getLogRecordFactory()
    pid = os.getpid()

    def tagged(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        record.connector, record.generation, record.pid = connector, generation, pid
        return record

    logging.setLogRecordFactory(tagged)


class _ConnectorTextFormatter(logging.Formatter):
    """The servo's text format, with ``[name]`` before the logger of a connector's line."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)
        self._tagged = logging.Formatter(CONNECTOR_TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, "connector", None) is not None:
            return self._tagged.format(record)
        return super().format(record)


def _relayed(record: logging.LogRecord) -> bool:
    return getattr(record, "connector", None) is not None or record.name.startswith(RELAYED_LOGGER_PREFIX)


class RelayHandler(logging.Handler):
    """In the actor system's logger process: the servo's stderr, the servo's format, redacted."""

    def __init__(self, log_format: str = "text", level: int | str = logging.INFO) -> None:
        super().__init__(level)
        formatter = None if log_format == "json" else _ConnectorTextFormatter()
        self._stderr = logs.stderr_handler(log_format, formatter)
        self.addFilter(_relayed)

    def emit(self, record: logging.LogRecord) -> None:
        self._stderr.handle(record)


def relay_handler_config() -> dict[str, Any] | None:
    """The dictConfig handler entry of ``RelayHandler`` for this process's logging, or None."""
    configured = logs.configured()
    if configured is None:
        return None
    level, log_format = configured
    return {
        "()": f"{__name__}.RelayHandler",
        "log_format": log_format,
        "level": level.upper(),
    }


__all__ = ["RelayHandler", "relay_handler_config", "tag_records"]
