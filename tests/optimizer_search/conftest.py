"""Shared pieces for the search tests: a described application and realistic servo results.

``stand_in_model`` is a small response surface of our own for the driver tests (the claim that
the strategy beats random sampling is tested on ``servo_actors.connectors.synthetic``).
``ServoSimulator`` answers a driver's commands the way a servo posts results, with the wire
shapes of docs/protocol.md, so SearchDriver is exercised without HTTP; ``HttpServo`` does the same
over HTTP against a running ``OptimizerServer``.
"""

from __future__ import annotations

import copy
import itertools
import random
from typing import Any

import pytest
import requests

from servo_actors.optimizer.server import OptimizerServer

COMPONENTS: dict[str, Any] = {
    "web": {
        "settings": {
            "cpu": {"type": "range", "unit": "cores", "min": 0.25, "max": 4.0, "step": 0.125, "value": 1.0},
            "memory": {"type": "range", "unit": "GiB", "min": 0.5, "max": 8.0, "step": 0.25, "value": 2.0},
            "replicas": {"type": "range", "min": 1, "max": 10, "step": 1, "value": 2},
            "gc": {"type": "enum", "values": ["serial", "parallel", "g1"], "value": "g1"},
        }
    }
}
METRICS = {
    "p99_latency": {"unit": "ms"},
    "throughput": {"unit": "rps"},
    "error_rate": {"unit": "%"},
    "cost": {"unit": "$"},
}


def stand_in_model(settings: dict[str, dict[str, Any]], rng: random.Random | None = None) -> dict[str, float]:
    """Cost grows with resources; p99 latency explodes as utilisation nears 1 (a queue)."""
    web = settings["web"]
    capacity = web["cpu"] * web["replicas"] * {"serial": 0.75, "parallel": 0.9, "g1": 1.0}[web["gc"]]
    capacity *= min(1.0, web["memory"] / (1.5 * web["cpu"])) ** 0.5
    utilisation = 6.0 / capacity
    p99 = 40.0 / max(1.0 - utilisation, 0.02)
    cost = web["replicas"] * (web["cpu"] * 10 + web["memory"] * 2)

    def noisy(value: float) -> float:
        return value * (1 + rng.gauss(0, 0.05)) if rng else value

    return {
        "p99_latency": noisy(p99),
        "throughput": min(capacity, 6.0) * 100,
        "error_rate": 0.0,
        "cost": noisy(cost),
    }


class ServoSimulator:
    """Holds the application's settings and answers commands as a servo would post results."""

    def __init__(self, model=stand_in_model, components: dict[str, Any] | None = None, seed: int = 0) -> None:
        self.components = copy.deepcopy(components or COMPONENTS)
        self.model = model
        self.rng = random.Random(seed)
        self.uids = (f"c{i}" for i in itertools.count(1))

    def settings(self) -> dict[str, dict[str, Any]]:
        return {
            c: {n: s["value"] for n, s in body["settings"].items()} for c, body in self.components.items()
        }

    def stamp(self, command: dict[str, Any]) -> dict[str, Any]:
        """What the server does: a copy of the command with a cmd_uid (never for SLEEP)."""
        if command["cmd"] == "SLEEP":
            return dict(command)
        return {**command, "cmd_uid": next(self.uids)}

    def describe(self, command: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        descriptor = {
            "application": {"components": copy.deepcopy(self.components)},
            "measurement": {"metrics": METRICS},
        }
        return "DESCRIPTION", {
            "status": "ok",
            "reason": "success",
            "cmd_uid": command["cmd_uid"],
            "descriptor": descriptor,
        }

    def measure(self, command: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        values = self.model(self.settings(), self.rng)
        metrics = {}
        for name in command["param"]["metrics"]:
            if name not in values:
                continue
            # Two series whose mean is the value: the driver must reduce over all points of all series.
            v = values[name]
            metrics[name] = {
                "unit": METRICS[name]["unit"],
                "values": [
                    {"id": '{instance="a"}', "data": [[1796221862, v * 0.9], [1796221863, v * 1.1]]},
                    {"id": '{instance="b"}', "data": [[1796221862, v]]},
                ],
            }
        return "MEASUREMENT", {
            "status": "ok",
            "reason": "success",
            "cmd_uid": command["cmd_uid"],
            "metrics": metrics,
            "annotations": {},
        }

    def adjust(self, command: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        wanted = command["param"]["state"]["application"]["components"]
        for component, body in wanted.items():
            for name, setting in body["settings"].items():
                described = self.components[component]["settings"][name]
                assert not described.get("pinned"), f"ADJUST touched pinned {component}.{name}"
                described["value"] = setting["value"]
        state = {"application": {"components": copy.deepcopy(self.components)}}
        return "ADJUSTMENT", {
            "status": "ok",
            "reason": "success",
            "cmd_uid": command["cmd_uid"],
            "state": state,
        }

    def answer(self, command: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return {"DESCRIBE": self.describe, "MEASURE": self.measure, "ADJUST": self.adjust}[command["cmd"]](
            command
        )

    def run(self, driver, max_commands: int = 1000) -> list[dict[str, Any]]:
        """Poll the driver and answer until it says SLEEP; the commands as sent."""
        sent = []
        for _ in range(max_commands):
            command = self.stamp(driver.next_command())
            sent.append(command)
            if command["cmd"] == "SLEEP":
                return sent
            event, result = self.answer(command)
            driver.on_result(command, event, result)
        raise AssertionError(f"no SLEEP after {max_commands} commands")


HTTP_TIMEOUT = 5.0


class HttpServo:
    """Speaks the protocol to the server with requests, answering commands with a ServoSimulator."""

    def __init__(self, server: OptimizerServer, token: str) -> None:
        self.url = server.servo_url
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.simulator = ServoSimulator()

    def post(self, event: str, param: object = None) -> dict:
        reply = self.session.post(
            self.url, json={"event": event, "param": param, "servo_uid": None}, timeout=HTTP_TIMEOUT
        )
        assert reply.status_code == 200, reply.text
        return reply.json()

    def next_command(self) -> dict:
        command = self.post("WHATS_NEXT")
        assert "cmd" in command, command
        return command

    def complete(self, command: dict) -> dict:
        event, result = self.simulator.answer(command)
        return self.post(event, result)


@pytest.fixture
def plan_data() -> dict[str, Any]:
    return {
        "app": "example.com/web",
        "token": "s3cret-token",
        "measure": {"duration": "30s", "warmup": "5s"},
        "steps": 6,
        "objective": {"minimize": "cost", "constraints": ["p99_latency <= 250"]},
        "sleep": "10m",
        # These tests follow the search's own steps; confirmation has its tests (test_*_confirm.py).
        "confirm": {"repeats": 0},
    }
