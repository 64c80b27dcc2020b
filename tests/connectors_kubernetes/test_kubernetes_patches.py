"""Strategic-merge patches of owned fields only, and the rollback patch (patches.py)."""

from __future__ import annotations

import copy

import pytest
from k8s_objects import BASE_CONFIG, config, container, deployment, hpa

from servo_actors.connectors.kubernetes.config import KubernetesConfig
from servo_actors.connectors.kubernetes.patches import (
    deployment_patch,
    hpa_owned,
    hpa_patch,
    hpa_wanted,
    owned_fields,
    wanted_fields,
)
from servo_actors.connectors.kubernetes.settings import requested_targets


def _patch(cfg, obj, settings):
    targets = requested_targets(cfg, {"web": {"settings": settings}})["web"]
    before = owned_fields(obj, targets, cfg.deployments[0])
    return before, targets, deployment_patch(before, wanted_fields(before, targets, cfg.deployments[0]), "7")


def test_patch_is_keyed_on_the_container_name_and_carries_the_resource_version() -> None:
    _, _, patch = _patch(
        config(), deployment(), {"cpu": {"value": 1.5}, "GOGC": {"value": 200}, "replicas": {"value": 4}}
    )
    assert patch == {
        "metadata": {"resourceVersion": "7"},
        "spec": {
            "replicas": 4,
            "template": {"spec": {"containers": [{
                "name": "main",
                "resources": {"requests": {"cpu": "1500m"}, "limits": {"cpu": "1500m"}},
                "env": [{"name": "GOGC", "value": "200"}],
            }]}},
        },
    }  # fmt: skip


def test_no_patch_when_nothing_changes() -> None:
    obj = deployment(
        containers=[
            container(
                requests={"cpu": "0.5", "memory": "512Mi"},
                limits={"cpu": "500m", "memory": "0.5Gi"},
                env=[{"name": "GOGC", "value": "100"}],
            )
        ]
    )
    _, _, patch = _patch(
        config(),
        obj,
        {"cpu": {"value": 0.5}, "memory": {"value": 0.5}, "GOGC": {"value": 100}, "replicas": {"value": 2}},
    )
    assert patch is None


def test_only_the_configured_side_is_written() -> None:
    data = copy.deepcopy(BASE_CONFIG)
    data["deployments"][0]["containers"][0]["memory"]["set"] = ["limit"]
    cfg = KubernetesConfig.model_validate(data)
    _, _, patch = _patch(cfg, deployment(), {"memory": {"value": 2}})
    assert patch["spec"]["template"]["spec"]["containers"] == [
        {"name": "main", "resources": {"limits": {"memory": "2Gi"}}}
    ]


def test_a_variable_from_a_reference_loses_the_reference() -> None:
    obj = deployment(
        containers=[
            container(
                requests={"cpu": "1"},
                env=[{"name": "GC", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "gc"}}}],
            )
        ]
    )
    _, _, patch = _patch(config(), obj, {"GC": {"value": "g1"}})
    assert patch["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "GC", "value": "g1", "valueFrom": None}
    ]


def test_rollback_restores_the_exact_values_and_removes_what_was_added() -> None:
    cfg = config()
    original = deployment(containers=[container(requests={"cpu": "500m"}, limits={"cpu": "1"}, env=[])])
    before, targets, forward = _patch(cfg, original, {"cpu": {"value": 2}, "GOGC": {"value": 300}})
    assert forward["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "2"},
        "limits": {"cpu": "2"},
    }
    changed = deployment(
        containers=[
            container(requests={"cpu": "2"}, limits={"cpu": "2"}, env=[{"name": "GOGC", "value": "300"}])
        ],
        rv="9",
    )
    back = deployment_patch(owned_fields(changed, targets, cfg.deployments[0]), before, "9")
    assert back == {
        "metadata": {"resourceVersion": "9"},
        "spec": {"template": {"spec": {"containers": [{
            "name": "main",
            "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}},
            "env": [{"name": "GOGC", "$patch": "delete"}],
        }]}}},
    }  # fmt: skip


def test_rollback_deletes_a_resource_that_was_not_set() -> None:
    cfg = config()
    original = deployment(containers=[container(requests={"cpu": "500m"})])
    before, targets, _ = _patch(cfg, original, {"cpu": {"value": 1}})
    changed = deployment(containers=[container(requests={"cpu": "1"}, limits={"cpu": "1"})])
    back = deployment_patch(owned_fields(changed, targets, cfg.deployments[0]), before, "8")
    assert back["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "500m"},
        "limits": {"cpu": None},
    }


def test_hpa_patch_sends_the_whole_metrics_list() -> None:
    obj = hpa(low=1, high=5, cpu=70)
    before = hpa_owned(obj)
    patch = hpa_patch(before, hpa_wanted(before, {"target_cpu_utilization": 55, "max_replicas": 9}), "3")
    assert patch["metadata"] == {"resourceVersion": "3"}
    assert patch["spec"]["maxReplicas"] == 9 and "minReplicas" not in patch["spec"]
    metrics = patch["spec"]["metrics"]
    assert len(metrics) == 2
    assert metrics[0]["resource"]["target"] == {"type": "Utilization", "averageUtilization": 55}
    assert metrics[1] == obj["spec"]["metrics"][1]


def test_hpa_cpu_target_is_added_when_missing_and_no_patch_when_unchanged() -> None:
    before = hpa_owned(hpa(cpu=None))
    wanted = hpa_wanted(before, {"target_cpu_utilization": 60})
    assert wanted["metrics"][-1] == {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}},
    }
    same = hpa_owned(hpa(low=2, high=5, cpu=70))
    assert hpa_patch(same, hpa_wanted(same, {"min_replicas": 2, "target_cpu_utilization": 70}), "3") is None


def test_hpa_bounds_may_not_cross() -> None:
    before = hpa_owned(hpa(low=1, high=5))
    with pytest.raises(ValueError, match="minReplicas 6 would be above maxReplicas 5"):
        hpa_wanted(before, {"min_replicas": 6})
