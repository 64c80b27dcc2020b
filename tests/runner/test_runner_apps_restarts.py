"""The tree's rules drive the running servo (issue 36): an application whose supervisor keeps dying
is restarted after a growing backoff (its ``supervisor.restart_backoff``) while the other
application's commands go on, and a supervisor that dies before it first answers is noticed and
its subtree killed at once. Two applications, one servo process, each against its own embedded
optimizer over real HTTP; real SIGKILLs."""

from __future__ import annotations

import os
import signal
import time

import pytest

from servo_actors.actors.linux import processes

pytestmark = pytest.mark.timeout(180)

FINISH_TIMEOUT = 60.0
"""Generous bound on a command's round trip or a restart: only a hang breaks it."""
BACKOFF = {"min": "1500ms", "max": "8s", "jitter": 0}
"""The first restart of a streak is at once, then 1.5 s, 3 s, 6 s (no jitter: exact lower bounds)."""
DELAYS = (0.0, 1.5, 3.0, 6.0)
SLOW_START = 60.0
"""A connector's startup() that outlasts the test: its supervisor never answers before it is killed."""
APPS = ("acme.com/web", "acme.com/db")


def probe(name: str, **config: object) -> dict:
    return {
        "name": name,
        "type": "chaos",
        "config": {"metrics": {"x": {"unit": "n"}}, "values": {"x": 1}, **config},
    }


def measure(seconds: float) -> dict:
    return {"cmd": "MEASURE", "param": {"metrics": ["x"], "control": {"duration": seconds}}}


def start(servo, optimizer, kit, web_connectors, web_supervisor):
    drivers, documents = {}, []
    for app in APPS:
        driver = kit.QueueDriver(idle_sleep=0.1)
        server = optimizer(driver, app=app)
        driver.server = server
        drivers[app] = driver
        config = kit.servo_config(server, web_connectors if app == APPS[0] else [probe("p1")])
        config["supervisor"] = {
            "liveness": {"interval": "200ms", "timeout": "1s"},
            **(web_supervisor if app == APPS[0] else {}),
        }
        documents.append(config)
    return drivers, servo(documents)


def measured(driver, proc):
    entry = driver.push(measure(0.0))
    assert entry.finished.wait(FINISH_TIMEOUT), proc.log()
    assert entry.result is not None and entry.result["status"] == "ok", (entry.result, proc.log())
    return entry


def supervisor_of(entry) -> int:
    return processes.proc_stat(int(entry.result["annotations"]["p1.pid"])).ppid


def new_child(parent: int, known: set[int]) -> int | None:
    fresh = [child.pid for child in processes.children_of(parent) if child.alive and child.pid not in known]
    return fresh[0] if fresh else None


def test_a_supervisor_killed_again_and_again_restarts_after_a_growing_backoff(servo, optimizer, kit) -> None:
    drivers, proc = start(
        servo,
        optimizer,
        kit,
        [probe("p1")],
        {"microreboots": {"max": 5, "period": "5m"}, "restart_backoff": BACKOFF},
    )
    web, db = APPS
    db_entry = measured(drivers[db], proc)
    db_supervisor = supervisor_of(db_entry)
    admin = processes.proc_stat(db_supervisor).ppid
    supervisor = supervisor_of(measured(drivers[web], proc))
    known = {child.pid for child in processes.children_of(admin)}  # the logger, both supervisors

    for delay in DELAYS:
        killed_at = time.monotonic()
        os.kill(supervisor, signal.SIGKILL)
        if delay:
            # Meanwhile the other application's commands go on with the same connectors: during
            # the longest backoff (20 times a command's round trip here), one completes before this
            # one is back (the backoff is waited out on its own loop's thread only).
            entry = measured(drivers[db], proc)
            assert entry.result["annotations"]["p1.pid"] == db_entry.result["annotations"]["p1.pid"]
            if delay == DELAYS[-1]:
                assert new_child(admin, known) is None, "the other's command waited for this backoff"
        fresh = kit.wait_until(
            lambda: new_child(admin, known), FINISH_TIMEOUT, 0.02, what="a fresh supervisor"
        )
        gap = time.monotonic() - killed_at
        assert gap >= delay, (delay, gap)  # a lower bound: the backoff is waited out, never skipped
        known.add(fresh)
        supervisor = supervisor_of(measured(drivers[web], proc))
        assert supervisor == fresh

    log = proc.log()
    assert log.count(f"[{web}] servo_actors.runner.app_restarts: {web}: its subtree restarts in") == 3, log
    assert f"{web}: its subtree restarts in 6.00s" in log
    assert f"[{db}] servo_actors.runner.app_restarts" not in log
    assert processes.is_running(db_supervisor)
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()


def test_a_supervisor_killed_before_it_first_answers_is_cleaned_up_at_once(servo, optimizer, kit) -> None:
    slow = [probe("p1", faults={"startup": {"action": "sleep", "seconds": SLOW_START}})]
    drivers, proc = start(servo, optimizer, kit, slow, {"startup_timeout": f"{SLOW_START * 2:g}s"})
    web, db = APPS
    db_supervisor = supervisor_of(measured(drivers[db], proc))
    admin = processes.proc_stat(db_supervisor).ppid

    def starting_supervisor() -> int | None:
        # The web supervisor: the admin's child, other than db's, with a child (its connector).
        found = [
            child.pid
            for child in processes.children_of(admin)
            if child.pid != db_supervisor and processes.children_of(child.pid)
        ]
        return found[0] if found else None

    supervisor = kit.wait_until(starting_supervisor, FINISH_TIMEOUT, 0.05, what="web's supervisor starting")
    connectors = [child.pid for child in processes.children_of(supervisor)]
    os.kill(supervisor, signal.SIGKILL)
    history = drivers[web].server.state()["history"]
    assert not any(event["event"] == "HELLO" for event in history), "its connectors had not answered yet"
    # Noticed and killed now, while its connector still sleeps in startup(), not at the servo's stop.
    kit.wait_until(
        lambda: not any(processes.is_running(pid) for pid in connectors),
        FINISH_TIMEOUT,
        0.05,
        what="the connector of the killed supervisor gone",
    )
    kit.wait_until(lambda: f"[{web}]" in proc.log() and "died" in proc.log(), FINISH_TIMEOUT, what="web lost")
    assert processes.is_running(db_supervisor)
    measured(drivers[db], proc)
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()


def test_past_its_microreboots_one_application_gives_up_and_the_other_goes_on(servo, optimizer, kit) -> None:
    drivers, proc = start(
        servo,
        optimizer,
        kit,
        [probe("p1")],
        {"microreboots": {"max": 1, "period": "5m"}, "restart_backoff": {"min": "10ms", "max": "50ms"}},
    )
    web, db = APPS
    db_entry = measured(drivers[db], proc)
    admin = processes.proc_stat(supervisor_of(db_entry)).ppid
    supervisor = supervisor_of(measured(drivers[web], proc))
    known = {child.pid for child in processes.children_of(admin)}
    os.kill(supervisor, signal.SIGKILL)  # the one restart its intensity allows
    # Dead before the next command is handed out: the servo looks for a lost system before each
    # operation, and a process SIGKILLed but not yet exited (a busy machine schedules its exit
    # later) still looks alive then, so that command fails `supervisor-lost`, as it should.
    kit.wait_until(lambda: not processes.is_running(supervisor), FINISH_TIMEOUT, what="the death")
    supervisor = supervisor_of(measured(drivers[web], proc))
    assert supervisor not in known
    os.kill(supervisor, signal.SIGKILL)  # one too many: web gives up, alone

    def said_goodbye() -> bool:
        history = drivers[web].server.state()["history"]
        return bool(history) and history[-1]["event"] == "GOODBYE"

    kit.wait_until(said_goodbye, FINISH_TIMEOUT, what="web's GOODBYE")
    assert drivers[web].server.state()["history"][-1]["param"] == {"reason": "failure"}
    assert "more than 1 restarts within 300s (supervisor.microreboots)" in proc.log()
    for _ in range(3):
        entry = measured(drivers[db], proc)
        assert entry.result["annotations"]["p1.pid"] == db_entry.result["annotations"]["p1.pid"]
    assert not processes.is_running(supervisor)
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 1, proc.log()  # the highest exit code among the loops


def test_the_root_lost_past_its_intensity_ends_every_application(servo, optimizer, kit) -> None:
    drivers, documents = {}, []
    for app in APPS:
        driver = kit.QueueDriver(idle_sleep=0.1)
        server = optimizer(driver, app=app)
        driver.server = server
        drivers[app] = driver
        config = kit.servo_config(server, [probe("p1")])
        # The first document's microreboots bound the whole tree's restarts too.
        config["supervisor"] = {
            "liveness": {"interval": "200ms", "timeout": "1s"},
            "microreboots": {"max": 1, "period": "5m"},
        }
        documents.append(config)
    proc = servo(documents)
    for _ in range(2):
        entries = {app: measured(drivers[app], proc) for app in APPS}  # every application answers
        admin = processes.proc_stat(supervisor_of(entries[APPS[0]])).ppid
        assert processes.proc_stat(supervisor_of(entries[APPS[1]])).ppid == admin
        os.kill(admin, signal.SIGKILL)  # the first: the whole tree restarts; the second: too many

    def said_goodbye(app: str) -> bool:
        history = drivers[app].server.state()["history"]
        return bool(history) and history[-1]["event"] == "GOODBYE"

    for app in APPS:
        kit.wait_until(lambda app=app: said_goodbye(app), FINISH_TIMEOUT, what=f"{app}'s GOODBYE")
        assert drivers[app].server.state()["history"][-1]["param"] == {"reason": "failure"}
    assert proc.wait() == 1, proc.log()
    assert "restarts of the whole tree within 300s: giving up" in proc.log()
