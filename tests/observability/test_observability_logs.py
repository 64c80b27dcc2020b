"""Log lines: the stable JSON fields, and connector lines in the servo's log with their name.

The relay runs real connector processes in-process (ServoRuntime); the end-to-end checks of a
servo's whole JSON log are in test_observability_e2e.py.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servo_actors import logs
from servo_actors.actors import ServoRuntime
from servo_actors.config import ServoConfig
from servo_actors.logs import (
    JSON_KEYS,
    MASK,
    STABLE_FIELDS,
    JsonFormatter,
    configure_logging,
    register_secret,
)
from servo_actors.observability import events

PLUGINS = Path(__file__).parent / "plugins"
TOKEN = "obs-token-6b7e1f0d2c"


@pytest.fixture(autouse=True)
def restored_logging() -> Iterator[None]:
    """Logging, its recorded configuration and the secrets as they were, after each test."""
    root = logging.getLogger()
    handlers, level, configured = list(root.handlers), root.level, logs.configured()
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logs.restore_configured(configured)
    logs.forget_secrets()


def record(message: str = "hello", **extra: Any) -> logging.LogRecord:
    entry = logging.LogRecord("servo_actors.x", logging.INFO, __file__, 1, message, None, None)
    for name, value in extra.items():
        setattr(entry, name, value)
    return entry


def test_every_json_line_carries_every_stable_field() -> None:
    plain = json.loads(JsonFormatter().format(record()))
    assert set(STABLE_FIELDS) <= set(plain)
    assert plain["event"] == "log" and plain["pid"] == record().process
    assert all(plain[name] is None for name in STABLE_FIELDS if name not in ("event", "pid"))
    restart = json.loads(
        JsonFormatter().format(
            record(event="restart", connector="prom", generation=7, pid=42, reason="crash")
        )
    )
    assert {name: restart[name] for name in ("event", "connector", "generation", "pid", "reason")} == {
        "event": "restart",
        "connector": "prom",
        "generation": 7,
        "pid": 42,
        "reason": "crash",
    }


def test_event_lines_carry_their_fields(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json")
    events.command_received("MEASURE", "c7")
    events.answer("MEASUREMENT", {"status": "failed", "reason": "timeout", "cmd_uid": "c7"}, None)
    events.connector_restarted("prom", "deadline", 9, 4242)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    command, result, restart = lines
    assert (command["event"], command["cmd"], command["cmd_uid"]) == ("command", "MEASURE", "c7")
    assert (result["event"], result["cmd"], result["cmd_uid"], result["reason"]) == (
        "result",
        "MEASURE",
        "c7",
        "timeout",
    )
    assert result["status"] == "failed" and result["duration_ms"] >= 0
    assert (restart["event"], restart["connector"], restart["generation"], restart["pid"]) == (
        "restart",
        "prom",
        9,
        4242,
    )


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_connector_lines_reach_the_servos_stderr_named_and_redacted(
    log_format: str, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(PLUGINS))
    configure_logging("info", log_format)
    register_secret(TOKEN)
    config = ServoConfig.model_validate(
        {
            "connectors": [
                {"name": "chatty", "type": "obs_test_connectors:Chatty", "config": {"say": f"token {TOKEN}"}},
                {"name": "drill", "type": "chaos", "config": {"faults": {"describe": "exit"}}},
            ]
        }
    )
    with ServoRuntime(config) as runtime:
        runtime.run("describe")
        # Each process writes its lines itself, before it answers (or exits): all there by now.
        err = capfd.readouterr().err
    assert TOKEN not in err
    if log_format == "text":
        assert f"[chatty] obs_test_connectors.chatty: chatty describes and says token {MASK}" in err
        assert "[drill] servo_actors.connectors.chaos: chaos: exit fault in describe" in err
        return
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    chatty = [line for line in lines if line["connector"] == "chatty"]
    assert {line["message"] for line in chatty} >= {
        f"chatty starts and says token {MASK}",
        f"chatty describes and says token {MASK}",
    }
    assert all(isinstance(line["generation"], int) and isinstance(line["pid"], int) for line in chatty)
    drill = [line for line in lines if line["connector"] == "drill"]
    assert any("exit fault in describe" in line["message"] for line in drill)


def test_every_json_line_has_the_same_keys_and_no_other() -> None:
    plain = json.loads(JsonFormatter().format(record()))
    assert tuple(plain) == JSON_KEYS and plain["exception"] is None and plain["extra"] == {}
    # Thespian's transport address is no field; a field of no other line goes under ``extra``.
    odd = json.loads(JsonFormatter().format(record(actorAddress="ActorAddr-(T|:1234)", rows=3, kind="x")))
    assert tuple(odd) == JSON_KEYS and odd["extra"] == {"rows": 3} and odd["kind"] == "x"
    try:
        raise ValueError("boom")
    except ValueError:
        failing = record()
        failing.exc_info = sys.exc_info()
    entry = json.loads(JsonFormatter().format(failing))
    assert tuple(entry) == JSON_KEYS and "ValueError: boom" in entry["exception"]
