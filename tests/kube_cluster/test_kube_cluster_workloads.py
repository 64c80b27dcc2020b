"""The local cluster runs workloads for real: rollouts by the real controllers and scheduler, kwok's
failure stages, a ServiceAccount's token under RBAC, and the audit log of Deployment writes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kube_local import LocalCluster
from kube_local_manifests import (
    SIMULATE_ANNOTATION,
    SIMULATE_ENV,
    SIMULATE_INTERVAL_ANNOTATION,
    condition,
    container,
    container_status,
    deployment,
    pods,
    waiting_reason,
)
from waiting import wait_until

pytestmark = pytest.mark.kube

ROLLOUT_TIMEOUT = 120.0
"""Seconds for a small rollout on 2 busy cores (kwok makes a pod Ready in well under a second)."""
STAGE_TIMEOUT = 60.0
"""Seconds for a failure stage to show (its interval is set to 1 s below)."""
POLL = 0.5
FAST = {SIMULATE_INTERVAL_ANNOTATION: "1s"}


def rollout(cluster: LocalCluster, namespace: str, name: str) -> None:
    cluster.kubectl(
        "rollout",
        "status",
        f"deployment/{name}",
        "-n",
        namespace,
        f"--timeout={ROLLOUT_TIMEOUT:.0f}s",
        timeout=ROLLOUT_TIMEOUT + 30,
    )


def test_a_deployment_rolls_out_through_the_real_controllers(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    kube_cluster.apply(kube_namespace, deployment("web", replicas=3))
    rollout(kube_cluster, kube_namespace, "web")
    running = pods(kube_cluster, kube_namespace, "web")
    assert len(running) == 3
    assert all(
        p["status"]["phase"] == "Running" and condition(p, "Ready")["status"] == "True" for p in running
    )
    assert {p["spec"]["nodeName"] for p in running} <= {"kwok-node-0", "kwok-node-1"}

    kube_cluster.kubectl("set", "image", "deployment/web", "main=registry.local/app:2", "-n", kube_namespace)
    rollout(kube_cluster, kube_namespace, "web")
    sets = kube_cluster.get(f"/apis/apps/v1/namespaces/{kube_namespace}/replicasets")["items"]
    by_image = {
        rs["spec"]["template"]["spec"]["containers"][0]["image"]: rs["status"].get("replicas", 0)
        for rs in sets
    }
    assert by_image == {"registry.local/app:1": 0, "registry.local/app:2": 3}


def test_a_request_larger_than_any_node_is_unschedulable(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    kube_cluster.apply(kube_namespace, deployment("huge", containers=[container(cpu="64")]))

    def refused() -> dict[str, Any] | None:
        found = pods(kube_cluster, kube_namespace, "huge")
        scheduled = condition(found[0], "PodScheduled") if found else {}
        return scheduled if scheduled.get("reason") == "Unschedulable" else None

    scheduled = wait_until(refused, STAGE_TIMEOUT, POLL, "the scheduler refusing the pod")
    assert "Insufficient cpu" in scheduled["message"]


def test_crash_loop_marked_by_env_fails_only_that_container(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    containers = [container("main", env={SIMULATE_ENV: "crash-loop"}), container("sidecar")]
    kube_cluster.apply(kube_namespace, deployment("crashy", containers=containers, annotations=FAST))

    def restarted_twice() -> dict[str, Any] | None:
        found = pods(kube_cluster, kube_namespace, "crashy")
        if found and container_status(found[0]).get("restartCount", 0) >= 2:
            return found[0]
        return None

    pod = wait_until(restarted_twice, STAGE_TIMEOUT, POLL, "restarts counting")
    assert pod["status"]["phase"] == "Running"
    assert waiting_reason(pod) == "CrashLoopBackOff"
    assert container_status(pod)["lastState"]["terminated"]["exitCode"] == 1
    assert container_status(pod, "sidecar")["ready"] is True
    assert condition(pod, "Ready")["status"] == "False"
    assert condition(pod, "Ready")["message"] == "containers with unready status: [main]"


def test_image_pull_error_marked_by_annotation_alternates_with_backoff(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    kube_cluster.apply(
        kube_namespace, deployment("unpulled", annotations={**FAST, SIMULATE_ANNOTATION: "image-pull-error"})
    )
    seen: set[str] = set()

    def both_seen() -> bool:
        for pod in pods(kube_cluster, kube_namespace, "unpulled"):
            assert pod["status"]["phase"] == "Pending"
            seen.add(waiting_reason(pod))
        return {"ErrImagePull", "ImagePullBackOff"} <= seen

    wait_until(both_seen, STAGE_TIMEOUT, 0.2, f"ErrImagePull and ImagePullBackOff (seen {seen})")
    events = kube_cluster.get(f"/api/v1/namespaces/{kube_namespace}/events")["items"]
    assert any(e["reason"] == "Failed" and "image-pull-error" in e["message"] for e in events)


def test_unstable_pods_become_ready_then_lose_readiness(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    kube_cluster.apply(
        kube_namespace,
        deployment(
            "flaky",
            containers=[container(env={SIMULATE_ENV: "unstable"})],
            annotations={SIMULATE_INTERVAL_ANNOTATION: "3s"},
        ),
    )
    ready_seen: list[str] = []

    def lost_readiness() -> dict[str, Any] | None:
        for pod in pods(kube_cluster, kube_namespace, "flaky"):
            ready = condition(pod, "Ready").get("status")
            if ready == "True":
                ready_seen.append(pod["metadata"]["name"])
            elif ready == "False" and pod["metadata"]["name"] in ready_seen:
                return pod
        return None

    pod = wait_until(lost_readiness, STAGE_TIMEOUT, 0.2, "a pod Ready, then not")
    assert "running" in container_status(pod)["state"]
    assert container_status(pod)["ready"] is False


def test_a_service_account_token_is_authorized_by_rbac(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    kube_cluster.kubectl("create", "serviceaccount", "reader", "-n", kube_namespace)
    token = kube_cluster.kubectl("create", "token", "reader", "-n", kube_namespace).stdout.strip()
    path = f"/api/v1/namespaces/{kube_namespace}/pods"
    assert kube_cluster.request("GET", path, token=token).status_code == 403
    kube_cluster.kubectl(
        "create", "role", "pod-reader", "--verb=list", "--resource=pods", "-n", kube_namespace
    )
    kube_cluster.kubectl(
        "create",
        "rolebinding",
        "reader",
        "--role=pod-reader",
        f"--serviceaccount={kube_namespace}:reader",
        "-n",
        kube_namespace,
    )
    wait_until(
        lambda: kube_cluster.request("GET", path, token=token).status_code == 200,
        STAGE_TIMEOUT,
        POLL,
        "the RoleBinding taking effect",
    )


def test_the_audit_log_has_whole_bodies_of_deployment_writes(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    kube_cluster.apply(kube_namespace, deployment("audited"))
    kube_cluster.kubectl("scale", "deployment/audited", "--replicas=2", "-n", kube_namespace)

    def entries() -> list[dict[str, Any]]:
        found = []
        for line in kube_cluster.audit_log.read_text().splitlines():
            event = json.loads(line)
            ref = event.get("objectRef", {})
            if ref.get("resource") == "deployments" and ref.get("namespace") == kube_namespace:
                found.append(event)
        return found

    writes = wait_until(
        lambda: [e for e in entries() if e["verb"] in ("create", "patch", "update") and "subresource" not in e["objectRef"]],
        STAGE_TIMEOUT, POLL, "the create's audit entry",
    )  # fmt: skip
    scale = wait_until(
        lambda: [e for e in entries() if e["objectRef"].get("subresource") == "scale" and e["verb"] != "get"],
        STAGE_TIMEOUT, POLL, "the scale write's audit entry",
    )  # fmt: skip
    assert all(e["level"] == "RequestResponse" for e in writes + scale)
    assert writes[0]["verb"] == "create" and writes[0]["requestObject"]["spec"]["replicas"] == 1
    # The deployment controller's status writes are there too, at Metadata (no bodies).
    status = [e for e in entries() if e["objectRef"].get("subresource") == "status"]
    assert all(e["level"] == "Metadata" for e in status)
    assert scale[0]["requestObject"]["spec"]["replicas"] == 2
    assert scale[0]["user"]["username"] == "kube-cluster-admin"
