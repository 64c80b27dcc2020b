"""Reading the configured workloads (Deployments, StatefulSets), and the HPA that targets each, from the cluster."""

from __future__ import annotations

from typing import Any

from servo_actors.connectors.kubernetes.client import (
    KubeApiError,
    KubeClient,
    hpa_path,
    hpas_path,
    workload_path,
)
from servo_actors.connectors.kubernetes.config import DeploymentConfig, KubernetesConfig
from servo_actors.connectors.kubernetes.settings import ClusterStateError, DeploymentState

__all__ = [
    "find_hpa",
    "read_deployment",
    "read_states",
    "targets_workload",
]


def read_deployment(
    client: KubeClient, namespace: str, name: str, kind: str = "Deployment"
) -> dict[str, Any]:
    """The Deployment (or the workload of ``kind``); ClusterStateError when it does not exist."""
    try:
        return client.get(workload_path(namespace, kind, name))
    except KubeApiError as exc:
        if exc.status == 404:
            raise ClusterStateError(f"{kind} {name!r} not found in namespace {namespace!r}") from None
        raise


def targets_workload(hpa: dict[str, Any], kind: str, name: str) -> bool:
    ref = hpa.get("spec", {}).get("scaleTargetRef") or {}
    return ref.get("kind") == kind and ref.get("name") == name


def find_hpa(
    client: KubeClient, namespace: str, config: DeploymentConfig, listed: list[dict[str, Any]] | None
) -> tuple[dict[str, Any] | None, list[dict[str, Any]] | None]:
    """The HPA of a Deployment (by ``hpa.name``, else by ``scaleTargetRef``) and the HPA list
    fetched on the way, to be passed back in so a describe lists HPAs once."""
    if config.hpa is not None and config.hpa.name:
        try:
            return client.get(hpa_path(namespace, config.hpa.name)), listed
        except KubeApiError as exc:
            if exc.status == 404:
                raise ClusterStateError(
                    f"HorizontalPodAutoscaler {config.hpa.name!r} (of {config.kind} {config.name!r}) "
                    f"not found in namespace {namespace!r}"
                ) from None
            raise
    if config.hpa is None and config.replicas is None:
        return None, listed  # nothing of this Deployment depends on an HPA
    if listed is None:
        listed = client.get(hpas_path(namespace)).get("items") or []
    found = [hpa for hpa in listed if targets_workload(hpa, config.kind, config.name)]
    if config.hpa is not None and not found:
        raise ClusterStateError(
            f"no HorizontalPodAutoscaler in namespace {namespace!r} targets {config.kind} {config.name!r} "
            "(create one, set hpa.name, or remove hpa from the config)"
        )
    return (found[0] if found else None), listed


def read_states(
    client: KubeClient, config: KubernetesConfig, names: list[str] | None = None
) -> list[DeploymentState]:
    """Each configured workload (or those in ``names``) with its HPA, read now."""
    states = []
    listed: list[dict[str, Any]] | None = None
    for deployment in config.workloads:
        if names is not None and deployment.name not in names:
            continue
        obj = read_deployment(client, config.namespace, deployment.name, deployment.kind)
        hpa, listed = find_hpa(client, config.namespace, deployment, listed)
        states.append(DeploymentState(deployment, obj, hpa))
    return states
