"""The local cluster's real node (kubelet, containerd, runc, the CNI bridge): real containers of the
project's app image, reachable from the host; the connector's cpu/memory applied to the container's
cgroups by the real kubelet; real ErrImagePull and OOMKilled; and `down` leaves nothing behind."""

from __future__ import annotations

import copy
import http.client
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kube_local
import pytest
from kube_local import LocalCluster
from kube_quantity import parse as parse_quantity
from real_node import APP_IMAGE, CGROUP_V1, LABEL, NODE, POD_TIMEOUT, REAL, container_cgroup, ready
from waiting import wait_until

from servo_actors.connectors.base import Control
from servo_actors.connectors.kubernetes import KubernetesConnector

pytestmark = pytest.mark.kube

MISSING_IMAGE = "servo-actors.local/no-such-image:dev"
HTTP_TIMEOUT = 10.0
METRICS_TIMEOUT = 120.0
"""Seconds for a pod's first metrics: metrics-server scrapes every 10 s and needs two scrapes (~35 s)."""


def app_container(**fields: Any) -> dict[str, Any]:
    return {
        "name": "main", "image": APP_IMAGE, "imagePullPolicy": "IfNotPresent",
        "ports": [{"containerPort": 8080, "name": "http"}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 1},
        **fields,
    }  # fmt: skip


def real_pod(name: str, restart: str = "Always", **container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
        "spec": {**copy.deepcopy(REAL), "restartPolicy": restart, "terminationGracePeriodSeconds": 2,
                 "containers": [app_container(**container)]},
    }  # fmt: skip


def pod(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    return cluster.get(f"/api/v1/namespaces/{namespace}/pods/{name}")  # type: ignore[no-any-return]


def ready_pod(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any] | None:
    found = pod(cluster, namespace, name)
    return found if ready(found) else None


def http_get(ip: str, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(ip, 8080, timeout=HTTP_TIMEOUT)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


# --- the node itself -------------------------------------------------------------------------


def test_the_real_node_registers_with_its_label_taint_runtime_and_allocatable(
    kube_cluster: LocalCluster,
) -> None:
    node = kube_cluster.get(f"/api/v1/nodes/{NODE}")
    assert node["metadata"]["labels"][LABEL] == "real"
    assert {"key": LABEL, "value": "real", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    assert node["status"]["nodeInfo"]["kubeletVersion"] == kube_cluster.get("/version")["gitVersion"]
    assert node["status"]["allocatable"]["cpu"] == "1"
    assert node["status"]["allocatable"]["memory"] == "2Gi"


def test_kwok_leaves_the_real_node_to_its_kubelet(kube_cluster: LocalCluster) -> None:
    node = kube_cluster.get(f"/api/v1/nodes/{NODE}")
    assert "kwok.x-k8s.io/node" not in node["metadata"].get("annotations", {})
    kwok = [kube_cluster.get(f"/api/v1/nodes/kwok-node-{i}") for i in range(2)]
    assert all(n["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake" for n in kwok)


# --- real containers -------------------------------------------------------------------------


def test_an_app_pod_runs_on_the_real_node_and_answers_http_from_the_host(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    kube_cluster.apply(kube_namespace, real_pod("web", env=[{"name": "WORK_MS", "value": "1"}]))
    running = wait_until(
        lambda: ready_pod(kube_cluster, kube_namespace, "web"), POD_TIMEOUT, 0.5, "web Ready"
    )
    assert running["spec"]["nodeName"] == NODE
    ip = running["status"]["podIP"]
    subnet = kube_cluster.state()["real_nodes"][0]["subnet"]
    assert ip.rsplit(".", 1)[0] == subnet.rsplit(".", 1)[0]
    status, _ = http_get(ip, "/work")
    assert status == 200
    status, body = http_get(ip, "/metrics")
    assert status == 200 and b"http_request_duration_seconds" in body


def test_metrics_server_reads_a_real_pods_usage_from_the_real_kubelet(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    kube_cluster.apply(kube_namespace, real_pod("busy", env=[{"name": "ALLOC_MB", "value": "64"}]))
    wait_until(lambda: ready_pod(kube_cluster, kube_namespace, "busy"), POD_TIMEOUT, 0.5, "busy Ready")
    path = f"/apis/metrics.k8s.io/v1beta1/namespaces/{kube_namespace}/pods/busy"
    metrics = wait_until(lambda: kube_cluster.try_get(path), METRICS_TIMEOUT, 1.0, "the pod's metrics")
    (container,) = metrics["containers"]
    # cAdvisor's working set of the real container: at least the 64 MiB the app holds.
    assert parse_quantity(container["usage"]["memory"])[0] >= 64 * 2**20, container


def test_the_connectors_cpu_and_memory_reach_the_containers_cgroup(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {
            "replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                **copy.deepcopy(REAL), "terminationGracePeriodSeconds": 2,
                "containers": [app_container(resources={"requests": {"cpu": "250m", "memory": "128Mi"},
                                                        "limits": {"cpu": "250m", "memory": "128Mi"}})],
            }},
        },
    }  # fmt: skip
    kube_cluster.apply(kube_namespace, deployment)
    connector = KubernetesConnector("k8s", {
        "kubeconfig": str(kube_cluster.kubeconfig), "namespace": kube_namespace, "timeout": "120s",
        "deployments": [{"name": "web", "containers": [{
            "name": "main", "cpu": {"min": "100m", "max": "1", "step": "50m"},
            "memory": {"min": "64Mi", "max": "512Mi", "step": "64Mi"},
        }]}],
    })  # fmt: skip
    connector.adjust(
        {"web": {"settings": {"cpu": {"value": 0.5}, "memory": {"value": 0.25}}}}, Control(), lambda *_: None
    )
    pods = kube_cluster.get(f"/api/v1/namespaces/{kube_namespace}/pods?labelSelector=app%3Dweb")["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp") and ready(p)]
    assert len(live) == 1, [p["metadata"]["name"] for p in pods]
    (p,) = live
    assert p["spec"]["nodeName"] == NODE
    cpu = container_cgroup(kube_cluster, p, "cpu")
    period = int((cpu / "cpu.cfs_period_us").read_text())
    assert int((cpu / "cpu.cfs_quota_us").read_text()) == period // 2  # 500m
    memory = container_cgroup(kube_cluster, p, "memory")
    assert int((memory / "memory.limit_in_bytes").read_text()) == 256 * 2**20


# --- real failures ---------------------------------------------------------------------------


def test_an_image_that_was_not_imported_is_a_real_err_image_pull(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    kube_cluster.apply(kube_namespace, real_pod("missing", image=MISSING_IMAGE))

    def waiting() -> dict[str, Any] | None:
        statuses = pod(kube_cluster, kube_namespace, "missing")["status"].get("containerStatuses") or []
        state = statuses[0]["state"].get("waiting") if statuses else None
        return state if state and state.get("reason") == "ErrImagePull" else None

    state = wait_until(waiting, POD_TIMEOUT, 0.25, "ErrImagePull")
    assert MISSING_IMAGE in state["message"]


def test_a_memory_limit_below_the_apps_use_is_a_real_oom_kill(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    kube_cluster.apply(kube_namespace, real_pod(
        "hungry", restart="Never", env=[{"name": "ALLOC_MB", "value": "256"}],
        resources={"limits": {"memory": "64Mi"}, "requests": {"memory": "64Mi"}},
    ))  # fmt: skip

    def terminated() -> dict[str, Any] | None:
        statuses = pod(kube_cluster, kube_namespace, "hungry")["status"].get("containerStatuses") or []
        return statuses[0]["state"].get("terminated") if statuses else None

    state = wait_until(terminated, POD_TIMEOUT, 0.25, "the container terminated")
    assert state["reason"] == "OOMKilled", state
    assert state["exitCode"] == 137


# --- down leaves nothing ---------------------------------------------------------------------


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A cluster directory with a short path (containerd's socket path must fit in 108 bytes)."""
    directory = Path(tempfile.mkdtemp(prefix="kc-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in argv and int(entry.name) != os.getpid():
            found.append((int(entry.name), argv))
    return found


def device_index(name: str) -> int | None:
    """The network device's index, None when no device has that name."""
    try:
        return int(Path(f"/sys/class/net/{name}/ifindex").read_text())
    except (OSError, ValueError):
        return None


@pytest.mark.timeout(kube_local.TEST_TIMEOUT + 300)
@pytest.mark.parametrize("crashed", [None, "containerd"])
def test_down_after_a_pod_ran_leaves_nothing_on_the_host(short_dir: Path, crashed: str | None) -> None:
    """Also when containerd was SIGKILLed first: then no one deletes the containers for `down`,
    and the shims (daemons, reparented to init) and the containers' processes are found by their
    program and containerd address, and by the node's cgroups."""
    directory = short_dir / "cluster"
    results = Path("/var/lib/cni/results")  # libcni's cache (a fixed path): nothing of ours may stay
    cluster = LocalCluster.up(directory, nodes=1, real_nodes=1, owner_pid=os.getpid())
    try:
        namespace = cluster.new_namespace("leftovers")
        cluster.apply(namespace, real_pod("web"))
        wait_until(lambda: ready(pod(cluster, namespace, "web")), POD_TIMEOUT, 0.5, "web Ready")
        node = cluster.state()["real_nodes"][0]
        assert Path(f"/sys/class/net/{node['bridge']}/brif").is_dir()
        ctr = [str(cluster.bin_dir / "ctr"), "--address", str(directory / "node-0" / "containerd.sock")]
        listed = subprocess.run([*ctr, "--namespace", "k8s.io", "containers", "list", "--quiet"],
                                capture_output=True, text=True, timeout=HTTP_TIMEOUT, check=True)  # fmt: skip
        containers = listed.stdout.split()
        assert len(containers) == 2, containers  # the sandbox and the app
        veths = os.listdir(f"/sys/class/net/{node['bridge']}/brif")
        assert veths, "no veth on the bridge"
        # The devices by index too: another cluster on the host may take the freed name at once.
        indexes = {name: device_index(name) for name in (node["bridge"], *veths)}
        assert processes_mentioning(str(directory))
        if crashed is not None:
            os.kill(cluster.pids()[f"{crashed}-{NODE}"], signal.SIGKILL)
    finally:
        done = cluster.down()
    assert done.returncode == 0, done.stderr
    assert not directory.exists()
    assert not processes_mentioning(str(directory))
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    assert not [m for m in mounts if m.startswith(str(directory))]
    assert not [name for name, index in indexes.items() if device_index(name) == index], indexes
    for hierarchy in CGROUP_V1.iterdir():
        assert not (hierarchy / node["cgroup_root"].lstrip("/")).exists(), hierarchy
    logs = Path("/var/log/containers")
    if logs.is_dir():
        assert not [link for link in logs.iterdir() if str(directory) in os.readlink(link)]
    if results.is_dir():  # NETWORK-CONTAINER-IFNAME
        ours = [r.name for r in results.iterdir() if any(f"-{c}-" in r.name for c in containers)]
        assert not ours and not list(results.glob(f"servo-actors-{node['bridge']}-*"))
