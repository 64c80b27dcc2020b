"""metrics.k8s.io/v1beta1 PodMetrics as metrics-server answers them, from usage the test sets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kube_objects
from kube_store import KubeStore

ZERO_USAGE = {"cpu": "0", "memory": "0"}


class PodUsage:
    """Usage by pod name or by Deployment name (every pod of it); ``None`` until set: the API is absent."""

    def __init__(self) -> None:
        self.by_name: dict[tuple[str, str], dict[str, str]] | None = None

    def set(self, namespace: str, pod_or_deployment: str, cpu: str, memory: str) -> None:
        if self.by_name is None:
            self.by_name = {}
        self.by_name[namespace, pod_or_deployment] = {"cpu": cpu, "memory": memory}

    @property
    def installed(self) -> bool:
        return self.by_name is not None

    def of(self, store: KubeStore, pod: dict[str, Any]) -> dict[str, str] | None:
        """The pod's usage: set for the pod itself, else for the Deployment owning its ReplicaSet."""
        if not self.by_name:
            return None
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if (namespace, name) in self.by_name:
            return self.by_name[namespace, name]
        for owner in pod["metadata"].get("ownerReferences", []):
            rs = store.get(kube_objects.KINDS["replicaset"], namespace, owner["name"]) or {}
            for rs_owner in rs.get("metadata", {}).get("ownerReferences", []):
                if (namespace, rs_owner["name"]) in self.by_name:
                    return self.by_name[namespace, rs_owner["name"]]
        return None

    def pod_metrics(
        self, store: KubeStore, namespace: str | None, selected: Callable[[dict[str, Any]], bool]
    ) -> list[dict[str, Any]]:
        """PodMetrics of the running pods that have usage (the pod's usage goes to its first container)."""
        items = []
        for pod in store.list(kube_objects.KINDS["pod"], namespace):
            usage = self.of(store, pod)
            if usage is None or not selected(pod) or pod["status"].get("phase") != "Running":
                continue
            stamp = kube_objects.now()
            containers = [container["name"] for container in pod["spec"].get("containers", [])]
            items.append(
                {
                    "kind": "PodMetrics",
                    "apiVersion": "metrics.k8s.io/v1beta1",
                    "metadata": {
                        "name": pod["metadata"]["name"],
                        "namespace": pod["metadata"]["namespace"],
                        "creationTimestamp": stamp,
                        "labels": pod["metadata"].get("labels", {}),
                    },
                    "timestamp": stamp,
                    "window": "30s",
                    "containers": [
                        {"name": name, "usage": dict(usage if index == 0 else ZERO_USAGE)}
                        for index, name in enumerate(containers)
                    ],
                }
            )
        return items
