"""StatefulSets (``statefulsets:``) against the real local control plane: the real StatefulSet
controller (OrderedReady: one pod at a time, from the highest ordinal) rolls the connector's patches
out, the connector waits by kubectl's StatefulSet rule (``kubectl rollout status`` agrees), a
partition is respected, OnDelete is refused at ADJUST, a crash loop and an unschedulable request are
diagnosed and rolled back (the rollback deletes the failed revision's not-ready pod, without which
the real controller waits on it forever: the Kubernetes docs' "Forced rollback"), and a short
optimization runs through ``servo-actors run`` with the embedded optimizer.

One StatefulSet ``cache`` in one namespace serves the module (each test leaves it rolled out and
healthy); kwok simulates the pods (kube/stages/simulate-failures.yaml for the failures).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_local import LocalCluster
from kube_real import ServoRun, servo_config
from real_app import SIMULATE_ENV, ProgressLog, env_of, settings
from test_real_deploy import can_i, documents, token_kubeconfig
from waiting import wait_until

from servo_actors.connectors.base import ConnectorFailure, Control
from servo_actors.connectors.kubernetes import KubernetesConnector
from servo_actors.optimizer.search import SearchDriver
from servo_actors.optimizer.server import OptimizerServer

pytestmark = pytest.mark.kube

NAME = "cache"
IMAGE = "registry.local/cache:1"
"""Any name: kwok pulls nothing."""
ROLLOUT_TIMEOUT = 120.0
"""Bound on a small rollout by the real controllers on 2 busy cores (it takes a few seconds)."""
PLAN_TIMEOUT = 180.0
"""Bound on the short optimization (describe, baseline and three trials: about 20-30 s here)."""
REVISION_LABEL = "controller-revision-hash"
RBAC_TIMEOUT = 30.0
"""Bound on a Role change reaching the API server's authorizer (its informer: milliseconds)."""
CONNECTOR_CACHE: dict[str, Any] = {
    "name": NAME,
    "replicas": {"min": 1, "max": 3},
    "containers": [
        {
            "name": "main",
            "cpu": {"min": "100m", "max": 8, "step": "50m"},
            "memory": {"min": "64Mi", "max": "1Gi", "step": "64Mi"},
            "env": [
                {"name": "GOGC", "type": "range", "min": 50, "max": 400, "step": 10},
                {"name": SIMULATE_ENV, "type": "enum", "values": ["none", "crash-loop", "image-pull-error"]},
            ],
        }
    ],
}


def statefulset_manifest(name: str = NAME, replicas: int = 2, **spec: Any) -> dict[str, Any]:
    """A StatefulSet with one container the connector tunes; OrderedReady, RollingUpdate by default."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": {"kwok.servo-actors/simulate-interval": "1s"}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "main",
                            "image": IMAGE,
                            "resources": {
                                "requests": {"cpu": "250m", "memory": "256Mi"},
                                "limits": {"cpu": "250m", "memory": "256Mi"},
                            },
                            "env": [
                                {"name": "GOGC", "value": "100"},
                                {"name": SIMULATE_ENV, "value": "none"},
                            ],
                        }
                    ],
                },
            },
            **spec,
        },
    }


class Cache:
    """The module's StatefulSets in their namespace, read as the admin."""

    def __init__(self, cluster: LocalCluster, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace

    def connector(self, workload: dict[str, Any] | None = None, **config: Any) -> KubernetesConnector:
        return KubernetesConnector(
            "k8s",
            {
                "kubeconfig": str(self.cluster.kubeconfig),
                "namespace": self.namespace,
                "timeout": "60s",
                "statefulsets": [copy.deepcopy(workload or CONNECTOR_CACHE)],
                **config,
            },
        )

    def get(self, name: str = NAME) -> dict[str, Any]:
        return self.cluster.get(f"/apis/apps/v1/namespaces/{self.namespace}/statefulsets/{name}")

    def pods(self, name: str = NAME) -> dict[str, dict[str, Any]]:
        """The StatefulSet's pods by name (none being deleted)."""
        found = self.cluster.get(f"/api/v1/namespaces/{self.namespace}/pods?labelSelector=app%3D{name}")
        return {
            pod["metadata"]["name"]: pod
            for pod in found["items"]
            if not pod["metadata"].get("deletionTimestamp")
        }

    def rollout_status(self, name: str = NAME, timeout: float = ROLLOUT_TIMEOUT) -> str:
        """kubectl's own StatefulSet rule (the server's kubectl): its output, AssertionError unless done."""
        return self.cluster.kubectl(
            "rollout", "status", f"statefulset/{name}", "-n", self.namespace, f"--timeout={timeout:.0f}s",
            timeout=timeout + 30,
        ).stdout  # fmt: skip

    def patch(self, body: str, name: str = NAME) -> None:
        self.cluster.kubectl("patch", f"statefulset/{name}", "-n", self.namespace, "-p", body)


def main_of(pod_or_set: dict[str, Any]) -> dict[str, Any]:
    spec = pod_or_set["spec"].get("template", {}).get("spec") or pod_or_set["spec"]
    return next(c for c in spec["containers"] if c["name"] == "main")


def healthy(statefulset: dict[str, Any]) -> bool:
    """Rolled out, read from the object: generation seen, every replica ready and at one revision."""
    status = statefulset.get("status") or {}
    desired = statefulset["spec"]["replicas"]
    return (
        statefulset["metadata"]["generation"] <= status.get("observedGeneration", 0)
        and status.get("replicas", 0) == status.get("readyReplicas", 0) == desired
        and status.get("updateRevision") == status.get("currentRevision")
    )


def _adjust(
    connector: KubernetesConnector, progress: ProgressLog, control: Control | None = None, **asked: Any
) -> dict[str, Any]:
    return connector.adjust(
        {NAME: {"settings": {name: {"value": value} for name, value in asked.items()}}},
        control or Control(),
        progress,
    )


@pytest.fixture(scope="module")
def cache(kube_cluster: LocalCluster, module_namespace: str) -> Iterator[Cache]:
    found = Cache(kube_cluster, module_namespace)
    kube_cluster.apply(module_namespace, statefulset_manifest())
    found.rollout_status()
    yield found
    if not healthy(found.get()):  # shown when a test left it broken
        print(
            kube_cluster.kubectl(
                "get", "all,events", "-o", "wide", "-n", module_namespace, check=False
            ).stdout
        )


def test_adjust_is_rolled_out_by_the_real_statefulset_controller(cache: Cache, progress: ProgressLog) -> None:
    before = cache.get()
    connector = cache.connector()
    described = connector.describe()
    assert settings(described["components"], NAME) == {
        "cpu": 0.25, "memory": 0.25, "GOGC": 100, SIMULATE_ENV: "none", "replicas": 2,
    }  # fmt: skip
    assert set(described["metrics"]) >= {f"{NAME}.ready_replicas", f"{NAME}.restarts"}

    asked = {"cpu": 0.5, "memory": 0.375, "GOGC": 200, "replicas": 3}
    result = _adjust(connector, progress, **asked)
    assert settings(result, NAME) == {**asked, SIMULATE_ENV: "none"}
    # Done by the StatefulSet rule the moment adjust returns: from the object, and by kubectl.
    after = cache.get()
    assert healthy(after), after["status"]
    assert after["status"]["updateRevision"] != before["status"]["updateRevision"]
    assert "roll out complete" in cache.rollout_status(timeout=1)
    percents = progress.percents()
    assert percents == sorted(percents) and percents[-1] == 100
    # Every pod (the new ordinal 2 included) runs the new template; nothing else of the spec moved.
    pods = cache.pods()
    assert sorted(pods) == ["cache-0", "cache-1", "cache-2"]
    for pod in pods.values():
        assert pod["metadata"]["labels"][REVISION_LABEL] == after["status"]["updateRevision"]
        assert main_of(pod)["resources"]["requests"] == {"cpu": "500m", "memory": "384Mi"}
        assert env_of(main_of(pod))["GOGC"] == "200"
    expected = copy.deepcopy(before["spec"])
    expected["replicas"] = 3
    main = main_of({"spec": expected})
    main["resources"] = {
        "requests": {"cpu": "500m", "memory": "384Mi"},
        "limits": {"cpu": "500m", "memory": "384Mi"},
    }
    main["env"][0]["value"] = "200"
    assert after["spec"] == expected

    measured = connector.measure(
        [f"{NAME}.ready_replicas", f"{NAME}.restarts"], Control(duration=0.2), progress
    )
    assert measured["metrics"] == {
        f"{NAME}.ready_replicas": {"unit": "replicas", "value": 3},
        f"{NAME}.restarts": {"unit": "count", "value": 0},
    }

    # A partition: only ordinals >= 2 take the new template, and the rollout is done when they have;
    # the settlement watches the new pod only.
    cache.patch('{"spec": {"updateStrategy": {"rollingUpdate": {"partition": 2}}}}')
    partitioned = _adjust(connector, progress, Control(settlement=1), GOGC=300, replicas=3)
    assert any(message.startswith("settling") for _, message in progress.reports)
    assert settings(partitioned, NAME)["GOGC"] == 300
    status = cache.get()["status"]
    assert status["updatedReplicas"] == 1 and status["readyReplicas"] == 3
    assert status["updateRevision"] != status["currentRevision"]
    assert "partitioned roll out complete: 1 new pods have been updated" in cache.rollout_status(timeout=1)
    gogc = {name: env_of(main_of(pod))["GOGC"] for name, pod in cache.pods().items()}
    assert gogc == {"cache-0": "200", "cache-1": "200", "cache-2": "300"}
    # Back to no partition (kubectl rolls the rest), then scaled back to 2 by the connector.
    cache.patch('{"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}')
    cache.rollout_status()
    _adjust(connector, progress, replicas=2)
    assert healthy(cache.get()) and sorted(cache.pods()) == ["cache-0", "cache-1"]


def test_a_crash_loop_is_diagnosed_and_the_rollback_replaces_the_stuck_pod(
    cache: Cache, progress: ProgressLog
) -> None:
    """OrderedReady replaces cache-1 first; it crash-loops, so the rollout fails at once. Patching
    the template back is not enough for the real controller (it waits for cache-1 to be Ready before
    replacing it): the rollback deletes it, and it comes back from the old revision."""
    before = cache.get()
    with pytest.raises(ConnectorFailure) as caught:
        _adjust(cache.connector(), progress, **{SIMULATE_ENV: "crash-loop", "memory": 0.5})
    failure = caught.value
    assert (failure.status, failure.reason) == ("rejected", "start-failed"), failure.message
    assert failure.message.startswith(f"StatefulSet {NAME}: container main of pod cache-1 fails to start")
    assert "CrashLoopBackOff" in failure.message
    assert failure.message.endswith(f"Rolled {NAME} back to the previous settings, which are healthy again.")
    assert any("deleted pod(s) cache-1 of the failed revision" in message for _, message in progress.reports)
    after = cache.get()
    assert healthy(after), after["status"]
    assert after["spec"]["template"] == before["spec"]["template"]
    # The controller went back to the old revision (the same ControllerRevision), and every pod is on it.
    assert after["status"]["updateRevision"] == before["status"]["updateRevision"]
    for pod in cache.pods().values():
        assert pod["metadata"]["labels"][REVISION_LABEL] == before["status"]["updateRevision"]
        assert env_of(main_of(pod))[SIMULATE_ENV] == "none"


def test_an_image_pull_failure_is_not_the_settings_fault_and_is_rolled_back(
    cache: Cache, progress: ProgressLog
) -> None:
    before = cache.get()
    with pytest.raises(ConnectorFailure) as caught:
        _adjust(cache.connector(), progress, **{SIMULATE_ENV: "image-pull-error"})
    failure = caught.value
    assert (failure.status, failure.reason) == ("failed", "image-pull-failed"), failure.message
    assert f"cannot pull image {IMAGE}" in failure.message
    assert failure.message.endswith(f"Rolled {NAME} back to the previous settings, which are healthy again.")
    after = cache.get()
    assert healthy(after) and after["status"]["updateRevision"] == before["status"]["updateRevision"]
    assert {env_of(main_of(p))[SIMULATE_ENV] for p in cache.pods().values()} == {"none"}


def test_a_crash_loop_with_parallel_pod_management_is_rolled_back_too(
    cache: Cache, progress: ProgressLog
) -> None:
    """podManagementPolicy Parallel: the rolling update still goes one pod at a time from the top."""
    cache.cluster.apply(cache.namespace, statefulset_manifest("swift", podManagementPolicy="Parallel"))
    cache.rollout_status("swift")
    before = cache.get("swift")
    connector = cache.connector({**CONNECTOR_CACHE, "name": "swift"})
    with pytest.raises(ConnectorFailure) as caught:
        connector.adjust(
            {"swift": {"settings": {SIMULATE_ENV: {"value": "crash-loop"}}}}, Control(), progress
        )
    assert (caught.value.status, caught.value.reason) == ("rejected", "start-failed"), caught.value.message
    assert caught.value.message.endswith(
        "Rolled swift back to the previous settings, which are healthy again."
    )
    after = cache.get("swift")
    assert healthy(after) and after["status"]["updateRevision"] == before["status"]["updateRevision"]
    assert {env_of(main_of(p))[SIMULATE_ENV] for p in cache.pods("swift").values()} == {"none"}
    cache.cluster.kubectl("delete", "statefulset", "swift", "-n", cache.namespace, "--wait=false")


def test_without_a_rollback_a_crash_looping_pod_holds_the_statefulset_until_deleted(
    cache: Cache, progress: ProgressLog
) -> None:
    """The upstream limit the rollback works around, on the real controller: under
    ``on_failure: ignore`` the crash-looping cache-1 stays; an ADJUST back to healthy values
    patches the template, but the controller waits for cache-1 to be Ready before it replaces it,
    so that ADJUST times out naming the pod; deleting the pod (what a rollback does) ends it."""
    before = cache.get()
    with pytest.raises(ConnectorFailure) as caught:  # a crash loop fails at once, whatever the timeout
        _adjust(cache.connector(on_failure="ignore"), progress, **{SIMULATE_ENV: "crash-loop"})
    assert (caught.value.status, caught.value.reason) == ("rejected", "start-failed"), caught.value.message
    assert caught.value.message.endswith("The new settings were left in place (on_failure: ignore).")
    with pytest.raises(ConnectorFailure) as caught:
        _adjust(cache.connector(timeout="4s", on_failure="ignore"), progress, **{SIMULATE_ENV: "none"})
    assert (caught.value.status, caught.value.reason) == ("failed", "timeout"), caught.value.message
    assert "pod(s) cache-1 of an older revision are not ready" in caught.value.message
    held = cache.get()
    assert held["spec"]["template"] == before["spec"]["template"]  # the template is back ...
    stuck = cache.pods()["cache-1"]  # ... but the controller left the crash-looping pod alone
    assert stuck["metadata"]["labels"][REVISION_LABEL] != held["status"]["updateRevision"]
    assert env_of(main_of(stuck))[SIMULATE_ENV] == "crash-loop"
    cache.cluster.kubectl("delete", "pod", "cache-1", "-n", cache.namespace, "--wait=false")
    cache.rollout_status()
    assert healthy(cache.get())


def test_shutdown_scales_the_statefulset_to_zero(cache: Cache, progress: ProgressLog) -> None:
    before = cache.get()
    with pytest.raises(ConnectorFailure) as caught:
        _adjust(cache.connector(on_failure="shutdown"), progress, **{SIMULATE_ENV: "crash-loop"})
    assert (caught.value.status, caught.value.reason) == ("rejected", "start-failed"), caught.value.message
    assert caught.value.message.endswith(f"Scaled {NAME} to zero replicas (on_failure: shutdown).")
    assert cache.get()["spec"]["replicas"] == 0
    # The real controller removes every pod, the crash-looping one included (it is the highest ordinal).
    wait_until(lambda: not cache.pods(), ROLLOUT_TIMEOUT, interval=0.2, what="every pod gone")
    # Put it back as it was (the admin's doing, as after any shutdown).
    cache.cluster.kubectl("set", "env", f"statefulset/{NAME}", f"{SIMULATE_ENV}=none", "-n", cache.namespace)
    cache.cluster.kubectl(
        "scale", f"statefulset/{NAME}", f"--replicas={before['spec']['replicas']}", "-n", cache.namespace
    )
    cache.rollout_status()
    assert healthy(cache.get())


def test_unschedulable_waits_until_the_timeout_then_rolls_back(cache: Cache, progress: ProgressLog) -> None:
    before = cache.get()
    # 6 cores: more than any node has (4), so the real scheduler refuses the replacement of cache-1.
    with pytest.raises(ConnectorFailure) as caught:
        _adjust(cache.connector(timeout="7s"), progress, cpu=6, GOGC=250)
    failure = caught.value
    assert (failure.status, failure.reason) == ("rejected", "unschedulable"), failure.message
    assert "pod cache-1 cannot be scheduled" in failure.message and "Insufficient cpu" in failure.message
    assert failure.message.endswith(f"Rolled {NAME} back to the previous settings, which are healthy again.")
    after = cache.get()
    assert healthy(after) and after["spec"]["template"] == before["spec"]["template"]
    for pod in cache.pods().values():
        assert pod["metadata"]["labels"][REVISION_LABEL] == before["status"]["updateRevision"]
        assert main_of(pod)["resources"] == main_of(before)["resources"]
    assert any("deleted pod(s) cache-1 of the failed revision" in message for _, message in progress.reports)


def test_on_delete_is_described_but_refused_at_adjust(cache: Cache, progress: ProgressLog) -> None:
    cache.cluster.apply(
        cache.namespace, statefulset_manifest("frozen", replicas=1, updateStrategy={"type": "OnDelete"})
    )
    # (kubectl rollout status refuses OnDelete: "only available for RollingUpdate strategy type")
    wait_until(lambda: cache.get("frozen").get("status", {}).get("readyReplicas") == 1, ROLLOUT_TIMEOUT,
               interval=0.2, what="frozen-0 ready")  # fmt: skip
    before = cache.get("frozen")
    connector = cache.connector({**CONNECTOR_CACHE, "name": "frozen"})
    described = connector.describe()
    assert settings(described["components"], "frozen")["cpu"] == 0.25
    with pytest.raises(ConnectorFailure) as caught:
        connector.adjust({"frozen": {"settings": {"cpu": {"value": 0.5}}}}, Control(), progress)
    assert (caught.value.status, caught.value.reason) == ("failed", "statefulset-on-delete")
    assert "updateStrategy OnDelete" in caught.value.message and "RollingUpdate" in caught.value.message
    after = cache.get("frozen")
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["spec"] == before["spec"]
    check = {r["name"]: r for r in connector.check()}
    assert not check["statefulset frozen"]["success"] and "OnDelete" in check["statefulset frozen"]["message"]
    # The permissions check asks for exactly what StatefulSets add (the admin has them all).
    assert check["permissions"]["success"], check["permissions"]


def test_check_verifies_what_statefulsets_need_with_the_deploy_role(
    cache: Cache, tmp_path: Path, progress: ProgressLog
) -> None:
    """The Role of deploy/kubernetes, bound to a ServiceAccount whose token alone the connector
    uses: check passes and an ADJUST goes through; without ``patch statefulsets.apps``, or without
    ``delete pods`` (a rollback's), check fails naming the verb."""
    cluster, namespace = cache.cluster, cache.namespace
    [binding] = documents("rolebinding.yaml")
    for subject in binding["subjects"]:
        subject["namespace"] = namespace
    [role] = documents("role.yaml")
    cluster.apply(namespace, *documents("serviceaccount.yaml"), role, binding)
    wait_until(lambda: can_i(cluster, namespace, "patch", "statefulsets.apps"), RBAC_TIMEOUT, interval=0.2,
               what="the Role in force")  # fmt: skip
    kubeconfig = token_kubeconfig(cluster, namespace, tmp_path / "servo.kubeconfig")
    connector = cache.connector(kubeconfig=str(kubeconfig))
    checks = {r["name"]: r for r in connector.check()}
    assert all(r["success"] for r in checks.values()), checks
    assert "every verb the connector uses is allowed" in checks["permissions"]["message"]
    assert "StatefulSet(s)" in checks[f"namespace {namespace} readable"]["message"]
    gogc = int(settings(connector.describe()["components"], NAME)["GOGC"])
    _adjust(connector, progress, GOGC=gogc + 10)
    assert env_of(main_of(cache.get()))["GOGC"] == str(gogc + 10)

    for group, resource, verb in (("apps", "statefulsets", "patch"), ("", "pods", "delete")):
        reduced = copy.deepcopy(role)
        for rule in reduced["rules"]:
            if group in rule["apiGroups"] and resource in rule["resources"]:
                rule["verbs"] = [v for v in rule["verbs"] if v != verb]
        qualified = f"{resource}.{group}" if group else resource
        cluster.apply(namespace, reduced)
        wait_until(lambda v=verb, r=qualified: not can_i(cluster, namespace, v, r), RBAC_TIMEOUT, interval=0.2,
                   what=f"{verb} {qualified} withdrawn")  # fmt: skip
        permissions = {r["name"]: r for r in connector.check()}["permissions"]
        assert not permissions["success"]
        assert f"not allowed in namespace '{namespace}': {verb} {qualified} " in permissions["message"]
    # Without a rollback to do, deleting pods is not asked for.
    ignoring = cache.connector(kubeconfig=str(kubeconfig), on_failure="ignore")
    assert {r["name"]: r for r in ignoring.check()}["permissions"]["success"]


def test_an_hpa_on_the_statefulset_is_found_and_tuned(cache: Cache, progress: ProgressLog) -> None:
    """An HPA whose scaleTargetRef is the StatefulSet: its bounds are offered instead of replicas."""
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": NAME},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": NAME},
            "minReplicas": 2,  # the replicas it has: no scaling while the test runs
            "maxReplicas": 3,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
                }
            ],
        },
    }
    path = f"/apis/autoscaling/v2/namespaces/{cache.namespace}/horizontalpodautoscalers/{NAME}"
    cache.cluster.apply(cache.namespace, hpa)
    try:
        workload = {
            **CONNECTOR_CACHE,
            "hpa": {"max_replicas": {"min": 2, "max": 5}, "target_cpu_utilization": {"min": 30, "max": 90}},
        }
        connector = cache.connector(workload)
        described = settings(connector.describe()["components"], NAME)
        assert "replicas" not in described
        assert (described["hpa_max_replicas"], described["hpa_target_cpu_utilization"]) == (3, 80)
        generation = cache.get()["metadata"]["generation"]
        result = _adjust(connector, progress, hpa_max_replicas=4, hpa_target_cpu_utilization=60)
        assert settings(result, NAME)["hpa_max_replicas"] == 4
        spec = cache.cluster.get(path)["spec"]
        assert (
            spec["maxReplicas"] == 4 and spec["metrics"][0]["resource"]["target"]["averageUtilization"] == 60
        )
        assert cache.get()["metadata"]["generation"] == generation  # the StatefulSet itself untouched
    finally:
        cache.cluster.kubectl("delete", "hpa", NAME, "-n", cache.namespace, "--ignore-not-found")


def test_a_short_optimization_through_servo_actors_run(cache: Cache, tmp_path: Path) -> None:
    """``servo-actors run`` (a real subprocess) against the embedded optimizer's search: DESCRIBE, a
    baseline MEASURE and three ADJUST + MEASURE trials on the StatefulSet, each rolled out for real."""
    workload = copy.deepcopy(CONNECTOR_CACHE)
    [main] = workload["containers"]
    main["env"] = [e for e in main["env"] if e["name"] != SIMULATE_ENV]  # healthy trials only
    main["cpu"] = {"min": "100m", "max": "500m", "step": "100m"}
    main["memory"] = {"min": "128Mi", "max": "512Mi", "step": "128Mi"}
    driver = SearchDriver.from_plan(
        {
            "app": "example.com/cache",
            "steps": 3,
            "measure": {"duration": "1s"},
            "objective": {"minimize": f"{NAME}.restarts"},
            "sleep": 0.2,
            "confirm": {"repeats": 0},
        }
    )
    server = OptimizerServer(driver, app="example.com/cache", host="127.0.0.1", port=0)
    server.start()
    connector = {
        "name": "k8s",
        "type": "kubernetes",
        "config": {
            "kubeconfig": str(cache.cluster.kubeconfig),
            "namespace": cache.namespace,
            "timeout": "60s",
            "request_timeout": "5s",
            "statefulsets": [workload],
        },
    }
    servo = ServoRun.start(tmp_path / "servo", servo_config(server, connector))
    try:
        wait_until(
            lambda: driver.phase in ("done", "failed"), PLAN_TIMEOUT, interval=0.2, what="the plan to end"
        )
        assert driver.phase == "done", servo.log()
    finally:
        code = servo.stop()
        server.stop()
    assert code == 0, servo.log()
    results = [
        entry["param"]
        for entry in server.state()["history"]
        if entry.get("event") == "ADJUSTMENT" and "status" in (entry.get("param") or {})
    ]
    assert len(results) == 3 and all(r["status"] == "ok" for r in results), results
    last = results[-1]["state"]["application"]["components"][NAME]["settings"]
    statefulset = cache.get()
    assert healthy(statefulset)
    assert statefulset["spec"]["replicas"] == last["replicas"]["value"]
    for pod in cache.pods().values():
        requests = main_of(pod)["resources"]["requests"]
        assert abs(_cores(requests["cpu"]) - float(last["cpu"]["value"])) < 1e-6
        assert env_of(main_of(pod))["GOGC"] == str(int(last["GOGC"]["value"]))
    assert "Traceback" not in servo.log()


def _cores(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)
