"""What the tests of the real node share: its name, label and toleration, the app image, a pod's
readiness, a container's cgroup directory on the host, and the containers its containerd runs
(through its own `ctr`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from kube_local import LocalCluster

NODE = "real-node-0"
LABEL = "servo-actors.io/node"
APP_IMAGE = "servo-actors.local/app:dev"
REAL = {"nodeSelector": {LABEL: "real"},
        "tolerations": [{"key": LABEL, "operator": "Equal", "value": "real", "effect": "NoSchedule"}]}  # fmt: skip
POD_TIMEOUT = 120.0
"""Seconds for a pod on the real node to start (sandbox, container, readiness) or to fail as asked:
a few seconds on an idle machine; only a hang breaks this bound."""
CGROUP_V1 = Path("/sys/fs/cgroup")


def ready(p: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))


def container_cgroup(cluster: LocalCluster, p: dict[str, Any], controller: str) -> Path:
    """The container's cgroup directory in a v1 hierarchy, under the node's cgroup root."""
    node = next(n for n in cluster.state()["real_nodes"] if n["name"] == p["spec"]["nodeName"])
    container_id = p["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    root = CGROUP_V1 / controller / node["cgroup_root"].lstrip("/") / "kubepods"
    found = list(root.rglob(container_id))
    assert len(found) == 1, f"container {container_id} under {root}: {found}"
    return found[0]


CTR_TIMEOUT = 20.0
"""Seconds for one `ctr` call to the real node's containerd."""


def ctr(cluster: LocalCluster, *args: str) -> str:
    """``ctr ARGS`` against the (first) real node's containerd, in the CRI's k8s.io namespace: its
    stdout (AssertionError with its stderr unless it exits 0)."""
    node = cluster.state()["real_nodes"][0]
    address = cluster.dir / f"node-{node['index']}" / "containerd.sock"
    command = [str(cluster.bin_dir / "ctr"), "--address", str(address), "--namespace", "k8s.io", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=CTR_TIMEOUT, check=False)
    assert done.returncode == 0, f"ctr {' '.join(args)} exited {done.returncode}: {done.stderr}"
    return done.stdout


def running_containers(cluster: LocalCluster, namespace: str) -> dict[str, str]:
    """``{container id: pod uid}`` of every container of a pod of ``namespace`` whose task is running
    in the real node's containerd (sandboxes included), read from containerd itself."""
    tasks = ctr(cluster, "tasks", "list").splitlines()[1:]  # TASK PID STATUS
    running = [fields[0] for fields in (line.split() for line in tasks) if fields and fields[-1] == "RUNNING"]
    found = {}
    for container in running:
        labels = json.loads(ctr(cluster, "containers", "info", container)).get("Labels") or {}
        if labels.get("io.kubernetes.pod.namespace") == namespace:
            found[container] = labels["io.kubernetes.pod.uid"]
    return found
