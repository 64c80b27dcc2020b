"""The tuning pod's spec hash (tuning_pod.py): equal settings give the same hash however the
template writes its quantities or whichever of request and limit it sets; a changed setting does
not. The same against the real cluster: tests/kube_tuning/test_tuning_pod.py."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_objects import config, container, deployment

from servo_actors.connectors.kubernetes.config import DeploymentConfig
from servo_actors.connectors.kubernetes.settings import requested_targets
from servo_actors.connectors.kubernetes.tuning_pod import (
    build_tuning_pod,
    current_values,
    merged_values,
    spec_hash,
)

TEMPLATES = {
    "cpu request only": container(requests={"cpu": "250m", "memory": "512Mi"}, limits={"memory": "512Mi"}),
    "decimal memory": container(requests={"cpu": "1", "memory": "1G"}, limits={"cpu": "1", "memory": "1G"}),
}


def _adjust(
    template: dict[str, Any], existing: dict[str, Any] | None, settings: dict[str, Any]
) -> dict[str, Any]:
    """The pod ``adjust_tuning`` would build for ``settings`` beside ``existing``."""
    cfg = config()
    dep: DeploymentConfig = cfg.deployments[0]
    requested = requested_targets(cfg, {"web": {"settings": {k: {"value": v} for k, v in settings.items()}}})
    values = merged_values(requested["web"], current_values(dep, existing))
    return build_tuning_pod(deployment(containers=[template]), dep, values)


@pytest.mark.parametrize("template", TEMPLATES.values(), ids=TEMPLATES)
@pytest.mark.parametrize(
    "first", [{"GOGC": 200}, {"cpu": 0.5, "memory": 0.5, "GOGC": 200}], ids=["env only", "cpu memory env"]
)
def test_repeating_the_env_of_a_trial_gives_the_same_hash(
    template: dict[str, Any], first: dict[str, Any]
) -> None:
    made = _adjust(template, None, first)
    assert spec_hash(_adjust(template, made, {"GOGC": 200})) == spec_hash(made)


@pytest.mark.parametrize("template", TEMPLATES.values(), ids=TEMPLATES)
@pytest.mark.parametrize(
    "change", [{"GOGC": 300}, {"cpu": 0.75}, {"memory": 0.75}], ids=["env", "cpu", "memory"]
)
def test_a_changed_setting_changes_the_hash(template: dict[str, Any], change: dict[str, Any]) -> None:
    made = _adjust(template, None, {"GOGC": 200})
    assert spec_hash(_adjust(template, made, change)) != spec_hash(made)
