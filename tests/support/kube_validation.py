"""The API server's validation and normalization of the objects a connector writes.

A real server refuses a request above a limit, a bad quantity, a changed selector or an HPA with
max below min; an emulator that stored them would hide the connector's bugs. Only the rules that
apply to the fields a tuning connector writes are here; messages follow the real server's wording.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import kube_quantity
from kube_objects import Kind


@dataclass(frozen=True)
class Invalid:
    """One refused field: the server answers 422 (Invalid), or 400 when the body cannot even decode."""

    field: str
    message: str
    bad_request: bool = False


def _containers(obj: dict[str, Any], kind: Kind) -> tuple[str, list[Any]]:
    if kind.short == "pod":
        return "spec", (obj.get("spec") or {}).get("containers") or []
    return "spec.template.spec", ((obj.get("spec") or {}).get("template") or {}).get("spec", {}).get(
        "containers"
    ) or []


def normalize_and_validate(kind: Kind, obj: dict[str, Any], old: dict[str, Any] | None) -> list[Invalid]:
    """Canonicalize quantities in place and list what the real server would refuse."""
    problems: list[Invalid] = []
    if kind.short in ("deployment", "replicaset", "pod"):
        problems += _pod_spec_problems(kind, obj)
    if kind.short in ("deployment", "replicaset"):
        problems += _workload_problems(obj, old)
    if kind.short == "hpa":
        problems += _hpa_problems(obj)
    return problems


def _pod_spec_problems(kind: Kind, obj: dict[str, Any]) -> list[Invalid]:
    problems = []
    prefix, containers = _containers(obj, kind)
    seen: set[str] = set()
    for index, container in enumerate(containers):
        where = f"{prefix}.containers[{index}]"
        if not isinstance(container, dict):
            problems.append(Invalid(where, "must be an object", bad_request=True))
            continue
        if not container.get("name"):
            problems.append(Invalid(f"{where}.name", "Required value"))
        elif container["name"] in seen:
            problems.append(Invalid(f"{where}.name", f'Duplicate value: "{container["name"]}"'))
        seen.add(container.get("name", ""))
        if not container.get("image"):
            problems.append(Invalid(f"{where}.image", "Required value"))
        for env_index, env in enumerate(container.get("env") or []):
            if not isinstance(env, dict) or not env.get("name"):
                problems.append(Invalid(f"{where}.env[{env_index}].name", "Required value"))
            elif "value" in env and not isinstance(env["value"], str):
                problems.append(
                    Invalid(
                        f"{where}.env[{env_index}].value",
                        (
                            f"json: cannot unmarshal {type(env['value']).__name__} into Go struct field "
                            f"EnvVar.{prefix}.containers.env.value of type string"
                        ),
                        bad_request=True,
                    )
                )
        problems += _resource_problems(where, container.get("resources") or {})
    return problems


def _resource_problems(where: str, resources: dict[str, Any]) -> list[Invalid]:
    problems = []
    parsed: dict[str, dict[str, Any]] = {}
    for section in ("requests", "limits"):
        values = resources.get(section) or {}
        parsed[section] = {}
        for name, text in list(values.items()):
            try:
                values[name] = kube_quantity.canonical(text)
            except kube_quantity.QuantityError as exc:
                problems.append(Invalid(f"{where}.resources.{section}[{name}]", str(exc), bad_request=True))
                continue
            parsed[section][name] = kube_quantity.value(values[name])
            if parsed[section][name] < 0:
                problems.append(
                    Invalid(
                        f"{where}.resources.{section}[{name}]",
                        f'Invalid value: "{values[name]}": must be greater than or equal to 0',
                    )
                )
    for name, request in parsed["requests"].items():
        limit = parsed["limits"].get(name)
        if limit is not None and request > limit:
            problems.append(
                Invalid(
                    f"{where}.resources.requests",
                    (
                        f'Invalid value: "{resources["requests"][name]}": must be less than or equal to {name} limit '
                        f"of {resources['limits'][name]}"
                    ),
                )
            )
    return problems


def _workload_problems(obj: dict[str, Any], old: dict[str, Any] | None) -> list[Invalid]:
    spec = obj.get("spec") or {}
    problems = []
    replicas = spec.get("replicas", 1)
    if not isinstance(replicas, int) or isinstance(replicas, bool):
        problems.append(
            Invalid(
                "spec.replicas",
                f"json: cannot unmarshal {type(replicas).__name__} into Go "
                "struct field DeploymentSpec.spec.replicas of type int32",
                bad_request=True,
            )
        )
    elif replicas < 0:
        problems.append(
            Invalid("spec.replicas", f"Invalid value: {replicas}: must be greater than or equal to 0")
        )
    if old is not None and spec.get("selector") != (old.get("spec") or {}).get("selector"):
        problems.append(
            Invalid("spec.selector", f"Invalid value: {spec.get('selector')!r}: field is immutable")
        )
    wanted = (spec.get("selector") or {}).get("matchLabels") or {}
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if any(labels.get(key) != value for key, value in wanted.items()):
        problems.append(
            Invalid(
                "spec.template.metadata.labels",
                f"Invalid value: {labels!r}: `selector` does not match template `labels`",
            )
        )
    return problems


def _hpa_problems(obj: dict[str, Any]) -> list[Invalid]:
    spec = obj.get("spec") or {}
    problems = []
    low, high = spec.get("minReplicas", 1), spec.get("maxReplicas")
    for field, number in (("spec.minReplicas", low), ("spec.maxReplicas", high)):
        if not isinstance(number, int) or isinstance(number, bool):
            problems.append(
                Invalid(
                    field,
                    f"json: cannot unmarshal {type(number).__name__} into Go struct field "
                    f"HorizontalPodAutoscalerSpec.{field} of type int32",
                    bad_request=True,
                )
            )
    if problems:
        return problems
    if low < 1:
        problems.append(
            Invalid("spec.minReplicas", f"Invalid value: {low}: must be greater than or equal to 1")
        )
    if high < low:
        problems.append(
            Invalid(
                "spec.maxReplicas", f"Invalid value: {high}: must be greater than or equal to `minReplicas`"
            )
        )
    for index, metric in enumerate(spec.get("metrics") or []):
        target = ((metric.get("resource") or {}).get("target") or {}) if isinstance(metric, dict) else {}
        utilization = target.get("averageUtilization")
        if utilization is not None and (not isinstance(utilization, int) or utilization <= 0):
            problems.append(
                Invalid(
                    f"spec.metrics[{index}].resource.target.averageUtilization",
                    f"Invalid value: {utilization}: must be greater than 0",
                )
            )
    return problems


def message(kind: Kind, name: str, problems: list[Invalid]) -> str:
    """The Status message: ``Deployment.apps "web" is invalid: FIELD: DETAIL[, ...]``."""
    details = ", ".join(f"{problem.field}: {problem.message}" for problem in problems)
    group = f".{kind.group}" if kind.group else ""
    return f'{kind.kind}{group} "{name}" is invalid: {details}'
