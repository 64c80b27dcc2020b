"""Benchmark the local Kubernetes cluster (scripts/kube-cluster): build, up, down, first metrics.

    python scripts/bench_kube_cluster.py              # cached build check, 3 x (up, down), one metrics run
    python scripts/bench_kube_cluster.py --ups 1      # a smoke check
    python scripts/bench_kube_cluster.py --cold       # also a cold build (about 8 min on a fresh 2-core machine)

Cached: `build` with everything built (what scripts/test pays on each run), then `up` (with its
default real node) into a fresh directory and `down`, each timed as a whole process; in one of the
clusters a Deployment with simulated load and an HPA are created, and the time to the pod's first
metrics and to the HPA's rescale are read, and three pods of the app image are started on the real
node one after another (created -> Ready). Cold (--cold): `build` into an empty cache with an empty GOCACHE (the
module cache is shared: downloads are not counted), per wrapper module from the script's own
"built kube/X in N s" lines; only this writes the cold section.

Prints the numbers and writes them into BENCHMARKS.md (the sections between the
bench_kube_cluster markers). Every cluster it starts is taken down (`down`, and `--owner-pid`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

from bench_support.report import load_average, machine, write_section  # noqa: E402
from kube_local import LocalCluster  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "kube-cluster"
BENCHMARKS = ROOT / "BENCHMARKS.md"
MARKS = ("<!-- bench_kube_cluster:start -->", "<!-- bench_kube_cluster:end -->")
COLD_MARKS = ("<!-- bench_kube_cluster_cold:start -->", "<!-- bench_kube_cluster_cold:end -->")
BUILD_TIMEOUT = 3 * 3600.0
STEP_TIMEOUT = 600.0
"""Seconds for one cached `up` or `down` (only a hang reaches it)."""
METRICS_TIMEOUT = 300.0
POLL = 1.0
CACHED_BUILDS = 3
BUILT_LINE = re.compile(r"built kube/(\S+) in (\d+) s")
USAGE = {"kwok.x-k8s.io/usage-cpu": "200m", "kwok.x-k8s.io/usage-memory": "100Mi"}
REAL_LABEL = "servo-actors.io/node"
REAL_POD_STARTS = 3
REAL_POD_POLL = 0.1


class BenchError(Exception):
    pass


def timed(args: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[float, str, str]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, env=env
    )
    took = time.monotonic() - started
    if done.returncode != 0:
        raise BenchError(
            f"kube-cluster {' '.join(args)} failed (exit {done.returncode}): {done.stderr[-2000:]}"
        )
    return took, done.stdout, done.stderr


def cold_build() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-kube-cold-") as scratch:
        env = {**os.environ, "XDG_CACHE_HOME": f"{scratch}/cache", "GOCACHE": f"{scratch}/go-build"}
        took, _, stderr = timed(["build"], BUILD_TIMEOUT, env)
    per_module: dict[str, int] = {}
    for module, seconds in BUILT_LINE.findall(stderr):  # kube/containerd builds in two steps
        per_module[module] = per_module.get(module, 0) + int(seconds)
    return {"total_s": round(took), "per_module_s": per_module}


def first_metrics(cluster: LocalCluster) -> dict[str, float]:
    """Deployment + HPA created -> first pod metrics served -> the HPA asking for 4 replicas."""
    namespace = cluster.new_namespace("bench-metrics")
    labels = {"app": "loaded"}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "loaded"},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels, "annotations": USAGE},
            "spec": {"containers": [{"name": "main", "image": "registry.local/app:1",
                                     "resources": {"requests": {"cpu": "100m"}}}]}}},
    }  # fmt: skip
    hpa = {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "loaded"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "loaded"},
                 "minReplicas": 1, "maxReplicas": 4,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                     "type": "Utilization", "averageUtilization": 50}}}]},
    }  # fmt: skip
    started = time.monotonic()
    cluster.apply(namespace, deployment, hpa)
    figures: dict[str, float] = {}
    deadline = started + METRICS_TIMEOUT
    while time.monotonic() < deadline and len(figures) < 2:
        if "metrics_s" not in figures:
            answer = cluster.try_get(f"/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods")
            if answer and answer["items"]:
                figures["metrics_s"] = time.monotonic() - started
        hpa_now = cluster.get(f"/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers/loaded")
        if "hpa_s" not in figures and hpa_now.get("status", {}).get("desiredReplicas") == 4:
            figures["hpa_s"] = time.monotonic() - started
        time.sleep(POLL)
    if len(figures) < 2:
        raise BenchError(f"no metrics or no rescale within {METRICS_TIMEOUT:.0f} s: {figures}")
    return figures


def real_pod_starts(cluster: LocalCluster) -> list[float]:
    """Pod with the app image created on the real node -> Ready (its readiness probe answered),
    REAL_POD_STARTS times one after another."""
    namespace = cluster.new_namespace("bench-real-pod")
    took = []
    for index in range(REAL_POD_STARTS):
        pod = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"app-{index}"},
            "spec": {"nodeSelector": {REAL_LABEL: "real"}, "terminationGracePeriodSeconds": 2,
                     "tolerations": [{"key": REAL_LABEL, "operator": "Equal", "value": "real", "effect": "NoSchedule"}],
                     "containers": [{"name": "main", "image": "servo-actors.local/app:dev", "imagePullPolicy": "IfNotPresent",
                                     "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 1}}]},
        }  # fmt: skip
        started = time.monotonic()
        cluster.apply(namespace, pod)
        deadline = started + METRICS_TIMEOUT
        while True:
            status = cluster.get(f"/api/v1/namespaces/{namespace}/pods/app-{index}").get("status", {})
            if any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", [])):
                took.append(time.monotonic() - started)
                break
            if time.monotonic() > deadline:
                raise BenchError(f"pod app-{index} not Ready on the real node within {METRICS_TIMEOUT:.0f} s")
            time.sleep(REAL_POD_POLL)
    return took


def cached_runs(ups: int) -> dict[str, Any]:
    builds = [timed(["build"], STEP_TIMEOUT)[0] for _ in range(CACHED_BUILDS)]
    up_s, down_s, metrics = [], [], {}
    for run in range(ups):
        with tempfile.TemporaryDirectory(prefix="bench-kube-") as scratch:
            directory = Path(scratch) / "cluster"
            took, stdout, _ = timed(
                ["up", "--dir", str(directory), "--owner-pid", str(os.getpid())], STEP_TIMEOUT
            )
            up_s.append(took)
            try:
                if run == 0:
                    cluster = LocalCluster(directory, Path(stdout.strip().splitlines()[-1]))
                    metrics = {**first_metrics(cluster), "real_pod_s": real_pod_starts(cluster)}
            finally:
                down_s.append(timed(["down", "--dir", str(directory)], STEP_TIMEOUT)[0])
            print(f"run {run + 1}: up {took:.1f} s, down {down_s[-1]:.1f} s", flush=True)
    return {"build_s": builds, "up_s": up_s, "down_s": down_s, **metrics}


def seconds(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.1f} s"
    return f"median {statistics.median(values):.1f} s (min {min(values):.1f}, max {max(values):.1f}; {len(values)} runs)"


def versions() -> str:
    pinned = dict(
        line.split("=", 1)
        for line in (ROOT / "kube" / "versions.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    return (
        f"Kubernetes {pinned['KUBERNETES_VERSION']}, etcd {pinned['ETCD_VERSION']}, kwok {pinned['KWOK_VERSION']}, "
        f"metrics-server {pinned['METRICS_SERVER_VERSION']}, containerd {pinned['CONTAINERD_VERSION']}, "
        f"runc {pinned['RUNC_VERSION']}, CNI plugins {pinned['CNI_PLUGINS_VERSION']}"
    )


def go_version() -> str:
    try:
        return subprocess.run(["go", "version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return subprocess.run(
            ["/usr/local/go/bin/go", "version"], capture_output=True, text=True, timeout=30
        ).stdout.strip()


def report(figures: dict[str, Any], where: dict[str, Any], load_after: str) -> str:
    return "\n".join([
        f"### Local Kubernetes cluster, cached (scripts/bench_kube_cluster.py, {where['date']})",
        "",
        f"Machine: {where['cpu']}, {where['cores']} cores, Linux {where['kernel']}, {go_version()}; "
        f"{versions()}; load average at start {where['load_at_start']}, at the end {load_after} "
        "(shared machine: other jobs ran).",
        "",
        "| step | wall time |",
        "|---|---:|",
        f"| `kube-cluster build`, everything built (what scripts/test pays) | {seconds(figures['build_s'])} |",
        "| `kube-cluster up`, binaries built: 2 simulated nodes and the real node Ready, every component healthy | "
        f"{seconds(figures['up_s'])} |",
        f"| `kube-cluster down` | {seconds(figures['down_s'])} |",
        f"| Deployment with simulated load + HPA created -> first pod metrics | {figures['metrics_s']:.0f} s |",
        f"| the same -> the HPA asking for 4 replicas | {figures['hpa_s']:.0f} s |",
        "| a Pod of the app image (imported) created on the real node -> Ready (sandbox, container, "
        f"readiness probe every 1 s) | {seconds(figures['real_pod_s'])} |",
        "",
    ]) + "\n"  # fmt: skip


def cold_report(cold: dict[str, Any], where: dict[str, Any]) -> str:
    modules = ", ".join(
        f"{module} {value // 60} min {value % 60} s" for module, value in cold["per_module_s"].items()
    )
    return (
        f"### Local Kubernetes cluster, cold build (scripts/bench_kube_cluster.py --cold, {where['date']})\n\n"
        f"Machine: {where['cpu']}, {where['cores']} cores, {go_version()}; load average at start "
        f"{where['load_at_start']}. Empty GOCACHE; modules already in the module cache (downloads not "
        f"counted).\n\n- `kube-cluster build`: {cold['total_s'] // 60} min {cold['total_s'] % 60} s in all "
        f"({modules}).\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ups", type=int, default=3, help="cached `up`/`down` runs (default 3)")
    parser.add_argument("--cold", action="store_true", help="also time a cold build (20-40 min on 2 cores)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args()
    where = machine()
    try:
        cold = cold_build() if args.cold else None
        figures = cached_runs(args.ups)
    except (BenchError, subprocess.TimeoutExpired) as exc:
        print(f"bench_kube_cluster: {exc}", file=sys.stderr)
        return 1
    text = report(figures, where, load_average())
    print(text + json.dumps({"cached": figures, "cold": cold}, indent=1))
    if not args.no_write:
        write_section(BENCHMARKS, text, MARKS)
        if cold is not None:
            write_section(BENCHMARKS, cold_report(cold, where), COLD_MARKS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
