"""`servo-actors demo --apps N` as a real process: one servo of N applications from one
multi-document servo.yaml, each against its own session of the one embedded optimizer.

Each application's lines carry its name (``[web-2] ``); read apart, each is a whole demo log of
its own, whose summary must say what its own steps show. Nothing the demo started outlives it,
whether its plans end or SIGINT stops it in the middle.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from demo_log import assert_summary_matches_the_log, parse_demo_log

from servo_actors.demo import MAX_APPS, DemoError, DemoOptions

pytestmark = pytest.mark.slow

DEMO_TIMEOUT = 150.0
"""Generous: two applications of two steps take about 15 s on a quiet machine."""
STEP_WAIT = 90.0
"""Generous bound until each application of a running demo has printed its first step."""
EXIT_TIMEOUT = 40.0
"""Generous bound on the demo's exit after SIGINT: only a hang breaks it."""
LEAK_GRACE = 10.0
"""Seconds the demo's processes get to disappear after it exited."""
APPS = ("web-1", "web-2")


def demo(*args: str) -> list[str]:
    return [sys.executable, "-m", "servo_actors", "demo", "--apps", "2", *args]


def lines_of(out: str, app: str) -> str:
    """What one application printed, without its name: a demo log of its own."""
    prefix = f"[{app}] "
    return "\n".join(line[len(prefix) :] for line in out.splitlines() if line.startswith(prefix))


@pytest.fixture
def marker(kit) -> Iterator[str]:
    """The demo's processes carry this marker; any left after the test is killed (by PID) and fails it."""
    mark = uuid.uuid4().hex
    yield mark
    try:
        kit.wait_until(lambda: not kit.marked_pids(mark), LEAK_GRACE, what="every process of the demo gone")
    finally:
        for pid in kit.marked_pids(mark):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(240)
def test_two_applications_each_optimized_on_its_own_with_aborts_and_a_summary_each(marker, tmp_path) -> None:
    env = {**os.environ, "SERVO_ACTORS_TEST_MARK": marker}
    done = subprocess.run(
        demo("--steps", "2", "--abort-every", "3"),
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=DEMO_TIMEOUT,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "Traceback" not in out + done.stderr
    assert "demo.local/web-1 (seed 0), demo.local/web-2 (seed 1)" in out, out
    # Every line of an application's steps names it: no step line without its application.
    assert not re.search(r"^step ", out, re.MULTILINE), out

    logs = {app: parse_demo_log(lines_of(out, app)) for app in APPS}
    for app, log in logs.items():
        assert_summary_matches_the_log(log)
        own = lines_of(out, app)
        assert own.count("summary: baseline (step 0) -> recommendation") == 1, own
        # Abort every 3rd MEASURE or ADJUST of its own: what it pressed is what its optimizer
        # session cancelled, and its servo loop went on to the end of its plan.
        pressed = re.findall(r"pressed Abort during (\w+ c\d+)", own)
        cancelled = re.findall(r"the optimizer cancelled (\w+ c\d+)", own)
        assert pressed and cancelled == pressed, own
        assert any(s.mark == "cancelled" for s in log.steps), own
    # Seeded apart, the two applications read differently: two searches, not one printed twice.
    baseline = {app: lines_of(out, app).split("step  0: ", 1)[1].splitlines()[0] for app in APPS}
    assert baseline["web-1"] != baseline["web-2"], baseline
    # Each application's loop said GOODBYE to its own session.
    for app in APPS:
        assert re.search(rf"GOODBYE \(reason shutdown\) posted to \S+/applications/{app}/servo", done.stderr)


@pytest.mark.timeout(240)
def test_sigint_in_the_middle_of_two_applications_stops_everything_it_started(marker, tmp_path) -> None:
    env = {**os.environ, "SERVO_ACTORS_TEST_MARK": marker}
    stderr = tmp_path / "stderr.log"
    with stderr.open("w") as err:
        process = subprocess.Popen(
            demo("--steps", "15"), stdout=subprocess.PIPE, stderr=err, env=env, cwd=tmp_path
        )
    assert process.stdout is not None
    out = b""
    try:
        # Mid-run: each application has its baseline, and more is to come (15 steps each).
        deadline = time.monotonic() + STEP_WAIT
        while not all(f"[{app}] step  0:".encode() in out for app in APPS):
            remaining = deadline - time.monotonic()
            assert remaining > 0 and process.poll() is None, out.decode() + stderr.read_text()
            if select.select([process.stdout], [], [], min(remaining, 1.0))[0]:
                out += os.read(process.stdout.fileno(), 65536)
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=EXIT_TIMEOUT)
        out += rest
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    shown, log = out.decode(), stderr.read_text()
    assert process.returncode == 128 + signal.SIGINT, shown + log
    assert "interrupted by SIGINT: the servo and the embedded optimizer are stopped" in shown, shown
    assert "summary:" not in shown
    assert "Traceback" not in shown + log
    for app in APPS:  # each application's loop said GOODBYE before the optimizer stopped
        assert re.search(rf"GOODBYE \(reason \w+\) posted to \S+/applications/{app}/servo", log), log
    # The marker fixture then holds that no process of the demo (servo, connectors, optimizer) is left.


def test_the_number_of_applications_is_checked(tmp_path) -> None:
    for bad in ("0", str(MAX_APPS + 1), "two"):
        done = subprocess.run(
            [sys.executable, "-m", "servo_actors", "demo", "--apps", bad],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=DEMO_TIMEOUT,
        )
        assert done.returncode == 2, done.stdout + done.stderr
        assert "--apps" in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert "embedded optimizer" not in done.stdout  # refused before anything started
    for bad_value in (0, MAX_APPS + 1, True):
        with pytest.raises(DemoError, match=f"1 to {MAX_APPS} applications"):
            DemoOptions(apps=bad_value)
