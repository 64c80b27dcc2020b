"""A storm of cancels under CPU load: a cancel always comes back, with fresh connectors.

Three connectors, short operations, and at least ``CANCELS`` cancels at seeded random moments:
in the middle of a MEASURE or ADJUST, just as it finishes (the cancel meets its last progress post
or its result post), and in reply to the result. Two busy-loop processes keep the machine's cores
busy, which is when Thespian delivers replies out of order. After each cancel a probe command must
be answered by fresh processes of all three connectors; the servo must never exit; every command is
answered exactly once; the servo's process count never grows.

The seed is printed; ``SERVO_STORM_SEED`` replays a run, ``SERVO_STORM_CANCELS`` sets the count.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

CANCELS = int(os.environ.get("SERVO_STORM_CANCELS", "100"))
SEED = int(os.environ.get("SERVO_STORM_SEED", str(random.SystemRandom().randrange(1 << 32))))
MAX_TRIALS = CANCELS * 2
"""Trials with no cancel (a timer that fired after the result) do not count; this bounds them."""
LOAD_PROCESSES = int(os.environ.get("SERVO_STORM_LOAD", "2"))
COMMAND_TIMEOUT = 60.0
"""Generous bound on one command's round trip: only a hang breaks it."""
DURATION = 0.25
"""Seconds each MEASURE takes (and each ADJUST's settlement): short, so many trials fit."""

PROGRESS_INTERVAL = "100ms"
SKIPPED_PROGRESS = "not delivered within the progress interval"
"""The servo's log line when a progress post took longer than the interval and was abandoned: the
optimizer may have answered ``cancel`` to it, a reply the servo never read (as if the network had
dropped it), so that trial is no cancel as far as the servo knows."""

PROBES = ("p1", "p2", "p3")


def probe(name: str) -> dict:
    return {
        "name": name,
        "type": "chaos",
        "config": {
            "metrics": {f"{name}_x": {"unit": "n"}},
            "values": {f"{name}_x": 1},
            "progress_steps": 2,
            "components": {
                f"{name}_web": {
                    "settings": {"cpu": {"type": "range", "min": 1, "max": 4, "step": 1, "value": 1}}
                }
            },
        },
    }


MEASURE = {
    "cmd": "MEASURE",
    "param": {"metrics": [f"{n}_x" for n in PROBES], "control": {"duration": DURATION}},
}
PROBE_MEASURE = {
    "cmd": "MEASURE",
    "param": {"metrics": [f"{n}_x" for n in PROBES], "control": {"duration": 0}},
}


def adjust(value: int) -> dict:
    components = {f"{n}_web": {"settings": {"cpu": {"value": value}}} for n in PROBES}
    return {
        "cmd": "ADJUST",
        "param": {"state": {"application": {"components": components}}, "control": {"settlement": DURATION}},
    }


def pids_of(entry) -> dict[str, int]:
    notes = entry.result["annotations"]
    return {name: int(notes[f"{name}.pid"]) for name in PROBES}


@pytest.fixture
def cpu_load() -> Iterator[list[int]]:
    """Busy-loop processes for the length of the test, killed by PID afterwards."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(LOAD_PROCESSES)]
    yield [p.pid for p in procs]
    for proc in procs:
        proc.kill()
        proc.wait(10)


@pytest.mark.timeout(600)
def test_cancel_storm_under_load(servo, optimizer, kit, cpu_load, tmp_path) -> None:
    print(f"storm seed {SEED} (replay with SERVO_STORM_SEED={SEED})")
    rng = random.Random(SEED)
    driver = kit.QueueDriver(idle_sleep=0.05)
    server = optimizer(driver)
    driver.server = server
    config = kit.servo_config(server, [probe(n) for n in PROBES], progress_interval=PROGRESS_INTERVAL)
    config["supervisor"] = {"run_dir": str(tmp_path / "run")}  # connector and Thespian logs kept
    proc = servo(config)
    baseline = driver.push(PROBE_MEASURE)
    assert baseline.finished.wait(COMMAND_TIMEOUT), proc.log()
    pids = pids_of(baseline)
    process_count = len(kit.marked_pids(proc.marker))

    cancels = trials = unread = 0
    kinds: dict[str, int] = {}
    started = time.monotonic()
    while cancels < CANCELS and trials < MAX_TRIALS:
        trials += 1
        kind = rng.choice(["mid", "finish", "result"])
        command = MEASURE if rng.random() < 0.6 else adjust(rng.randint(1, 4))
        options: dict = {}
        delay = 0.0
        if kind == "mid":
            delay = rng.uniform(0.0, DURATION * 0.9)
        elif kind == "finish":
            delay = rng.uniform(DURATION - 0.03, DURATION + 0.05)
        else:
            options["result_reply"] = "cancel"
        where = f"trial {trials} ({kind}, {command['cmd']}, cancel after {delay:.3f} s; seed {SEED})"
        skipped_before = proc.log().count(SKIPPED_PROGRESS)
        if kind != "result":
            options["cancel_after"] = delay
        entry = driver.push(command, **options)
        assert entry.finished.wait(COMMAND_TIMEOUT), f"{where}: no answer\n{proc.log()[-5000:]}"
        # The Abort is pressed before the next command exists, so it cannot hit that one.
        if entry.cancel_timer is not None:
            entry.cancel_timer.join(COMMAND_TIMEOUT)
        check = driver.push(PROBE_MEASURE)
        assert check.finished.wait(COMMAND_TIMEOUT), (
            f"{where}: the next command was not answered\n{proc.log()[-5000:]}"
        )
        assert proc.proc.poll() is None, f"{where}: the servo exited\n{proc.log()[-5000:]}"
        assert check.result is not None and check.result["status"] == "ok", f"{where}: {check.result}"

        # In the order the requests arrived: an abandoned progress post may be answered late.
        history = sorted(server.state()["history"], key=lambda e: e["at"])
        posts = [e for e in history if (e.get("param") or {}).get("cmd_uid") == entry.cmd_uid]
        results = [e for e in posts if "status" in e["param"]]
        cancel_on_progress = any(
            "status" not in e["param"] and (e.get("reply") or {}).get("status") == "cancel" for e in posts
        )
        cancel_on_result = any((e.get("reply") or {}).get("status") == "cancel" for e in results)
        assert len(results) == 1, f"{where}: {len(results)} results posted"
        assert posts[-1] is results[0], f"{where}: a post after the result"
        read = f"cancel to progress of {command['cmd']} {entry.cmd_uid}:" in proc.log()
        assert cancel_on_progress or not read, f"{where}: a cancel nobody sent"
        if cancel_on_progress and not read:
            # The progress post was abandoned after the interval (the log says so) and its reply
            # never read, as if the network had dropped it: for the servo there was no cancel.
            assert proc.log().count(SKIPPED_PROGRESS) > skipped_before, f"{where}: a cancel ignored"
            unread += 1
            cancel_on_progress = False
        expected = "cancelled" if cancel_on_progress else "ok"
        assert results[0]["param"]["status"] == expected, f"{where}: {results[0]['param']}"
        new_pids = pids_of(check)
        if cancel_on_progress or cancel_on_result:
            cancels += 1
            kinds[kind] = kinds.get(kind, 0) + 1
            stale = {name for name in PROBES if new_pids[name] == pids[name]}
            assert not stale, f"{where}: {sorted(stale)} not restarted after the cancel"
        else:
            assert new_pids == pids, f"{where}: connectors restarted without a cancel"
        pids = new_pids
        # Killed connectors are gone once the fresh ones answered: the count never grows.
        assert len(kit.marked_pids(proc.marker)) == process_count, f"{where}: processes leaked"

    elapsed = time.monotonic() - started
    print(
        f"{cancels} cancels in {trials} trials, {elapsed:.1f} s, by kind {kinds}, "
        f"{unread} cancel replies never read (seed {SEED})"
    )
    assert cancels >= CANCELS, f"only {cancels} cancels in {trials} trials (seed {SEED})"
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()[-5000:]
    state = server.state()
    assert state["history_dropped"] == 0
    kit.check_trace(sorted(state["history"], key=lambda e: e["at"]))
    assert "Traceback" not in proc.log()
