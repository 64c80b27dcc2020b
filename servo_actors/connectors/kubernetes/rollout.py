"""Waiting for a Deployment's or StatefulSet's rollout (kubectl's rules) and for it to stay healthy
through settlement.

``RolloutWatcher`` applies the rules of ``rollout_rules`` to the cluster: a watch per deployment,
each at most ``window`` seconds long and then re-established after a fresh read (so progress is
reported at least that often, and a watch the server or network drops costs nothing), with the
pods of the newest ReplicaSet looked at on every round (``rollout_pods``) so an image that cannot
be pulled or a crash loop fails the rollout without waiting out the timeout. A failure the
controllers retry (ReplicaFailure, a failed ReplicaSet creation) fails it once it has lasted
``failure_grace`` seconds (a quota that forbids the pods stays, a refusal by an API server that
has just restarted clears).

A StatefulSet's rollback may delete the pods the failed revision left not ready
(``replace_stuck=True``, see ``rollout_pods``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from servo_actors.connectors.kubernetes.client import (
    KubeApiError,
    KubeClient,
    KubeError,
    label_selector,
    pods_path,
    workload_path,
    workloads_path,
)
from servo_actors.connectors.kubernetes.diagnosis import (
    Diagnosis,
    has_replica_failure,
    instability,
    progress_deadline_of_another,
    restart_counts,
    without_condition,
)
from servo_actors.connectors.kubernetes.rollout_pods import RolloutPods
from servo_actors.connectors.kubernetes.rollout_rules import (
    Report,
    RolloutStatus,
    is_statefulset,
    observed,
    pod_revision,
    rollout_status,
    settlement_left,
    statefulset_status,
)
from servo_actors.durations import format_duration
from servo_actors.errors import ConnectorError

__all__ = [
    "FAILURE_GRACE",
    "RECHECK_INTERVAL",
    "RETRY_INTERVAL",
    "RolloutFailed",
    "RolloutWatcher",
    "SETTLED_RECHECK",
    "WATCH_WINDOW",
]

WATCH_WINDOW = 2.0
"""Seconds one watch lasts before a fresh read, a look at the pods and a progress report."""
RETRY_INTERVAL = 1.0
"""Seconds between attempts while the API server cannot be reached during a wait."""
FAILURE_GRACE = 5.0
"""Seconds a failure the controllers retry (ReplicaFailure, a failed ReplicaSet creation) must last
before it fails the rollout (``failure_grace`` in the connector's config)."""
SETTLED_RECHECK = 3.0
"""Seconds a workload whose pods are all stable may take to be done again during settlement (an
HPA that scaled it meanwhile: the new pod is still being created) before it counts as unstable."""
RECHECK_INTERVAL = 0.25
"""Seconds between reads of such a workload."""


class RolloutFailed(ConnectorError):
    """A rollout or settlement failed; ``diagnosis`` says how, ``deployment`` which one."""

    def __init__(self, deployment: str, diagnosis: Diagnosis) -> None:
        super().__init__(diagnosis.message)
        self.deployment = deployment
        self.diagnosis = diagnosis


class RolloutWatcher:
    """Waits on Deployments and StatefulSets of one namespace through ``client``; ``kinds`` maps a
    name to its kind (Deployment when absent); ``clock`` is monotonic seconds, ``wall_clock`` epoch
    seconds (compared with the pods' Ready times). What the rollout's pods show is read by its
    ``pods`` (``RolloutPods``)."""

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
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.pods = RolloutPods(client, namespace)
        self.failure_grace = failure_grace
        self._failing_since: dict[str, float] = {}
        """Deployment -> when a retried failure was first seen (cleared when it clears)."""
        self.namespace = namespace
        self.kinds = dict(kinds or {})
        self.window = window
        self.clock = clock
        self.sleep = sleep
        self.wall_clock = wall_clock

    def kind(self, name: str) -> str:
        return self.kinds.get(name, "Deployment")

    def _read(self, name: str) -> dict[str, Any]:
        """The workload, with its ``kind`` (the rules go by it) even from a server that leaves it out."""
        obj = self.client.get(workload_path(self.namespace, self.kind(name), name))
        return obj if "kind" in obj else {**obj, "kind": self.kind(name)}

    # -- rollout -------------------------------------------------------------------------------

    def done(self, name: str) -> bool:
        """Whether the workload's rollout is done now (``status``: the generation observed, every
        replica updated, ready and available, no old one left), from one read."""
        return self.status(self._read(name)).done

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
                if replace_stuck and is_statefulset(deployment) and observed(deployment):
                    self.pods.replace_stuck_pods(deployment, report)
                # Until the controller has seen this generation, the newest ReplicaSet may be the
                # one being replaced (e.g. a rollback's): its pods say nothing about this rollout.
                found = self.pods.diagnose(deployment, with_events=False) if observed(deployment) else None
                if found is not None and found.definite:
                    raise RolloutFailed(name, self.pods.diagnose(deployment) or found)
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
        if is_statefulset(deployment):
            return statefulset_status(deployment)
        status = rollout_status(deployment)
        if status.failure is not None and status.failure.condition == "ReplicaFailure":
            newest, _ = self.pods.newest_pods(deployment)
            if not has_replica_failure(newest):  # e.g. the ReplicaSet just rolled back from
                status = rollout_status(without_condition(deployment, "ReplicaFailure"))
        if status.failure is not None and status.failure.condition == "Progressing":
            newest, _ = self.pods.newest_pods(deployment)
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
                name, self.pods.diagnose(deployment) or self.pods.explained(deployment, status.failure)
            )
        return status

    def _timed_out(
        self, name: str, timeout: float, status: RolloutStatus | None, trouble: KubeError | None
    ) -> Diagnosis:
        if trouble is not None:
            return Diagnosis("failed", "kubernetes-unreachable", f"{self.kind(name)} {name}: {trouble}")
        found = None
        stuck: list[str] = []
        try:
            deployment = self._read(name)
            if observed(deployment):
                found = self.pods.diagnose(deployment, probes=True)
                if found is None and is_statefulset(deployment):
                    stuck = [p.get("metadata", {}).get("name", "?") for p in self.pods.stuck_pods(deployment)]
        except KubeError:
            pass  # the timeout is the news; a diagnosis would only have added detail
        if found is not None and not found.definite:  # it might have cleared: say how long it was given
            message = f"{self.kind(name)} {name} did not finish rolling out within {format_duration(timeout)}"
            return Diagnosis(found.status, found.reason, f"{message}: {found.message}", definite=False)
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

    # -- settlement ----------------------------------------------------------------------------

    def settlement_left(self, name: str, settlement: float) -> float:
        """Seconds of ``settlement`` still due for the workload: counted from when its newest
        current pod became Ready (``rollout_rules.settlement_left``)."""
        _, pods = self.pods.newest_pods(self._read(name))
        return settlement_left(pods, settlement, self.wall_clock())

    def settle(self, periods: dict[str, float], report: Report) -> None:
        """Watch each workload's new pods for its seconds in ``periods`` (all at once, each until
        its own end): a restart or lost readiness is RolloutFailed (unstable)."""
        periods = {name: seconds for name, seconds in periods.items() if seconds > 0}
        if not periods:
            return
        began = self.clock()
        ends = {name: began + seconds for name, seconds in periods.items()}
        last = max(ends.values())
        total = last - began
        baselines: dict[str, dict[tuple[str, str], int]] = {}
        owners: dict[str, str] = {}  # ReplicaSet (or StatefulSet) uid -> workload name
        revisions: dict[str, str] = {}  # StatefulSet name -> its updateRevision: the new pods' label
        selectors = []
        for name in periods:
            deployment = self._read(name)
            replicaset, pods = self.pods.newest_pods(deployment)
            baselines[name] = restart_counts(pods)
            selectors.append(label_selector(deployment.get("spec", {}).get("selector") or {}))
            if replicaset is not None:
                owners[replicaset["metadata"].get("uid", "")] = name
            if is_statefulset(deployment):
                revisions[name] = (deployment.get("status") or {}).get("updateRevision", "")
        # One Deployment: watch only its pods; several: the namespace's (one stream, not one each).
        scope = {"labelSelector": selectors[0]} if len(selectors) == 1 and selectors[0] else {}
        watching = dict(ends)  # the workloads whose settlement has not ended yet
        while True:
            now = self.clock()
            for name in [n for n, end in watching.items() if end <= now]:
                self._check_settled(name, baselines[name])  # at its own end
                del watching[name]
            if not watching:
                break
            end = min(watching.values())  # the watch lasts until the next one ends
            report((now - began) / total, f"settling: {format_duration(round(last - now))} left")
            try:
                for name in watching:
                    self._check_settled(name, baselines[name])
                # Resume from the list's version: a watch without one would replay every pod as ADDED.
                listed = self.client.get(pods_path(self.namespace), scope or None)
                since = {
                    **scope,
                    "resourceVersion": (listed.get("metadata") or {}).get("resourceVersion", ""),
                }
                for kind, pod in self.client.watch(pods_path(self.namespace), since, self._seconds(end)):
                    owner = _owner_name(pod, owners)
                    if owner in revisions and pod_revision(pod) != revisions[owner]:
                        continue  # a StatefulSet's pod below its partition: not one of the new pods
                    if owner in watching and kind == "MODIFIED":
                        found = instability(baselines[owner], [pod])
                        if found is not None:  # again, with the events that may name a failing probe
                            raise RolloutFailed(
                                owner, instability(baselines[owner], [pod], self.pods.warnings()) or found
                            )
                    if self.clock() >= end:
                        break
            except KubeError as exc:  # an unreachable API during settlement is not the settings' fault
                if isinstance(exc, KubeApiError) and exc.status == 410:
                    continue  # the list's version is already gone: list again
                if isinstance(exc, KubeApiError) and exc.status < 500 and exc.status != 429:
                    raise
                report((self.clock() - began) / total, f"settling: {exc}; retrying")
                self.sleep(max(0.0, min(RETRY_INTERVAL, end - self.clock())))
        report(1.0, "settled")

    def _check_settled(self, name: str, baseline: dict[tuple[str, str], int]) -> None:
        """RolloutFailed if a pod of ``name`` restarted or lost readiness, or if it is not done while
        every pod is stable and stays so for ``SETTLED_RECHECK`` seconds."""
        give_up = self.clock() + SETTLED_RECHECK
        while True:
            deployment = self._read(name)
            status = self.status(deployment)
            if status.failure is not None:
                raise RolloutFailed(name, status.failure)
            _, pods = self.pods.newest_pods(deployment)
            found = instability(baseline, pods)
            if found is not None:  # again, with the events that may name a failing probe
                raise RolloutFailed(name, instability(baseline, pods, self.pods.warnings()) or found)
            if status.done:
                return
            now = self.clock()
            if now >= give_up:
                raise RolloutFailed(
                    name, Diagnosis("rejected", "unstable", f"during settlement, {status.message}")
                )
            self.sleep(min(RECHECK_INTERVAL, give_up - now))


def _owner_name(pod: dict[str, Any], owners: dict[str, str]) -> str | None:
    for ref in pod.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("uid") in owners:
            return owners[ref["uid"]]
    return None
