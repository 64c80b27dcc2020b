"""strategy: tuning against the real local cluster: the tuning pod is made from the Deployment's
template with the trial values, keeps its labels (the Service's EndpointSlice lists it), is never
adopted by the ReplicaSet (the real controller runs), is diagnosed and deleted when it fails, and
the Deployment is never written. One namespace (Deployment web, 2 replicas) serves the module;
each test starts without a tuning pod."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kube_local import LocalCluster
from kube_tuning_support import (
    SIMULATE_ENV,
    adjust,
    connector,
    deployment_snapshot,
    env_of,
    main_container,
    pods,
    ready,
    remove_tuning_pod,
    rolled_out,
    service,
    trial,
    tuning_pod,
    tuning_pods,
    web_deployment,
)
from waiting import wait_until

from servo_actors.connectors.base import ConnectorFailure, Control
from servo_actors.connectors.kubernetes.rollout_rules import settlement_left

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def ns(kube_cluster: LocalCluster) -> Iterator[str]:
    name = kube_cluster.new_namespace("tuning-pod")
    kube_cluster.apply(name, web_deployment(), service())
    rolled_out(kube_cluster, name)
    yield name
    kube_cluster.delete_namespace(name)


@pytest.fixture(autouse=True)
def no_tuning_pod(kube_cluster: LocalCluster, ns: str) -> None:
    remove_tuning_pod(kube_cluster, ns)


def _endpoint_pods(cluster: LocalCluster, ns: str) -> set[str]:
    slices = cluster.get(
        f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector=kubernetes.io/service-name=web"
    )
    return {
        (e.get("targetRef") or {}).get("name", "")
        for s in slices["items"]
        for e in s.get("endpoints") or []
        if (e.get("conditions") or {}).get("ready")
    }


def test_describe_pins_the_deployment_and_offers_the_tuning_component(
    kube_cluster: LocalCluster, ns: str
) -> None:
    description = connector(kube_cluster, ns).describe()
    components = description["components"]
    assert set(components) == {"web", "web-tuning"}
    main = components["web"]["settings"]
    assert set(main) == {"cpu", "memory", "GOGC", SIMULATE_ENV, "replicas"}
    assert all(s["pinned"] for s in main.values())
    tuned = components["web-tuning"]["settings"]
    assert set(tuned) == {"cpu", "memory", "GOGC", SIMULATE_ENV}  # container settings only
    assert not any(s["pinned"] for s in tuned.values())
    assert tuned["cpu"]["value"] == 0.25 and tuned["GOGC"]["value"] == 100  # the template's, no pod yet
    assert {"web-tuning.ready_replicas", "web-tuning.restarts", "web.restarts"} <= set(description["metrics"])


def test_adjust_makes_one_tuning_pod_never_adopted_and_leaves_the_deployment(
    kube_cluster: LocalCluster, ns: str
) -> None:
    before = deployment_snapshot(kube_cluster, ns)
    conn = connector(kube_cluster, ns)
    done = adjust(conn, trial(cpu=0.5, memory=0.0625, GOGC=200))
    assert done["web-tuning"]["settings"]["cpu"]["value"] == 0.5
    assert done["web"]["settings"]["cpu"]["value"] == 0.25
    pod = tuning_pod(kube_cluster, ns)
    assert pod is not None and ready(pod)
    meta = pod["metadata"]
    assert meta["labels"] == {"app": "web", "servo-actors.io/role": "tuning"}
    assert meta["annotations"]["servo-actors.io/tuning-of"] == "web"
    assert main_container(pod)["resources"] == {
        "requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"},
    }  # fmt: skip
    assert env_of(pod) == {"GOGC": "200", SIMULATE_ENV: "none"}
    # The real controllers have seen the pod once the EndpointSlice controller lists it (it gets
    # the Service's traffic); the ReplicaSet controller, which acts on the same pod events, has
    # not adopted it, and the Deployment still counts its own two replicas.
    wait_until(lambda: "web-tuning" in _endpoint_pods(kube_cluster, ns), 60, interval=0.2, what="endpoint")
    pod = tuning_pod(kube_cluster, ns)
    assert pod is not None and not pod["metadata"].get("ownerReferences")
    status = kube_cluster.get(f"/apis/apps/v1/namespaces/{ns}/deployments/web")["status"]
    assert status["replicas"] == status["readyReplicas"] == 2
    assert len(pods(kube_cluster, ns)) == 3 and len(tuning_pods(kube_cluster, ns)) == 1
    # The same values again keep the pod; new ones replace it (a new uid, the untouched settings kept).
    uid = pod["metadata"]["uid"]
    adjust(connector(kube_cluster, ns), trial(cpu=0.5))
    assert tuning_pod(kube_cluster, ns)["metadata"]["uid"] == uid  # type: ignore[index]
    adjust(connector(kube_cluster, ns), trial(cpu=0.75))
    pod = tuning_pod(kube_cluster, ns)
    assert pod is not None and pod["metadata"]["uid"] != uid and ready(pod)
    assert main_container(pod)["resources"]["requests"] == {"cpu": "750m", "memory": "64Mi"}
    assert env_of(pod)["GOGC"] == "200"
    assert deployment_snapshot(kube_cluster, ns) == before  # spec and generation


def test_the_main_component_is_pinned(kube_cluster: LocalCluster, ns: str) -> None:
    conn = connector(kube_cluster, ns)
    same = {"web": {"settings": {"cpu": {"value": 0.25}, "replicas": {"value": 2}}}}
    adjust(conn, same)  # repeating the current values is accepted
    with pytest.raises(ConnectorFailure) as refused:
        adjust(conn, {"web": {"settings": {"cpu": {"value": 1.0}}}})
    assert refused.value.reason == "invalid-setting"
    assert "web.cpu: pinned at 0.25" in refused.value.message and "-tuning" in refused.value.message
    with pytest.raises(ConnectorFailure) as bad:
        adjust(conn, trial(cpu=99))
    assert bad.value.reason == "invalid-setting" and "web-tuning.cpu" in bad.value.message
    with pytest.raises(ConnectorFailure) as above_limit:  # set: [request] above the template's limit
        adjust(conn, trial(memory=0.25))
    assert above_limit.value.reason == "invalid-setting"
    assert "must be less than or equal to memory limit" in above_limit.value.message
    assert tuning_pod(kube_cluster, ns) is None


@pytest.mark.parametrize(
    ("settings", "status", "reason", "changes"),
    [
        ({SIMULATE_ENV: "image-pull-error"}, "failed", "image-pull-failed", {}),
        ({SIMULATE_ENV: "crash-loop"}, "rejected", "start-failed", {}),
        ({"cpu": 8}, "rejected", "unschedulable", {"timeout": "3s"}),
    ],
    ids=["image-pull-failed", "start-failed", "unschedulable"],
)
def test_a_tuning_pod_that_never_gets_ready_is_diagnosed_and_deleted(
    kube_cluster: LocalCluster,
    ns: str,
    settings: dict[str, Any],
    status: str,
    reason: str,
    changes: dict[str, Any],
) -> None:
    before = deployment_snapshot(kube_cluster, ns)
    with pytest.raises(ConnectorFailure) as failed:
        adjust(connector(kube_cluster, ns, **changes), trial(**settings))
    assert (failed.value.status, failed.value.reason) == (status, reason), failed.value.message
    assert failed.value.message.startswith("tuning pod web-tuning of Deployment web: ")
    assert "Deleted the tuning pod (on_failure: rollback)" in failed.value.message
    assert tuning_pod(kube_cluster, ns) is None
    assert deployment_snapshot(kube_cluster, ns) == before


def test_unstable_during_settlement_and_on_failure_ignore_leaves_it(
    kube_cluster: LocalCluster, ns: str
) -> None:
    with pytest.raises(ConnectorFailure) as failed:
        adjust(
            connector(kube_cluster, ns, on_failure="ignore"),
            trial(**{SIMULATE_ENV: "unstable"}),
            settlement=5,
        )
    assert (failed.value.status, failed.value.reason) == ("rejected", "unstable"), failed.value.message
    assert "left in place (on_failure: ignore)" in failed.value.message
    assert tuning_pod(kube_cluster, ns) is not None


def test_measure_reports_the_tuning_pod_apart(kube_cluster: LocalCluster, ns: str) -> None:
    conn = connector(kube_cluster, ns)
    metrics = ["web-tuning.ready_replicas", "web-tuning.restarts", "web.ready_replicas", "web.restarts"]
    usage = ["web-tuning.cpu_usage", "web-tuning.memory_usage"]
    first = conn.measure(metrics + usage, Control(), lambda percent, message="": None)
    empty = first["metrics"]
    assert empty["web-tuning.ready_replicas"]["value"] == 0 and empty["web.ready_replicas"]["value"] == 2
    # No tuning pod: no usage of it (left out, with the reason); tests/connectors_kubernetes_real/
    # test_real_hpa.py waits for a tuning pod's metrics and sees them reported.
    assert not set(usage) & set(empty)
    assert first["annotations"]["k8s:web-tuning.cpu_usage"] == "omitted: tuning pod web-tuning is not running"
    adjust(conn, trial(GOGC=300))
    made = conn.measure(metrics + usage, Control(), lambda percent, message="": None)
    assert made["metrics"]["web-tuning.ready_replicas"]["value"] == 1
    # A new pod: metrics-server has not sampled it yet (~35 s), so its usage is left out, not 0.0.
    assert not set(usage) & set(made["metrics"])
    for metric in usage:
        assert made["annotations"][f"k8s:{metric}"].startswith("omitted: 1 of 1 running pods have no metrics")
    # A crash loop on the tuning pod alone (left in place by on_failure: ignore): the Deployment's
    # restarts stay 0 while the tuning pod's grow during the measurement.
    with pytest.raises(ConnectorFailure):
        adjust(connector(kube_cluster, ns, on_failure="ignore"), trial(**{SIMULATE_ENV: "crash-loop"}))
    measured = conn.measure(metrics, Control(duration=3), lambda percent, message="": None)["metrics"]
    assert measured["web.restarts"]["value"] == 0 and measured["web.ready_replicas"]["value"] == 2
    assert measured["web-tuning.restarts"]["value"] >= 1
    assert measured["web-tuning.ready_replicas"]["value"] == 0


def test_a_kept_tuning_pod_ready_for_longer_than_the_settlement_is_not_settled_again(
    kube_cluster: LocalCluster, ns: str
) -> None:
    """The settlement of a tuning pod an ADJUST keeps counts from when it became Ready."""
    conn = connector(kube_cluster, ns)
    asked = trial(cpu=0.5, memory=0.0625)
    adjust(conn, asked)
    made = tuning_pod(kube_cluster, ns)
    assert made is not None
    settlement = 2.0
    wait_until(
        lambda: settlement_left([tuning_pod(kube_cluster, ns) or {}], settlement, time.time()) == 0.0,
        60.0,
        interval=0.25,
        what=f"the tuning pod Ready for {settlement:.0f} s",
    )
    messages: list[str] = []
    conn.adjust(asked, Control(settlement=settlement), lambda percent, message="": messages.append(message))
    assert "tuning pod web-tuning already has the requested settings" in messages
    assert not [m for m in messages if m.startswith("settling")], messages
    kept = tuning_pod(kube_cluster, ns)
    assert kept is not None and kept["metadata"]["uid"] == made["metadata"]["uid"]


def _restarts(pod: dict[str, Any]) -> int:
    return sum(c.get("restartCount", 0) for c in pod.get("status", {}).get("containerStatuses") or [])


def _repeated_keeps_the_pod(cluster: LocalCluster, ns: str, asked: dict[str, Any]) -> dict[str, Any]:
    """ADJUST ``asked`` with a fresh connector: the tuning pod is the same one, not restarted."""
    before = tuning_pod(cluster, ns)
    assert before is not None and ready(before)
    messages: list[str] = []
    connector(cluster, ns).adjust(asked, Control(), lambda percent, message="": messages.append(message))
    after = tuning_pod(cluster, ns)
    assert after is not None and after["metadata"]["uid"] == before["metadata"]["uid"], messages
    assert _restarts(after) == _restarts(before) and ready(after)
    assert "tuning pod web-tuning already has the requested settings" in messages
    return after


def test_repeating_an_env_only_trial_keeps_the_tuning_pod_and_a_changed_one_replaces_it(
    kube_cluster: LocalCluster, ns: str
) -> None:
    """The template sets a cpu request but no cpu limit (``set`` names both): a trial naming only
    GOGC leaves the pod's resources as the template's, and repeating it must not read as a change."""
    adjust(connector(kube_cluster, ns), trial(GOGC=200))
    kept = _repeated_keeps_the_pod(kube_cluster, ns, trial(GOGC=200))
    adjust(connector(kube_cluster, ns), trial(GOGC=300))  # a real change of env replaces it
    env_changed = tuning_pod(kube_cluster, ns)
    assert env_changed is not None and env_changed["metadata"]["uid"] != kept["metadata"]["uid"]
    assert env_of(env_changed)["GOGC"] == "300" and ready(env_changed)
    adjust(connector(kube_cluster, ns), trial(memory=0.0625))  # so does one of memory
    memory_changed = tuning_pod(kube_cluster, ns)
    assert memory_changed is not None and memory_changed["metadata"]["uid"] != env_changed["metadata"]["uid"]
    assert main_container(memory_changed)["resources"]["requests"]["memory"] == "64Mi"
    assert env_of(memory_changed)["GOGC"] == "300" and ready(memory_changed)


def test_repeating_only_the_env_of_a_cpu_memory_env_trial_keeps_the_tuning_pod(
    kube_cluster: LocalCluster, ns: str
) -> None:
    adjust(connector(kube_cluster, ns), trial(cpu=0.5, memory=0.0625, GOGC=200))
    _repeated_keeps_the_pod(kube_cluster, ns, trial(GOGC=200))
