"""Waiting for a Deployment's or StatefulSet's rollout (kubectl's rules) and for it to stay healthy
through settlement.

``rollout_status`` is the rule, pure: the controller must have observed the current generation,
then updated, ready and available replicas must all equal the desired count (and no old
replica remain); Progressing=False (ProgressDeadlineExceeded) ends it at once, and
ReplicaFailure=True or a failed ReplicaSet creation (Progressing=False, ReplicaSetCreateError) once it
has lasted ``failure_grace`` seconds (the controllers retry those: a quota that forbids the pods stays,
a refusal by an API server that has just restarted clears). ``RolloutWatcher`` applies it to the cluster: a watch per deployment, each at most
``window`` seconds long and then re-established after a fresh read (so progress is reported at
least that often, and a watch the server or network drops costs nothing), with the pods of the
newest ReplicaSet looked at on every round so an image that cannot be pulled or a crash loop
fails the rollout without waiting out the timeout.

A StatefulSet has its own rule (``statefulset_status``) and no ReplicaSets: its new pods are those
labelled with its ``updateRevision``. A rollback of one may have to delete the pods the failed
revision left not ready (``replace_stuck=True``): with OrderedReady the controller waits for a
pod to be Ready before it replaces it, so a crash-looping pod would hold the rollback forever (the
Kubernetes docs, StatefulSets, "Forced rollback").
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servo_actors.connectors.kubernetes.client import (
    KubeApiError,
    KubeClient,
    KubeError,
    events_path,
    label_selector,
    pod_path,
    pods_path,
    replicasets_path,
    workload_path,
    workloads_path,
)
from servo_actors.connectors.kubernetes.diagnosis import (
    Diagnosis,
    deployment_condition_failure,
    diagnose_pods,
    has_replica_failure,
    instability,
    newest_replicaset,
    pods_of,
    progress_deadline_of_another,
    restart_counts,
    unready_detail,
    without_condition,
)
from servo_actors.durations import format_duration

__all__ = [
    "EVENTS_LIMIT",
    "FAILURE_GRACE",
    "RETRY_INTERVAL",
    "REVISION_LABEL",
    "Report",
    "RolloutFailed",
    "RolloutStatus",
    "RolloutWatcher",
    "WATCH_WINDOW",
    "rollout_status",
    "statefulset_status",
]

WATCH_WINDOW = 2.0
"""Seconds one watch lasts before a fresh read, a look at the pods and a progress report."""
RETRY_INTERVAL = 1.0
FAILURE_GRACE = 5.0
"""Seconds a failure the controllers retry (ReplicaFailure, a failed ReplicaSet creation) must last
before it fails the rollout (``failure_grace`` in the connector's config)."""
"""Seconds between attempts while the API server cannot be reached during a wait."""

EVENTS_LIMIT = 500
"""At most this many Warning events of the namespace are read to explain a failure."""

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


def _is_statefulset(obj: dict[str, Any]) -> bool:
    return obj.get("kind") == "StatefulSet"


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class RolloutFailed(Exception):
    """A rollout or settlement failed; ``diagnosis`` says how, ``deployment`` which one."""

    def __init__(self, deployment: str, diagnosis: Diagnosis) -> None:
        super().__init__(diagnosis.message)
        self.deployment = deployment
        self.diagnosis = diagnosis


class RolloutWatcher:
    """Waits on Deployments and StatefulSets of one namespace through ``client``; ``kinds`` maps a
    name to its kind (Deployment when absent); ``clock`` is monotonic seconds."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        *,
        kinds: dict[str, str] | None = None,
        window: float = WATCH_WINDOW,
        failure_grace: float = FAILURE_GRACE,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.failure_grace = failure_grace
        self._failing_since: dict[str, float] = {}
        """Deployment -> when a retried failure was first seen (cleared when it clears)."""
        self.namespace = namespace
        self.kinds = dict(kinds or {})
        self.window = window
        self.clock = clock
        self.sleep = sleep

    def kind(self, name: str) -> str:
        return self.kinds.get(name, "Deployment")

    def _read(self, name: str) -> dict[str, Any]:
        """The workload, with its ``kind`` (the rules go by it) even from a server that leaves it out."""
        obj = self.client.get(workload_path(self.namespace, self.kind(name), name))
        return obj if "kind" in obj else {**obj, "kind": self.kind(name)}

    # -- rollout -------------------------------------------------------------------------------

    def wait(self, names: list[str], timeout: float, report: Report, replace_stuck: bool = False) -> None:
        """Until every workload in ``names`` has rolled out, or RolloutFailed (including on timeout).

        ``replace_stuck`` (a rollback): delete a StatefulSet's pods of another revision that are
        not ready, which its controller would otherwise wait on forever."""
        deadline = self.clock() + timeout
        share = 1.0 / len(names)
        for index, name in enumerate(names):

            def scaled(fraction: float, message: str, index: int = index) -> None:
                report((index + fraction) * share, message)

            self._wait_one(name, deadline, timeout, scaled, replace_stuck)

    def _wait_one(
        self, name: str, deadline: float, timeout: float, report: Report, replace_stuck: bool = False
    ) -> None:
        status: RolloutStatus | None = None
        trouble: KubeError | None = None
        gone = 0  # 410s in a row: the first is answered by a fresh read at once, more are paced
        while True:
            remaining = deadline - self.clock()
            if remaining <= 0:
                raise RolloutFailed(name, self._timed_out(name, timeout, status, trouble))
            try:
                deployment = self._read(name)
                trouble = None
                status = self._judge(name, deployment, report)
                if status.done:
                    return
                if replace_stuck and _is_statefulset(deployment) and _observed(deployment):
                    self.replace_stuck_pods(deployment, report)
                # Until the controller has seen this generation, the newest ReplicaSet may be the
                # one being replaced (e.g. a rollback's): its pods say nothing about this rollout.
                found = self.diagnose(deployment, with_events=False) if _observed(deployment) else None
                if found is not None and found.definite:
                    raise RolloutFailed(name, self.diagnose(deployment) or found)
                params = {
                    "fieldSelector": f"metadata.name={name}",
                    "resourceVersion": deployment.get("metadata", {}).get("resourceVersion", ""),
                }
                for kind, obj in self.client.watch(
                    workloads_path(self.namespace, self.kind(name)), params, self._seconds(deadline)
                ):
                    if kind == "DELETED":
                        raise RolloutFailed(
                            name,
                            Diagnosis(
                                "failed",
                                "deployment-deleted"
                                if self.kind(name) == "Deployment"
                                else "statefulset-deleted",
                                f"{self.kind(name)} {name} was deleted during its rollout",
                            ),
                        )
                    if kind in ("ADDED", "MODIFIED"):
                        status = self._judge(name, obj, report)
                        if status.done:
                            return
                gone = 0  # the watch ran its course
            except KubeApiError as exc:
                if exc.status == 404:
                    raise RolloutFailed(name, Diagnosis("failed", "not-found", str(exc))) from None
                if exc.status == 410:  # the watch's resourceVersion is too old: read again
                    gone += 1
                    if gone > 1:
                        self.sleep(max(0.0, min(RETRY_INTERVAL, deadline - self.clock())))
                    continue
                if exc.status < 500 and exc.status != 429:
                    raise RolloutFailed(name, Diagnosis("failed", "kubernetes-error", str(exc))) from None
                trouble = exc
            except KubeError as exc:  # unreachable or timed out: keep trying until the deadline
                trouble = exc
            if trouble is not None:
                report(status.fraction if status else 0.0, f"{name}: {trouble}; retrying")
                self.sleep(max(0.0, min(RETRY_INTERVAL, deadline - self.clock())))

    def status(self, deployment: dict[str, Any]) -> RolloutStatus:
        """``rollout_status``, not counting a ReplicaFailure that belongs to an old ReplicaSet
        (``statefulset_status`` for a StatefulSet)."""
        if _is_statefulset(deployment):
            return statefulset_status(deployment)
        status = rollout_status(deployment)
        if status.failure is not None and status.failure.condition == "ReplicaFailure":
            newest, _ = self.newest_pods(deployment)
            if not has_replica_failure(newest):  # e.g. the ReplicaSet just rolled back from
                status = rollout_status(without_condition(deployment, "ReplicaFailure"))
        if status.failure is not None and status.failure.condition == "Progressing":
            newest, _ = self.newest_pods(deployment)
            if progress_deadline_of_another(deployment, newest):  # a rollback to an existing set
                status = rollout_status(without_condition(deployment, "Progressing"))
        return status

    def _judge(self, name: str, deployment: dict[str, Any], report: Report) -> RolloutStatus:
        if "kind" not in deployment:  # the rule goes by the object's kind: never guess it from counts
            deployment = {**deployment, "kind": self.kind(name)}
        status = self.status(deployment)
        failure = status.failure
        if failure is not None and failure.retried:
            since = self._failing_since.setdefault(name, self.clock())
            left = self.failure_grace - (self.clock() - since)
            if left > 0:  # looked at again within a watch window, at the latest
                report(
                    status.fraction,
                    f"{failure.message} (the controllers retry: failing in {format_duration(left)} "
                    "unless it clears)",
                )
                return RolloutStatus(False, status.message, status.fraction)
        elif failure is None:
            self._failing_since.pop(name, None)
        report(status.fraction, status.message)
        if status.failure is not None:
            raise RolloutFailed(
                name, self.diagnose(deployment) or self._explained(deployment, status.failure)
            )
        return status

    def _explained(self, deployment: dict[str, Any], failure: Diagnosis) -> Diagnosis:
        """``failure`` (a Deployment condition) with why a new pod is not ready, when one is not."""
        try:
            _, pods = self.newest_pods(deployment)
        except KubeError:
            return failure  # the condition is the news; the pods would only have added detail
        detail = unready_detail(pods)
        if not detail:
            return failure
        message = f"{failure.message.rstrip('.')} ({detail})"
        return Diagnosis(failure.status, failure.reason, message, failure.definite, failure.condition)

    def _timed_out(
        self, name: str, timeout: float, status: RolloutStatus | None, trouble: KubeError | None
    ) -> Diagnosis:
        if trouble is not None:
            return Diagnosis("failed", "kubernetes-unreachable", f"{self.kind(name)} {name}: {trouble}")
        found = None
        stuck: list[str] = []
        try:
            deployment = self._read(name)
            if _observed(deployment):
                found = self.diagnose(deployment)
                if found is None and _is_statefulset(deployment):
                    stuck = [p.get("metadata", {}).get("name", "?") for p in self.stuck_pods(deployment)]
        except KubeError:
            pass  # the timeout is the news; a diagnosis would only have added detail
        if found is not None:
            return found
        where = f" ({status.message})" if status else ""
        why = ""
        if stuck:  # not the new settings' fault: an older revision's pod the controller waits on
            why = (
                f": pod(s) {', '.join(stuck)} of an older revision are not ready, and the StatefulSet "
                "controller waits for them before replacing them (delete them to let them be replaced)"
            )
        return Diagnosis(
            "failed", "timeout",
            f"{self.kind(name)} {name} did not finish rolling out within {format_duration(timeout)}{where}{why}",
        )  # fmt: skip

    def _seconds(self, deadline: float) -> int:
        return max(1, math.ceil(min(self.window, deadline - self.clock())))

    # -- diagnosis -----------------------------------------------------------------------------

    def newest_pods(self, deployment: dict[str, Any]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The newest ReplicaSet of ``deployment`` and its pods (a StatefulSet: itself and its pods
        at its ``updateRevision``)."""
        selector = label_selector(deployment.get("spec", {}).get("selector") or {})
        params = {"labelSelector": selector} if selector else None
        if _is_statefulset(deployment):
            revision = (deployment.get("status") or {}).get("updateRevision")
            if not revision:
                return deployment, []
            at_revision = (
                f"{selector},{REVISION_LABEL}={revision}" if selector else f"{REVISION_LABEL}={revision}"
            )
            pods = (
                self.client.get(pods_path(self.namespace), {"labelSelector": at_revision}).get("items") or []
            )
            uid = deployment.get("metadata", {}).get("uid")
            return deployment, [p for p in pods if _owned(p, uid)]
        replicasets = self.client.get(replicasets_path(self.namespace), params).get("items") or []
        replicaset = newest_replicaset(deployment, replicasets)
        if replicaset is None:
            return None, []
        pods = self.client.get(pods_path(self.namespace), params).get("items") or []
        return replicaset, pods_of(replicaset, pods)

    def diagnose(self, deployment: dict[str, Any], with_events: bool = True) -> Diagnosis | None:
        """What the newest pods show (with their Warning events when ``with_events``)."""
        _, pods = self.newest_pods(deployment)
        events = None
        if with_events and pods:
            try:
                query = {"fieldSelector": "type=Warning", "limit": str(EVENTS_LIMIT)}
                events = self.client.get(events_path(self.namespace), query).get("items")
            except KubeError:
                events = None  # events only add detail; a cluster may forbid or drop them
        return diagnose_pods(pods, events)

    def stuck_pods(self, statefulset: dict[str, Any]) -> list[dict[str, Any]]:
        """The StatefulSet's pods that are not at its ``updateRevision`` and not ready: with
        OrderedReady the controller waits for each to be Ready before it replaces it."""
        selector = label_selector(statefulset.get("spec", {}).get("selector") or {})
        revision = (statefulset.get("status") or {}).get("updateRevision")
        uid = statefulset.get("metadata", {}).get("uid")
        if not selector or not revision:
            return []
        pods = self.client.get(pods_path(self.namespace), {"labelSelector": selector}).get("items") or []
        return [
            pod
            for pod in pods
            if _owned(pod, uid)
            and not pod.get("metadata", {}).get("deletionTimestamp")
            and _revision(pod) != revision
            and not _ready(pod)
        ]

    def replace_stuck_pods(self, statefulset: dict[str, Any], report: Report) -> list[str]:
        """Delete ``stuck_pods`` (the controller then creates them again from the update
        revision); their names."""
        deleted = []
        for pod in self.stuck_pods(statefulset):
            meta = pod.get("metadata", {})
            try:  # the uid precondition: never a pod of the same name created since the list
                self.client.delete(
                    pod_path(self.namespace, meta.get("name", "")),
                    {"preconditions": {"uid": meta.get("uid")}},
                )
                deleted.append(meta.get("name", "?"))
            except KubeApiError as exc:
                if exc.status not in (404, 409):  # gone already, or replaced since the list
                    raise
        if deleted:
            name = statefulset.get("metadata", {}).get("name", "?")
            report(0.0, f"{name}: deleted pod(s) {', '.join(deleted)} of the failed revision, not ready")
        return deleted

    # -- settlement ----------------------------------------------------------------------------

    def settle(self, names: list[str], seconds: float, report: Report) -> None:
        """Watch the new pods for ``seconds``: a restart or lost readiness is RolloutFailed (unstable)."""
        if seconds <= 0:
            return
        began = self.clock()
        end = began + seconds
        baselines: dict[str, dict[tuple[str, str], int]] = {}
        owners: dict[str, str] = {}  # ReplicaSet (or StatefulSet) uid -> workload name
        revisions: dict[str, str] = {}  # StatefulSet name -> its updateRevision: the new pods' label
        selectors = []
        for name in names:
            deployment = self._read(name)
            replicaset, pods = self.newest_pods(deployment)
            baselines[name] = restart_counts(pods)
            selectors.append(label_selector(deployment.get("spec", {}).get("selector") or {}))
            if replicaset is not None:
                owners[replicaset["metadata"].get("uid", "")] = name
            if _is_statefulset(deployment):
                revisions[name] = (deployment.get("status") or {}).get("updateRevision", "")
        # One Deployment: watch only its pods; several: the namespace's (one stream, not one each).
        scope = {"labelSelector": selectors[0]} if len(selectors) == 1 and selectors[0] else {}
        while (now := self.clock()) < end:
            report((now - began) / seconds, f"settling: {format_duration(round(end - now))} left")
            try:
                for name in names:
                    self._check_settled(name, baselines[name])
                # Resume from the list's version: a watch without one would replay every pod as ADDED.
                listed = self.client.get(pods_path(self.namespace), scope or None)
                since = {
                    **scope,
                    "resourceVersion": (listed.get("metadata") or {}).get("resourceVersion", ""),
                }
                for kind, pod in self.client.watch(pods_path(self.namespace), since, self._seconds(end)):
                    owner = _owner_name(pod, owners)
                    if owner in revisions and _revision(pod) != revisions[owner]:
                        continue  # a StatefulSet's pod below its partition: not one of the new pods
                    if owner is not None and kind == "MODIFIED":
                        found = instability(baselines[owner], [pod])
                        if found is not None:
                            raise RolloutFailed(owner, found)
                    if self.clock() >= end:
                        break
            except KubeError as exc:  # an unreachable API during settlement is not the settings' fault
                if isinstance(exc, KubeApiError) and exc.status == 410:
                    continue  # the list's version is already gone: list again
                if isinstance(exc, KubeApiError) and exc.status < 500 and exc.status != 429:
                    raise
                report((self.clock() - began) / seconds, f"settling: {exc}; retrying")
                self.sleep(max(0.0, min(RETRY_INTERVAL, end - self.clock())))
        for name in names:
            self._check_settled(name, baselines[name])
        report(1.0, "settled")

    def _check_settled(self, name: str, baseline: dict[tuple[str, str], int]) -> None:
        deployment = self._read(name)
        status = self.status(deployment)
        if status.failure is not None:
            raise RolloutFailed(name, status.failure)
        _, pods = self.newest_pods(deployment)
        found = instability(baseline, pods)
        if found is None and not status.done:
            found = Diagnosis("rejected", "unstable", f"during settlement, {status.message}")
        if found is not None:
            raise RolloutFailed(name, found)


def _observed(deployment: dict[str, Any]) -> bool:
    """Whether the controller has acted on the Deployment's current spec."""
    generation = deployment.get("metadata", {}).get("generation", 0)
    return generation <= (deployment.get("status") or {}).get("observedGeneration", 0)


def _owned(obj: dict[str, Any], uid: str | None) -> bool:
    return uid is None or any(
        ref.get("uid") == uid for ref in obj.get("metadata", {}).get("ownerReferences") or []
    )


def _revision(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata", {}).get("labels") or {}).get(REVISION_LABEL, ""))


def _owner_name(pod: dict[str, Any], owners: dict[str, str]) -> str | None:
    for ref in pod.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("uid") in owners:
            return owners[ref["uid"]]
    return None
