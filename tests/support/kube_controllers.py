"""The Deployment, ReplicaSet and HPA controllers (and the kubelet's pod states) the tests need.

``Controllers.reconcile`` runs on the API server's loop thread (``KubeApiHost.call``), so one pass
sees and writes a consistent store, as one controller-manager sync would. A background thread
calls it on every change and at a bounded tick while pods are due to change; it does nothing while
the API server is unplugged, as a controller-manager cut off from its API server can do nothing.

Rolling updates follow the real controller's arithmetic: the new ReplicaSet grows up to
``replicas + maxSurge`` pods in total, old ones shrink while at least ``replicas - maxUnavailable``
pods stay available. A pod's state comes from the FailureMode its ReplicaSet was created under, so
changing the mode affects the next rollout only, and a rollback to an earlier template reuses (and
re-heals) that template's ReplicaSet.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import kube_objects
import kube_pod_states
import kube_quantity
from kube_metrics import PodUsage
from kube_objects import KINDS, REVISION_ANNOTATION
from kube_pod_states import FailureMode, PodState
from kube_store import KubeStore

DEPLOYMENT, REPLICASET, POD, HPA = KINDS["deployment"], KINDS["replicaset"], KINDS["pod"], KINDS["hpa"]
MAX_TICK = 0.25
"""Longest wait between two passes while something is due (pods aging, restarts counting)."""
MIN_TICK = 0.02
SETTLE_PASSES = 50
"""Bound on the instant passes that seed an already-rolled-out Deployment."""
PROGRESS_DEADLINE_PERIODS = 2
"""PROGRESS_DEADLINE: the rollout times out after this many rollout periods without progress."""
HPA_TOLERANCE = 0.1
"""The HPA controller's default --horizontal-pod-autoscaler-tolerance."""
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


def _owned_by(obj: dict[str, Any], owner: dict[str, Any]) -> bool:
    return any(ref.get("uid") == owner["metadata"]["uid"] for ref in obj["metadata"].get("ownerReferences", []))


def _ready(pod: dict[str, Any]) -> bool:
    return any(cond["type"] == "Ready" and cond["status"] == "True"
               for cond in pod.get("status", {}).get("conditions", []))


@dataclass
class _Memory:
    """What the controllers remember between passes (the real ones keep it in informer caches)."""

    modes: dict[str, FailureMode] = field(default_factory=dict)  # ReplicaSet uid -> mode at creation
    born: dict[str, float] = field(default_factory=dict)  # pod uid -> monotonic creation time
    states: dict[str, PodState] = field(default_factory=dict)  # pod uid -> last state written
    rollout_started: dict[str, float] = field(default_factory=dict)  # deployment uid -> time
    stuck: dict[str, int] = field(default_factory=dict)  # deployment uid -> generation left alone
    hpa_desired: dict[str, int] = field(default_factory=dict)  # hpa uid -> desired replicas
    paused: dict[str, bool] = field(default_factory=dict)  # deployment uid -> seen paused
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
        self.due = False  # something changes with time alone: keep ticking
        self._instant = False  # seeding: new pods count as created long ago

    # ---- one pass (loop thread) -------------------------------------------------------------------

    def reconcile(self, now: float) -> None:
        self.due = False
        for deployment in self.store.list(DEPLOYMENT):
            if self.only is None or deployment["metadata"]["name"] in self.only:
                self._sync_deployment(deployment, now, instant=False)
        for hpa in self.store.list(HPA):
            self._sync_hpa(hpa, now)
        self._collect_orphans()

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
        owned = [rs for rs in self.store.list(REPLICASET, namespace) if _owned_by(rs, deployment)]
        pod_hash = kube_objects.template_hash(deployment["spec"]["template"])
        newest = max((_revision(rs) for rs in owned), default=0)
        new = next((rs for rs in owned if rs["metadata"]["labels"].get("pod-template-hash") == pod_hash), None)
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

    def _sync_paused(self, deployment: dict[str, Any], owned: list[dict[str, Any]], new: dict[str, Any] | None,
                     now: float) -> bool:
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
        return self._write_deployment_status(deployment, current, old, pods, ("DeploymentPaused", ""), now) or wrote

    def _scale(self, deployment: dict[str, Any], new: dict[str, Any], old: list[dict[str, Any]]) -> bool:
        replicas = deployment["spec"].get("replicas", 1)
        surge, unavailable = rolling_limits(deployment, replicas)
        all_pods = [pod for rs in [new, *old] for pod in self._pods_of(rs)]
        total = sum(rs["spec"]["replicas"] for rs in [new, *old])
        available = sum(1 for pod in all_pods if _ready(pod))
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
            unready = sum(1 for pod in self._pods_of(rs) if not _ready(pod))
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
        return [pod for pod in self.store.list(POD, rs["metadata"]["namespace"]) if _owned_by(pod, rs)]

    def _write_deployment_status(self, deployment: dict[str, Any], new: dict[str, Any], old: list[dict[str, Any]],
                                 pods: dict[str, list[dict[str, Any]]], progress: tuple[str, str] | None,
                                 now: float) -> bool:
        deployment = self.store.get(DEPLOYMENT, deployment["metadata"]["namespace"],
                                            deployment["metadata"]["name"]) or deployment
        replicas = deployment["spec"].get("replicas", 1)
        _, unavailable = rolling_limits(deployment, replicas)
        new_pods = pods[new["metadata"]["uid"]]
        every = [pod for group in pods.values() for pod in group]
        ready = sum(1 for pod in every if _ready(pod))
        updated = len(new_pods)
        new_name = new["metadata"]["name"]
        previous = {cond["type"]: cond for cond in deployment.get("status", {}).get("conditions", [])}
        complete = updated == replicas and len(every) == replicas and ready == replicas and all(
            _ready(pod) for pod in new_pods)
        mode = self.memory.modes.get(new["metadata"]["uid"], FailureMode.HEALTHY)
        started = self.memory.rollout_started.get(deployment["metadata"]["uid"], now)
        timed_out = (mode is FailureMode.PROGRESS_DEADLINE and not complete
                     and now - started >= PROGRESS_DEADLINE_PERIODS * self.rollout_seconds)
        uid = deployment["metadata"]["uid"]
        counts = (updated, ready, len(every))
        if progress is not None or self.memory.counts.get(uid) != counts:
            self.memory.counts[uid], self.memory.progressed[uid] = counts, now
        deadline = deployment["spec"].get("progressDeadlineSeconds", DEFAULT_PROGRESS_DEADLINE)
        timed_out = timed_out or (not complete and now - self.memory.progressed.get(uid, now) >= deadline)
        old_progress = previous.get("Progressing")
        progressing: tuple[bool | None, str, str]
        if progress is not None and progress[0] == "DeploymentPaused":
            progressing = (None, "DeploymentPaused", "Deployment is paused")
        elif complete:
            progressing = (True, "NewReplicaSetAvailable", f'ReplicaSet "{new_name}" has successfully progressed.')
        elif timed_out or (old_progress and old_progress.get("reason") == "ProgressDeadlineExceeded" and not progress):
            progressing = (False, "ProgressDeadlineExceeded", f'ReplicaSet "{new_name}" has timed out progressing.')
        elif progress is not None and progress[0] == "DeploymentResumed":
            progressing = (None, *progress)
        elif progress is not None:
            progressing = (True, *progress)
        elif old_progress and old_progress.get("reason") in ("NewReplicaSetCreated", "FoundNewReplicaSet") and \
                deployment.get("status", {}).get("updatedReplicas") == updated:
            progressing = (True, old_progress["reason"], old_progress.get("message", ""))
        else:
            progressing = (True, "ReplicaSetUpdated", f'ReplicaSet "{new_name}" is progressing.')
        available = ready >= replicas - unavailable
        conditions = [
            kube_objects.condition("Available", available,
                                   "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                                   "Deployment has minimum availability." if available
                                   else "Deployment does not have minimum availability.", previous.get("Available")),
            kube_objects.condition("Progressing", progressing[0], progressing[1], progressing[2],
                                   previous.get("Progressing")),
        ]
        failed = next((cond for rs in [new, *old] for cond in
                       (self.store.get(REPLICASET, rs["metadata"]["namespace"], rs["metadata"]["name"])
                        or rs).get("status", {}).get("conditions", []) if cond["type"] == "ReplicaFailure"), None)
        if failed is not None:
            conditions.append(kube_objects.condition("ReplicaFailure", True, failed.get("reason"),
                                                     failed.get("message"), previous.get("ReplicaFailure")))
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
        if not complete:
            self.due = True
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
            victim = min(pods, key=lambda pod: (_ready(pod), -self.memory.born.get(pod["metadata"]["uid"], 0)))
            pods.remove(victim)
            self.store.remove(POD, victim["metadata"]["namespace"], victim["metadata"]["name"])
            self.store.record_event(rs, "SuccessfulDelete", f"Deleted pod: {victim['metadata']['name']}", False,
                                     "replicaset-controller")
            wrote = True
        if len(pods) < wanted and mode is FailureMode.REPLICA_FAILURE:
            failure = (f'pods "{rs["metadata"]["name"]}-" is forbidden: exceeded quota: compute-resources, '
                       f"requested: limits.cpu=2, used: limits.cpu=3, limited: limits.cpu=4")
            previous_conditions = rs.get("status", {}).get("conditions", [])
            if not previous_conditions:
                self.store.record_event(rs, "FailedCreate", f"Error creating: {failure}", True,
                                         "replicaset-controller")
        while len(pods) < wanted and failure is None:
            self.memory.serial += 1
            pod = self.store.commit(POD, kube_objects.pod(rs, self.memory.serial))
            self.memory.born[pod["metadata"]["uid"]] = SEEDED if self._instant else now
            self.store.record_event(rs, "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}", False,
                                     "replicaset-controller")
            pods.append(pod)
            wrote = True
        for index, pod in enumerate(pods):
            uid = pod["metadata"]["uid"]
            state = kube_pod_states.state_for(mode, now - self.memory.born.get(uid, now), self.rollout_seconds)
            before = self.memory.states.get(uid)
            if state != before or "conditions" not in pod["status"]:
                for reason, message, warning, component in kube_pod_states.events_for(pod, before, state):
                    self.store.record_event(pod, reason, message, warning, component)
                pod["status"] = kube_pod_states.pod_status(pod, state)
                if state.label == "unschedulable":
                    pod["spec"].pop("nodeName", None)
                else:
                    pod["spec"]["nodeName"] = kube_pod_states.NODE_NAME
                pods[index] = self.store.commit(POD, pod)
                self.memory.states[uid] = state
                wrote = True
            if state.label != "running" or mode is FailureMode.UNSTABLE:
                self.due = True
        ready = sum(1 for pod in pods if _ready(pod))
        status: dict[str, Any] = {"replicas": len(pods), "fullyLabeledReplicas": len(pods), "readyReplicas": ready,
                                  "availableReplicas": ready,
                                  "observedGeneration": rs["metadata"].get("generation", 1)}
        for key in ("fullyLabeledReplicas", "readyReplicas", "availableReplicas"):
            if status[key] == 0:
                del status[key]
        if failure is not None:
            previous = next((cond for cond in rs.get("status", {}).get("conditions", [])), None)
            status["conditions"] = [kube_objects.condition("ReplicaFailure", True, "FailedCreate", failure,
                                                           previous, workload=False)]
            status["conditions"][0].pop("lastProbeTime")
        if status != rs.get("status"):
            rs["status"] = status
            self.store.commit(REPLICASET, rs)
            wrote = True
        return pods, wrote

    def _collect_orphans(self) -> None:
        """The garbage collector: ReplicaSets of deleted Deployments and pods of deleted ReplicaSets go."""
        owners = {obj["metadata"]["uid"] for kind in (DEPLOYMENT, REPLICASET)
                  for obj in self.store.list(kind)}
        for kind in (REPLICASET, POD):
            for obj in self.store.list(kind):
                refs = obj["metadata"].get("ownerReferences", [])
                if refs and not any(ref["uid"] in owners for ref in refs):
                    self.store.remove(kind, obj["metadata"]["namespace"], obj["metadata"]["name"])

    # ---- HPA --------------------------------------------------------------------------------------

    def _sync_hpa(self, hpa: dict[str, Any], now: float) -> None:
        spec, meta = hpa["spec"], hpa["metadata"]
        target_ref = spec.get("scaleTargetRef", {})
        deployment = self.store.get(DEPLOYMENT, meta["namespace"], target_ref.get("name", ""))
        previous = {cond["type"]: cond for cond in hpa.get("status", {}).get("conditions", [])}
        low, high = spec.get("minReplicas", 1), spec["maxReplicas"]
        if deployment is None:
            status = dict(hpa.get("status", {}))
            status["conditions"] = [kube_objects.condition(
                "AbleToScale", False, "FailedGetScale",
                f'the HPA controller was unable to get the target\'s current scale: deployments/scale.apps '
                f'"{target_ref.get("name")}" not found', previous.get("AbleToScale"), workload=False)]
            status["conditions"][0].pop("lastProbeTime")
            self._write_hpa_status(hpa, status)
            return
        current = deployment["spec"].get("replicas", 1)
        desired = self.memory.hpa_desired.get(meta["uid"], current)
        utilization = self._cpu_utilization(deployment)
        target = next((metric["resource"]["target"].get("averageUtilization") for metric in spec.get("metrics", [])
                       if metric.get("type") == "Resource" and metric["resource"].get("name") == "cpu"), None)
        if utilization is not None and target:
            ratio = utilization / target
            if abs(ratio - 1) > HPA_TOLERANCE:
                desired = math.ceil(desired * ratio)
        bounded = min(max(desired, low), high)
        self.memory.hpa_desired[meta["uid"]] = bounded
        status = dict(hpa.get("status", {}))
        if bounded != current:
            deployment["spec"]["replicas"] = bounded
            self.store.commit(DEPLOYMENT, deployment)
            status["lastScaleTime"] = kube_objects.now()
        status["currentReplicas"] = deployment.get("status", {}).get("replicas", current)
        status["desiredReplicas"] = bounded
        status["observedGeneration"] = meta.get("generation", 1)
        if utilization is not None:
            status["currentMetrics"] = [{"type": "Resource", "resource": {
                "name": "cpu", "current": {"averageUtilization": round(utilization)}}}]
        limited = "TooFewReplicas" if desired < low else "TooManyReplicas" if desired > high else None
        conditions = [
            kube_objects.condition("AbleToScale", True, "ReadyForNewScale",
                                   "recommended size matches current size", previous.get("AbleToScale"), False),
            kube_objects.condition("ScalingActive", utilization is not None,
                                   "ValidMetricFound" if utilization is not None else "FailedGetResourceMetric",
                                   "the HPA was able to successfully calculate a replica count from cpu resource "
                                   "utilization (percentage of request)" if utilization is not None else
                                   "the HPA was unable to compute the replica count: failed to get cpu utilization",
                                   previous.get("ScalingActive"), False),
            kube_objects.condition("ScalingLimited", limited is not None, limited or "DesiredWithinRange",
                                   "the desired replica count is outside the allowed range" if limited else
                                   "the desired count is within the acceptable range",
                                   previous.get("ScalingLimited"), False),
        ]
        for cond in conditions:
            cond.pop("lastProbeTime")
        status["conditions"] = conditions
        self._write_hpa_status(hpa, status)
        del now

    def _write_hpa_status(self, hpa: dict[str, Any], status: dict[str, Any]) -> None:
        if status != hpa.get("status"):
            hpa["status"] = status
            self.store.commit(HPA, hpa)

    def _cpu_utilization(self, deployment: dict[str, Any]) -> float | None:
        """Average CPU usage of the Deployment's running pods in percent of their requests (set_metrics)."""
        shares = []
        for pod in self._pods_of_deployment(deployment):
            usage = self.usage.of(self.store, pod)
            request = sum(cpu_millis(container.get("resources", {}).get("requests", {}).get("cpu", "0"))
                          for container in pod["spec"].get("containers", []))
            if usage is None or request <= 0 or pod["status"].get("phase") != "Running":
                continue
            shares.append(100 * cpu_millis(usage.get("cpu", "0")) / request)
        return sum(shares) / len(shares) if shares else None

    def _pods_of_deployment(self, deployment: dict[str, Any]) -> list[dict[str, Any]]:
        namespace = deployment["metadata"]["namespace"]
        sets = [rs for rs in self.store.list(REPLICASET, namespace) if _owned_by(rs, deployment)]
        return [pod for rs in sets for pod in self._pods_of(rs)]


def cpu_millis(quantity: str) -> float:
    """A CPU quantity ("250m", "1", "0.5", "100000n") in millicores."""
    return float(kube_quantity.value(quantity) * 1000)


class ControllerThread:
    """Runs ``Controllers.reconcile`` on every store change and at a bounded tick while something is due."""

    def __init__(self, controllers: Controllers, run_pass: Any) -> None:
        self.controllers = controllers
        self._run_pass = run_pass
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kube-controllers", daemon=True)
        self.errors: list[BaseException] = []

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    @property
    def tick(self) -> float:
        return min(MAX_TICK, max(MIN_TICK, self.controllers.rollout_seconds / 4))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self._run_pass()
            except Exception as exc:  # noqa: BLE001 - kept for the test to see, the loop goes on
                self.errors.append(exc)
            self._wake.wait(self.tick if self.controllers.due else MAX_TICK)
            time.sleep(0)  # yields the GIL between passes
