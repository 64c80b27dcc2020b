"""Cancel at random moments: Abort pressed at a seeded random time during MEASURE and ADJUST.

Each trial: one command with a cancel timed at random, then a MEASURE that shows which process
answered. Whatever the moment, the servo must post ``cancelled`` exactly once when the optimizer
answered ``cancel`` to a progress post, nothing more when it answered ``cancel`` to the result, and
the next command must be answered by fresh connectors (a new PID) exactly when a cancel happened.
"""

from __future__ import annotations

import os
import random
import signal

import pytest

TRIALS = int(os.environ.get("SERVO_CANCEL_TRIALS", "50"))
MASTER_SEED = int(os.environ.get("SERVO_CANCEL_SEED", "20261202"))
COMMAND_TIMEOUT = 60.0
"""Generous bound on one command's round trip: only a hang breaks it."""

SYNTHETIC = {
    "name": "app",
    "type": "synthetic",
    "config": {"seed": 1, "time_scale": 0.1, "rollout_seconds": "4s"},
}
PROBE = {"name": "probe", "type": "chaos", "config": {"metrics": {"x": {"unit": "n"}}, "values": {"x": 1}}}
MEASURE = {"cmd": "MEASURE", "param": {"metrics": ["x", "cost"], "control": {"duration": 4}}}
PROBE_MEASURE = {"cmd": "MEASURE", "param": {"metrics": ["x"], "control": {"duration": 0}}}


def adjust(cpu: float) -> dict:
    state = {"application": {"components": {"web": {"settings": {"cpu": {"value": cpu}}}}}}
    return {"cmd": "ADJUST", "param": {"state": state, "control": {"settlement": 0}}}


def pid_of(entry) -> int:
    return int(entry.result["annotations"]["probe.pid"])


@pytest.mark.timeout(600)
def test_cancel_at_random_moments(servo, optimizer, kit) -> None:
    driver = kit.QueueDriver(idle_sleep=0.05)
    server = optimizer(driver)
    driver.server = server
    proc = servo(kit.servo_config(server, [SYNTHETIC, PROBE], progress_interval="100ms"))
    baseline = driver.push(PROBE_MEASURE)
    assert baseline.finished.wait(COMMAND_TIMEOUT), proc.log()
    pid = pid_of(baseline)
    cancelled_count = 0

    for trial in range(TRIALS):
        seed = MASTER_SEED + trial
        rng = random.Random(seed)
        command = MEASURE if trial % 2 == 0 else adjust(rng.choice([0.5, 1.0, 1.5, 2.0]))
        delay = rng.uniform(0.0, 0.6)
        where = f"trial {trial} (seed {seed}, {command['cmd']}, cancel after {delay:.3f} s)"
        entry = driver.push(command, cancel_after=delay)
        assert entry.finished.wait(COMMAND_TIMEOUT), f"{where}: no answer\n{proc.log()}"
        # The Abort is pressed before the next command exists, so it cannot hit that one.
        assert entry.cancel_timer is not None
        entry.cancel_timer.join(COMMAND_TIMEOUT)
        check = driver.push(PROBE_MEASURE)
        assert check.finished.wait(COMMAND_TIMEOUT), (
            f"{where}: the next command was not answered\n{proc.log()}"
        )
        assert check.result is not None and check.result["status"] == "ok", f"{where}: {check.result}"

        # The server records a post after answering it, outside its lock: wait for the result's record.
        history = kit.wait_until(
            lambda uid=entry.cmd_uid: _with_result(server.state()["history"], uid),
            COMMAND_TIMEOUT,
            what="the result's record",
        )
        posts = [e for e in history if (e.get("param") or {}).get("cmd_uid") == entry.cmd_uid]
        results = [e for e in posts if "status" in e["param"]]
        cancel_on_progress = any(
            "status" not in e["param"] and (e.get("reply") or {}).get("status") == "cancel" for e in posts
        )
        cancel_on_result = any((e.get("reply") or {}).get("status") == "cancel" for e in results)
        assert len(results) == 1, f"{where}: {len(results)} results posted"
        assert posts[-1] is results[0], f"{where}: a post after the result"
        if cancel_on_progress:
            assert results[0]["param"]["status"] == "cancelled", f"{where}: {results[0]['param']}"
        else:
            assert results[0]["param"]["status"] == "ok", f"{where}: {results[0]['param']}"
        new_pid = pid_of(check)
        if cancel_on_progress or cancel_on_result:
            cancelled_count += 1
            assert new_pid != pid, f"{where}: the connectors were not restarted after the cancel"
        else:
            assert new_pid == pid, f"{where}: connectors restarted without a cancel"
        pid = new_pid

    print(f"{TRIALS} trials, {cancelled_count} cancelled (master seed {MASTER_SEED})")
    assert cancelled_count >= TRIALS // 2, "too few trials hit a running command to mean anything"
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0
    kit.check_trace(server.state()["history"])


def _with_result(history: list[dict], cmd_uid: str | None) -> list[dict] | None:
    """``history`` if it holds the result posted for ``cmd_uid``, else None."""
    found = any((e.get("param") or {}).get("cmd_uid") == cmd_uid and "status" in e["param"] for e in history)
    return history if found else None
