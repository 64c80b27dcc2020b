"""Manifests and reads for tests on the real local cluster (kube_local): Deployments carrying kwok's
failure marks and simulated usage, and the pod fields the tests look at."""

from __future__ import annotations

from typing import Any

from kube_local import LocalCluster

IMAGE = "registry.local/app:1"
"""Any name: kwok pulls nothing."""
SIMULATE_ANNOTATION = "kwok.servo-actors/simulate"
SIMULATE_INTERVAL_ANNOTATION = "kwok.servo-actors/simulate-interval"
SIMULATE_ENV = "KWOK_SIMULATE"


def container(
    name: str = "main", env: dict[str, str] | None = None, cpu: str = "100m", memory: str = "64Mi"
) -> dict[str, Any]:
    return {
        "name": name, "image": IMAGE,
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}},
        "env": [{"name": key, "value": value} for key, value in (env or {}).items()],
    }  # fmt: skip


def deployment(
    name: str,
    replicas: int = 1,
    containers: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Deployment whose pod template carries ``annotations`` (kwok's marks and usage live there)."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations or {}},
                "spec": {"containers": containers or [container()], "terminationGracePeriodSeconds": 1},
            },
        },
    }  # fmt: skip


def pods(cluster: LocalCluster, namespace: str, app: str) -> list[dict[str, Any]]:
    answer = cluster.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=app%3D{app}")
    return [pod for pod in answer["items"] if not pod["metadata"].get("deletionTimestamp")]


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in pod.get("status", {}).get("conditions", []) if c["type"] == kind), {})


def container_status(pod: dict[str, Any], name: str = "main") -> dict[str, Any]:
    return next((c for c in pod.get("status", {}).get("containerStatuses", []) if c["name"] == name), {})


def waiting_reason(pod: dict[str, Any], name: str = "main") -> str:
    return container_status(pod, name).get("state", {}).get("waiting", {}).get("reason", "")
