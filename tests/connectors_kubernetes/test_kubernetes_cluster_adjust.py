"""adjust against the emulated cluster (real HTTP): what the real cluster cannot be made to do (injected
409s, the API going down) and HPA; the rest runs on the real cluster (tests/connectors_kubernetes_real)."""

from __future__ import annotations

import copy

import pytest
from k8s_objects import WEB_CONFIG

from servo_actors.connectors.base import ConnectorFailure, Control
from servo_actors.connectors.kubernetes.client import KubeApiError, KubeClient, deployment_path
from servo_actors.connectors.kubernetes.kubeconfig import resolve_access

STRATEGIC = "application/strategic-merge-patch+json"


def _writes(cluster, kind_path: str = "/deployments/web") -> list:
    return [w for w in cluster.patch_log if w[0].upper().endswith("PATCH") and w[1].endswith(kind_path)]


def _settings(components: dict) -> dict:
    return {name: spec["value"] for name, spec in components["web"]["settings"].items()}


def test_a_conflict_is_read_again_and_retried(cluster, make_connector, progress) -> None:
    """Emulator: 409s injected on demand; a real racing writer cannot be timed to land between the connector's read and its patch."""
    cluster.conflict_next("deployment", "web", times=2)
    result = make_connector().adjust({"web": {"settings": {"cpu": {"value": 2}}}}, Control(), progress)
    assert _settings(result)["cpu"] == 2.0
    writes = _writes(cluster)
    assert len(writes) == 3
    versions = [w[2]["metadata"]["resourceVersion"] for w in writes]
    assert all(versions), "every attempt carries the resourceVersion it was built from"
    assert (
        cluster.get("deployment", "web")["spec"]["template"]["spec"]["containers"][0]["resources"][
            "requests"
        ]["cpu"]
        == "2"
    )


def test_a_conflict_that_never_ends_is_a_clear_failure(cluster, make_connector, progress) -> None:
    """Emulator: a 409 on every attempt, which no real writer can be made to cause."""
    cluster.conflict_next("deployment", "web", times=50)
    with pytest.raises(ConnectorFailure) as caught:
        make_connector().adjust({"web": {"settings": {"cpu": {"value": 2}}}}, Control(), progress)
    assert caught.value.reason == "conflict"
    assert "409" in caught.value.message


def test_the_resource_version_precondition_is_real_and_the_next_adjust_reads_afresh(
    cluster, make_connector, progress
) -> None:
    """A patch carrying an outdated resourceVersion is refused (so the connector's precondition
    protects a concurrent writer's change), and the connector's own read is never stale.

    Emulator: checks the emulator's precondition behaves as the real server's, which the injected-409 tests rely on.
    """
    connector = make_connector()
    client = KubeClient(resolve_access(str(cluster.kubeconfig), None), 5)
    stale = cluster.get("deployment", "web")["metadata"]["resourceVersion"]
    try:
        client.patch(deployment_path("default", "web"), {"metadata": {"labels": {"touched": "yes"}}})
        with pytest.raises(KubeApiError, match="409"):
            client.patch(
                deployment_path("default", "web"),
                {"metadata": {"resourceVersion": stale}, "spec": {"replicas": 5}},
            )
    finally:
        client.close()
    result = connector.adjust({"web": {"settings": {"replicas": {"value": 4}}}}, Control(), progress)
    assert _settings(result)["replicas"] == 4


def test_bad_settings_are_refused_before_any_write(cluster, make_connector, progress) -> None:
    """Stays on the emulator: no real test covers this yet (the real cluster could); move it when one does."""
    with pytest.raises(ConnectorFailure) as caught:
        make_connector().adjust({"web": {"settings": {"cpu": {"value": 64}}}}, Control(), progress)
    assert (caught.value.status, caught.value.reason) == ("failed", "invalid-setting")
    assert "web.cpu: 64 is outside the configured range" in caught.value.message
    assert _writes(cluster) == []


def test_a_missing_deployment_is_named(cluster, make_connector) -> None:
    """Stays on the emulator: no real test covers this yet (the real cluster could); move it when one does."""
    config = {"name": "api", "containers": [{"name": "main", "cpu": {"min": 1, "max": 2}}]}
    with pytest.raises(ConnectorFailure) as caught:
        make_connector(deployments=[config]).describe()
    assert caught.value.reason == "not-found"
    assert "Deployment 'api' not found in namespace 'default'" in caught.value.message


def test_api_server_down_is_a_clear_failure_and_recovers(cluster, make_connector, progress) -> None:
    """Emulator: the API server is stopped and started again in the test, which the shared real cluster cannot be."""
    connector = make_connector(request_timeout="2s")
    cluster.down()
    with pytest.raises(ConnectorFailure) as caught:
        connector.describe()
    assert caught.value.reason == "kubernetes-unreachable"
    assert cluster.url in caught.value.message and "Connection refused" in caught.value.message
    assert "Traceback" not in caught.value.message
    with pytest.raises(ConnectorFailure) as caught:
        connector.adjust({"web": {"settings": {"cpu": {"value": 1}}}}, Control(), progress)
    assert caught.value.reason == "kubernetes-unreachable"
    cluster.up()
    assert _settings(connector.describe()["components"])["cpu"] == 0.5


HPA_CONFIG = {
    "min_replicas": {"min": 1, "max": 10},
    "max_replicas": {"min": 2, "max": 30},
    "target_cpu_utilization": {"min": 30, "max": 90, "step": 5},
}


def _hpa_connector(make_connector):
    return make_connector(deployments=[{**copy.deepcopy(WEB_CONFIG), "hpa": HPA_CONFIG}])


def test_hpa_settings_replace_replicas(cluster, make_connector, progress) -> None:
    """Stays on the emulator until the real HPA test (being written) covers it; the emulator plays the HPA controller."""
    cluster.add_hpa("web-hpa", "web", min_replicas=2, max_replicas=6, target_cpu_utilization=70)
    connector = _hpa_connector(make_connector)
    settings = _settings(connector.describe()["components"])
    assert "replicas" not in settings
    assert (
        settings["hpa_min_replicas"],
        settings["hpa_max_replicas"],
        settings["hpa_target_cpu_utilization"],
    ) == (2, 6, 70)

    asked = {
        "hpa_min_replicas": {"value": 3},
        "hpa_max_replicas": {"value": 12},
        "hpa_target_cpu_utilization": {"value": 55},
    }
    result = connector.adjust({"web": {"settings": asked}}, Control(), progress)
    assert (_settings(result)["hpa_min_replicas"], _settings(result)["hpa_target_cpu_utilization"]) == (3, 55)
    [(_, _, body, headers)] = _writes(cluster, "/horizontalpodautoscalers/web-hpa")
    assert headers.get("Content-Type") == STRATEGIC
    assert body["spec"]["minReplicas"] == 3 and body["spec"]["maxReplicas"] == 12
    cpu = [m for m in body["spec"]["metrics"] if m["resource"]["name"] == "cpu"]
    assert cpu[0]["resource"]["target"] == {"type": "Utilization", "averageUtilization": 55}
    assert not any("replicas" in w[2].get("spec", {}) for w in _writes(cluster))
    hpa = cluster.get("hpa", "web-hpa")
    assert hpa["spec"]["minReplicas"] == 3
    assert cluster.get("deployment", "web")["spec"]["replicas"] >= 3  # the HPA controller scaled it, not us


def test_replicas_is_refused_while_an_hpa_controls_the_deployment(cluster, make_connector, progress) -> None:
    """Stays on the emulator until the real HPA test (being written) covers it; the emulator plays the HPA controller."""
    cluster.add_hpa("web-hpa", "web")
    connector = make_connector()
    assert "replicas" not in _settings(connector.describe()["components"])
    with pytest.raises(ConnectorFailure) as caught:
        connector.adjust({"web": {"settings": {"replicas": {"value": 4}}}}, Control(), progress)
    assert caught.value.reason == "invalid-setting" and "web-hpa" in caught.value.message
    assert _writes(cluster) == []


def test_a_configured_hpa_that_does_not_exist_is_named(cluster, make_connector) -> None:
    """Stays on the emulator until the real HPA test (being written) covers it; the emulator plays the HPA controller."""
    with pytest.raises(ConnectorFailure) as caught:
        _hpa_connector(make_connector).describe()
    assert (
        "no HorizontalPodAutoscaler in namespace 'default' targets Deployment 'web'" in caught.value.message
    )


def test_resources_of_an_hpa_controlled_deployment_roll_out_without_touching_replicas(
    cluster, make_connector, progress
) -> None:
    """Stays on the emulator until the real HPA test (being written) covers it; the emulator plays the HPA controller."""
    cluster.add_hpa("web-hpa", "web", min_replicas=3, max_replicas=6)
    connector = _hpa_connector(make_connector)
    result = connector.adjust({"web": {"settings": {"cpu": {"value": 1.25}}}}, Control(), progress)
    assert _settings(result)["cpu"] == 1.25
    [(_, _, body, _)] = _writes(cluster)
    assert "replicas" not in body["spec"]
    deployment = cluster.get("deployment", "web")
    assert deployment["spec"]["replicas"] >= 3  # the HPA's floor, kept by its controller
    assert deployment["status"]["updatedReplicas"] == deployment["spec"]["replicas"]
