"""The connector's config model: ranges, names, component naming."""

from __future__ import annotations

import copy

import pytest
from k8s_objects import BASE_CONFIG, config
from pydantic import ValidationError

from servo_actors.connectors.base import Control
from servo_actors.connectors.kubernetes import KubernetesConnector
from servo_actors.connectors.kubernetes.config import KubernetesConfig, component_name


def _with_containers(*containers: dict) -> KubernetesConfig:
    data = copy.deepcopy(BASE_CONFIG)
    data["deployments"][0]["containers"] = list(containers)
    return KubernetesConfig.model_validate(data)


def test_quantities_are_held_in_cores_and_gib_and_shown_as_quantities() -> None:
    cfg = config()
    cpu = cfg.deployments[0].containers[0].cpu
    memory = cfg.deployments[0].containers[0].memory
    assert (cpu.min, cpu.max, cpu.step) == (0.25, 4.0, 0.125)
    assert (memory.min, memory.max, memory.step) == (0.25, 4.0, 0.125)
    shown = cfg.model_dump(mode="json")["deployments"][0]["containers"][0]
    assert shown["cpu"]["min"] == "250m" and shown["memory"]["max"] == "4Gi"
    assert KubernetesConfig.model_validate(cfg.model_dump(mode="json")) == cfg


def test_defaults() -> None:
    cfg = config()
    assert (cfg.namespace, cfg.timeout, cfg.settlement, cfg.on_failure) == ("default", 300.0, 0.0, "rollback")
    assert cfg.deployments[0].containers[0].cpu.set == ["request", "limit"]


@pytest.mark.parametrize(
    ("container", "problem"),
    [
        ({"name": "main", "cpu": {"min": 2, "max": 1}}, "min"),
        ({"name": "main", "cpu": {"min": 1, "max": 2, "step": 0}}, "step"),
        ({"name": "main", "memory": {"min": "1Gi", "max": "2Gi", "set": []}}, "set"),
        ({"name": "main", "cpu": {"min": "1x", "max": 2}}, "quantity"),
        ({"name": "main", "env": [{"name": "cpu", "type": "range", "min": 1, "max": 2}]}, "clash"),
        (
            {
                "name": "main",
                "env": [
                    {"name": "A", "type": "enum", "values": ["x"]},
                    {"name": "A", "type": "enum", "values": ["y"]},
                ],
            },
            "twice",
        ),
        ({"name": "main", "env": [{"name": "A", "type": "list"}]}, "type"),
        ({"name": "main", "env": [{"name": "A B", "type": "enum", "values": ["x"]}]}, "valid"),
    ],
)
def test_bad_container_settings_are_named(container, problem) -> None:
    with pytest.raises(ValidationError, match=problem):
        _with_containers(container)


def test_component_names_alias_deployment_or_both() -> None:
    cfg = _with_containers({"name": "main"}, {"name": "sidecar", "alias": "proxy"}, {"name": "log"})
    deployment = cfg.deployments[0]
    assert [component_name(deployment, c) for c in deployment.containers] == ["web/main", "proxy", "web/log"]
    single = config().deployments[0]
    assert component_name(single, single.containers[0]) == "web"


def test_component_names_must_be_unique_across_deployments() -> None:
    data = copy.deepcopy(BASE_CONFIG)
    data["deployments"].append({"name": "api", "containers": [{"name": "main", "alias": "web"}]})
    with pytest.raises(ValidationError, match="component name 'web'"):
        KubernetesConfig.model_validate(data)


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"namespace": "Not_Valid"}, "namespace"),
        ({"timeout": 0}, "more than 0"),
        ({"on_failure": "destroy"}, "rollback"),
        ({"deployments": []}, "at least one workload"),
        ({"deployments": [], "statefulsets": []}, "under deployments or statefulsets"),
        ({"unknown": 1}, "Extra inputs"),
        (
            {"statefulsets": [{"name": "db", "strategy": "tuning", "containers": [{"name": "main"}]}]},
            "strategy: tuning is for Deployments only",
        ),
        ({"statefulsets": [{"name": "web", "containers": [{"name": "main"}]}]}, "under both deployments and"),
        (
            {"statefulsets": [{"name": "DB", "containers": [{"name": "main"}]}]},
            "not a valid StatefulSet name",
        ),
        (
            {
                "statefulsets": [
                    {"name": "db", "containers": [{"name": "m"}]},
                    {"name": "db", "containers": [{"name": "m"}]},
                ]
            },
            "statefulset\\(s\\) listed twice: db",
        ),
    ],
)
def test_bad_top_level_values(changes, problem) -> None:
    with pytest.raises(ValidationError, match=problem):
        config(**changes)


def test_statefulsets_are_accepted_beside_or_instead_of_deployments() -> None:
    sts = {
        "name": "cache",
        "replicas": {"min": 1, "max": 5},
        "containers": [{"name": "main", "cpu": {"min": "100m", "max": 2}}],
    }
    both = config(statefulsets=[sts])
    assert [(w.kind, w.name) for w in both.workloads] == [("Deployment", "web"), ("StatefulSet", "cache")]
    assert both.kinds() == {"web": "Deployment", "cache": "StatefulSet"}
    only = config(deployments=[], statefulsets=[sts])
    assert [w.name for w in only.workloads] == ["cache"]
    assert component_name(only.statefulsets[0], only.statefulsets[0].containers[0]) == "cache"
    assert KubernetesConfig.model_validate(only.model_dump(mode="json")) == only


@pytest.mark.parametrize(
    ("changes", "control", "declared"),
    [
        ({"timeout": 100, "settlement": 20}, Control(), 240.0),  # rollout + settlement, twice: a rollback
        ({"timeout": 100, "settlement": 20}, Control(settlement=50), 300.0),  # the control's settlement wins
        ({"timeout": 100, "settlement": 20, "on_failure": "shutdown"}, Control(), 120.0),
        ({"timeout": 100, "on_failure": "ignore"}, Control(), 100.0),
    ],
)
def test_an_adjust_declares_its_rollout_and_rollback_time(changes, control, declared) -> None:
    cfg = config(**changes)
    assert KubernetesConnector.operation_seconds(cfg, "adjust", control) == declared
    # A measure waits only for its own control's times; describe and check for nothing.
    for operation in ("measure", "describe", "check"):
        assert KubernetesConnector.operation_seconds(cfg, operation, control) == 0.0


def test_a_statefulset_beside_a_tuning_deployment_is_adjusted_as_itself() -> None:
    """``strategy: tuning`` splits off its own components only; a StatefulSet's stay with the rest."""
    from servo_actors.connectors.kubernetes.settings import requested_targets
    from servo_actors.connectors.kubernetes.tuning import split_components

    data = copy.deepcopy(BASE_CONFIG)
    data["deployments"][0]["strategy"] = "tuning"
    data["deployments"][0]["replicas"] = None
    data["statefulsets"] = [
        {"name": "cache", "containers": [{"name": "main", "cpu": {"min": "100m", "max": 2}}]}
    ]
    cfg = KubernetesConfig.model_validate(data)
    rest, trial = split_components(
        cfg, {"cache": {"settings": {"cpu": {"value": 1}}}, "web-tuning": {"settings": {"cpu": {"value": 1}}}}
    )
    assert set(rest) == {"cache"} and set(trial.targets) == {"web"}
    assert requested_targets(cfg, rest)["cache"].containers["main"].cpu == 1.0


def test_check_asks_for_statefulset_verbs_only_when_statefulsets_are_configured() -> None:
    from servo_actors.connectors.kubernetes.checks import REQUIRED_ACCESS, required_access

    sts = {"name": "cache", "containers": [{"name": "main", "cpu": {"min": "100m", "max": 2}}]}
    assert required_access(config()) == REQUIRED_ACCESS
    asked = required_access(config(statefulsets=[sts]))
    assert ("apps", "statefulsets", ("get", "list", "watch", "patch")) in asked
    pod_verbs = {(group, resource): verbs for group, resource, verbs in asked}[("", "pods")]
    assert "delete" in pod_verbs  # the rollback deletes the failed revision's stuck pods
    ignoring = required_access(config(statefulsets=[sts], on_failure="ignore"))
    assert ("apps", "statefulsets", ("get", "list", "watch", "patch")) in ignoring
    assert ("", "pods", ("get", "list", "watch")) in ignoring
    # A StatefulSet's own on_failure counts, not only the connector's.
    own = required_access(config(statefulsets=[{**sts, "on_failure": "rollback"}], on_failure="ignore"))
    assert ("", "pods", ("get", "list", "watch", "delete")) in own


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"cpu": {"min": 1, "max": 2, "get": ["requests"]}}, "'request' or 'limit'"),
        ({"cpu": {"min": 1, "max": 2, "get": []}}, "at least 1 item"),
        ({"memory": {"min": "1Gi", "max": "2Gi", "get": ["limit", "limit"]}}, "lists a value twice"),
        ({"static_environment_variables": {"A B": "x"}}, "'A B' is not a valid environment variable name"),
        ({"static_environment_variables": {"GOGC": "100"}}, "'GOGC' is also a tuned env setting"),
        ({"static_environment_variables": {"A": [1]}}, "A: a value must be a string or a number"),
        ({"static_environment_variables": ["A=1"]}, "valid dictionary"),
    ],
)
def test_bad_get_and_static_environment_variables_are_named(change, problem) -> None:
    container = {"name": "main", "env": [{"name": "GOGC", "type": "range", "min": 1, "max": 2}], **change}
    with pytest.raises(ValidationError, match=problem):
        _with_containers(container)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"namespace": "Shop_1"}, "'Shop_1' is not a valid namespace name"),
        ({"timeout": 0}, "must be more than 0"),
        ({"timeout": "soon"}, "timeout"),
        ({"settlement": "-5s"}, "settlement"),
        ({"on_failure": "explode"}, "'rollback', 'shutdown' or 'ignore'"),
    ],
)
def test_bad_workload_overrides_are_named(change, problem) -> None:
    data = copy.deepcopy(BASE_CONFIG)
    data["deployments"][0].update(change)
    with pytest.raises(ValidationError, match=problem):
        KubernetesConfig.model_validate(data)


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        ({"group": "", "resources": ["pods"], "verbs": ["fly"]}, "'fly' is not a verb"),
        ({"group": "", "resources": ["Pods"], "verbs": ["get"]}, "'Pods' is not a resource"),
        ({"group": "", "resources": [], "verbs": ["get"]}, "at least 1 item"),
        ({"group": "", "verbs": ["get"]}, "resources"),
        ({"resources": ["pods"], "verbs": ["get"], "verb": "list"}, "verb"),
    ],
)
def test_bad_permissions_are_named(rule, problem) -> None:
    with pytest.raises(ValidationError, match=problem):
        config(permissions=[rule])


def test_workload_overrides_split_the_connector_into_parts() -> None:
    data = copy.deepcopy(BASE_CONFIG)
    data.update(timeout="2m", settlement="10s", on_failure="shutdown")
    api = {"name": "api", "containers": [{"name": "app", "cpu": {"min": "100m", "max": 1}}]}
    data["deployments"] += [
        {**api, "namespace": "shop", "timeout": "5m", "on_failure": "ignore"},
        {**api, "name": "worker", "namespace": "default", "settlement": "10s"},  # the connector's values
    ]
    data["statefulsets"] = [
        {**api, "name": "db", "namespace": "shop", "timeout": "5m", "on_failure": "ignore"}
    ]
    cfg = KubernetesConfig.model_validate(data)
    parts = cfg.groups()
    assert [(p.namespace, p.timeout, p.settlement, p.on_failure) for p in parts] == [
        ("default", 120.0, 10.0, "shutdown"),
        ("shop", 300.0, 10.0, "ignore"),
    ]
    assert [[w.name for w in p.workloads] for p in parts] == [["web", "worker"], ["api", "db"]]
    assert [s.name for s in parts[1].statefulsets] == ["db"]
    assert all(w.namespace is None for p in parts for w in p.workloads)
    assert cfg.namespace_of(cfg.deployments[1]) == "shop"
    # The ADJUST's allowance adds up the parts (none rolls back here).
    assert KubernetesConnector.operation_seconds(cfg, "adjust", Control()) == 130.0 + 310.0
    # The output of `config` loads again unchanged.
    assert KubernetesConfig.model_validate(cfg.model_dump(mode="json")) == cfg


def test_workload_names_stay_unique_across_namespaces() -> None:
    data = copy.deepcopy(BASE_CONFIG)
    data["deployments"].append({**copy.deepcopy(data["deployments"][0]), "namespace": "shop"})
    with pytest.raises(ValidationError, match="deployment\\(s\\) listed twice: web"):
        KubernetesConfig.model_validate(data)
