"""``strategy: tuning``: the trial settings go to one extra pod beside the untouched Deployment.

Components: the Deployment's own (``web``) is described as for the default strategy but every
setting is pinned: an ADJUST may repeat its current values, never change them. ``web-tuning``
(``tuning_component_name``) carries the container settings (cpu, memory, env) of the tuning pod
``web-tuning``; while no tuning pod exists it reports the values of the Deployment's template.

Metrics: ``DEPLOYMENT-tuning.ready_replicas`` (1 when the tuning pod is Ready, else 0),
``DEPLOYMENT-tuning.restarts`` (its container restarts during the measurement) and, where
``metrics.k8s.io`` answers, ``DEPLOYMENT-tuning.cpu_usage`` / ``memory_usage`` (left out, with an
annotation, while metrics-server has not sampled the pod yet); the Deployment's own
``DEPLOYMENT.*`` metrics leave the tuning pod out.

The connector calls ``split_components`` first (the tuning part is taken out of an ADJUST), then
``adjust_tuning`` after the Deployments it patches. The Deployment is never written here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from servo_actors.connectors.base import ConnectorFailure
from servo_actors.connectors.kubernetes import measurement
from servo_actors.connectors.kubernetes.client import KubeApiError, KubeClient, KubeError
from servo_actors.connectors.kubernetes.cluster import read_deployment, read_states
from servo_actors.connectors.kubernetes.config import (
    DeploymentConfig,
    KubernetesConfig,
    component_name,
    tuning_component_name,
)
from servo_actors.connectors.kubernetes.rollout_rules import settlement_left
from servo_actors.connectors.kubernetes.settings import (
    DeploymentState,
    DeploymentTargets,
    SettingError,
    describe_components,
    requested_targets,
)
from servo_actors.connectors.kubernetes.tuning_adjust import Hook, TuningFailed, TuningPods, servo_owner
from servo_actors.connectors.kubernetes.tuning_pod import (
    build_tuning_pod,
    current_values,
    is_ready,
    merged_values,
    restarts,
    spec_hash,
    terminating,
    tuning_pod_name,
)

TUNING_METRICS = {"ready_replicas": "replicas", "restarts": "count"}
_TOLERANCE = 1e-9

Report = Callable[[float, str], None]


def tuning_deployments(config: KubernetesConfig) -> list[DeploymentConfig]:
    return [d for d in config.deployments if d.strategy == "tuning"]


def _tuning_config(config: KubernetesConfig) -> KubernetesConfig:
    """A config whose Deployments are the tuning ones, each container named by its tuning
    component and offering only its container settings (no replicas, no HPA)."""
    deployments = []
    for deployment in tuning_deployments(config):
        containers = [
            c.model_copy(update={"alias": tuning_component_name(deployment, c)})
            for c in deployment.containers
        ]
        deployments.append(
            deployment.model_copy(update={"containers": containers, "replicas": None, "hpa": None})
        )
    return config.model_copy(update={"deployments": deployments, "statefulsets": []})


def _main_config(config: KubernetesConfig) -> KubernetesConfig:
    return config.model_copy(update={"deployments": tuning_deployments(config), "statefulsets": []})


# -- describe -----------------------------------------------------------------------------------


def pin_main_components(config: KubernetesConfig, components: dict[str, Any]) -> None:
    """Mark every setting of a tuning Deployment's own component pinned (in place)."""
    for deployment in tuning_deployments(config):
        for container in deployment.containers:
            for setting in (
                (components.get(component_name(deployment, container)) or {}).get("settings", {}).values()
            ):
                setting["pinned"] = True


def describe_tuning(client: KubeClient, config: KubernetesConfig) -> dict[str, Any]:
    """The ``-tuning`` components, read from the tuning pods (or the templates where none runs)."""
    tuning = _tuning_config(config)
    pods = TuningPods(client, config.namespace)
    states = []
    for deployment in tuning.deployments:
        pod = pods.read(tuning_pod_name(deployment.name))
        if pod is not None:
            source = {"spec": {"template": {"spec": pod.get("spec") or {}}}}
        else:
            source = read_deployment(client, config.namespace, deployment.name)
        states.append(DeploymentState(deployment, source))
    return describe_components(tuning, states)


def tuning_metric_descriptors(config: KubernetesConfig, with_usage: bool) -> dict[str, dict[str, str]]:
    kinds = {**TUNING_METRICS, **(measurement.USAGE_METRICS if with_usage else {})}
    return {
        f"{tuning_pod_name(d.name)}.{kind}": {"unit": unit}
        for d in tuning_deployments(config)
        for kind, unit in kinds.items()
    }


# -- adjust -------------------------------------------------------------------------------------


@dataclass
class TuningRequest:
    """The part of an ADJUST for tuning Deployments: trial values, and the main components'
    (pinned) values to check."""

    targets: dict[str, DeploymentTargets] = field(default_factory=dict)
    pinned: dict[str, Any] = field(default_factory=dict)


def split_components(
    config: KubernetesConfig, components: dict[str, Any]
) -> tuple[dict[str, Any], TuningRequest]:
    """``components`` without the tuning Deployments' parts, and those parts (SettingError for
    bad trial values)."""
    tuning_names = {c.alias for d in _tuning_config(config).deployments for c in d.containers}
    main_names = {component_name(d, c) for d in tuning_deployments(config) for c in d.containers}
    rest = {k: v for k, v in components.items() if k not in tuning_names and k not in main_names}
    trial = {k: v for k, v in components.items() if k in tuning_names}
    request = TuningRequest(pinned={k: v for k, v in components.items() if k in main_names})
    if trial:
        request.targets = requested_targets(_tuning_config(config), trial)
    return rest, request


def check_pinned(client: KubeClient, config: KubernetesConfig, request: TuningRequest) -> None:
    """SettingError unless every value given for a tuning Deployment's own component is its current one."""
    if not request.pinned:
        return
    main = _main_config(config)
    names = sorted({d.name for d in main.deployments})
    current = describe_components(main, read_states(client, main, names))
    for component, body in request.pinned.items():
        described = current.get(component, {}).get("settings", {})
        for setting, spec in ((body or {}).get("settings") or {}).items():
            value = spec.get("value") if isinstance(spec, dict) else spec
            if setting not in described:
                raise SettingError(f"{component}.{setting}: this connector offers no such setting")
            if not _same(value, described[setting]["value"]):
                raise SettingError(
                    f"{component}.{setting}: pinned at {described[setting]['value']!r} (strategy: tuning "
                    f"leaves the Deployment as it is); put trial values on its -tuning component"
                )


def _same(wanted: Any, current: Any) -> bool:
    try:
        return abs(float(wanted) - float(current)) <= _TOLERANCE * max(1.0, abs(float(current)))
    except (TypeError, ValueError):
        return str(wanted) == str(current)


def adjust_tuning(
    client: KubeClient,
    config: KubernetesConfig,
    request: TuningRequest,
    settlement: float,
    report: Report,
    hook: Hook | None = None,
) -> list[str]:
    """Create or replace the tuning pod of each Deployment the request names; the pods made.

    A pod already there with the requested settings is kept and waited on until Ready (it may
    still be starting: an ADJUST cancelled after creating it); its settlement counts from when it
    became Ready (``rollout_rules.settlement_left``), so one settled long ago costs nothing. A
    pod made now is watched for the whole ``settlement``.

    On failure ``on_failure`` is applied (rollback and shutdown delete the tuning pod, ignore
    leaves it) and a ConnectorFailure names the pod, the diagnosis and what was done."""
    by_name = {d.name: d for d in tuning_deployments(config)}
    pods = (
        TuningPods(client, config.namespace)
        if hook is None
        else TuningPods(client, config.namespace, hook=hook)
    )
    owner, _ = servo_owner(client, config.namespace)
    made = []
    names = list(request.targets)
    for index, name in enumerate(names):
        deployment_config = by_name[name]
        pod_name = tuning_pod_name(name)

        def scaled(fraction: float, message: str, index: int = index) -> None:
            report((index + max(0.0, min(1.0, fraction))) / len(names), message)

        deployment = read_deployment(client, config.namespace, name)
        existing = pods.read(pod_name)
        values = merged_values(request.targets[name], current_values(deployment_config, existing))
        wanted = build_tuning_pod(deployment, deployment_config, values, owner)
        kept = None  # the uid of a pod already there with the requested settings
        if existing is not None and not terminating(existing) and spec_hash(existing) == spec_hash(wanted):
            kept = existing["metadata"].get("uid")
        try:
            ready = pods.ensure(wanted, config.timeout, scaled)
            if kept is not None and ready["metadata"].get("uid") == kept:
                pods.settle(pod_name, settlement_left([ready], settlement, time.time()), scaled)
            else:
                pods.settle(pod_name, settlement, scaled)
        except KubeApiError as exc:
            if exc.status != 422:
                raise
            raise ConnectorFailure(
                f"the API server refused tuning pod {pod_name} of Deployment {name}: {exc} "
                "(no tuning pod runs now)",
                reason="invalid-setting",
            ) from None
        except TuningFailed as failure:
            outcome = _recover(pods, config, pod_name, failure)
            diagnosis = failure.diagnosis
            what = diagnosis.message.rstrip(".")
            raise ConnectorFailure(
                f"tuning pod {pod_name} of Deployment {name}: {what}. {outcome}",
                status=diagnosis.status,
                reason=diagnosis.reason,
            ) from None
        made.append(pod_name)
    return made


def _recover(pods: TuningPods, config: KubernetesConfig, pod_name: str, failure: TuningFailed) -> str:
    policy = config.on_failure
    if policy == "ignore":
        return "The tuning pod was left in place (on_failure: ignore)."
    if failure.terminating:  # deleted already: waiting for it again would only say the same
        return (
            f"The tuning pod is being deleted and goes once its containers stop (on_failure: {policy}); "
            "the Deployment was never changed."
        )
    try:
        pods.remove(pod_name, config.timeout, lambda fraction, message: None)
    except (KubeError, TuningFailed) as exc:
        return f"Deleting the tuning pod failed: {exc}."
    return f"Deleted the tuning pod (on_failure: {policy}); the Deployment was never changed."


# -- measure ------------------------------------------------------------------------------------


class TuningMeasure:
    """The tuning metrics of one MEASURE: taken out of ``metrics`` (``rest`` is left for the
    Deployment metrics), read before and after the measurement; ``notes`` says why a metric was
    left out (by metric name)."""

    def __init__(self, config: KubernetesConfig, metrics: list[str]) -> None:
        self.namespace = config.namespace
        known = tuning_metric_descriptors(config, with_usage=True)
        self.wanted = [m for m in metrics if m in known]
        self.rest = [m for m in metrics if m not in known]
        self.before: dict[str, tuple[str | None, int]] = {}
        self.notes: dict[str, str] = {}

    def _pod(self, client: KubeClient, metric: str) -> dict[str, Any] | None:
        return TuningPods(client, self.namespace).read(metric.rpartition(".")[0])

    def start(self, client: KubeClient) -> None:
        for metric in self.wanted:
            if metric.endswith(".restarts"):
                pod = self._pod(client, metric)
                self.before[metric] = ((pod or {}).get("metadata", {}).get("uid"), restarts(pod))

    def finish(self, client: KubeClient) -> dict[str, Any]:
        measured: dict[str, Any] = {}
        for metric in self.wanted:
            pod = self._pod(client, metric)
            kind = metric.rpartition(".")[2]
            value: float
            if kind == "ready_replicas":
                value = 1 if pod is not None and is_ready(pod) else 0
            elif kind == "restarts":
                uid, count = self.before.get(metric, (None, 0))
                same = pod is not None and pod.get("metadata", {}).get("uid") == uid
                value = max(0, restarts(pod) - count) if same else restarts(pod)
            else:
                found = self._usage(client, pod, metric)
                if found is None:
                    continue
                value = found.cores if kind == "cpu_usage" else found.gib
            measured[metric] = {"unit": {**TUNING_METRICS, **measurement.USAGE_METRICS}[kind], "value": value}
        return measured

    def _usage(self, client: KubeClient, pod: dict[str, Any] | None, metric: str) -> measurement.Usage | None:
        """The tuning pod's usage, or None with a note (no pod running, or no metrics for it yet)."""
        name = metric.rpartition(".")[0]
        running = measurement.running_pods([pod] if pod is not None else [])
        if not running:
            self.notes[metric] = f"omitted: tuning pod {name} is not running"
            return None
        try:
            found = measurement.sum_usage(
                client, self.namespace, {"fieldSelector": f"metadata.name={name}"}, running
            )
        except KubeError as exc:
            self.notes[metric] = f"metrics.k8s.io did not answer: {exc}"
            return None
        gap = found.gap()
        if gap is not None:
            self.notes[metric] = gap
            return None
        return found
