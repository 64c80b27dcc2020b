"""Two applications served by one embedded optimizer, two real servos: Abort on one leaves the other alone."""

from __future__ import annotations

import signal

import pytest
import requests

from servo_actors.optimizer.application import Application
from servo_actors.optimizer.search import SearchDriver
from servo_actors.optimizer.server import OptimizerServer

WAIT = 30.0
"""Generous bound for what takes a second or two: only a hang breaks it."""
HTTP_TIMEOUT = 10.0
ADMIN_TOKEN = "two-apps-admin"
APPS = ("example.com/a", "example.com/b")


def plan(app: str) -> dict:
    return {
        "app": app,
        "steps": 1,
        # 100 s at time_scale 0.05: 5 s MEASUREs, long enough to press Abort while both run.
        "measure": {"duration": "100s"},
        "objective": {"minimize": "cost"},
        "confirm": {"repeats": 0},
        "sleep": 1,
    }


def measuring(server: OptimizerServer, app: str) -> str | None:
    current = server.application(app).state()["current"] or {}
    return current.get("cmd_uid") if current.get("cmd") == "MEASURE" else None


@pytest.mark.timeout(120)
def test_abort_on_one_application_does_not_touch_the_other(servo, kit) -> None:
    drivers = {app: SearchDriver.from_plan(plan(app)) for app in APPS}
    server = OptimizerServer(
        applications=[Application(drivers[app], app=app) for app in APPS], admin_token=ADMIN_TOKEN
    ).start()
    try:
        processes = {}
        for seed, app in enumerate(APPS):
            config = kit.servo_config(
                server,
                [{"name": "app", "type": "synthetic", "config": {"seed": seed, "time_scale": 0.05}}],
            )
            config["optimizer"]["id"] = app
            processes[app] = servo(config)
        uids = {
            app: kit.wait_until(lambda a=app: measuring(server, a), WAIT, what=f"{app} measuring")
            for app in APPS
        }

        refused = requests.post(f"{server.url}/admin/cancel?app={APPS[0]}", json={}, timeout=HTTP_TIMEOUT)
        assert refused.status_code == 401  # the admin token is needed
        armed = requests.post(
            f"{server.url}/admin/cancel?app={APPS[0]}",
            json={},
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            timeout=HTTP_TIMEOUT,
        ).json()
        assert armed["armed"] is True and armed["cmd_uid"] == uids[APPS[0]]

        def result_of(app: str, uid: str) -> dict | None:
            for entry in server.application(app).state()["history"]:
                param = entry.get("param") or {}
                if param.get("cmd_uid") == uid and "status" in param:
                    return param
            return None

        cancelled = kit.wait_until(
            lambda: result_of(APPS[0], uids[APPS[0]]), WAIT, what="a's cancelled result"
        )
        assert cancelled["status"] == "cancelled"
        # b's MEASURE went on untouched and ends ok; no cancel was ever answered to b.
        finished = kit.wait_until(lambda: result_of(APPS[1], uids[APPS[1]]), WAIT, what="b's MEASUREMENT")
        assert finished["status"] == "ok"
        history_b = server.application(APPS[1]).state()["history"]
        assert all((e.get("reply") or {}).get("status") != "cancel" for e in history_b)
        assert drivers[APPS[1]].steps[0].status == "ok"
        # a goes on with fresh connectors: its plan moves past the cancelled baseline.
        kit.wait_until(
            lambda: drivers[APPS[0]].steps and drivers[APPS[0]].phase != "baseline", WAIT, what="a moving on"
        )
        assert drivers[APPS[0]].steps[0].status == "cancelled"
        for app, process in processes.items():
            process.signal(signal.SIGTERM)
            assert process.wait() == 0, process.log()
            kit.check_trace(server.application(app).state()["history"])
    finally:
        server.stop()
