"""Connector log lines in the servo's log, each with the connector's name, generation and PID.

A connector's host process is forked (through Thespian's admin and the supervisor) from the servo:
it inherits the servo's stderr, its log format (``logs.configured``) and the secrets to redact.
``tag_records(name, generation)``, called once by the host when it starts:

- stamps ``connector``, ``generation`` and ``pid`` on every record made in that process (a host
  runs one connector generation, so a record factory is exact and costs nothing per call site);
- gives the process a ``RelayHandler``: each line is written to the servo's stderr by the process
  that logs it, at once (the last line before a crash is not lost), in the servo's format (text
  with ``[name]`` before the logger, or JSON with the fields), redacted; only when the servo logs
  to stderr itself (``logs.configure_logging`` called: the CLI; not a library use);
- keeps sending every line to Thespian's logger process and the run directory's
  ``connectors.log`` too, whichever logger made it (``_forward_inherited_loggers``);
- with the relay, captures the process's stdout and stderr (``OutputCapture``): what the connector
  prints or writes there, itself or through a subprocess, becomes its lines too (loggers ``stdout``
  and ``stderr``), cut and rate-limited, never raw bytes in the servo's output.

The supervisor's own lines stay in the run directory's logs: the servo logs the restarts and
escalations they are about itself (``events``), with the stable fields.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from servo_actors import logs
from servo_actors.observability.output_capture import OutputCapture

TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
CONNECTOR_TEXT_FORMAT = "%(asctime)s %(levelname)-7s [%(connector)s] %(name)s: %(message)s"


_inherited = logging.getLogger(__name__)
"""Made when the servo imports this module, before it forks its actor system: in an actor process
it still belongs to the logging set-up the process inherited (see ``_forward_inherited_loggers``)."""


def tag_records(connector: str, generation: int) -> None:
    """Every log record made in this process from now on carries ``connector``, ``generation``,
    ``pid``, and goes to the actor system's logger process, whichever logger made it."""
    make_record = logging.getLogRecordFactory()
    pid = os.getpid()

    def tagged(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        record.connector, record.generation, record.pid = connector, generation, pid
        return record

    logging.setLogRecordFactory(tagged)
    relay = _relay_handler()
    _forward_inherited_loggers(None if relay is None else relay.level)
    if relay is not None:
        # Thespian's root refuses addHandler (it wants every line to go through its forwarder);
        # this one writes to the stderr the process inherited, beside the forwarding.
        logging.Logger.addHandler(logging.getLogger(), relay)
        # Then the connector's stdout and stderr become lines of its own: nothing raw, and bounded.
        OutputCapture().start()


class _ToRoot(logging.Handler):
    """Hands a record to another root logger (Thespian's forwarder)."""

    def __init__(self, root: logging.Logger) -> None:
        super().__init__()
        self.root = root

    def emit(self, record: logging.LogRecord) -> None:
        self.root.handle(record)


def _forward_inherited_loggers(level: int | None) -> None:
    """In an actor process, send the records of inherited loggers where new ones go.

    Thespian starts every actor process with a fresh ``logging`` manager whose root forwards each
    record to its logger process. A module the servo had imported before forking keeps its
    module-level logger from the old manager, whose root still holds the servo's stderr handler
    (with the level it had while the admin was forked, WARNING): such lines would skip the logger
    process, the run directory's log and the relay's format, and INFO lines would be lost. The old
    root is given one handler that passes its records to the new root instead, and ``level``
    (the relay's) or the new root's.
    """
    old_root = getattr(getattr(_inherited, "manager", None), "root", None)
    new_root = logging.getLogger()
    if not isinstance(old_root, logging.Logger) or old_root is new_root:
        return  # not an actor process: nothing was replaced
    old_root.handlers = [_ToRoot(new_root)]
    old_root.setLevel(new_root.level if level is None else min(level, new_root.level or level))


class _ConnectorTextFormatter(logging.Formatter):
    """The servo's text format, with ``[name]`` before the logger of a connector's line."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)
        self._tagged = logging.Formatter(CONNECTOR_TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, "connector", None) is not None:
            return self._tagged.format(record)
        return super().format(record)


class RelayHandler(logging.Handler):
    """In a connector's host: the servo's stderr, the servo's format, redacted.

    It writes to a copy of the stderr descriptor the process had when it was made (line-buffered:
    one write per line), so that the connector's own descriptor 2 can be captured afterwards
    (``OutputCapture``) without the relay's lines being captured again."""

    def __init__(self, log_format: str = "text", level: int | str = logging.INFO) -> None:
        super().__init__(level)
        formatter = None if log_format == "json" else _ConnectorTextFormatter()
        stream = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")
        self._stderr = logs.stderr_handler(log_format, formatter, stream)

    def emit(self, record: logging.LogRecord) -> None:
        self._stderr.handle(record)


def _relay_handler() -> RelayHandler | None:
    configured = logs.configured()
    if configured is None:
        return None
    level, log_format = configured
    return RelayHandler(log_format, level.upper())


__all__ = ["RelayHandler", "tag_records"]
