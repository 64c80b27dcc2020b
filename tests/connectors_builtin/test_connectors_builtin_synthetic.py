"""``synthetic``: the pure response surface, and the connector around it."""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
import sys
import time

import pytest
from pydantic import ValidationError

from servo_actors.connectors.base import ConnectorFailure, Control
from servo_actors.connectors.synthetic import (
    METRIC_UNITS,
    SyntheticConfig,
    SyntheticConnector,
    SyntheticModel,
)

SLO_MS = 250.0
NUMERIC = ("cpu", "memory", "replicas")


def grid(model: SyntheticModel) -> list[dict]:
    """Every point of the described settings grid."""
    settings = model.components()["web"]["settings"]
    axes = {}
    for name, spec in settings.items():
        if spec["type"] == "enum":
            axes[name] = spec["values"]
        else:
            count = round((spec["max"] - spec["min"]) / spec["step"])
            axes[name] = [spec["min"] + i * spec["step"] for i in range(count + 1)]
    return [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]


def cheapest_feasible(model: SyntheticModel, points: list[dict]) -> tuple[dict, dict]:
    scored = [(point, model.evaluate(point)) for point in points]
    return min(((p, m) for p, m in scored if m["p99_latency"] <= SLO_MS), key=lambda pm: pm[1]["cost"])


def synthetic(**config) -> SyntheticConnector:
    return SyntheticConnector("app", {"time_scale": 0.0, **config})


# --- the model ----------------------------------------------------------------------------------


def test_components_are_the_documented_defaults():
    settings = SyntheticModel().components()["web"]["settings"]
    assert settings["cpu"] == {
        "type": "range",
        "unit": "cores",
        "min": 0.25,
        "max": 4.0,
        "step": 0.125,
        "value": 1.0,
    }
    assert settings["memory"] == {
        "type": "range",
        "unit": "GiB",
        "min": 0.5,
        "max": 8.0,
        "step": 0.25,
        "value": 2.0,
    }
    assert settings["replicas"] == {"type": "range", "min": 1, "max": 10, "step": 1, "value": 2}
    assert settings["gc"] == {"type": "enum", "values": ["serial", "parallel", "g1"], "value": "g1"}
    assert METRIC_UNITS == {"p99_latency": "ms", "throughput": "rps", "error_rate": "ratio", "cost": "$/h"}
    # A copy each time: callers may change it.
    SyntheticModel().components()["web"]["settings"]["cpu"]["value"] = 3
    assert SyntheticModel().components()["web"]["settings"]["cpu"]["value"] == 1.0


def test_evaluate_is_deterministic_without_rng_and_noisy_with_one():
    model = SyntheticModel(seed=3, noise=0.05)
    point = {"cpu": 1.5, "memory": 3.0, "replicas": 3, "gc": "parallel"}
    assert model.evaluate(point) == model.evaluate(dict(point))
    exact = model.evaluate(point)
    assert set(exact) == set(METRIC_UNITS)
    noisy = [model.evaluate(point, random.Random(i)) for i in range(300)]
    assert len({round(m["p99_latency"], 9) for m in noisy}) > 250
    assert statistics.mean(m["p99_latency"] for m in noisy) == pytest.approx(exact["p99_latency"], rel=0.03)
    assert {m["cost"] for m in noisy} == {exact["cost"]}  # a price has no noise
    assert all(0 <= m["error_rate"] <= 1 for m in noisy)
    quiet = SyntheticModel(seed=3, noise=0.0)
    assert quiet.evaluate(point, random.Random(1)) == exact


def test_response_surface_has_the_documented_shape():
    model = SyntheticModel()

    def at(**changes):
        return model.evaluate({"cpu": 1.0, "memory": 2.0, "replicas": 2, "gc": "g1", **changes})

    # Cost grows with cpu * replicas and with memory.
    assert at(cpu=2.0)["cost"] > at()["cost"]
    assert at(replicas=4)["cost"] > at()["cost"]
    assert at(memory=4.0)["cost"] > at()["cost"]
    # Latency falls with more cpu in total.
    assert at(cpu=2.0)["p99_latency"] < at()["p99_latency"]
    assert at(replicas=4)["p99_latency"] < at()["p99_latency"]
    # Too little memory: latency jumps and errors appear, earlier for g1 (biggest heap) than serial.
    assert at(memory=1.0)["p99_latency"] > 5 * at()["p99_latency"]
    assert at(memory=1.0)["error_rate"] > 0.2 > at()["error_rate"]
    assert at(memory=1.0, gc="serial")["p99_latency"] < at(memory=1.0)["p99_latency"]
    # More load per replica than it can take: latency and errors soar, throughput is capped.
    overloaded = at(cpu=0.25, replicas=1)
    assert overloaded["p99_latency"] > 10 * SLO_MS
    assert overloaded["error_rate"] > 0.3
    assert overloaded["throughput"] < at()["throughput"]


def test_evaluate_rejects_what_it_cannot_model():
    model = SyntheticModel()
    for bad in ({"cpu": 0}, {"memory": -1}, {"replicas": "two"}, {"gc": "zgc"}, {"disk": 1}, {"cpu": True}):
        with pytest.raises(ValueError):
            model.evaluate(bad)
    with pytest.raises(ValueError):
        SyntheticModel(noise=-0.1)


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_constrained_optimum_is_inside_the_space_and_cheaper_than_the_defaults(seed):
    model = SyntheticModel(seed=seed)
    points = grid(model)
    assert len(points) == 31 * 31 * 10 * 3
    best, metrics = cheapest_feasible(model, points)
    bounds = model.components()["web"]["settings"]
    for name in NUMERIC:
        assert bounds[name]["min"] < best[name] < bounds[name]["max"], f"{name} at a bound: {best}"
    assert metrics["p99_latency"] <= SLO_MS
    assert metrics["error_rate"] < 0.01  # the optimum is a healthy service, not a failing one
    defaults = model.evaluate({})
    assert metrics["cost"] < defaults["cost"] or defaults["p99_latency"] > SLO_MS


def test_seed_zero_optimum_is_the_documented_one_and_random_sampling_misses_it():
    model = SyntheticModel(seed=0)
    points = grid(model)
    best, metrics = cheapest_feasible(model, points)
    assert best == {"cpu": 0.5, "memory": 1.5, "replicas": 3, "gc": "parallel"}
    assert metrics["cost"] == pytest.approx(0.0876)
    assert model.evaluate({})["p99_latency"] <= SLO_MS  # the defaults are feasible but dearer

    # Each gc has a different cheapest point: the enum matters.
    per_gc = {
        gc: cheapest_feasible(model, [p for p in points if p["gc"] == gc])[1]["cost"]
        for gc in ("serial", "parallel", "g1")
    }
    assert len({round(cost, 6) for cost in per_gc.values()}) == 3

    # The best of 30 random grid points is usually far from the optimum.
    rng = random.Random(1)
    best_of_30 = []
    for _ in range(100):
        sample = [model.evaluate(rng.choice(points)) for _ in range(30)]
        feasible = [m["cost"] for m in sample if m["p99_latency"] <= SLO_MS]
        best_of_30.append(min(feasible, default=math.inf))
    assert statistics.median(best_of_30) > 1.3 * metrics["cost"]


def test_seeds_change_the_surface_deterministically():
    point = {"cpu": 1.0, "memory": 2.0, "replicas": 2, "gc": "g1"}
    assert SyntheticModel(seed=5).evaluate(point) == SyntheticModel(seed=5).evaluate(point)
    assert SyntheticModel(seed=5).evaluate(point) != SyntheticModel(seed=6).evaluate(point)


# --- the connector --------------------------------------------------------------------------------


def test_describe_shows_settings_in_force_and_metric_units(progress):
    app = synthetic(component="api")
    description = app.describe()
    assert description["metrics"] == {name: {"unit": unit} for name, unit in METRIC_UNITS.items()}
    assert description["components"] == {"api": SyntheticModel().components()["web"]}
    app.adjust({"api": {"settings": {"cpu": {"value": 2.5}, "gc": {"value": "serial"}}}}, Control(), progress)
    settings = app.describe()["components"]["api"]["settings"]
    assert settings["cpu"]["value"] == 2.5 and settings["gc"]["value"] == "serial"


def test_adjust_returns_the_components_in_force(progress):
    app = synthetic()
    result = app.adjust(
        {"web": {"settings": {"replicas": {"value": 4.0}, "memory": {"value": "2.75"}}}}, Control(), progress
    )
    settings = result["web"]["settings"]
    assert settings["replicas"]["value"] == 4 and isinstance(settings["replicas"]["value"], int)
    assert settings["memory"]["value"] == 2.75
    assert settings["cpu"]["value"] == 1.0  # untouched
    assert app.settings == {"cpu": 1.0, "memory": 2.75, "replicas": 4, "gc": "g1"}


@pytest.mark.parametrize(
    ("settings", "reason", "named"),
    [
        ({"cpu": {"value": 4.5}}, "out-of-range", "web.cpu"),
        ({"replicas": {"value": 0}}, "out-of-range", "web.replicas"),
        ({"memory": {"value": 0.25}}, "out-of-range", "web.memory"),
        ({"gc": {"value": "zgc"}}, "out-of-range", "web.gc"),
        ({"cpu": {"value": 1.1}}, "invalid-step", "web.cpu"),
        ({"cpu": {"value": "lots"}}, "invalid-value", "web.cpu"),
        ({"cpu": {"value": math.nan}}, "invalid-value", "web.cpu"),
        ({"cpu": {"value": True}}, "invalid-value", "web.cpu"),
        ({"disk": {"value": 1}}, "unknown-setting", "web.disk"),
        ({"cpu": 2.0}, "invalid-value", "web.cpu"),
    ],
)
def test_adjust_rejects_bad_values_naming_the_setting(progress, settings, reason, named):
    app = synthetic()
    request = {"web": {"settings": {"memory": {"value": 4.0}, **settings}}}
    with pytest.raises(ConnectorFailure) as failure:
        app.adjust(request, Control(), progress)
    assert failure.value.status == "rejected"
    assert failure.value.reason == reason
    assert named in str(failure.value)
    assert app.settings["memory"] == 2.0  # nothing of a rejected request is applied


def test_adjust_rejects_an_unknown_component(progress):
    with pytest.raises(ConnectorFailure, match="unknown component 'db'") as failure:
        synthetic().adjust({"db": {"settings": {"cpu": {"value": 1.0}}}}, Control(), progress)
    assert failure.value.status == "rejected"


@pytest.mark.timeout(30)
def test_adjust_rolls_out_over_scaled_time_with_progress(progress):
    app = synthetic(time_scale=0.5, rollout_seconds="1s", progress_interval="100ms")
    began = time.monotonic()
    app.adjust({"web": {"settings": {"cpu": {"value": 2.0}}}}, Control(settlement=0.2), progress)
    assert time.monotonic() - began >= 0.6  # (1 s rollout + 0.2 s settlement) * 0.5
    assert len(progress.calls) >= 4
    assert progress.percents == sorted(progress.percents) and progress.percents[-1] == 100
    assert "cpu=2.0" in progress.calls[0][2]


@pytest.mark.timeout(30)
def test_measure_returns_one_second_series_for_requested_metrics_only(progress):
    app = synthetic()
    app.adjust({"web": {"settings": {"replicas": {"value": 3}}}}, Control(), progress)
    before = int(time.time())
    result = app.measure(["p99_latency", "cost"], Control(duration=30, warmup=10), progress)
    after = int(time.time())

    assert set(result["metrics"]) == {"p99_latency", "cost"}
    assert result["annotations"] == {}
    latency = result["metrics"]["p99_latency"]
    assert latency["unit"] == "ms"
    assert [series["id"] for series in latency["values"]] == [
        f'{{component="web",replica="{replica}"}}' for replica in range(3)
    ]
    cost = result["metrics"]["cost"]
    assert cost["unit"] == "$/h" and len(cost["values"]) == 1
    for series in latency["values"] + cost["values"]:
        stamps = [stamp for stamp, _ in series["data"]]
        assert len(stamps) == 30
        assert stamps == list(range(stamps[0], stamps[0] + 30))  # one per second
        assert before <= stamps[-1] <= after
        assert all(isinstance(value, float) and value > 0 for _, value in series["data"])
    expected = SyntheticModel().evaluate(app.settings)
    mean_latency = statistics.mean(v for series in latency["values"] for _, v in series["data"])
    assert mean_latency == pytest.approx(expected["p99_latency"], rel=0.05)
    assert progress.percents[-1] == 100


def test_measure_is_deterministic_under_seed(progress):
    def values(seed):
        app = synthetic(seed=seed)
        result = app.measure(list(METRIC_UNITS), Control(duration=5), progress)
        return {
            name: [[v for _, v in s["data"]] for s in m["values"]] for name, m in result["metrics"].items()
        }

    assert values(11) == values(11)
    assert values(11) != values(12)


@pytest.mark.timeout(30)
def test_time_scale_zero_is_instant_and_time_scale_slows_it(progress):
    began = time.monotonic()
    synthetic(time_scale=0.0).measure(["throughput"], Control(duration=3600, warmup=600), progress)
    assert time.monotonic() - began < 10  # an hour of simulated traffic, no real waiting
    began = time.monotonic()
    synthetic(time_scale=0.01, progress_interval="100ms").measure(
        ["throughput"], Control(duration=40, warmup=10), progress
    )
    assert time.monotonic() - began >= 0.5  # 50 s scaled by 0.01


def test_measure_rejects_metrics_it_does_not_have(progress):
    with pytest.raises(ConnectorFailure, match="latency_p50") as failure:
        synthetic().measure(["latency_p50"], Control(duration=1), progress)
    assert failure.value.status == "rejected"


def printing(text: str) -> list[str]:
    """argv of a command that prints ``text`` (the settings another system holds)."""
    return [sys.executable, "-c", f"print({text!r})"]


def test_settings_command_is_what_measure_models_and_no_setting_is_offered(progress):
    held = {"cpu": 0.5, "memory": 1.5, "replicas": 3, "gc": "parallel"}
    app = synthetic(noise=0.0, settings_command=printing(json.dumps(held)))

    assert app.describe()["components"] == {}
    result = app.measure(["cost", "p99_latency"], Control(duration=2), progress)

    expected = SyntheticModel().evaluate(held)
    assert {v for _, v in result["metrics"]["cost"]["values"][0]["data"]} == {round(expected["cost"], 6)}
    assert len(result["metrics"]["p99_latency"]["values"]) == 3  # one series per replica held
    with pytest.raises(ConnectorFailure, match="adjusts none") as refused:
        app.adjust({"web": {"settings": {"cpu": {"value": 1}}}}, Control(), progress)
    assert refused.value.status == "rejected"


@pytest.mark.parametrize(
    ("command", "named"),
    [
        ([sys.executable, "-c", "import sys; sys.exit('no such deployment')"], "code 1: no such deployment"),
        (printing("not json"), "no JSON object"),
        (printing("[1]"), "list, not a JSON object"),
        (printing('{"cpu": -1}'), "cpu must be a positive number"),
        (["/nonexistent/reader"], "could not run"),
    ],
)
def test_settings_command_that_fails_is_a_failed_measurement_naming_why(progress, command, named):
    with pytest.raises(ConnectorFailure, match=named) as failure:
        synthetic(settings_command=command).measure(["cost"], Control(duration=1), progress)
    assert (failure.value.status, failure.value.reason) == ("failed", "settings-unreadable")


def test_config_model():
    config = SyntheticConfig.model_validate({"rollout_seconds": "1m", "time_scale": 0})
    assert (config.seed, config.noise, config.component, config.rollout_seconds) == (0, 0.05, "web", 60.0)
    for bad in (
        {"time_scale": -1},
        {"noise": 2},
        {"component": "bad name"},
        {"rollout_seconds": "x"},
        {"x": 1},
    ):
        with pytest.raises(ValidationError):
            SyntheticConfig.model_validate(bad)
