"""The `kubernetes` connector meeting the real kubelet on the local cluster's real node: a readiness
probe that never passes, a crash loop with real back-off, a real OOM kill and readiness lost during
settlement, each failing the ADJUST with its reason and rolled back (checked on the real pods and
their cgroups); the tuning pod's own limits in its container's cgroups, the Deployment's pod
untouched; and a tuning pod whose process outlives SIGTERM, killed at the end of its real grace
period while the connector waits, a wait its timeout bounds."""

from __future__ import annotations

import copy
import http.client
import re
import threading
from typing import Any

import pytest
from kube_local import LocalCluster
from real_node import APP_IMAGE, NODE, POD_TIMEOUT, REAL, container_cgroup, ready
from waiting import wait_until

from servo_actors.connectors.base import ConnectorFailure, Control
from servo_actors.connectors.kubernetes import KubernetesConnector
from servo_actors.connectors.kubernetes.client import KubeClient, pods_path
from servo_actors.connectors.kubernetes.kubeconfig import resolve_access

pytestmark = pytest.mark.kube

TIMEOUT = "10s"
"""The connector's rollout timeout where a readiness probe never passes: the wait it runs out. The
new pod's start and first probes must fall within it (1-3 s measured here on 2 cores at load 18)."""
GRACE = 3
"""terminationGracePeriodSeconds of the tuning pod whose process outlives SIGTERM."""
LONG_GRACE = 30
"""A grace period longer than the connector's timeout (``SHORT_TIMEOUT``)."""
SHORT_TIMEOUT = "3s"
UNREADY_AFTER = "6s"
"""How long after its start a pod of the unstable settings answers /readyz with 503: Ready first (the
rollout completes), then not, within the settlement."""
SETTLEMENT = 20.0
HELD_MS = 60000
"""CPU milliseconds of the request kept in flight: at 100m it would take 10 minutes."""
REQUEST_TIMEOUT = 120.0
"""Seconds the held request may wait for an answer: the container is killed well before."""
WATCH_SECONDS = 60
PERIOD = 100_000
"""cpu.cfs_period_us the kubelet sets (100 ms)."""


def web(template_spec: dict[str, Any] | None = None, memory: str = "64Mi", **env: str) -> dict[str, Any]:
    """Deployment ``web``: one replica of the app on the real node, 100m and ``memory`` (requests
    and limits), readiness on /readyz every second, the log's tail as termination message."""
    main = {
        "name": "main", "image": APP_IMAGE, "imagePullPolicy": "IfNotPresent",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "ports": [{"containerPort": 8080, "name": "http"}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 1},
        "env": [{"name": name, "value": value} for name, value in {"READY": "true", "EXIT_AFTER": "0s", "UNREADY_AFTER": "0s", **env}.items()],
        "resources": {"requests": {"cpu": "100m", "memory": memory}, "limits": {"cpu": "100m", "memory": memory}},
    }  # fmt: skip
    spec = {
        **copy.deepcopy(REAL),
        "terminationGracePeriodSeconds": 2,
        "containers": [main],
        **(template_spec or {}),
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": spec}},
    }  # fmt: skip


def connector(cluster: LocalCluster, namespace: str, **config: Any) -> KubernetesConnector:
    return KubernetesConnector("k8s", {
        "kubeconfig": str(cluster.kubeconfig), "namespace": namespace, "timeout": "60s",
        "deployments": [{"name": "web", **config.pop("deployment", {}), "containers": [{
            "name": "main", "cpu": {"min": "100m", "max": "1", "step": "50m"},
            "memory": {"min": "64Mi", "max": "512Mi", "step": "64Mi"},
            "env": [{"name": "READY", "type": "enum", "values": ["true", "false"]},
                    {"name": "EXIT_AFTER", "type": "enum", "values": ["0s", "1ms"]},
                    {"name": "UNREADY_AFTER", "type": "enum", "values": ["0s", UNREADY_AFTER]}],
        }]}],
        **config,
    })  # fmt: skip


def adjust(conn: KubernetesConnector, component: str, progress: list[str] | None = None,
           settlement: float = 0.0, **settings: Any) -> dict[str, Any]:  # fmt: skip
    def report(percent: float, message: str = "") -> None:
        if progress is not None:
            progress.append(message)

    components = {component: {"settings": {name: {"value": value} for name, value in settings.items()}}}
    return conn.adjust(components, Control(settlement=settlement), report)


def live_pods(cluster: LocalCluster, namespace: str) -> list[dict[str, Any]]:
    found = cluster.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    return [p for p in found if not p["metadata"].get("deletionTimestamp")]


def started(cluster: LocalCluster, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """Applies ``manifest`` and waits for its one pod to be Ready on the real node; that pod."""
    cluster.apply(namespace, manifest)

    def one_ready() -> dict[str, Any] | None:
        pods = [p for p in live_pods(cluster, namespace) if ready(p)]
        return pods[0] if len(pods) == 1 else None

    pod = wait_until(one_ready, POD_TIMEOUT, 0.5, "web's pod Ready")
    assert pod["spec"]["nodeName"] == NODE
    return pod  # type: ignore[no-any-return]


def limits(cluster: LocalCluster, pod: dict[str, Any]) -> tuple[int, int]:
    """The container's CFS quota (µs per period) and memory limit (bytes), read from its cgroups."""
    cpu = container_cgroup(cluster, pod, "cpu")
    assert int((cpu / "cpu.cfs_period_us").read_text()) == PERIOD
    memory = container_cgroup(cluster, pod, "memory")
    return int((cpu / "cpu.cfs_quota_us").read_text()), int((memory / "memory.limit_in_bytes").read_text())


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


# --- failures of the new settings, rolled back -----------------------------------------------


def assert_rolled_back_on_the_real_pod(
    cluster: LocalCluster, namespace: str, before: dict[str, Any], memory_mi: int = 64
) -> None:
    """Deployment web's template is the old one again, and the one pod that serves is the pod that
    served before the ADJUST: Ready, never restarted, its cgroups still at 100m and ``memory_mi``
    MiB; the failed settings' pod terminates (its grace period is 2 s)."""
    deployment = cluster.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/web")
    main = deployment["spec"]["template"]["spec"]["containers"][0]
    assert main["resources"]["limits"] == {"cpu": "100m", "memory": f"{memory_mi}Mi"}
    assert {k: v for k, v in env_of(main).items() if k in ("READY", "EXIT_AFTER")} == {
        "READY": "true", "EXIT_AFTER": "0s",
    }  # fmt: skip
    wait_until(lambda: len(cluster.get(f"/api/v1/namespaces/{namespace}/pods")["items"]) == 1,
               POD_TIMEOUT, 0.5, "the failed pod gone")  # fmt: skip
    (serving,) = live_pods(cluster, namespace)
    assert serving["metadata"]["uid"] == before["metadata"]["uid"]
    assert ready(serving) and serving["status"]["containerStatuses"][0]["restartCount"] == 0
    assert limits(cluster, serving) == (PERIOD // 10, memory_mi * 2**20)


def test_a_readiness_probe_that_never_passes_is_named_when_the_wait_runs_out_and_rolled_back(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    before = started(kube_cluster, kube_namespace, web())
    with pytest.raises(ConnectorFailure) as caught:
        adjust(connector(kube_cluster, kube_namespace, timeout=TIMEOUT), "web", READY="false", cpu=0.2)
    failure = caught.value
    assert (failure.status, failure.reason) == ("rejected", "start-failed"), failure.message
    message = failure.message
    assert message.startswith(f"Deployment web did not finish rolling out within {TIMEOUT}: pod web-"), (
        message
    )
    # The kubelet's own event: the probe ran (every second) and the app answered 503 each time.
    found = re.search(
        r"is not ready: container main: Readiness probe failed: HTTP probe failed with statuscode: 503 "
        r"\((\d+) time\(s\); the container restarted 0 time\(s\)\)",
        message,
    )  # fmt: skip
    assert found is not None and int(found.group(1)) >= 1, message
    assert message.endswith("Rolled web back to the previous settings, which are healthy again."), message
    assert_rolled_back_on_the_real_pod(kube_cluster, kube_namespace, before)


def test_a_crash_loop_fails_at_the_back_off_with_restarts_and_last_words_and_is_rolled_back(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    before = started(kube_cluster, kube_namespace, web())
    with pytest.raises(ConnectorFailure) as caught:  # the 60 s timeout is not waited out
        adjust(connector(kube_cluster, kube_namespace), "web", EXIT_AFTER="1ms", cpu=0.2, memory=0.125)
    failure = caught.value
    assert (failure.status, failure.reason) == ("rejected", "start-failed"), failure.message
    found = re.search(
        r"^Deployment web: container main of pod web-\S+ fails to start: CrashLoopBackOff, restarted "
        r"(\d+) time\(s\); last exit: Error \(code 1\), saying '[^']*exiting with status 1 as "
        r"EXIT_AFTER=1ms asks[^']*': back-off \d+s restarting failed container=main ",
        failure.message,
    )  # fmt: skip
    assert found is not None and int(found.group(1)) >= 1, failure.message
    assert failure.message.endswith("Rolled web back to the previous settings, which are healthy again.")
    assert_rolled_back_on_the_real_pod(kube_cluster, kube_namespace, before)


def test_a_memory_limit_below_the_apps_use_is_oom_killed_named_with_the_last_state_and_rolled_back(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    # The app holds 96 MiB from its start: at 64Mi the kernel's OOM killer ends it, again and again.
    before = started(kube_cluster, kube_namespace, web(memory="256Mi", ALLOC_MB="96"))
    with pytest.raises(ConnectorFailure) as caught:
        adjust(connector(kube_cluster, kube_namespace), "web", memory=0.0625)
    failure = caught.value
    assert (failure.status, failure.reason) == ("rejected", "start-failed"), failure.message
    found = re.search(
        r"^Deployment web: container main of pod web-\S+ fails to start: CrashLoopBackOff, restarted "
        r"(\d+) time\(s\); last exit: OOMKilled \(code 137\)",
        failure.message,
    )  # fmt: skip
    assert found is not None and int(found.group(1)) >= 1, failure.message
    assert "(it may need more memory)" in failure.message, failure.message
    assert failure.message.endswith("Rolled web back to the previous settings, which are healthy again.")
    assert_rolled_back_on_the_real_pod(kube_cluster, kube_namespace, before, memory_mi=256)


def test_readiness_lost_during_settlement_is_unstable_and_the_rollback_starts_a_pod_of_the_old_settings(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    before = started(kube_cluster, kube_namespace, web())
    progress: list[str] = []
    with pytest.raises(ConnectorFailure) as caught:
        adjust(connector(kube_cluster, kube_namespace), "web", progress, settlement=SETTLEMENT,
               UNREADY_AFTER=UNREADY_AFTER, cpu=0.2)  # fmt: skip
    failure = caught.value
    assert (failure.status, failure.reason) == ("rejected", "unstable"), failure.message
    assert re.search(
        r"^Deployment web: pod web-\S+ lost readiness during settlement: containers with unready status: "
        r"\[main\]; container main: Readiness probe failed: HTTP probe failed with statuscode: 503 "
        r"\(\d+ time\(s\); the container restarted 0 time\(s\)\)\. ",
        failure.message,
    ), failure.message  # fmt: skip
    assert failure.message.endswith("Rolled web back to the previous settings, which are healthy again.")
    assert any(message.startswith("settling") for message in progress), progress
    # The rollout had replaced the old pod: the rollback brought a new one of the old settings.
    wait_until(lambda: len(kube_cluster.get(f"/api/v1/namespaces/{kube_namespace}/pods")["items"]) == 1,
               POD_TIMEOUT, 0.5, "the unstable pod gone")  # fmt: skip
    (serving,) = live_pods(kube_cluster, kube_namespace)
    assert serving["metadata"]["uid"] != before["metadata"]["uid"] and ready(serving)
    assert env_of(serving["spec"]["containers"][0])["UNREADY_AFTER"] == "0s"
    assert limits(kube_cluster, serving) == (PERIOD // 10, 64 * 2**20)


# --- the tuning pod ----------------------------------------------------------------------------


def tuning_pod(cluster: LocalCluster, namespace: str) -> dict[str, Any]:
    return cluster.get(f"/api/v1/namespaces/{namespace}/pods/web-tuning")  # type: ignore[no-any-return]


def test_the_tuning_pods_container_runs_with_the_trial_limits_and_the_deployments_pod_is_untouched(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    main = started(kube_cluster, kube_namespace, web())
    generation = kube_cluster.get(f"/apis/apps/v1/namespaces/{kube_namespace}/deployments/web")["metadata"][
        "generation"
    ]
    conn = connector(kube_cluster, kube_namespace, deployment={"strategy": "tuning"})
    adjust(conn, "web-tuning", cpu=0.3, memory=0.1875)  # 300m, 192Mi
    pod = tuning_pod(kube_cluster, kube_namespace)
    assert ready(pod) and pod["spec"]["nodeName"] == NODE
    assert limits(kube_cluster, pod) == (3 * PERIOD // 10, 192 * 2**20)
    # The Deployment's pod: the same one, never restarted, its cgroups as they were.
    assert (
        kube_cluster.get(f"/apis/apps/v1/namespaces/{kube_namespace}/deployments/web")["metadata"][
            "generation"
        ]
        == generation
    )
    pods = live_pods(kube_cluster, kube_namespace)
    assert sorted(p["metadata"]["name"] for p in pods) == sorted([main["metadata"]["name"], "web-tuning"])
    (same,) = [p for p in pods if p["metadata"]["uid"] == main["metadata"]["uid"]]
    assert same["status"]["containerStatuses"][0]["restartCount"] == 0
    assert limits(kube_cluster, same) == (PERIOD // 10, 64 * 2**20)


class HeldRequest:
    """A /work request kept in flight to the pod at ``ip`` (its CPU cost far beyond its limit), on a
    thread; ``outcome`` is its status code, or the error that ended it."""

    def __init__(self, ip: str) -> None:
        self.outcome: int | BaseException | None = None
        self._connection = http.client.HTTPConnection(ip, 8080, timeout=REQUEST_TIMEOUT)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._connection.request("GET", f"/work?ms={HELD_MS}")
            self.outcome = self._connection.getresponse().status
        except (OSError, http.client.HTTPException) as exc:
            self.outcome = exc

    def join(self) -> int | BaseException | None:
        self._thread.join(REQUEST_TIMEOUT + 10)
        self._connection.close()
        return self.outcome


def in_flight(ip: str) -> bool:
    connection = http.client.HTTPConnection(ip, 8080, timeout=10)
    try:
        connection.request("GET", "/metrics")
        body = connection.getresponse().read().decode()
    finally:
        connection.close()
    return 'http_requests_in_flight{path="/work"} 1' in body


class PodWatch:
    """Every state of pod ``name`` from a real watch (the project's client), on a thread, until
    the pod is deleted or WATCH_SECONDS pass: ``(event type, deletionGracePeriodSeconds, the main
    container's state)``."""

    def __init__(self, cluster: LocalCluster, namespace: str, name: str) -> None:
        self.seen: list[tuple[str, int | None, dict[str, Any]]] = []
        self._client = KubeClient(resolve_access(str(cluster.kubeconfig), None), 10.0)
        listed = self._client.get(pods_path(namespace), {"fieldSelector": f"metadata.name={name}"})
        self._params = {"fieldSelector": f"metadata.name={name}",
                        "resourceVersion": listed["metadata"]["resourceVersion"]}  # fmt: skip
        self._path = pods_path(namespace)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for kind, pod in self._client.watch(self._path, self._params, WATCH_SECONDS):
                statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
                grace = pod["metadata"].get("deletionGracePeriodSeconds")
                self.seen.append((kind, grace, statuses[0].get("state") or {}))
                if kind == "DELETED":
                    return
        finally:
            self._client.close()

    def join(self) -> list[tuple[str, int | None, dict[str, Any]]]:
        self._thread.join(WATCH_SECONDS + 20)
        return self.seen


def start_held(cluster: LocalCluster, namespace: str, grace: int) -> tuple[dict[str, Any], HeldRequest]:
    """Deployment web (grace ``grace``) and its tuning pod, whose process outlives SIGTERM: the app
    waits up to 10 minutes for requests in flight (SHUTDOWN_TIMEOUT) and the test keeps one in
    flight, so only the kubelet's SIGKILL at the end of the grace period ends it."""
    started(cluster, namespace, web({"terminationGracePeriodSeconds": grace}, SHUTDOWN_TIMEOUT="10m"))
    adjust(connector(cluster, namespace, deployment={"strategy": "tuning"}), "web-tuning", cpu=0.15)
    pod = tuning_pod(cluster, namespace)
    held = HeldRequest(pod["status"]["podIP"])
    wait_until(lambda: in_flight(pod["status"]["podIP"]), POD_TIMEOUT, 0.2, "the request in flight")
    return pod, held


def test_a_tuning_pod_that_outlives_sigterm_takes_its_grace_period_before_the_replace_goes_on(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    old, held = start_held(kube_cluster, kube_namespace, GRACE)
    watch = PodWatch(kube_cluster, kube_namespace, "web-tuning")
    progress: list[str] = []
    conn = connector(kube_cluster, kube_namespace, deployment={"strategy": "tuning"})
    adjust(conn, "web-tuning", progress, cpu=0.2)
    seen = watch.join()
    # Deleted with the template's grace; the container kept running through SIGTERM (serving the
    # request) while the connector waited; then the kubelet killed it: 137 is SIGKILL, where the
    # app would have exited 0 had its request finished.
    # (The kubelet's final delete, once the container is gone, sets the grace to 0.)
    terminating = [(grace, state) for _, grace, state in seen if grace is not None]
    assert terminating and terminating[0][0] == GRACE and "running" in terminating[0][1], seen
    killed = [state["terminated"] for _, state in terminating if "terminated" in state]
    assert killed and killed[0]["exitCode"] == 137, seen
    assert seen[-1][0] == "DELETED", seen
    assert isinstance(held.join(), OSError | http.client.HTTPException), held.outcome
    assert "waiting for tuning pod web-tuning to be deleted" in progress, progress
    new = tuning_pod(kube_cluster, kube_namespace)
    assert new["metadata"]["uid"] != old["metadata"]["uid"] and ready(new)
    assert limits(kube_cluster, new)[0] == 2 * PERIOD // 10


def test_a_grace_period_longer_than_the_timeout_bounds_the_connectors_wait_and_names_it(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    old, held = start_held(kube_cluster, kube_namespace, LONG_GRACE)
    conn = connector(kube_cluster, kube_namespace, deployment={"strategy": "tuning"}, timeout=SHORT_TIMEOUT)
    with pytest.raises(ConnectorFailure) as caught:
        adjust(conn, "web-tuning", cpu=0.2)
    failure = caught.value
    assert (failure.status, failure.reason) == ("failed", "timeout"), failure.message
    assert failure.message.startswith(
        f"tuning pod web-tuning of Deployment web: the old tuning pod web-tuning was not deleted within "
        f"{SHORT_TIMEOUT}: it is terminating with a grace period of {LONG_GRACE}s"
    ), failure.message
    assert failure.message.endswith(
        "The tuning pod is being deleted and goes once its containers stop (on_failure: rollback); "
        "the Deployment was never changed."
    ), failure.message
    # Still terminating, its process still running: the connector gave up waiting, not the kubelet.
    pod = tuning_pod(kube_cluster, kube_namespace)
    assert pod["metadata"]["uid"] == old["metadata"]["uid"] and pod["metadata"]["deletionTimestamp"]
    assert "running" in pod["status"]["containerStatuses"][0]["state"]
    assert held.outcome is None
