"""Hostile input end to end: a real `servo-actors run` against the embedded optimizer.

Whatever the optimizer answers and whatever a connector returns, the servo goes on, posts only
valid results, says in its log what was wrong, exits 0 on SIGTERM and leaves nothing behind.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from marked_processes import MARKER_VAR

from servo_actors.config.models import ServoConfig
from servo_actors.identity import CONFLICT_STREAK, IdentityGuard, check_identity, runtime_dir
from servo_actors.optimizer.scripted import ScriptedDriver
from servo_actors.protocol.commands import OptimizerStatus

pytestmark = pytest.mark.timeout(120)

APP = "example.com/web"
"""The environment marker tests/runner/conftest.py looks for in leaked processes."""
FINISH_TIMEOUT = 60.0
"""Generous bound on a round trip here: only a hang (or a 10-minute retry) breaks it."""
DEEP_LIST = "[" * 1000 + "]" * 1000
DEEP_OBJECT = '{"cmd":' * 100 + "1" + "}" * 100
HUGE_REPLY = '{"status": "ok", "message": "' + "x" * (5 * 1024 * 1024) + '"}'
MEASURE = {"cmd": "MEASURE", "param": {"metrics": ["x"], "control": {"duration": "1s"}}}


def chaos(name: str, **config: Any) -> dict[str, Any]:
    return {"name": name, "type": "chaos", "config": config}


def scripted(optimizer: Any, script: list[dict[str, Any]]) -> tuple[ScriptedDriver, Any]:
    driver = ScriptedDriver.from_plan({"app": APP, "script": script, "sleep": "0.3s"})
    return driver, optimizer(driver)


def results(driver: ScriptedDriver) -> list[dict[str, Any]]:
    return driver.state()["results"]


def finish(proc: Any, server: Any, kit: Any) -> list[dict[str, Any]]:
    """SIGTERM, exit 0, a trace that follows the protocol, no traceback; the history."""
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
    history = server.state()["history"]
    kit.check_trace(history)
    assert "Traceback" not in proc.log() and "internal error" not in proc.log(), proc.log()
    return history


def test_deep_and_huge_replies_are_bad_replies_and_the_servo_goes_on(servo, optimizer, kit) -> None:
    driver, server = scripted(
        optimizer,
        [
            {"fault": {"body": DEEP_LIST, "events": ["HELLO"]}},
            {"fault": {"body": DEEP_LIST, "events": ["WHATS_NEXT"]}},
            {"fault": {"body": DEEP_OBJECT, "events": ["WHATS_NEXT"]}},
            {"fault": {"body": HUGE_REPLY, "events": ["WHATS_NEXT"]}},
            MEASURE,
            {"fault": {"body": DEEP_LIST, "events": ["MEASUREMENT"], "times": 2}},
            {"cmd": "DESCRIBE"},
        ],
    )
    proc = servo(kit.servo_config(server, [chaos("probe", metrics={"x": {"unit": "n"}}, values={"x": 1})]))
    kit.wait_until(lambda: len(results(driver)) == 2, FINISH_TIMEOUT, what="MEASURE and DESCRIBE results")
    history = finish(proc, server, kit)
    measured, described = results(driver)
    assert (measured["cmd"], measured["result"]["status"]) == ("MEASURE", "ok")
    assert measured["result"]["metrics"]["x"]["values"][0]["data"][0][1] == 1
    assert (described["cmd"], described["result"]["status"]) == ("DESCRIBE", "ok")
    assert driver.state()["faults_hit"] == 6
    log = proc.log()
    assert "nested deeper than 64 levels" in log
    assert f"larger than {4 * 1024 * 1024} bytes" in log
    # Polled again after each bad reply (3 of them) before the MEASURE came.
    polls_before = [e for e in history if e["event"] == "WHATS_NEXT"][:4]
    assert [e.get("fault", False) for e in polls_before] == [True, True, True, False]


def test_reasons_and_statuses_that_are_not_words_still_make_valid_results(servo, optimizer, kit) -> None:
    components = {"web": {"settings": {"r": {"type": "range", "min": 1, "max": 4, "step": 1, "value": 1}}}}
    driver, server = scripted(
        optimizer,
        [
            {**MEASURE, "progress": [{"status": "cancel", "reason": "user/abort", "message": "pressed"}]},
            {"cmd": "MEASURE", "param": {"metrics": ["y"]}},
            {
                "cmd": "ADJUST",
                "param": {
                    "state": {"application": {"components": {"web": {"settings": {"r": {"value": 2}}}}}}
                },
            },
            {"cmd": "DESCRIBE"},
        ],
    )
    slo = {"measure": {"action": "failure", "status": "aborted", "reason": "slo violation", "message": "p99"}}
    boom = {"adjust": {"action": "failure", "status": "exploded", "reason": "kaboom!", "message": "bad"}}
    connectors = [
        chaos("probe", metrics={"x": {"unit": "n"}}, values={"x": 1}),
        chaos("slo", metrics={"y": {"unit": "n"}}, faults=slo),
        chaos("boom", components=components, faults=boom),
    ]
    proc = servo(kit.servo_config(server, connectors))
    kit.wait_until(lambda: len(results(driver)) == 4, FINISH_TIMEOUT, what="four results")
    finish(proc, server, kit)
    cancelled, aborted, adjusted, described = (r["result"] for r in results(driver))
    assert (cancelled["status"], cancelled["reason"]) == ("cancelled", "user-abort")
    assert "pressed" in cancelled["message"] and "'user/abort'" in cancelled["message"]
    assert (aborted["status"], aborted["reason"]) == ("aborted", "slo-violation")
    assert "p99" in aborted["message"] and "'slo violation'" in aborted["message"]
    # An unknown status is failed, and the connector's reason survives (it once went out as success).
    assert (adjusted["status"], adjusted["reason"]) == ("failed", "kaboom")
    assert "'exploded'" in adjusted["message"] and "'kaboom!'" in adjusted["message"]
    assert described["status"] == "ok"


@pytest.mark.parametrize("status", [413, 400, 422])
def test_a_result_refused_for_good_is_dropped_at_once(servo, optimizer, kit, status: int) -> None:
    driver, server = scripted(
        optimizer,
        [
            {"cmd": "DESCRIBE"},
            {"fault": {"status": status, "events": ["DESCRIPTION"]}},
            {"cmd": "DESCRIBE"},
        ],
    )
    config = kit.servo_config(server, [chaos("probe", metrics={"x": {"unit": "n"}})])
    config["settings"]["backoff"]["max_time"] = "10m"  # the old behaviour: retried this long
    proc = servo(config)
    kit.wait_until(lambda: len(results(driver)) == 1, FINISH_TIMEOUT, what="the second DESCRIBE's result")
    history = finish(proc, server, kit)
    posts = [e for e in history if e["event"] == "DESCRIPTION"]
    assert [(e["param"]["cmd_uid"], e["http_status"]) for e in posts] == [("c1", status), ("c2", 200)]
    assert results(driver)[0]["cmd_uid"] == "c2"
    log = proc.log()
    assert f"HTTP {status}" in log and "bytes" in log and "dropped" in log
    # The result line says what happened to it, and what the servo did next.
    assert "result of DESCRIBE c1: ok" not in log
    said = next(line for line in log.splitlines() if "result of DESCRIBE c1" in line)
    assert (
        f"result of DESCRIBE c1 (ok, success) not delivered: refused by the optimizer (HTTP {status}" in said
    )
    assert "dropped, as the same body would be refused again" in said
    assert said.endswith("; the servo goes on to poll for its next command"), said
    assert "result of DESCRIBE c2: ok (success)" in log


def test_values_that_are_not_finite_are_dropped_and_said(servo, optimizer, kit) -> None:
    driver, server = scripted(optimizer, [{"cmd": "MEASURE", "param": {"metrics": ["x", "y", "z"]}}])
    metrics = {name: {"unit": "n"} for name in ("x", "y", "z")}
    probe = chaos("probe", metrics=metrics, values={"x": math.nan, "y": math.inf, "z": 3})
    proc = servo(kit.servo_config(server, [probe]))
    kit.wait_until(lambda: len(results(driver)) == 1, FINISH_TIMEOUT, what="the MEASURE result")
    history = finish(proc, server, kit)
    result = results(driver)[0]["result"]
    assert result["status"] == "ok"
    assert result["metrics"]["x"]["values"][0]["data"] == []
    assert result["metrics"]["y"]["values"][0]["data"] == []
    assert result["metrics"]["z"]["values"][0]["data"][0][1] == 3
    assert "dropped 2 values" in result["message"]
    assert result["annotations"]["servo_actors.dropped_values"] == "x 1, y 1"
    assert [e["http_status"] for e in history if e["event"] == "MEASUREMENT"][-1] == 200
    assert "dropped 2 values that are not a finite number" in proc.log()


def _lock_files(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "servo-actors").glob("identity-*.lock")) if run_dir.exists() else []


def test_two_servos_with_one_identity_are_told_and_back_off(
    servo, optimizer, kit, tmp_path, monkeypatch
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run_dir))
    driver = kit.QueueDriver(idle_sleep=0.1)
    server = optimizer(driver)
    for _ in range(40):
        # Long enough that a servo whose command is taken every poll interval never finishes one.
        driver.push({"cmd": "MEASURE", "param": {"metrics": ["x"], "control": {"duration": 5}}})
    config = kit.servo_config(server, [chaos("probe", metrics={"x": {"unit": "n"}}, values={"x": 1})])
    config["servo_uid"] = "twin"
    first = servo(config)
    kit.wait_until(lambda: len(_lock_files(run_dir)) == 1, FINISH_TIMEOUT, what="the first servo's lock")
    second = servo(config)
    kit.wait_until(
        lambda: "another servo (pid" in second.log(), FINISH_TIMEOUT, what="the second servo told at start-up"
    )
    assert f"pid {first.proc.pid}" in second.log()
    # Each steals the other's commands: the optimizer's answers show it to both, in words.
    kit.wait_until(
        lambda: "commands in a row as 'unexpected cmd_uid'" in first.log(),
        FINISH_TIMEOUT,
        what="the first servo noticing the conflict",
    )
    assert "polling at most every 0.5s" in first.log()
    # `check` with the same configuration names the conflict the running servo reports.
    marker = uuid.uuid4().hex
    env = {**os.environ, MARKER_VAR: marker}
    checked = subprocess.run(
        [sys.executable, "-m", "servo_actors", "-c", str(first.config_path), "check"],
        capture_output=True,
        text=True,
        env=env,
        timeout=FINISH_TIMEOUT,
    )
    assert checked.returncode == 1, checked.stdout + checked.stderr
    row = next(line for line in checked.stdout.splitlines() if line.startswith("servo"))
    assert "identity" in row and "FAILED" in row and f"pid {first.proc.pid}" in row
    assert "Traceback" not in checked.stderr
    kit.wait_until(lambda: not kit.marked_pids(marker), 10.0, what="check's processes gone")
    for proc in (second, first):
        proc.signal(signal.SIGTERM)
        assert proc.wait() == 0, proc.log()
        assert "Traceback" not in proc.log()
    assert _lock_files(run_dir) == []  # nothing left behind


def test_check_says_no_servo_of_this_identity_runs(kit, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    config = {
        "optimizer": {"id": APP, "base_url": "http://127.0.0.1:9"},
        "connectors": [chaos("probe")],
    }
    path = tmp_path / "servo.yaml"
    path.write_text(yaml.safe_dump(config))
    marker = uuid.uuid4().hex
    checked = subprocess.run(
        [sys.executable, "-m", "servo_actors", "-c", str(path), "check", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, MARKER_VAR: marker},
        timeout=FINISH_TIMEOUT,
    )
    assert checked.returncode == 0, checked.stderr
    kit.wait_until(lambda: not kit.marked_pids(marker), 10.0, what="check's processes gone")
    identity = json.loads(checked.stdout)["data"]["checks"][-1]
    assert (identity["connector"], identity["name"], identity["success"]) == ("servo", "identity", True)
    assert "no servo with this identity runs here" in identity["message"]


# --- the identity guard on its own (no processes) -------------------------------------------------


def _identity_config(servo_uid: str | None = "twin") -> ServoConfig:
    return ServoConfig.model_validate(
        {"optimizer": {"id": APP, "base_url": "http://127.0.0.1:9"}, "servo_uid": servo_uid}
    )


def test_a_second_guard_of_one_identity_is_told_and_takes_over_when_the_first_goes(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    config = _identity_config()
    first = IdentityGuard.for_config(config)
    assert first.conflict is None
    assert check_identity(config)[0] is True and "runs here" in check_identity(config)[1]
    second = IdentityGuard.for_config(config)
    assert second.conflict is not None and f"pid {os.getpid()}" in second.conflict
    assert second.poll_delay() >= config.settings.backoff.max
    # Another servo_uid is another identity: no conflict.
    other = IdentityGuard.for_config(_identity_config("other"))
    assert other.conflict is None
    first.release()
    assert second.poll_delay() == 0.0 and second.conflict is None  # took the lock on its next poll
    second.release()
    other.release()
    assert _lock_files(tmp_path) == []


def test_check_fails_while_the_running_servo_reports_a_conflict(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    config = _identity_config(None)
    guard = IdentityGuard.for_config(config)
    refused = OptimizerStatus(status="invalid", reason="unexpected cmd_uid")
    for n in range(CONFLICT_STREAK):
        guard.observe("MEASUREMENT", {"progress": 5, "cmd_uid": f"c{n}"}, refused)
        guard.observe("MEASUREMENT", {"progress": 9, "cmd_uid": f"c{n}"}, refused)  # counts once
        assert (guard.conflict is None) == (n < CONFLICT_STREAK - 1)
    success, message = check_identity(config)
    assert not success and "unexpected cmd_uid" in message and f"pid {os.getpid()}" in message
    # Progress answered ok does not end it (a stolen command's first posts are ok too); a result does.
    guard.observe("MEASUREMENT", {"progress": 5, "cmd_uid": "c9"}, OptimizerStatus(status="ok"))
    assert guard.conflict is not None
    taken = {"status": "ok", "reason": "success", "cmd_uid": "c9"}
    guard.observe("MEASUREMENT", taken, OptimizerStatus(status="ok"))
    assert guard.conflict is None and guard.poll_delay() == 0.0
    assert check_identity(config)[0] is True
    guard.release()
    assert check_identity(config)[0] is True
    assert "no servo with this identity runs here" in check_identity(config)[1]


def test_a_runtime_directory_others_can_write_is_not_used(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    shared = tmp_path / "servo-actors"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    assert runtime_dir() is None
    shared.chmod(0o700)
    assert runtime_dir() == shared


def test_locks_of_killed_servos_are_swept_at_the_next_start(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    runtime = runtime_dir()
    assert runtime is not None
    stale = runtime / "identity-0123456789abcdef.lock"  # a SIGKILLed servo's: nobody holds it
    stale.write_text('{"pid": 1}')
    held = IdentityGuard.for_config(_identity_config("held"))
    guard = IdentityGuard.for_config(_identity_config())
    assert not stale.exists()
    assert held.path is not None and held.path.exists()  # held: left alone
    guard.release()
    held.release()
    assert _lock_files(tmp_path) == []
