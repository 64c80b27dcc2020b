"""The ``kube_metrics`` connector on the real node: a Deployment's pod and its tuning pod (made by
the kubernetes connector's ``strategy: tuning`` with other requests and a larger ``ALLOC_MB``)
run real containers, metrics-server samples them from the real kubelet, and the connector reports
servox's main_* and tuning_* series apart, each from its own pod."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kube_local import LocalCluster
from waiting import wait_until

from servo_actors.connectors.base import Control
from servo_actors.connectors.kubernetes import KubernetesConnector
from servo_actors.connectors.kubernetes.kube_metrics import KUBE_METRICS, KubeMetricsConnector

pytestmark = [pytest.mark.kube, pytest.mark.slow]

LABEL = "servo-actors.io/node"
REAL = {"nodeSelector": {LABEL: "real"},
        "tolerations": [{"key": LABEL, "operator": "Equal", "value": "real", "effect": "NoSchedule"}]}  # fmt: skip
METRICS_TIMEOUT = 150.0
"""Seconds for both pods' first metrics: metrics-server scrapes every 10 s and needs two scrapes
(~35 s after a container starts); only a hang breaks this bound."""
MAIN_MB, TUNING_MB = 16, 160
"""The memory the app holds (ALLOC_MB) in the main pod and in the tuning pod."""


def deployment() -> dict[str, Any]:
    container = {
        "name": "main", "image": "servo-actors.local/app:dev", "imagePullPolicy": "IfNotPresent",
        "ports": [{"containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 1},
        "env": [{"name": "ALLOC_MB", "value": str(MAIN_MB)}],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}},
    }  # fmt: skip
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {**copy.deepcopy(REAL), "terminationGracePeriodSeconds": 2,
                                       "containers": [container]}}},
    }  # fmt: skip


def both_sampled(cluster: LocalCluster, namespace: str) -> bool:
    listed = cluster.try_get(f"/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods") or {}
    names = {item["metadata"]["name"] for item in listed.get("items", [])}
    return "web-tuning" in names and any(name.startswith("web-") and name != "web-tuning" for name in names)


def only(metric: dict[str, Any]) -> tuple[str, list[float]]:
    """The one series of a metric: its pod, and its values."""
    (series,) = metric["values"]
    return series["id"], [value for _, value in series["data"]]


def test_main_and_tuning_pod_metrics_come_apart_from_metrics_server(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    kube_cluster.apply(kube_namespace, deployment())
    access = {"kubeconfig": str(kube_cluster.kubeconfig), "namespace": kube_namespace}
    tuner = KubernetesConnector("k8s", {
        **access, "timeout": "120s",
        "deployments": [{"name": "web", "strategy": "tuning", "containers": [{
            "name": "main", "cpu": {"min": "100m", "max": "1", "step": "50m"},
            "memory": {"min": "64Mi", "max": "512Mi", "step": "64Mi"},
            "env": [{"name": "ALLOC_MB", "type": "range", "min": 0, "max": 256, "step": 16}],
        }]}],
    })  # fmt: skip
    # The main pod Ready first (the tuning pod copies its template), then the tuning pod.
    wait_until(lambda: tuner.describe()["components"] and _ready(kube_cluster, kube_namespace), 120.0, 0.5,
               "web's pod Ready")  # fmt: skip
    tuner.adjust(
        {"web-tuning": {"settings": {"cpu": {"value": 0.2}, "memory": {"value": 0.375},
                                     "ALLOC_MB": {"value": TUNING_MB}}}},
        Control(), lambda *_: None,
    )  # fmt: skip
    wait_until(lambda: both_sampled(kube_cluster, kube_namespace), METRICS_TIMEOUT, 1.0, "both pods sampled")

    watcher = KubeMetricsConnector(
        "kube_metrics", {**access, "name": "web", "metric_collection_frequency": "1s"}
    )
    assert set(watcher.describe()["metrics"]) == set(KUBE_METRICS)
    checks = watcher.check()
    assert all(row["success"] for row in checks), checks
    result = watcher.measure(list(KUBE_METRICS), Control(duration=2), lambda *_: None)
    metrics, notes = result["metrics"], result["annotations"]
    assert set(metrics) == set(KUBE_METRICS), notes
    print({name: only(metric) for name, metric in metrics.items()})

    main_pod, main_cpu_request = only(metrics["main_cpu_request"])
    assert main_pod.startswith("web-") and main_pod != "web-tuning"
    assert {only(metrics[m])[0] for m in metrics if m.startswith("tuning_")} == {"web-tuning"}
    assert {only(metrics[m])[0] for m in metrics if m.startswith("main_")} == {main_pod}
    assert set(main_cpu_request) == {0.1} and set(only(metrics["tuning_cpu_request"])[1]) == {0.2}
    assert set(only(metrics["main_cpu_limit"])[1]) == {0.5}
    assert set(only(metrics["tuning_cpu_limit"])[1]) == {0.2}  # set: [request, limit] wrote both
    assert set(only(metrics["main_mem_request"])[1]) == {0.0625}
    assert set(only(metrics["tuning_mem_request"])[1]) == {0.375}
    assert set(only(metrics["main_pod_restart_count"])[1]) == {0}
    assert set(only(metrics["tuning_pod_restart_count"])[1]) == {0}
    # Real usage, read by the real kubelet: the tuning pod holds TUNING_MB, the main pod MAIN_MB.
    main_mem, tuning_mem = only(metrics["main_mem_usage"])[1], only(metrics["tuning_mem_usage"])[1]
    assert min(tuning_mem) >= TUNING_MB / 1024 > max(main_mem), (main_mem, tuning_mem)
    for who, request in (("main", 0.0625), ("tuning", 0.375)):
        usage, saturation = only(metrics[f"{who}_mem_usage"])[1], only(metrics[f"{who}_mem_saturation"])[1]
        assert saturation == [pytest.approx(100 * used / request) for used in usage]


def _ready(cluster: LocalCluster, namespace: str) -> bool:
    status = cluster.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/web").get("status") or {}
    return bool(status.get("readyReplicas"))
