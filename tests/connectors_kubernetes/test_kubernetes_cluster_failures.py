"""Failed rollouts against the emulated cluster: what the real cluster cannot be made to do (quota
ReplicaFailure, STUCK, the API going down); the rest is in tests/connectors_kubernetes_real."""

from __future__ import annotations

import copy
import threading

import pytest
from k8s_objects import WEB_CONFIG, WEB_CONTAINER
from kube_cluster import FailureMode
from waiting import wait_until

from servo_actors.connectors.base import ConnectorFailure, Control

ORIGINAL = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
WAIT = 30.0
"""Generous bound on the emulator reaching a state: only a hang breaks it."""


def _resources(cluster) -> dict:
    return cluster.get("deployment", "web")["spec"]["template"]["spec"]["containers"][0]["resources"]


def _rolled_out(cluster) -> bool:
    deployment = cluster.get("deployment", "web")
    status = deployment.get("status") or {}
    desired = deployment["spec"]["replicas"]
    return (
        deployment["metadata"]["generation"] <= status.get("observedGeneration", 0)
        and status.get("updatedReplicas")
        == status.get("readyReplicas")
        == status.get("availableReplicas")
        == desired
        and status.get("replicas") == desired
    )


def _adjust_in(mode, cluster, connector, progress, settlement: float = 0.0, **settings):
    """Adjust cpu to 2 cores (and ``settings``) with the next rollout failing as ``mode``; the failure."""
    cluster.set_mode(mode)
    asked = {"cpu": {"value": 2}, **{name: {"value": value} for name, value in settings.items()}}
    with pytest.raises(ConnectorFailure) as caught:
        connector.adjust({"web": {"settings": asked}}, Control(settlement=settlement), progress)
    return caught.value


def test_a_replica_failure_is_start_failed_and_rolled_back(cluster, make_connector, progress) -> None:
    """Emulator: a quota ReplicaFailure (the ReplicaSet's pods refused) is not reproduced on the real cluster yet.

    The other kinds (image pull, crash loop, progress deadline, unschedulable) and their rollback run
    against the real cluster in tests/connectors_kubernetes_real/test_real_failures.py."""
    failure = _adjust_in(
        FailureMode.REPLICA_FAILURE, cluster, make_connector(timeout="20s", failure_grace="0.5s"), progress
    )
    assert (failure.status, failure.reason) == ("rejected", "start-failed"), failure.message
    assert failure.message.startswith("Deployment web")
    assert failure.message.count("Deployment web") == 1, failure.message
    assert "Rolled web back to the previous settings, which are healthy again." in failure.message
    assert _resources(cluster) == ORIGINAL
    assert _rolled_out(cluster)


def test_a_stuck_rollout_times_out_and_ignore_leaves_it(cluster, make_connector, progress) -> None:
    """Emulator (STUCK): the real Deployment controller always observes a new generation at once; only the emulator can hold it back."""
    failure = _adjust_in(
        FailureMode.STUCK, cluster, make_connector(timeout="2s", on_failure="ignore"), progress
    )
    assert (failure.status, failure.reason) == ("failed", "timeout"), failure.message
    assert "did not finish rolling out within 2s" in failure.message
    assert "left in place (on_failure: ignore)" in failure.message
    assert _resources(cluster)["requests"]["cpu"] == "2"


def test_the_api_going_away_during_a_rollout_is_waited_out(cluster, make_connector, progress) -> None:
    """A blip of the API server mid-rollout is not a failed adjustment: the wait retries until its timeout.

    Emulator: the API server is stopped and started again mid-rollout, which the shared real cluster cannot be.
    """
    cluster.controller(FailureMode.HEALTHY, rollout_seconds=60)  # still rolling out when the API goes
    connector = make_connector(request_timeout="1s")
    errors: list[BaseException] = []
    result: list[dict] = []

    def run() -> None:
        try:
            result.append(connector.adjust({"web": {"settings": {"cpu": {"value": 2}}}}, Control(), progress))
        except BaseException as exc:  # reported to the test thread
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    wait_until(lambda: any("patched" in m for _, m in progress.reports), WAIT, what="the patch went out")
    cluster.down()
    wait_until(lambda: any("retrying" in m for _, m in progress.reports), WAIT, what="a retry was reported")
    cluster.up()
    cluster.controller(FailureMode.HEALTHY, rollout_seconds=0.2)
    worker.join(WAIT)
    assert not worker.is_alive()
    assert not errors, errors
    assert result[0]["web"]["settings"]["cpu"]["value"] == 2.0
    assert _rolled_out(cluster)


def test_a_healthy_rollout_passes_its_settlement(cluster, make_connector, progress) -> None:
    """Stays on the emulator: no real test covers this yet (the real cluster could); move it when one does (real tests set settlement by control, not config)."""
    result = make_connector(settlement="2s").adjust(
        {"web": {"settings": {"cpu": {"value": 2}}}}, Control(), progress
    )
    assert result["web"]["settings"]["cpu"]["value"] == 2.0
    assert any(message.startswith("settling") for _, message in progress.reports)
    assert progress.reports[-1] == (100, "adjusted")


def test_rollback_removes_a_variable_and_a_limit_the_adjustment_added(
    cluster, make_connector, progress
) -> None:
    """Stays on the emulator: no real test covers this yet (the real cluster could); move it when one does."""
    cluster.add_deployment(
        "api", replicas=1,
        containers=[{"name": "main", "image": "registry.example/api:1", "resources": {"requests": {"cpu": "250m"}}}],
    )  # fmt: skip
    config = {
        "name": "api",
        "containers": [{"name": "main", "cpu": {"min": 0.25, "max": 2},
                        "env": [{"name": "GC", "type": "enum", "values": ["g1", "parallel"]}]}],
    }  # fmt: skip
    connector = make_connector(deployments=[config])
    # Crashes show after a second: time enough to switch the mode before the rollback's ReplicaSet.
    cluster.controller(FailureMode.CRASHLOOP, rollout_seconds=1.0)
    failures: list[ConnectorFailure] = []

    def run() -> None:
        try:
            connector.adjust(
                {"api": {"settings": {"cpu": {"value": 1}, "GC": {"value": "g1"}}}}, Control(), progress
            )
        except ConnectorFailure as exc:
            failures.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    # Only the adjustment's ReplicaSet crashes. (The emulator keeps the empty `limits: {}` and
    # `env: []` a deletion leaves, which a real API server drops, so its rollback template gets a
    # ReplicaSet of its own instead of reusing the first one.)
    wait_until(lambda: len([rs for rs in cluster.list("replicaset") if rs["metadata"]["name"].startswith("api-")]) >= 2,
               WAIT, what="the adjustment's ReplicaSet")  # fmt: skip
    cluster.set_mode(FailureMode.HEALTHY)
    worker.join(WAIT)
    assert not worker.is_alive()
    [failure] = failures
    assert failure.reason == "start-failed"
    assert "Rolled api back to the previous settings, which are healthy again." in failure.message, (
        failure.message
    )
    container = cluster.get("deployment", "api")["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"cpu": "250m"}
    assert not container["resources"].get("limits")
    assert not container.get("env")


def test_pods_of_the_replaced_template_are_not_blamed_before_the_controller_sees_the_new_one(
    cluster, make_connector, progress
) -> None:
    """A crash loop left by an earlier adjustment is no diagnosis of the next one while the
    controller has not yet acted on it (a rollback's wait would otherwise fail at once).

    Emulator (STUCK): the real controller cannot be made to leave a generation unobserved.
    """
    connector = make_connector(timeout="3s", on_failure="ignore")
    crashing = _adjust_in(FailureMode.CRASHLOOP, cluster, connector, progress)
    assert crashing.reason == "start-failed"
    cluster.set_mode(FailureMode.STUCK)  # the controller will not observe the next generation
    with pytest.raises(ConnectorFailure) as caught:
        connector.adjust({"web": {"settings": {"cpu": {"value": 1}}}}, Control(), progress)
    assert (caught.value.status, caught.value.reason) == ("failed", "timeout"), caught.value.message
    assert "waiting for the controller to see generation" in caught.value.message


def test_every_deployment_of_a_failed_adjustment_is_rolled_back(cluster, make_connector, progress) -> None:
    """Stays on the emulator: no real test covers this yet (the real cluster could); move it when one does."""
    cluster.add_deployment(
        "api", replicas=1, containers=[{**copy.deepcopy(WEB_CONTAINER), "image": "registry.example/api:1"}]
    )
    api = {**copy.deepcopy(WEB_CONFIG), "name": "api"}
    connector = make_connector(deployments=[WEB_CONFIG, api])
    cluster.set_mode(FailureMode.IMAGE_PULL)
    with pytest.raises(ConnectorFailure) as caught:
        connector.adjust(
            {"web": {"settings": {"cpu": {"value": 2}}}, "api": {"settings": {"memory": {"value": 2}}}},
            Control(),
            progress,
        )
    assert caught.value.reason == "image-pull-failed"
    assert "Rolled web, api back to the previous settings, which are healthy again." in caught.value.message
    assert _resources(cluster) == ORIGINAL
    api_resources = cluster.get("deployment", "api")["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert api_resources == ORIGINAL
