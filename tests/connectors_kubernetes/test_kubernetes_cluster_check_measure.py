"""check and measure against the emulated cluster."""

from __future__ import annotations

import copy

import pytest
from k8s_objects import WEB_CONFIG
from kube_cluster import FailureMode

from servo_actors.connectors.base import ConnectorFailure, Control


def _by_name(results: list[dict]) -> dict[str, dict]:
    return {r["name"]: r for r in results}


def test_every_check_passes_on_a_ready_cluster(cluster, make_connector) -> None:
    """Stays on the emulator: no real test covers this yet (the real cluster could); move it when one does."""
    results = make_connector().check()
    assert all(r["success"] for r in results), results
    named = _by_name(results)
    assert cluster.url in named["kubernetes API reachable"]["message"]
    assert "Kubernetes v" in named["kubernetes API reachable"]["message"]
    assert "main cpu 500m" in named["deployment web"]["message"]
    assert set(named) >= {"permissions", "namespace default readable", "deployment web", "autoscaler of web"}


def test_a_missing_permission_is_named(cluster, make_connector) -> None:
    """Emulator: denies one verb on demand; the real cluster's test kubeconfig is an admin's."""
    cluster.deny("patch", "deployments", "apps")
    cluster.deny("list", "pods", "metrics.k8s.io")
    named = _by_name(make_connector().check())
    permissions = named["permissions"]
    assert not permissions["success"]
    assert "patch deployments.apps" in permissions["message"]
    assert "deploy/kubernetes" in permissions["message"]
    assert "list pods.metrics.k8s.io" in permissions["message"] and "usage" in permissions["message"]
    # The remedy is the Role rule to add, for the required verb only.
    assert permissions["remedy"] == (
        "add to the servo's Role in namespace 'default': "
        '{apiGroups: ["apps"], resources: ["deployments"], verbs: ["patch"]} '
        "(deploy/kubernetes/role.yaml holds them all)"
    )


def test_only_an_optional_permission_missing_still_passes(cluster, make_connector) -> None:
    """Emulator: denies one verb on demand; the real cluster's test kubeconfig is an admin's."""
    cluster.deny("get", "pods", "metrics.k8s.io")
    permissions = _by_name(make_connector().check())["permissions"]
    assert permissions["success"], permissions
    assert "no CPU/memory usage" in permissions["message"]


def test_api_down_is_one_clear_failed_check(cluster, make_connector) -> None:
    """Emulator: the API server is stopped in the test, which the shared real cluster cannot be."""
    cluster.down()
    [result] = make_connector(request_timeout="2s").check()
    assert result == {
        "name": "kubernetes API reachable",
        "success": False,
        "message": result["message"],
        "severity": "critical",
        "remedy": result["remedy"],
    }
    assert "Connection refused" in result["message"]
    assert result["remedy"].startswith("kubectl --kubeconfig ") and " -n default version" in result["remedy"]


def test_missing_container_resources_and_hpa_are_named(cluster, make_connector) -> None:
    """Stays on the emulator: no real test covers this yet (the real cluster could); move it when one does."""
    cluster.add_deployment("bare", containers=[{"name": "main", "image": "x"}], replicas=1)
    bare = {
        "name": "bare",
        "hpa": {"min_replicas": {"min": 1, "max": 3}},
        "containers": [{"name": "main", "cpu": {"min": 0.25, "max": 1}}, {"name": "ghost"}],
    }
    named = _by_name(make_connector(deployments=[WEB_CONFIG, bare]).check())
    assert not named["deployment bare"]["success"]
    assert "neither a cpu request nor a limit" in named["deployment bare"]["message"]
    assert "no container 'ghost'" in named["deployment bare"]["message"]
    remedy = named["deployment bare"]["remedy"]
    assert "set resources deployment/bare -c main --requests=cpu=0.25" in remedy
    assert "get deployment/bare -o 'jsonpath={.spec.template.spec.containers[*].name}'" in remedy
    assert not named["autoscaler of bare"]["success"]


def test_a_missing_kubeconfig_is_a_failed_check_not_a_crash(tmp_path, make_connector) -> None:
    """No cluster needed: the kubeconfig file is missing."""
    [result] = make_connector(kubeconfig=str(tmp_path / "nope")).check()
    assert not result["success"] and "does not exist" in result["message"]


def test_measure_counts_restarts_during_the_window(cluster, make_connector, progress) -> None:
    """Stays on the emulator: no real test covers this yet (the real cluster could); move it when one does."""
    config = copy.deepcopy(WEB_CONFIG)
    cluster.set_mode(FailureMode.CRASHLOOP)
    connector = make_connector(deployments=[config], on_failure="ignore")
    with pytest.raises(ConnectorFailure):
        connector.adjust({"web": {"settings": {"cpu": {"value": 2}}}}, Control(), progress)
    measured = connector.measure(["web.restarts"], Control(duration=2), progress)
    assert measured["metrics"]["web.restarts"]["value"] >= 1


def test_usage_metrics_only_where_metrics_api_answers(cluster, make_connector, progress) -> None:
    """Emulator: the metrics API's absence and its exact values are set on demand; the real cluster's come from kwok."""
    connector = make_connector()
    assert "web.cpu_usage" not in connector.describe()["metrics"]
    cluster.set_metrics("web", cpu="250m", memory="256Mi")
    assert connector.describe()["metrics"]["web.cpu_usage"] == {"unit": "cores"}
    measured = connector.measure(["web.cpu_usage", "web.memory_usage"], Control(), progress)["metrics"]
    assert measured["web.cpu_usage"]["value"] == pytest.approx(0.5)  # two pods
    assert measured["web.memory_usage"]["value"] == pytest.approx(0.5)


def test_unknown_metric_is_named(make_connector, progress) -> None:
    """No cluster needed: refused before any request."""
    with pytest.raises(ConnectorFailure) as caught:
        make_connector().measure(["api.restarts"], Control(), progress)
    assert caught.value.reason == "unknown-metric"
