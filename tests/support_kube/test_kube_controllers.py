"""The emulated controllers write what the real deployment controller, scheduler, kubelet and HPA write.

Reasons and messages are those of the Kubernetes documentation ("Deployments: Deployment status",
"Debug Pods", "Horizontal Pod Autoscaling"); every object is also validated against the strict
JSON schema of the Kubernetes API (kubernetes-validate), so a misspelt field fails.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import kubernetes_validate
import pytest
from kube_cluster import FailureMode, KubeCluster
from waiting import wait_until

WEB = "/apis/apps/v1/namespaces/default/deployments/web"
ROLLOUT = 0.1
"""Seconds a pod takes to become ready (or to fail) in these tests."""
WAIT = 20.0
"""Upper bound for anything the controllers do; only a hang reaches it."""
SCHEMA_VERSION = "1.30.0"
MAIN = {
    "name": "main",
    "image": "registry.example/web:1.0",
    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
}


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {cond["type"]: cond for cond in obj.get("status", {}).get("conditions", [])}


def new_cpu(api, cpu: str) -> int:
    """Change the template (a new ReplicaSet is due); returns the Deployment's new generation."""
    patch = {
        "spec": {
            "template": {"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": cpu}}}]}}
        }
    }
    answer = api.patch(WEB, patch)
    assert answer.status_code == 200, answer.text
    return answer.json()["metadata"]["generation"]


def rolled_out(cluster: KubeCluster, generation: int) -> bool:
    """kubectl rollout status's test for "successfully rolled out"."""
    deployment = cluster.get("deployment", "web")
    status, replicas = deployment["status"], deployment["spec"]["replicas"]
    return (
        status.get("observedGeneration", 0) >= generation
        and status.get("updatedReplicas") == replicas
        and status.get("replicas") == replicas
        and status.get("availableReplicas") == replicas
    )


def new_pods(cluster: KubeCluster) -> list[dict[str, Any]]:
    """The pods of the Deployment's current revision ([] until the controller has observed the spec)."""
    deployment = cluster.get("deployment", "web")
    if deployment["status"].get("observedGeneration") != deployment["metadata"]["generation"]:
        return []
    revision = deployment["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
    sets = [
        rs
        for rs in cluster.list("replicaset")
        if rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == revision
    ]
    assert len(sets) == 1
    pod_hash = sets[0]["metadata"]["labels"]["pod-template-hash"]
    return [pod for pod in cluster.pods("web") if pod["metadata"]["labels"]["pod-template-hash"] == pod_hash]


def events(cluster: KubeCluster, reason: str) -> list[dict[str, Any]]:
    return [event for event in cluster.list("event") if event["reason"] == reason]


def assert_valid_shapes(cluster: KubeCluster) -> None:
    for kind in ("deployment", "replicaset", "pod", "hpa", "event"):
        for obj in cluster.list(kind):
            kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)


@pytest.fixture
def web(cluster: KubeCluster) -> KubeCluster:
    cluster.add_deployment("web", containers=[MAIN], replicas=2)
    cluster.controller(FailureMode.HEALTHY, rollout_seconds=ROLLOUT)
    return cluster


def test_the_strict_schemas_refuse_a_misspelt_field(web: KubeCluster) -> None:
    pod = web.pods("web")[0]
    pod["status"]["conditions"][0]["lastUpdateTime"] = pod["status"]["conditions"][0]["lastTransitionTime"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, SCHEMA_VERSION, strict=True)


def test_a_healthy_rollout_replaces_the_replicaset_and_reports_complete(web: KubeCluster, api) -> None:
    old_hash = web.pods("web")[0]["metadata"]["labels"]["pod-template-hash"]
    generation = new_cpu(api, "250m")
    assert generation == 2
    wait_until(lambda: rolled_out(web, generation), WAIT, what="rollout complete")
    deployment = web.get("deployment", "web")
    assert deployment["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    progressing = conditions(deployment)["Progressing"]
    assert (progressing["status"], progressing["reason"]) == ("True", "NewReplicaSetAvailable")
    assert progressing["message"].endswith("has successfully progressed.")
    assert conditions(deployment)["Available"]["reason"] == "MinimumReplicasAvailable"
    pods = wait_until(lambda: len(web.pods("web")) == 2 and web.pods("web"), WAIT, what="old pods gone")
    assert all(pod["metadata"]["labels"]["pod-template-hash"] != old_hash for pod in pods)
    assert all(pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "250m" for pod in pods)
    old_rs = web.get("replicaset", f"web-{old_hash}")
    assert old_rs["spec"]["replicas"] == 0
    assert any("Scaled up replica set" in event["message"] for event in events(web, "ScalingReplicaSet"))
    assert_valid_shapes(web)


def _unschedulable(cluster: KubeCluster) -> bool:
    pods = new_pods(cluster)
    scheduled = [conditions(pod).get("PodScheduled", {}) for pod in pods]
    return (
        bool(pods)
        and all(pod["status"]["phase"] == "Pending" for pod in pods)
        and all((cond.get("status"), cond.get("reason")) == ("False", "Unschedulable") for cond in scheduled)
        and bool(events(cluster, "FailedScheduling"))
    )


def _crashlooping(cluster: KubeCluster) -> bool:
    statuses = [pod["status"].get("containerStatuses", [{}])[0] for pod in new_pods(cluster)]
    return (
        bool(statuses)
        and all(
            status.get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff"
            and status.get("restartCount", 0) >= 3
            and status["lastState"]["terminated"]["exitCode"] == 1
            and status["ready"] is False
            for status in statuses
        )
        and bool(events(cluster, "BackOff"))
    )


def _image_pull_failing(cluster: KubeCluster, seen: set[str]) -> bool:
    for pod in new_pods(cluster):
        status = pod["status"].get("containerStatuses", [{}])[0]
        seen.add(status.get("state", {}).get("waiting", {}).get("reason", ""))
        assert pod["status"]["phase"] == "Pending"
    return {"ErrImagePull", "ImagePullBackOff"} <= seen and bool(events(cluster, "Failed"))


def _deadline_exceeded(cluster: KubeCluster) -> bool:
    progressing = conditions(cluster.get("deployment", "web")).get("Progressing", {})
    return (progressing.get("status"), progressing.get("reason")) == (
        "False",
        "ProgressDeadlineExceeded",
    ) and progressing["message"].endswith("has timed out progressing.")


def _replica_failure(cluster: KubeCluster) -> bool:
    failure = conditions(cluster.get("deployment", "web")).get("ReplicaFailure", {})
    return (
        (failure.get("status"), failure.get("reason")) == ("True", "FailedCreate")
        and "exceeded quota" in failure.get("message", "")
        and new_pods(cluster) == []
        and bool(events(cluster, "FailedCreate"))
    )


FAILURES: dict[FailureMode, Callable[..., bool]] = {
    FailureMode.UNSCHEDULABLE: _unschedulable,
    FailureMode.CRASHLOOP: _crashlooping,
    FailureMode.PROGRESS_DEADLINE: _deadline_exceeded,
    FailureMode.REPLICA_FAILURE: _replica_failure,
}


@pytest.mark.parametrize("mode", list(FAILURES), ids=lambda mode: mode.value)
def test_a_failing_rollout_shows_the_real_failure_shapes_and_never_completes(
    web: KubeCluster, api, mode: FailureMode
) -> None:
    web.set_mode(mode)
    generation = new_cpu(api, "250m")
    wait_until(lambda: FAILURES[mode](web), WAIT, what=f"{mode.value} visible")
    assert not rolled_out(web, generation)
    deployment = web.get("deployment", "web")
    assert deployment["status"]["observedGeneration"] == generation
    assert deployment["status"]["availableReplicas"] >= 1  # the old ReplicaSet keeps serving
    assert_valid_shapes(web)


def test_an_image_that_cannot_be_pulled_alternates_err_image_pull_and_back_off(web: KubeCluster, api) -> None:
    web.set_mode(FailureMode.IMAGE_PULL)
    generation = new_cpu(api, "250m")
    seen: set[str] = set()
    wait_until(lambda: _image_pull_failing(web, seen), WAIT, what="both image pull reasons")
    assert not rolled_out(web, generation)
    assert_valid_shapes(web)


def test_an_unstable_rollout_completes_then_loses_readiness_with_a_restart(web: KubeCluster, api) -> None:
    api.patch(WEB, {"spec": {"replicas": 4}})  # pods of several surge steps: all ready together first
    wait_until(lambda: rolled_out(web, 2), WAIT, what="four replicas")
    web.set_mode(FailureMode.UNSTABLE)
    generation = new_cpu(api, "250m")
    wait_until(lambda: rolled_out(web, generation), WAIT, what="rollout complete")

    def restarted_unready() -> bool:
        for pod in new_pods(web):
            status = pod["status"]["containerStatuses"][0]
            if status["restartCount"] >= 1 and not status["ready"] and "terminated" in status["lastState"]:
                return conditions(pod)["Ready"]["reason"] == "ContainersNotReady"
        return False

    wait_until(restarted_unready, WAIT, what="a restarted, unready pod")
    wait_until(lambda: bool(events(web, "Unhealthy")), WAIT, what="a readiness probe failure event")
    # As the real controller does, a completed rollout stays "successfully progressed" meanwhile.
    progressing = conditions(web.get("deployment", "web"))["Progressing"]
    assert (progressing["status"], progressing["reason"]) == ("True", "NewReplicaSetAvailable")


def test_a_stuck_controller_never_observes_the_new_generation(web: KubeCluster, api) -> None:
    web.add_deployment("other", containers=[MAIN])
    web.set_mode(FailureMode.STUCK)
    generation = new_cpu(api, "250m")
    assert generation == 2
    wait_until(lambda: web.controller_stuck_on("web", generation), WAIT, what="generation 2 left alone")
    web.set_mode(FailureMode.HEALTHY)  # later generations of other deployments proceed again
    other = api.patch("/apis/apps/v1/namespaces/default/deployments/other", {"spec": {"replicas": 3}}).json()
    wait_until(
        lambda: (
            web.get("deployment", "other")["status"]["observedGeneration"] == other["metadata"]["generation"]
        ),
        WAIT,
        what="the other deployment observed",
    )
    assert web.get("deployment", "web")["status"]["observedGeneration"] == 1
    assert [
        rs["metadata"]["name"] for rs in web.list("replicaset") if rs["metadata"]["name"].startswith("web-")
    ] == [f"web-{web.pods('web')[0]['metadata']['labels']['pod-template-hash']}"]


def test_the_mode_applies_to_the_next_rollout_and_a_rollback_reuses_the_healthy_replicaset(
    web: KubeCluster, api
) -> None:
    first_hash = web.pods("web")[0]["metadata"]["labels"]["pod-template-hash"]
    web.set_mode(FailureMode.CRASHLOOP)
    new_cpu(api, "250m")
    wait_until(lambda: _crashlooping(web), WAIT, what="crash loop")
    generation = new_cpu(api, "500m")  # back to the first template, while the mode still says CRASHLOOP
    wait_until(lambda: rolled_out(web, generation), WAIT, what="rollback complete")
    deployment = web.get("deployment", "web")
    assert deployment["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    assert (
        web.get("replicaset", f"web-{first_hash}")["metadata"]["annotations"][
            "deployment.kubernetes.io/revision"
        ]
        == "3"
    )
    wait_until(
        lambda: all(pod["metadata"]["labels"]["pod-template-hash"] == first_hash for pod in web.pods("web")),
        WAIT,
        what="crashlooping pods removed",
    )
    web.set_mode(FailureMode.HEALTHY)
    generation = new_cpu(api, "300m")
    wait_until(lambda: rolled_out(web, generation), WAIT, what="healthy rollout")


def test_the_controller_leaves_deployments_outside_on_alone(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web", containers=[MAIN])
    cluster.add_deployment("other", containers=[MAIN])
    cluster.controller(FailureMode.HEALTHY, rollout_seconds=ROLLOUT, on=("other",))
    other = "/apis/apps/v1/namespaces/default/deployments/other"
    patched = api.patch(other, {"spec": {"replicas": 3}}).json()["metadata"]["generation"]
    new_cpu(api, "250m")
    wait_until(
        lambda: cluster.get("deployment", "other")["status"]["observedGeneration"] == patched,
        WAIT,
        what="other observed",
    )
    assert cluster.get("deployment", "web")["status"]["observedGeneration"] == 1


def test_the_hpa_owns_the_replicas_of_its_target(web: KubeCluster, api) -> None:
    hpa = web.add_hpa("web", "web", min_replicas=3, max_replicas=5, target_cpu_utilization=70)
    assert hpa["spec"]["metrics"][0]["resource"]["target"] == {
        "type": "Utilization",
        "averageUtilization": 70,
    }
    wait_until(lambda: web.get("deployment", "web")["spec"]["replicas"] == 3, WAIT, what="scaled to min")
    wait_until(
        lambda: any(
            event["message"] == "New size: 3; reason: Current number of replicas below Spec.MinReplicas"
            for event in events(web, "SuccessfulRescale")
        ),
        WAIT,
        what="event",
    )
    wait_until(lambda: rolled_out(web, 1), WAIT, what="three ready replicas")
    assert api.patch(WEB, {"spec": {"replicas": 1}}).status_code == 200
    wait_until(
        lambda: web.get("deployment", "web")["spec"]["replicas"] == 3, WAIT, what="replicas taken back"
    )
    status = web.get("hpa", "web")["status"]
    assert status["desiredReplicas"] == 3
    assert conditions(web.get("hpa", "web"))["ScalingActive"]["reason"] == "FailedGetResourceMetric"
    web.set_metrics("web", cpu="1000m", memory="300Mi")  # 200% of the 500m request against a 70% target
    wait_until(lambda: web.get("deployment", "web")["spec"]["replicas"] == 5, WAIT, what="scaled to max")
    hpa = web.get("hpa", "web")
    assert hpa["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"] >= 70
    assert conditions(hpa)["ScalingActive"]["reason"] == "ValidMetricFound"
    assert "lastScaleTime" in hpa["status"]
    assert_valid_shapes(web)


def test_a_paused_deployment_does_not_roll_out_until_resumed(web: KubeCluster, api) -> None:
    paused = api.patch(WEB, {"spec": {"paused": True}}).json()["metadata"]["generation"]
    generation = new_cpu(api, "250m")
    assert generation == paused + 1

    def paused_observed() -> bool:
        deployment = web.get("deployment", "web")
        progressing = conditions(deployment).get("Progressing", {})
        return deployment["status"]["observedGeneration"] == generation and (
            progressing.get("status"),
            progressing.get("reason"),
        ) == ("Unknown", "DeploymentPaused")

    wait_until(paused_observed, WAIT, what="paused condition")
    assert len(web.list("replicaset")) == 1
    resumed = api.patch(WEB, {"spec": {"paused": None}}).json()["metadata"]["generation"]
    wait_until(lambda: rolled_out(web, resumed), WAIT, what="rollout after resume")
    assert len(web.list("replicaset")) == 2


def test_any_rollout_without_progress_for_progress_deadline_seconds_times_out(web: KubeCluster, api) -> None:
    api.patch(WEB, {"spec": {"progressDeadlineSeconds": 1}})
    web.set_mode(FailureMode.UNSCHEDULABLE)
    new_cpu(api, "250m")
    wait_until(lambda: _deadline_exceeded(web), WAIT, what="deadline exceeded")
    assert _unschedulable(web)


def test_repeated_events_are_counted_not_duplicated(web: KubeCluster, api) -> None:
    web.set_mode(FailureMode.IMAGE_PULL)
    new_cpu(api, "250m")

    def counted() -> bool:
        back_offs = [event for event in events(web, "BackOff") if "pulling image" in event["message"]]
        return any(event["count"] >= 2 for event in back_offs)

    wait_until(counted, WAIT, what="a BackOff event counted twice")
    keys = [
        (event["involvedObject"]["uid"], event["reason"], event["message"]) for event in web.list("event")
    ]
    assert len(keys) == len(set(keys))


def test_replaced_running_pods_are_terminating_before_they_go(web: KubeCluster, api) -> None:
    since = web.get("deployment", "web")["metadata"]["resourceVersion"]
    old_pods = {pod["metadata"]["name"] for pod in web.pods("web")}
    generation = new_cpu(api, "250m")
    wait_until(lambda: rolled_out(web, generation), WAIT, what="rollout complete")
    wait_until(
        lambda: not old_pods & {pod["metadata"]["name"] for pod in web.pods("web")},
        WAIT,
        what="old pods gone",
    )
    params = {"watch": "true", "resourceVersion": since, "timeoutSeconds": "1"}
    stream = api.get("/api/v1/namespaces/default/pods", params=params, stream=True)
    seen: dict[str, list[str]] = {}
    for line in stream.iter_lines():
        if line:
            event = json.loads(line)
            meta = event["object"]["metadata"]
            if meta["name"] in old_pods:
                seen.setdefault(meta["name"], []).append(
                    "terminating"
                    if event["type"] == "MODIFIED" and meta.get("deletionTimestamp")
                    else event["type"]
                )
    assert {name: steps[-2:] for name, steps in seen.items()} == {
        name: ["terminating", "DELETED"] for name in old_pods
    }


def test_controllers_do_nothing_while_the_api_server_is_down(web: KubeCluster) -> None:
    web.down()
    web.add_hpa("web", "web", min_replicas=3, max_replicas=5)
    time.sleep(1.0)  # several controller ticks: a controller cut off from its API server acts on nothing
    assert web.get("deployment", "web")["spec"]["replicas"] == 2
    web.up()
    wait_until(
        lambda: web.get("deployment", "web")["spec"]["replicas"] == 3, WAIT, what="the HPA acts after up"
    )


def test_stop_leaves_no_thread_behind(tmp_path) -> None:
    cluster = KubeCluster.start(tmp_path)
    cluster.add_deployment("web")
    cluster.controller(FailureMode.HEALTHY, rollout_seconds=ROLLOUT)
    cluster.stop()
    cluster.stop()  # idempotent
    assert [thread.name for thread in threading.enumerate() if thread.name.startswith("kube-")] == []


def test_a_rollback_to_a_replicasets_own_template_finds_that_replicaset(web: KubeCluster, api) -> None:
    first = web.list("replicaset")[0]
    generation = new_cpu(api, "250m")
    wait_until(lambda: rolled_out(web, generation), WAIT, what="second revision")
    template = first["spec"]["template"]  # with its pod-template-hash label, as a careless rollback copies it
    back = api.patch(WEB, {"spec": {"template": template}}, "application/merge-patch+json").json()
    wait_until(lambda: rolled_out(web, back["metadata"]["generation"]), WAIT, what="rollback complete")
    assert len(web.list("replicaset")) == 2
    assert (
        web.get("replicaset", first["metadata"]["name"])["metadata"]["annotations"][
            "deployment.kubernetes.io/revision"
        ]
        == "3"
    )


def test_pods_default_requests_to_limits_but_the_template_keeps_what_was_written(
    cluster: KubeCluster,
) -> None:
    limited = {
        "name": "main",
        "image": "registry.example/web:1",
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
    }
    cluster.add_deployment("web", containers=[limited])
    template = cluster.get("deployment", "web")["spec"]["template"]["spec"]["containers"][0]
    assert template["resources"] == {"limits": {"cpu": "1", "memory": "1Gi"}}
    pod = cluster.pods("web")[0]
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert pod["status"]["qosClass"] == "Guaranteed"
