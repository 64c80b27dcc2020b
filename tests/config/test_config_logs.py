"""servo_actors.logs: text and JSON lines on stderr, and no registered secret ever in them."""

from __future__ import annotations

import json
import logging

import pytest

from servo_actors.config import load_config, read_token
from servo_actors.logs import MASK, configure_logging, redact, register_secret

SECRET = "s3cr3t-token-abcdef"


def _log_everything(logger: logging.Logger) -> None:
    logger.info("token is %s", SECRET)
    logger.warning(f"inline {SECRET}", extra={"connector": f"uses {SECRET}", "nested": {"t": SECRET}})
    try:
        raise RuntimeError(f"failed with {SECRET}")
    except RuntimeError:
        logger.exception("request failed")


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_registered_secret_is_redacted_everywhere(
    log_format: str, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("debug", log_format)
    register_secret(SECRET)
    _log_everything(logging.getLogger("servo_actors.test"))
    err = capsys.readouterr().err
    assert SECRET not in err
    # Message argument, f-string message, exception text; JSON also shows the two extras.
    assert err.count(MASK) >= (3 if log_format == "text" else 5)
    assert "RuntimeError: failed with **********" in (
        err if log_format == "text" else err.replace("\\n", "\n")
    )


def test_json_lines_are_objects_with_fields(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json")
    logging.getLogger("servo_actors.x").debug("not shown at info")
    logging.getLogger("servo_actors.x").info("hello %d", 5, extra={"connector": "prom"})
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["message"] == "hello 5"
    assert entry["level"] == "info"
    assert entry["logger"] == "servo_actors.x"
    assert entry["connector"] == "prom"
    assert entry["time"].endswith("+00:00")


def test_configure_twice_keeps_one_handler(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "text")
    configure_logging("warning", "text")
    logging.getLogger("servo_actors.y").warning("once")
    logging.getLogger("servo_actors.y").info("filtered")
    assert capsys.readouterr().err.count("once") == 1


def test_bad_level_or_format_is_refused() -> None:
    with pytest.raises(ValueError, match="log level"):
        configure_logging("verbose")
    with pytest.raises(ValueError, match="log format"):
        configure_logging("info", "xml")


def test_authorization_values_are_redacted_unregistered() -> None:
    assert redact("Authorization: Bearer abc.def-123 sent") == f"Authorization: Bearer {MASK} sent"
    assert redact("X-SF-Token abc123, then") == f"X-SF-Token {MASK}, then"
    assert redact('{"x-sf-token":"abc123"}') == f'{{"x-sf-token":"{MASK}"}}'
    assert redact("headers {'X-SF-Token': 'qwerty123'}") == f"headers {{'X-SF-Token': '{MASK}'}}"


def test_very_short_values_are_not_registered() -> None:
    register_secret("abc")
    assert redact("abc abc") == "abc abc"


def test_tokens_read_by_the_config_are_registered(write_config, tmp_path) -> None:
    (tmp_path / "token").write_text(f"{SECRET}\n")
    config = load_config(write_config("optimizer: {id: example.com/web, token_file: token}\n"), env={})
    assert redact(f"x {SECRET} y") == f"x {SECRET} y"  # not read yet
    read_token(config.optimizer)
    assert redact(f"x {SECRET} y") == f"x {MASK} y"
    load_config(write_config("optimizer: {id: example.com/web}\n"), env={"OPSANI_TOKEN": "env-token-xyz987"})
    assert redact("env-token-xyz987") == MASK


def test_cli_debug_logs_never_show_the_token(write_config, run_cli) -> None:
    path = write_config(f"optimizer: {{id: example.com/web, token: {SECRET}}}\n")
    for log_format in ("text", "json"):
        result = run_cli(["-l", "debug", "--log-format", log_format, "-c", str(path), "validate"])
        assert result.exit_code == 0
        assert "loaded" in result.stderr  # debug logging did run
        assert SECRET not in result.stdout + result.stderr
