"""``servo-actors optimizer serve|cancel`` as real processes: start, answer, cancel, SIGTERM, bad plans."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

STARTUP_TIMEOUT = 20.0  # seconds; a start takes well under one
EXIT_TIMEOUT = 20.0


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "servo_actors", *args]


def read_line(process: subprocess.Popen, deadline: float) -> str:
    """One line of the process's stdout, or fail once ``deadline`` (monotonic) passes."""
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    try:
        while time.monotonic() < deadline:
            if selector.select(timeout=0.1):
                return process.stdout.readline()
            if process.poll() is not None:
                break
    finally:
        selector.close()
    raise AssertionError(
        f"no output; exit {process.poll()}; stderr: {process.stderr.read() if process.poll() is not None else ''}"
    )


@pytest.fixture
def serve(tmp_path: Path) -> Iterator:
    processes: list[subprocess.Popen] = []

    def start(plan_text: str) -> tuple[subprocess.Popen, str]:
        plan = tmp_path / "plan.yaml"
        plan.write_text(plan_text)
        process = subprocess.Popen(
            cli("optimizer", "serve", "--port", "0", "--plan", str(plan)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        processes.append(process)
        first = read_line(process, time.monotonic() + STARTUP_TIMEOUT)
        url = first.rsplit(" ", 1)[-1].strip()
        assert url.startswith("http://127.0.0.1:"), first
        return process, url

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait(EXIT_TIMEOUT)
        for stream in (process.stdout, process.stderr):
            stream.close()


@pytest.mark.timeout(60)
def test_serve_answers_cancel_reaches_it_and_sigterm_exits_0(serve) -> None:
    process, url = serve(
        "app: example.com/web\nscript:\n  - cmd: MEASURE\n    param: {control: {duration: 1}}\n"
    )
    endpoint = f"{url}/accounts/example.com/applications/web/servo"
    poll = requests.post(endpoint, json={"event": "WHATS_NEXT", "param": None, "servo_uid": None}, timeout=10)
    uid = poll.json()["cmd_uid"]
    cancel = subprocess.run(
        cli("optimizer", "cancel", "--url", url), capture_output=True, text=True, timeout=30
    )
    assert cancel.returncode == 0, cancel.stderr
    assert f"MEASURE {uid}" in cancel.stdout
    progress = {"event": "MEASUREMENT", "param": {"progress": 5, "cmd_uid": uid}, "servo_uid": None}
    assert requests.post(endpoint, json=progress, timeout=10).json()["status"] == "cancel"
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=EXIT_TIMEOUT)
    assert process.returncode == 0, err
    assert "stopped (SIGTERM)" in out


@pytest.mark.timeout(60)
def test_sigint_exits_0_too(serve) -> None:
    process, _ = serve("app: example.com/web\nscript: []\n")
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=EXIT_TIMEOUT)
    assert process.returncode == 0, err
    assert "stopped (SIGINT)" in out and "Traceback" not in err


@pytest.mark.timeout(60)
def test_cancel_when_unreachable_exits_1() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    unreachable = subprocess.run(
        cli("optimizer", "cancel", "--url", f"http://127.0.0.1:{port}"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert unreachable.returncode == 1
    assert f"cannot reach the optimizer at http://127.0.0.1:{port}/admin/cancel" in unreachable.stderr


@pytest.mark.timeout(60)
def test_cancel_with_nothing_in_flight(serve) -> None:
    process, url = serve("app: example.com/web\nscript: []\n")
    idle = subprocess.run(
        cli("optimizer", "cancel", "--url", url + "/"), capture_output=True, text=True, timeout=30
    )
    assert idle.returncode == 0 and "nothing to cancel" in idle.stdout


@pytest.mark.timeout(60)
def test_cancel_wait_cancels_the_next_command_and_waits_for_its_result(serve) -> None:
    process, url = serve(
        "app: example.com/web\nscript:\n  - cmd: MEASURE\n    param: {control: {duration: 1}}\n"
    )
    # Nothing in flight yet: --wait cancels the next command to come.
    waiting = subprocess.Popen(
        cli("optimizer", "cancel", "--url", url, "--wait", "30"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        endpoint = f"{url}/accounts/example.com/applications/web/servo"
        poll = requests.post(
            endpoint, json={"event": "WHATS_NEXT", "param": None, "servo_uid": None}, timeout=10
        )
        uid = poll.json()["cmd_uid"]
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not requests.get(f"{url}/admin/state", timeout=10).json()["cancel_armed"]:
            assert time.monotonic() < deadline and waiting.poll() is None, waiting.communicate()
            time.sleep(0.05)
        progress = {"event": "MEASUREMENT", "param": {"progress": 5, "cmd_uid": uid}, "servo_uid": None}
        assert requests.post(endpoint, json=progress, timeout=10).json()["status"] == "cancel"
        assert waiting.poll() is None, "it waits for the result, not only for the cancel's delivery"
        result = {"status": "cancelled", "reason": "cancelled", "message": "Abort", "cmd_uid": uid}
        requests.post(endpoint, json={"event": "MEASUREMENT", "param": result, "servo_uid": None}, timeout=10)
        out, err = waiting.communicate(timeout=EXIT_TIMEOUT)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.communicate()
    assert waiting.returncode == 0, err
    assert out.splitlines() == [
        f"MEASURE {uid} will be answered cancel at its next post",
        f"MEASURE {uid}: the servo posted cancelled (cancelled)",
    ]


@pytest.mark.timeout(60)
def test_cancel_wait_says_when_the_cancel_reached_a_command_only_as_it_finished(serve) -> None:
    process, url = serve(
        "app: example.com/web\nscript:\n  - cmd: MEASURE\n    param: {control: {duration: 1}}\n"
    )
    endpoint = f"{url}/accounts/example.com/applications/web/servo"
    poll = requests.post(endpoint, json={"event": "WHATS_NEXT", "param": None, "servo_uid": None}, timeout=10)
    uid = poll.json()["cmd_uid"]
    waiting = subprocess.Popen(
        cli("optimizer", "cancel", "--url", url, "--wait", "30"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not requests.get(f"{url}/admin/state", timeout=10).json()["cancel_armed"]:
            assert time.monotonic() < deadline and waiting.poll() is None, waiting.communicate()
            time.sleep(0.05)
        # No progress post after the cancel: the result itself is answered cancel.
        result = {"status": "ok", "reason": "success", "cmd_uid": uid, "metrics": {}, "annotations": {}}
        reply = requests.post(
            endpoint, json={"event": "MEASUREMENT", "param": result, "servo_uid": None}, timeout=10
        )
        assert reply.json()["status"] == "cancel"
        out, err = waiting.communicate(timeout=EXIT_TIMEOUT)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.communicate()
    assert waiting.returncode == 0, err
    assert out.splitlines()[-1] == (
        f"MEASURE {uid} had finished when the cancel reached it: its result ok (success) was answered cancel"
    )


@pytest.mark.timeout(60)
def test_cancel_wait_exits_1_when_no_command_comes(serve) -> None:
    process, url = serve("app: example.com/web\nscript: []\n")
    idle = subprocess.run(
        cli("optimizer", "cancel", "--url", url, "--wait", "0.5"), capture_output=True, text=True, timeout=30
    )
    assert idle.returncode == 1
    assert "no command came in flight within 0.5s: nothing cancelled" in idle.stderr
    assert "Traceback" not in idle.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            "app: example.com/web\nscript:\n  - cmd: MEASURE\n    param: {control: {duration: x}}\n",
            "script.0.param.control.duration: not a duration",
        ),
        (
            "app: example.com/web\nscript:\n  - fault: {status: 503, for: 1s, times: 2}\n",
            "script.0.fault: give for or times",
        ),
        ("app: example\nscript: []\n", "app: 'example' is not ORG/APP"),
        ("app: [unclosed\n", "not valid YAML"),
        ("", "the plan is empty"),
        ("- a list\n", "a plan is a mapping"),
    ],
)
def test_a_bad_plan_exits_2_naming_the_file_and_key(tmp_path: Path, text: str, says: str) -> None:
    plan = tmp_path / "bad-plan.yaml"
    plan.write_text(text)
    result = subprocess.run(
        cli("optimizer", "serve", "--port", "0", "--plan", str(plan)),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert f"error: {plan}: " in result.stderr and says in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.timeout(60)
def test_a_missing_plan_file_and_a_busy_port(tmp_path: Path, serve) -> None:
    missing = subprocess.run(
        cli("optimizer", "serve", "--plan", str(tmp_path / "nope.yaml")),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert missing.returncode == 2 and "cannot read the plan" in missing.stderr
    _, url = serve("app: example.com/web\nscript: []\n")
    port = url.rsplit(":", 1)[-1]
    plan = tmp_path / "ok.yaml"
    plan.write_text("app: example.com/web\nscript: []\n")
    busy = subprocess.run(
        cli("optimizer", "serve", "--port", port, "--plan", str(plan)),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert busy.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in busy.stderr


@pytest.mark.timeout(60)
def test_a_plan_without_script_is_served_by_the_search_driver(serve) -> None:
    process, url = serve("app: example.com/web\nsteps: 2\nobjective: {minimize: cost}\n")
    state = requests.get(f"{url}/admin/state", timeout=10).json()
    assert state["app"] == "example.com/web" and state["driver"] and state["driver"].get("kind") != "script"
    poll = {"event": "WHATS_NEXT", "param": None, "servo_uid": None}
    endpoint = f"{url}/accounts/example.com/applications/web/servo"
    assert requests.post(endpoint, json=poll, timeout=10).json()["cmd"] == "DESCRIBE"
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=EXIT_TIMEOUT)
    assert process.returncode == 0


@pytest.mark.timeout(60)
def test_state_option_is_for_search_plans_only(tmp_path: Path) -> None:
    plan = tmp_path / "script.yaml"
    plan.write_text("app: example.com/web\nscript: []\n")
    result = subprocess.run(
        cli("optimizer", "serve", "--port", "0", "--plan", str(plan), "--state", str(tmp_path / "s.json")),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and "--state is for search plans" in result.stderr
