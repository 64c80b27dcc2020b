"""Helpers for the kubernetes connector's tests against the real local control plane (see conftest.py):
Deployment ``web`` and its connector config, ``App`` (one namespace's real objects), ``ProgressLog``."""

from __future__ import annotations

import copy
import json
from typing import Any

from kube_local import LocalCluster  # tests/support, on the path from tests/conftest.py

from servo_actors.connectors.kubernetes import KubernetesConnector

IMAGE = "registry.local/web:1"
"""Any name: kwok pulls nothing."""
SIMULATE_ENV = "KWOK_SIMULATE"
"""A container's kwok failure mark (kube/stages/simulate-failures.yaml): the connector can set it."""
SIMULATE_INTERVAL_ANNOTATION = "kwok.servo-actors/simulate-interval"
MODES = ["none", "crash-loop", "unstable", "image-pull-error"]
ROLLOUT_TIMEOUT = 120.0
"""Seconds for a small rollout by the real controllers on 2 busy cores (it takes about 1-3 s)."""

MAIN = {
    "name": "main",
    "image": IMAGE,
    "ports": [{"containerPort": 8080, "name": "http"}],
    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
    "env": [
        {"name": "GOGC", "value": "100"},
        {"name": SIMULATE_ENV, "value": "none"},
        {"name": "LOG_LEVEL", "value": "info"},
    ],
}
SIDECAR = {
    "name": "sidecar",
    "image": "registry.local/proxy:3",
    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
    "env": [{"name": "GOGC", "value": "50"}],
}
CONNECTOR_WEB: dict[str, Any] = {
    "name": "web",
    "replicas": {"min": 1, "max": 6},
    "containers": [
        {
            "name": "main",
            "cpu": {"min": "100m", "max": 8, "step": "50m"},
            "memory": {"min": "64Mi", "max": "4Gi", "step": "64Mi"},
            "env": [
                {"name": "GOGC", "type": "range", "min": 50, "max": 400, "step": 10},
                {"name": SIMULATE_ENV, "type": "enum", "values": MODES},
            ],
        }
    ],
}
"""The connector's config for ``web``: its main container only (the sidecar is never touched)."""


def web_manifest(
    replicas: int = 2,
    containers: list[dict[str, Any]] | None = None,
    pod_annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """Deployment ``web``: a main container the connector tunes and a sidecar it must leave alone,
    with labels, annotations and fields of its own that an adjustment must keep."""
    labels = {"app": "web", "tier": "backend"}
    annotations = {
        SIMULATE_INTERVAL_ANNOTATION: "1s",
        "example.com/owner": "team-a",
        **(pod_annotations or {}),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": labels, "annotations": {"example.com/note": "kept"}},
        "spec": {
            "replicas": replicas,
            "revisionHistoryLimit": 5,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {
                    "containers": copy.deepcopy(containers or [MAIN, SIDECAR]),
                    "terminationGracePeriodSeconds": 1,
                },
            },
            **spec,
        },
    }


class ProgressLog:
    """A ``progress`` callable that keeps every report."""

    def __init__(self) -> None:
        self.reports: list[tuple[float, str]] = []

    def __call__(self, percent: float, message: str = "") -> None:
        self.reports.append((percent, message))

    def percents(self) -> list[float]:
        return [percent for percent, _ in self.reports]


class App:
    """Deployment ``web`` (and whatever a test adds) in ``namespace`` of the real ``cluster``."""

    def __init__(self, cluster: LocalCluster, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace

    # -- set-up --------------------------------------------------------------------------------

    def create(self, *manifests: dict[str, Any], wait: bool = True) -> dict[str, Any]:
        """Applies ``manifests`` (``web_manifest()`` when none) and waits for web's rollout; web."""
        self.cluster.apply(self.namespace, *(manifests or (web_manifest(),)))
        if wait:
            self.rollout_status()
        return self.deployment()

    def connector(
        self, deployments: list[dict[str, Any]] | None = None, **config: Any
    ) -> KubernetesConnector:
        """A connector for this namespace, as the servo builds it (config through its model)."""
        full = {
            "kubeconfig": str(self.cluster.kubeconfig),
            "namespace": self.namespace,
            "timeout": "60s",
            "deployments": copy.deepcopy(deployments or [CONNECTOR_WEB]),
            **config,
        }
        return KubernetesConnector("k8s", full)

    # -- the real objects ----------------------------------------------------------------------

    def rollout_status(self, name: str = "web", timeout: float = ROLLOUT_TIMEOUT) -> str:
        """kubectl's own rollout rule (the server's kubectl): its output, AssertionError unless done."""
        done = self.cluster.kubectl(
            "rollout", "status", f"deployment/{name}", "-n", self.namespace, f"--timeout={timeout:.0f}s",
            timeout=timeout + 30,
        )  # fmt: skip
        return done.stdout

    def deployment(self, name: str = "web") -> dict[str, Any]:
        return self.cluster.get(f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{name}")

    def hpa(self, name: str = "web") -> dict[str, Any]:
        return self.cluster.get(
            f"/apis/autoscaling/v2/namespaces/{self.namespace}/horizontalpodautoscalers/{name}"
        )

    def replicasets(self, name: str = "web") -> list[dict[str, Any]]:
        """The Deployment's ReplicaSets, oldest revision first."""
        uid = self.deployment(name)["metadata"]["uid"]
        items = self.cluster.get(f"/apis/apps/v1/namespaces/{self.namespace}/replicasets")["items"]
        owned = [
            rs for rs in items if any(ref["uid"] == uid for ref in rs["metadata"].get("ownerReferences", []))
        ]
        return sorted(
            owned, key=lambda rs: int(rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"])
        )

    def pods(self, app: str = "web") -> list[dict[str, Any]]:
        answer = self.cluster.get(f"/api/v1/namespaces/{self.namespace}/pods?labelSelector=app%3D{app}")
        return [pod for pod in answer["items"] if not pod["metadata"].get("deletionTimestamp")]

    def audit(self) -> list[dict[str, Any]]:
        """The audit log's events about this namespace (whole bodies of Deployment, scale and HPA writes)."""
        events = []
        for line in self.cluster.audit_log.read_text().splitlines():
            event = json.loads(line)
            if (event.get("objectRef") or {}).get("namespace") == self.namespace:
                events.append(event)
        return events


def main_container(obj: dict[str, Any]) -> dict[str, Any]:
    """The main container of a Deployment's or ReplicaSet's template (given the object or its spec)."""
    containers = obj.get("spec", obj)["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "main")


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item.get("value", "") for item in container.get("env") or []}


def settings(components: dict[str, Any], component: str = "web") -> dict[str, Any]:
    """``{setting: value}`` of one component of a describe or adjust answer."""
    return {name: spec["value"] for name, spec in components[component]["settings"].items()}


def rolled_out(deployment: dict[str, Any]) -> bool:
    """kubectl's rule, read from the object: the controller saw this generation, and every replica
    is updated, ready and available, with no old one left."""
    status = deployment.get("status") or {}
    desired = deployment["spec"]["replicas"]
    return (
        deployment["metadata"]["generation"] <= status.get("observedGeneration", 0)
        and status.get("replicas", 0) == desired
        and status.get("updatedReplicas", 0) == desired
        and status.get("readyReplicas", 0) == desired
        and status.get("availableReplicas", 0) == desired
    )
