"""``servo-actors init``: a commented servo.yaml for the connectors named, valid as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from servo_actors.cli.init_cmd import template_types
from servo_actors.connectors.registry import BUILTIN_CONNECTORS

pytestmark = pytest.mark.timeout(120)
PROCESS_TIMEOUT = 60.0


def servo_actors(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servo_actors", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )


def test_every_built_in_type_has_an_example() -> None:
    assert template_types() == sorted(BUILTIN_CONNECTORS)


def test_init_writes_a_commented_servo_yaml_that_validates(tmp_path: Path) -> None:
    types = template_types()
    written = servo_actors("init", *types, "prom2:prometheus", cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    text = (tmp_path / "servo.yaml").read_text(encoding="utf-8")
    assert text.startswith("# servo.yaml written by `servo-actors init`")
    data = yaml.safe_load(text)
    assert [(c["name"], c["type"]) for c in data["connectors"]] == [
        *((t, t) for t in types),
        ("prom2", "prometheus"),
    ]
    # Each connector's example comes with comments on its lines.
    assert sum(1 for line in text.splitlines() if "#" in line) > 2 * len(types)
    checked = servo_actors("validate", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr


def test_stdout_no_overwrite_and_bad_names(tmp_path: Path) -> None:
    printed = servo_actors("init", "wait", "-o", "-", cwd=tmp_path)
    assert printed.returncode == 0 and yaml.safe_load(printed.stdout)["connectors"][0]["type"] == "wait"
    (tmp_path / "servo.yaml").write_text("keep: me\n", encoding="utf-8")
    refused = servo_actors("init", "wait", cwd=tmp_path)
    assert refused.returncode == 2 and "--force" in refused.stderr
    assert (tmp_path / "servo.yaml").read_text(encoding="utf-8") == "keep: me\n"
    for args, words in (
        (["vegeta"], "no example for connector type 'vegeta'"),
        (["prometheus", "prometheus"], "given twice: prometheus"),
        (["bad name:wait"], "is not a connector name"),
    ):
        result = servo_actors("init", *args, "-o", "-", cwd=tmp_path)
        assert result.returncode == 2 and words in result.stderr, result.stderr
