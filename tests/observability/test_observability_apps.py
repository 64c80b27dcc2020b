"""Log lines of a servo of several applications name their application (issue 36): ``app`` in
every JSON line (null for a servo of one), ``[ORG/APP]`` in a text line; the workers a loop starts
log for the same application."""

from __future__ import annotations

import contextvars
import io
import json
import logging
import threading

from servo_actors.logs import log_as_app, stderr_handler
from servo_actors.protocol.progress_lane import in_background


def lines_of(log_format: str, emit) -> list[str]:
    stream = io.StringIO()
    logger = logging.getLogger("servo_actors.test_apps")
    handler = stderr_handler(log_format, stream=stream)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        emit(logger)
    finally:
        logger.removeHandler(handler)
    return stream.getvalue().splitlines()


def in_thread(app: str | None, work) -> None:
    def run() -> None:
        log_as_app(app)
        work()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def test_json_lines_name_their_application_and_null_without_one() -> None:
    def emit(logger: logging.Logger) -> None:
        in_thread("acme.com/web", lambda: logger.info("from web"))
        in_thread("acme.com/db", lambda: logger.info("from db"))
        contextvars.Context().run(lambda: logger.info("from the servo"))

    entries = [json.loads(line) for line in lines_of("json", emit)]
    assert [(e["message"], e["app"]) for e in entries] == [
        ("from web", "acme.com/web"),
        ("from db", "acme.com/db"),
        ("from the servo", None),
    ]


def test_text_lines_name_their_application_only_when_there_is_one() -> None:
    def emit(logger: logging.Logger) -> None:
        in_thread("acme.com/web", lambda: logger.info("from web"))
        contextvars.Context().run(lambda: logger.info("plain"))

    web, plain = lines_of("text", emit)
    assert "INFO    [acme.com/web] servo_actors.test_apps: from web" in web
    assert "[" not in plain and plain.endswith("servo_actors.test_apps: plain")


def test_a_loops_workers_log_for_its_application() -> None:
    def emit(logger: logging.Logger) -> None:
        in_thread("acme.com/web", lambda: in_background(lambda: logger.info("from a worker")).result(10))

    (entry,) = [json.loads(line) for line in lines_of("json", emit)]
    assert entry["app"] == "acme.com/web"
