"""servox's ``wait`` and ``kube_metrics`` connectors.

- ``wait`` with ``measure_enabled: true`` waited out each measurement (warmup, duration and
  delay) for an external load or measurement: the ``wait`` connector here. With
  ``measure_enabled: false`` (what ``servo generate`` writes) it did nothing: it is left out,
  and the output says so.
- ``kube_metrics`` (cpu and memory usage, request, limit, saturation and restarts of the main
  and the tuning pods, from metrics-server) is the ``kube_metrics`` connector here, with the same
  keys and metric names.
"""

from __future__ import annotations

from typing import Any

from servo_actors.connectors.kubernetes.kube_metrics import KUBE_METRICS
from servo_actors.servox_import.conversion import (
    Conversion,
    Entry,
    cannot_convert,
    check_keys,
    converted_duration,
)

__all__ = ["convert_kube_metrics", "convert_wait", "kube_metrics_entry"]

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
    return [kube_metrics_entry(conversion, key, key, metrics)]


def kube_metrics_entry(conversion: Conversion, key: str, name: str, metrics: dict[str, Any]) -> Entry:
    """The ``kube_metrics`` connector ``name`` for servox's kube_metrics settings (at ``key``)."""
    source = conversion.source
    config: dict[str, Any] = {}
    for field in ("namespace", "name"):
        if not isinstance(metrics.get(field), str) or not metrics[field]:
            raise cannot_convert(source, f"{key}.{field}", "servox requires it")
        config[field] = metrics[field]
    kind = str(metrics.get("kind", "Deployment"))
    if kind.lower() not in ("deployment", "statefulset"):
        raise cannot_convert(source, f"{key}.kind", f"{kind!r} is not Deployment or StatefulSet")
    config["kind"] = "Deployment" if kind.lower() == "deployment" else "StatefulSet"
    for field in ("container", "kubeconfig", "context"):
        if metrics.get(field) is not None:
            config[field] = str(metrics[field])
    wanted = metrics.get("metrics_to_collect")
    if wanted is not None:
        if not isinstance(wanted, list) or not wanted:
            raise cannot_convert(source, f"{key}.metrics_to_collect", "must be a list of metric names")
        for metric in wanted:
            if metric not in KUBE_METRICS:
                raise cannot_convert(
                    source, f"{key}.metrics_to_collect", f"{metric!r} is not one of {', '.join(KUBE_METRICS)}"
                )
        config["metrics_to_collect"] = [str(m) for m in wanted]
    if metrics.get("metric_collection_frequency") is not None:
        config["metric_collection_frequency"] = converted_duration(
            source, f"{key}.metric_collection_frequency", metrics["metric_collection_frequency"]
        )
    return Entry(name=name, type="kube_metrics", config=config)
