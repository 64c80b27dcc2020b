"""A connector's stdout and stderr in the servo's log: captured in the connector's process, made
lines that name it (in JSON with the same keys as every other line), cut and rate-limited.

The connector ``obs_test_connectors:Noisy`` writes every way there is (print, sys.stderr,
os.write to descriptors 1 and 2, a subprocess writing to both, a line that pauses before its
newline, a 1 MB line) and then floods descriptor 1.
"""

from __future__ import annotations

import json
import logging
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servo_actors import logs
from servo_actors.actors.runtime import ServoRuntime
from servo_actors.config.models import ServoConfig
from servo_actors.logs import JSON_KEYS, configure_logging
from servo_actors.observability.output_capture import (
    LINES_PER_WINDOW,
    MAX_LINE_BYTES,
    WINDOW_SECONDS,
    LineSplitter,
    OutputBudget,
)

PLUGINS = Path(__file__).parent / "plugins"
NOISY = "obs_test_connectors:Noisy"
RUN_TIMEOUT = 60.0
"""Generous bound on the scripted run: only a hang breaks it."""
NOTE_TIMEOUT = WINDOW_SECONDS + 30.0
"""Generous bound on the note of what a flood dropped: it comes when its window ends."""
LONG_LINE = 1_000_000
FLOOD_LINES = 5000
FLOOD_BYTES = 1000
SAID = {
    ("stdout", "noisy prints on stdout"),
    ("stderr", "noisy prints on stderr"),
    ("stdout", "noisy writes to fd 1"),
    ("stderr", "noisy writes to fd 2"),
    ("stdout", "child says hello on stdout"),
    ("stderr", "child says hello on stderr"),
    ("stdout", "child writes to fd 1 directly"),
    ("stdout", "noisy pauses without a newline"),
    ("stdout", "noisy ends the line"),
}
"""(logger, message) of every line Noisy writes before its long line and its flood."""
DROPPED = r"dropped (\d+) lines \((\d+) bytes\) of stdout and stderr over the limit of .*"
CUT = f" [line cut at {MAX_LINE_BYTES} bytes: {LONG_LINE - MAX_LINE_BYTES} more bytes dropped]"


@pytest.fixture(autouse=True)
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level, configured = list(root.handlers), root.level, logs.configured()
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logs.restore_configured(configured)


def noisy(**config: Any) -> dict[str, Any]:
    return {"name": "noisy", "type": NOISY, "config": config}


def test_lines_are_cut_and_held_no_longer_than_the_limit() -> None:
    splitter = LineSplitter(max_bytes=4)
    assert splitter.feed(b"ab\ncdefgh") == [(b"ab", 0)]
    assert splitter.pending
    assert splitter.feed(b"ij" * 1000 + b"\nk") == [(b"cdef", 2002)]  # gh and the 2000 bytes after them
    assert splitter.take() == (b"k", 0) and not splitter.pending


def test_the_budget_drops_lines_past_its_window_and_counts_them() -> None:
    budget = OutputBudget(lines=2, window=10.0)
    assert budget.admit(0.0, 5) and budget.admit(1.0, 5)
    assert not budget.admit(2.0, 7) and not budget.admit(3.0, 8)
    assert budget.window_end() == 10.0 and budget.take_dropped(9.9) is None
    assert budget.take_dropped(10.0) == (2, 15) and budget.window_end() is None
    assert budget.admit(10.5, 1)  # a new window


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_a_connectors_output_becomes_lines_that_name_it(
    log_format: str, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(PLUGINS))
    configure_logging("info", log_format)
    config = ServoConfig.model_validate({"connectors": [noisy(long_line=LONG_LINE)]})
    with ServoRuntime(config) as runtime:
        assert runtime.run("measure").ok
        # The capture thread logs what it read; the runtime's stop ends the process after.
        out, err = capfd.readouterr()
        runtime.stop()
        out2, err2 = capfd.readouterr()
    out, err = out + out2, err + err2
    assert out == ""  # nothing on the servo's stdout: all of it is log lines on its stderr
    if log_format == "text":
        for logger, message in SAID:
            assert f"[noisy] {logger}: {message}\n" in err, err
        assert f"[noisy] stdout: {'x' * MAX_LINE_BYTES}{CUT}\n" in err
        return
    lines = [json.loads(line) for line in err.splitlines()]
    assert all(tuple(line) == JSON_KEYS for line in lines), [
        line for line in lines if tuple(line) != JSON_KEYS
    ]
    said = {(line["logger"], line["message"]) for line in lines if line["connector"] == "noisy"}
    assert SAID <= said
    assert ("stdout", "x" * MAX_LINE_BYTES + CUT) in said


def notes_complete(log: str) -> bool:
    """Every window that dropped lines has said how many."""
    notes = [line for line in log.splitlines() if '"logger": "output"' in line]
    return (
        0
        < sum('"message": "stdout and stderr over ' in line for line in notes)
        == sum('"message": "dropped ' in line for line in notes)
    )


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_every_line_of_a_json_servo_is_json_with_the_same_keys_and_a_flood_is_bounded(
    servo, optimizer, kit
) -> None:
    driver = kit.scripted(
        [
            {"cmd": "DESCRIBE"},
            {"cmd": "MEASURE", "param": {"metrics": ["noise", "words"], "control": {"duration": 0}}},
        ]
    )
    server = optimizer(driver)
    connectors = [
        noisy(long_line=LONG_LINE, flood_lines=FLOOD_LINES, flood_bytes=FLOOD_BYTES),
        {"name": "chatty", "type": "obs_test_connectors:Chatty", "config": {"say": "hello"}},
        kit.chaos("drill", faults={"describe": "exit"}),
    ]
    proc = servo(kit.servo_config(server, connectors))
    kit.wait_until(lambda: driver.state()["done"], RUN_TIMEOUT, 0.1, what="the script")
    # Each window that dropped lines says so twice: at its first drop, and with the count at its end.
    kit.wait_until(lambda: notes_complete(proc.log()), NOTE_TIMEOUT, 0.2, what="the notes")
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()[-4000:]
    lines = proc.log_lines()  # every line parses as JSON
    odd = [line for line in lines if tuple(line) != JSON_KEYS]
    assert not odd, odd[:3]
    output = [line for line in lines if line["logger"] in ("stdout", "stderr", "output")]
    assert output and all(line["connector"] == "noisy" and line["pid"] for line in output)
    assert SAID <= {(line["logger"], line["message"]) for line in output}
    assert any(line["connector"] == "chatty" and "chatty measures" in line["message"] for line in lines)
    assert any(line["connector"] == "drill" and "exit fault" in line["message"] for line in lines)
    # The flood: at most LINES_PER_WINDOW lines per window, a note at a window's first drop, and one
    # with the count when it ends (the flood takes well under a window, but may straddle two).
    flood = [line for line in output if line["message"] == "f" * FLOOD_BYTES]
    notes = [line["message"] for line in output if line["logger"] == "output"]
    over = [
        note
        for note in notes
        if note.startswith(f"stdout and stderr over {LINES_PER_WINDOW} lines per {WINDOW_SECONDS:g}s")
    ]
    counted = [re.fullmatch(DROPPED, note) for note in notes if note.startswith("dropped")]
    assert over and len(counted) == len(over) and all(counted), notes
    assert 0 < len(flood) < LINES_PER_WINDOW * (len(over) + 1), len(flood)
    assert len(flood) + sum(int(match.group(1)) for match in counted if match) == FLOOD_LINES
    assert len(proc.log()) < (FLOOD_LINES * FLOOD_BYTES + LONG_LINE) / 10
