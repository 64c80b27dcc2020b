"""Components and settings: what ``describe`` reports from cluster objects, and what an ADJUST asks.

Pure functions over the config and plain dicts of Deployments and HPAs, so they are tested
without a cluster. Values are read as the cluster has them, in or out of the configured range.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from servo_actors.connectors.kubernetes.config import (
    ContainerConfig,
    CountRange,
    DeploymentConfig,
    EnvEnum,
    EnvRange,
    KubernetesConfig,
    component_name,
)
from servo_actors.connectors.kubernetes.units import parse_cpu, parse_memory
from servo_actors.errors import ConnectorError

__all__ = [
    "ClusterStateError",
    "ContainerTargets",
    "DeploymentState",
    "DeploymentTargets",
    "HPA_SETTINGS",
    "SettingError",
    "describe_components",
    "env_value",
    "find_container",
    "hpa_cpu_utilization",
    "requested_targets",
    "resource_value",
]

HPA_SETTINGS = {
    "hpa_min_replicas": "min_replicas",
    "hpa_max_replicas": "max_replicas",
    "hpa_target_cpu_utilization": "target_cpu_utilization",
}
"""Setting name -> field of ``HpaConfig``."""


class SettingError(ConnectorError, ValueError):
    """An ADJUST names a component or setting this connector does not offer, or a bad value."""


class ClusterStateError(ConnectorError, ValueError):
    """The cluster does not hold what the config names (a container, an HPA), or holds it in a
    state the connector cannot work with; ``reason`` is the word a failure reports."""

    def __init__(self, message: str, reason: str = "not-found") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class DeploymentState:
    """One configured Deployment as read from the cluster, with the HPA that targets it (if any)."""

    config: DeploymentConfig
    deployment: dict[str, Any]
    hpa: dict[str, Any] | None = None


@dataclass
class ContainerTargets:
    cpu: float | None = None
    memory: float | None = None
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class DeploymentTargets:
    """What an ADJUST asks of one Deployment (None: leave as is)."""

    containers: dict[str, ContainerTargets] = field(default_factory=dict)
    replicas: int | None = None
    hpa: dict[str, int] = field(default_factory=dict)
    """``min_replicas`` / ``max_replicas`` / ``target_cpu_utilization`` -> value."""


def find_container(deployment: dict[str, Any], name: str) -> dict[str, Any] | None:
    for container in deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []:
        if container.get("name") == name:
            return container
    return None


def resource_value(container: dict[str, Any], resource: str, order: Sequence[str]) -> str | None:
    """The raw quantity of ``resource``: the first of ``order`` (``request`` / ``limit``, as a
    range's ``reported()`` gives it) that the container sets; None when it sets none of them."""
    resources = container.get("resources") or {}
    for target in order:
        value = (resources.get(f"{target}s") or {}).get(resource)
        if value is not None:
            return str(value)
    return None


def env_value(container: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The env entry named ``name`` (``{"name", "value"}`` or ``{"name", "valueFrom"}``), or None."""
    for entry in container.get("env") or []:
        if entry.get("name") == name:
            return entry
    return None


def hpa_cpu_utilization(hpa: dict[str, Any]) -> int | None:
    for metric in hpa.get("spec", {}).get("metrics") or []:
        resource = metric.get("resource") or {}
        target = resource.get("target") or {}
        if (
            metric.get("type") == "Resource"
            and resource.get("name") == "cpu"
            and target.get("type") == "Utilization"
        ):
            return target.get("averageUtilization")
    return None


def describe_components(config: KubernetesConfig, states: list[DeploymentState]) -> dict[str, Any]:
    """The ``components`` of a DESCRIPTION, read from ``states`` (one per configured Deployment)."""
    components: dict[str, Any] = {}
    for state in states:
        for index, container_config in enumerate(state.config.containers):
            container = find_container(state.deployment, container_config.name)
            if container is None:
                raise ClusterStateError(_missing_container(state, container_config))
            settings = _container_settings(container_config, container)
            if index == 0:
                settings.update(_deployment_settings(state))
            components[component_name(state.config, container_config)] = {"settings": settings}
    return components


def _container_settings(config: ContainerConfig, container: dict[str, Any]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    if config.cpu is not None:
        raw = resource_value(container, "cpu", config.cpu.reported())
        settings["cpu"] = _range(config.cpu, None if raw is None else parse_cpu(raw), unit="cores")
    if config.memory is not None:
        raw = resource_value(container, "memory", config.memory.reported())
        settings["memory"] = _range(config.memory, None if raw is None else parse_memory(raw), unit="GiB")
    for env in config.env:
        entry = env_value(container, env.name)
        raw = entry.get("value") if entry else None
        settings[env.name] = _env_setting(env, raw)
    return settings


def _deployment_settings(state: DeploymentState) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    config = state.config
    if config.replicas is not None and state.hpa is None:
        settings["replicas"] = _range(config.replicas, state.deployment.get("spec", {}).get("replicas", 1))
    if config.hpa is not None and state.hpa is not None:
        spec = state.hpa.get("spec", {})
        current = {
            "min_replicas": spec.get("minReplicas", 1),
            "max_replicas": spec.get("maxReplicas"),
            "target_cpu_utilization": hpa_cpu_utilization(state.hpa),
        }
        for setting, key in HPA_SETTINGS.items():
            bounds = getattr(config.hpa, key)
            if bounds is not None:
                settings[setting] = _range(bounds, current[key])
    return settings


def _range(bounds: Any, value: Any, unit: str = "") -> dict[str, Any]:
    setting = {
        "type": "range",
        "min": bounds.min,
        "max": bounds.max,
        "step": bounds.step,
        "pinned": bounds.pinned,
    }
    if unit:
        setting["unit"] = unit
    setting["value"] = value
    return setting


def _env_setting(env: EnvRange | EnvEnum, raw: str | None) -> dict[str, Any]:
    if isinstance(env, EnvEnum):
        value = raw if raw is not None else env.default
        return {"type": "enum", "values": list(env.values), "pinned": env.pinned, "value": value}
    whole = all(float(x).is_integer() for x in (env.min, env.max, env.step))
    shown = _int_if(whole)
    number: Any = env.default
    if raw is not None:
        try:
            number = float(raw)
        except ValueError:
            number = raw  # reported as the cluster has it
    setting = {
        "type": "range", "min": shown(env.min), "max": shown(env.max), "step": shown(env.step),
        "pinned": env.pinned,
        "value": shown(number) if isinstance(number, float) else number,
    }  # fmt: skip
    if env.unit:
        setting["unit"] = env.unit
    return setting


def _int_if(whole: bool) -> Callable[[float], float | int]:
    def shown(x: float) -> float | int:
        return int(x) if whole and float(x).is_integer() else x

    return shown


def _missing_container(state: DeploymentState, config: ContainerConfig) -> str:
    names = [
        c.get("name")
        for c in state.deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []
    ]
    return (
        f"{state.config.kind} {state.config.name!r} has no container {config.name!r} "
        f"(it has {', '.join(map(repr, names)) or 'none'})"
    )


def requested_targets(config: KubernetesConfig, components: dict[str, Any]) -> dict[str, DeploymentTargets]:
    """What ``components`` (an ADJUST's) asks of each Deployment, checked against the config.

    Raises SettingError naming the component and setting: unknown names, values that are not
    numbers (or not among an enum's values), or values outside the configured range.
    """
    owners: dict[str, tuple[DeploymentConfig, ContainerConfig, bool]] = {}
    for deployment in config.workloads:
        for index, container in enumerate(deployment.containers):
            owners[component_name(deployment, container)] = (deployment, container, index == 0)
    targets: dict[str, DeploymentTargets] = {}
    for component, body in components.items():
        if component not in owners:
            raise SettingError(f"no component {component!r} (this connector has {', '.join(sorted(owners))})")
        deployment, container, first = owners[component]
        wanted = targets.setdefault(deployment.name, DeploymentTargets())
        container_targets = wanted.containers.setdefault(container.name, ContainerTargets())
        container_targets.env.update(container.static_environment_variables)
        for setting, spec in ((body or {}).get("settings") or {}).items():
            value = spec.get("value") if isinstance(spec, dict) else spec
            where = f"{component}.{setting}"
            _apply_setting(deployment, container, first, setting, value, where, wanted, container_targets)
    return targets


def _apply_setting(
    deployment: DeploymentConfig,
    container: ContainerConfig,
    first: bool,
    setting: str,
    value: Any,
    where: str,
    wanted: DeploymentTargets,
    container_targets: ContainerTargets,
) -> None:
    env = {e.name: e for e in container.env}
    if setting == "cpu" and container.cpu is not None:
        container_targets.cpu = _checked_number(value, container.cpu, where)
    elif setting == "memory" and container.memory is not None:
        container_targets.memory = _checked_number(value, container.memory, where)
    elif setting in env:
        container_targets.env[setting] = _checked_env(value, env[setting], where)
    elif setting == "replicas" and first and deployment.replicas is not None:
        wanted.replicas = int(_checked_number(value, deployment.replicas, where, whole=True))
    elif (
        setting in HPA_SETTINGS
        and first
        and deployment.hpa is not None
        and getattr(deployment.hpa, HPA_SETTINGS[setting])
    ):
        bounds: CountRange = getattr(deployment.hpa, HPA_SETTINGS[setting])
        wanted.hpa[HPA_SETTINGS[setting]] = int(_checked_number(value, bounds, where, whole=True))
    else:
        raise SettingError(f"{where}: this connector offers no such setting")


def _checked_number(value: Any, bounds: Any, where: str, whole: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise SettingError(f"{where}: {value!r} is not a number")
    try:
        number = float(value)
    except ValueError:
        raise SettingError(f"{where}: {value!r} is not a number") from None
    if not math.isfinite(number):
        raise SettingError(f"{where}: {value!r} is not a finite number")
    if whole and not number.is_integer():
        raise SettingError(f"{where}: {value!r} is not a whole number")
    tolerance = 1e-9 * max(1.0, abs(bounds.max))
    if number < bounds.min - tolerance or number > bounds.max + tolerance:
        raise SettingError(
            f"{where}: {value!r} is outside the configured range [{bounds.min:g}, {bounds.max:g}]"
        )
    return number


def _checked_env(value: Any, env: EnvRange | EnvEnum, where: str) -> str:
    if isinstance(env, EnvEnum):
        if str(value) not in env.values:
            raise SettingError(f"{where}: {value!r} is not one of {', '.join(env.values)}")
        return str(value)
    number = _checked_number(value, env, where)
    return str(int(number)) if number.is_integer() else repr(number)
