"""supervisor.convention and connectors[].placement in servo.yaml: validated, shown, and refused with
messages that name the key at fault (never a secret)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from servo_actors.actors.convention.settings import convention_settings, system_options
from servo_actors.actors.rules.placement import Requirement
from servo_actors.config import load_config
from servo_actors.endpoints import Endpoint
from servo_actors.errors import ConfigError

SYNTHETIC = {"name": "app", "type": "synthetic"}
PLACED = {"name": "load", "type": "synthetic", "placement": {"capability": "loadgen-host"}}


def write(tmp_path: Path, supervisor: dict | None, connectors: list[dict]) -> Path:
    path = tmp_path / "servo.yaml"
    path.write_text(yaml.safe_dump({"supervisor": supervisor or {}, "connectors": connectors}))
    return path


def key_file(path: Path, content: str = "k" * 40, mode: int = 0o600) -> Path:
    path.write_text(content)
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("convention", "connectors", "expected"),
    [
        (None, [PLACED], "connectors: connector(s) load have a placement, which needs supervisor.convention"),
        (
            {"listen": "0.0.0.0:1900", "secret_file": "k"},
            [PLACED],
            "supervisor.convention.listen: '0.0.0.0:1900': 0.0.0.0 would listen on every interface",
        ),
        (
            {"listen": "10.0.0.5", "secret_file": "k"},
            [],
            "supervisor.convention.listen: '10.0.0.5' is not HOST:PORT",
        ),
        ({"listen": "10.0.0.5:1900"}, [], "supervisor.convention.secret_file: "),
        (
            {"listen": "10.0.0.5:1900", "secret_file": "k", "heartbeat": {"interval": "5s", "timeout": "5s"}},
            [],
            "supervisor.convention.heartbeat: timeout must be longer than interval",
        ),
        (
            {"listen": "10.0.0.5:1900", "secret_file": "k"},
            [{**PLACED, "placement": {"capability": "a b"}}],
            "connectors[0].placement.capability",
        ),
        ({"listen": "10.0.0.5:1900", "secret_file": "k", "port": 1}, [], "supervisor.convention.port"),
    ],
)
def test_a_bad_convention_exits_2_naming_the_key(
    run_cli, tmp_path: Path, convention: dict | None, connectors: list[dict], expected: str
) -> None:
    supervisor = {"convention": convention} if convention is not None else {}
    path = write(tmp_path, supervisor, connectors)
    result = run_cli(["-c", str(path), "validate"])
    assert result.exit_code == 2
    assert expected in result.stderr, result.stderr


def test_a_good_convention_is_valid_shown_and_its_secret_file_is_relative_to_the_config(
    run_cli, tmp_path: Path
) -> None:
    key_file(tmp_path / "convention.key")
    convention = {
        "listen": "10.0.0.5:1900",
        "secret_file": "convention.key",
        "heartbeat": {"interval": "2s", "timeout": "8s"},
    }
    path = write(
        tmp_path,
        {"convention": convention},
        [SYNTHETIC, {**PLACED, "placement": {"capability": "zone", "value": "eu-1"}}],
    )
    assert run_cli(["-c", str(path), "validate"]).exit_code == 0
    shown = yaml.safe_load(run_cli(["-c", str(path), "config"]).stdout)
    assert shown["supervisor"]["convention"]["secret_file"] == str(tmp_path / "convention.key")
    assert "kkkkkkkk" not in run_cli(["-c", str(path), "config"]).stdout
    config = load_config(path)
    settings = convention_settings(config)
    assert settings is not None and settings.leader == "10.0.0.5:1900"
    assert (settings.interval, settings.timeout, settings.grace) == (2.0, 8.0, 3.0)
    assert settings.wants() == {"load": Requirement("zone", "eu-1")}
    options = system_options(config)
    assert options["listen"] == Endpoint("10.0.0.5", 1900) and options["key"] == b"k" * 40


def test_local_mode_is_untouched_by_the_convention_code(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, None, [SYNTHETIC]))
    assert convention_settings(config) is None and system_options(config) == {}


@pytest.mark.parametrize(
    ("mode", "content", "expected"),
    [
        (0o644, "k" * 40, "other users may access it"),
        (0o600, "short", "a key needs at least 32"),
        (None, "", "cannot be read"),
    ],
)
def test_an_unusable_secret_file_is_a_config_error_naming_the_key_not_the_secret(
    run_cli, tmp_path: Path, mode: int | None, content: str, expected: str
) -> None:
    if mode is not None:
        key_file(tmp_path / "convention.key", content, mode)
    path = write(
        tmp_path, {"convention": {"listen": "127.0.0.1:1", "secret_file": "convention.key"}}, [SYNTHETIC]
    )
    with pytest.raises(ConfigError) as raised:
        system_options(load_config(path))
    assert raised.value.key == "supervisor.convention.secret_file" and expected in str(raised.value)
    result = run_cli(["-c", str(path), "describe"])
    assert result.exit_code == 2
    assert "supervisor.convention.secret_file" in result.stderr and expected in result.stderr
    assert "kkkkkkkk" not in result.stderr


def test_the_schema_documents_the_new_keys(run_cli) -> None:
    schema = run_cli(["schema"]).stdout
    for key in ("secret_file", "placement_grace", "heartbeat", "placement", "capability"):
        assert key in schema
