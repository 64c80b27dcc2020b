"""The connector's configuration model and its pure parts (no server needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from servo_actors.config import load_config
from servo_actors.config.models import ServoConfig
from servo_actors.connectors.base import ConnectorFailure, Control
from servo_actors.connectors.prometheus import (
    MAX_POINTS_PER_SERIES,
    PrometheusConfig,
    PrometheusConnector,
    SloCondition,
    ViolationStreak,
    effective_step,
    series_id,
)
from servo_actors.connectors.registry import connector_settings_problems, resolve_connector_type
from servo_actors.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "prometheus.yaml"
GOOD_METRIC = {"name": "throughput", "unit": "rps", "query": "sum(rate(x[1m]))"}


def test_defaults_and_durations() -> None:
    config = PrometheusConfig.model_validate(
        {"metrics": [GOOD_METRIC, {"name": "p99", "query": "q", "step": "250ms"}], "timeout": "1m30s"}
    )
    assert config.base_url == "http://127.0.0.1:9090"
    assert config.timeout == 90.0
    assert config.metrics[0].step == 1.0
    assert config.metrics[0].absent == "ignore"
    assert config.metrics[1].step == 0.25


def test_base_url_loses_its_trailing_slash() -> None:
    config = PrometheusConfig.model_validate({"base_url": "http://127.0.0.1:9090/", "metrics": [GOOD_METRIC]})
    assert config.base_url == "http://127.0.0.1:9090"


@pytest.mark.parametrize(
    ("config", "field", "words"),
    [
        ({}, "metrics", "Field required"),
        ({"metrics": []}, "metrics", "at least 1"),
        (
            {"metrics": [{**GOOD_METRIC, "absent": "explode"}]},
            "metrics.0.absent",
            "'ignore', 'zero', 'warn' or 'fail'",
        ),
        ({"metrics": [{**GOOD_METRIC, "step": "fast"}]}, "metrics.0.step", "not a duration"),
        ({"metrics": [{**GOOD_METRIC, "step": 0}]}, "metrics.0.step", "more than 0"),
        ({"metrics": [{**GOOD_METRIC, "query": "  "}]}, "metrics.0.query", "must not be empty"),
        ({"metrics": [{**GOOD_METRIC, "name": "has space"}]}, "metrics.0.name", "pattern"),
        ({"metrics": [{**GOOD_METRIC, "qeury": "x"}]}, "metrics.0.qeury", "Extra inputs"),
        ({"metrics": [GOOD_METRIC, GOOD_METRIC]}, "metrics", "'throughput' is used twice"),
        ({"metrics": [GOOD_METRIC], "base_url": "127.0.0.1:9090"}, "base_url", "not an http(s) URL"),
        ({"metrics": [GOOD_METRIC], "timeout": 0}, "timeout", "more than 0"),
        ({"metrics": [GOOD_METRIC], "fast_fail_period": "1ms"}, "fast_fail_period", "at least 100ms"),
        ({"metrics": [GOOD_METRIC], "retries": -1}, "retries", "greater than or equal to 0"),
    ],
)
def test_bad_config_names_the_field(config: dict, field: str, words: str) -> None:
    with pytest.raises(ValidationError) as caught:
        PrometheusConfig.model_validate(config)
    errors = {".".join(map(str, e["loc"])): e["msg"] for e in caught.value.errors()}
    assert field in errors, errors
    assert words in errors[field]


def test_series_id_sorts_labels_and_escapes_values() -> None:
    assert series_id({"job": "web", "instance": "10.0.0.7:8080"}) == '{instance="10.0.0.7:8080",job="web"}'
    assert series_id({}) == "{}"
    assert series_id({"v": 'a"b\\c\nd'}) == '{v="a\\"b\\\\c\\nd"}'


def test_effective_step_keeps_a_step_that_fits() -> None:
    assert effective_step(0, 3600, 1.0) == 1.0


@pytest.mark.parametrize(("span", "step"), [(14_400, 1.0), (86_400 * 30, 60.0), (2, 0.0001), (11_000, 1.0)])
def test_effective_step_raises_a_step_that_would_exceed_the_limit(span: float, step: float) -> None:
    raised = effective_step(1_000_000, 1_000_000 + span, step)
    assert raised > step
    assert span // raised + 1 <= MAX_POINTS_PER_SERIES


@pytest.mark.parametrize(
    ("keep", "trigger_count", "values", "tripped_at"),
    [
        ("below", 1, [0.05, 0.1, 0.2], 2),  # equal to the threshold still holds it
        ("below", 2, [0.3, 0.05, 0.3, None, 0.3, 0.3], 5),  # a good value or no data breaks the streak
        ("above", 3, [0.05, 0.05, 0.05], 2),
        ("above", 1, [0.3, 0.1, None], None),
    ],
)
def test_violation_streaks_trip_after_trigger_count_in_a_row(
    keep: str, trigger_count: int, values: list, tripped_at: int | None
) -> None:
    streak = ViolationStreak(SloCondition(metric="m", threshold=0.1, keep=keep, trigger_count=trigger_count))
    trips = [index for index, value in enumerate(values) if streak.observe(value)]
    assert (trips[0] if trips else None) == tripped_at


def test_the_type_name_resolves_to_this_connector() -> None:
    assert resolve_connector_type("prometheus") is PrometheusConnector


def test_describe_lists_metrics_with_units_and_no_components() -> None:
    config = PrometheusConfig.model_validate({"metrics": [GOOD_METRIC, {"name": "p99", "query": "q"}]})
    description = PrometheusConnector("prom", config).describe()
    assert description == {"components": {}, "metrics": {"throughput": {"unit": "rps"}, "p99": {"unit": ""}}}


def test_an_undescribed_metric_is_refused_before_any_waiting(dead_url: str) -> None:
    config = PrometheusConfig.model_validate({"base_url": dead_url, "metrics": [GOOD_METRIC]})
    with pytest.raises(ConnectorFailure) as caught:
        PrometheusConnector("prom", config).measure(["latency"], Control(duration=60), lambda *a: None)
    assert caught.value.reason == "unknown-metric"
    assert "'latency'" in caught.value.message and "throughput" in caught.value.message


def test_nothing_requested_returns_at_once_without_contacting_prometheus(dead_url: str) -> None:
    config = PrometheusConfig.model_validate({"base_url": dead_url, "metrics": [GOOD_METRIC]})
    result = PrometheusConnector("prom", config).measure([], Control(duration=3600), lambda *a: None)
    assert result == {"metrics": {}, "annotations": {}}


@pytest.mark.parametrize(
    ("conditions", "words"),
    [
        ("nope", "must be a list"),
        ([{"metric": "throughput", "threshold": 1, "keep": "sideways"}], "conditions[0]: keep"),
        ([{"metric": "throughput", "threshold": 1, "trigger_count": 0}], "conditions[0]: trigger_count"),
        ([{"metric": "throughput"}], "conditions[0]: threshold"),
    ],
)
def test_invalid_slo_conditions_fail_naming_the_problem(
    dead_url: str, conditions: object, words: str
) -> None:
    config = PrometheusConfig.model_validate({"base_url": dead_url, "metrics": [GOOD_METRIC]})
    control = Control(duration=60, userdata={"slo": {"conditions": conditions}})
    with pytest.raises(ConnectorFailure) as caught:
        PrometheusConnector("prom", config).measure(["throughput"], control, lambda *a: None)
    assert (caught.value.status, caught.value.reason) == ("failed", "invalid-slo")
    assert words in caught.value.message


def test_the_example_config_file_is_valid() -> None:
    document = yaml.safe_load(EXAMPLE.read_text())
    servo = ServoConfig.model_validate(document)
    specs = [spec for spec in servo.connectors if spec.type == "prometheus"]
    assert specs, "the example must configure a prometheus connector"
    for spec in specs:
        PrometheusConfig.model_validate(spec.config)


def test_a_bad_connector_config_in_servo_yaml_names_file_and_key(tmp_path: Path) -> None:
    bad = (
        EXAMPLE.read_text().replace("absent: zero ", "absent: sometimes ").replace("step: 5s ", "step: soon ")
    )
    assert bad != EXAMPLE.read_text()
    path = tmp_path / "servo.yaml"
    path.write_text(bad)
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={}, connector_check=connector_settings_problems)
    message = str(caught.value)
    assert f"{path}: connectors[0].config.metrics[0].step: not a duration: 'soon'" in message
    assert "connectors[0].config.metrics[1].absent:" in message and "'sometimes'" in message
