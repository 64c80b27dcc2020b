"""metrics.k8s.io answers with kwok's simulated usage, and the real HPA controller scales on it, up
and (with the session cluster's scale-down window of 0 s) down again."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kube_local import LocalCluster
from kube_local_manifests import container, deployment
from waiting import wait_until

pytestmark = pytest.mark.kube

FIRST_METRICS_TIMEOUT = 180.0
"""Seconds until a new pod's metrics are served: about 35 s here (two scrapes at metrics-server's
10 s resolution after kwok starts counting), bounded for a busy 2-core machine."""
HPA_TIMEOUT = 120.0
"""Seconds from metrics to the HPA's rescale (it syncs every 5 s in this cluster)."""
POLL = 2.0
USAGE = {"kwok.x-k8s.io/usage-cpu": "200m", "kwok.x-k8s.io/usage-memory": "100Mi"}


def cpu_millicores(quantity: str) -> float:
    units = {"n": 1e-6, "u": 1e-3, "m": 1.0}
    if quantity[-1] in units:
        return float(quantity[:-1]) * units[quantity[-1]]
    return float(quantity) * 1000


def hpa(name: str, target_percent: int, max_replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1, "maxReplicas": max_replicas,
            "metrics": [{"type": "Resource", "resource": {
                "name": "cpu", "target": {"type": "Utilization", "averageUtilization": target_percent}}}],
        },
    }  # fmt: skip


def test_metrics_api_serves_simulated_usage_and_the_hpa_scales_on_it(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    # 200m used of 100m requested is 200 %; at a 50 % target the HPA wants 4 replicas.
    kube_cluster.apply(
        kube_namespace,
        deployment("loaded", containers=[container(cpu="100m")], annotations=USAGE),
        hpa("loaded", target_percent=50, max_replicas=4),
    )

    def pod_metrics() -> list[dict[str, Any]]:
        answer = kube_cluster.try_get(f"/apis/metrics.k8s.io/v1beta1/namespaces/{kube_namespace}/pods")
        return answer["items"] if answer else []

    measured = wait_until(pod_metrics, FIRST_METRICS_TIMEOUT, POLL, "the first pod metrics")
    usage = measured[0]["containers"][0]["usage"]
    assert cpu_millicores(usage["cpu"]) == pytest.approx(200, rel=0.05)
    assert usage["memory"] == "100Mi"
    # Node metrics too (of the nodes running pods: kwok's usage of an empty node stays zero).
    node = kube_cluster.get(f"/api/v1/namespaces/{kube_namespace}/pods/{measured[0]['metadata']['name']}")
    node_metrics = kube_cluster.get(f"/apis/metrics.k8s.io/v1beta1/nodes/{node['spec']['nodeName']}")
    assert cpu_millicores(node_metrics["usage"]["cpu"]) >= 200 * 0.95

    def rescaled() -> dict[str, Any] | None:
        status = kube_cluster.get(
            f"/apis/autoscaling/v2/namespaces/{kube_namespace}/horizontalpodautoscalers/loaded"
        )
        return status if status["status"].get("desiredReplicas") == 4 else None

    autoscaler = wait_until(rescaled, HPA_TIMEOUT, POLL, "the HPA asking for 4 replicas")
    current = autoscaler["status"]["currentMetrics"][0]["resource"]["current"]
    assert current["averageUtilization"] >= 150

    def replicas() -> int:
        return kube_cluster.get(f"/apis/apps/v1/namespaces/{kube_namespace}/deployments/loaded")["spec"][
            "replicas"
        ]

    wait_until(lambda: replicas() == 4, HPA_TIMEOUT, POLL, "the Deployment scaled to 4 by the HPA")

    # Less load (new pods, through a rollout): the HPA scales down at once, since the session's
    # cluster runs with no default scale-down stabilization (kube_local.HPA_DOWNSCALE_STABILIZATION).
    lighter = {"spec": {"template": {"metadata": {"annotations": {"kwok.x-k8s.io/usage-cpu": "20m"}}}}}
    kube_cluster.kubectl(
        "patch",
        "deployment/loaded",
        "-n",
        kube_namespace,
        "--type=strategic",
        f"--patch={json.dumps(lighter)}",
    )
    wait_until(
        lambda: replicas() == 1, FIRST_METRICS_TIMEOUT + HPA_TIMEOUT, POLL, "the HPA scaling down to 1"
    )
