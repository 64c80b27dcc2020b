"""A storm of cancels under CPU load: a cancel always comes back, with fresh connectors.

Three connectors, short operations, and at least ``CANCELS`` cancels at seeded random moments:
in the middle of a MEASURE or ADJUST, just as it finishes (the cancel meets its last progress post
or its result post), and in reply to the result. Two busy-loop processes keep the machine's cores
busy, which is when Thespian delivers replies out of order. Strict, for every trial:

- every command is answered exactly once: the optimizer received one result per cmd_uid, nothing
  after it, and ``cancelled`` exactly when it answered ``cancel`` to a progress post (a progress
  reply is never dropped, however late it comes: the servo reads it before posting the result);
- every cancel the optimizer sent was honoured: after each, a probe command is answered by fresh
  processes of all three connectors; without one, by the same processes;
- the servo never exits, and its process count never grows;
- the cancels include ones answered to progress posts and ones answered to result posts.

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

    cancels = trials = 0
    kinds: dict[str, int] = {}
    answered_to = {"progress": 0, "result": 0}
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
        # The server records a post after answering it, outside its lock: wait for the result's record.
        recorded = kit.wait_until(
            lambda uid=entry.cmd_uid: _with_result(server.state()["history"], uid),
            COMMAND_TIMEOUT,
            what="the result's record",
        )
        history = sorted(recorded, key=lambda e: e["at"])
        posts = [e for e in history if (e.get("param") or {}).get("cmd_uid") == entry.cmd_uid]
        results = [e for e in posts if "status" in e["param"]]
        cancel_on_progress = any(
            "status" not in e["param"] and (e.get("reply") or {}).get("status") == "cancel" for e in posts
        )
        cancel_on_result = any((e.get("reply") or {}).get("status") == "cancel" for e in results)
        assert len(results) == 1, f"{where}: {len(results)} results posted"
        assert posts[-1] is results[0], f"{where}: a post after the result"
        progress_cancels = [
            e
            for e in posts
            if "status" not in e["param"] and (e.get("reply") or {}).get("status") == "cancel"
        ]
        assert len(progress_cancels) <= 1, f"{where}: progress posts after a cancel"
        # Every reply to a progress post is read: a cancel in it is acted on, even one that came
        # back after the operation had finished.
        read = f"cancel to progress of {command['cmd']} {entry.cmd_uid}:" in proc.log()
        assert read == cancel_on_progress, (
            f"{where}: cancel answered to progress {cancel_on_progress}, read {read}"
        )
        assert not (cancel_on_progress and cancel_on_result), f"{where}: cancelled twice"
        expected = "cancelled" if cancel_on_progress else "ok"
        assert results[0]["param"]["status"] == expected, f"{where}: {results[0]['param']}"
        new_pids = pids_of(check)
        if cancel_on_progress or cancel_on_result:
            cancels += 1
            kinds[kind] = kinds.get(kind, 0) + 1
            answered_to["progress" if cancel_on_progress else "result"] += 1
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
        f"answered to {answered_to} (seed {SEED})"
    )
    assert cancels >= CANCELS, f"only {cancels} cancels in {trials} trials (seed {SEED})"
    assert answered_to["progress"] > 0 and answered_to["result"] > 0, f"{answered_to} (seed {SEED})"
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()[-5000:]
    state = server.state()
    assert state["history_dropped"] == 0
    history = sorted(state["history"], key=lambda e: e["at"])
    kit.check_trace(history)
    # What the optimizer received, per command it issued: exactly one result each.
    issued = [(e.get("reply") or {}).get("cmd_uid") for e in history if e.get("event") == "WHATS_NEXT"]
    issued = [uid for uid in issued if uid]
    received = {uid: 0 for uid in issued}
    for e in history:
        uid = (e.get("param") or {}).get("cmd_uid")
        if e.get("event") in ("DESCRIPTION", "MEASUREMENT", "ADJUSTMENT") and "status" in e["param"]:
            received[uid] = received.get(uid, 0) + 1
    assert len(issued) == len(driver.sent) == 1 + 2 * trials, (len(issued), len(driver.sent), trials)
    unanswered = {uid: n for uid, n in received.items() if n != 1}
    assert not unanswered, f"commands not answered exactly once: {unanswered} (seed {SEED})"
    assert "Traceback" not in proc.log()


def _with_result(history: list[dict], cmd_uid: str | None) -> list[dict] | None:
    """``history`` if it holds the result posted for ``cmd_uid``, else None."""
    found = any((e.get("param") or {}).get("cmd_uid") == cmd_uid and "status" in e["param"] for e in history)
    return history if found else None
