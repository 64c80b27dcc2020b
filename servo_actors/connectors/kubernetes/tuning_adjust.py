"""Creating or replacing a tuning pod, waiting for it, judging it, and removing it.

A replace is: delete the old pod, wait until it is gone, create the new one, wait until it is
Ready within ``timeout``. Nothing is remembered between commands: ``ensure`` starts from what the
cluster holds (a tuning pod with the requested values, one with other values, one already being
deleted, or none), so a connector killed at any point of a replace leaves a state the next one
finishes from. The pod's fixed name means there is never more than one.

``hook(point)`` is called at each point of a replace (``deleted``, ``gone``, ``created``,
``ready``): the tests stop the work there (as a cancel kills the connector) and start afresh.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

from servo_actors.connectors.kubernetes.client import (
    KubeApiError,
    KubeClient,
    KubeError,
    deployment_path,
    pod_path,
    pods_path,
    replicasets_path,
)
from servo_actors.connectors.kubernetes.diagnosis import (
    Diagnosis,
    diagnose_pods,
    instability,
    probe_failure,
    restart_counts,
)
from servo_actors.connectors.kubernetes.rollout import RETRY_INTERVAL, WATCH_WINDOW
from servo_actors.connectors.kubernetes.rollout_pods import RolloutPods
from servo_actors.connectors.kubernetes.tuning_pod import is_ready, spec_hash, terminating
from servo_actors.durations import format_duration
from servo_actors.errors import ConnectorError

__all__ = ["Hook", "MAX_CREATE_ATTEMPTS", "Report", "TuningFailed", "TuningPods", "servo_owner"]

MAX_CREATE_ATTEMPTS = 5
"""How many times a create that meets a pod of the same name starts the replace over."""

Report = Callable[[float, str], None]
Hook = Callable[[str], None]


class TuningFailed(ConnectorError):
    """The tuning pod did not become (or stay) ready; ``diagnosis`` says why. ``terminating``: the
    wait for a deleted pod to go ran out (it is being deleted; nothing more to do for it)."""

    def __init__(self, pod: str, diagnosis: Diagnosis, terminating: bool = False) -> None:
        super().__init__(diagnosis.message)
        self.pod = pod
        self.diagnosis = diagnosis
        self.terminating = terminating


def _no_hook(point: str) -> None:
    """The default hook: nothing."""


def servo_owner(client: KubeClient, namespace: str) -> tuple[dict[str, Any] | None, str]:
    """The servo's own Deployment when the servo runs as a pod of one in ``namespace``
    (``POD_NAME``/``POD_NAMESPACE`` from the downward API), and a note when it cannot own the
    tuning pod (the pod is then left for ``servo-actors kube cleanup``)."""
    name, where = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if not name or not where:
        return None, "POD_NAME/POD_NAMESPACE are not set (the servo runs outside the cluster)"
    if where != namespace:
        return (
            None,
            f"the servo runs in namespace {where!r}, not {namespace!r} (owners must share a namespace)",
        )
    try:
        pod = client.get(pod_path(where, name))
        replicaset_ref = _controller(pod, "ReplicaSet")
        if replicaset_ref is None:
            return None, f"pod {name} is not run by a ReplicaSet"
        replicaset = client.get(f"{replicasets_path(where)}/{replicaset_ref['name']}")
        deployment_ref = _controller(replicaset, "Deployment")
        if deployment_ref is None:
            return None, f"ReplicaSet {replicaset_ref['name']} is not run by a Deployment"
        return client.get(deployment_path(where, deployment_ref["name"])), ""
    except KubeApiError as exc:
        return None, f"cannot read the servo's own Deployment: {exc}"


def _controller(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == kind:
            return dict(ref)
    return None


class TuningPods:
    """Tuning pods of one namespace through ``client``; ``clock`` is monotonic seconds."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        *,
        hook: Hook = _no_hook,
        window: float = WATCH_WINDOW,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.hook = hook
        self.window = window
        self.clock = clock
        self.sleep = sleep

    def read(self, name: str) -> dict[str, Any] | None:
        try:
            return self.client.get(pod_path(self.namespace, name))
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    # -- create or replace ---------------------------------------------------------------------

    def ensure(self, wanted: dict[str, Any], timeout: float, report: Report) -> dict[str, Any]:
        """Exactly one pod ``wanted`` (by its spec hash), Ready; TuningFailed when it does not
        become Ready within ``timeout`` (or shows a definite failure first)."""
        name = wanted["metadata"]["name"]
        deadline = self.clock() + timeout
        for _ in range(MAX_CREATE_ATTEMPTS):
            existing = self.read(name)
            if (
                existing is not None
                and not terminating(existing)
                and spec_hash(existing) == spec_hash(wanted)
            ):
                report(0.5, f"tuning pod {name} already has the requested settings")
                break
            if existing is not None:
                if not terminating(existing):
                    report(0.1, f"deleting tuning pod {name}")
                    self._delete(existing)
                    self.hook("deleted")
                self.wait_gone(name, deadline, timeout, report)
                self.hook("gone")
            try:
                self.client.create(pods_path(self.namespace), wanted)
            except KubeApiError as exc:
                if exc.status == 409:  # created since our read (by another connector): look again
                    continue
                raise
            self.hook("created")
            report(0.5, f"created tuning pod {name}")
            break
        else:
            raise TuningFailed(
                name,
                Diagnosis(
                    "failed", "conflict",
                    f"tuning pod {name} kept being recreated by someone else ({MAX_CREATE_ATTEMPTS} attempts)",
                ),
            )  # fmt: skip
        pod = self.wait_ready(name, deadline, timeout, report)
        self.hook("ready")
        return pod

    def _delete(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        options = {"preconditions": {"uid": meta.get("uid")}}  # never a pod created since our read
        try:
            self.client.delete(pod_path(self.namespace, meta["name"]), options)
        except KubeApiError as exc:
            if exc.status not in (404, 409):  # gone already, or replaced since (409: uid precondition)
                raise

    def remove(self, name: str, timeout: float, report: Report) -> bool:
        """Delete the tuning pod (if any) and wait until it is gone; whether there was one."""
        existing = self.read(name)
        if existing is None:
            return False
        if not terminating(existing):
            self._delete(existing)
        deadline = self.clock() + timeout
        self.wait_gone(name, deadline, timeout, report)
        return True

    # -- waiting -------------------------------------------------------------------------------

    def wait_gone(self, name: str, deadline: float, timeout: float, report: Report) -> None:
        """Until pod ``name`` is gone; TuningFailed (``timeout``) at ``deadline``, saying what holds
        it: its finalizers, or its grace period (its containers get that long after SIGTERM)."""
        latest: dict[str, Any] = {}

        def gone(pod: dict[str, Any] | None) -> bool:
            if pod is not None:
                latest["pod"] = pod
                report(0.2, f"waiting for tuning pod {name} to be deleted")
            return pod is None

        if not self._wait(name, deadline, gone):
            raise TuningFailed(
                name,
                Diagnosis(
                    "failed", "timeout",
                    f"the old tuning pod {name} was not deleted within {format_duration(timeout)}: "
                    + _held_by(latest.get("pod") or {}),
                ),
                terminating=True,
            )  # fmt: skip

    def wait_ready(self, name: str, deadline: float, timeout: float, report: Report) -> dict[str, Any]:
        latest: dict[str, Any] = {}

        def ready(pod: dict[str, Any] | None) -> bool:
            if pod is None:
                raise TuningFailed(
                    name, Diagnosis("failed", "pod-deleted", f"tuning pod {name} was deleted while starting")
                )
            latest["pod"] = pod
            if is_ready(pod):
                return True
            found = diagnose_pods([pod])
            if found is not None and found.definite:
                raise TuningFailed(name, self._diagnose(pod) or found)
            report(0.6, f"waiting for tuning pod {name} to be ready ({_phase(pod)})")
            return False

        if not self._wait(name, deadline, ready):
            last = latest.get("pod")
            found = self._diagnose(last, probes=True) if last is not None else None
            if found is not None and not found.definite:  # it might have cleared: say how long it had
                found = Diagnosis(
                    found.status, found.reason,
                    f"tuning pod {name} did not become ready within {format_duration(timeout)}: {found.message}",
                    definite=False,
                )  # fmt: skip
            raise TuningFailed(
                name,
                found
                or Diagnosis(
                    "failed", "timeout",
                    f"tuning pod {name} did not become ready within {format_duration(timeout)}"
                    + (f" ({_phase(last)})" if last is not None else ""),
                ),
            )  # fmt: skip
        report(1.0, f"tuning pod {name} is ready")
        pod: dict[str, Any] = latest["pod"]
        return pod

    def settle(self, name: str, seconds: float, report: Report) -> None:
        """Watch the tuning pod for ``seconds``: a restart or lost readiness is TuningFailed (unstable)."""
        if seconds <= 0:
            return
        began = self.clock()
        end = began + seconds
        pod = self.read(name)
        baseline = restart_counts([pod] if pod else [])

        def steady(now: dict[str, Any] | None) -> bool:
            if now is None or terminating(now):
                raise TuningFailed(
                    name,
                    Diagnosis("rejected", "unstable", f"tuning pod {name} was deleted during settlement"),
                )
            found = instability(baseline, [now])
            if found is not None:  # again, with the events that may name a failing probe
                raise TuningFailed(name, instability(baseline, [now], self._warnings()) or found)
            report(
                (self.clock() - began) / seconds,
                f"settling: {format_duration(round(end - self.clock()))} left",
            )
            return False

        self._wait(name, end, steady)
        report(1.0, "settled")

    def _wait(self, name: str, deadline: float, done: Callable[[dict[str, Any] | None], bool]) -> bool:
        """Call ``done(pod or None)`` on a fresh read and on every change of the pod until it says
        True (returns True) or ``deadline`` passes (returns False). Watches last at most ``window``."""
        selector = {"fieldSelector": f"metadata.name={name}"}
        while self.clock() < deadline:
            try:
                listed = self.client.get(pods_path(self.namespace), selector)
                items = listed.get("items") or []
                if done(items[0] if items else None):
                    return True
                since = {
                    **selector,
                    "resourceVersion": (listed.get("metadata") or {}).get("resourceVersion", ""),
                }
                for kind, pod in self.client.watch(pods_path(self.namespace), since, self._seconds(deadline)):
                    if kind in ("ADDED", "MODIFIED", "DELETED") and done(None if kind == "DELETED" else pod):
                        return True
                    if self.clock() >= deadline:
                        break
            except KubeApiError as exc:
                if exc.status == 410:
                    continue  # the list's version is gone already: list again
                if exc.status < 500 and exc.status != 429:
                    raise
                self.sleep(max(0.0, min(RETRY_INTERVAL, deadline - self.clock())))
            except KubeError:  # unreachable or slow: keep trying until the deadline
                self.sleep(max(0.0, min(RETRY_INTERVAL, deadline - self.clock())))
        return False

    def _seconds(self, deadline: float) -> int:
        return max(1, math.ceil(min(self.window, deadline - self.clock())))

    def _diagnose(self, pod: dict[str, Any], probes: bool = False) -> Diagnosis | None:
        """What ``pod`` shows, with the namespace's Warning events; with ``probes``, also a
        failing probe that keeps it from Ready (``probe_failure``)."""
        events = self._warnings()
        found = diagnose_pods([pod], events)
        if found is None and probes:
            found = probe_failure([pod], events)
        return found

    def _warnings(self) -> list[dict[str, Any]] | None:
        """The namespace's Warning events (``RolloutPods.warnings``: None when they cannot be read)."""
        return RolloutPods(self.client, self.namespace).warnings()


def _held_by(pod: dict[str, Any]) -> str:
    """What keeps a deleted pod from going: its finalizers, else its grace period."""
    meta = pod.get("metadata") or {}
    finalizers = meta.get("finalizers") or []
    if finalizers:
        return f"finalizer(s) {', '.join(map(str, finalizers))} hold it"
    grace = meta.get("deletionGracePeriodSeconds")
    if grace is not None:
        return (
            f"it is terminating with a grace period of {format_duration(int(grace))} (its containers get "
            "that long to stop after SIGTERM; give the connector a timeout longer than its "
            "terminationGracePeriodSeconds)"
        )
    return "it was not deleted yet"


def _phase(pod: dict[str, Any]) -> str:
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        reason = ((container.get("state") or {}).get("waiting") or {}).get("reason")
        if reason:
            return f"{status.get('phase', 'Pending')}, {reason}"
    return str(status.get("phase") or "Pending")
