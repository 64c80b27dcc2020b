"""The HPA controller: it owns its target's spec.replicas.

Without metrics it keeps the replicas within [minReplicas, maxReplicas] and takes back any other
value written there (as a real HPA does within a sync or two); with usage from ``set_metrics`` it
scales by CPU utilization against the target, with the default 10 % tolerance. Runs inside
``Controllers.reconcile`` (the API server's loop thread).
"""

from __future__ import annotations

import math
from typing import Any

import kube_objects
import kube_quantity
from kube_metrics import PodUsage
from kube_objects import KINDS, owned_by
from kube_store import KubeStore

DEPLOYMENT, REPLICASET, POD, HPA = KINDS["deployment"], KINDS["replicaset"], KINDS["pod"], KINDS["hpa"]
LIMITED_MESSAGES = {
    "TooFewReplicas": "the desired replica count is less than the minimum replica count",
    "TooManyReplicas": "the desired replica count is more than the maximum replica count",
    None: "the desired count is within the acceptable range",
}
"""ScalingLimited's messages, as the HPA controller writes them."""
HPA_TOLERANCE = 0.1
"""The HPA controller's default --horizontal-pod-autoscaler-tolerance."""


class HpaController:
    """autoscaling/v2 HorizontalPodAutoscalers targeting Deployments."""

    def __init__(self, store: KubeStore, usage: PodUsage) -> None:
        self.store = store
        self.usage = usage
        self.desired: dict[str, int] = {}  # hpa uid -> the replica count it wants

    def sync(self, hpa: dict[str, Any]) -> None:
        """One pass over one HPA: clamp or scale its target's spec.replicas, write its status."""
        spec, meta = hpa["spec"], hpa["metadata"]
        target_ref = spec.get("scaleTargetRef", {})
        deployment = self.store.get(DEPLOYMENT, meta["namespace"], target_ref.get("name", ""))
        previous = {cond["type"]: cond for cond in hpa.get("status", {}).get("conditions", [])}
        low, high = spec.get("minReplicas", 1), spec["maxReplicas"]
        if deployment is None:
            status = dict(hpa.get("status", {}))
            status["conditions"] = [
                kube_objects.condition(
                    "AbleToScale",
                    False,
                    "FailedGetScale",
                    f"the HPA controller was unable to get the target's current scale: deployments/scale.apps "
                    f'"{target_ref.get("name")}" not found',
                    previous.get("AbleToScale"),
                    workload=False,
                )
            ]
            status["conditions"][0].pop("lastProbeTime")
            self._write_status(hpa, status)
            return
        current = deployment["spec"].get("replicas", 1)
        desired = self.desired.get(meta["uid"], current)
        utilization = self._cpu_utilization(deployment)
        target = next(
            (
                metric["resource"]["target"].get("averageUtilization")
                for metric in spec.get("metrics", [])
                if metric.get("type") == "Resource" and metric["resource"].get("name") == "cpu"
            ),
            None,
        )
        if utilization is not None and target:
            ratio = utilization / target
            if abs(ratio - 1) > HPA_TOLERANCE:
                desired = math.ceil(desired * ratio)
        bounded = min(max(desired, low), high)
        self.desired[meta["uid"]] = bounded
        status = dict(hpa.get("status", {}))
        if bounded != current:
            deployment["spec"]["replicas"] = bounded
            self.store.commit(DEPLOYMENT, deployment)
            status["lastScaleTime"] = kube_objects.now()
            self.store.record_event(
                hpa,
                "SuccessfulRescale",
                f"New size: {bounded}; reason: {_rescale_reason(bounded, current, low, high)}",
                False,
                "horizontal-pod-autoscaler",
            )
        status["currentReplicas"] = deployment.get("status", {}).get("replicas", current)
        status["desiredReplicas"] = bounded
        status["observedGeneration"] = meta.get("generation", 1)
        if utilization is not None:
            status["currentMetrics"] = [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "current": {"averageUtilization": round(utilization)}},
                }
            ]
        limited = "TooFewReplicas" if desired < low else "TooManyReplicas" if desired > high else None
        conditions = [
            kube_objects.condition(
                "AbleToScale",
                True,
                "ReadyForNewScale",
                "recommended size matches current size",
                previous.get("AbleToScale"),
                False,
            ),
            kube_objects.condition(
                "ScalingActive",
                utilization is not None,
                "ValidMetricFound" if utilization is not None else "FailedGetResourceMetric",
                "the HPA was able to successfully calculate a replica count from cpu resource "
                "utilization (percentage of request)"
                if utilization is not None
                else "the HPA was unable to compute the replica count: failed to get cpu utilization: "
                "unable to get metrics for resource cpu: unable to fetch metrics from resource "
                "metrics API: the server could not find the requested resource "
                "(get pods.metrics.k8s.io)",
                previous.get("ScalingActive"),
                False,
            ),
            kube_objects.condition(
                "ScalingLimited",
                limited is not None,
                limited or "DesiredWithinRange",
                LIMITED_MESSAGES[limited],
                previous.get("ScalingLimited"),
                False,
            ),
        ]
        for cond in conditions:
            cond.pop("lastProbeTime")
        status["conditions"] = conditions
        self._write_status(hpa, status)

    def _write_status(self, hpa: dict[str, Any], status: dict[str, Any]) -> None:
        if status != hpa.get("status"):
            hpa["status"] = status
            self.store.commit(HPA, hpa)

    def _cpu_utilization(self, deployment: dict[str, Any]) -> float | None:
        """Average CPU usage of the Deployment's running pods in percent of their requests (set_metrics)."""
        shares = []
        for pod in self._pods_of_deployment(deployment):
            usage = self.usage.of(self.store, pod)
            request = sum(
                cpu_millis(container.get("resources", {}).get("requests", {}).get("cpu", "0"))
                for container in pod["spec"].get("containers", [])
            )
            if usage is None or request <= 0 or pod["status"].get("phase") != "Running":
                continue
            shares.append(100 * cpu_millis(usage.get("cpu", "0")) / request)
        return sum(shares) / len(shares) if shares else None

    def _pods_of_deployment(self, deployment: dict[str, Any]) -> list[dict[str, Any]]:
        namespace = deployment["metadata"]["namespace"]
        sets = [rs for rs in self.store.peek(REPLICASET, namespace) if owned_by(rs, deployment)]
        pods = self.store.peek(POD, namespace)
        return [
            pod
            for rs in sets
            for pod in pods
            if owned_by(pod, rs) and not pod["metadata"].get("deletionTimestamp")
        ]


def _rescale_reason(new: int, old: int, low: int, high: int) -> str:
    if old < low:
        return "Current number of replicas below Spec.MinReplicas"
    if old > high:
        return "Current number of replicas above Spec.MaxReplicas"
    return (
        "cpu resource utilization (percentage of request) above target"
        if new > old
        else "All metrics below target"
    )


def cpu_millis(quantity: str) -> float:
    """A CPU quantity ("250m", "1", "0.5", "100000n") in millicores."""
    return float(kube_quantity.value(quantity) * 1000)
