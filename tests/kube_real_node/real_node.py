"""What the tests of the real node share: its name, label and toleration, the app image, a pod's
readiness and a container's cgroup directory on the host."""

from __future__ import annotations

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
