"""kubectl's rollout status rules for Deployments and StatefulSets, and the pod facts they go by: pure.

Apart from ``rollout`` (which applies them to the cluster, watching and retrying) so that the
rules can be read and tested on plain objects, without a cluster or a clock.

``rollout_status``: the controller must have observed the current generation, then updated,
ready and available replicas must all equal the desired count (and no old replica remain);
Progressing=False (ProgressDeadlineExceeded) ends it at once, and ReplicaFailure=True or a failed
ReplicaSet creation (Progressing=False, ReplicaSetCreateError) once it has lasted
``failure_grace`` seconds (``rollout.RolloutWatcher`` counts that grace). A StatefulSet has its own
rule (``statefulset_status``) and no ReplicaSets: its new pods are those labelled with its
``updateRevision`` (``REVISION_LABEL``).

``settlement_left``: how much of a settlement is still to be watched, counted from when the
newest of the workload's current pods became Ready (its Ready condition's ``lastTransitionTime``,
written by the kubelet through the API server), with the wall clock passed in.

>>> rollout_status({"metadata": {"name": "web", "generation": 2}, "status": {"observedGeneration": 1}}).message
'web: waiting for the controller to see generation 2'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from servo_actors.connectors.kubernetes.diagnosis import Diagnosis, deployment_condition_failure

__all__ = [
    "READY_TIME_RESOLUTION",
    "REVISION_LABEL",
    "Report",
    "RolloutStatus",
    "is_statefulset",
    "observed",
    "owned_by",
    "pod_ready",
    "pod_revision",
    "ready_since",
    "rollout_status",
    "settlement_left",
    "statefulset_status",
]

Report = Callable[[float, str], None]
"""``report(fraction 0-1, message)``."""


@dataclass(frozen=True)
class RolloutStatus:
    done: bool
    message: str
    fraction: float
    failure: Diagnosis | None = None


def rollout_status(deployment: dict[str, Any]) -> RolloutStatus:
    """Where the Deployment's rollout stands (kubectl ``rollout status``, plus ready replicas)."""
    name = deployment.get("metadata", {}).get("name", "?")
    generation = deployment.get("metadata", {}).get("generation", 0)
    status = deployment.get("status") or {}
    observed = status.get("observedGeneration", 0)
    if generation > observed:
        return RolloutStatus(False, f"{name}: waiting for the controller to see generation {generation}", 0.0)
    failure = deployment_condition_failure(deployment)
    if failure is not None:
        return RolloutStatus(False, failure.message, 0.0, failure)
    desired = deployment.get("spec", {}).get("replicas", 1)
    total = status.get("replicas", 0)
    updated = status.get("updatedReplicas", 0)
    ready = status.get("readyReplicas", 0)
    available = status.get("availableReplicas", 0)
    fraction = 1.0 if desired == 0 else min(1.0, (updated + ready + available) / (3 * desired))
    if updated < desired:
        return RolloutStatus(False, f"{name}: {updated} of {desired} new replicas updated", fraction)
    if total > updated:
        return RolloutStatus(False, f"{name}: {total - updated} old replica(s) pending termination", fraction)
    if ready < desired or available < desired:
        return RolloutStatus(
            False,
            f"{name}: {min(ready, available)} of {desired} updated replicas ready and available",
            fraction,
        )
    if updated != desired:
        return RolloutStatus(False, f"{name}: {updated} updated replicas, {desired} desired", fraction)
    return RolloutStatus(True, f"{name}: {desired} of {desired} replicas updated and available", 1.0)


REVISION_LABEL = "controller-revision-hash"
"""The label a StatefulSet's pods carry: the ControllerRevision their template came from."""


def statefulset_status(statefulset: dict[str, Any]) -> RolloutStatus:
    """Where the StatefulSet's rollout stands (kubectl ``rollout status``, a little stricter).

    The controller must have observed the generation, ready replicas reach the desired count, no
    pod above it remain, and then with a partition the pods at ordinals >= partition be updated
    (``updatedReplicas >= replicas - partition``), without one ``updateRevision`` equal
    ``currentRevision`` (kubectl settles for the updated count when ``rollingUpdate`` is set, as the
    API server's defaults always make it). ``OnDelete`` never rolls out on its own: a failure."""
    name = statefulset.get("metadata", {}).get("name", "?")
    generation = statefulset.get("metadata", {}).get("generation", 0)
    spec = statefulset.get("spec", {})
    status = statefulset.get("status") or {}
    observed = status.get("observedGeneration", 0)
    if observed == 0 or generation > observed:
        return RolloutStatus(False, f"{name}: waiting for the controller to see generation {generation}", 0.0)
    strategy = spec.get("updateStrategy") or {}
    if strategy.get("type") == "OnDelete":
        failure = Diagnosis(
            "failed", "statefulset-on-delete",
            f"StatefulSet {name} has updateStrategy OnDelete: its pods take a new template only when deleted",
        )  # fmt: skip
        return RolloutStatus(False, failure.message, 0.0, failure)
    desired = spec.get("replicas", 1)
    partition = int((strategy.get("rollingUpdate") or {}).get("partition") or 0)
    to_update = max(0, desired - partition)
    total = status.get("replicas", 0)
    updated = status.get("updatedReplicas", 0)
    ready = status.get("readyReplicas", 0)
    fraction = 1.0 if desired == 0 else min(1.0, (min(updated, to_update) + ready) / (to_update + desired))
    if updated < to_update:
        where = f" (ordinals >= partition {partition})" if partition else ""
        return RolloutStatus(False, f"{name}: {updated} of {to_update} pods updated{where}", fraction)
    if ready < desired:
        return RolloutStatus(False, f"{name}: {ready} of {desired} pods ready", fraction)
    if total > desired:
        return RolloutStatus(
            False, f"{name}: {total - desired} pod(s) above the desired count pending removal", fraction
        )
    revision = status.get("updateRevision", "")
    if partition:
        return RolloutStatus(
            True,
            f"{name}: partitioned rollout done, {updated} pod(s) at revision {revision}, {ready} ready",
            1.0,
        )
    if revision != status.get("currentRevision", ""):
        return RolloutStatus(False, f"{name}: waiting for every pod to be at revision {revision}", fraction)
    return RolloutStatus(True, f"{name}: {desired} of {desired} pods ready at revision {revision}", 1.0)


def is_statefulset(obj: dict[str, Any]) -> bool:
    return obj.get("kind") == "StatefulSet"


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def observed(deployment: dict[str, Any]) -> bool:
    """Whether the controller has acted on the Deployment's current spec."""
    generation = deployment.get("metadata", {}).get("generation", 0)
    return generation <= (deployment.get("status") or {}).get("observedGeneration", 0)


def owned_by(obj: dict[str, Any], uid: str | None) -> bool:
    return uid is None or any(
        ref.get("uid") == uid for ref in obj.get("metadata", {}).get("ownerReferences") or []
    )


def pod_revision(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata", {}).get("labels") or {}).get(REVISION_LABEL, ""))


READY_TIME_RESOLUTION = 1.0
"""Seconds: a condition's ``lastTransitionTime`` is whole seconds (RFC 3339, truncated), so a pod
may have become Ready up to this much after it says; ``settlement_left`` counts from the latest."""


def ready_since(pod: dict[str, Any]) -> float | None:
    """When ``pod`` became Ready (epoch seconds, its Ready condition's ``lastTransitionTime``);
    None while it is not Ready or when the time is missing or unreadable."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") != "Ready":
            continue
        stamp = condition.get("lastTransitionTime")
        if condition.get("status") != "True" or not isinstance(stamp, str):
            return None
        try:
            return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def settlement_left(pods: list[dict[str, Any]], settlement: float, now: float) -> float:
    """Seconds of ``settlement`` still to watch ``pods`` (a workload's current pods) for at ``now``
    (epoch seconds): the settlement counts from when the newest of them became Ready (the latest
    that can be: ``READY_TIME_RESOLUTION`` after its stamp). All of it when one is not Ready or its
    time is unknown, or when that time is ahead of ``now`` (clocks apart); none for no pods
    (nothing to watch). Pods being deleted are left out.

    >>> ready = {"status": {"conditions": [{"type": "Ready", "status": "True",
    ...     "lastTransitionTime": "2026-12-06T08:00:00Z"}]}}
    >>> settlement_left([ready], 30.0, ready_since(ready) + 11)
    20.0
    """
    if settlement <= 0:
        return 0.0
    current = [pod for pod in pods if not (pod.get("metadata") or {}).get("deletionTimestamp")]
    if not current:
        return 0.0
    times = [ready_since(pod) for pod in current]
    known = [t for t in times if t is not None]
    if len(known) < len(times):
        return settlement
    elapsed = now - (max(known) + READY_TIME_RESOLUTION)
    if elapsed < 0:
        return settlement
    return max(0.0, settlement - elapsed)
