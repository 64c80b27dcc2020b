"""The tuning pod as an API object: built from a Deployment's current pod template with the trial
values, and read back. Pure functions over dicts (no cluster).

The pod is named ``<deployment>-tuning`` (one name, so there is never more than one), keeps the
template's labels (a Service selecting the Deployment's pods sends it a share of the traffic) but
not ``pod-template-hash`` (so no ReplicaSet's selector matches it and none adopts it), and carries
``servo-actors.io/role: tuning`` plus the annotation ``servo-actors.io/tuning-of: <deployment>``.
``servo-actors.io/tuning-spec`` holds a hash of the template the pod was made from and of the
settings it reports (cpu, memory, env as ``current_values`` reads them): a fresh connector
compares it with the pod it would build to tell whether the pod already has the requested values
(keep it) or not (replace it).
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from servo_actors.connectors.kubernetes.config import ContainerConfig, DeploymentConfig
from servo_actors.connectors.kubernetes.settings import (
    ContainerTargets,
    DeploymentTargets,
    env_value,
    find_container,
    resource_value,
)
from servo_actors.connectors.kubernetes.units import format_cpu, format_memory, parse_cpu, parse_memory

__all__ = [
    "DROPPED_LABELS",
    "ROLE_LABEL",
    "ROLE_TUNING",
    "SPEC_HASH_ANNOTATION",
    "TUNING_OF_ANNOTATION",
    "TUNING_SELECTOR",
    "build_tuning_pod",
    "current_values",
    "is_ready",
    "merged_values",
    "owner_reference",
    "restarts",
    "spec_hash",
    "terminating",
    "tuning_of",
    "tuning_pod_name",
]

ROLE_LABEL = "servo-actors.io/role"
ROLE_TUNING = "tuning"
TUNING_OF_ANNOTATION = "servo-actors.io/tuning-of"
SPEC_HASH_ANNOTATION = "servo-actors.io/tuning-spec"
TUNING_SELECTOR = f"{ROLE_LABEL}={ROLE_TUNING}"
"""The label selector of every tuning pod (``kube cleanup``, ``check``)."""
DROPPED_LABELS = ("pod-template-hash",)
"""Template labels the tuning pod does not keep: a ReplicaSet selects its pods by this one."""
_TARGET_KEY = {"request": "requests", "limit": "limits"}


def tuning_pod_name(deployment: str) -> str:
    return f"{deployment}-tuning"


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    """A reference to the servo's own Deployment: deleting the servo deletes the tuning pod (the
    garbage collector follows it). Not a controller reference, and it blocks nothing."""
    meta = owner.get("metadata", {})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": False,
        "blockOwnerDeletion": False,
    }


def current_values(config: DeploymentConfig, pod: dict[str, Any] | None) -> DeploymentTargets:
    """The configured settings as ``pod`` holds them (empty without a pod): the values a replace
    keeps for settings an ADJUST does not name."""
    found = DeploymentTargets()
    if pod is None:
        return found
    for container_config in config.containers:
        container = find_container({"spec": {"template": pod}}, container_config.name)
        if container is None:
            continue
        values = ContainerTargets()
        if container_config.cpu is not None:
            raw = resource_value(container, "cpu", container_config.cpu.reported())
            values.cpu = None if raw is None else parse_cpu(raw)
        if container_config.memory is not None:
            raw = resource_value(container, "memory", container_config.memory.reported())
            values.memory = None if raw is None else parse_memory(raw)
        for env in container_config.env:
            entry = env_value(container, env.name)
            if entry is not None and "value" in entry:
                values.env[env.name] = str(entry["value"])
        found.containers[container_config.name] = values
    return found


def merged_values(requested: DeploymentTargets | None, kept: DeploymentTargets) -> DeploymentTargets:
    """``requested`` over ``kept``, setting by setting."""
    merged = DeploymentTargets()
    names = set(kept.containers) | set((requested or DeploymentTargets()).containers)
    for name in names:
        old = kept.containers.get(name, ContainerTargets())
        new = (requested or DeploymentTargets()).containers.get(name, ContainerTargets())
        merged.containers[name] = ContainerTargets(
            cpu=new.cpu if new.cpu is not None else old.cpu,
            memory=new.memory if new.memory is not None else old.memory,
            env={**old.env, **new.env},
        )
    return merged


def build_tuning_pod(
    deployment: dict[str, Any],
    config: DeploymentConfig,
    values: DeploymentTargets,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The tuning pod of ``deployment``: its current template with ``values`` applied."""
    template = copy.deepcopy(deployment.get("spec", {}).get("template") or {})
    template_meta = template.get("metadata") or {}
    labels = {k: v for k, v in (template_meta.get("labels") or {}).items() if k not in DROPPED_LABELS}
    labels[ROLE_LABEL] = ROLE_TUNING
    annotations = dict(template_meta.get("annotations") or {})
    annotations[TUNING_OF_ANNOTATION] = config.name
    spec = template.get("spec") or {}
    own = copy.deepcopy(spec)
    by_name = {c.name: c for c in config.containers}
    for container in spec.get("containers") or []:
        container_config = by_name.get(container.get("name"))
        wanted = values.containers.get(str(container.get("name")))
        if container_config is not None and wanted is not None:
            _apply(container, container_config, wanted)
    # The template as it is plus the settings the pod reports, not the patched spec: a kept value
    # re-applied lands on every ``set`` target in our own quantity format, so it would differ.
    annotations[SPEC_HASH_ANNOTATION] = _hash(
        {"labels": labels, "annotations": annotations, "spec": own, "settings": _settings(config, spec)}
    )
    metadata: dict[str, Any] = {
        "name": tuning_pod_name(config.name),
        "labels": labels,
        "annotations": annotations,
    }
    if owner is not None:
        metadata["ownerReferences"] = [owner_reference(owner)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _apply(container: dict[str, Any], config: ContainerConfig, wanted: ContainerTargets) -> None:
    resources = container.setdefault("resources", {})
    for resource, value, bounds, shown in (
        ("cpu", wanted.cpu, config.cpu, format_cpu),
        ("memory", wanted.memory, config.memory, format_memory),
    ):
        if value is None or bounds is None:
            continue
        for target in bounds.set:
            resources.setdefault(_TARGET_KEY[target], {})[resource] = shown(value)
    if wanted.env:  # in place, new ones at the end: the same values always give the same list
        env = [
            {"name": e["name"], "value": wanted.env[e["name"]]} if e.get("name") in wanted.env else e
            for e in container.get("env") or []
        ]
        present = {e.get("name") for e in env}
        env.extend({"name": n, "value": v} for n, v in sorted(wanted.env.items()) if n not in present)
        container["env"] = env


def _settings(config: DeploymentConfig, spec: dict[str, Any]) -> dict[str, Any]:
    """The configured settings of a pod ``spec`` as ``current_values`` reads them back, in the
    quantities the cluster keeps (millicores, KiB): equal for equal settings however written."""
    found = current_values(config, {"spec": spec})
    return {
        name: {
            "cpu": None if values.cpu is None else format_cpu(values.cpu),
            "memory": None if values.memory is None else format_memory(values.memory),
            "env": values.env,
        }
        for name, values in found.containers.items()
    }


def _hash(content: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:20]


def spec_hash(pod: dict[str, Any]) -> str | None:
    return (pod.get("metadata", {}).get("annotations") or {}).get(SPEC_HASH_ANNOTATION)


def terminating(pod: dict[str, Any]) -> bool:
    return bool(pod.get("metadata", {}).get("deletionTimestamp"))


def is_ready(pod: dict[str, Any]) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def restarts(pod: dict[str, Any] | None) -> int:
    if pod is None:
        return 0
    return sum(
        int(c.get("restartCount") or 0) for c in (pod.get("status") or {}).get("containerStatuses") or []
    )


def tuning_of(pod: dict[str, Any]) -> str | None:
    """The Deployment a tuning pod was made from (its annotation)."""
    return (pod.get("metadata", {}).get("annotations") or {}).get(TUNING_OF_ANNOTATION)
