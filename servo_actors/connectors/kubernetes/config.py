"""The ``kubernetes`` connector's ``config`` section (see docs/connectors/kubernetes.md).

CPU is written as Kubernetes quantities or cores (``250m``, ``0.25``, ``4``) and held in cores;
memory as quantities (``256Mi``, ``4Gi``; a bare number is bytes) and held in GiB. Both are shown
back as quantities, so ``servo-actors config`` output loads again unchanged.
"""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Literal

from pydantic import (
    BeforeValidator,
    Field,
    PlainSerializer,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from servo_actors.config.fields import Duration, StrictModel
from servo_actors.connectors.kubernetes.units import format_cpu, format_memory, parse_cpu, parse_memory

__all__ = [
    "ContainerConfig",
    "Cores",
    "CountRange",
    "CpuRange",
    "DeploymentConfig",
    "EnvEnum",
    "EnvRange",
    "EnvSetting",
    "GiB",
    "HpaConfig",
    "KubernetesConfig",
    "MemoryRange",
    "OnFailure",
    "PermissionRule",
    "RESERVED_SETTINGS",
    "VERBS",
    "StatefulSetConfig",
    "Target",
    "component_name",
    "tuning_component_name",
]

_QUANTITY_SCHEMA = {"anyOf": [{"type": "number", "minimum": 0}, {"type": "string"}]}
Cores = Annotated[
    float,
    BeforeValidator(parse_cpu),
    PlainSerializer(format_cpu, return_type=str),
    WithJsonSchema({**_QUANTITY_SCHEMA, "description": "cores, or a quantity such as '250m', '2'"}),
]
GiB = Annotated[
    float,
    BeforeValidator(parse_memory),
    PlainSerializer(format_memory, return_type=str),
    WithJsonSchema(
        {**_QUANTITY_SCHEMA, "description": "a quantity such as '256Mi', '4Gi' (a number is bytes)"}
    ),
]
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
RESERVED_SETTINGS = (
    "cpu",
    "memory",
    "replicas",
    "hpa_min_replicas",
    "hpa_max_replicas",
    "hpa_target_cpu_utilization",
)
"""Setting names the connector itself gives; an env variable may not take one of them."""
Target = Literal["request", "limit"]
OnFailure = Literal["rollback", "shutdown", "ignore"]
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
"""The verbs a ``permissions`` rule may name (RBAC's resource verbs)."""


def _both_targets() -> list[Target]:
    return ["request", "limit"]


class _Bounds(StrictModel):
    """A range the optimizer may search: ``min <= max``, ``step > 0``."""

    pinned: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> _Bounds:
        low, high, step = self.min, self.max, self.step  # type: ignore[attr-defined]  # every subclass declares the three
        if low > high:
            raise ValueError(f"min ({low}) is more than max ({high})")
        if step <= 0:
            raise ValueError(f"step must be more than 0, not {step}")
        return self


def _distinct(value: list[Target] | None) -> list[Target] | None:
    if value is not None and len(set(value)) != len(value):
        raise ValueError(f"lists a value twice: {value}")
    return value


class _Resource(_Bounds):
    """A container resource: ``set`` says whether the request, the limit or both are written;
    ``get`` which one ``describe`` reports: the first of ``get`` the container has (none of them:
    no value). Without ``get``: the first of ``set``, else the other. Each subclass declares
    ``set`` and ``get`` after its bounds, so a config is shown in the order it is written."""

    def reported(self) -> list[Target]:
        """Requests/limits in the order ``describe`` looks for the current value."""
        got: list[Target] | None = self.get  # type: ignore[attr-defined]  # every subclass declares it
        if got is not None:
            return list(got)
        first: Target = self.set[0]  # type: ignore[attr-defined]  # every subclass declares it
        return [first, "limit" if first == "request" else "request"]


class CpuRange(_Resource):
    """CPU cores of a container."""

    min: Cores = Field(gt=0)
    max: Cores
    step: Cores = "125m"  # type: ignore[assignment]  # validated into cores
    set: list[Target] = Field(default_factory=_both_targets, min_length=1)
    get: list[Target] | None = Field(default=None, min_length=1)

    _distinct_targets = field_validator("set", "get")(_distinct)


class MemoryRange(_Resource):
    """Memory of a container in GiB; ``set`` and ``get`` as for CPU."""

    min: GiB = Field(gt=0)
    max: GiB
    step: GiB = "128Mi"  # type: ignore[assignment]  # validated into GiB
    set: list[Target] = Field(default_factory=_both_targets, min_length=1)
    get: list[Target] | None = Field(default=None, min_length=1)

    _distinct_targets = field_validator("set", "get")(_distinct)


class CountRange(_Bounds):
    """Whole numbers: replicas, HPA bounds, a utilization percentage."""

    min: int = Field(ge=0)
    max: int
    step: int = 1


class EnvRange(_Bounds):
    """A numeric environment variable; ``default`` is reported while the container does not set it."""

    name: str
    type: Literal["range"]
    min: float
    max: float
    step: float = 1.0
    default: float | None = None
    unit: str = ""


class EnvEnum(StrictModel):
    """An environment variable taking one of ``values``."""

    name: str
    type: Literal["enum"]
    values: list[str] = Field(min_length=1)
    default: str | None = None
    pinned: bool = False


EnvSetting = Annotated[EnvRange | EnvEnum, Field(discriminator="type")]


class ContainerConfig(StrictModel):
    """A container to optimize, with the settings it offers."""

    name: str
    alias: str | None = None
    cpu: CpuRange | None = None
    memory: MemoryRange | None = None
    env: list[EnvSetting] = Field(default_factory=list)
    static_environment_variables: dict[str, str] = Field(default_factory=dict)
    """Variables set on the container at every ADJUST that names it (the Deployment's template,
    or the tuning pod under ``strategy: tuning``), never tuned nor described."""

    @field_validator("static_environment_variables", mode="before")
    @classmethod
    def _static_values(cls, value: object) -> object:
        if not isinstance(value, dict):
            return value
        shown = {}
        for name, text in value.items():
            if isinstance(text, bool) or not isinstance(text, str | int | float):
                raise ValueError(
                    f"{name}: a value must be a string or a number, not {type(text).__name__} {text!r}"
                )
            shown[name] = text if isinstance(text, str) else str(text)
        return shown

    @model_validator(mode="after")
    def _static_names(self) -> ContainerConfig:
        tuned = {e.name for e in self.env}
        for name in self.static_environment_variables:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(
                    f"static_environment_variables: {name!r} is not a valid environment variable name"
                )
            if name in tuned:
                raise ValueError(
                    f"static_environment_variables: {name!r} is also a tuned env setting "
                    "(a variable is either fixed or tuned)"
                )
        return self

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: list[EnvRange | EnvEnum]) -> list[EnvRange | EnvEnum]:
        seen: set[str] = set()
        for item in env:
            if not _ENV_NAME.fullmatch(item.name):
                raise ValueError(f"{item.name!r} is not a valid environment variable name")
            if item.name in RESERVED_SETTINGS:
                raise ValueError(f"env {item.name!r} would clash with the setting of that name")
            if item.name in seen:
                raise ValueError(f"env {item.name!r} is listed twice")
            seen.add(item.name)
        return env


class HpaConfig(StrictModel):
    """The HorizontalPodAutoscaler of a Deployment: found by ``scaleTargetRef`` unless ``name`` is given."""

    name: str | None = None
    min_replicas: CountRange | None = None
    max_replicas: CountRange | None = None
    target_cpu_utilization: CountRange | None = None


class DeploymentConfig(StrictModel):
    """A Deployment to optimize; ``replicas`` is not offered while an HPA targets it.

    ``strategy: tuning`` leaves the Deployment untouched (its settings described, pinned) and
    puts the trial settings on one extra pod beside it (see tuning.py)."""

    kind: ClassVar[str] = "Deployment"
    """The workload's kind: the API resource it is read and patched as (``StatefulSetConfig``)."""
    name: str
    strategy: Literal["default", "tuning"] = "default"
    namespace: str | None = None
    """The workload's namespace; unset: the connector's."""
    timeout: Duration | None = None
    """The longest its rollout (and rollback) may take; unset: the connector's."""
    settlement: Duration | None = None
    """How long it must stay healthy after a rollout; unset: the connector's (a non-zero
    ``control.settlement`` overrides both)."""
    on_failure: OnFailure | None = None
    """What a failed rollout of this workload does; unset: the connector's."""
    replicas: CountRange | None = None
    hpa: HpaConfig | None = None
    containers: list[ContainerConfig] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _dns_name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid {cls.kind} name (lower case, digits, '-' and '.')")
        return value

    @field_validator("namespace")
    @classmethod
    def _workload_namespace(cls, value: str | None) -> str | None:
        return None if value is None else _namespace_name(value)

    @field_validator("timeout")
    @classmethod
    def _workload_timeout(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError("must be more than 0")
        return value

    @field_validator("containers")
    @classmethod
    def _unique_containers(cls, containers: list[ContainerConfig]) -> list[ContainerConfig]:
        names = [c.name for c in containers]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"container(s) listed twice: {', '.join(twice)}")
        return containers


class StatefulSetConfig(DeploymentConfig):
    """A StatefulSet to optimize: the same settings as a Deployment, rolled out by the StatefulSet
    controller (``updateStrategy: RollingUpdate``; an ``OnDelete`` one is described but refused at
    ADJUST). ``strategy: tuning`` is not offered: a pod beside a StatefulSet has no identity of its own."""

    kind: ClassVar[str] = "StatefulSet"

    @field_validator("strategy")
    @classmethod
    def _no_tuning(cls, value: str) -> str:
        if value != "default":
            raise ValueError(
                "strategy: tuning is for Deployments only: a StatefulSet's pods have identities and "
                "storage of their own, so no extra pod can stand beside them (leave strategy out)"
            )
        return value


class PermissionRule(StrictModel):
    """Access to check, as an RBAC rule says it (servox's ``permissions`` entries)."""

    group: str = ""
    """The API group (``""`` the core group, ``apps``...)."""
    resources: list[str] = Field(min_length=1)
    verbs: list[str] = Field(min_length=1)

    @field_validator("resources")
    @classmethod
    def _resources(cls, value: list[str]) -> list[str]:
        for resource in value:
            if not re.fullmatch(r"[a-z][a-z0-9.-]*(/[a-z][a-z0-9.-]*)?", resource):
                raise ValueError(
                    f"{resource!r} is not a resource (plural, lower case: pods, deployments, pods/log)"
                )
        return value

    @field_validator("verbs")
    @classmethod
    def _verbs(cls, value: list[str]) -> list[str]:
        for verb in value:
            if verb not in VERBS:
                raise ValueError(f"{verb!r} is not a verb (one of {', '.join(VERBS)})")
        return value


class KubernetesConfig(StrictModel):
    """The connector's ``config`` section."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str = "default"
    timeout: Duration = 300.0
    """The longest a rollout (and each rollback) may take."""
    settlement: Duration = 0.0
    """After a rollout, how long it must stay healthy; a non-zero ``control.settlement`` overrides it."""
    on_failure: OnFailure = "rollback"
    request_timeout: Duration = 10.0
    """The longest one API request may take (connect and each read)."""
    failure_grace: Duration = 5.0
    """How long a ReplicaFailure or a failed ReplicaSet creation must last before it fails a
    rollout: the controllers retry both (a quota stays; an API server that has just restarted
    refuses for a moment). A rollout past its progress deadline fails at once."""
    deployments: list[DeploymentConfig] = Field(default_factory=list)
    statefulsets: list[StatefulSetConfig] = Field(default_factory=list)
    permissions: list[PermissionRule] = Field(default_factory=list)
    """Access ``check`` verifies beside what the connector itself uses (in each namespace it works in)."""

    @property
    def workloads(self) -> list[DeploymentConfig]:
        """The Deployments, then the StatefulSets."""
        return [*self.deployments, *self.statefulsets]

    def kinds(self) -> dict[str, str]:
        """Workload name -> its kind (``Deployment`` / ``StatefulSet``)."""
        return {w.name: w.kind for w in self.workloads}

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        return _namespace_name(value)

    def namespace_of(self, workload: DeploymentConfig) -> str:
        return workload.namespace or self.namespace

    def groups(self) -> list[KubernetesConfig]:
        """The workloads split by their effective namespace, timeout, settlement and on_failure,
        each part a config of its own holding those at the connector level (and none on its
        workloads): every operation works on one part as on a connector of its own."""
        parts: dict[tuple[str, float, float, str], list[DeploymentConfig]] = {}
        for workload in self.workloads:
            key = (
                workload.namespace or self.namespace,
                self.timeout if workload.timeout is None else workload.timeout,
                self.settlement if workload.settlement is None else workload.settlement,
                workload.on_failure or self.on_failure,
            )
            cleared = {"namespace": None, "timeout": None, "settlement": None, "on_failure": None}
            parts.setdefault(key, []).append(workload.model_copy(update=cleared))
        views = []
        for (namespace, timeout, settlement, on_failure), members in parts.items():
            views.append(
                self.model_copy(
                    update={
                        "namespace": namespace,
                        "timeout": timeout,
                        "settlement": settlement,
                        "on_failure": on_failure,
                        "deployments": [w for w in members if not isinstance(w, StatefulSetConfig)],
                        "statefulsets": [w for w in members if isinstance(w, StatefulSetConfig)],
                    }
                )
            )
        return views

    @field_validator("failure_grace")
    @classmethod
    def _not_negative(cls, value: float) -> float:
        if value < 0:
            raise ValueError("must not be negative")
        return value

    @field_validator("timeout", "request_timeout")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be more than 0")
        return value

    @model_validator(mode="after")
    def _unique_names(self) -> KubernetesConfig:
        if not self.workloads:
            raise ValueError("name at least one workload to optimize, under deployments or statefulsets")
        apart = " (even in different namespaces: components and metrics are named by the workload)"
        names = [d.name for d in self.deployments]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"deployment(s) listed twice: {', '.join(twice)}{apart}")
        names = [s.name for s in self.statefulsets]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"statefulset(s) listed twice: {', '.join(twice)}{apart}")
        both = sorted({d.name for d in self.deployments} & set(names))
        if both:
            raise ValueError(
                f"{', '.join(both)}: named under both deployments and statefulsets (components and "
                "metrics are named by the workload, so the names must differ)"
            )
        seen: dict[str, str] = {}
        for workload in self.workloads:
            for container in workload.containers:
                names = [component_name(workload, container)]
                if workload.strategy == "tuning":
                    names.append(tuning_component_name(workload, container))
                where = f"{workload.name}/{container.name}"
                for name in names:
                    if name in seen:
                        raise ValueError(f"component name {name!r} is given to both {seen[name]} and {where}")
                    seen[name] = where
        return self


def _namespace_name(value: str) -> str:
    if not _NAME.fullmatch(value) or "." in value or len(value) > 63:
        raise ValueError(f"{value!r} is not a valid namespace name")
    return value


def component_name(deployment: DeploymentConfig, container: ContainerConfig) -> str:
    """The component a container is offered as: its alias, else the Deployment's name when it is
    the only configured container, else ``DEPLOYMENT/CONTAINER``."""
    if container.alias:
        return container.alias
    if len(deployment.containers) == 1:
        return deployment.name
    return f"{deployment.name}/{container.name}"


def tuning_component_name(deployment: DeploymentConfig, container: ContainerConfig) -> str:
    """The component carrying a container's trial settings under ``strategy: tuning``: the
    container's alias, else the Deployment's name, plus ``-tuning`` (``DEPLOYMENT-tuning/CONTAINER``
    when several containers are configured and the container has no alias)."""
    if container.alias:
        return f"{container.alias}-tuning"
    if len(deployment.containers) == 1:
        return f"{deployment.name}-tuning"
    return f"{deployment.name}-tuning/{container.name}"
