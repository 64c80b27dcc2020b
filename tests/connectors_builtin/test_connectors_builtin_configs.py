"""The example configs under config/ validate, and what they describe actually runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from servo_actors.config.models import ServoConfig
from servo_actors.connectors.base import ConnectorFailure, Control
from servo_actors.connectors.registry import resolve_connector_type

CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"
EXAMPLES = {
    "command.yaml": "command",
    "wait.yaml": "wait",
    "loadgen.yaml": "loadgen",
    "synthetic.yaml": "synthetic",
}


def load(name: str) -> ServoConfig:
    return ServoConfig.model_validate(yaml.safe_load((CONFIG_DIR / name).read_text()))


@pytest.mark.parametrize(("name", "connector_type"), EXAMPLES.items())
def test_example_validates_as_a_servo_config_and_its_connector_config(name, connector_type):
    config = load(name)
    assert config.optimizer is not None and config.optimizer.id == "example.com/web"
    assert [spec.type for spec in config.connectors] == [connector_type]
    for spec in config.connectors:
        cls = resolve_connector_type(spec.type)
        connector = cls(spec.name, cls.config_model.model_validate(spec.config))
        assert connector.name == spec.name


def test_loadgen_example_targets_loopback():
    assert load("loadgen.yaml").connectors[0].config["url"].startswith("http://127.0.0.1:")


@pytest.mark.timeout(60)
def test_command_example_runs(progress, tmp_path):
    spec = load("command.yaml").connectors[0]
    cls = resolve_connector_type(spec.type)
    config = {**spec.config, "env": {**spec.config["env"], "STATE_FILE": str(tmp_path / "replicas")}}
    app = cls(spec.name, cls.config_model.model_validate(config))

    described = app.describe()
    assert described["components"]["web"]["settings"]["replicas"]["value"] == 2
    app.adjust({"web": {"settings": {"replicas": {"value": 4}}}}, Control(), progress)
    assert app.describe()["components"]["web"]["settings"]["replicas"]["value"] == 4
    measured = app.measure(["p99_latency"], Control(duration=0.1), progress)
    assert measured["metrics"] == {"p99_latency": {"unit": "ms", "value": 100}}
    assert all(result["success"] for result in app.check())

    with pytest.raises(ConnectorFailure, match="whole number"):
        app.adjust({"web": {"settings": {"replicas": {"value": "4; touch /tmp/pwned"}}}}, Control(), progress)
    assert app.describe()["components"]["web"]["settings"]["replicas"]["value"] == 4


def test_synthetic_example_describes_the_simulated_service():
    spec = load("synthetic.yaml").connectors[0]
    cls = resolve_connector_type(spec.type)
    app = cls(spec.name, cls.config_model.model_validate(spec.config))
    assert set(app.describe()["components"]["web"]["settings"]) == {"cpu", "memory", "replicas", "gc"}
