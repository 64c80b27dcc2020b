"""servox's ``opsani_dev`` connector: a ``kubernetes`` and a ``prometheus`` connector here.

servox's ``opsani_dev`` built, from a few keys, a kubernetes connector (the Deployment under the
canary strategy, its one container aliased ``main``, replicas pinned), a prometheus connector
with Envoy's request metrics split by ``opsani_role`` (main vs tuning), and a kube_metrics
connector; its checks injected an Envoy sidecar into the Deployment and annotated the Service.
The converter writes the same kubernetes, prometheus and kube_metrics configuration (through the
converters of those connectors), named ``KEY``, ``KEY-prometheus`` and ``KEY-kube_metrics``. Not
carried over, and listed: the sidecar injection and the Service (do it in the manifests).

servox measured with Prometheus at ``http://localhost:9090`` whatever ``prometheus_base_url`` said
(its checks used the setting, its measurements did not: a defect); the converter uses
``prometheus_base_url``.
"""

from __future__ import annotations

from typing import Any

from servo_actors.connectors.kubernetes.kube_metrics import KUBE_METRICS
from servo_actors.servox_import.conversion import Conversion, Entry, cannot_convert, check_keys
from servo_actors.servox_import.kubernetes import convert_kubernetes
from servo_actors.servox_import.prometheus import convert_prometheus
from servo_actors.servox_import.simple import kube_metrics_entry

__all__ = ["ENVOY_METRICS", "convert_opsani_dev"]

SIDECAR_PROMETHEUS_URL = "http://localhost:9090"
_KEYS = {
    "description", "namespace", "deployment", "workload_name", "workload_kind", "container", "service", "port",
    "cpu", "memory", "env", "static_environment_variables", "prometheus_base_url", "envoy_sidecar_image",
    "timeout", "settlement", "container_logs_in_error_status", "create_tuning_pod",
}  # fmt: skip
_ROLE_MAIN = 'opsani_role!="tuning"'
_ROLE_TUNING = 'opsani_role="tuning"'
_RQ_XX = 'avg(sum by(kubernetes_pod_name)(rate(envoy_cluster_upstream_rq_xx{{{role}, envoy_response_code_class=~"{codes}"}}[1m])))'
_LATENCY = "avg(histogram_quantile({q},rate(envoy_cluster_upstream_rq_time_bucket{{{role}}}[1m])))"
ENVOY_METRICS: list[dict[str, Any]] = [
    {"name": "main_instance_count", "unit": "count", "query": f"sum(envoy_cluster_membership_healthy{{{_ROLE_MAIN}}})"},
    {"name": "tuning_instance_count", "unit": "count", "query": f"envoy_cluster_membership_healthy{{{_ROLE_TUNING}}}"},
    {"name": "total_request_rate", "unit": "rps", "query": "sum(rate(envoy_cluster_upstream_rq_total[1m]))"},
    {"name": "main_request_rate", "unit": "rps", "query": f"avg(rate(envoy_cluster_upstream_rq_total{{{_ROLE_MAIN}}}[1m]))"},
    {"name": "tuning_request_rate", "unit": "rps", "query": f"avg(rate(envoy_cluster_upstream_rq_total{{{_ROLE_TUNING}}}[1m]))"},
    {"name": "main_success_rate", "unit": "rps", "query": _RQ_XX.format(role=_ROLE_MAIN, codes="2|3")},
    {"name": "tuning_success_rate", "unit": "rps", "query": _RQ_XX.format(role=_ROLE_TUNING, codes="2|3"), "absent": "zero"},
    {"name": "main_error_rate", "unit": "rps", "query": _RQ_XX.format(role=_ROLE_MAIN, codes="4|5"), "absent": "zero"},
    {"name": "tuning_error_rate", "unit": "rps", "query": _RQ_XX.format(role=_ROLE_TUNING, codes="4|5"), "absent": "zero"},
    {"name": "main_p90_latency", "unit": "ms", "query": _LATENCY.format(q="0.9", role=_ROLE_MAIN)},
    {"name": "tuning_p90_latency", "unit": "ms", "query": _LATENCY.format(q="0.9", role=_ROLE_TUNING)},
    {"name": "main_p50_latency", "unit": "ms", "query": _LATENCY.format(q="0.5", role=_ROLE_MAIN)},
    {"name": "tuning_p50_latency", "unit": "ms", "query": _LATENCY.format(q="0.5", role=_ROLE_TUNING)},
]  # fmt: skip
"""servox 25.3.0's opsani_dev metrics (``generate_prometheus_config``), each with servox's step 1m."""


def convert_opsani_dev(conversion: Conversion, key: str, settings: Any) -> list[Entry]:
    source = conversion.source
    dev = check_keys(source, key, settings, _KEYS)
    workload = dev.get("workload_name") or dev.get("deployment")
    for field, value in (
        ("deployment", workload),
        ("namespace", dev.get("namespace")),
        ("container", dev.get("container")),
    ):
        if not value:
            raise cannot_convert(source, f"{key}.{field}", "servox requires it")
    if str(dev.get("workload_kind", "Deployment")).lower() != "deployment":
        raise cannot_convert(source, f"{key}.workload_kind", "opsani_dev optimizes Deployments only")
    tuning = dev.get("create_tuning_pod", True) is not False
    cpu = {"step": "125m", **_mapping(source, f"{key}.cpu", dev.get("cpu"))}
    memory = {"step": "128Mi", **_mapping(source, f"{key}.memory", dev.get("memory"))}
    if not tuning:
        cpu["pinned"] = memory["pinned"] = True
    container: dict[str, Any] = {"name": dev["container"], "alias": "main", "cpu": cpu, "memory": memory}
    if dev.get("env"):
        container["env"] = dev["env"]
    if dev.get("static_environment_variables"):
        container["static_environment_variables"] = dev["static_environment_variables"]
    deployment: dict[str, Any] = {
        "name": workload,
        "containers": [container],
        "replicas": {"min": 0, "max": 1 if tuning else 99999, "pinned": True},
    }
    if tuning:
        deployment["strategy"] = {"type": "canary", "alias": "tuning"}
    kubernetes: dict[str, Any] = {
        "namespace": dev["namespace"],
        "timeout": dev.get("timeout", "5m"),
        "deployments": [deployment],
    }
    if dev.get("settlement") is not None:
        kubernetes["settlement"] = dev["settlement"]
    if dev.get("container_logs_in_error_status"):
        kubernetes["container_logs_in_error_status"] = True
    entries = convert_kubernetes(conversion, key, kubernetes)
    entries[0].comment(
        ("type",), f"from servox's opsani_dev connector {key}: its Deployment under the canary strategy"
    )

    metrics = [
        {**metric, "step": "1m"} for metric in ENVOY_METRICS if tuning or _ROLE_TUNING not in metric["query"]
    ]
    base_url = dev.get("prometheus_base_url") or SIDECAR_PROMETHEUS_URL
    prometheus = convert_prometheus(
        conversion, f"{key}-prometheus", {"base_url": base_url, "metrics": metrics}
    )
    prometheus[0].comment(
        ("name",), f"from servox's opsani_dev connector {key}: Envoy's request metrics, main vs tuning pod"
    )
    if dev.get("prometheus_base_url") and dev["prometheus_base_url"] != SIDECAR_PROMETHEUS_URL:
        prometheus[0].comment(
            ("config", "base_url"),
            f"servox's opsani_dev measured at {SIDECAR_PROMETHEUS_URL} whatever prometheus_base_url said; "
            "here prometheus_base_url is used",
        )
    conversion.drop(
        f"{key}.service",
        "servox's checks injected an Envoy sidecar (envoy_sidecar_image) into the Deployment and pointed "
        f"the Service {dev.get('service')!r}{' port ' + str(dev['port']) if dev.get('port') else ''} at it; "
        "do that in the manifests: the metrics above need Envoy's",
    )
    wanted = [m for m in KUBE_METRICS if tuning or not m.startswith("tuning_")]
    usage = kube_metrics_entry(
        conversion, key, f"{key}-kube_metrics",
        {"namespace": dev["namespace"], "name": workload, "kind": "Deployment", "container": dev["container"],
         **({} if tuning else {"metrics_to_collect": wanted})},
    )  # fmt: skip
    usage.comment(("name",), f"from servox's opsani_dev connector {key}: main vs tuning pod cpu and memory")
    return [*entries, *prometheus, usage]


def _mapping(source: str, where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise cannot_convert(source, where, "servox requires it, as a mapping")
    return value
