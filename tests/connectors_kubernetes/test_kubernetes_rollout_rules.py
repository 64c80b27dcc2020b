"""kubectl's rollout rule and the diagnosis of failed rollouts (rollout.py, diagnosis.py): pure."""

from __future__ import annotations

import pytest
from k8s_objects import deployment

from servo_actors.connectors.kubernetes.diagnosis import (
    diagnose_pods,
    has_replica_failure,
    instability,
    newest_replicaset,
    pods_of,
    probe_failure,
    progress_deadline_of_another,
    restart_counts,
    unready_detail,
    without_condition,
)
from servo_actors.connectors.kubernetes.rollout_rules import rollout_status, statefulset_status


def _status(generation: int = 3, observed: int = 3, replicas: int = 2, **status) -> dict:
    obj = deployment(replicas=replicas)
    obj["metadata"]["generation"] = generation
    obj["status"] = {"observedGeneration": observed, **status}
    return obj


def test_done_when_every_count_matches() -> None:
    done = rollout_status(_status(replicas=2, updatedReplicas=2, readyReplicas=2, availableReplicas=2))
    assert done.done and done.fraction == 1.0 and done.failure is None


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            _status(
                generation=4, observed=3, updatedReplicas=2, readyReplicas=2, availableReplicas=2, replicas=2
            ),
            "generation 4",
        ),
        (
            _status(updatedReplicas=1, readyReplicas=2, availableReplicas=2, replicas=2),
            "1 of 2 new replicas updated",
        ),
        (
            _status(**{"replicas": 2}, updatedReplicas=2, readyReplicas=2, availableReplicas=2)
            | {
                "status": {
                    "observedGeneration": 3,
                    "replicas": 3,
                    "updatedReplicas": 2,
                    "readyReplicas": 2,
                    "availableReplicas": 2,
                }
            },
            "1 old replica(s) pending",
        ),
        (_status(updatedReplicas=2, readyReplicas=1, availableReplicas=1), "1 of 2 updated replicas ready"),
        (
            _status(updatedReplicas=2, readyReplicas=2, availableReplicas=1),
            "1 of 2 updated replicas ready and available",
        ),
    ],
)
def test_not_done_yet(obj, message) -> None:
    status = rollout_status(obj)
    assert not status.done and status.failure is None
    assert message in status.message


def test_progress_deadline_and_replica_failure_fail_at_once() -> None:
    stalled = _status(
        conditions=[
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": "ReplicaSet web-1 has timed out progressing.",
            }
        ]
    )
    assert rollout_status(stalled).failure.reason == "start-failed"
    assert "timed out progressing" in rollout_status(stalled).failure.message
    quota = _status(
        conditions=[
            {
                "type": "ReplicaFailure",
                "status": "True",
                "reason": "FailedCreate",
                "message": "exceeded quota: compute",
            }
        ]
    )
    failure = rollout_status(quota).failure
    assert (failure.status, failure.reason) == (
        "rejected",
        "start-failed",
    ) and "exceeded quota" in failure.message


def test_zero_replicas_is_done_at_once() -> None:
    assert rollout_status(_status(replicas=0)).done


def _rs(name: str, revision: str, uid: str, owner: str = "uid-web") -> dict:
    return {"metadata": {"name": name, "uid": uid, "annotations": {"deployment.kubernetes.io/revision": revision},
                         "labels": {"pod-template-hash": name[-1]}, "ownerReferences": [{"uid": owner}]}}  # fmt: skip


def _pod(
    name: str, owner: str = "rs-2", conditions: list | None = None, statuses: list | None = None
) -> dict:
    return {"metadata": {"name": name, "ownerReferences": [{"uid": owner}]},
            "status": {"conditions": conditions or [], "containerStatuses": statuses or []}}  # fmt: skip


def test_newest_replicaset_and_its_pods() -> None:
    sets = [
        _rs("web-1", "1", "rs-1"),
        _rs("web-2", "10", "rs-2"),
        _rs("other-9", "99", "rs-9", owner="uid-other"),
    ]
    newest = newest_replicaset(deployment(), sets)
    assert newest["metadata"]["name"] == "web-2"
    pods = [_pod("a", "rs-1"), _pod("b", "rs-2")]
    assert [p["metadata"]["name"] for p in pods_of(newest, pods)] == ["b"]


def test_unschedulable_is_rejected_but_not_definite() -> None:
    pod = _pod(
        "web-2-x",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient cpu.",
            }
        ],
    )
    found = diagnose_pods([pod])
    assert (found.status, found.reason, found.definite) == ("rejected", "unschedulable", False)
    assert "Insufficient cpu" in found.message and "web-2-x" in found.message


def test_image_pull_failure_is_failed_and_names_the_image() -> None:
    waiting = {
        "name": "main",
        "image": "app:nope",
        "restartCount": 0,
        "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}},
    }
    found = diagnose_pods([_pod("p", statuses=[waiting])])
    assert (found.status, found.reason, found.definite) == ("failed", "image-pull-failed", True)
    assert "app:nope" in found.message


def test_crash_loop_is_a_start_failure_with_the_last_exit() -> None:
    crashing = {"name": "main", "restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}  # fmt: skip
    found = diagnose_pods([_pod("p", statuses=[crashing])])
    assert (found.status, found.reason) == ("rejected", "start-failed")
    assert (
        "restarted 4 time(s)" in found.message
        and "OOMKilled" in found.message
        and "more memory" in found.message
    )


def test_a_crash_names_the_last_line_of_the_containers_termination_message() -> None:
    # As the real kubelet reports it with terminationMessagePolicy: FallbackToLogsOnError.
    log = 'level=INFO msg=started\nlevel=ERROR msg=stopped error="exiting with status 1"\n'
    crashing = {"name": "main", "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"reason": "Error", "exitCode": 1, "message": log}}}  # fmt: skip
    found = diagnose_pods([_pod("p", statuses=[crashing])])
    assert "last exit: Error (code 1), saying 'level=ERROR msg=stopped error=" in found.message
    assert "msg=started" not in found.message


def _unhealthy(pod: str, message: str, count: int, at: str, uid: str | None = None) -> dict:
    """A kubelet's failed-probe event, as the real one records it."""
    involved = {"kind": "Pod", "name": pod, "fieldPath": "spec.containers{main}"}
    if uid is not None:
        involved["uid"] = uid
    return {"type": "Warning", "reason": "Unhealthy", "message": message, "count": count,
            "lastTimestamp": at, "involvedObject": involved}  # fmt: skip


def test_a_failing_probe_names_the_pod_the_probe_and_how_often() -> None:
    running = [{"name": "main", "ready": False, "restartCount": 0, "state": {"running": {}}}]
    unready = _pod("web-1", conditions=[{"type": "Ready", "status": "False"}], statuses=running)
    assert diagnose_pods([unready]) is None  # running, no restart: nothing definite to see
    events = [
        _unhealthy("web-1", "Readiness probe failed: Get ...: connection refused", 2, "2026-12-06T05:10:28Z"),
        _unhealthy("web-1", "Readiness probe failed: HTTP probe failed with statuscode: 503", 9,
                   "2026-12-06T05:10:37Z"),
        _unhealthy("web-2", "Readiness probe failed: other pod", 5, "2026-12-06T05:10:39Z"),
        {"type": "Warning", "reason": "MissingClusterDNS", "message": "dns", "involvedObject": {"name": "web-1"}},
    ]  # fmt: skip
    found = probe_failure([unready], events)
    assert (found.status, found.reason, found.definite) == ("rejected", "start-failed", False)
    assert found.message == (
        "pod web-1 is not ready: container main: Readiness probe failed: HTTP probe failed with "
        "statuscode: 503 (11 time(s); the container restarted 0 time(s))"
    )
    ready = _pod("web-1", conditions=[{"type": "Ready", "status": "True"}], statuses=running)
    assert probe_failure([ready], events) is None
    assert probe_failure([unready], events[3:]) is None
    # Readiness lost during settlement names the probe too, given the events.
    baseline = {("web-1", "main"): 0}
    assert instability(baseline, [unready]).message == "pod web-1 lost readiness during settlement"
    assert instability(baseline, [unready], events).message == (
        "pod web-1 lost readiness during settlement: container main: Readiness probe failed: HTTP probe "
        "failed with statuscode: 503 (11 time(s); the container restarted 0 time(s))"
    )
    # An event that names no container (as kwok's simulated one): the pod and the probe's words.
    anonymous = {**events[1], "involvedObject": {"name": "web-1"}}
    assert probe_failure([unready], [anonymous]).message == (
        "pod web-1 is not ready: Readiness probe failed: HTTP probe failed with statuscode: 503 (9 time(s))"
    )
    # An event about an earlier pod of the same name (another uid) is not this pod's.
    unready["metadata"]["uid"] = "u-2"
    assert (
        probe_failure([unready], [_unhealthy("web-1", "Readiness probe failed", 3, "t", uid="u-1")]) is None
    )


def test_image_pull_wins_over_unschedulable_and_warning_events_add_detail() -> None:
    pending = _pod("a", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}])
    events = [
        {"type": "Warning", "involvedObject": {"name": "a"}, "message": "0/1 nodes: Insufficient memory"}
    ]
    assert "Insufficient memory" in diagnose_pods([pending], events).message
    pulling = _pod("b", statuses=[{"name": "main", "state": {"waiting": {"reason": "ErrImagePull"}}}])
    assert diagnose_pods([pending, pulling]).reason == "image-pull-failed"


def test_healthy_pods_have_no_diagnosis() -> None:
    ok = _pod(
        "p",
        conditions=[{"type": "Ready", "status": "True"}],
        statuses=[{"name": "main", "ready": True, "restartCount": 0, "state": {"running": {}}}],
    )
    assert diagnose_pods([ok]) is None


def test_instability_is_a_new_restart_or_lost_readiness_of_a_known_pod() -> None:
    ready = [{"type": "Ready", "status": "True"}]
    steady = _pod("p", conditions=ready, statuses=[{"name": "main", "restartCount": 1}])
    baseline = restart_counts([steady])
    assert instability(baseline, [steady]) is None
    restarted = _pod("p", conditions=ready, statuses=[{"name": "main", "restartCount": 2}])
    assert instability(baseline, [restarted]).reason == "unstable"
    unready = _pod(
        "p",
        conditions=[{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
        statuses=[{"name": "main", "restartCount": 1}],
    )
    assert "lost readiness" in instability(baseline, [unready]).message
    newcomer = _pod("q", conditions=[{"type": "Ready", "status": "False"}])
    assert instability(baseline, [newcomer]) is None


def test_a_replica_failure_counts_only_when_the_newest_replicaset_has_it() -> None:
    failing = _status(
        updatedReplicas=2, readyReplicas=2, availableReplicas=2, replicas=2,
        conditions=[{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": "quota"}],
    )  # fmt: skip
    assert rollout_status(failing).failure.condition == "ReplicaFailure"
    newest = {"status": {"conditions": [{"type": "ReplicaFailure", "status": "True"}]}}
    assert has_replica_failure(newest) and not has_replica_failure({"status": {}})
    assert rollout_status(without_condition(failing, "ReplicaFailure")).done
    assert failing["status"]["conditions"], "the object itself is left alone"


def test_a_deployment_paused_mid_rollout_fails_it_at_once() -> None:
    paused = _status(updatedReplicas=1, readyReplicas=2, availableReplicas=2, replicas=2)
    paused["spec"]["paused"] = True
    failure = rollout_status(paused).failure
    assert (failure.status, failure.reason) == ("failed", "deployment-paused")
    assert "kubectl rollout resume deployment/web" in failure.message


def test_a_container_running_again_after_a_crash_is_not_definite_yet() -> None:
    running = {"name": "main", "ready": False, "restartCount": 1, "state": {"running": {}},
               "lastState": {"terminated": {"reason": "Error", "exitCode": 1}}}  # fmt: skip
    found = diagnose_pods([_pod("p", statuses=[running])])
    assert (found.reason, found.definite) == ("start-failed", False)


def test_a_progress_deadline_naming_another_replicaset_is_the_old_rollouts() -> None:
    """The real controller keeps ProgressDeadlineExceeded (naming the failed set) when the template
    goes back to an existing ReplicaSet, until that set progresses (seen on the local cluster)."""
    timed_out = _status(
        updatedReplicas=0, replicas=1,
        conditions=[{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                     "message": 'ReplicaSet "web-bad" has timed out progressing.'}],
    )  # fmt: skip
    assert progress_deadline_of_another(timed_out, {"metadata": {"name": "web-good"}})
    assert not progress_deadline_of_another(timed_out, {"metadata": {"name": "web-bad"}})
    assert not progress_deadline_of_another(timed_out, None)
    unready = _pod(
        "p",
        conditions=[
            {"type": "Ready", "status": "False", "message": "containers with unready status: [main]"}
        ],
    )
    assert unready_detail([unready]) == "pod p is not ready: containers with unready status: [main]"
    assert unready_detail([_pod("q", conditions=[{"type": "Ready", "status": "True"}])]) == ""


def _statefulset(
    replicas: int = 3, partition: int | None = None, strategy: str = "RollingUpdate", **status
) -> dict:
    update: dict = {"type": strategy}
    if partition is not None:
        update["rollingUpdate"] = {"partition": partition}
    return {
        "kind": "StatefulSet",
        "metadata": {"name": "cache", "generation": 2},
        "spec": {"replicas": replicas, "updateStrategy": update},
        "status": {"observedGeneration": 2, "replicas": replicas, **status},
    }


@pytest.mark.parametrize(
    ("obj", "done", "message"),
    [
        (_statefulset(observedGeneration=1), False, "waiting for the controller to see generation 2"),
        (
            _statefulset(updatedReplicas=2, readyReplicas=3, updateRevision="b", currentRevision="a"),
            False,
            "2 of 3 pods updated",
        ),
        (
            _statefulset(updatedReplicas=3, readyReplicas=2, updateRevision="b", currentRevision="a"),
            False,
            "2 of 3 pods ready",
        ),
        # A scale-down: the pod above the desired count is still there.
        (
            _statefulset(
                replicas=2, updatedReplicas=2, readyReplicas=2, updateRevision="b", currentRevision="b"
            )
            | {"status": {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 2, "readyReplicas": 2}},
            False,
            "1 pod(s) above the desired count",
        ),
        # Every pod updated and ready, but the controller has not yet made the revision current.
        (
            _statefulset(updatedReplicas=3, readyReplicas=3, updateRevision="b", currentRevision="a"),
            False,
            "waiting for every pod to be at revision b",
        ),
        (
            _statefulset(updatedReplicas=3, readyReplicas=3, updateRevision="b", currentRevision="b"),
            True,
            "3 of 3 pods ready at revision b",
        ),
        # A partition: only ordinals >= 2 are waited for; the revisions stay apart.
        (
            _statefulset(
                partition=2, updatedReplicas=0, readyReplicas=3, updateRevision="b", currentRevision="a"
            ),
            False,
            "0 of 1 pods updated (ordinals >= partition 2)",
        ),
        (
            _statefulset(
                partition=2, updatedReplicas=1, readyReplicas=3, updateRevision="b", currentRevision="a"
            ),
            True,
            "partitioned rollout done",
        ),
        (
            _statefulset(
                partition=5, updatedReplicas=0, readyReplicas=3, updateRevision="b", currentRevision="a"
            ),
            True,
            "partitioned rollout done",
        ),
    ],
)
def test_statefulset_rule(obj, done, message) -> None:
    status = statefulset_status(obj)
    assert (status.done, status.failure) == (done, None)
    assert message in status.message
    assert 0.0 <= status.fraction <= 1.0 and (status.fraction == 1.0) >= done


def test_an_on_delete_statefulset_never_rolls_out() -> None:
    status = statefulset_status(_statefulset(strategy="OnDelete", updatedReplicas=0, readyReplicas=3))
    assert not status.done and status.failure is not None
    assert (status.failure.status, status.failure.reason) == ("failed", "statefulset-on-delete")
