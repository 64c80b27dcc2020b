"""A replace cancelled at each of its points, then a fresh connector: exactly one tuning pod with the
requested values, on the real local cluster. The point is reached through the tuning code's hook
(it stops the work there, as a cancel kills the connector's process); a finalizer the test puts on
the old pod makes "deleted, not yet gone" last until the test lifts it. Also: the servo's own
Deployment owns the tuning pod (POD_NAME/POD_NAMESPACE) and the garbage collector deletes it with
the servo; `servo-actors kube cleanup` and `check` for a pod nobody owns."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kube_local import LocalCluster
from kube_local_manifests import deployment
from kube_tuning_support import (
    adjust,
    connector,
    env_of,
    main_container,
    ready,
    remove_tuning_pod,
    rolled_out,
    trial,
    tuning_config,
    tuning_pod,
    tuning_pods,
    web_deployment,
)
from waiting import wait_until

from servo_actors.connectors.base import Control
from servo_actors.connectors.kubernetes.client import KubeClient
from servo_actors.connectors.kubernetes.config import KubernetesConfig
from servo_actors.connectors.kubernetes.kubeconfig import resolve_access
from servo_actors.connectors.kubernetes.tuning import adjust_tuning, split_components

pytestmark = [pytest.mark.kube, pytest.mark.timeout(300)]

HOLD = "servo-actors.io/test-hold"


class Cancelled(Exception):
    """Stands for the kill of a cancelled connector at a hook point."""


@pytest.fixture(scope="module")
def ns(kube_cluster: LocalCluster) -> Iterator[str]:
    name = kube_cluster.new_namespace("tuning-cancel")
    kube_cluster.apply(name, web_deployment())
    rolled_out(kube_cluster, name)
    yield name
    kube_cluster.delete_namespace(name)


@pytest.fixture(autouse=True)
def no_tuning_pod(kube_cluster: LocalCluster, ns: str) -> Iterator[None]:
    remove_tuning_pod(kube_cluster, ns)
    yield
    kube_cluster.kubectl("patch", "pod", "web-tuning", "-n", ns, "--type=merge", "-p",
                         json.dumps({"metadata": {"finalizers": None}}), check=False)  # fmt: skip


def _cancelled_adjust(cluster: LocalCluster, ns: str, at: str, settings: dict[str, Any]) -> None:
    config = KubernetesConfig.model_validate(tuning_config(cluster, ns))
    _, request = split_components(config, trial(**settings))
    client = KubeClient(resolve_access(str(cluster.kubeconfig), None), 5.0)

    def hook(point: str) -> None:
        if point == at:
            raise Cancelled(point)

    try:
        with pytest.raises(Cancelled):
            adjust_tuning(client, config, request, 0.0, lambda fraction, message: None, hook=hook)
    finally:
        client.close()


def _one_with(cluster: LocalCluster, ns: str, cpu: str, gogc: str) -> dict[str, Any]:
    found = tuning_pods(cluster, ns)
    assert len(found) == 1, [p["metadata"]["name"] for p in found]
    pod = found[0]
    assert ready(pod) and not pod["metadata"].get("deletionTimestamp")
    assert main_container(pod)["resources"]["requests"]["cpu"] == cpu and env_of(pod)["GOGC"] == gogc
    return pod


@pytest.mark.parametrize("at", ["deleted", "gone", "created"])
def test_a_replace_cancelled_at_each_point_is_finished_by_a_fresh_connector(
    kube_cluster: LocalCluster, ns: str, at: str
) -> None:
    adjust(connector(kube_cluster, ns), trial(cpu=0.5, GOGC=150))
    old = _one_with(kube_cluster, ns, "500m", "150")
    _cancelled_adjust(kube_cluster, ns, at, {"cpu": 1.0, "GOGC": 300})
    left = tuning_pod(kube_cluster, ns)
    if at == "created":  # the new pod exists (perhaps not Ready yet): the fresh connector keeps it
        assert left is not None and left["metadata"]["uid"] != old["metadata"]["uid"]
    adjust(connector(kube_cluster, ns), trial(cpu=1.0, GOGC=300))
    pod = _one_with(kube_cluster, ns, "1", "300")
    if at == "created":
        assert pod["metadata"]["uid"] == left["metadata"]["uid"]  # type: ignore[index]
    # ... and a fresh connector asking for the old values again replaces it once more.
    adjust(connector(kube_cluster, ns), trial(cpu=0.5, GOGC=150))
    _one_with(kube_cluster, ns, "500m", "150")


def test_a_half_deleted_tuning_pod_is_waited_out(kube_cluster: LocalCluster, ns: str) -> None:
    adjust(connector(kube_cluster, ns), trial(cpu=0.5))
    kube_cluster.kubectl("patch", "pod", "web-tuning", "-n", ns, "--type=merge", "-p",
                         json.dumps({"metadata": {"finalizers": [HOLD]}}))  # fmt: skip
    _cancelled_adjust(kube_cluster, ns, "deleted", {"cpu": 0.75})
    held = tuning_pod(kube_cluster, ns)
    assert held is not None and held["metadata"].get("deletionTimestamp")  # deleted, not yet gone

    messages: list[str] = []
    outcome: dict[str, Any] = {}

    def fresh() -> None:
        try:
            outcome["done"] = connector(kube_cluster, ns).adjust(
                trial(cpu=0.75), Control(),
                lambda percent, message="": messages.append(message),
            )  # fmt: skip
        except Exception as exc:  # reported by the assertion below
            outcome["error"] = exc

    worker = threading.Thread(target=fresh)
    worker.start()
    try:
        wait_until(lambda: any("to be deleted" in m for m in messages), 60, interval=0.1, what="waits for it")
        assert tuning_pod(kube_cluster, ns)["metadata"]["uid"] == held["metadata"]["uid"]  # type: ignore[index]
    finally:
        kube_cluster.kubectl("patch", "pod", "web-tuning", "-n", ns, "--type=merge", "-p",
                             json.dumps({"metadata": {"finalizers": None}}), check=False)  # fmt: skip
        worker.join(120)
    assert not worker.is_alive() and "error" not in outcome, outcome
    pod = _one_with(kube_cluster, ns, "750m", "100")
    assert pod["metadata"]["uid"] != held["metadata"]["uid"]


def test_the_servo_deployment_owns_the_tuning_pod(
    kube_cluster: LocalCluster, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube_cluster.apply(ns, deployment("servo"))
    rolled_out(kube_cluster, ns, "servo")
    servo_pod = kube_cluster.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=app=servo")["items"][0]
    servo = kube_cluster.get(f"/apis/apps/v1/namespaces/{ns}/deployments/servo")
    monkeypatch.setenv("POD_NAME", servo_pod["metadata"]["name"])
    monkeypatch.setenv("POD_NAMESPACE", ns)
    adjust(connector(kube_cluster, ns), trial(cpu=0.5))
    pod = tuning_pod(kube_cluster, ns)
    assert pod is not None
    [owner] = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Deployment", "servo", servo["metadata"]["uid"])
    assert not owner["controller"]
    checks = {c["name"]: c for c in connector(kube_cluster, ns).check()}
    assert "owned by the servo's Deployment" in checks["tuning pods"]["message"]
    # Deleting the servo deletes its tuning pod (the real garbage collector follows the reference).
    kube_cluster.kubectl("delete", "deployment", "servo", "-n", ns, "--wait=false")
    wait_until(lambda: tuning_pod(kube_cluster, ns) is None, 90, interval=0.3, what="tuning pod collected")


def test_check_and_kube_cleanup_for_a_pod_no_servo_owns(
    kube_cluster: LocalCluster, ns: str, run_cli: Any, tmp_path: Any
) -> None:
    adjust(connector(kube_cluster, ns), trial(cpu=0.5))
    checks = {c["name"]: c for c in connector(kube_cluster, ns).check()}
    assert checks["permissions (tuning pods)"]["success"], checks
    assert "servo-actors kube cleanup" in checks["tuning pods"]["message"]
    config = tmp_path / "servo.yaml"
    servo = {"connectors": [{"name": "k8s", "type": "kubernetes", "config": tuning_config(kube_cluster, ns)}]}
    config.write_text(json.dumps(servo))
    listed = run_cli(["-c", str(config), "kube", "cleanup", "--dry-run"])
    assert listed.exit_code == 0, listed.output
    assert "k8s: would delete pod web-tuning" in listed.output
    assert tuning_pod(kube_cluster, ns) is not None
    done = run_cli(["-c", str(config), "kube", "cleanup", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output) == {"dry_run": False, "pods": {"k8s": ["web-tuning"]}}
    assert tuning_pod(kube_cluster, ns) is None
    assert run_cli(["-c", str(config), "kube", "cleanup"]).output.strip() == "k8s: no tuning pods"
