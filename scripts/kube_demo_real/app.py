"""What the real demo optimizes: Deployment `web` of the project's app on the real node, the
servo's four connectors (kubernetes, loadgen, prometheus, and a `command` one reporting the cost),
and the optimizer's plan.

The numbers, measured on the project's 2-core machine (docs/walkthrough.md):
- the node's allocatable is 1 CPU and 2 GiB (scripts/kube-cluster), shared by every replica, so
  the baseline is 2 replicas of cpu 500m, memory 512Mi, GOGC 100 (the whole CPU the node offers),
  rolled out without a surge pod (maxSurge 0), which could never be scheduled beside them;
- each `/work` request costs WORK_MS ms of CPU; RATE_RPS of them is RATE_RPS * WORK_MS ms of CPU a
  second (0.25 core), a quarter of the node: honest for 2 cores that also run the control plane,
  the load generator and Prometheus, and enough that a CPU limit of 100m (quota 10 ms per 100 ms
  period) throttles every request.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

APP_ID = "demo.local/real-web"
DEPLOYMENT, CONTAINER, COMPONENT = "web", "main", "web"
IMAGE = "servo-actors.local/app:dev"
LABELS = {"app.kubernetes.io/name": "web", "app.kubernetes.io/part-of": "servo-kube-demo-real"}
NODE_LABEL = "servo-actors.io/node"
PORT = 8080
PATH = "/work"
WORK_MS = 10
RATE_RPS = 25.0
"""Requests a second to `/work`, over all pods, during every measurement (0.25 core of work)."""
CONCURRENCY = 8
SLO_P99_MS = 250.0
"""p99 latency of `/work` (server side, the app's histogram) that every setting must keep."""
MAX_ERROR_RATE = 0.01
MIN_THROUGHPUT_SHARE = 0.8
"""A setting must serve this share of RATE_RPS: one that cannot keep up is saturated, whatever its p99."""
CPU_WEIGHT = 1.0
"""Cost per core requested (per replica)."""
MEMORY_WEIGHT = 0.25
"""Cost per GiB requested (per replica): a GiB costs a quarter of a core, as cloud prices go."""
GOMAXPROCS = 1
"""Set in the manifest: Go's default never goes below 2, yet every CPU limit the demo tries is at
most 1 core; two threads would spend a 100 ms period's quota in half of it, then the container is
throttled for the rest (latency spikes). One thread spends it evenly."""
BASELINE = {"cpu": "500m", "memory": "512Mi", "replicas": 2, "GOGC": "100"}
MEASURE_SECONDS = 10.0
WARMUP_SECONDS = 10.0
"""As long as RATE_WINDOW_SECONDS: the range query's first point (at the window's start) then covers
loaded time only."""
RATE_WINDOW_SECONDS = 10.0
"""The whole window: a p99 over all its requests (a mean of p99s over shorter windows reads lower)."""
STEP_SECONDS = 10.0
DELAY_SECONDS = 3.0
"""After the window, so its last scrape lands (two scrape intervals)."""
SCRAPE_SECONDS = 1.0
ROLLOUT_TIMEOUT = 90.0
SETTLEMENT_SECONDS = 6.0
"""The kubernetes connector's settlement after each rollout: the new pods must stay ready this long
before the MEASURE starts, and it is as long as Prometheus takes to scrape a pod that just became
Ready (measured here 3.9-5.0 s: the pod list is read every second, and Prometheus's discovery
passes new targets on at most every 5 s). Without it the first point of every rate window after a
rollout missed the new pods' first seconds, and throughput read 14-15 requests/s of the 25 sent
(a mean of 19-20 with the window's second point): settings that held read as saturated."""


def cost(cpu_cores: float, memory_gib: float, replicas: int) -> float:
    """The objective: what the Deployment requests, weighted, times its replicas."""
    return round(replicas * (CPU_WEIGHT * cpu_cores + MEMORY_WEIGHT * memory_gib), 6)


def manifests(namespace: str) -> list[dict[str, Any]]:
    resources = {"cpu": BASELINE["cpu"], "memory": BASELINE["memory"]}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": DEPLOYMENT, "namespace": namespace, "labels": LABELS},
            "spec": {
                "replicas": BASELINE["replicas"],
                "selector": {"matchLabels": LABELS},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
                "template": {
                    "metadata": {"labels": LABELS},
                    "spec": {
                        "nodeSelector": {NODE_LABEL: "real"},
                        "tolerations": [{"key": NODE_LABEL, "operator": "Equal", "value": "real",
                                         "effect": "NoSchedule"}],
                        "terminationGracePeriodSeconds": 2,
                        "containers": [{
                            "name": CONTAINER, "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                            "ports": [{"containerPort": PORT, "name": "http"}],
                            "env": [{"name": "GOGC", "value": BASELINE["GOGC"]},
                                    {"name": "WORK_MS", "value": str(WORK_MS)},
                                    {"name": "GOMAXPROCS", "value": str(GOMAXPROCS)}],
                            "readinessProbe": {"httpGet": {"path": "/readyz", "port": PORT}, "periodSeconds": 1},
                            "resources": {"requests": resources, "limits": resources},
                        }],
                    },
                },
            },
        },
    ]  # fmt: skip


def p99_query(namespace: str, window: str) -> str:
    return (
        f"1000 * histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket"
        f'{{namespace="{namespace}", path="{PATH}"}}[{window}])))'
    )


def error_query(namespace: str, window: str) -> str:
    selector = f'namespace="{namespace}", path="{PATH}"'
    return (
        f'(sum(rate(http_request_duration_seconds_count{{{selector}, code!~"2.."}}[{window}])) or vector(0))'
        f" / sum(rate(http_request_duration_seconds_count{{{selector}}}[{window}]))"
    )


def throughput_query(namespace: str, window: str) -> str:
    return (
        f'sum(rate(http_request_duration_seconds_count{{namespace="{namespace}", path="{PATH}"}}[{window}]))'
    )


def servo_config(
    url: str, kubeconfig: Path, kubectl: Path, namespace: str, prometheus_url: str, target_url: str
) -> dict[str, Any]:
    window = f"{int(RATE_WINDOW_SECONDS)}s"
    step = f"{int(STEP_SECONDS)}s"
    cost_command = " ".join(
        [
            sys.executable,
            str(Path(__file__).resolve().parent / "cost.py"),
            "--kubeconfig",
            str(kubeconfig),
            "--kubectl",
            str(kubectl),
            "--namespace",
            namespace,
        ]
    )
    return {
        "optimizer": {"id": APP_ID, "base_url": url},
        "settings": {"progress_interval": "250ms", "timeouts": {"connect": "2s", "read": "10s"},
                     "backoff": {"min": "100ms", "max": "1s", "max_time": "30s"}},
        "connectors": [
            {"name": "cluster", "type": "kubernetes", "config": {
                "kubeconfig": str(kubeconfig), "namespace": namespace, "timeout": f"{ROLLOUT_TIMEOUT:g}s",
                "settlement": f"{SETTLEMENT_SECONDS:g}s", "on_failure": "rollback",
                "deployments": [{
                    "name": DEPLOYMENT, "replicas": {"min": 1, "max": 2},
                    "containers": [{
                        "name": CONTAINER,
                        "cpu": {"min": "100m", "max": "500m", "step": "50m"},
                        "memory": {"min": "64Mi", "max": "512Mi", "step": "64Mi"},
                        "env": [{"name": "GOGC", "type": "range", "min": 25, "max": 400, "step": 25}],
                    }],
                }],
            }},
            {"name": "load", "type": "loadgen", "config": {
                "url": target_url, "rate": RATE_RPS, "concurrency": CONCURRENCY, "timeout": "5s"}},
            {"name": "prom", "type": "prometheus", "config": {
                "base_url": prometheus_url, "timeout": "10s",
                "metrics": [
                    {"name": "p99_latency", "unit": "ms", "step": step, "absent": "fail",
                     "query": p99_query(namespace, window)},
                    {"name": "errors", "unit": "ratio", "step": step, "absent": "fail",
                     "query": error_query(namespace, window)},
                    {"name": "rps", "unit": "rps", "step": step, "absent": "fail",
                     "query": throughput_query(namespace, window)},
                ],
            }},
            {"name": "cost", "type": "command", "config": {
                "timeout": "20s",
                "describe": f"{cost_command} describe",
                "measure": f"{cost_command} measure",
            }},
        ],
    }  # fmt: skip


def plan(steps: int, seed: int) -> dict[str, Any]:
    return {
        "app": APP_ID,
        "steps": steps,
        "seed": seed,
        "measure": {"duration": MEASURE_SECONDS, "warmup": WARMUP_SECONDS, "delay": DELAY_SECONDS},
        "objective": {"minimize": "cost",
                      "constraints": [f"p99_latency <= {SLO_P99_MS:g}", f"errors <= {MAX_ERROR_RATE:g}",
                                      f"rps >= {MIN_THROUGHPUT_SHARE * RATE_RPS:g}"]},
        "metrics": ["cost", "p99_latency", "errors", "rps"],
        "search": {"initial_samples": 3},
        "confirm": {"repeats": 2, "candidates": 2},
        "sleep": 600,
    }  # fmt: skip
