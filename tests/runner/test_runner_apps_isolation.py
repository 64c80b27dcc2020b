"""Isolation between the applications of one servo (issue 36): two applications, one servo process,
one actor system, each against its own embedded optimizer over real HTTP. Whatever happens to one
(a storm of cancels, a connector crash-looping past its restart intensity, an optimizer that
answers 500 or hangs) the other's commands go on, with the same connectors."""

from __future__ import annotations

import signal
import threading

import pytest

pytestmark = pytest.mark.timeout(240)

FINISH_TIMEOUT = 60.0
"""Generous bound on a command's round trip: only a hang breaks it."""
PROGRESS_GAP = 3.0
"""Longest gap between two progress posts of a measurement at a 200 ms progress interval that the
test accepts: generous, only a stalled loop breaks it."""
HUNG_ANSWER = 120.0
"""How long the hanging optimizer holds each request (the test releases it when done)."""
APPS = ("acme.com/web", "acme.com/db")


def probe(name: str, **config: object) -> dict:
    return {
        "name": name,
        "type": "chaos",
        "config": {"metrics": {"x": {"unit": "n"}}, "values": {"x": 1}, **config},
    }


def measure(seconds: float) -> dict:
    return {"cmd": "MEASURE", "param": {"metrics": ["x"], "control": {"duration": seconds}}}


def pids(entry) -> dict[str, int]:
    notes = entry.result["annotations"]
    return {key: int(value) for key, value in notes.items() if key.endswith(".pid")}


class FailingDriver:
    """An optimizer whose every answer to the servo is a 500 (its driver raises)."""

    server = None

    def next_command(self):
        raise RuntimeError("the optimizer is broken")

    def progress_reply(self, command, progress):
        return None

    def on_result(self, command, event, result):
        return None

    def on_cancelled(self, command, reason):
        return None

    def state(self):
        return {}


class HangingDriver(FailingDriver):
    """An optimizer that never answers WHATS_NEXT (until the test releases it)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def next_command(self):
        self.release.wait(HUNG_ANSWER)
        return {"cmd": "SLEEP", "param": {"duration": 1}}


def start(servo, optimizer, kit, first_driver=None, first_connectors=None, **first_supervisor):
    drivers, documents = {}, []
    for index, app in enumerate(APPS):
        driver = first_driver if index == 0 and first_driver is not None else kit.QueueDriver(idle_sleep=0.1)
        server = optimizer(driver, app=app)
        driver.server = server
        drivers[app] = driver
        connectors = (
            first_connectors if index == 0 and first_connectors is not None else [probe("p1"), probe("p2")]
        )
        config = kit.servo_config(server, connectors)
        config["supervisor"] = {
            "liveness": {"interval": "200ms", "timeout": "1s"},
            **(first_supervisor if index == 0 else {}),
        }
        documents.append(config)
    return drivers, servo(documents)


def measured(driver, proc, seconds: float = 0.0):
    entry = driver.push(measure(seconds))
    assert entry.finished.wait(FINISH_TIMEOUT), proc.log()
    assert entry.result is not None and entry.result["status"] == "ok", (entry.result, proc.log())
    return entry


def test_a_cancel_storm_in_one_leaves_the_others_measurement_whole(servo, optimizer, kit) -> None:
    drivers, proc = start(servo, optimizer, kit)
    web, db = APPS
    before = pids(measured(drivers[db], proc))
    measured(drivers[web], proc)

    long = drivers[db].push(measure(10.0))
    cancelled = []
    while not long.finished.is_set() and len(cancelled) < 40:
        entry = drivers[web].push(measure(30.0), progress=["cancel"])
        assert entry.finished.wait(FINISH_TIMEOUT), proc.log()
        cancelled.append(entry)
    assert long.finished.wait(FINISH_TIMEOUT), proc.log()
    assert long.result["status"] == "ok", long.result
    assert pids(long) == before, "the measuring application's connectors are the same processes"
    assert len(cancelled) >= 3 and all(entry.result["status"] == "cancelled" for entry in cancelled[:-1])
    posts = [post for post in long.progress_posts]
    assert len(posts) >= 5, posts
    times = [post.get("runtime") for post in posts if post.get("runtime") is not None]
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    assert gaps and max(gaps) < PROGRESS_GAP, gaps
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()


def test_a_crash_loop_past_intensity_in_one_leaves_the_others_loop_going(servo, optimizer, kit) -> None:
    looping = [probe("p1"), probe("crashy", faults={"startup": {"action": "exit", "exit_code": 3}})]
    drivers, proc = start(
        servo,
        optimizer,
        kit,
        first_connectors=looping,
        max_restarts=1,
        period="30s",
        restart_backoff={"min": "10ms", "max": "50ms", "jitter": 0},
    )
    web, db = APPS
    before = pids(measured(drivers[db], proc))
    kit.wait_until(
        lambda: "crashy" in proc.log() and "failed" in proc.log(), FINISH_TIMEOUT, what="crashy failed"
    )
    for _ in range(3):
        assert pids(measured(drivers[db], proc)) == before
    web_entry = drivers[web].push(measure(0.0))
    assert web_entry.finished.wait(FINISH_TIMEOUT), proc.log()
    assert web_entry.result["status"] == "failed" and "crashy" in web_entry.result["message"], (
        web_entry.result
    )
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()


@pytest.mark.parametrize("fault", ["500", "hang"])
def test_a_broken_optimizer_of_one_does_not_slow_the_other(servo, optimizer, kit, fault) -> None:
    broken = FailingDriver() if fault == "500" else HangingDriver()
    try:
        drivers, proc = start(servo, optimizer, kit, first_driver=broken)
        db = APPS[1]
        before = pids(measured(drivers[db], proc))
        for _ in range(5):
            entry = measured(drivers[db], proc, 0.2)
            assert pids(entry) == before
        proc.signal(signal.SIGTERM)
        assert proc.wait() == 0, proc.log()
    finally:
        if isinstance(broken, HangingDriver):
            broken.release.set()
