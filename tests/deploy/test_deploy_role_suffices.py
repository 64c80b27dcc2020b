"""The least Role of deploy/kubernetes is enough: the connector configured by the ConfigMap's servo.yaml
passes its checks and adjusts a Deployment in an emulated cluster that allows exactly that Role."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_cluster import FailureMode, KubeCluster

kubernetes = pytest.importorskip(
    "servo_actors.connectors.kubernetes", reason="the kubernetes connector is not here"
)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
APP_CONTAINER = {
    "name": "main",
    "image": "registry.example/web:1",
    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
    "env": [{"name": "GOGC", "value": "100"}],
}


def connector_config(cluster: KubeCluster) -> dict[str, Any]:
    """The k8s connector's config from configmap.yaml, pointed at the emulated cluster."""
    configmap = yaml.safe_load((DEPLOY / "configmap.yaml").read_text())
    servo = yaml.safe_load(configmap["data"]["servo.yaml"])
    [spec] = [entry for entry in servo["connectors"] if entry["type"] == "kubernetes"]
    return dict(spec["config"], kubeconfig=str(cluster.kubeconfig), timeout="20s", settlement="0s")


@pytest.fixture
def restricted(tmp_path: Path) -> Iterator[KubeCluster]:
    cluster = KubeCluster.start(tmp_path)
    try:
        cluster.add_deployment("web", containers=[APP_CONTAINER], replicas=2)
        cluster.set_metrics("web", cpu="250m", memory="300Mi")
        cluster.controller(FailureMode.HEALTHY, rollout_seconds=0.1)
        cluster.restrict_to_role(DEPLOY / "role.yaml")
        yield cluster
    finally:
        cluster.stop()


def test_the_connector_checks_and_adjusts_with_exactly_the_deploy_role(restricted: KubeCluster) -> None:
    from servo_actors.connectors.base import Control

    connector = kubernetes.KubernetesConnector("k8s", connector_config(restricted))
    results = connector.check()
    assert all(result["success"] for result in results), results
    described = connector.describe()["components"]
    cpu = described["web"]["settings"]["cpu"]["value"]
    adjusted = connector.adjust(
        {"web": {"settings": {"cpu": {"value": cpu * 2}}}}, Control(), lambda *_: None
    )
    assert adjusted["web"]["settings"]["cpu"]["value"] == cpu * 2
    assert restricted.get("deployment", "web")["status"]["observedGeneration"] == 2
    forbidden = [entry for entry in restricted.patch_log if entry[0] not in ("PATCH", "POST")]
    assert forbidden == []  # only patches (and reviews) were written
