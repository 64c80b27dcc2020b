"""servox's ``kubernetes`` connector as this project's ``kubernetes`` connector(s).

What servox does that is kept, and how:

- A workload's own ``namespace``, ``timeout``, ``settlement`` and ``on_failure`` override the
  connector's here as in servox (which "cascades" the connector's onto workloads that do not set
  them): written on the workload where its value differs from the connector's. ``kubeconfig`` and
  ``context`` are the connector's here: workloads that differ in them go to connectors of their
  own (``kubernetes``, ``kubernetes-2``...), each commented.
- ``static_environment_variables`` are carried over. servox set them on the tuning pod only and
  refused them under the default strategy; here they are also set on the Deployment's container.
- ``get`` (which of request and limit the current value is read from) is carried over; servox's
  default ``[request, limit]`` is written where this project's default (the first of ``set``)
  would read another.
- ``permissions`` is carried over: ``check`` verifies it beside the verbs the connector uses.
- ``on_failure``: servox's default ``exception`` leaves the failed settings in place and reports
  the failure: ``ignore`` here. servox's ``ignore`` reported a failed adjustment as a success (a
  defect: the optimizer learns from settings that never ran); here it is ``ignore``, reported as
  failed. ``shutdown`` (and its old name ``destroy``) is ``shutdown``. This project's default is
  ``rollback``, which servox did not have.
- Component names: servox names a container ``WORKLOAD/CONTAINER`` unless it has an ``alias``;
  here a Deployment's only container is named after the Deployment. The converter writes servox's
  name as the ``alias``, so the optimizer sees the same components.
- ``strategy: canary`` is ``strategy: tuning``; the tuning pod's component is the main one's name
  plus ``-tuning`` (servox: the strategy's ``alias``, else ``WORKLOAD/CONTAINER-tuning``).
- Env settings: servox's ``literal`` (the variable's name when ``name`` is a label) becomes the
  name; its ``value`` becomes ``default``. servox read a literal-named variable under ``name`` when
  describing and wrote it under ``literal`` when adjusting (a defect); here the one name is used for both.
"""

from __future__ import annotations

from typing import Any

from servo_actors.connectors.kubernetes.config import VERBS
from servo_actors.servox_import.conversion import (
    Conversion,
    Entry,
    cannot_convert,
    check_keys,
    converted_duration,
)
from servo_actors.servox_import.quantities import cpu_quantity, memory_quantity

__all__ = ["convert_kubernetes"]

_COMMON = {
    "description", "kubeconfig", "context", "namespace", "settlement", "on_failure", "timeout",
    "container_logs_in_error_status", "create_tuning_pod",
}  # fmt: skip
_TOP = _COMMON | {"permissions", "deployments", "stateful_sets"}
_WORKLOAD = _COMMON | {"name", "containers", "strategy", "replicas"}
_CONTAINER = {
    "description",
    "name",
    "alias",
    "command",
    "cpu",
    "memory",
    "env",
    "static_environment_variables",
}
_SETTING = {"name", "type", "pinned", "unit", "value", "min", "max", "step"}
_RESOURCE = _SETTING | {"request", "limit", "get", "set"}
_ENV = _SETTING | {"literal", "values", "value_type"}
_SERVOX_DEFAULTS: dict[str, Any] = {
    "namespace": "default",
    "timeout": "5m",
    "settlement": None,
    "on_failure": "exception",
    "kubeconfig": None,
    "context": None,
}
_CASCADED = tuple(_SERVOX_DEFAULTS)
_CONNECTOR_ONLY = ("kubeconfig", "context")
"""Cascaded settings that are the connector's alone here (the others a workload may override)."""
_WORKLOAD_OVERRIDES = ("namespace", "timeout", "settlement", "on_failure")
_ON_FAILURE = {
    "exception": (
        "ignore",
        "servox's exception (its default): failed settings stay and the failure is reported, as ignore "
        "does here; consider rollback, this project's default",
    ),
    "ignore": (
        "ignore",
        "servox's ignore reported a failed adjustment as a success; here it is reported as failed "
        "(settings left in place)",
    ),
    "shutdown": ("shutdown", ""),
    "destroy": ("shutdown", "servox's destroy is its old name for shutdown"),
}


def convert_kubernetes(conversion: Conversion, key: str, settings: Any) -> list[Entry]:
    """The connector(s) for servox's ``kubernetes`` settings under ``key``."""
    source = conversion.source
    top = check_keys(source, key, settings, _TOP)
    deployments = _workload_list(source, f"{key}.deployments", top.get("deployments"))
    statefulsets = _workload_list(source, f"{key}.stateful_sets", top.get("stateful_sets"))
    if not deployments and not statefulsets:
        raise cannot_convert(source, key, "no deployments or stateful_sets to optimize")
    permissions = _permissions(source, f"{key}.permissions", top.get("permissions"))
    for flag, why in (
        (
            "container_logs_in_error_status",
            "a failed rollout's diagnosis here names the pods' reasons, not their logs",
        ),
    ):
        if top.get(flag):
            conversion.drop(f"{key}.{flag}", why)

    groups: dict[tuple[Any, ...], list[tuple[str, int, dict[str, Any]]]] = {}
    for kind, servox_list, workloads in (
        ("deployments", "deployments", deployments),
        ("statefulsets", "stateful_sets", statefulsets),
    ):
        for index, workload in enumerate(workloads):
            where = f"{key}.{servox_list}[{index}]"
            check_keys(source, where, workload, _WORKLOAD)
            access = tuple(_cascaded(top, workload, name) for name in _CONNECTOR_ONLY)
            groups.setdefault(access, []).append((kind, index, workload))
            for flag in ("container_logs_in_error_status",):
                if workload.get(flag):
                    conversion.drop(
                        f"{where}.{flag}", "a failed rollout's diagnosis names the pods' reasons, not logs"
                    )

    entries = []
    connector_values = {name: _cascaded(top, {}, name) for name in _CASCADED}
    for number, (access, members) in enumerate(groups.items(), start=1):
        name = key if number == 1 else f"{key}-{number}"
        entry = Entry(name=name, type="kubernetes")
        if len(groups) > 1:
            entry.comment(
                ("name",),
                f"servox's {key} held workloads with different kubeconfig or context; each set is a connector here",
            )
        values = {**connector_values, **dict(zip(_CONNECTOR_ONLY, access, strict=True))}
        _connector_settings(conversion, entry, key, values)
        if permissions:
            entry.config["permissions"] = permissions
            entry.comment(("config", "permissions"), "checked beside the verbs the connector itself uses")
        for kind, index, workload in members:
            servox_list = "deployments" if kind == "deployments" else "stateful_sets"
            where = f"{key}.{servox_list}[{index}]"
            converted, notes = _workload(conversion, where, workload, top, kind)
            notes.update(_workload_overrides(conversion, where, workload, top, converted))
            target = entry.config.setdefault(kind, [])
            for path, text in notes.items():
                entry.comment(("config", kind, len(target), *path), text)
            target.append(converted)
        entries.append(entry)
    return entries


def _workload_list(source: str, where: str, value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise cannot_convert(source, where, "must be a list")
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise cannot_convert(source, f"{where}[{index}]", "must be a mapping")
    return value


def _cascaded(top: dict[str, Any], workload: dict[str, Any], name: str) -> Any:
    value = workload.get(name)
    if value is None:
        value = top.get(name, _SERVOX_DEFAULTS[name])
    if value is None:
        value = _SERVOX_DEFAULTS[name]
    return value


def _connector_settings(conversion: Conversion, entry: Entry, key: str, values: dict[str, Any]) -> None:
    source = conversion.source
    config = entry.config
    if values["kubeconfig"] is not None:
        config["kubeconfig"] = str(values["kubeconfig"])
    if values["context"] is not None:
        config["context"] = str(values["context"])
    config["namespace"] = values["namespace"]
    config["timeout"] = converted_duration(source, f"{key}.timeout", values["timeout"])
    if values["settlement"] is not None:
        config["settlement"] = converted_duration(source, f"{key}.settlement", values["settlement"])
    mode = values["on_failure"]
    if mode not in _ON_FAILURE:
        raise cannot_convert(source, f"{key}.on_failure", f"{mode!r} is not one of {', '.join(_ON_FAILURE)}")
    config["on_failure"], why = _ON_FAILURE[mode]
    if why:
        entry.comment(("config", "on_failure"), why)


def _workload(
    conversion: Conversion, where: str, workload: dict[str, Any], top: dict[str, Any], kind: str
) -> tuple[dict[str, Any], dict[tuple[str | int, ...], str]]:
    source = conversion.source
    pending: dict[tuple[str | int, ...], str] = {}
    name = workload.get("name")
    if not isinstance(name, str) or not name:
        raise cannot_convert(source, f"{where}.name", "a workload needs a name")
    result: dict[str, Any] = {"name": name}
    strategy = _strategy(source, f"{where}.strategy", workload.get("strategy", "default"))
    create_tuning_pod = _cascaded_flag(top, workload, "create_tuning_pod")
    containers = workload.get("containers")
    if not isinstance(containers, list) or not containers:
        raise cannot_convert(source, f"{where}.containers", "a workload needs at least one container")
    if strategy is not None:
        if kind != "deployments":
            raise cannot_convert(source, f"{where}.strategy", "canary is for Deployments only")
        result["strategy"] = "tuning"
        first = containers[0] if isinstance(containers[0], dict) else {}
        servox_tuning = strategy or f"{name}/{first.get('name')}-tuning"
        if first.get("alias"):
            ours = f"{first['alias']}-tuning"
        elif len(containers) == 1:
            ours = f"{name}/{first.get('name')}-tuning"  # the alias written below is servox's name
        else:
            ours = f"{name}-tuning/{first.get('name')}"
        if servox_tuning != ours:
            pending[("strategy",)] = (
                f"servox's canary named the tuning pod's component {servox_tuning!r}; here it is {ours!r}"
            )
        else:
            pending[("strategy",)] = "servox's canary: the trial settings go to one tuning pod"
        if not create_tuning_pod:
            conversion.drop(
                f"{where}.create_tuning_pod",
                "false: strategy: tuning here always runs the tuning pod (remove the strategy to tune the "
                "Deployment itself)",
            )
    replicas = workload.get("replicas")
    if replicas is not None:
        result["replicas"] = _replicas(conversion, f"{where}.replicas", replicas)
    converted_containers = []
    for index, container in enumerate(containers):
        converted, notes = _container(
            conversion, f"{where}.containers[{index}]", container, name, len(containers), strategy is not None
        )
        converted_containers.append(converted)
        for path, text in notes.items():
            pending[("containers", index, *path)] = text
    result["containers"] = converted_containers
    return result, pending


def _workload_overrides(
    conversion: Conversion, where: str, workload: dict[str, Any], top: dict[str, Any], result: dict[str, Any]
) -> dict[tuple[str | int, ...], str]:
    """The workload's own namespace, timeout, settlement and on_failure where they differ from the
    connector's (set in ``result``, after ``name``); the comments for them."""
    source = conversion.source
    notes: dict[tuple[str | int, ...], str] = {}
    own: dict[str, Any] = {}
    for field in _WORKLOAD_OVERRIDES:
        mine, connector = _cascaded(top, workload, field), _cascaded(top, {}, field)
        if mine == connector:
            continue
        if field == "namespace":
            own[field] = str(mine)
        elif field == "on_failure":
            if mine not in _ON_FAILURE:
                raise cannot_convert(
                    source, f"{where}.on_failure", f"{mine!r} is not one of {', '.join(_ON_FAILURE)}"
                )
            converted, why = _ON_FAILURE[mine]
            if converted == _ON_FAILURE.get(connector, (None, ""))[0]:
                continue
            own[field] = converted
            if why:
                notes[(field,)] = why
        elif mine is not None:
            own[field] = converted_duration(source, f"{where}.{field}", mine)
    if not own:
        return notes
    ordered = {"name": result.pop("name"), **own}
    rest = dict(result)
    result.clear()
    result.update({**ordered, **rest})
    return notes


def _permissions(source: str, where: str, value: Any) -> list[dict[str, Any]]:
    """servox's ``permissions`` (``group``, ``resources``, ``verbs``), checked."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise cannot_convert(source, where, "must be a list")
    rules = []
    for index, item in enumerate(value):
        rule = check_keys(source, f"{where}[{index}]", item, {"group", "resources", "verbs"})
        for field in ("resources", "verbs"):
            listed = rule.get(field)
            if not isinstance(listed, list) or not listed or not all(isinstance(x, str) for x in listed):
                raise cannot_convert(source, f"{where}[{index}].{field}", "must be a list of names")
        for verb in rule["verbs"]:
            if verb not in VERBS:
                raise cannot_convert(
                    source, f"{where}[{index}].verbs", f"{verb!r} is not one of {', '.join(VERBS)}"
                )
        rules.append({"group": str(rule.get("group") or ""), "resources": list(rule["resources"]),
                      "verbs": list(rule["verbs"])})  # fmt: skip
    return rules


def _cascaded_flag(top: dict[str, Any], workload: dict[str, Any], name: str) -> bool:
    value = workload.get(name)
    if value is None:
        value = top.get(name, True)
    return bool(True if value is None else value)


def _strategy(source: str, where: str, value: Any) -> str | None:
    """None for servox's default strategy; the canary's alias ("" without one) for canary."""
    if isinstance(value, dict):
        check_keys(source, where, value, {"type", "alias"})
        kind, alias = value.get("type"), value.get("alias")
    else:
        kind, alias = value, None
    if kind == "default":
        return None
    if kind == "canary":
        return str(alias) if alias else ""
    raise cannot_convert(source, where, f"{kind!r} is not default or canary")


def _replicas(conversion: Conversion, where: str, value: Any) -> dict[str, Any]:
    replicas = check_keys(conversion.source, where, value, _SETTING)
    result: dict[str, Any] = {}
    for field in ("min", "max", "step"):
        if field in replicas:
            number = replicas[field]
            if isinstance(number, bool) or not isinstance(number, int):
                raise cannot_convert(
                    conversion.source, f"{where}.{field}", f"must be a whole number, not {number!r}"
                )
            result[field] = number
    for field in ("min", "max"):
        if field not in result:
            raise cannot_convert(conversion.source, where, f"{field} is required")
    if replicas.get("pinned"):
        result["pinned"] = True
    return result


def _container(
    conversion: Conversion, where: str, value: Any, workload: str, count: int, tuning: bool
) -> tuple[dict[str, Any], dict[tuple[str | int, ...], str]]:
    source = conversion.source
    container = check_keys(source, where, value, _CONTAINER)
    notes: dict[tuple[str | int, ...], str] = {}
    name = container.get("name")
    if not isinstance(name, str) or not name:
        raise cannot_convert(source, f"{where}.name", "a container needs a name")
    result: dict[str, Any] = {"name": name}
    alias = container.get("alias")
    if alias:
        result["alias"] = str(alias)
    elif count == 1:
        result["alias"] = f"{workload}/{name}"
        notes[("alias",)] = (
            "servox's name for this component (here a workload's only container is named after the workload): "
            "kept, so the optimizer sees the same component"
        )
    if container.get("command") is not None:
        conversion.drop(f"{where}.command", "servox did not use it either")
    static = container.get("static_environment_variables")
    if static:
        if not isinstance(static, dict):
            raise cannot_convert(source, f"{where}.static_environment_variables", "must be a mapping")
        result["static_environment_variables"] = {str(k): str(v) for k, v in static.items()}
        if not tuning:
            notes[("static_environment_variables",)] = (
                "servox set these on the tuning pod only and refused them here (default strategy); "
                "here they are set on the Deployment's container at each adjustment"
            )
    for resource, parse in (("cpu", cpu_quantity), ("memory", memory_quantity)):
        if container.get(resource) is None:
            raise cannot_convert(source, f"{where}.{resource}", "servox requires it")
        result[resource], resource_notes = _resource(
            conversion, f"{where}.{resource}", container[resource], parse
        )
        for path, text in resource_notes.items():
            notes[(resource, *path)] = text
    env = container.get("env")
    if env:
        if not isinstance(env, list):
            raise cannot_convert(source, f"{where}.env", "must be a list")
        result["env"] = [_env(conversion, f"{where}.env[{index}]", item) for index, item in enumerate(env)]
    return result, notes


def _resource(
    conversion: Conversion, where: str, value: Any, parse: Any
) -> tuple[dict[str, Any], dict[tuple[str | int, ...], str]]:
    source = conversion.source
    resource = check_keys(source, where, value, _RESOURCE)
    notes: dict[tuple[str | int, ...], str] = {}
    result: dict[str, Any] = {}
    for field in ("min", "max", "step"):
        if field not in resource:
            if field == "step":
                continue
            raise cannot_convert(source, f"{where}.{field}", "servox requires it")
        try:
            result[field] = parse(resource[field])
        except ValueError as exc:
            raise cannot_convert(source, f"{where}.{field}", str(exc)) from None
        if parse is memory_quantity and _bare_decimal(resource[field]):
            notes[(field,)] = "servox read a bare decimal as GiB; a bare number here is bytes"
    if resource.get("pinned"):
        result["pinned"] = True
    targets = _targets(source, f"{where}.set", resource.get("set", ["request", "limit"]))
    result["set"] = targets
    got = _targets(source, f"{where}.get", resource.get("get", ["request", "limit"]))
    ours = [targets[0], "limit" if targets[0] == "request" else "request"]
    if got != ours:  # else this project's default reads the same
        result["get"] = got
        if "get" not in resource:
            notes[("get",)] = "servox's default; without get the current value is read from the first of set"
    for field in ("request", "limit", "value"):
        if resource.get(field) is not None:
            conversion.drop(f"{where}.{field}", "a fixed value here comes from the workload's manifest")
    return result, notes


def _bare_decimal(value: Any) -> bool:
    if isinstance(value, float):
        return True
    return isinstance(value, str) and value.strip().replace(".", "", 1).isdigit() and "." in value


def _targets(source: str, where: str, value: Any) -> list[str]:
    items = value if isinstance(value, list) else [value]
    if not items or any(item not in ("request", "limit") for item in items) or len(set(items)) != len(items):
        raise cannot_convert(source, where, f"must be a list of request and limit, each once, not {value!r}")
    return [str(item) for item in items]


def _env(conversion: Conversion, where: str, value: Any) -> dict[str, Any]:
    source = conversion.source
    setting = check_keys(source, where, value, _ENV)
    variable = setting.get("literal") or setting.get("name")
    if not isinstance(variable, str) or not variable:
        raise cannot_convert(source, f"{where}.name", "an env setting needs a name")
    kind = setting.get("type")
    result: dict[str, Any] = {"name": variable, "type": kind}
    if kind == "range":
        for field in ("min", "max", "step"):
            if field in setting:
                result[field] = setting[field]
        if setting.get("value") is not None:
            result["default"] = setting["value"]
        if setting.get("unit"):
            result["unit"] = str(setting["unit"])
    elif kind == "enum":
        values = setting.get("values")
        if not isinstance(values, list) or not values:
            raise cannot_convert(source, f"{where}.values", "an enum needs values")
        result["values"] = [str(item) for item in values]
        if setting.get("value") is not None:
            result["default"] = str(setting["value"])
    else:
        raise cannot_convert(source, f"{where}.type", f"{kind!r} is not range or enum")
    if setting.get("pinned"):
        result["pinned"] = True
    if setting.get("literal") and setting.get("name") != setting.get("literal"):
        conversion.drop(
            f"{where}.name",
            f"the setting is named by its variable here ({variable}), not {setting.get('name')!r}",
        )
    return result
