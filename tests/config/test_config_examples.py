"""Every example in config/*.yaml validates through the real CLI, with its connector types imported.

A glob, so examples added later are covered too. A type that cannot be imported yet is a failure,
not a skip: an example must work as shipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from servo_actors.config import effective_config, load_apps, load_config
from servo_actors.connectors.registry import connector_settings_problems, effective_settings

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "config").glob("*.yaml"))


def test_there_are_examples() -> None:
    assert any(path.name == "servo.yaml" for path in EXAMPLES)


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_example_validates(path: Path, run_cli) -> None:
    result = run_cli(["-c", str(path), "validate"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(f"OK: {path} is valid")


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_example_effective_config_loads_back_the_same(path: Path, tmp_path: Path) -> None:
    apps = load_apps(path, env={}, connector_check=connector_settings_problems)
    shown = tmp_path / "shown.yaml"
    shown.write_text(
        yaml.safe_dump_all(
            [effective_config(config, connector_settings=effective_settings) for config in apps],
            sort_keys=False,
        )
    )
    again = load_apps(shown, env={}, connector_check=connector_settings_problems)
    unmasked = {"optimizer": {"token"}, "connectors": True}
    assert len(again) == len(apps)
    for before, after in zip(apps, again, strict=True):
        assert after.model_dump(exclude=unmasked) == before.model_dump(exclude=unmasked)
        assert effective_config(after, connector_settings=effective_settings) == effective_config(
            before, connector_settings=effective_settings
        )


PLANS = sorted((Path(__file__).resolve().parents[2] / "config" / "plans").glob("*.yaml"))


def test_a_plan_ships_for_the_embedded_optimizer() -> None:
    assert [path.name for path in PLANS] == ["synthetic.yaml"]


@pytest.mark.parametrize("path", PLANS, ids=[path.name for path in PLANS])
def test_each_shipped_plan_is_valid_and_serves_the_app_of_its_servo_example(path: Path) -> None:
    from servo_actors.optimizer.plan import parse_plan

    plan = parse_plan(yaml.safe_load(path.read_text()), source=str(path))
    servo = load_config(
        path.parents[1] / path.name, env={}, connector_check=connector_settings_problems
    )  # config/plans/X.yaml is for config/X.yaml
    assert servo.optimizer is not None and servo.optimizer.id == plan.app
    metrics = {"synthetic": {"p99_latency", "throughput", "error_rate", "cost"}}[path.stem]
    assert {plan.objective.metric, *(c.metric for c in plan.objective.constraints)} <= metrics
