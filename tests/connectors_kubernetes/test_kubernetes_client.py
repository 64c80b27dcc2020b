"""The API client against the emulated server: errors named, watches bounded, tokens kept out."""

from __future__ import annotations

import time

import pytest
import yaml
from k8s_objects import WEB_CONTAINER, connector_config
from kube_cluster import FailureMode, KubeCluster

from servo_actors.connectors.base import ConnectorFailure, Control
from servo_actors.connectors.kubernetes import KubernetesConnector
from servo_actors.connectors.kubernetes.client import (
    KubeApiError,
    KubeClient,
    KubeUnreachable,
    deployment_path,
    deployments_path,
)
from servo_actors.connectors.kubernetes.kubeconfig import resolve_access

BOUND = 15.0
"""Generous bound on a 1 s watch: only a hang breaks it."""


def _client(cluster) -> KubeClient:
    return KubeClient(resolve_access(str(cluster.kubeconfig), None), request_timeout=5)


def test_a_watch_ends_at_its_timeout_and_yields_changes(cluster) -> None:
    client = _client(cluster)
    try:
        current = client.get(deployment_path("default", "web"))
        params = {
            "fieldSelector": "metadata.name=web",
            "resourceVersion": current["metadata"]["resourceVersion"],
        }
        began = time.monotonic()
        events = list(client.watch(deployments_path("default"), params, 1))
        assert time.monotonic() - began < BOUND
        assert all(kind in ("ADDED", "MODIFIED", "BOOKMARK") for kind, _ in events)
        client.patch(deployment_path("default", "web"), {"spec": {"replicas": 3}})
        changed = list(client.watch(deployments_path("default"), params, 1))
        assert any(kind == "MODIFIED" and obj["spec"]["replicas"] == 3 for kind, obj in changed)
    finally:
        client.close()


def test_errors_carry_status_and_the_servers_message(cluster) -> None:
    client = _client(cluster)
    try:
        with pytest.raises(KubeApiError) as caught:
            client.get(deployment_path("default", "nope"))
        assert caught.value.status == 404 and caught.value.reason == "NotFound"
        assert "GET /apis/apps/v1/namespaces/default/deployments/nope: 404 NotFound" in str(caught.value)
        cluster.down()
        with pytest.raises(KubeUnreachable, match="Connection refused"):
            client.get(deployment_path("default", "web"))
    finally:
        client.close()


def test_a_wrong_token_is_unauthorized_and_never_shown(cluster, make_connector, tmp_path) -> None:
    data = yaml.safe_load(cluster.kubeconfig.read_text())
    data["users"][0]["user"]["token"] = "wrong-secret-value"
    bad = tmp_path / "bad-kubeconfig"
    bad.write_text(yaml.safe_dump(data))
    connector = make_connector(kubeconfig=str(bad))
    with pytest.raises(ConnectorFailure) as caught:
        connector.describe()
    assert "401" in caught.value.message
    assert "wrong-secret-value" not in caught.value.message
    assert cluster.token not in caught.value.message
    results = connector.check()
    assert not all(r["success"] for r in results)
    assert not any("wrong-secret-value" in r["message"] for r in results)


def test_a_failing_credential_plugin_is_a_failed_check_and_a_named_failure(
    cluster, make_connector, tmp_path
) -> None:
    plugin = tmp_path / "login.sh"
    plugin.write_text("#!/bin/sh\necho 'session expired, run login' >&2\nexit 1\n")
    plugin.chmod(0o755)
    data = yaml.safe_load(cluster.kubeconfig.read_text())
    data["users"][0]["user"] = {
        "exec": {"command": str(plugin), "apiVersion": "client.authentication.k8s.io/v1"}
    }
    config = tmp_path / "exec-kubeconfig"
    config.write_text(yaml.safe_dump(data))
    connector = make_connector(kubeconfig=str(config))
    [result] = connector.check()
    assert result["name"] == "kubeconfig" and not result["success"]
    assert "session expired, run login" in result["message"]
    with pytest.raises(ConnectorFailure) as caught:
        connector.describe()
    assert caught.value.reason == "kubeconfig-invalid"


def test_a_too_old_resource_version_is_410_and_a_rollout_wait_survives_it(tmp_path, progress) -> None:
    """With a history of 2 changes, most watches resume too late and get 410 Gone: the wait reads
    again and goes on instead of failing."""
    cluster = KubeCluster.start(tmp_path / "cluster", watch_history=2)
    try:
        cluster.add_deployment("web", containers=[WEB_CONTAINER], replicas=2)
        cluster.controller(FailureMode.HEALTHY, rollout_seconds=0.3)
        client = _client(cluster)
        try:
            stale = client.get(deployment_path("default", "web"))["metadata"]["resourceVersion"]
            for replicas in (3, 4, 5):
                client.patch(deployment_path("default", "web"), {"spec": {"replicas": replicas}})
            with pytest.raises(KubeApiError) as caught:
                list(client.watch(deployments_path("default"), {"resourceVersion": stale}, 1))
            assert caught.value.status == 410
        finally:
            client.close()
        connector = KubernetesConnector("k8s", connector_config(cluster))
        result = connector.adjust({"web": {"settings": {"cpu": {"value": 2}}}}, Control(), progress)
        assert result["web"]["settings"]["cpu"]["value"] == 2.0
    finally:
        cluster.stop()
