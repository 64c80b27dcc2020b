"""Strategic-merge patches that touch only the fields the connector owns.

The owned fields of an adjustment are read raw from the object (``owned_fields``), the wanted
values laid over them (``wanted_fields``), and the patch is the difference, keyed on the
container name, carrying ``metadata.resourceVersion`` so a concurrent change answers 409. The
same difference taken the other way (now -> captured before) is the rollback.

    before = owned_fields(deployment, targets, config)
    patch = deployment_patch(before, wanted_fields(before, targets, config), resource_version="42")
"""

from __future__ import annotations

import copy
from typing import Any

from servo_actors.connectors.kubernetes.config import DeploymentConfig
from servo_actors.connectors.kubernetes.settings import (
    DeploymentTargets,
    env_value,
    find_container,
)
from servo_actors.connectors.kubernetes.units import format_cpu, format_memory, parse_quantity

__all__ = [
    "Owned",
    "deployment_patch",
    "hpa_owned",
    "hpa_patch",
    "hpa_wanted",
    "owned_fields",
    "wanted_fields",
]

Owned = dict[str, Any]
"""``{"replicas": n | None, "containers": {name: {"requests.cpu": raw | None, "env.GOGC": entry | None}}}``."""
_TARGET_KEY = {"request": "requests", "limit": "limits"}


def owned_fields(deployment: dict[str, Any], targets: DeploymentTargets, config: DeploymentConfig) -> Owned:
    """The raw values of every field ``targets`` would change, as the object holds them now."""
    by_name = {c.name: c for c in config.containers}
    owned: Owned = {"replicas": None, "containers": {}}
    if targets.replicas is not None:
        owned["replicas"] = deployment.get("spec", {}).get("replicas", 1)
    for name, wanted in targets.containers.items():
        container = find_container(deployment, name) or {}
        resources = container.get("resources") or {}
        fields: dict[str, Any] = {}
        for resource, value, bounds in (
            ("cpu", wanted.cpu, by_name[name].cpu),
            ("memory", wanted.memory, by_name[name].memory),
        ):
            if value is None or bounds is None:
                continue
            for target in bounds.set:
                key = _TARGET_KEY[target]
                fields[f"{key}.{resource}"] = (resources.get(key) or {}).get(resource)
        for env_name in wanted.env:
            entry = env_value(container, env_name)
            fields[f"env.{env_name}"] = (
                None if entry is None else {k: v for k, v in entry.items() if k != "name"}
            )
        owned["containers"][name] = fields
    return owned


def wanted_fields(owned: Owned, targets: DeploymentTargets, config: DeploymentConfig) -> Owned:
    """``owned`` with the values ``targets`` asks for."""
    by_name = {c.name: c for c in config.containers}
    wanted = copy.deepcopy(owned)
    if targets.replicas is not None:
        wanted["replicas"] = targets.replicas
    for name, target in targets.containers.items():
        fields = wanted["containers"].setdefault(name, {})
        for resource, value, bounds, fmt in (
            ("cpu", target.cpu, by_name[name].cpu, format_cpu),
            ("memory", target.memory, by_name[name].memory, format_memory),
        ):
            if value is None or bounds is None:
                continue
            for kind in bounds.set:
                fields[f"{_TARGET_KEY[kind]}.{resource}"] = fmt(value)
        for env_name, env_text in target.env.items():
            fields[f"env.{env_name}"] = {"value": env_text}
    return wanted


def deployment_patch(current: Owned, wanted: Owned, resource_version: str | None) -> dict[str, Any] | None:
    """The strategic-merge patch taking ``current`` to ``wanted``; None when nothing changes."""
    spec: dict[str, Any] = {}
    if wanted.get("replicas") is not None and wanted["replicas"] != current.get("replicas"):
        spec["replicas"] = wanted["replicas"]
    containers = []
    for name, fields in wanted["containers"].items():
        before = current["containers"].get(name, {})
        entry: dict[str, Any] = {"name": name}
        for key, value in fields.items():
            old = before.get(key)
            if key.startswith("env."):
                if value != old:
                    entry.setdefault("env", []).append(_env_patch(key[4:], old, value))
            elif not _same_quantity(old, value):
                section, resource = key.split(".")
                entry.setdefault("resources", {}).setdefault(section, {})[resource] = value
        if len(entry) > 1:
            containers.append(entry)
    if containers:
        spec["template"] = {"spec": {"containers": containers}}
    if not spec:
        return None
    patch: dict[str, Any] = {"spec": spec}
    if resource_version:
        patch["metadata"] = {"resourceVersion": resource_version}
    return patch


def _env_patch(name: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    if new is None:
        return {"name": name, "$patch": "delete"}  # restoring a variable that was not there
    entry = {"name": name, **new}
    for key in ("value", "valueFrom"):
        if old and key in old and key not in new:
            entry[key] = None  # null deletes the key: a variable has a value or a valueFrom, not both
    return entry


def _same_quantity(old: Any, new: Any) -> bool:
    if old is None or new is None:
        return old is new
    try:
        return parse_quantity(old) == parse_quantity(new)
    except ValueError:
        return False


def hpa_owned(hpa: dict[str, Any]) -> dict[str, Any]:
    """The HPA fields the connector writes: bounds and the whole ``metrics`` list."""
    spec = hpa.get("spec", {})
    return {
        "minReplicas": spec.get("minReplicas", 1),
        "maxReplicas": spec.get("maxReplicas"),
        "metrics": copy.deepcopy(spec.get("metrics") or []),
    }


def hpa_wanted(owned: dict[str, Any], targets: dict[str, int]) -> dict[str, Any]:
    """``owned`` with ``targets`` (min_replicas, max_replicas, target_cpu_utilization) laid over it.

    The CPU target goes into the Resource/cpu/Utilization entry of ``metrics``, added when missing.
    Raises ValueError when the bounds would cross.
    """
    wanted = copy.deepcopy(owned)
    if "min_replicas" in targets:
        wanted["minReplicas"] = targets["min_replicas"]
    if "max_replicas" in targets:
        wanted["maxReplicas"] = targets["max_replicas"]
    if wanted["maxReplicas"] is not None and wanted["minReplicas"] > wanted["maxReplicas"]:
        raise ValueError(
            f"HPA minReplicas {wanted['minReplicas']} would be above maxReplicas {wanted['maxReplicas']}"
        )
    if "target_cpu_utilization" in targets:
        value = targets["target_cpu_utilization"]
        for metric in wanted["metrics"]:
            resource = metric.get("resource") or {}
            if metric.get("type") == "Resource" and resource.get("name") == "cpu":
                resource["target"] = {"type": "Utilization", "averageUtilization": value}
                break
        else:
            wanted["metrics"].append(
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": value},
                    },
                }
            )
    return wanted


def hpa_patch(
    current: dict[str, Any], wanted: dict[str, Any], resource_version: str | None
) -> dict[str, Any] | None:
    """The patch taking the HPA from ``current`` to ``wanted``. ``metrics`` is sent whole: it has no
    merge key, so a strategic-merge patch replaces the list."""
    spec = {
        key: wanted[key] for key in ("minReplicas", "maxReplicas", "metrics") if wanted[key] != current[key]
    }
    if not spec:
        return None
    patch: dict[str, Any] = {"spec": spec}
    if resource_version:
        patch["metadata"] = {"resourceVersion": resource_version}
    return patch
