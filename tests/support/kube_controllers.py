"""The Deployment and ReplicaSet controllers (with the kubelet's pod states, and the HPA controller).

``Controllers.reconcile`` runs on the API server's loop thread (``KubeApiHost.call``), so one pass
sees and writes a consistent store, as one controller-manager sync would; kube_controller_thread
drives it (and skips it while the API server is unplugged: a controller-manager cut off from its
API server can do nothing).

Rolling updates follow the real controller's arithmetic: the new ReplicaSet grows up to
``replicas + maxSurge`` pods in total, old ones shrink while at least ``replicas - maxUnavailable``
pods stay available. A pod's state comes from the FailureMode its ReplicaSet was created under, so
changing the mode affects the next rollout only, and a rollback to an earlier template reuses (and
re-heals) that template's ReplicaSet.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import kube_objects
import kube_pod_states
from kube_hpa_controller import HpaController
from kube_metrics import PodUsage
from kube_objects import KINDS, REVISION_ANNOTATION, is_ready, owned_by
from kube_pod_states import FailureMode, PodState
from kube_store import KubeStore, clone

DEPLOYMENT, REPLICASET, POD, HPA = KINDS["deployment"], KINDS["replicaset"], KINDS["pod"], KINDS["hpa"]
SETTLE_PASSES = 50
"""Bound on the instant passes that seed an already-rolled-out Deployment."""
PROGRESS_DEADLINE_PERIODS = 2
"""PROGRESS_DEADLINE: the rollout times out after this many rollout periods without progress."""
DEFAULT_PROGRESS_DEADLINE = 600
"""spec.progressDeadlineSeconds when a Deployment has none (the API default)."""
SEEDED = -1e9
"""Creation time of seeded pods: long ago, so they are settled."""


def _percent_or_int(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        exact = total * int(value[:-1]) / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return int(value)


def rolling_limits(deployment: dict[str, Any], replicas: int) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) resolved as the deployment controller does."""
    strategy = deployment["spec"].get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0, replicas
    rolling = strategy.get("rollingUpdate") or {}
    surge = _percent_or_int(rolling.get("maxSurge", "25%"), replicas, round_up=True)
    unavailable = _percent_or_int(rolling.get("maxUnavailable", "25%"), replicas, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def _revision(obj: dict[str, Any]) -> int:
    return int(obj["metadata"].get("annotations", {}).get(REVISION_ANNOTATION, "0"))


@dataclass
class _Memory:
    """What the controllers remember between passes (the real ones keep it in informer caches)."""

    modes: dict[str, FailureMode] = field(default_factory=dict)  # ReplicaSet uid -> mode at creation
    born: dict[str, float] = field(default_factory=dict)  # pod uid -> monotonic creation time
    states: dict[str, PodState] = field(default_factory=dict)  # pod uid -> last state written
    rollout_started: dict[str, float] = field(default_factory=dict)  # deployment uid -> time
    stuck: dict[str, int] = field(default_factory=dict)  # deployment uid -> generation left alone
    paused: dict[str, bool] = field(default_factory=dict)  # deployment uid -> seen paused
    terminating: dict[str, float] = field(default_factory=dict)  # pod uid -> when its deletion began
    completed: dict[str, float] = field(default_factory=dict)  # ReplicaSet uid -> when its rollout completed
    counts: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # deployment uid -> last counts
    progressed: dict[str, float] = field(default_factory=dict)  # deployment uid -> when counts last moved
    serial: int = 0


class Controllers:
    """Deployment + ReplicaSet + HPA controllers over an EmulatedApiServer's store."""

    def __init__(self, store: KubeStore, usage: PodUsage) -> None:
        self.store = store
        self.usage = usage
        self.mode = FailureMode.HEALTHY
        self.rollout_seconds = 0.2
        self.only: tuple[str, ...] | None = None
        self.memory = _Memory()
        self.hpa = HpaController(store, usage)
        self.next_due: float | None = None  # when something changes with time alone (monotonic)
        self._instant = False  # seeding: new pods count as created long ago

    # ---- one pass (loop thread) -------------------------------------------------------------------

    def reconcile(self, now: float) -> None:
        """One pass over every controlled object; repeats (bounded) while a pass still writes."""
        self.next_due = None
        self.store.quiet = True
        try:
            for _ in range(SETTLE_PASSES):
                before = self.store.revision
                for deployment in self.store.list(DEPLOYMENT):
                    if self.only is None or deployment["metadata"]["name"] in self.only:
                        self._sync_deployment(deployment, now, instant=False)
                for hpa in self.store.list(HPA):
                    self.hpa.sync(hpa)
                self._finish_terminations(now)
                self._collect_orphans()
                if self.store.revision == before:
                    return
        finally:
            self.store.quiet = False

    def settle(self, namespace: str, name: str) -> None:
        """Roll a Deployment out instantly and healthily (it existed, settled, before the test)."""
        self._instant = True
        try:
            for _ in range(SETTLE_PASSES):
                deployment = self.store.get(DEPLOYMENT, namespace, name)
                assert deployment is not None
                if not self._sync_deployment(deployment, time.monotonic(), instant=True):
                    return
        finally:
            self._instant = False
        raise RuntimeError(f"deployment {namespace}/{name} did not settle in {SETTLE_PASSES} passes")

    # ---- Deployment -------------------------------------------------------------------------------

    def _sync_deployment(self, deployment: dict[str, Any], now: float, instant: bool) -> bool:
        """One sync; returns whether anything was written."""
        meta = deployment["metadata"]
        namespace, uid, generation = meta["namespace"], meta["uid"], meta.get("generation", 1)
        if self.memory.stuck.get(uid) == generation:
            return False
        observed = deployment.get("status", {}).get("observedGeneration")
        if not instant and observed != generation and self.mode is FailureMode.STUCK:
            self.memory.stuck[uid] = generation
            return False
        wrote = False
        owned = [clone(rs) for rs in self.store.peek(REPLICASET, namespace) if owned_by(rs, deployment)]
        pod_hash = kube_objects.template_hash(deployment["spec"]["template"])
        newest = max((_revision(rs) for rs in owned), default=0)
        new = next(
            (rs for rs in owned if rs["metadata"]["labels"].get("pod-template-hash") == pod_hash), None
        )
        progress: tuple[str, str] | None = None
        if deployment["spec"].get("paused") and not instant:
            return self._sync_paused(deployment, owned, new, now)
        if self.memory.paused.pop(uid, False):
            progress = ("DeploymentResumed", "Deployment is resumed")
        if new is None:
            new = self.store.commit(REPLICASET, kube_objects.replicaset(deployment, pod_hash, newest + 1))
            self.memory.modes[new["metadata"]["uid"]] = FailureMode.HEALTHY if instant else self.mode
            self.memory.rollout_started[uid] = now
            owned.append(new)
            progress = ("NewReplicaSetCreated", f'Created new replica set "{new["metadata"]["name"]}"')
            wrote = True
        elif _revision(new) < newest:
            new["metadata"]["annotations"][REVISION_ANNOTATION] = str(newest + 1)
            new = self.store.commit(REPLICASET, new)
            self.memory.rollout_started[uid] = now
            progress = ("FoundNewReplicaSet", f'Found new replica set "{new["metadata"]["name"]}"')
            wrote = True
        if meta.get("annotations", {}).get(REVISION_ANNOTATION) != str(_revision(new)):
            meta.setdefault("annotations", {})[REVISION_ANNOTATION] = str(_revision(new))
            deployment = self.store.commit(DEPLOYMENT, deployment)
            wrote = True
        old = sorted((rs for rs in owned if rs["metadata"]["uid"] != new["metadata"]["uid"]), key=_revision)
        wrote |= self._scale(deployment, new, old)
        pods: dict[str, list[dict[str, Any]]] = {}
        for rs in [new, *old]:
            rs = self.store.get(REPLICASET, namespace, rs["metadata"]["name"]) or rs
            rs_pods, changed = self._sync_replicaset(rs, now)
            pods[rs["metadata"]["uid"]] = rs_pods
            wrote |= changed
        wrote |= self._write_deployment_status(deployment, new, old, pods, progress, now)
        return wrote

    def _sync_paused(
        self, deployment: dict[str, Any], owned: list[dict[str, Any]], new: dict[str, Any] | None, now: float
    ) -> bool:
        """A paused Deployment: no rollout of a changed template, its ReplicaSets and pods kept as they are."""
        self.memory.paused[deployment["metadata"]["uid"]] = True
        if not owned:
            return False
        current = new or max(owned, key=_revision)
        pods: dict[str, list[dict[str, Any]]] = {}
        wrote = False
        for rs in owned:
            rs_pods, changed = self._sync_replicaset(rs, now)
            pods[rs["metadata"]["uid"]] = rs_pods
            wrote |= changed
        if new is None:
            pods[""] = []  # nothing runs the new template yet: updatedReplicas 0
            current = dict(current, metadata=dict(current["metadata"], uid=""))
        old = [rs for rs in owned if rs["metadata"]["uid"] != current["metadata"]["uid"]]
        return (
            self._write_deployment_status(deployment, current, old, pods, ("DeploymentPaused", ""), now)
            or wrote
        )

    def _scale(self, deployment: dict[str, Any], new: dict[str, Any], old: list[dict[str, Any]]) -> bool:
        replicas = deployment["spec"].get("replicas", 1)
        surge, unavailable = rolling_limits(deployment, replicas)
        all_pods = [pod for rs in [new, *old] for pod in self._pods_of(rs)]
        total = sum(rs["spec"]["replicas"] for rs in [new, *old])
        available = sum(1 for pod in all_pods if is_ready(pod))
        targets = {new["metadata"]["uid"]: new["spec"]["replicas"]}
        current = new["spec"]["replicas"]
        if current > replicas:
            targets[new["metadata"]["uid"]] = replicas
        elif current < replicas:
            room = max(0, replicas + surge - total)
            targets[new["metadata"]["uid"]] = min(replicas, current + room)
        removable = max(0, available - (replicas - unavailable))
        for rs in old:
            size = rs["spec"]["replicas"]
            unready = sum(1 for pod in self._pods_of(rs) if not is_ready(pod))
            cut = min(size, unready + removable)
            removable -= max(0, cut - unready)
            targets[rs["metadata"]["uid"]] = size - cut
        wrote = False
        for rs in [new, *old]:
            target = targets[rs["metadata"]["uid"]]
            if target == rs["spec"]["replicas"]:
                continue
            verb = "up" if target > rs["spec"]["replicas"] else "down"
            message = f"Scaled {verb} replica set {rs['metadata']['name']} to {target}"
            if verb == "down":
                message += f" from {rs['spec']['replicas']}"
            rs["spec"]["replicas"] = target
            rs["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"] = str(replicas)
            self.store.commit(REPLICASET, rs)
            self.store.record_event(deployment, "ScalingReplicaSet", message, False, "deployment-controller")
            wrote = True
        return wrote

    def _pods_of(self, rs: dict[str, Any]) -> list[dict[str, Any]]:
        """The ReplicaSet's active pods (Terminating ones no longer count, as in the controller)."""
        return [
            pod
            for pod in self.store.peek(POD, rs["metadata"]["namespace"])
            if owned_by(pod, rs) and not pod["metadata"].get("deletionTimestamp")
        ]

    def _write_deployment_status(
        self,
        deployment: dict[str, Any],
        new: dict[str, Any],
        old: list[dict[str, Any]],
        pods: dict[str, list[dict[str, Any]]],
        progress: tuple[str, str] | None,
        now: float,
    ) -> bool:
        deployment = (
            self.store.get(DEPLOYMENT, deployment["metadata"]["namespace"], deployment["metadata"]["name"])
            or deployment
        )
        replicas = deployment["spec"].get("replicas", 1)
        _, unavailable = rolling_limits(deployment, replicas)
        new_pods = pods[new["metadata"]["uid"]]
        every = [pod for group in pods.values() for pod in group]
        ready = sum(1 for pod in every if is_ready(pod))
        updated = len(new_pods)
        new_name = new["metadata"]["name"]
        previous = {cond["type"]: cond for cond in deployment.get("status", {}).get("conditions", [])}
        complete = (
            updated == replicas
            and len(every) == replicas
            and ready == replicas
            and all(is_ready(pod) for pod in new_pods)
        )
        mode = self.memory.modes.get(new["metadata"]["uid"], FailureMode.HEALTHY)
        started = self.memory.rollout_started.get(deployment["metadata"]["uid"], now)
        timed_out = (
            mode is FailureMode.PROGRESS_DEADLINE
            and not complete
            and now - started >= PROGRESS_DEADLINE_PERIODS * self.rollout_seconds
        )
        uid = deployment["metadata"]["uid"]
        counts = (updated, ready, len(every))
        if progress is not None or self.memory.counts.get(uid) != counts:
            self.memory.counts[uid], self.memory.progressed[uid] = counts, now
        deadline = deployment["spec"].get("progressDeadlineSeconds", DEFAULT_PROGRESS_DEADLINE)
        timed_out = timed_out or (not complete and now - self.memory.progressed.get(uid, now) >= deadline)
        old_progress = previous.get("Progressing")
        if progress is not None:
            self.memory.completed.pop(new["metadata"]["uid"], None)
        elif complete and new["metadata"]["uid"] not in self.memory.completed:
            self.memory.completed[new["metadata"]["uid"]] = now
            if mode is FailureMode.UNSTABLE:
                self._due_at(now + self.rollout_seconds)  # the first restart, one period after completion
        # The real controller leaves a completed rollout's condition alone while every pod runs the
        # new template, even when readiness comes and goes (progress.go, isCompleteDeployment).
        settled = (
            progress is None
            and old_progress is not None
            and len(every) == updated
            and old_progress.get("reason") == "NewReplicaSetAvailable"
        )
        progressing: tuple[bool | None, str, str]
        if progress is not None and progress[0] == "DeploymentPaused":
            progressing = (None, "DeploymentPaused", "Deployment is paused")
        elif complete or settled:
            progressing = (
                True,
                "NewReplicaSetAvailable",
                f'ReplicaSet "{new_name}" has successfully progressed.',
            )
        elif timed_out or (
            old_progress and old_progress.get("reason") == "ProgressDeadlineExceeded" and not progress
        ):
            progressing = (
                False,
                "ProgressDeadlineExceeded",
                f'ReplicaSet "{new_name}" has timed out progressing.',
            )
        elif progress is not None and progress[0] == "DeploymentResumed":
            progressing = (None, *progress)
        elif progress is not None:
            progressing = (True, *progress)
        elif (
            old_progress
            and old_progress.get("reason") in ("NewReplicaSetCreated", "FoundNewReplicaSet")
            and deployment.get("status", {}).get("updatedReplicas") == updated
        ):
            progressing = (True, old_progress["reason"], old_progress.get("message", ""))
        else:
            progressing = (True, "ReplicaSetUpdated", f'ReplicaSet "{new_name}" is progressing.')
        available = ready >= replicas - unavailable
        conditions = [
            kube_objects.condition(
                "Available",
                available,
                "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                "Deployment has minimum availability."
                if available
                else "Deployment does not have minimum availability.",
                previous.get("Available"),
            ),
            kube_objects.condition(
                "Progressing", progressing[0], progressing[1], progressing[2], previous.get("Progressing")
            ),
        ]
        failed = next(
            (
                cond
                for rs in [new, *old]
                for cond in (
                    self.store.get(REPLICASET, rs["metadata"]["namespace"], rs["metadata"]["name"]) or rs
                )
                .get("status", {})
                .get("conditions", [])
                if cond["type"] == "ReplicaFailure"
            ),
            None,
        )
        if failed is not None:
            conditions.append(
                kube_objects.condition(
                    "ReplicaFailure",
                    True,
                    failed.get("reason"),
                    failed.get("message"),
                    previous.get("ReplicaFailure"),
                )
            )
        status: dict[str, Any] = {
            "observedGeneration": deployment["metadata"].get("generation", 1),
            "replicas": len(every),
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "conditions": conditions,
        }
        if replicas - ready > 0:
            status["unavailableReplicas"] = replicas - ready
        for key in ("readyReplicas", "availableReplicas", "updatedReplicas", "replicas"):
            if status[key] == 0:
                del status[key]  # omitempty in the API types: absent rather than 0
        if not complete and not settled and progressing[0] is not False:
            self._due_at(self.memory.progressed[uid] + deadline)
            if mode is FailureMode.PROGRESS_DEADLINE:
                self._due_at(started + PROGRESS_DEADLINE_PERIODS * self.rollout_seconds)
        if status == deployment.get("status"):
            return False
        deployment["status"] = status
        self.store.commit(DEPLOYMENT, deployment)
        return True

    # ---- ReplicaSet and pods ----------------------------------------------------------------------

    def _sync_replicaset(self, rs: dict[str, Any], now: float) -> tuple[list[dict[str, Any]], bool]:
        mode = self.memory.modes.get(rs["metadata"]["uid"], FailureMode.HEALTHY)
        pods = self._pods_of(rs)
        wanted = rs["spec"]["replicas"]
        wrote = False
        failure = None
        while len(pods) > wanted:
            victim = min(
                pods, key=lambda pod: (is_ready(pod), -self.memory.born.get(pod["metadata"]["uid"], 0))
            )
            pods.remove(victim)
            self._terminate(clone(victim), now)
            self.store.record_event(
                rs,
                "SuccessfulDelete",
                f"Deleted pod: {victim['metadata']['name']}",
                False,
                "replicaset-controller",
            )
            wrote = True
        if len(pods) < wanted and mode is FailureMode.REPLICA_FAILURE:
            failure = (
                f'pods "{rs["metadata"]["name"]}-" is forbidden: exceeded quota: compute-resources, '
                f"requested: limits.cpu=2, used: limits.cpu=3, limited: limits.cpu=4"
            )
            previous_conditions = rs.get("status", {}).get("conditions", [])
            if not previous_conditions:
                self.store.record_event(
                    rs, "FailedCreate", f"Error creating: {failure}", True, "replicaset-controller"
                )
        while len(pods) < wanted and failure is None:
            self.memory.serial += 1
            pod = self.store.commit(POD, kube_objects.pod(rs, self.memory.serial))
            self.memory.born[pod["metadata"]["uid"]] = SEEDED if self._instant else now
            self.store.record_event(
                rs,
                "SuccessfulCreate",
                f"Created pod: {pod['metadata']['name']}",
                False,
                "replicaset-controller",
            )
            pods.append(pod)
            wrote = True
        for index, pod in enumerate(pods):
            uid = pod["metadata"]["uid"]
            age = now - self.memory.born.get(uid, now)
            completed = self.memory.completed.get(rs["metadata"]["uid"])
            settled = None if completed is None else now - completed
            state = kube_pod_states.state_for(mode, age, self.rollout_seconds, settled)
            before = self.memory.states.get(uid)
            if state != before or "conditions" not in pod["status"]:
                for reason, message, warning, component in kube_pod_states.events_for(pod, before, state):
                    self.store.record_event(pod, reason, message, warning, component)
                pod = clone(pod)
                pod["status"] = kube_pod_states.pod_status(pod, state)
                if state.label == "unschedulable":
                    pod["spec"].pop("nodeName", None)
                else:
                    pod["spec"]["nodeName"] = kube_pod_states.NODE_NAME
                pods[index] = self.store.commit(POD, pod)
                self.memory.states[uid] = state
                wrote = True
            change = kube_pod_states.next_change(mode, age, self.rollout_seconds, settled)
            if change is not None:
                self._due_at(now + change)
        ready = sum(1 for pod in pods if is_ready(pod))
        status: dict[str, Any] = {
            "replicas": len(pods),
            "fullyLabeledReplicas": len(pods),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "observedGeneration": rs["metadata"].get("generation", 1),
        }
        for key in ("fullyLabeledReplicas", "readyReplicas", "availableReplicas"):
            if status[key] == 0:
                del status[key]
        if failure is not None:
            previous = next((cond for cond in rs.get("status", {}).get("conditions", [])), None)
            status["conditions"] = [
                kube_objects.condition(
                    "ReplicaFailure", True, "FailedCreate", failure, previous, workload=False
                )
            ]
            status["conditions"][0].pop("lastProbeTime")
        if status != rs.get("status"):
            rs["status"] = status
            self.store.commit(REPLICASET, rs)
            wrote = True
        return pods, wrote

    def _terminate(self, pod: dict[str, Any], now: float) -> None:
        """Delete a pod as the kubelet does: a pod with a running container stays Terminating
        (deletionTimestamp set) for one rollout period while it stops; one without (pending, image
        pull or crash loop back-off) has nothing to stop and goes at once."""
        meta = pod["metadata"]
        running = any(
            "running" in status.get("state", {}) for status in pod["status"].get("containerStatuses", [])
        )
        if self._instant or not running:
            self.store.remove(POD, meta["namespace"], meta["name"])
            return
        meta["deletionTimestamp"] = kube_objects.now()
        meta["deletionGracePeriodSeconds"] = pod["spec"].get("terminationGracePeriodSeconds", 30)
        self.store.commit(POD, pod)
        self.memory.terminating[meta["uid"]] = now
        for container in pod["spec"].get("containers", []):
            self.store.record_event(
                pod, "Killing", f"Stopping container {container['name']}", False, "kubelet"
            )

    def _finish_terminations(self, now: float) -> None:
        for pod in self.store.peek(POD):
            since = self.memory.terminating.get(pod["metadata"]["uid"])
            if since is None:
                continue
            if now - since >= self.rollout_seconds:
                self.store.remove(POD, pod["metadata"]["namespace"], pod["metadata"]["name"])
                del self.memory.terminating[pod["metadata"]["uid"]]
            else:
                self._due_at(since + self.rollout_seconds)

    def _due_at(self, moment: float) -> None:
        self.next_due = moment if self.next_due is None else min(self.next_due, moment)

    def _collect_orphans(self) -> None:
        """The garbage collector: ReplicaSets of deleted Deployments and pods of deleted ReplicaSets go."""
        owners = {
            obj["metadata"]["uid"] for kind in (DEPLOYMENT, REPLICASET) for obj in self.store.peek(kind)
        }
        for kind in (REPLICASET, POD):
            for obj in self.store.peek(kind):
                refs = obj["metadata"].get("ownerReferences", [])
                if refs and not any(ref["uid"] in owners for ref in refs):
                    self.store.remove(kind, obj["metadata"]["namespace"], obj["metadata"]["name"])
