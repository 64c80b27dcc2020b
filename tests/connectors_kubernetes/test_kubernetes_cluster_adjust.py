"""describe and adjust against the emulated cluster (real HTTP): patches, rollouts, 409s, HPA."""

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


def test_describe_reads_the_cluster_every_time(cluster, make_connector) -> None:
    connector = make_connector()
    described = connector.describe()
    assert _settings(described["components"]) == {"cpu": 0.5, "memory": 0.5, "GOGC": 100, "replicas": 2}
    assert set(described["metrics"]) == {"web.ready_replicas", "web.restarts"}
    # Someone else changes the Deployment: the next describe says so, out of range as it is.
    client = KubeClient(resolve_access(str(cluster.kubeconfig), None), 5)
    try:
        client.patch(deployment_path("default", "web"), {"spec": {"replicas": 12}})
    finally:
        client.close()
    assert _settings(connector.describe()["components"])["replicas"] == 12


def test_adjust_patches_owned_fields_and_waits_for_the_rollout(cluster, make_connector, progress) -> None:
    connector = make_connector()
    before = cluster.get("deployment", "web")
    settings = {
        "cpu": {"value": 1.5},
        "memory": {"value": 0.75},
        "GOGC": {"value": 200},
        "replicas": {"value": 3},
    }
    result = connector.adjust({"web": {"settings": settings}}, Control(), progress)
    assert _settings(result) == {"cpu": 1.5, "memory": 0.75, "GOGC": 200, "replicas": 3}

    [(_, _, body, headers)] = _writes(cluster)
    assert headers.get("Content-Type") == STRATEGIC
    assert body["metadata"] == {"resourceVersion": before["metadata"]["resourceVersion"]}
    assert body["spec"]["replicas"] == 3
    assert body["spec"]["template"]["spec"]["containers"] == [
        {
            "name": "main",
            "resources": {
                "requests": {"cpu": "1500m", "memory": "768Mi"},
                "limits": {"cpu": "1500m", "memory": "768Mi"},
            },
            "env": [{"name": "GOGC", "value": "200"}],
        }
    ]
    after = cluster.get("deployment", "web")
    assert after["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/web:1"
    status = after["status"]
    assert after["metadata"]["generation"] <= status["observedGeneration"]
    assert status["updatedReplicas"] == status["readyReplicas"] == status["availableReplicas"] == 3
    percents = [p for p, _ in progress.reports]
    assert percents == sorted(percents) and percents[-1] == 100
    assert any("replicas" in message for _, message in progress.reports)


def test_no_patch_when_nothing_changes(cluster, make_connector, progress) -> None:
    connector = make_connector()
    # (cpu 0.5 would change: it sets the request *and* the limit, which is 1 core now)
    settings = {"GOGC": {"value": 100}, "replicas": {"value": 2}}
    connector.adjust({"web": {"settings": settings}}, Control(), progress)
    assert _writes(cluster) == []
    assert any("nothing to change" in message for _, message in progress.reports)


def test_a_conflict_is_read_again_and_retried(cluster, make_connector, progress) -> None:
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
    cluster.conflict_next("deployment", "web", times=50)
    with pytest.raises(ConnectorFailure) as caught:
        make_connector().adjust({"web": {"settings": {"cpu": {"value": 2}}}}, Control(), progress)
    assert caught.value.reason == "conflict"
    assert "409" in caught.value.message


def test_the_resource_version_precondition_is_real_and_the_next_adjust_reads_afresh(
    cluster, make_connector, progress
) -> None:
    """A patch carrying an outdated resourceVersion is refused (so the connector's precondition
    protects a concurrent writer's change), and the connector's own read is never stale."""
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
    with pytest.raises(ConnectorFailure) as caught:
        make_connector().adjust({"web": {"settings": {"cpu": {"value": 64}}}}, Control(), progress)
    assert (caught.value.status, caught.value.reason) == ("failed", "invalid-setting")
    assert "web.cpu: 64 is outside the configured range" in caught.value.message
    assert _writes(cluster) == []


def test_a_missing_deployment_is_named(cluster, make_connector) -> None:
    config = {"name": "api", "containers": [{"name": "main", "cpu": {"min": 1, "max": 2}}]}
    with pytest.raises(ConnectorFailure) as caught:
        make_connector(deployments=[config]).describe()
    assert caught.value.reason == "not-found"
    assert "Deployment 'api' not found in namespace 'default'" in caught.value.message


def test_api_server_down_is_a_clear_failure_and_recovers(cluster, make_connector, progress) -> None:
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
    cluster.add_hpa("web-hpa", "web")
    connector = make_connector()
    assert "replicas" not in _settings(connector.describe()["components"])
    with pytest.raises(ConnectorFailure) as caught:
        connector.adjust({"web": {"settings": {"replicas": {"value": 4}}}}, Control(), progress)
    assert caught.value.reason == "invalid-setting" and "web-hpa" in caught.value.message
    assert _writes(cluster) == []


def test_a_configured_hpa_that_does_not_exist_is_named(cluster, make_connector) -> None:
    with pytest.raises(ConnectorFailure) as caught:
        _hpa_connector(make_connector).describe()
    assert (
        "no HorizontalPodAutoscaler in namespace 'default' targets Deployment 'web'" in caught.value.message
    )


def test_a_request_the_server_refuses_is_named_and_nothing_is_left_half_done(
    cluster, make_connector, progress
) -> None:
    config = copy.deepcopy(WEB_CONFIG)
    config["containers"][0]["cpu"]["set"] = ["request"]  # the 1-core limit stays: a 2-core request is invalid
    with pytest.raises(ConnectorFailure) as caught:
        make_connector(deployments=[config]).adjust(
            {"web": {"settings": {"cpu": {"value": 2}}}}, Control(), progress
        )
    assert (caught.value.status, caught.value.reason) == ("failed", "invalid-setting")
    assert "422" in caught.value.message and "must be less than or equal to cpu limit" in caught.value.message
    assert (
        cluster.get("deployment", "web")["spec"]["template"]["spec"]["containers"][0]["resources"][
            "requests"
        ]["cpu"]
        == "500m"
    )


def test_a_paused_deployment_is_refused_before_any_write_and_fails_its_check(
    cluster, make_connector, progress
) -> None:
    client = KubeClient(resolve_access(str(cluster.kubeconfig), None), 5)
    try:
        client.patch(deployment_path("default", "web"), {"spec": {"paused": True}})
    finally:
        client.close()
    writes = len(cluster.patch_log)
    connector = make_connector()
    with pytest.raises(ConnectorFailure) as caught:
        connector.adjust({"web": {"settings": {"cpu": {"value": 2}}}}, Control(), progress)
    assert (caught.value.status, caught.value.reason) == ("failed", "deployment-paused")
    assert "kubectl rollout resume deployment/web" in caught.value.message
    assert len(cluster.patch_log) == writes
    check = {r["name"]: r for r in connector.check()}["deployment web"]
    assert not check["success"] and "paused" in check["message"]


def test_resources_of_an_hpa_controlled_deployment_roll_out_without_touching_replicas(
    cluster, make_connector, progress
) -> None:
    cluster.add_hpa("web-hpa", "web", min_replicas=3, max_replicas=6)
    connector = _hpa_connector(make_connector)
    result = connector.adjust({"web": {"settings": {"cpu": {"value": 1.25}}}}, Control(), progress)
    assert _settings(result)["cpu"] == 1.25
    [(_, _, body, _)] = _writes(cluster)
    assert "replicas" not in body["spec"]
    deployment = cluster.get("deployment", "web")
    assert deployment["spec"]["replicas"] >= 3  # the HPA's floor, kept by its controller
    assert deployment["status"]["updatedReplicas"] == deployment["spec"]["replicas"]
