"""The demo's own run reaches its application's optimum: a seeded regression test of the search's quality.

The demo's plan (servo_actors/demo/setup.py) for 30 steps, driven through ``SearchDriver`` to its
end with every command answered by the demo's ``synthetic`` connector (configured as
``demo_config`` does, its simulated time made instant), so the readings carry the demo's noise.
The recommendation is ``confirm.recommend``'s point over every step, confirmation included; it is
scored by its true (noise-free) cost over the seed's optimum on the grid (every one of its 28,830
settings tried without noise). scripts/bench_search.py measures the same over 200 seeds
(BENCHMARKS.md). The bounds are generous: they catch a search that broke, not a small drift. No
wall-clock assertion.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import pytest

from servo_actors.connectors.base import Control
from servo_actors.connectors.synthetic import SyntheticConnector, SyntheticModel
from servo_actors.demo.setup import DemoOptions, demo_config, demo_plan
from servo_actors.optimizer.confirm import recommend
from servo_actors.optimizer.search import SearchDriver

SEEDS = range(8)
STEPS = 30  # the demo's --steps: 31 search steps with the baseline
COMMANDS = 500  # a run needs about 70; more is a driver that never ends
BOUNDS = {"p99_latency": 250.0, "error_rate": 0.01}


def _meets(metrics: dict[str, float]) -> bool:
    return all(metrics[name] <= bound for name, bound in BOUNDS.items())


def _optimum(seed: int) -> float:
    model = SyntheticModel(seed=seed, noise=0.0)
    described = model.components()["web"]["settings"]

    def grid(spec: dict[str, Any]) -> list[float]:
        points = round((spec["max"] - spec["min"]) / spec["step"]) + 1
        return [spec["min"] + i * spec["step"] for i in range(points)]

    best = math.inf
    for cpu in grid(described["cpu"]):
        for memory in grid(described["memory"]):
            for replicas in grid(described["replicas"]):
                for gc in described["gc"]["values"]:
                    metrics = model.evaluate({"cpu": cpu, "memory": memory, "replicas": replicas, "gc": gc})
                    if metrics["cost"] < best and _meets(metrics):
                        best = metrics["cost"]
    return best


def _no_progress(*_: Any, **__: Any) -> None:
    return None


def _answer(connector: SyntheticConnector, command: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    param = command["param"]
    if command["cmd"] == "DESCRIBE":
        described = connector.describe()
        descriptor = {
            "application": {"components": described["components"]},
            "measurement": {"metrics": described["metrics"]},
        }
        return "DESCRIPTION", {"status": "ok", "reason": "success", "descriptor": descriptor}
    if command["cmd"] == "ADJUST":
        components = connector.adjust(param["state"]["application"]["components"], Control(), _no_progress)
        return "ADJUSTMENT", {
            "status": "ok",
            "reason": "success",
            "state": {"application": {"components": components}},
        }
    control = Control(duration=float(param["control"]["duration"]), warmup=float(param["control"]["warmup"]))
    return "MEASUREMENT", {
        "status": "ok",
        "reason": "success",
        **connector.measure(param["metrics"], control, _no_progress),
    }


def _demo_recommendation(seed: int) -> dict[str, Any] | None:
    """The settings the demo ``--seed seed --steps 30`` recommends."""
    options = DemoOptions(steps=STEPS, seed=seed)
    spec = demo_config("http://127.0.0.1:1", options).connectors[0]
    connector = SyntheticConnector(spec.name, {**spec.config, "time_scale": 0.0})
    driver = SearchDriver.from_plan(demo_plan(options))
    for number in range(COMMANDS):
        command = driver.next_command()
        if command["cmd"] == "SLEEP":
            break
        command = {**command, "cmd_uid": f"c{number}"}
        event, result = _answer(connector, command)
        driver.on_result(command, event, {**result, "cmd_uid": command["cmd_uid"]})
    else:
        raise AssertionError(f"seed {seed}: no SLEEP after {COMMANDS} commands")
    chosen = recommend(driver.plan.objective, driver.steps, driver.plan.confirm)
    return None if chosen is None else chosen.point.settings["web"]


@pytest.fixture(scope="module")
def ratios() -> list[float]:
    found = []
    for seed in SEEDS:
        settings = _demo_recommendation(seed)
        assert settings is not None, f"seed {seed}: nothing recommended"
        truth = SyntheticModel(seed=seed, noise=0.0).evaluate(settings)
        assert _meets(truth), f"seed {seed}: {settings} truly breaks a constraint: {truth}"
        found.append(truth["cost"] / _optimum(seed))
    print("\nrecommendation / optimum per seed:", [round(r, 3) for r in found])
    return found


@pytest.mark.timeout(180)
def test_the_demos_recommendation_is_near_the_optimum_on_average(ratios):
    # 1.020 over 200 seeds (scripts/bench_search.py), 1.015 here; before issue 32's changes 1.062 here.
    assert statistics.mean(ratios) < 1.05, ratios
    assert max(ratios) < 1.2, ratios


@pytest.mark.timeout(180)
def test_the_demo_reaches_the_optimum_itself_on_most_seeds(ratios):
    # Measured: the grid's optimum itself on 119 of 200 seeds, 6 of these 8 (before issue 32's changes: 1).
    assert sum(1 for r in ratios if r < 1 + 1e-9) >= len(ratios) // 2, ratios
