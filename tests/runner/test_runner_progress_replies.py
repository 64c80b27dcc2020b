"""Progress replies are never lost, and never hold up the operation they report on.

A real servo against the embedded optimizer, whose answers to progress posts are held back (a
stall) for as long as a test says:

- a ``cancel`` answered to a progress post is honoured: mid-operation, and when the reply comes
  only after the operation has finished (the servo waits for it before posting the result, so the
  command gets exactly one result, ``cancelled``, and fresh connectors);
- one progress post is in flight at most: heartbeats due meanwhile are skipped, never queued;
- a progress reply slower than the operation itself, and slower than the watchdog's liveness
  timeout, does not block the operation or the watchdog: the result is ``ok``, no microreboot.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import pytest

from servo_actors.optimizer.application import Fault

COMMAND_TIMEOUT = 60.0
"""Generous bound on one command's round trip: only a hang breaks it."""
PROGRESS_INTERVAL = "100ms"
LIVENESS = {"interval": "200ms", "timeout": "1s"}
"""Short: a loop that stopped reading its actor system's answers for a second would lose it."""
SLOW_REPLY = 2.5
"""Seconds a slow progress reply is held: longer than the operation and the liveness timeout."""
LATE_REPLY = 1.5
"""Seconds the cancel answered to a progress post is held: the operation finishes meanwhile."""
PROBES = ("p1", "p2")


def probe(name: str) -> dict:
    return {
        "name": name,
        "type": "chaos",
        "config": {"metrics": {f"{name}_x": {"unit": "n"}}, "values": {f"{name}_x": 1}, "progress_steps": 4},
    }


def measure(seconds: float) -> dict:
    return {
        "cmd": "MEASURE",
        "param": {"metrics": [f"{n}_x" for n in PROBES], "control": {"duration": seconds}},
    }


def pids_of(entry) -> dict[str, int]:
    notes = entry.result["annotations"]
    return {name: int(notes[f"{name}.pid"]) for name in PROBES}


class StallingDriver:
    """A QueueDriver whose answers to progress posts are held ``stall`` seconds; it counts the
    progress posts in flight (arrived, not yet answered) and the order of events."""

    def __init__(self, queue_driver: Any) -> None:
        self.inner = queue_driver
        self.stall = 0.0
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.events: list[tuple[str, str | None]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def fault_for(self, event: str, param: Any) -> Fault | None:
        if event in ("MEASUREMENT", "ADJUSTMENT") and isinstance(param, dict) and "status" not in param:
            with self.lock:
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                self.events.append(("progress-arrived", param.get("cmd_uid")))
            return Fault(stall=self.stall) if self.stall else None
        return None

    def progress_reply(self, command: dict[str, Any], progress: dict[str, Any]) -> dict[str, Any] | None:
        with self.lock:
            self.in_flight -= 1
            self.events.append(("progress-answered", command.get("cmd_uid")))
        return self.inner.progress_reply(command, progress)

    def on_result(self, command: dict[str, Any], event: str, result: dict[str, Any]) -> dict[str, Any] | None:
        with self.lock:
            self.events.append(("result", command.get("cmd_uid")))
        return self.inner.on_result(command, event, result)


@pytest.fixture
def stalling(servo, optimizer, kit, tmp_path):
    driver = StallingDriver(kit.QueueDriver(idle_sleep=0.05))
    server = optimizer(driver)
    driver.inner.server = server
    config = kit.servo_config(server, [probe(n) for n in PROBES], progress_interval=PROGRESS_INTERVAL)
    config["settings"]["timeouts"] = {"connect": "2s", "read": "10s"}  # longer than any stall here
    config["supervisor"] = {"liveness": LIVENESS}
    proc = servo(config)
    yield driver, server, proc
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()[-5000:]
    kit.check_trace(sorted(server.state()["history"], key=lambda e: e["at"]))
    assert "Traceback" not in proc.log()


def run(driver, proc, command: dict, **options: Any):
    entry = driver.inner.push(command, **options)
    assert entry.finished.wait(COMMAND_TIMEOUT), proc.log()[-5000:]
    return entry


def posts_for(server, cmd_uid: str) -> tuple[list[dict], list[dict]]:
    """(progress posts, result posts) the optimizer received for ``cmd_uid``, in arrival order."""
    history = sorted(server.state()["history"], key=lambda e: e["at"])
    posts = [e for e in history if (e.get("param") or {}).get("cmd_uid") == cmd_uid]
    return [e for e in posts if "status" not in e["param"]], [e for e in posts if "status" in e["param"]]


@pytest.mark.timeout(180)
def test_a_cancel_answered_to_a_progress_post_is_honoured(stalling) -> None:
    driver, server, proc = stalling
    pids = pids_of(run(driver, proc, measure(0)))
    cases = [
        ("mid-operation", 0.0, measure(30)),
        ("after the operation finished", LATE_REPLY, measure(0.3)),
    ]
    for name, stall, command in cases:
        driver.stall = stall
        entry = run(driver, proc, command, progress=["cancel"])
        driver.stall = 0.0
        progress, results = posts_for(server, entry.cmd_uid)
        assert entry.cancelled, name
        assert len(results) == 1, f"{name}: {len(results)} results"
        assert results[0]["param"]["status"] == "cancelled", f"{name}: {results[0]['param']}"
        assert results[0]["param"]["reason"] == "test", name
        # The first progress post was answered cancel; nothing went out for the command after it
        # but its cancelled result.
        assert (progress[0].get("reply") or {}).get("status") == "cancel", name
        assert len(progress) == 1, f"{name}: {len(progress)} progress posts"
        check = run(driver, proc, measure(0))
        assert check.result["status"] == "ok", f"{name}: {check.result}"
        fresh = pids_of(check)
        assert not {n for n in PROBES if fresh[n] == pids[n]}, f"{name}: connectors not restarted"
        pids = fresh
    assert proc.proc.poll() is None, proc.log()[-5000:]


@pytest.mark.timeout(180)
def test_one_progress_post_in_flight_and_a_slow_reply_does_not_block_the_operation(stalling) -> None:
    driver, server, proc = stalling
    pids = pids_of(run(driver, proc, measure(0)))

    # Replies slower than the progress interval: heartbeats due meanwhile are skipped, not queued.
    driver.stall = 0.4
    entry = run(driver, proc, measure(1.5))
    progress, results = posts_for(server, entry.cmd_uid)
    assert driver.max_in_flight == 1, driver.events
    assert len(progress) >= 2, "the heartbeat stopped after a slow reply"
    assert [r["param"]["status"] for r in results] == ["ok"]

    # A reply slower than the whole operation and than the liveness timeout: the operation and the
    # watchdog go on meanwhile; the result goes out once the reply is read.
    driver.stall = SLOW_REPLY
    entry = run(driver, proc, measure(0.5))
    driver.stall = 0.0
    progress, results = posts_for(server, entry.cmd_uid)
    assert len(progress) == 1, f"{len(progress)} progress posts"
    assert [r["param"]["status"] for r in results] == ["ok"], results[0]["param"]
    mine = [kind for kind, uid in driver.events if uid == entry.cmd_uid]
    assert mine == ["progress-arrived", "progress-answered", "result"], mine
    assert driver.max_in_flight == 1
    assert "microreboot" not in proc.log(), proc.log()[-5000:]
    assert pids_of(run(driver, proc, measure(0))) == pids, "connectors restarted without a cancel"
