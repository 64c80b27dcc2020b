"""The kinds the emulated API server serves, and the object shapes the real API server and controllers write.

Field names follow the Kubernetes API reference (apps/v1 Deployment and ReplicaSet, core/v1 Pod and
Event, autoscaling/v2 HorizontalPodAutoscaler); the tests in tests/support_kube check them against
the models of the ``kubernetes`` Python client's documentation.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any

SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""The alphabet of pod-template-hash and generated name suffixes (k8s.io/apimachinery rand.SafeEncodeString)."""

REVISION_ANNOTATION = "deployment.kubernetes.io/revision"


@dataclass(frozen=True)
class Kind:
    """One served resource: where it lives in the URL space and what its objects are called."""

    short: str
    group: str
    version: str
    plural: str
    kind: str
    has_status: bool = True
    field_selectors: tuple[str, ...] = ()
    """Fields besides metadata.name/namespace the server filters on (its field label conversion funcs)."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """How the real server names the resource in messages: ``deployments.apps``, ``pods``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str, name: str | None = None) -> str:
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        return f"{prefix}/namespaces/{namespace}/{self.plural}" + (f"/{name}" if name else "")


KINDS = {
    kind.short: kind
    for kind in (
        Kind("deployment", "apps", "v1", "deployments", "Deployment"),
        Kind("replicaset", "apps", "v1", "replicasets", "ReplicaSet", field_selectors=("status.replicas",)),
        Kind(
            "pod",
            "",
            "v1",
            "pods",
            "Pod",
            field_selectors=(
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ),
        ),
        Kind("hpa", "autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler"),
        Kind(
            "event",
            "",
            "v1",
            "events",
            "Event",
            has_status=False,
            field_selectors=(
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ),
        ),
    )
}
KINDS_BY_URL = {(kind.group, kind.version, kind.plural): kind for kind in KINDS.values()}


def now() -> str:
    """A timestamp as the API server renders metav1.Time (RFC 3339, seconds, UTC)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_uid() -> str:
    return str(uuid.uuid4())


def safe_suffix(seed: str, length: int) -> str:
    digest = int.from_bytes(hashlib.sha256(seed.encode()).digest(), "big")
    chars = []
    for _ in range(length):
        digest, index = divmod(digest, len(SAFE_ALPHABET))
        chars.append(SAFE_ALPHABET[index])
    return "".join(chars)


def template_hash(template: dict[str, Any]) -> str:
    """The pod-template-hash label: equal for templates equal but for that label (the controller's
    EqualIgnoreHash), so a rollback that copies a ReplicaSet's template finds that ReplicaSet."""
    bare = copy.deepcopy(template)
    ((bare.get("metadata") or {}).get("labels") or {}).pop("pod-template-hash", None)
    return safe_suffix(json.dumps(bare, sort_keys=True), 10)


def default_container(container: dict[str, Any]) -> dict[str, Any]:
    """The defaults the API server fills into a container of a pod template."""
    filled = copy.deepcopy(container)
    image = str(filled.get("image", ""))
    tag = image.rsplit("/", 1)[-1]
    always = ":" not in tag or tag.endswith(":latest")
    filled.setdefault("imagePullPolicy", "Always" if always else "IfNotPresent")
    filled.setdefault("resources", {})
    filled.setdefault("terminationMessagePath", "/dev/termination-log")
    filled.setdefault("terminationMessagePolicy", "File")
    return filled


def deployment(
    name: str, namespace: str, containers: list[dict[str, Any]], replicas: int, labels: dict[str, str] | None
) -> dict[str, Any]:
    """A Deployment as the API server stores it after defaulting."""
    selector = dict(labels or {"app": name})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(selector), "annotations": {}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": dict(selector)},
            "template": {
                "metadata": {"labels": dict(selector)},
                "spec": {
                    "containers": [default_container(container) for container in containers],
                    "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst",
                    "schedulerName": "default-scheduler",
                    "securityContext": {},
                },
            },
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
            },
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
        },
        "status": {},
    }


def hpa(
    name: str, namespace: str, target: str, min_replicas: int, max_replicas: int, target_cpu_utilization: int
) -> dict[str, Any]:
    """An autoscaling/v2 HorizontalPodAutoscaler with one CPU utilization metric."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": target_cpu_utilization},
                    },
                }
            ],
        },
        "status": {"currentReplicas": 0, "desiredReplicas": 0},
    }


def owned_by(obj: dict[str, Any], owner: dict[str, Any]) -> bool:
    """Whether ``owner`` is among ``obj``'s ownerReferences (by uid, as the garbage collector reads them)."""
    return any(
        ref.get("uid") == owner["metadata"]["uid"] for ref in obj["metadata"].get("ownerReferences", [])
    )


def is_ready(pod: dict[str, Any]) -> bool:
    """Whether the pod's Ready condition is True."""
    return any(
        cond["type"] == "Ready" and cond["status"] == "True"
        for cond in pod.get("status", {}).get("conditions", [])
    )


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def replicaset(owner: dict[str, Any], pod_hash: str, revision: int) -> dict[str, Any]:
    """The ReplicaSet the deployment controller makes for one template."""
    template = copy.deepcopy(owner["spec"]["template"])
    template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = pod_hash
    selector = copy.deepcopy(owner["spec"]["selector"])
    selector.setdefault("matchLabels", {})["pod-template-hash"] = pod_hash
    name = owner["metadata"]["name"]
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{name}-{pod_hash}",
            "namespace": owner["metadata"]["namespace"],
            "labels": dict(template["metadata"]["labels"]),
            "annotations": {
                REVISION_ANNOTATION: str(revision),
                "deployment.kubernetes.io/desired-replicas": str(owner["spec"].get("replicas", 1)),
            },
            "ownerReferences": [owner_reference(owner)],
        },
        "spec": {"replicas": 0, "selector": selector, "template": template},
        "status": {"replicas": 0, "observedGeneration": 1},
    }


def pod(owner: dict[str, Any], serial: int) -> dict[str, Any]:
    """A pod of a ReplicaSet, not yet scheduled (status filled by the pod states in kube_pod_states)."""
    rs_name = owner["metadata"]["name"]
    template = owner["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{rs_name}-{safe_suffix(f'{rs_name}/{serial}', 5)}",
            "generateName": f"{rs_name}-",
            "namespace": owner["metadata"]["namespace"],
            "labels": dict(template["metadata"].get("labels", {})),
            "ownerReferences": [owner_reference(owner)],
        },
        "spec": _pod_spec_defaults(template["spec"]),
        "status": {"phase": "Pending", "qosClass": qos_class(template["spec"])},
    }


def _pod_spec_defaults(template_spec: dict[str, Any]) -> dict[str, Any]:
    """A pod's spec from its template: requests default to limits where unset (SetDefaults_Pod does
    this on pods only, not on templates, so the Deployment keeps what was written)."""
    spec = copy.deepcopy(template_spec)
    for container in spec.get("containers", []):
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        if limits:
            requests = resources.setdefault("requests", {})
            for name, value in limits.items():
                requests.setdefault(name, value)
    return spec


def qos_class(pod_spec: dict[str, Any]) -> str:
    resources = [container.get("resources") or {} for container in pod_spec.get("containers", [])]
    if not any(res.get("requests") or res.get("limits") for res in resources):
        return "BestEffort"
    guaranteed = all(
        res.get("limits", {}).get(name)
        and res.get("requests", res.get("limits", {})).get(name) == res["limits"][name]
        for res in resources
        for name in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"


def condition(
    kind: str,
    status: bool | None,
    reason: str | None = None,
    message: str | None = None,
    previous: dict[str, Any] | None = None,
    workload: bool = True,
) -> dict[str, Any]:
    """A status condition (status None is "Unknown"); timestamps kept from ``previous`` unless it changed.

    Workload conditions (Deployment, ReplicaSet) carry lastUpdateTime; pod conditions carry lastProbeTime.
    """
    text = "Unknown" if status is None else "True" if status else "False"
    stamp = now()
    transition = previous["lastTransitionTime"] if previous and previous.get("status") == text else stamp
    fresh: dict[str, Any] = {"type": kind, "status": text}
    if workload:
        unchanged = previous and previous.get("reason") == reason and previous.get("message") == message
        fresh["lastUpdateTime"] = previous.get("lastUpdateTime", stamp) if unchanged and previous else stamp
    else:
        fresh["lastProbeTime"] = None
    fresh["lastTransitionTime"] = transition
    if reason is not None:
        fresh["reason"] = reason
    if message is not None:
        fresh["message"] = message
    return fresh


def event(
    involved: dict[str, Any], reason: str, message: str, warning: bool, component: str, serial: int
) -> dict[str, Any]:
    """A core/v1 Event about ``involved`` as a controller or the kubelet records it."""
    meta = involved["metadata"]
    stamp = now()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{serial:016x}", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": involved["apiVersion"],
            "kind": involved["kind"],
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid", ""),
        },
        "reason": reason,
        "message": message,
        "type": "Warning" if warning else "Normal",
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": "",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
