"""Describe from cluster objects, and what an ADJUST asks (settings.py): pure, no cluster."""

from __future__ import annotations

import copy

import pytest
from k8s_objects import BASE_CONFIG, config, container, deployment, hpa

from servo_actors.connectors.kubernetes.config import KubernetesConfig
from servo_actors.connectors.kubernetes.settings import (
    ClusterStateError,
    DeploymentState,
    SettingError,
    describe_components,
    requested_targets,
)


def test_describe_reads_requests_env_and_replicas() -> None:
    components = describe_components(config(), [DeploymentState(config().deployments[0], deployment())])
    settings = components["web"]["settings"]
    assert settings["cpu"] == {
        "type": "range",
        "min": 0.25,
        "max": 4.0,
        "step": 0.125,
        "pinned": False,
        "unit": "cores",
        "value": 0.5,
    }
    assert settings["memory"]["value"] == 0.5 and settings["memory"]["unit"] == "GiB"
    assert settings["GOGC"] == {
        "type": "range",
        "min": 50,
        "max": 400,
        "step": 10,
        "pinned": False,
        "value": 100,
    }
    assert settings["GC"] == {"type": "enum", "values": ["g1", "parallel"], "pinned": False, "value": None}
    assert settings["replicas"]["value"] == 2


def test_describe_falls_back_to_limits_and_reports_out_of_range_values_as_they_are() -> None:
    obj = deployment(
        containers=[
            container(limits={"cpu": "8", "memory": "64Mi"}, env=[{"name": "GOGC", "value": "9000"}])
        ],
        replicas=40,
    )
    settings = describe_components(config(), [DeploymentState(config().deployments[0], obj)])["web"][
        "settings"
    ]
    assert settings["cpu"]["value"] == 8.0
    assert settings["memory"]["value"] == 0.0625
    assert settings["GOGC"]["value"] == 9000
    assert settings["replicas"]["value"] == 40


def test_set_limit_prefers_the_limit() -> None:
    data = copy.deepcopy(BASE_CONFIG)
    data["deployments"][0]["containers"][0]["cpu"]["set"] = ["limit"]
    cfg = KubernetesConfig.model_validate(data)
    settings = describe_components(cfg, [DeploymentState(cfg.deployments[0], deployment())])["web"][
        "settings"
    ]
    assert settings["cpu"]["value"] == 1.0


def test_hpa_hides_replicas_and_offers_its_settings() -> None:
    data = copy.deepcopy(BASE_CONFIG)
    data["deployments"][0]["hpa"] = {
        "min_replicas": {"min": 1, "max": 10},
        "max_replicas": {"min": 2, "max": 30},
        "target_cpu_utilization": {"min": 30, "max": 90, "step": 5},
    }
    cfg = KubernetesConfig.model_validate(data)
    settings = describe_components(
        cfg, [DeploymentState(cfg.deployments[0], deployment(), hpa(low=2, high=8, cpu=65))]
    )["web"]["settings"]
    assert "replicas" not in settings
    assert settings["hpa_min_replicas"]["value"] == 2
    assert settings["hpa_max_replicas"]["value"] == 8
    assert settings["hpa_target_cpu_utilization"] == {
        "type": "range",
        "min": 30,
        "max": 90,
        "step": 5,
        "pinned": False,
        "value": 65,
    }


def test_deployment_settings_go_on_the_first_container_only() -> None:
    data = copy.deepcopy(BASE_CONFIG)
    data["deployments"][0]["containers"].append({"name": "proxy", "cpu": {"min": 0.1, "max": 1}})
    cfg = KubernetesConfig.model_validate(data)
    obj = deployment(
        containers=[container(requests={"cpu": "1"}), container("proxy", requests={"cpu": "100m"})]
    )
    components = describe_components(cfg, [DeploymentState(cfg.deployments[0], obj)])
    assert set(components) == {"web/main", "web/proxy"}
    assert "replicas" in components["web/main"]["settings"]
    assert set(components["web/proxy"]["settings"]) == {"cpu"}


def test_a_missing_container_is_named() -> None:
    obj = deployment(containers=[container("other")])
    with pytest.raises(ClusterStateError, match="no container 'main' \\(it has 'other'\\)"):
        describe_components(config(), [DeploymentState(config().deployments[0], obj)])


def test_requested_targets() -> None:
    asked = {
        "web": {
            "settings": {
                "cpu": {"value": 1.5},
                "memory": {"value": "0.75"},
                "GOGC": {"value": 120},
                "GC": {"value": "g1"},
                "replicas": {"value": 3},
            }
        }
    }
    targets = requested_targets(config(), asked)["web"]
    assert targets.replicas == 3
    main = targets.containers["main"]
    assert (main.cpu, main.memory, main.env) == (1.5, 0.75, {"GOGC": "120", "GC": "g1"})


@pytest.mark.parametrize(
    ("asked", "problem"),
    [
        ({"api": {"settings": {"cpu": {"value": 1}}}}, "no component 'api'"),
        ({"web": {"settings": {"gpu": {"value": 1}}}}, "web.gpu: this connector offers no such setting"),
        ({"web": {"settings": {"cpu": {"value": 8}}}}, "web.cpu: 8 is outside the configured range"),
        ({"web": {"settings": {"cpu": {"value": "lots"}}}}, "not a number"),
        ({"web": {"settings": {"replicas": {"value": 2.5}}}}, "not a whole number"),
        ({"web": {"settings": {"GC": {"value": "zgc"}}}}, "not one of g1, parallel"),
        ({"web": {"settings": {"memory": {"value": True}}}}, "not a number"),
        ({"web": {"settings": {"hpa_min_replicas": {"value": 2}}}}, "no such setting"),
    ],
)
def test_bad_requests_name_component_and_setting(asked, problem) -> None:
    with pytest.raises(SettingError, match=problem):
        requested_targets(config(), asked)


def _with_cpu(**cpu: object) -> KubernetesConfig:
    data = copy.deepcopy(BASE_CONFIG)
    data["deployments"][0]["containers"][0]["cpu"].update(cpu)
    return KubernetesConfig.model_validate(data)


@pytest.mark.parametrize(
    ("cpu", "requests", "limits", "value"),
    [
        ({"get": ["limit"]}, {"cpu": "500m"}, {"cpu": "1"}, 1.0),  # the limit, though set writes both
        ({"get": ["request", "limit"]}, None, {"cpu": "2"}, 2.0),  # no request: the limit next
        ({"get": ["limit"]}, {"cpu": "500m"}, None, None),  # get names only the limit: no value
        ({"set": ["limit"], "get": ["request"]}, {"cpu": "500m"}, {"cpu": "1"}, 0.5),
    ],
)
def test_get_decides_which_value_describe_reports(cpu, requests, limits, value) -> None:
    cfg = _with_cpu(**cpu)
    obj = deployment(containers=[container(requests=requests, limits=limits)])
    settings = describe_components(cfg, [DeploymentState(cfg.deployments[0], obj)])["web"]["settings"]
    assert settings["cpu"]["value"] == value


def test_static_environment_variables_join_every_adjustment_of_their_container() -> None:
    data = copy.deepcopy(BASE_CONFIG)
    data["deployments"][0]["containers"][0]["static_environment_variables"] = {"TZ": "UTC", "GOMAXPROCS": 2}
    cfg = KubernetesConfig.model_validate(data)
    targets = requested_targets(cfg, {"web": {"settings": {"GOGC": {"value": 120}}}})
    assert targets["web"].containers["main"].env == {"TZ": "UTC", "GOMAXPROCS": "2", "GOGC": "120"}
    # Named with no settings, the container still gets them; never offered as settings.
    assert requested_targets(cfg, {"web": {}})["web"].containers["main"].env == {
        "TZ": "UTC",
        "GOMAXPROCS": "2",
    }
    described = describe_components(cfg, [DeploymentState(cfg.deployments[0], deployment())])
    assert "TZ" not in described["web"]["settings"]
