"""A servo of several applications (issue 36): one servo process, one actor system, a supervisor per
application, each against its own embedded optimizer over real HTTP. Every application has its
own loop; the death of one application's supervisor replaces that application's connectors only.
"""

from __future__ import annotations

import os
import signal

import pytest

from servo_actors.actors.linux import processes

pytestmark = pytest.mark.timeout(180)

FINISH_TIMEOUT = 60.0
"""Generous bound on a command's round trip: only a hang breaks it."""
LIVENESS = {"interval": "200ms", "timeout": "1s"}
APPS = ("acme.com/web", "acme.com/db")


def probe(name: str) -> dict:
    return {"name": name, "type": "chaos", "config": {"metrics": {"x": {"unit": "n"}}, "values": {"x": 1}}}


def measure(seconds: float) -> dict:
    return {"cmd": "MEASURE", "param": {"metrics": ["x"], "control": {"duration": seconds}}}


def pids(entry, names: tuple[str, ...]) -> dict[str, int]:
    return {name: int(entry.result["annotations"][f"{name}.pid"]) for name in names}


def start_two(servo, optimizer, kit):
    drivers, servers, documents = {}, {}, []
    for app in APPS:
        driver = kit.QueueDriver(idle_sleep=0.1)
        server = optimizer(driver, app=app)
        driver.server = server
        drivers[app], servers[app] = driver, server
        config = kit.servo_config(server, [probe("p1"), probe("p2")])
        config["supervisor"] = {"liveness": LIVENESS, "microreboots": {"max": 5, "period": "5m"}}
        documents.append(config)
    return drivers, servers, servo(documents)


def measured(driver, proc, seconds: float = 0.0):
    entry = driver.push(measure(seconds))
    assert entry.finished.wait(FINISH_TIMEOUT), proc.log()
    assert entry.result is not None and entry.result["status"] == "ok", (entry.result, proc.log())
    return entry


def test_two_applications_share_one_actor_system_with_a_supervisor_each(servo, optimizer, kit) -> None:
    drivers, servers, proc = start_two(servo, optimizer, kit)
    found = {app: pids(measured(drivers[app], proc), ("p1", "p2")) for app in APPS}
    supervisors = {app: processes.proc_stat(found[app]["p1"]).ppid for app in APPS}
    assert supervisors[APPS[0]] != supervisors[APPS[1]]
    for app in APPS:
        assert processes.proc_stat(found[app]["p2"]).ppid == supervisors[app]
    admins = {processes.proc_stat(pid).ppid for pid in supervisors.values()}
    assert len(admins) == 1, "one actor system: both supervisors are children of one admin"

    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
    for app in APPS:
        history = servers[app].state()["history"]
        assert history[-1]["event"] == "GOODBYE" and history[-1]["param"] == {"reason": "SIGTERM"}, history[
            -3:
        ]


def test_sigkill_of_one_supervisor_replaces_that_applications_connectors_only(servo, optimizer, kit) -> None:
    drivers, _servers, proc = start_two(servo, optimizer, kit)
    web, db = APPS
    before = {app: pids(measured(drivers[app], proc), ("p1", "p2")) for app in APPS}
    web_supervisor = processes.proc_stat(before[web]["p1"]).ppid
    db_supervisor = processes.proc_stat(before[db]["p1"]).ppid

    # The other application is in the middle of a measurement when it happens.
    running = drivers[db].push(measure(3.0))
    kit.wait_until(lambda: running.cmd_uid is not None or running.progress_posts, 10, what="db measuring")
    os.kill(web_supervisor, signal.SIGKILL)

    assert running.finished.wait(FINISH_TIMEOUT), proc.log()
    assert running.result["status"] == "ok", running.result
    assert pids(running, ("p1", "p2")) == before[db], "the other application's connectors are untouched"
    after_web = pids(measured(drivers[web], proc), ("p1", "p2"))
    assert set(after_web.values()).isdisjoint(before[web].values()), "fresh connectors for the killed one"
    assert processes.proc_stat(db_supervisor) is not None and processes.proc_stat(db_supervisor).alive
    assert pids(measured(drivers[db], proc), ("p1", "p2")) == before[db]
    for pid in before[web].values():
        assert not processes.is_running(pid)
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()


def test_metrics_readyz_and_log_lines_name_each_application(servo, optimizer, kit) -> None:
    import requests

    from servo_actors.actors.transport.ports import free_loopback_port

    port = free_loopback_port()
    drivers, documents = {}, []
    for app in APPS:
        driver = kit.QueueDriver(idle_sleep=0.1)
        server = optimizer(driver, app=app)
        driver.server = server
        drivers[app] = driver
        config = kit.servo_config(server, [probe("p1")])
        if not documents:
            config["settings"]["metrics"] = {"listen": f"127.0.0.1:{port}"}
        documents.append(config)
    proc = servo(documents)
    for app in APPS:
        measured(drivers[app], proc)
    base = f"http://127.0.0.1:{port}"
    ready = kit.wait_until(
        lambda: (reply := requests.get(f"{base}/readyz", timeout=10)).status_code == 200 and reply.json(),
        FINISH_TIMEOUT,
        0.1,
        what="ready",
    )
    assert set(ready["apps"]) == set(APPS) and all(
        body["status"] == "ready" for body in ready["apps"].values()
    )
    text = requests.get(f"{base}/metrics", timeout=10).text
    for app in APPS:
        assert f'servo_commands_received_total{{app="{app}",cmd="MEASURE"}} 1.0' in text
        assert f'servo_connector_up{{app="{app}",connector="p1"}} 1.0' in text
    log = proc.log()
    for app in APPS:
        assert f"[{app}] servo_actors.events: command MEASURE" in log
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()


def test_sigkill_of_the_root_restarts_the_whole_tree(servo, optimizer, kit) -> None:
    drivers, _servers, proc = start_two(servo, optimizer, kit)
    before = {app: pids(measured(drivers[app], proc), ("p1", "p2")) for app in APPS}
    supervisor = processes.proc_stat(before[APPS[0]]["p1"]).ppid
    admin = processes.proc_stat(supervisor).ppid
    os.kill(admin, signal.SIGKILL)
    # Dead before the next commands are handed out (a process SIGKILLed but not yet exited still
    # looks alive to the servo's look before each operation; that command fails by design).
    kit.wait_until(lambda: not processes.is_running(admin), FINISH_TIMEOUT, what="the admin's death")

    after = {app: pids(measured(drivers[app], proc), ("p1", "p2")) for app in APPS}
    for app in APPS:
        assert set(after[app].values()).isdisjoint(before[app].values()), f"{app}: fresh connectors"
    supervisors = {processes.proc_stat(after[app]["p1"]).ppid for app in APPS}
    admins = {processes.proc_stat(pid).ppid for pid in supervisors}
    assert len(supervisors) == 2 and len(admins) == 1 and admin not in admins, "one new actor system"
    for app in APPS:
        for pid in before[app].values():
            assert not processes.is_running(pid)
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
