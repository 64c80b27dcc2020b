"""servox's ``wait`` and ``kube_metrics`` connectors.

- ``wait`` with ``measure_enabled: true`` waited out each measurement (warmup, duration and
  delay) for an external load or measurement: the ``wait`` connector here. With
  ``measure_enabled: false`` (what ``servo generate`` writes) it did nothing: it is left out,
  and the output says so.
- ``kube_metrics`` (cpu and memory usage, request, limit, saturation and restarts of the main
  and the tuning pods, from metrics-server) has no connector of its own here: the ``kubernetes``
  connector measures ``WORKLOAD.ready_replicas``, ``.restarts``, ``.cpu_usage`` and
  ``.memory_usage`` of the workloads it manages, the tuning pod's apart.
  It is listed as not converted.
"""

from __future__ import annotations

from typing import Any

from servo_actors.servox_import.conversion import Conversion, Entry, check_keys

__all__ = ["convert_kube_metrics", "convert_wait"]

_WAIT = {"description", "measure_enabled"}
_KUBE_METRICS = {
    "description", "namespace", "name", "kind", "container", "metrics_to_collect",
    "metric_collection_frequency", "kubeconfig", "context",
}  # fmt: skip


def convert_wait(conversion: Conversion, key: str, settings: Any) -> list[Entry]:
    wait = check_keys(conversion.source, key, settings, _WAIT)
    if not wait.get("measure_enabled"):
        conversion.notes.append(f"{key}: measure_enabled is false, so servox's wait did nothing: left out")
        return []
    return [Entry(name=key, type="wait")]


def convert_kube_metrics(conversion: Conversion, key: str, settings: Any) -> list[Entry]:
    metrics = check_keys(conversion.source, key, settings, _KUBE_METRICS)
    target = f"{metrics.get('kind', 'Deployment')} {metrics.get('namespace', '?')}/{metrics.get('name', '?')}"
    conversion.drop(
        key,
        f"main and tuning pod metrics of {target} from metrics-server are not offered yet (issue 37, item 3); "
        "the kubernetes connector measures WORKLOAD.cpu_usage, .memory_usage, .restarts, .ready_replicas",
    )
    return []
