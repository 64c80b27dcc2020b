"""Every example in config/*.yaml validates through the real CLI, with its connector types imported.

A glob, so examples added later are covered too. A type that cannot be imported yet is a failure,
not a skip: an example must work as shipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from servo_actors.config import effective_config, load_config

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
    config = load_config(path, env={})
    shown = tmp_path / "shown.yaml"
    shown.write_text(yaml.safe_dump(effective_config(config), sort_keys=False))
    again = load_config(shown, env={})
    unmasked = {"optimizer": {"token"}, "connectors": True}
    assert again.model_dump(exclude=unmasked) == config.model_dump(exclude=unmasked)
    assert effective_config(again) == effective_config(config)
