"""The HPA on real CPU: Deployment ``web`` (the project's app on the real node, 100m requested and
allowed) under an HPA (autoscaling/v2, CPU utilization) that the `kubernetes` connector manages.

Load sent straight to the pod's IP (threads of this test, each keeping a /work request of CPU in
flight) raises the container's real CPU usage; the real kubelet's cAdvisor measures it, metrics-server
reports it, and the real HPA controller (kube-controller-manager, sync every 5 s) reads it. The HPA's
first target (400 %) is above anything a 100m limit allows, so it keeps one replica however busy
the pod is; then an ADJUST of ``hpa_target_cpu_utilization`` through the connector lowers it to
20 % while the load runs, and the HPA controller scales the Deployment up. The audit log and the
Deployment's managedFields show who wrote ``spec.replicas``: the HPA controller, through the scale
subresource; the connector wrote only the HPA.
"""

from __future__ import annotations

import copy
import http.client
import json
import threading
from typing import Any

import pytest
from kube_local import LocalCluster
from kube_quantity import parse as parse_quantity
from real_node import APP_IMAGE, NODE, POD_TIMEOUT, REAL, ready
from waiting import wait_until

from servo_actors.connectors.base import Control
from servo_actors.connectors.kubernetes import KubernetesConnector
from servo_actors.connectors.kubernetes.client import USER_AGENT

pytestmark = [pytest.mark.kube, pytest.mark.slow]

CPU = "100m"
FIRST_TARGET = 400
"""Percent of the request: a 100m limit never lets the pod reach it, so the HPA keeps one replica."""
TARGET = 20
"""Percent of the request the connector sets under load: the HPA wants more replicas."""
MAX_REPLICAS = 3
LOADED = 50
"""Percent of the request the load must raise the usage to (the idle app uses about 1 %)."""
CLIENTS = 2
WORK_MS = 50
"""CPU milliseconds of each request: the clients keep the container's quota used up."""
REQUEST_TIMEOUT = 30.0
METRICS_TIMEOUT = 180.0
"""Seconds for the loaded pod's usage to reach the HPA: a pod's first metrics take two scrapes of
metrics-server (every 10 s) after it starts, the HPA controller syncs every 5 s (~30-50 s here)."""
SCALE_TIMEOUT = 180.0
"""Seconds for the HPA controller to scale up after the target changed and the new pods to be
Ready (one sync, then real pod starts; ~10-20 s here)."""

CONNECTOR: dict[str, Any] = {
    "name": "web",
    "hpa": {
        "min_replicas": {"min": 1, "max": 3},
        "max_replicas": {"min": 1, "max": 3},
        "target_cpu_utilization": {"min": 10, "max": 400, "step": 5},
    },
    "containers": [{"name": "main", "cpu": {"min": "100m", "max": "500m", "step": "50m"}}],
}


def deployment() -> dict[str, Any]:
    labels = {"app": "web"}
    main = {
        "name": "main", "image": APP_IMAGE, "imagePullPolicy": "IfNotPresent",
        "ports": [{"containerPort": 8080, "name": "http"}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 1},
        "resources": {"requests": {"cpu": CPU, "memory": "128Mi"}, "limits": {"cpu": CPU, "memory": "128Mi"}},
    }  # fmt: skip
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {**copy.deepcopy(REAL), "terminationGracePeriodSeconds": 1, "containers": [main]},
        }},
    }  # fmt: skip


def hpa() -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1, "maxReplicas": MAX_REPLICAS,
            "metrics": [{"type": "Resource", "resource": {
                "name": "cpu", "target": {"type": "Utilization", "averageUtilization": FIRST_TARGET}}}],
        },
    }  # fmt: skip


class Load:
    """CLIENTS threads, each sending /work?ms=WORK_MS to ``ip`` one request after another until
    ``stop``; ``answered`` counts the 200s."""

    def __init__(self, ip: str) -> None:
        self.ip = ip
        self.answered = 0
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(CLIENTS)]
        for thread in self._threads:
            thread.start()

    def _run(self) -> None:
        connection = http.client.HTTPConnection(self.ip, 8080, timeout=REQUEST_TIMEOUT)
        try:
            while not self._stop.is_set():
                try:
                    connection.request("GET", f"/work?ms={WORK_MS}")
                    response = connection.getresponse()
                    response.read()
                    with self._lock:
                        self.answered += response.status == 200
                except (OSError, http.client.HTTPException) as exc:
                    connection.close()
                    with self._lock:
                        self.failures.append(str(exc))
                    self._stop.wait(0.5)
        finally:
            connection.close()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(REQUEST_TIMEOUT + 5)


def utilization(hpa: dict[str, Any]) -> int | None:
    for metric in (hpa.get("status") or {}).get("currentMetrics") or []:
        current = (metric.get("resource") or {}).get("current") or {}
        if "averageUtilization" in current:
            return int(current["averageUtilization"])
    return None


def writes(cluster: LocalCluster, namespace: str) -> list[dict[str, Any]]:
    """The audit log's writes in ``namespace`` (whole bodies of Deployment, scale and HPA writes)."""
    events = (json.loads(line) for line in cluster.audit_log.read_text().splitlines())
    return [
        e for e in events
        if (e.get("objectRef") or {}).get("namespace") == namespace and e.get("verb") in {"create", "update", "patch"}
    ]  # fmt: skip


def test_real_load_scales_the_deployment_through_the_real_hpa_and_the_connector_never_writes_replicas(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    base = f"/apis/apps/v1/namespaces/{kube_namespace}/deployments/web"
    hpa_path = f"/apis/autoscaling/v2/namespaces/{kube_namespace}/horizontalpodautoscalers/web"
    kube_cluster.apply(kube_namespace, deployment(), hpa())
    kube_cluster.kubectl("rollout", "status", "deployment/web", "-n", kube_namespace,
                         f"--timeout={POD_TIMEOUT:.0f}s", timeout=POD_TIMEOUT + 30)  # fmt: skip
    pods = kube_cluster.get(f"/api/v1/namespaces/{kube_namespace}/pods")["items"]
    (pod,) = [p for p in pods if ready(p)]
    assert pod["spec"]["nodeName"] == NODE
    connector = KubernetesConnector("k8s", {
        "kubeconfig": str(kube_cluster.kubeconfig), "namespace": kube_namespace, "timeout": "60s",
        "deployments": [copy.deepcopy(CONNECTOR)],
    })  # fmt: skip
    described = connector.describe()["components"]["web"]["settings"]
    assert described["hpa_target_cpu_utilization"]["value"] == FIRST_TARGET
    assert "replicas" not in described

    load = Load(pod["status"]["podIP"])
    try:
        # Real usage, from the kubelet through metrics-server to the HPA controller.
        def reads_the_load() -> dict[str, Any] | None:
            found: dict[str, Any] = kube_cluster.get(hpa_path)
            return found if (utilization(found) or 0) >= LOADED else None

        loaded = wait_until(
            reads_the_load, METRICS_TIMEOUT, 1.0, f"the HPA reading the loaded pod at {LOADED}% or more"
        )
        usage = kube_cluster.get(
            f"/apis/metrics.k8s.io/v1beta1/namespaces/{kube_namespace}/pods/{pod['metadata']['name']}"
        )
        cores = parse_quantity(usage["containers"][0]["usage"]["cpu"])[0]
        print(
            f"loaded: the HPA reads {utilization(loaded)}% of {CPU}; metrics-server: {float(cores) * 1000:.0f}m"
        )
        assert cores >= parse_quantity(CPU)[0] * LOADED / 100 * 0.5, usage  # a later sample, same order
        assert loaded["status"]["desiredReplicas"] == 1, loaded["status"]
        assert kube_cluster.get(base)["spec"]["replicas"] == 1

        # The connector changes the HPA's target; the real HPA controller scales the Deployment.
        result = connector.adjust(
            {"web": {"settings": {"hpa_target_cpu_utilization": {"value": TARGET}}}},
            Control(),
            lambda *_: None,
        )
        assert result["web"]["settings"]["hpa_target_cpu_utilization"]["value"] == TARGET
        target = kube_cluster.get(hpa_path)["spec"]["metrics"][0]["resource"]["target"]
        assert target == {"type": "Utilization", "averageUtilization": TARGET}

        def scaled_up() -> dict[str, Any] | None:
            found = kube_cluster.get(base)
            status = found.get("status") or {}
            scaled = (
                found["spec"]["replicas"] >= 2 and status.get("readyReplicas", 0) == found["spec"]["replicas"]
            )
            return found if scaled else None

        scaled = wait_until(scaled_up, SCALE_TIMEOUT, 0.5, "the HPA scaling web up, its new pods Ready")
        print(f"scaled to {scaled['spec']['replicas']} replicas; {load.answered} requests answered")
        assert load.answered > 0
    finally:
        load.stop()

    # Who wrote spec.replicas: the HPA controller, through the scale subresource; never the connector.
    events = writes(kube_cluster, kube_namespace)
    ours = [e for e in events if (e.get("userAgent") or "").startswith(USER_AGENT)]
    assert ours and {(e["objectRef"]["resource"], e["verb"]) for e in ours} == {
        ("horizontalpodautoscalers", "patch")
    }, ours
    scales = [e for e in events if e["objectRef"].get("subresource") == "scale"]
    assert scales and all("horizontal-pod-autoscaler" in e["user"]["username"] for e in scales), scales
    managed = kube_cluster.get(base)["metadata"]["managedFields"]
    owners = [m for m in managed if "f:replicas" in ((m.get("fieldsV1") or {}).get("f:spec") or {})]
    assert [(m["manager"], m.get("subresource")) for m in owners] == [("kube-controller-manager", "scale")], (
        owners
    )
