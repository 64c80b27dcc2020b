"""The effect of a CPU limit on real pods of the real node, as the servo sees it: the project's
``loadgen`` sends requests straight to the pods' IPs (the node has no kube-proxy, so no Service
carries traffic), a real Prometheus scrapes the app's latency histogram on each pod and the real
kubelet's cAdvisor counters (``container_cpu_cfs_throttled_periods_total``), and the ``prometheus``
connector reads them back over the measured window.

Each /work request costs WORK_MS of CPU on one thread (GOMAXPROCS=1). At HIGH (500m: a 50 ms quota
per 100 ms period) a request runs unthrottled; at LOW (50m: a 5 ms quota) the same request needs
its quota of at least four periods, so it lasts 300 ms or more and the container is throttled in
every period it works. The limits are ten times apart so that no amount of CPU contention on the
host can turn the comparison around."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from kube_local import LocalCluster
from pod_prometheus import WINDOW, PodPrometheus, last_value, measure_under_load, role_of
from real_node import APP_IMAGE, NODE, POD_TIMEOUT, REAL, container_cgroup, ready
from waiting import wait_until

from servo_actors.connectors.base import Control
from servo_actors.connectors.kubernetes import KubernetesConnector

pytestmark = [pytest.mark.kube, pytest.mark.slow]

WORK_MS = 20
HIGH, LOW = "500m", "50m"
RATE = 1.5
"""Requests a second to each pod: 30 ms of CPU a second, 60 % of what LOW allows (it keeps up)."""
CONCURRENCY = 4
PERIOD = 100_000
"""cpu.cfs_period_us the kubelet sets (100 ms)."""


def web() -> dict[str, Any]:
    """Deployment ``web``: one replica of the app on the real node at HIGH, readiness every second."""
    resources = {"cpu": HIGH, "memory": "64Mi"}
    main = {
        "name": "main", "image": APP_IMAGE, "imagePullPolicy": "IfNotPresent",
        "ports": [{"containerPort": 8080, "name": "http"}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 1},
        "env": [{"name": "WORK_MS", "value": str(WORK_MS)}, {"name": "GOMAXPROCS", "value": "1"}],
        "resources": {"requests": resources, "limits": resources},
    }  # fmt: skip
    spec = {**copy.deepcopy(REAL), "terminationGracePeriodSeconds": 1, "containers": [main]}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": spec}},
    }  # fmt: skip


def connector(cluster: LocalCluster, namespace: str, **deployment: Any) -> KubernetesConnector:
    return KubernetesConnector("k8s", {
        "kubeconfig": str(cluster.kubeconfig), "namespace": namespace, "timeout": "60s",
        "deployments": [{"name": "web", **deployment, "containers": [{
            "name": "main", "cpu": {"min": "50m", "max": "500m", "step": "50m"},
            "memory": {"min": "64Mi", "max": "256Mi", "step": "64Mi"},
        }]}],
    })  # fmt: skip


def serving(cluster: LocalCluster, namespace: str) -> list[dict[str, Any]]:
    """The pods that are Ready and not terminating."""
    pods = cluster.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    return [p for p in pods if ready(p) and not p["metadata"].get("deletionTimestamp")]


def one_serving(cluster: LocalCluster, namespace: str, exclude: str = "") -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        pods = [p for p in serving(cluster, namespace) if p["metadata"]["uid"] != exclude]
        return pods[0] if len(pods) == 1 else None

    pod = wait_until(found, POD_TIMEOUT, 0.5, "web's pod Ready")
    assert pod["spec"]["nodeName"] == NODE
    return pod  # type: ignore[no-any-return]


def quota(cluster: LocalCluster, pod: dict[str, Any]) -> int:
    return int((container_cgroup(cluster, pod, "cpu") / "cpu.cfs_quota_us").read_text())


def pod_queries(namespace: str, selector: str, pod: str) -> dict[str, str]:
    """PromQL over the window for the app's series matching ``selector`` and the cAdvisor series of
    container main of ``pod``: p99 of /work (ms), requests a second, throttled periods a second."""
    app = f'namespace="{namespace}", {selector}, path="/work"'
    window = f"{WINDOW:g}s"
    return {
        "p99": f"1000 * histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket{{{app}}}[{window}])))",
        "rps": f"sum(rate(http_request_duration_seconds_count{{{app}}}[{window}]))",
        "throttled": f'rate(container_cpu_cfs_throttled_periods_total{{namespace="{namespace}", pod="{pod}", container="main"}}[{window}])',
    }  # fmt: skip


def metrics(prefix: str, queries: dict[str, str]) -> list[dict[str, Any]]:
    units = {"p99": "ms", "rps": "rps", "throttled": "periods/s"}
    return [{"name": f"{prefix}{name}", "unit": units[name], "query": query, "step": f"{WINDOW:g}s",
             "absent": "fail"} for name, query in queries.items()]  # fmt: skip


def test_a_lower_cpu_limit_raises_p99_and_throttling_as_the_prometheus_connector_reads_them(
    kube_cluster: LocalCluster, kube_namespace: str, tmp_path: Path
) -> None:
    prometheus = PodPrometheus(kube_cluster, tmp_path, kube_namespace)
    try:
        kube_cluster.apply(kube_namespace, web())
        readings = {}
        pod = one_serving(kube_cluster, kube_namespace)
        for limit in (HIGH, LOW):
            if limit == LOW:  # the connector's ADJUST: a rollout to a new pod at the low limit
                connector(kube_cluster, kube_namespace).adjust(
                    {"web": {"settings": {"cpu": {"value": 0.05}}}}, Control(), lambda *_: None
                )
                pod = one_serving(kube_cluster, kube_namespace, exclude=pod["metadata"]["uid"])
            assert quota(kube_cluster, pod) == PERIOD * int(limit.removesuffix("m")) // 1000
            name = pod["metadata"]["name"]
            prometheus.scrape([pod])
            prometheus.wait_scraped([name])
            loaded, measured = measure_under_load(
                prometheus.url,
                {
                    "url": f"http://{pod['status']['podIP']}:8080/work",
                    "rate": RATE,
                    "concurrency": CONCURRENCY,
                },
                metrics("", pod_queries(kube_namespace, f'pod="{name}"', name)),
            )
            assert loaded["metrics"]["error_rate"]["value"] == 0, loaded
            readings[limit] = {key: last_value(measured, key)[1] for key in ("p99", "rps", "throttled")}
        high, low = readings[HIGH], readings[LOW]
        print(f"at {HIGH}: {high}; at {LOW}: {low}")
        assert high["rps"] > 0 and low["rps"] > 0, readings
        assert low["p99"] > high["p99"], readings
        assert low["throttled"] > high["throttled"] and low["throttled"] > 0, readings
    finally:
        prometheus.stop()


def test_the_tuning_pod_takes_real_traffic_and_its_measurements_are_its_own_series(
    kube_cluster: LocalCluster, kube_namespace: str, tmp_path: Path
) -> None:
    prometheus = PodPrometheus(kube_cluster, tmp_path, kube_namespace)
    try:
        kube_cluster.apply(kube_namespace, web())
        main = one_serving(kube_cluster, kube_namespace)
        # The tuning pod at the low limit beside the Deployment's pod at the high one.
        connector(kube_cluster, kube_namespace, strategy="tuning").adjust(
            {"web-tuning": {"settings": {"cpu": {"value": 0.05}}}}, Control(), lambda *_: None
        )
        pods = {role_of(p): p for p in serving(kube_cluster, kube_namespace)}
        assert sorted(pods) == ["main", "tuning"], pods
        tuning = pods["tuning"]
        assert pods["main"]["metadata"]["uid"] == main["metadata"]["uid"]
        assert tuning["metadata"]["name"] == "web-tuning" and tuning["spec"]["nodeName"] == NODE
        assert quota(kube_cluster, tuning) == PERIOD // 20 and quota(kube_cluster, main) == PERIOD // 2
        prometheus.scrape([main, tuning])
        prometheus.wait_scraped([main["metadata"]["name"], "web-tuning"])
        # The load alternates between the two pods' IPs (loadgen's targets file).
        targets = tmp_path / "targets.txt"
        targets.write_text(
            "".join(f"GET http://{p['status']['podIP']}:8080/work\n\n" for p in (main, tuning))
        )
        queries = {
            role: pod_queries(kube_namespace, f'role="{role}"', p["metadata"]["name"])
            for role, p in pods.items()
        }
        own = queries["tuning"]["rps"].replace("sum(rate(", "(rate(", 1)  # each series, not their sum
        loaded, measured = measure_under_load(
            prometheus.url,
            {"targets_file": str(targets), "rate": 2 * RATE, "concurrency": CONCURRENCY},
            [*metrics("main_", queries["main"]), *metrics("tuning_", queries["tuning"])]
            + [{"name": "tuning_series", "query": own, "step": f"{WINDOW:g}s",
                "absent": "fail"}],
        )  # fmt: skip
        assert loaded["metrics"]["error_rate"]["value"] == 0, loaded
        # The tuning pod's query answers with its own series only: the app's, labelled by the
        # connector's role label, and the kubelet's for its container.
        series, _ = last_value(measured, "tuning_series")
        assert 'pod="web-tuning"' in series and 'role="tuning"' in series, series
        throttled_series, _ = last_value(measured, "tuning_throttled")
        assert 'pod="web-tuning"' in throttled_series and 'container="main"' in throttled_series
        values = {
            role: {key: last_value(measured, f"{role}_{key}")[1] for key in ("p99", "rps", "throttled")}
            for role in ("main", "tuning")
        }
        print(values)
        assert values["tuning"]["rps"] > 0 and values["main"]["rps"] > 0, values
        assert values["tuning"]["p99"] > values["main"]["p99"], values
        assert values["tuning"]["throttled"] > values["main"]["throttled"], values
    finally:
        prometheus.stop()
