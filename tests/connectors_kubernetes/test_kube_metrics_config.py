"""The kube_metrics connector's config: servox's keys and metric names, bad values named."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from servo_actors.connectors.base import ConnectorFailure, Control
from servo_actors.connectors.kubernetes.kube_metrics import (
    KUBE_METRICS,
    KubeMetricsConfig,
    KubeMetricsConnector,
)


def test_defaults_and_servox_names() -> None:
    config = KubeMetricsConfig.model_validate({"name": "web"})
    assert (config.namespace, config.kind, config.metric_collection_frequency) == (
        "default",
        "Deployment",
        60.0,
    )
    assert config.metrics() == list(KUBE_METRICS) and len(KUBE_METRICS) == 18
    assert KUBE_METRICS["main_cpu_saturation"] == "%" and KUBE_METRICS["tuning_mem_usage"] == "GiB"
    assert KubeMetricsConfig.model_validate({"name": "db", "kind": "statefulset"}).kind == "StatefulSet"
    described = KubeMetricsConnector(
        "km", {"name": "web", "metrics_to_collect": ["main_cpu_usage"]}
    ).describe()
    assert described == {"components": {}, "metrics": {"main_cpu_usage": {"unit": "cores"}}}


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({}, "name"),
        ({"name": "web", "kind": "DaemonSet"}, "'Deployment' or 'StatefulSet'"),
        ({"name": "web", "metrics_to_collect": ["main_cpu_use"]}, "main_cpu_use"),
        ({"name": "web", "metrics_to_collect": []}, "at least 1 item"),
        ({"name": "web", "metric_collection_frequency": 0}, "must be more than 0"),
        ({"name": "web", "metric_collection_frequency": "often"}, "metric_collection_frequency"),
        ({"name": "web", "labels": {}}, "labels"),
    ],
)
def test_bad_values_are_named(config, problem) -> None:
    with pytest.raises(ValidationError, match=problem):
        KubeMetricsConfig.model_validate(config)


def test_a_metric_not_collected_is_refused_before_any_request() -> None:
    connector = KubeMetricsConnector("km", {"name": "web", "metrics_to_collect": ["main_cpu_usage"]})
    with pytest.raises(ConnectorFailure, match="does not describe metric 'tuning_cpu_usage'") as caught:
        connector.measure(["tuning_cpu_usage"], Control(), lambda *_: None)
    assert caught.value.reason == "unknown-metric"
