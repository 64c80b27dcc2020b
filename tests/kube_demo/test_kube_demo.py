"""scripts/kube-demo end to end on the real local cluster: the optimization through the
``kubernetes`` connector with Abort pressed, the recommendation applied, nothing left running.

It runs on the session's cluster (``kube_cluster``), which the demo finds running in ``--dir`` and
so reuses and leaves up: that is checked too. The path where the demo starts its own cluster and
brings it down is the same code with `up`/`down` around it (see the README's quick start)."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kube_local import LocalCluster
from waiting import wait_until

from servo_actors.connectors.kubernetes.units import parse_cpu, parse_memory

pytestmark = [pytest.mark.kube, pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parent.parent.parent / "scripts" / "kube-demo"
DEMO_TIMEOUT = 240.0
"""Upper bound only a hang reaches: the run takes ~20 s on 2 busy cores."""
LEFTOVER_TIMEOUT = 10.0
"""The demo's processes are gone when it exits; this bounds the last actor process's exit."""
MARK = "SERVO_KUBE_DEMO_TEST_MARK"
RECOMMENDED = re.compile(r"^recommended: step \d+: (?P<settings>.*?)  \(", re.MULTILINE)


def marked_processes(mark: str) -> list[int]:
    """PIDs of our processes whose environment carries ``MARK=mark`` (the demo and its descendants)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if f"{MARK}={mark}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours
            continue
    return found


def held(cluster: LocalCluster, namespace: str) -> dict[str, Any]:
    deployment = cluster.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/web")
    hpa = cluster.get(f"/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers/web")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    requests_, limits = container["resources"]["requests"], container["resources"]["limits"]
    assert requests_ == limits  # the connector sets both
    return {
        "cpu": parse_cpu(requests_["cpu"]),
        "memory": parse_memory(requests_["memory"]),
        "GC": next(e["value"] for e in container["env"] if e["name"] == "GC"),
        "hpa_min_replicas": hpa["spec"]["minReplicas"],
    }


def test_the_demo_applies_its_recommendation_and_leaves_nothing_running(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    mark = secrets.token_hex(8)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dir", str(kube_cluster.dir), "--namespace", kube_namespace,
         "--steps", "2", "--abort-every", "3"],
        env={**os.environ, MARK: mark}, capture_output=True, text=True, timeout=DEMO_TIMEOUT,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n{out}\n{done.stderr}"

    assert f"reusing the one running in {kube_cluster.dir}" in out
    assert "the optimizer cancelled MEASURE" in out  # the 3rd operation, a 4 s MEASURE, was aborted
    found = RECOMMENDED.search(out)
    assert found, out
    recommended = dict(pair.split("=", 1) for pair in found["settings"].split())
    in_cluster = held(kube_cluster, kube_namespace)
    assert {k: str(v) if isinstance(v, str) else float(v) for k, v in in_cluster.items()} == {
        k: v if k == "GC" else float(v) for k, v in recommended.items()
    }
    assert f"$ kubectl get deploy,hpa -n {kube_namespace}" in out
    assert "horizontalpodautoscaler.autoscaling/web" in out
    assert "the cluster holds the recommendation" in out

    wait_until(lambda: not marked_processes(mark), LEFTOVER_TIMEOUT, 0.1, "no process of the demo left")
    assert kube_cluster.status().returncode == 0  # a cluster it did not start stays up
