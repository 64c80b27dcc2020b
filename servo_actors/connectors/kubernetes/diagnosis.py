"""Why a rollout failed, from the newest ReplicaSet's pods: a status, a reason word and a message.

Pure functions over dicts of Deployments, ReplicaSets, pods and events.

- ``rejected``/``unschedulable``: a pod cannot be placed (not enough CPU/memory, taints, quota).
- ``rejected``/``start-failed``: containers crash, cannot be created, or the controller gave up.
- ``rejected``/``unstable``: containers restart, or readiness is lost, during settlement.
- ``rejected``/``start-failed`` from ``probe_failure``: a running pod that never became Ready, with
  the kubelet's failed-probe events (named when a wait for readiness runs out).
- ``failed``/``image-pull-failed``: the image cannot be pulled (not the settings' fault).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "Diagnosis",
    "IMAGE_PULL_REASONS",
    "PROBE_FAILED_REASON",
    "REVISION_ANNOTATION",
    "START_FAILURE_REASONS",
    "deployment_condition_failure",
    "diagnose_pods",
    "has_replica_failure",
    "instability",
    "newest_replicaset",
    "pods_of",
    "probe_detail",
    "probe_failure",
    "progress_deadline_of_another",
    "restart_counts",
    "unready_detail",
    "without_condition",
]

REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
IMAGE_PULL_REASONS = {
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "RegistryUnavailable",
}
PROBE_FAILED_REASON = "Unhealthy"
"""The reason of the kubelet's Warning event for a failed probe; its message names the probe
("Readiness probe failed: HTTP probe failed with statuscode: 503")."""
START_FAILURE_REASONS = {
    "CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
    "StartError", "ContainerCannotRun", "OOMKilled", "Error",
}  # fmt: skip


@dataclass(frozen=True)
class Diagnosis:
    """What went wrong. ``definite``: it will not heal by waiting (fail the rollout at once)."""

    status: str
    reason: str
    message: str
    definite: bool = True
    condition: str = ""
    """The Deployment condition it comes from (``ReplicaFailure``, ``Progressing``), if any."""
    retried: bool = False
    """The controllers retry what failed (creating a ReplicaSet or pods): it may clear by itself,
    e.g. a refusal by an API server that has just restarted and not yet loaded its RBAC rules."""


def newest_replicaset(deployment: dict[str, Any], replicasets: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ReplicaSet of the Deployment's current template: the one owned by it with the highest
    revision (creation time breaks ties and stands in when no revision is set)."""
    uid = deployment.get("metadata", {}).get("uid")
    owned = [rs for rs in replicasets if _owned_by(rs, uid)] if uid else list(replicasets)
    if not owned:
        return None

    def order(rs: dict[str, Any]) -> tuple[int, str]:
        meta = rs.get("metadata", {})
        try:
            revision = int((meta.get("annotations") or {}).get(REVISION_ANNOTATION, 0))
        except ValueError:
            revision = 0
        return revision, str(meta.get("creationTimestamp") or "")

    return max(owned, key=order)


def pods_of(replicaset: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods the ReplicaSet owns (by owner uid; by its pod-template-hash label when pods carry no owner)."""
    uid = replicaset.get("metadata", {}).get("uid")
    owned = [pod for pod in pods if uid and _owned_by(pod, uid)]
    if owned:
        return owned
    wanted = (replicaset.get("metadata", {}).get("labels") or {}).get("pod-template-hash")
    if wanted:
        return [
            pod
            for pod in pods
            if (pod.get("metadata", {}).get("labels") or {}).get("pod-template-hash") == wanted
        ]
    return []


def _owned_by(obj: dict[str, Any], uid: str | None) -> bool:
    return any(ref.get("uid") == uid for ref in obj.get("metadata", {}).get("ownerReferences") or [])


def diagnose_pods(pods: list[dict[str, Any]], events: list[dict[str, Any]] | None = None) -> Diagnosis | None:
    """The most telling problem among ``pods``: an image that cannot be pulled, a container that
    cannot start, a pod that cannot be scheduled (not definite: a node may be added). None when
    the pods show nothing wrong."""
    pull = start = unschedulable = None
    for pod in pods:
        name = pod.get("metadata", {}).get("name", "?")
        status = pod.get("status") or {}
        for condition in status.get("conditions") or []:
            if (
                condition.get("type") == "PodScheduled"
                and condition.get("status") == "False"
                and unschedulable is None
            ):
                detail = (
                    condition.get("message")
                    or _event_message(events, name)
                    or condition.get("reason")
                    or "no reason given"
                )
                unschedulable = Diagnosis(
                    "rejected", "unschedulable",
                    f"pod {name} cannot be scheduled: {detail} (ask for less CPU or memory, or add capacity)",
                    definite=False,
                )  # fmt: skip
        for container in (status.get("initContainerStatuses") or []) + (
            status.get("containerStatuses") or []
        ):
            found = _container_problem(name, container, events)
            if found is None:
                continue
            if found.reason == "image-pull-failed" and pull is None:
                pull = found
            elif found.reason == "start-failed" and start is None:
                start = found
    return pull or start or unschedulable


def _container_problem(
    pod: str, container: dict[str, Any], events: list[dict[str, Any]] | None
) -> Diagnosis | None:
    name = container.get("name", "?")
    state = container.get("state") or {}
    waiting = state.get("waiting") or {}
    reason = waiting.get("reason")
    restarts = int(container.get("restartCount") or 0)
    last = (container.get("lastState") or {}).get("terminated") or {}
    if reason in IMAGE_PULL_REASONS:
        detail = waiting.get("message") or _event_message(events, pod) or reason
        image = container.get("image", "?")
        return Diagnosis(
            "failed", "image-pull-failed",
            f"container {name} of pod {pod} cannot pull image {image}: {detail} ({reason}; check the image name and registry access)",
        )  # fmt: skip
    if reason in START_FAILURE_REASONS or (
        restarts > 0 and last.get("exitCode", 0) != 0 and not container.get("ready")
    ):
        how = reason or "restarting"
        ended = ""
        if last:
            ended = f"; last exit: {last.get('reason') or 'Error'} (code {last.get('exitCode', '?')})"
            # The last line of its termination message, or of its log (FallbackToLogsOnError).
            lines = [line.strip() for line in str(last.get("message") or "").splitlines() if line.strip()]
            if lines:
                ended += f", saying {_clipped(lines[-1])!r}"
        detail = waiting.get("message") or ""
        hint = " (it may need more memory)" if last.get("reason") == "OOMKilled" else ""
        return Diagnosis(
            "rejected", "start-failed",
            f"container {name} of pod {pod} fails to start: {how}, restarted {restarts} time(s){ended}"
            + (f": {detail}" if detail else "") + hint,
            # A restart with the container running again may still settle; a waiting reason will not.
            definite=reason in START_FAILURE_REASONS,
        )  # fmt: skip
    return None


MESSAGE_LIMIT = 300
"""At most this many characters of a container's termination message (its end) go into a diagnosis."""


def _clipped(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else "..." + text[-MESSAGE_LIMIT:]


def probe_failure(pods: list[dict[str, Any]], events: list[dict[str, Any]] | None) -> Diagnosis | None:
    """Why a pod of ``pods`` is not Ready, when the kubelet has said so: ``rejected``/``start-failed``
    naming the pod and its ``probe_detail``. Not definite: a probe may pass later (a slow start), so
    this explains a wait that ran out rather than ending one. None when no such event is found."""
    for pod in pods:
        meta = pod.get("metadata", {})
        if meta.get("deletionTimestamp") or _pod_ready(pod):
            continue
        detail = probe_detail(pod, events)
        if detail:
            return Diagnosis(
                "rejected",
                "start-failed",
                f"pod {meta.get('name', '?')} is not ready: {detail}",
                definite=False,
            )
    return None


def probe_detail(pod: dict[str, Any], events: list[dict[str, Any]] | None) -> str:
    """The pod's latest failed probe, from the kubelet's ``Unhealthy`` Warning events about it: the
    container, the kubelet's words, how many times it failed and the container's restarts
    ("container main: Readiness probe failed: HTTP probe failed with statuscode: 503 (8 time(s);
    the container restarted 0 time(s))"); "" when there is no such event."""
    meta = pod.get("metadata", {})
    name, uid = meta.get("name", "?"), meta.get("uid")
    failed = [
        event
        for event in events or []
        if event.get("reason") == PROBE_FAILED_REASON
        and (event.get("involvedObject") or {}).get("name") == name
        and (event.get("involvedObject") or {}).get("uid") in (None, uid)
    ]
    if not failed:
        return ""
    latest = max(failed, key=lambda event: str(event.get("lastTimestamp") or event.get("eventTime") or ""))
    times = sum(int(event.get("count") or 1) for event in failed)
    container = _container_of(latest)
    restarts = [
        int(status.get("restartCount") or 0)
        for status in (pod.get("status") or {}).get("containerStatuses") or []
        if status.get("name") == container
    ]
    where = f"container {container}: " if container else ""
    restarted = f"; the container restarted {restarts[0]} time(s)" if restarts else ""
    return f"{where}{latest.get('message') or 'a probe failed'} ({times} time(s){restarted})"


def _pod_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _container_of(event: dict[str, Any]) -> str:
    """The container an event is about (``spec.containers{main}``), or "" when it does not say."""
    path = str((event.get("involvedObject") or {}).get("fieldPath") or "")
    return path.partition("{")[2].rstrip("}")


def _event_message(events: list[dict[str, Any]] | None, pod: str) -> str | None:
    """The latest Warning event about ``pod``, if the events were fetched."""
    latest = None
    for event in events or []:
        involved = event.get("involvedObject") or {}
        if involved.get("name") == pod and event.get("type") == "Warning":
            latest = event.get("message") or latest
    return latest


def deployment_condition_failure(deployment: dict[str, Any]) -> Diagnosis | None:
    """A state that ends the rollout at once: Progressing=False (ProgressDeadlineExceeded),
    ReplicaFailure=True (e.g. a quota forbids the pods), or a paused Deployment."""
    name = deployment.get("metadata", {}).get("name", "?")
    if deployment.get("spec", {}).get("paused"):
        return Diagnosis(
            "failed", "deployment-paused",
            f"Deployment {name} was paused during its rollout (kubectl rollout resume deployment/{name})",
        )  # fmt: skip
    for condition in deployment.get("status", {}).get("conditions") or []:
        kind, status, reason = condition.get("type"), condition.get("status"), condition.get("reason")
        message = condition.get("message") or reason or ""
        if kind == "Progressing" and (reason == "ProgressDeadlineExceeded" or status == "False"):
            return Diagnosis(
                "rejected",
                "start-failed",
                f"Deployment {name} stopped progressing: {message}",
                condition=kind,
                retried=reason != "ProgressDeadlineExceeded",  # e.g. ReplicaSetCreateError
            )
        if kind == "ReplicaFailure" and status == "True":
            return Diagnosis(
                "rejected",
                "start-failed",
                f"Deployment {name} cannot create pods: {message}",
                condition=kind,
                retried=True,
            )
    return None


def has_replica_failure(replicaset: dict[str, Any] | None) -> bool:
    """Whether the ReplicaSet itself cannot create its pods (the Deployment also reports an *old*
    ReplicaSet's failure, e.g. the one just rolled back from, until that one is scaled down)."""
    conditions = ((replicaset or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "ReplicaFailure" and c.get("status") == "True" for c in conditions)


def progress_deadline_of_another(deployment: dict[str, Any], replicaset: dict[str, Any] | None) -> bool:
    """Whether the Deployment's ProgressDeadlineExceeded names a ReplicaSet other than ``replicaset``.

    The real controller keeps that condition, message and all, when the template goes back to an
    existing ReplicaSet (a rollback): it is replaced only once the new set makes progress. Until
    then it is the failed rollout's verdict, not this one's (kubectl's rule would stop on it too).
    """
    if replicaset is None:
        return False
    name = replicaset.get("metadata", {}).get("name", "")
    for condition in deployment.get("status", {}).get("conditions") or []:
        if condition.get("type") == "Progressing" and condition.get("reason") == "ProgressDeadlineExceeded":
            message = condition.get("message") or ""
            return message.startswith("ReplicaSet ") and f'"{name}"' not in message
    return False


def unready_detail(pods: list[dict[str, Any]]) -> str:
    """Why the first pod that is not Ready is not (its Ready condition), or ""."""
    for pod in pods:
        if pod.get("metadata", {}).get("deletionTimestamp"):
            continue
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "Ready" and condition.get("status") != "True":
                why = condition.get("message") or condition.get("reason") or "not ready"
                return f"pod {pod.get('metadata', {}).get('name', '?')} is not ready: {why}"
        if not (pod.get("status") or {}).get("conditions"):
            return f"pod {pod.get('metadata', {}).get('name', '?')} has no status yet"
    return ""


def without_condition(deployment: dict[str, Any], kind: str) -> dict[str, Any]:
    """``deployment`` with the status condition ``kind`` left out (a shallow copy)."""
    status = dict(deployment.get("status") or {})
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != kind]
    return {**deployment, "status": status}


def restart_counts(pods: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
    """``(pod, container) -> restartCount``: the baseline that settlement compares against."""
    counts = {}
    for pod in pods:
        name = pod.get("metadata", {}).get("name", "?")
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            counts[(name, container.get("name", "?"))] = int(container.get("restartCount") or 0)
    return counts


def instability(
    baseline: dict[tuple[str, str], int],
    pods: list[dict[str, Any]],
    events: list[dict[str, Any]] | None = None,
) -> Diagnosis | None:
    """``rejected``/``unstable`` when a container restarted since ``baseline`` or a pod of the
    baseline lost readiness (pods started since, e.g. by an HPA, may still be getting ready); with
    ``events``, a lost readiness names the failing probe (``probe_detail``)."""
    known = {pod_name for pod_name, _ in baseline}
    for pod in pods:
        meta = pod.get("metadata", {})
        if meta.get("deletionTimestamp"):
            continue
        name = meta.get("name", "?")
        for (pod_name, container), count in restart_counts([pod]).items():
            if count > baseline.get((pod_name, container), 0):
                return Diagnosis(
                    "rejected", "unstable",
                    f"container {container} of pod {name} restarted during settlement "
                    f"({count} restart(s)); the new settings do not hold up",
                )  # fmt: skip
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if name in known and condition.get("type") == "Ready" and condition.get("status") != "True":
                detail = condition.get("message") or condition.get("reason") or ""
                probe = probe_detail(pod, events)
                detail = f"{detail}; {probe}" if detail and probe else detail or probe
                return Diagnosis(
                    "rejected",
                    "unstable",
                    f"pod {name} lost readiness during settlement" + (f": {detail}" if detail else ""),
                )
    return None
