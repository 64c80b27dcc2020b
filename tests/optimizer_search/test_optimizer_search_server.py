"""SearchDriver behind the real OptimizerServer on 127.0.0.1: the console page and the state over HTTP."""

from __future__ import annotations

import pytest
import requests

from servo_actors.optimizer.plan import parse_plan
from servo_actors.optimizer.search import SearchDriver
from servo_actors.optimizer.server import OptimizerServer

from .conftest import HTTP_TIMEOUT, HttpServo


@pytest.mark.timeout(30)
def test_the_server_runs_the_search_and_shows_it(plan_data, tmp_path):
    plan = parse_plan({**plan_data, "steps": 2})
    driver = SearchDriver(plan, tmp_path / "state.json")
    with OptimizerServer(driver, app=plan.app, token=plan.token.get_secret_value()) as server:
        page = requests.get(server.url + "/", timeout=HTTP_TIMEOUT)
        assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
        # One section per application is made from this template (the first one's parts get ids).
        for element in (
            'class="abort',
            'class="current"',
            'class="steps"',
            'class="best',
            'class="abort-result',
        ):
            assert element in page.text
        assert "http://" not in page.text and "https://" not in page.text  # no external resources

        servo = HttpServo(server, plan.token.get_secret_value())
        assert servo.post("HELLO", {"agent": "test/1", "telemetry": {}}) == {"status": "ok"}
        describe = servo.next_command()
        assert describe["cmd"] == "DESCRIBE"
        assert servo.complete(describe) == {"status": "ok"}
        baseline = servo.next_command()
        assert baseline["cmd"] == "MEASURE"

        state = requests.get(server.url + "/admin/state", timeout=HTTP_TIMEOUT).json()
        assert state["current"]["cmd_uid"] == baseline["cmd_uid"]
        assert state["driver"]["phase"] == "baseline"
        current = state["driver"]["current"]
        assert (current["cmd"], current["kind"], current["step"]) == ("MEASURE", "baseline", 0)

        # Abort from the console's endpoint: the next progress post is answered cancel.
        armed = requests.post(server.url + "/admin/cancel", json={}, timeout=HTTP_TIMEOUT).json()
        assert armed["armed"] is True and armed["cmd_uid"] == baseline["cmd_uid"]
        answer = servo.post("MEASUREMENT", {"progress": 10, "runtime": 1, "cmd_uid": baseline["cmd_uid"]})
        assert answer["status"] == "cancel"
        cancelled = {
            "status": "cancelled",
            "reason": "cancelled",
            "message": "stopped",
            "cmd_uid": baseline["cmd_uid"],
        }
        assert servo.post("MEASUREMENT", cancelled) == {"status": "ok"}

        commands = []
        while (command := servo.next_command())["cmd"] != "SLEEP":
            commands.append(command["cmd"])
            assert servo.complete(command) == {"status": "ok"}
        assert commands == ["ADJUST", "MEASURE", "ADJUST", "MEASURE"]

        state = requests.get(server.url + "/admin/state", timeout=HTTP_TIMEOUT).json()
    driver_state = state["driver"]
    assert state["current"] is None and driver_state["phase"] == "done"
    assert [(s["n"], s["status"]) for s in driver_state["steps"]] == [(0, "cancelled"), (1, "ok"), (2, "ok")]
    assert driver_state == {**driver.state(), "current": None}
    assert "s3cret-token" not in str(state)
