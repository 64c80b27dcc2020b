"""The local cluster deletes only the pod it meant to: a pod replaced at once by one of the same name
(as the connector replaces its tuning pod) is never removed by a stale delete of the old one.

kwok v0.8.0 deletes a pod by name with no uid precondition; with kwok's own fast pod-delete stage it
sent that delete twice per pod (the second matched the API server's grace-0 write of the pod being
removed) and removed about 2 in 100 new same-named pods (scripts/check_kube_pod_replace.py: 22 of
1200 replaces). kube/stages/pod-delete.yaml deletes only while the grace period is above 0. The audit
log check fails on the old stage every time (about 9 in 10 of its deletes by kwok are answered 404);
the count of killed pods, the harm itself, failed 2 runs in 2 with 2 and 3 of 150.
"""

from __future__ import annotations

import json

import pytest
from kube_local import LocalCluster
from kube_replace import replace_pods
from waiting import wait_until

pytestmark = pytest.mark.kube

CYCLES = 150
"""About 6 s on 2 busy cores (40 ms a replace)."""
AUDIT_TIMEOUT = 10.0
"""Generous bound for the audit log to show kwok's last delete (blocking mode: milliseconds)."""


def test_a_pod_replaced_at_once_by_the_same_name_is_never_deleted_by_kwok(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    record = replace_pods(kube_cluster, kube_namespace, CYCLES)
    assert record.cycles == CYCLES
    assert record.killed == [], f"{len(record.killed)} of {CYCLES} new pods deleted by someone else"

    # The audit entry of kwok's last delete may land just after the watch saw the pod gone.
    codes = wait_until(
        lambda: kwok_delete_codes(kube_cluster, kube_namespace, CYCLES),
        AUDIT_TIMEOUT,
        what=f"{CYCLES} deletes by kwok in the audit log",
    )
    assert codes == [200] * CYCLES, "kwok deletes each deleted pod once, while it exists"


def kwok_delete_codes(cluster: LocalCluster, namespace: str, at_least: int) -> list[int] | None:
    """The answer codes of kwok's pod deletes in ``namespace`` (audit log), once there are ``at_least``."""
    codes = []
    with cluster.audit_log.open() as lines:
        for line in lines:
            entry = json.loads(line)
            ref = entry.get("objectRef", {})
            if (
                entry.get("verb") == "delete"
                and ref.get("resource") == "pods"
                and ref.get("namespace") == namespace
                and entry.get("userAgent", "").startswith("kwok")
            ):
                codes.append(entry.get("responseStatus", {}).get("code"))
    return codes if len(codes) >= at_least else None
