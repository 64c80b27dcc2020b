"""Logging for the servo: text or JSON lines on stderr, with known secrets redacted.

A JSON line always carries the same keys and no other (``JSON_KEYS``): ``time``, ``level``,
``logger``, ``message``, the ``STABLE_FIELDS`` (``event``, ``cmd``, ``cmd_uid``, ``connector``,
``generation``, ``pid``, ``status``, ``reason``, ``kind``, ``duration_ms``), null where they do not
apply (``event`` is ``log`` for a plain line, ``pid`` the process that wrote it), ``exception``
(a traceback, or null) and ``extra`` (any other ``extra=`` fields of the record, or {}). The servo's
events (``observability.events``) and its connectors' lines (``observability.log_relay``) fill them.

Secrets are redacted by value, not by hoping nobody logs them: whatever reads a token calls
``register_secret(token)``, and from then on every record that passes the handler has each
occurrence replaced with ``**********`` (in the message, its arguments and any traceback). Values
after ``Bearer`` or ``X-SF-Token`` are redacted too, registered or not.

::

    configure_logging("debug", "json")
    register_secret(token)
    logging.getLogger(__name__).info("connecting with %s", token)   # ... "connecting with **********"
"""

from __future__ import annotations

import contextvars
import datetime
import json
import logging
import re
import sys
import threading
from typing import Any, Literal, TextIO

from pydantic import SecretStr

__all__ = [
    "IGNORED_ATTRIBUTES",
    "JSON_KEYS",
    "JsonFormatter",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "MASK",
    "MIN_SECRET_LENGTH",
    "PLAIN_EVENT",
    "STABLE_FIELDS",
    "APP_TEXT_FORMAT",
    "SecretRedactingFilter",
    "TEXT_FORMAT",
    "TextFormatter",
    "configure_logging",
    "configured",
    "current_app",
    "forget_secrets",
    "log_as_app",
    "redact",
    "register_secret",
    "restore_configured",
    "stderr_handler",
]

MASK = "**********"
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
# Shorter "secrets" are not redacted by value: masking every "abc" in every log line would make
# logs unreadable, and a real token is never this short.
MIN_SECRET_LENGTH = 6
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
APP_TEXT_FORMAT = "%(asctime)s %(levelname)-7s [%(app)s] %(name)s: %(message)s"
"""A text line of one application of a servo of several (``log_as_app``)."""

_app: contextvars.ContextVar[str | None] = contextvars.ContextVar("servo_app", default=None)


def log_as_app(app: str | None) -> None:
    """Lines logged from now on in this context (this thread, and the workers that copy its
    context) name ``app``: one application's loop of a servo of several."""
    _app.set(app)


def current_app() -> str | None:
    """The application this context logs for (``log_as_app``), or None."""
    return _app.get()


STABLE_FIELDS = (
    "event",
    "app",
    "cmd",
    "cmd_uid",
    "connector",
    "generation",
    "pid",
    "status",
    "reason",
    "kind",
    "duration_ms",
)
"""Fields every JSON line carries (null where they do not apply): what log queries can rely on."""
JSON_KEYS = ("time", "level", "logger", "message", *STABLE_FIELDS, "exception", "extra")
"""The keys of every JSON line, always all of them and no other: ``exception`` is the traceback
(and stack) or null, ``extra`` an object of any other ``extra=`` fields of the record ({})."""
IGNORED_ATTRIBUTES = frozenset({"actorAddress"})
"""Record attributes no line carries: Thespian's own (the actor's transport address)."""
PLAIN_EVENT = "log"
"""The ``event`` of a line that is not one of the servo's events."""

# "Bearer abc", "X-SF-Token abc", "X-SF-Token: abc", "'X-SF-Token': 'abc'" -> the value is masked.
_AUTH_VALUE = re.compile(r"""(?i)\b(bearer|x-sf-token)(['"]?\s*[:=]\s*['"]?|\s+)[^\s'",;}]+""")
_secrets: set[str] = set()
_secrets_lock = threading.Lock()
_longest_first: tuple[str, ...] = ()
_configured: tuple[str, str] | None = None
# Attributes every LogRecord has; anything else on a record came from ``extra=`` and goes in JSON.
_STANDARD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def register_secret(value: str | SecretStr | None) -> None:
    """Redact ``value`` from every log record from now on (and from ``redact``)."""
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    global _longest_first
    if value and len(value.strip()) >= MIN_SECRET_LENGTH:
        with _secrets_lock:
            _secrets.add(value.strip())
            # Longest first, so a secret that contains another is masked whole.
            _longest_first = tuple(sorted(_secrets, key=len, reverse=True))


def forget_secrets() -> None:
    """Forget every registered secret (for tests)."""
    global _longest_first
    with _secrets_lock:
        _secrets.clear()
        _longest_first = ()


def redact(text: str, *also: str | None) -> str:
    """``text`` with every registered secret, every secret in ``also`` (any length: a server may
    echo the token it was sent) and every Bearer/X-SF-Token value masked.

    >>> redact("echoed: abc", "abc")
    'echoed: **********'
    """
    secrets = _longest_first  # one tuple, replaced whole under the lock: no lock to read it
    if any(also):
        secrets = tuple(sorted({*secrets, *(s for s in also if s)}, key=len, reverse=True))
    for secret in secrets:
        text = text.replace(secret, MASK)
    lowered = text.lower()
    if "bearer" not in lowered and "x-sf-token" not in lowered:
        return text  # the pattern needs one of them: skip it (most lines; the regex costs ~10 µs)
    return _AUTH_VALUE.sub(lambda match: f"{match.group(1)}{match.group(2)}{MASK}", text)


class SecretRedactingFilter(logging.Filter):
    """Rewrites each record so that no registered secret survives into any formatter's output."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "app", None) is None and (app := current_app()) is not None:
            record.app = app  # the line names its application (a servo of several)
        try:
            message = record.getMessage()
        except Exception:  # a bad format string still gets logged, as logging itself would
            message = f"{record.msg!r} % {record.args!r}"
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        for name, value in vars(record).items():
            if name not in _STANDARD_ATTRIBUTES and isinstance(value, str):
                setattr(record, name, redact(value))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with the keys ``JSON_KEYS``: time, level, logger, message, the
    stable fields, the exception, and the record's other ``extra=`` fields under ``extra``."""

    def format(self, record: logging.LogRecord) -> str:
        extra: dict[str, Any] = {}
        entry: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **dict.fromkeys(STABLE_FIELDS),
            "event": PLAIN_EVENT,
            "pid": record.process,
            "exception": None,
            "extra": extra,
        }
        for name, value in vars(record).items():
            if name in _STANDARD_ATTRIBUTES or name in IGNORED_ATTRIBUTES:
                continue
            if name in STABLE_FIELDS:
                entry[name] = value
            else:
                extra[name] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        problem = [text for text in (record.exc_text, record.stack_info) if text]
        if problem:
            entry["exception"] = "\n".join(problem)
        # Again over the whole line: ``extra=`` values may nest secrets inside lists and dicts.
        return redact(json.dumps(entry, default=str))


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT``; ``APP_TEXT_FORMAT`` for a record of one application (its ``app``)."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)
        self._app_style = logging.PercentStyle(APP_TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        if getattr(record, "app", None):
            return self._app_style.format(record)
        return super().formatMessage(record)


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is at the time of each record (it may be swapped)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def configure_logging(
    level: str = "info", log_format: Literal["text", "json"] | str = "text"
) -> logging.Handler:
    """Send the root logger's records at ``level`` and above to stderr in ``log_format``.

    Calling it again replaces the handler it installed before (never others'). Returns the handler.
    """
    if level.lower() not in LOG_LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, not {level!r}")
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {log_format!r}")
    global _configured
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, _StderrHandler):
            root.removeHandler(handler)
    handler = stderr_handler(log_format)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.captureWarnings(True)
    _configured = (level.lower(), log_format)
    return handler


def stderr_handler(
    log_format: str, formatter: logging.Formatter | None = None, stream: TextIO | None = None
) -> logging.Handler:
    """A handler writing redacted lines to stderr (or ``stream``) in ``log_format`` (or with
    ``formatter``)."""
    handler: logging.Handler = _StderrHandler() if stream is None else logging.StreamHandler(stream)
    handler.addFilter(SecretRedactingFilter())
    if formatter is None:
        formatter = JsonFormatter() if log_format == "json" else TextFormatter()
    handler.setFormatter(formatter)
    return handler


def configured() -> tuple[str, str] | None:
    """``(level, format)`` of the last ``configure_logging`` in this process, or None: the actor
    system relays its processes' lines to stderr only when the servo logs there itself."""
    return _configured


def restore_configured(state: tuple[str, str] | None) -> None:
    """Make ``configured()`` say ``state`` (an earlier answer of it) again (for tests that
    configure logging and put the root logger back as it was)."""
    global _configured
    _configured = state
