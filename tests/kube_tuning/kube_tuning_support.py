"""Manifests, a connector factory and readers for tests/kube_tuning (real cluster)."""

from __future__ import annotations

from typing import Any

from kube_local import LocalCluster
from kube_local_manifests import container, deployment
from waiting import wait_until

from servo_actors.connectors.base import Control
from servo_actors.connectors.kubernetes import KubernetesConnector

ROLLOUT_TIMEOUT = 120.0
"""Seconds for a small rollout on 2 busy cores (kwok makes a pod Ready in well under a second)."""
SIMULATE_ENV = "KWOK_SIMULATE"
SIMULATE_VALUES = ["none", "crash-loop", "unstable", "image-pull-error"]


def web_deployment(replicas: int = 2) -> dict[str, Any]:
    main = container("main", env={"GOGC": "100", SIMULATE_ENV: "none"}, cpu="250m", memory="128Mi")
    manifest = deployment("web", replicas=replicas, containers=[main],
                          annotations={"kwok.servo-actors/simulate-interval": "1s"})  # fmt: skip
    return manifest


def service(name: str = "web") -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]},
    }  # fmt: skip


def tuning_config(cluster: LocalCluster, namespace: str, **changes: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "kubeconfig": str(cluster.kubeconfig),
        "namespace": namespace,
        "timeout": "60s",
        "request_timeout": "5s",
        "deployments": [
            {
                "name": "web",
                "strategy": "tuning",
                "replicas": {"min": 1, "max": 4},
                "containers": [
                    {
                        "name": "main",
                        "cpu": {"min": "125m", "max": "8", "step": "125m"},
                        "memory": {"min": "64Mi", "max": "1Gi", "step": "64Mi", "set": ["request"]},
                        "env": [
                            {"name": "GOGC", "type": "range", "min": 25, "max": 400, "step": 25},
                            {"name": SIMULATE_ENV, "type": "enum", "values": SIMULATE_VALUES},
                        ],
                    }
                ],
            }
        ],
    }
    config.update(changes)
    return config


def connector(cluster: LocalCluster, namespace: str, **changes: Any) -> KubernetesConnector:
    return KubernetesConnector("k8s", tuning_config(cluster, namespace, **changes))


def trial(**settings: Any) -> dict[str, Any]:
    return {"web-tuning": {"settings": {k: {"value": v} for k, v in settings.items()}}}


def adjust(conn: KubernetesConnector, components: dict[str, Any], settlement: float = 0.0) -> dict[str, Any]:
    return conn.adjust(components, Control(settlement=settlement), lambda percent, message="": None)


def rolled_out(cluster: LocalCluster, namespace: str, name: str = "web", kind: str = "deployment") -> None:
    cluster.kubectl("rollout", "status", f"{kind}/{name}", "-n", namespace, f"--timeout={ROLLOUT_TIMEOUT:.0f}s",
                    timeout=ROLLOUT_TIMEOUT + 30)  # fmt: skip


def pods(cluster: LocalCluster, namespace: str, selector: str = "app=web") -> list[dict[str, Any]]:
    return cluster.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")["items"]


def tuning_pods(cluster: LocalCluster, namespace: str) -> list[dict[str, Any]]:
    return pods(cluster, namespace, "servo-actors.io/role=tuning")


def tuning_pod(cluster: LocalCluster, namespace: str) -> dict[str, Any] | None:
    return cluster.try_get(f"/api/v1/namespaces/{namespace}/pods/web-tuning")


def main_container(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "main")


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in main_container(pod).get("env") or []}


def ready(pod: dict[str, Any] | None) -> bool:
    conditions = (pod or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def deployment_snapshot(cluster: LocalCluster, namespace: str) -> tuple[Any, int]:
    found = cluster.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/web")
    return found["spec"], found["metadata"]["generation"]


def remove_tuning_pod(cluster: LocalCluster, namespace: str) -> None:
    cluster.kubectl("delete", "pod", "web-tuning", "-n", namespace, "--ignore-not-found", "--wait=true",
                    "--timeout=60s", timeout=90)  # fmt: skip
    wait_until(lambda: tuning_pod(cluster, namespace) is None, 60, interval=0.2, what="no tuning pod")
