"""Plain Kubernetes objects for the pure tests (the shapes the API server returns)."""

from __future__ import annotations

import copy
from typing import Any

from servo_actors.connectors.kubernetes.config import KubernetesConfig

WEB_CONTAINER = {
    "name": "main",
    "image": "registry.example/web:1",
    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
    "env": [{"name": "GOGC", "value": "100"}],
}
WEB_CONFIG = {
    "name": "web",
    "replicas": {"min": 1, "max": 10},
    "containers": [
        {
            "name": "main",
            "cpu": {"min": "250m", "max": 4, "step": "125m"},
            "memory": {"min": "256Mi", "max": "4Gi", "step": "128Mi"},
            "env": [{"name": "GOGC", "type": "range", "min": 50, "max": 400, "step": 10}],
        }
    ],
}
"""Deployment ``web`` of the emulated cluster, and its connector config."""

BASE_CONFIG: dict[str, Any] = {
    "namespace": "default",
    "deployments": [
        {
            "name": "web",
            "replicas": {"min": 1, "max": 10},
            "hpa": None,
            "containers": [
                {
                    "name": "main",
                    "cpu": {"min": "250m", "max": 4, "step": "125m"},
                    "memory": {"min": "256Mi", "max": "4Gi", "step": "128Mi"},
                    "env": [
                        {"name": "GOGC", "type": "range", "min": 50, "max": 400, "step": 10},
                        {"name": "GC", "type": "enum", "values": ["g1", "parallel"]},
                    ],
                }
            ],
        }
    ],
}


def config(**changes: Any) -> KubernetesConfig:
    data = copy.deepcopy(BASE_CONFIG)
    data.update(changes)
    return KubernetesConfig.model_validate(data)


def container(
    name: str = "main", requests: dict | None = None, limits: dict | None = None, env: list | None = None
) -> dict:
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "app:1", "resources": resources, "env": env or []}


def deployment(
    name: str = "web", containers: list | None = None, replicas: int = 2, rv: str = "7", **status: Any
) -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "generation": 3,
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": containers
                    if containers is not None
                    else [
                        container(
                            requests={"cpu": "500m", "memory": "512Mi"},
                            limits={"cpu": "1", "memory": "1Gi"},
                            env=[{"name": "GOGC", "value": "100"}],
                        )
                    ]
                },
            },
        },
        "status": {"observedGeneration": 3, **status},
    }


def hpa(
    name: str = "web", target: str = "web", low: int = 1, high: int = 5, cpu: int | None = 70, rv: str = "3"
) -> dict:
    metrics = []
    if cpu is not None:
        metrics.append(
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": cpu}},
            }
        )
    metrics.append(
        {
            "type": "Resource",
            "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "500Mi"}},
        }
    )
    return {
        "metadata": {"name": name, "namespace": "default", "resourceVersion": rv},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": low,
            "maxReplicas": high,
            "metrics": metrics,
        },
    }


def connector_config(cluster: Any, **changes: Any) -> dict[str, Any]:
    """The connector's config for Deployment ``web`` of an emulated ``cluster``."""
    config = {"kubeconfig": str(cluster.kubeconfig), "timeout": "15s", "deployments": [WEB_CONFIG]}
    config.update(changes)
    return config
