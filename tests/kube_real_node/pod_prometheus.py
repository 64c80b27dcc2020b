"""A real Prometheus (tests/support/prometheus_server.py) for the pods of the real node: it scrapes
the app's /metrics on each pod's IP, and the real kubelet's cAdvisor endpoint (/metrics/cadvisor)
over TLS with the cluster's admin client certificate; and a measurement under load from the
project's ``loadgen`` connector, read back through the project's ``prometheus`` connector.

Debian's Prometheus (2.42) is built without Kubernetes discovery (``kubernetes_sd_configs`` fails:
"field kubernetes_sd_configs not found in type config.ScrapeConfig"), so the pods are handed to it
through ``file_sd_configs``, labelled as kubernetes_sd's relabelling would label them: ``namespace``,
``pod``, and ``role`` from the pod's ``servo-actors.io/role`` label (``tuning`` on the connector's
tuning pod; ``main`` where a pod has none). The node has no kube-proxy: traffic and scrapes go to
pod IPs.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from kube_local import LocalCluster
from prometheus_server import PrometheusServer
from waiting import wait_until

from servo_actors.connectors.base import Control
from servo_actors.connectors.loadgen import METRIC_UNITS, LoadgenConnector
from servo_actors.connectors.prometheus.connector import PrometheusConnector

__all__ = ["WINDOW", "PodPrometheus", "last_value", "measure_under_load", "role_of"]

APP_PORT = 8080
ROLE_LABEL = "servo-actors.io/role"
APP_JOB, CADVISOR_JOB = "app", "cadvisor"
CADVISOR_KEEP = "container_cpu_cfs_.*|container_cpu_usage_seconds_total"
"""The cAdvisor series Prometheus keeps (the endpoint has hundreds per container)."""
SCRAPED_TIMEOUT = 60.0
"""Seconds for a new pod's series (its app metrics and its container's cAdvisor counters) to reach
Prometheus: a file_sd refresh plus a scrape and one cAdvisor housekeeping (1 s each here)."""
WARMUP, WINDOW, DELAY = 2.0, 8.0, 2.0
"""Each measurement's control: load starts WARMUP seconds before the WINDOW Prometheus reads; DELAY
after it lets the last scrapes land (kubelet's cAdvisor stamps its samples with its own reading
times, up to a housekeeping interval behind)."""
LOAD_JOIN_TIMEOUT = 60.0
"""Bound on the load's thread after the measurement (loadgen stops at the window's end)."""


def role_of(pod: dict[str, Any]) -> str:
    return str((pod["metadata"].get("labels") or {}).get(ROLE_LABEL, "main"))


class PodPrometheus:
    """One Prometheus for a test: ``scrape`` names the pods, ``wait_scraped`` waits for their series,
    ``stop`` ends it by PID."""

    def __init__(self, cluster: LocalCluster, workdir: Path, namespace: str) -> None:
        self.namespace = namespace
        self.targets = workdir / "pods.json"
        self.targets.write_text("[]")
        node = cluster.state()["real_nodes"][0]
        pki = cluster.dir / "pki"
        self.server = PrometheusServer(workdir, [], scrape_configs=[
            {"job_name": APP_JOB,
             "file_sd_configs": [{"files": [str(self.targets)], "refresh_interval": "1s"}]},
            {"job_name": CADVISOR_JOB, "scheme": "https", "metrics_path": "/metrics/cadvisor",
             # the kubelet's serving certificate names its bridge address; the admin certificate
             # passes its webhook authentication and authorization (system:masters)
             "tls_config": {"ca_file": str(pki / "ca.crt"), "cert_file": str(pki / "admin.crt"),
                            "key_file": str(pki / "admin.key")},
             "static_configs": [{"targets": [f"{node['gateway']}:{node['kubelet_port']}"]}],
             "metric_relabel_configs": [{"source_labels": ["__name__"], "regex": CADVISOR_KEEP,
                                         "action": "keep"}]},
        ])  # fmt: skip
        self.url = self.server.base_url
        try:
            self.server.wait_ready()
        except BaseException:
            self.server.stop()
            raise

    def scrape(self, pods: list[dict[str, Any]]) -> None:
        """Scrape exactly ``pods`` (on their IPs), labelled namespace, pod and role; written
        atomically (a rename), as file_sd expects."""
        targets = [
            {"targets": [f"{p['status']['podIP']}:{APP_PORT}"],
             "labels": {"namespace": self.namespace, "pod": p["metadata"]["name"], "role": role_of(p)}}
            for p in pods
        ]  # fmt: skip
        partial = self.targets.with_suffix(".tmp")
        partial.write_text(json.dumps(targets))
        os.replace(partial, self.targets)

    def wait_scraped(self, names: list[str]) -> None:
        """Until each pod's app target is up and its container ``main`` has cAdvisor CFS counters."""
        for name in names:
            pod = f'namespace="{self.namespace}", pod="{name}"'
            for query in (f'up{{job="{APP_JOB}", {pod}}} == 1',
                          f'container_cpu_cfs_periods_total{{{pod}, container="main"}}'):  # fmt: skip
                wait_until(
                    lambda q=query: bool(self.server.query(q)), SCRAPED_TIMEOUT, 0.5, f"{query} in Prometheus"
                )

    def stop(self) -> None:
        self.server.stop()


def measure_under_load(
    prometheus_url: str, load: dict[str, Any], metrics: list[dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``loadgen`` connector (config ``load``) and the ``prometheus`` connector (``metrics``) measuring
    the same control at once, as the servo runs a MEASURE's connectors: their two results."""
    control = Control(duration=WINDOW, warmup=WARMUP, delay=DELAY)
    generator = LoadgenConnector("load", {"timeout": "5s", **load})
    reader = PrometheusConnector("prom", {"base_url": prometheus_url, "timeout": "10s", "metrics": metrics})
    loaded: dict[str, Any] = {}

    def run_load() -> None:
        try:
            loaded["result"] = generator.measure(list(METRIC_UNITS), control, lambda *_: None)
        except Exception as exc:  # re-raised by the test's thread below
            loaded["error"] = exc

    thread = threading.Thread(target=run_load, name="loadgen", daemon=True)
    thread.start()
    try:
        measured = reader.measure([m["name"] for m in metrics], control, lambda *_: None)
    finally:
        thread.join(LOAD_JOIN_TIMEOUT)
    assert not thread.is_alive(), "the load did not stop"
    if "error" in loaded:
        raise loaded["error"]
    return loaded["result"], measured


def last_value(measured: dict[str, Any], name: str) -> tuple[str, float]:
    """The one series of metric ``name``: its id and its value at the window's end (the range
    query's last point, whose rate covers the window)."""
    series = measured["metrics"][name]["values"]
    assert len(series) == 1, f"{name}: {len(series)} series, one expected: {series}"
    assert series[0]["data"], f"{name}: no finite point: {series}"
    return series[0]["id"], float(series[0]["data"][-1][1])
