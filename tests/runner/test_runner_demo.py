"""`servo-actors demo`, the README's main job, as a real process: on a pipe and on a terminal."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from demo_log import assert_summary_matches_the_log, parse_demo_log

pytestmark = pytest.mark.slow

DEMO_TIMEOUT = 150.0
"""Generous: the demo of four steps takes about 15 s on a quiet machine."""


def demo(*args: str) -> list[str]:
    return [sys.executable, "-m", "servo_actors", "demo", "--steps", "4", *args]


@pytest.mark.timeout(240)
def test_after_aborts_the_demo_recommends_no_worse_than_its_baseline_and_says_what_happened(
    kit, tmp_path
) -> None:
    # The README's invitation, as a newcomer runs it: the whole default plan, Abort every 3rd command.
    done = subprocess.run(
        [sys.executable, "-m", "servo_actors", "demo", "--abort-every", "3"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=DEMO_TIMEOUT,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "pressed Abort during" in out
    log = parse_demo_log(out)
    assert any(s.confirms is not None and s.mark == "cancelled" for s in log.steps), out
    assert_summary_matches_the_log(log)
    # Cancels did not use the confirmation up: the run went on and confirmed its recommendation.
    assert log.confirmed, out[out.index("summary:") :]


@pytest.mark.timeout(180)
def test_demo_runs_a_short_plan_with_aborts_and_leaves_nothing(kit, tmp_path) -> None:
    marker = uuid.uuid4().hex
    env = {**os.environ, "SERVO_ACTORS_TEST_MARK": marker}
    done = subprocess.run(
        demo("--abort-every", "3"),
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=DEMO_TIMEOUT,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "step  4:" in out and "recommended: step" in out, out
    # The closing summary: baseline against the (confirmed or labelled) recommendation.
    assert "summary: baseline (step 0) -> recommendation" in out and "objective (minimize)" in out, out
    assert "Traceback" not in out
    kit.wait_until(lambda: not kit.marked_pids(marker), 10, what="every process of the demo gone")

    # Each Abort is pressed while its command is in flight, and what the optimizer recorded as
    # cancelled is that very command (an ADJUST among them: stopped mid-flight, not the next MEASURE).
    pressed = re.findall(r"pressed Abort during (\w+ c\d+)", done.stdout)
    cancelled = re.findall(r"the optimizer cancelled (\w+ c\d+)", done.stdout)
    assert pressed and cancelled == pressed, done.stdout
    assert any(name.startswith("ADJUST") for name in cancelled), done.stdout
    assert "killed its connectors and started them fresh" in done.stdout

    assert_summary_matches_the_log(parse_demo_log(done.stdout))
    # One verdict in every line of the summary.
    summary = done.stdout[done.stdout.index("summary:") :].splitlines()
    constraints = [line for line in summary if re.match(r"\s+\w+ [<>=]+ ", line)]
    assert constraints, summary
    if "NOT CONFIRMED" in summary[0]:
        assert "not confirmed" not in summary[0]
        assert not any(line.endswith("holds with margin") for line in constraints), summary
    else:
        assert ", confirmed" in summary[0] and all(line.endswith("holds with margin") for line in constraints)


def run_on_terminal(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run ``args`` with stdout and stderr on a pseudo-terminal; its exit code and all it wrote."""
    main, side = pty.openpty()
    process = subprocess.Popen(args, stdout=side, stderr=side, stdin=subprocess.DEVNULL, cwd=cwd, env=env)
    os.close(side)
    output = b""
    deadline = time.monotonic() + DEMO_TIMEOUT
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
            elif process.poll() is not None:
                break
        code = process.wait(max(0.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(main)
    return code, output.decode(errors="replace")


@pytest.mark.timeout(180)
def test_on_a_terminal_the_demo_shows_steps_and_progress_and_keeps_its_logs_in_a_file(kit, tmp_path) -> None:
    marker = uuid.uuid4().hex
    env = {**os.environ, "SERVO_ACTORS_TEST_MARK": marker, "TMPDIR": str(tmp_path)}
    code, shown = run_on_terminal(demo(), tmp_path, env)
    assert code == 0, shown
    lines = shown.replace("\r\n", "\n").split("\n")
    assert "step  4:" in shown and "summary: baseline" in shown, shown
    # No log line on the terminal: they are in the file it names first.
    assert not [line for line in lines if re.search(r"\b(INFO|WARNING|DEBUG)\b", line)], shown
    match = re.search(r"^logs: (\S+)", shown, re.MULTILINE)
    assert match, shown
    log = Path(match.group(1))
    assert log.parent == tmp_path and " INFO " in log.read_text()
    assert "command MEASURE" in log.read_text()  # the servo's own lines are there
    # A progress line, rewritten in place (carriage returns without a new line).
    assert re.search(r"\r[^\r\n]*search steps", shown), shown
    # A command that finished shows 100 % (its last progress report came before the end).
    assert re.search(r"\r[^\r\n]*MEASURE c\d+ \((baseline|step \d+)\) 100 % done", shown), shown
    kit.wait_until(lambda: not kit.marked_pids(marker), 10, what="every process of the demo gone")

    # With -v the logs are on the terminal instead.
    code, shown = run_on_terminal(demo("--steps", "1", "-v"), tmp_path, env)
    assert code == 0, shown
    assert " INFO " in shown and "logs: " not in shown
