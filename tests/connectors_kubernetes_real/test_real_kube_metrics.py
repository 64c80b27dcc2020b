"""The kube_metrics connector against the real control plane without the real node (kwok's pods
run no container, so metrics-server has no usage for them): restart counts of the main pods, every
usage metric left out with the reason, the tuning pod's absence said, a missing workload named,
and ``check`` naming the missing metrics permission with its rule."""

from __future__ import annotations

import pytest
from real_app import App

from servo_actors.connectors.base import ConnectorFailure, Control
from servo_actors.connectors.kubernetes.kube_metrics import KubeMetricsConnector

pytestmark = pytest.mark.kube


def test_restarts_without_usage_and_the_reasons(app: App) -> None:
    app.create()
    connector = KubeMetricsConnector(
        "km",
        {"kubeconfig": str(app.cluster.kubeconfig), "namespace": app.namespace, "name": "web",
         "container": "main", "metric_collection_frequency": "1s"},
    )  # fmt: skip
    wanted = ["main_pod_restart_count", "main_cpu_usage", "tuning_pod_restart_count", "tuning_cpu_usage"]
    result = connector.measure(wanted, Control(duration=1), lambda *_: None)
    restarts = result["metrics"]["main_pod_restart_count"]
    assert restarts["unit"] == "count"
    assert sorted(series["id"] for series in restarts["values"]) == sorted(
        pod["metadata"]["name"] for pod in app.pods()
    )
    assert {value for series in restarts["values"] for _, value in series["data"]} == {0}
    assert set(result["metrics"]) == {"main_pod_restart_count"}
    notes = result["annotations"]
    assert notes["km:main_cpu_usage"] == "metrics-server lists no pod of Deployment web yet"
    assert notes["km:tuning_cpu_usage"] == "no tuning pod web-tuning during the measurement"
    assert notes["km:tuning_pod_restart_count"] == notes["km:tuning_cpu_usage"]

    missing = KubeMetricsConnector(
        "km", {"kubeconfig": str(app.cluster.kubeconfig), "namespace": app.namespace, "name": "api"}
    )
    with pytest.raises(ConnectorFailure, match=f"Deployment 'api' not found in namespace '{app.namespace}'"):
        missing.measure(["main_cpu_usage"], Control(), lambda *_: None)
    [row] = missing.check()
    assert not row["success"] and "not found" in row["message"] and row["severity"] == "critical"
    assert (
        row["remedy"].startswith("kubectl --kubeconfig ")
        and f"-n {app.namespace} get deployments" in row["remedy"]
    )
    several = KubeMetricsConnector(
        "km", {"kubeconfig": str(app.cluster.kubeconfig), "namespace": app.namespace, "name": "web"}
    )
    [row] = several.check()
    assert "has several containers (main, sidecar): set container" in row["message"], row
    # With the container named, the workload, the metrics permissions (the test's admin has them)
    # and metrics-server answering.
    rows = connector.check()
    assert [(r["name"], r["success"]) for r in rows] == [
        ("Deployment web readable", True), ("metrics permissions", True), ("metrics API", True),
    ], rows  # fmt: skip
