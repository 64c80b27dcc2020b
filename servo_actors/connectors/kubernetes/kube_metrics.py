"""``kube_metrics``: the main pods' and the tuning pod's CPU and memory from metrics-server, with
their requests, limits, saturation and restarts, under servox's names.

::

    - name: kube_metrics
      type: kube_metrics
      config:
        namespace: default
        name: web                           # the Deployment (or StatefulSet) watched
        kind: Deployment                    # or StatefulSet
        container: null                     # needed when its pods have several containers
        metrics_to_collect: null            # null: every metric below
        metric_collection_frequency: 1m     # one sample per this during the measurement
        kubeconfig: null
        context: null
        request_timeout: 10s

Metrics (servox's names): ``main_cpu_usage``, ``main_cpu_request``, ``main_cpu_limit``,
``main_cpu_saturation``, ``main_mem_usage``, ``main_mem_request``, ``main_mem_limit``,
``main_mem_saturation``, ``main_pod_restart_count`` and the same with ``tuning_`` for the tuning
pod ``NAME-tuning`` (the kubernetes connector's ``strategy: tuning``). CPU in cores, memory in
GiB, saturation in percent (usage / request * 100; the limit where the container has no
request), restart counts as counts. Each is a time series per pod: after the warmup, one sample
every ``metric_collection_frequency`` during the duration (at least one), read from
metrics-server's ``metrics.k8s.io`` (usage, stamped with its sample time) and from the pods
(requests, limits and restarts of the container; the main pods' requests and limits are the
workload template's, as servox read them). The main pods are those the workload's selector picks
without the tuning pod. A metric with no sample (no tuning pod, metrics-server has not sampled a
pod yet) is left out and the measurement's annotation says why.
"""

from __future__ import annotations

import math
import shlex
import time
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, Field, field_validator

from servo_actors.config.fields import Duration, StrictModel
from servo_actors.connectors.base import Connector, ConnectorFailure, Control, ProgressFn
from servo_actors.connectors.kubernetes.checks import access_remedy, allowed, shown
from servo_actors.connectors.kubernetes.client import (
    KubeApiError,
    KubeClient,
    KubeError,
    label_selector,
    pod_metrics_path,
    pod_path,
    pods_path,
    workload_path,
)
from servo_actors.connectors.kubernetes.kubeconfig import KubeConfigError, resolve_access
from servo_actors.connectors.kubernetes.tuning_pod import ROLE_LABEL, ROLE_TUNING, restarts, tuning_pod_name
from servo_actors.connectors.kubernetes.units import parse_cpu, parse_memory
from servo_actors.connectors.wait import wait_with_progress
from servo_actors.durations import format_duration

__all__ = ["KUBE_METRICS", "KubeMetricsConfig", "KubeMetricsConnector", "PROGRESS_INTERVAL"]

KUBE_METRICS: dict[str, str] = {
    f"{who}_{name}": unit
    for who in ("tuning", "main")
    for name, unit in (
        ("cpu_usage", "cores"), ("cpu_request", "cores"), ("cpu_limit", "cores"), ("cpu_saturation", "%"),
        ("mem_usage", "GiB"), ("mem_request", "GiB"), ("mem_limit", "GiB"), ("mem_saturation", "%"),
        ("pod_restart_count", "count"),
    )
}  # fmt: skip
"""servox's metric names and their units here."""
PROGRESS_INTERVAL = 1.0
"""Seconds between progress reports while a measurement waits."""

MetricName = Literal[
    "tuning_cpu_usage", "tuning_cpu_request", "tuning_cpu_limit", "tuning_cpu_saturation",
    "tuning_mem_usage", "tuning_mem_request", "tuning_mem_limit", "tuning_mem_saturation",
    "tuning_pod_restart_count",
    "main_cpu_usage", "main_cpu_request", "main_cpu_limit", "main_cpu_saturation",
    "main_mem_usage", "main_mem_request", "main_mem_limit", "main_mem_saturation",
    "main_pod_restart_count",
]  # fmt: skip


def _kind(value: Any) -> Any:
    """servox accepted ``deployment`` / ``statefulset`` in any case of their first letters."""
    if isinstance(value, str) and value.lower() in ("deployment", "statefulset"):
        return "Deployment" if value.lower() == "deployment" else "StatefulSet"
    return value


class KubeMetricsConfig(StrictModel):
    """The connector's ``config`` section (see the module docstring)."""

    namespace: str = "default"
    name: str = Field(min_length=1)
    kind: Annotated[Literal["Deployment", "StatefulSet"], BeforeValidator(_kind)] = "Deployment"
    container: str | None = None
    metrics_to_collect: list[MetricName] | None = Field(default=None, min_length=1)
    """None: every metric."""
    metric_collection_frequency: Duration = 60.0
    kubeconfig: str | None = None
    context: str | None = None
    request_timeout: Duration = 10.0

    @field_validator("metric_collection_frequency", "request_timeout")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be more than 0")
        return value

    def metrics(self) -> list[str]:
        return list(self.metrics_to_collect) if self.metrics_to_collect is not None else list(KUBE_METRICS)


class _Series:
    """Samples by metric, then by pod: ``{metric: {pod: [[epoch_seconds, value], ...]}}``."""

    def __init__(self, wanted: list[str]) -> None:
        self.wanted = set(wanted)
        self.data: dict[str, dict[str, list[list[float]]]] = {}

    def add(self, metric: str, pod: str, when: float, value: float | None) -> None:
        """One point; none when ``value`` is None or the series has a point at ``when`` already
        (metrics-server samples every 10 s or so: a faster collection reads the same sample again)."""
        if metric not in self.wanted or value is None:
            return
        points = self.data.setdefault(metric, {}).setdefault(pod, [])
        if not points or points[-1][0] != round(when, 3):
            points.append([round(when, 3), value])


class KubeMetricsConnector(Connector):
    """Main vs tuning pod metrics of one workload, from metrics-server (see the module docstring)."""

    config_model: ClassVar[type[BaseModel]] = KubeMetricsConfig
    config: KubeMetricsConfig

    def describe(self) -> dict[str, Any]:
        return {"components": {}, "metrics": {m: {"unit": KUBE_METRICS[m]} for m in self.config.metrics()}}

    def measure(self, metrics: list[str], control: Control, progress: ProgressFn) -> dict[str, Any]:
        offered = self.config.metrics()
        for metric in metrics:
            if metric not in offered:
                raise ConnectorFailure(
                    f"connector {self.name!r} does not describe metric {metric!r}", reason="unknown-metric"
                )
        if not metrics:
            return {"metrics": {}, "annotations": {}}
        total = control.warmup + control.duration + control.delay
        frequency = self.config.metric_collection_frequency
        samples = max(1, math.ceil(control.duration / frequency))

        def percent(elapsed: float) -> float:
            return 99.0 * min(1.0, elapsed / total) if total > 0 else 0.0

        began = time.monotonic()

        def message(_elapsed: float) -> str:
            left = total - (time.monotonic() - began)
            return f"measuring kubernetes metrics ({format_duration(round(max(0.0, left)))} left)"

        series = _Series(metrics)
        notes: dict[str, str] = {}
        wait_with_progress(
            control.warmup, progress, interval=PROGRESS_INTERVAL, end_percent=percent(control.warmup),
            message=message,
        )  # fmt: skip
        with self._client() as client:
            for index in range(samples):
                self._sample(client, series, notes)
                if index + 1 < samples:
                    elapsed = time.monotonic() - began
                    wait_with_progress(
                        frequency, progress, interval=PROGRESS_INTERVAL,
                        start_percent=percent(elapsed), end_percent=percent(elapsed + frequency),
                        message=message,
                    )  # fmt: skip
        left = total - (time.monotonic() - began)
        if left > 0:
            wait_with_progress(
                left, progress, interval=PROGRESS_INTERVAL, start_percent=percent(total - left),
                end_percent=99.0, message=message,
            )  # fmt: skip
        measured = {
            metric: {
                "unit": KUBE_METRICS[metric],
                "values": [{"id": pod, "data": data} for pod, data in sorted(series.data[metric].items())],
            }
            for metric in metrics
            if metric in series.data
        }
        annotations = {
            f"{self.name}:{metric}": notes.get(metric.split("_")[0], "no sample")
            for metric in metrics
            if metric not in series.data
        }
        progress(100, "measured")
        return {"metrics": measured, "annotations": annotations}

    # -- one sample ----------------------------------------------------------------------------

    def _sample(self, client: KubeClient, series: _Series, notes: dict[str, str]) -> None:
        """Add one sample of every wanted metric; ``notes["main"/"tuning"]`` says why one is missing."""
        namespace, now = self.config.namespace, time.time()
        workload = self._workload(client)
        template = {"spec": (workload.get("spec", {}).get("template") or {}).get("spec") or {}}
        selector = label_selector(workload.get("spec", {}).get("selector") or {})
        main_selector = (
            f"{selector},{ROLE_LABEL}!={ROLE_TUNING}" if selector else f"{ROLE_LABEL}!={ROLE_TUNING}"
        )
        main_container = self._container(template, f"{self.config.kind} {self.config.name}")
        requests = _resources(main_container)
        pods = client.get(pods_path(namespace), {"labelSelector": main_selector}).get("items") or []
        for pod in pods:
            if not pod.get("metadata", {}).get("deletionTimestamp"):
                series.add("main_pod_restart_count", pod["metadata"]["name"], now, restarts(pod))
        usage = client.get(pod_metrics_path(namespace), {"labelSelector": main_selector}).get("items") or []
        if not usage:
            notes["main"] = f"metrics-server lists no pod of {self.config.kind} {self.config.name} yet"
        for entry in usage:
            self._add_usage(series, "main", entry, requests)

        tuning_name = tuning_pod_name(self.config.name)
        try:
            tuning = client.get(pod_path(namespace, tuning_name))
        except KubeApiError as exc:
            if exc.status != 404:
                raise
            notes["tuning"] = f"no tuning pod {tuning_name} during the measurement"
            return
        series.add("tuning_pod_restart_count", tuning_name, now, restarts(tuning))
        tuning_requests = _resources(
            self._container({"spec": tuning.get("spec") or {}}, f"pod {tuning_name}")
        )
        found = client.get(pod_metrics_path(namespace), {"fieldSelector": f"metadata.name={tuning_name}"})
        entries = found.get("items") or []
        if not entries:
            notes["tuning"] = f"metrics-server has not sampled tuning pod {tuning_name} yet"
        for entry in entries:
            self._add_usage(series, "tuning", entry, tuning_requests)

    def _add_usage(
        self, series: _Series, who: str, entry: dict[str, Any], resources: dict[str, float | None]
    ) -> None:
        pod = str(entry.get("metadata", {}).get("name"))
        when = _epoch(entry.get("timestamp")) or time.time()
        containers = entry.get("containers") or []
        named = self.config.container
        found = next((c for c in containers if c.get("name") == named), None) if named else None
        if named is None and len(containers) == 1:
            found = containers[0]
        if found is None:
            return  # the container is not sampled yet (or the pod has several: the check says so)
        usage = found.get("usage") or {}
        cpu, mem = parse_cpu(usage.get("cpu", "0")), parse_memory(usage.get("memory", "0"))
        series.add(f"{who}_cpu_usage", pod, when, cpu)
        series.add(f"{who}_mem_usage", pod, when, mem)
        for resource, used in (("cpu", cpu), ("mem", mem)):
            request, limit = resources[f"{resource}_request"], resources[f"{resource}_limit"]
            series.add(f"{who}_{resource}_request", pod, when, request)
            series.add(f"{who}_{resource}_limit", pod, when, limit)
            if request:
                series.add(f"{who}_{resource}_saturation", pod, when, 100.0 * used / request)

    def _workload(self, client: KubeClient) -> dict[str, Any]:
        try:
            return client.get(workload_path(self.config.namespace, self.config.kind, self.config.name))
        except KubeApiError as exc:
            if exc.status == 404:
                raise ConnectorFailure(
                    f"{self.config.kind} {self.config.name!r} not found in namespace {self.config.namespace!r}",
                    reason="not-found",
                ) from None
            raise

    def _container(self, pod_template: dict[str, Any], where: str) -> dict[str, Any]:
        containers = pod_template["spec"].get("containers") or []
        names = ", ".join(str(c.get("name")) for c in containers)
        if self.config.container:
            for container in containers:
                if container.get("name") == self.config.container:
                    return dict(container)
            raise ConnectorFailure(f"{where} has no container {self.config.container!r} (it has {names})")
        if len(containers) != 1:
            raise ConnectorFailure(
                f"{where} has several containers ({names}): set container to the one to watch"
            )
        return dict(containers[0])

    # -- check ---------------------------------------------------------------------------------

    def check(self) -> list[dict[str, Any]]:
        """The workload and its container (``critical``: nothing after it is asked when it
        fails), the metrics permissions, and metrics-server answering; each failure with a remedy."""
        try:
            with self._client() as client:
                return self._checks(client)
        except ConnectorFailure as exc:
            return [{"name": "kubeconfig", "success": False, "message": exc.message, "severity": "critical"}]

    def _checks(self, client: KubeClient) -> list[dict[str, Any]]:
        namespace, what = self.config.namespace, f"{self.config.kind} {self.config.name}"
        kubectl = self._kubectl()
        try:
            workload = self._workload(client)
            template = {"spec": (workload.get("spec", {}).get("template") or {}).get("spec") or {}}
            container = self._container(template, what)
        except (ConnectorFailure, KubeError) as exc:
            plural = f"{self.config.kind.lower()}s"
            remedy = f"{kubectl} get {plural} -o wide  # the names, and each one's containers"
            return [_result(f"{what} readable", False, str(exc), remedy, severity="critical")]
        results = [
            _result(f"{what} readable", True, f"container {container.get('name')}", severity="critical")
        ]
        name = "metrics permissions"
        try:
            refused = [
                ("metrics.k8s.io", "pods", verb)
                for verb in ("get", "list")
                if not allowed(client, namespace, "metrics.k8s.io", "pods", verb)
            ]
        except KubeError as exc:
            results.append(_result(name, False, f"cannot ask for a SelfSubjectAccessReview: {exc}"))
        else:
            message = f"not allowed in namespace {namespace!r}: {', '.join(shown(refused))}"
            results.append(
                _result(name, False, message, access_remedy(namespace, refused))
                if refused
                else _result(name, True, f"get/list pods.metrics.k8s.io in {namespace!r}")
            )
        try:
            client.get(pod_metrics_path(namespace), {"limit": "1"})
            results.append(_result("metrics API", True, "metrics.k8s.io answers (metrics-server)"))
        except KubeError as exc:
            results.append(
                _result(
                    "metrics API",
                    False,
                    f"metrics.k8s.io does not answer: {exc}",
                    f"{kubectl} get apiservice v1beta1.metrics.k8s.io  # is metrics-server installed and Available?",
                )  # fmt: skip
            )
        return results

    def _kubectl(self) -> str:
        words = ["kubectl"]
        if self.config.kubeconfig:
            words += ["--kubeconfig", self.config.kubeconfig]
        if self.config.context:
            words += ["--context", self.config.context]
        return shlex.join([*words, "-n", self.config.namespace])

    # -- plumbing ------------------------------------------------------------------------------

    def _client(self) -> _Client:
        try:
            access = resolve_access(self.config.kubeconfig, self.config.context)
        except KubeConfigError as exc:
            raise ConnectorFailure(str(exc), reason="kubeconfig-invalid") from None
        return _Client(KubeClient(access, self.config.request_timeout))


class _Client:
    """A KubeClient for one operation: closed at the end, its errors turned into failures."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    def __enter__(self) -> KubeClient:
        return self.client

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: Any) -> None:
        self.client.close()
        if isinstance(error, KubeConfigError):
            raise ConnectorFailure(str(error), reason="kubeconfig-invalid") from None
        if isinstance(error, KubeError):
            raise ConnectorFailure(f"kubernetes: {error}", reason="kubernetes-error") from None


def _resources(container: dict[str, Any]) -> dict[str, float | None]:
    """``cpu_request``, ``cpu_limit``, ``mem_request``, ``mem_limit`` (cores, GiB); a missing
    request is the limit (as the API server defaults it)."""
    resources = container.get("resources") or {}
    found: dict[str, float | None] = {}
    for name, key, parse in (("cpu", "cpu", parse_cpu), ("mem", "memory", parse_memory)):
        limit = (resources.get("limits") or {}).get(key)
        request = (resources.get("requests") or {}).get(key, limit)
        found[f"{name}_request"] = None if request is None else parse(str(request))
        found[f"{name}_limit"] = None if limit is None else parse(str(limit))
    return found


def _epoch(stamp: Any) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _result(
    name: str, success: bool, message: str, remedy: str | None = None, severity: str = "common"
) -> dict[str, Any]:
    """A check result; the remedy only on a failure."""
    result: dict[str, Any] = {"name": name, "success": success, "message": message, "severity": severity}
    if remedy and not success:
        result["remedy"] = remedy
    return result
