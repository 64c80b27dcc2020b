"""The pods of a rollout, read from the cluster: the newest ReplicaSet's (or revision's) pods, what
they show (crash loops, image pull errors, unschedulable: ``diagnosis.diagnose_pods`` with the
namespace's Warning events), and a StatefulSet's pods stuck at an older revision.

Apart from ``rollout`` (the waiting and settling) as the one place a rollout reads pods: the
``rollout.RolloutWatcher`` holds one, for its client and namespace. A rollback of a StatefulSet
may have to delete the pods the failed revision left not ready (``replace_stuck_pods``): with
OrderedReady the controller waits for a pod to be Ready before it replaces it, so a crash-looping
pod would hold the rollback forever (the Kubernetes docs, StatefulSets, "Forced rollback").
"""

from __future__ import annotations

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
)
from servo_actors.connectors.kubernetes.diagnosis import (
    Diagnosis,
    diagnose_pods,
    newest_replicaset,
    pods_of,
    probe_failure,
    unready_detail,
)
from servo_actors.connectors.kubernetes.rollout_rules import (
    REVISION_LABEL,
    Report,
    is_statefulset,
    owned_by,
    pod_ready,
    pod_revision,
)

__all__ = ["EVENTS_LIMIT", "RolloutPods"]

EVENTS_LIMIT = 500
"""At most this many Warning events of the namespace are read to explain a failure."""


class RolloutPods:
    """Reads the pods of a Deployment's or StatefulSet's rollout in ``namespace`` through ``client``."""

    def __init__(self, client: KubeClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace

    def newest_pods(self, deployment: dict[str, Any]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The newest ReplicaSet of ``deployment`` and its pods (a StatefulSet: itself and its pods
        at its ``updateRevision``)."""
        selector = label_selector(deployment.get("spec", {}).get("selector") or {})
        params = {"labelSelector": selector} if selector else None
        if is_statefulset(deployment):
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
            return deployment, [p for p in pods if owned_by(p, uid)]
        replicasets = self.client.get(replicasets_path(self.namespace), params).get("items") or []
        replicaset = newest_replicaset(deployment, replicasets)
        if replicaset is None:
            return None, []
        pods = self.client.get(pods_path(self.namespace), params).get("items") or []
        return replicaset, pods_of(replicaset, pods)

    def diagnose(
        self, deployment: dict[str, Any], with_events: bool = True, probes: bool = False
    ) -> Diagnosis | None:
        """What the newest pods show (with their Warning events when ``with_events``); with
        ``probes``, also a pod kept from Ready by a failing probe (``probe_failure``)."""
        _, pods = self.newest_pods(deployment)
        events = self.warnings() if with_events and pods else None
        found = diagnose_pods(pods, events)
        if found is None and probes:
            found = probe_failure(pods, events)
        return found

    def warnings(self) -> list[dict[str, Any]] | None:
        """The namespace's Warning events (at most EVENTS_LIMIT), None when they cannot be read."""
        try:
            query = {"fieldSelector": "type=Warning", "limit": str(EVENTS_LIMIT)}
            answer = self.client.get(events_path(self.namespace), query)
        except KubeError:
            return None  # events only add detail; a cluster may forbid or drop them
        items: list[dict[str, Any]] | None = answer.get("items")
        return items

    def explained(self, deployment: dict[str, Any], failure: Diagnosis) -> Diagnosis:
        """``failure`` (a Deployment condition) with why a new pod is not ready, when one is not
        (the failing probe, when the kubelet said which)."""
        try:
            _, pods = self.newest_pods(deployment)
        except KubeError:
            return failure  # the condition is the news; the pods would only have added detail
        probe = probe_failure(pods, self.warnings()) if pods else None
        detail = probe.message if probe is not None else unready_detail(pods)
        if not detail:
            return failure
        message = f"{failure.message.rstrip('.')} ({detail})"
        return Diagnosis(failure.status, failure.reason, message, failure.definite, failure.condition)

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
            if owned_by(pod, uid)
            and not pod.get("metadata", {}).get("deletionTimestamp")
            and pod_revision(pod) != revision
            and not pod_ready(pod)
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
