"""What the cluster knows for free, per configured Deployment: ready replicas, container restarts
during the measurement, and (where ``metrics.k8s.io`` answers) CPU and memory in use.

Metric names are ``DEPLOYMENT.ready_replicas``, ``DEPLOYMENT.restarts``, ``DEPLOYMENT.cpu_usage``
(cores, summed over the pods) and ``DEPLOYMENT.memory_usage`` (GiB, summed). metrics-server lists
a pod only once it has sampled it (about 35 s after the pod starts): while a running pod has no
metrics yet, the sum would be short of it, so the usage metrics are left out (``Usage.gap``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servo_actors.connectors.kubernetes.client import (
    KubeClient,
    KubeError,
    label_selector,
    pod_metrics_path,
    pods_path,
    workload_path,
)
from servo_actors.connectors.kubernetes.units import parse_cpu, parse_memory

NOT_TUNING = "servo-actors.io/role!=tuning"
BASE_METRICS = {"ready_replicas": "replicas", "restarts": "count"}
USAGE_METRICS = {"cpu_usage": "cores", "memory_usage": "GiB"}


def metric_descriptors(deployments: list[str], with_usage: bool) -> dict[str, dict[str, str]]:
    kinds = {**BASE_METRICS, **(USAGE_METRICS if with_usage else {})}
    return {f"{name}.{kind}": {"unit": unit} for name in deployments for kind, unit in kinds.items()}


def split_metric(name: str, deployments: list[str]) -> tuple[str, str] | None:
    """``("web", "restarts")`` for ``"web.restarts"``; None when it is not one of ours."""
    deployment, _, kind = name.rpartition(".")
    if deployment in deployments and kind in {**BASE_METRICS, **USAGE_METRICS}:
        return deployment, kind
    return None


def metrics_api_available(client: KubeClient, namespace: str) -> bool:
    """Whether pod metrics can be listed here (metrics-server installed, and we may read it)."""
    try:
        client.get(pod_metrics_path(namespace), {"limit": "1"})
        return True
    except KubeError:
        return False


def _selector(
    client: KubeClient, namespace: str, name: str, kind: str = "Deployment"
) -> tuple[dict[str, Any], dict[str, str] | None]:
    deployment = client.get(workload_path(namespace, kind, name))
    selector = label_selector(deployment.get("spec", {}).get("selector") or {})
    # A tuning pod (strategy: tuning) carries the template's labels: its own metrics report it.
    selector = f"{selector},{NOT_TUNING}" if selector else NOT_TUNING
    return deployment, {"labelSelector": selector}


def restarts(client: KubeClient, namespace: str, name: str, kind: str = "Deployment") -> int:
    """Container restarts so far, summed over the Deployment's (or StatefulSet's) pods."""
    _, params = _selector(client, namespace, name, kind)
    total = 0
    for pod in client.get(pods_path(namespace), params).get("items") or []:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            total += int(status.get("restartCount") or 0)
    return total


def ready_replicas(client: KubeClient, namespace: str, name: str, kind: str = "Deployment") -> int:
    deployment = client.get(workload_path(namespace, kind, name))
    return int((deployment.get("status") or {}).get("readyReplicas") or 0)


@dataclass
class Usage:
    """CPU and memory in use, summed over the pods metrics-server lists, and the running pods it
    does not list yet (their usage is missing from the sums)."""

    cores: float
    gib: float
    running: int
    unsampled: list[str]

    def gap(self) -> str | None:
        """Why the sums must not be reported (None when every running pod is in them)."""
        if not self.unsampled:
            return None
        shown = ", ".join(self.unsampled[:SHOWN_PODS]) + (", ..." if len(self.unsampled) > SHOWN_PODS else "")
        return (
            f"omitted: {len(self.unsampled)} of {self.running} running pods have no metrics in metrics.k8s.io "
            f"yet (metrics-server lists a pod once it has sampled it, about 35 s after it starts): {shown}"
        )


SHOWN_PODS = 5
"""Pods named in a usage gap's annotation."""


def running_pods(items: list[dict[str, Any]]) -> set[str]:
    """The names of the pods running and not being deleted."""
    return {
        str(pod.get("metadata", {}).get("name"))
        for pod in items
        if (pod.get("status") or {}).get("phase") == "Running"
        and not pod.get("metadata", {}).get("deletionTimestamp")
    }


def sum_usage(client: KubeClient, namespace: str, params: dict[str, str] | None, running: set[str]) -> Usage:
    """The usage of the pods ``params`` selects, against the names of those running."""
    cores = gib = 0.0
    sampled = set()
    for pod in client.get(pod_metrics_path(namespace), params).get("items") or []:
        sampled.add(pod.get("metadata", {}).get("name"))
        for container in pod.get("containers") or []:
            found = container.get("usage") or {}
            cores += parse_cpu(found.get("cpu", "0"))
            gib += parse_memory(found.get("memory", "0"))
    return Usage(cores, gib, len(running), sorted(running - sampled))


def usage(client: KubeClient, namespace: str, name: str, kind: str = "Deployment") -> Usage:
    """In use now, summed over the Deployment's (or StatefulSet's) pods (metrics-server's recent window)."""
    _, params = _selector(client, namespace, name, kind)
    running = running_pods(client.get(pods_path(namespace), params).get("items") or [])
    return sum_usage(client, namespace, params, running)
