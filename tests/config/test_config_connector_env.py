"""SERVO_<CONNECTOR>_<FIELD> overrides, the .env file beside servo.yaml, and ``config --sources``."""

from __future__ import annotations

import json

import pytest

from servo_actors.config import effective_config, load_config
from servo_actors.connectors.registry import connector_settings_problems, effective_settings
from servo_actors.errors import ConfigError

CONFIG = """\
optimizer:
  id: example.com/app
connectors:
  - name: prom-main
    type: prometheus
    config:
      base_url: http://127.0.0.1:9090
      timeout: 10s
      metrics:
        - {name: rps, query: "sum(rate(x[1m]))"}
  - name: prom
    type: prometheus
    config:
      metrics:
        - {name: p50, query: "q"}
"""


def test_a_variable_fills_a_field_the_file_leaves_out(write_config) -> None:
    path = write_config(CONFIG)
    config = load_config(
        path, env={"SERVO_PROM_MAIN_RETRIES": "3"}, connector_check=connector_settings_problems
    )
    shown = effective_config(config, connector_settings=effective_settings)["connectors"][0]["config"]
    assert shown["retries"] == 3
    assert (
        config.provenance.source_of(("connectors", 0, "config", "retries")) == "env SERVO_PROM_MAIN_RETRIES"
    )


def test_a_variable_wins_over_the_files_value(write_config) -> None:
    path = write_config(CONFIG)
    config = load_config(
        path,
        env={"SERVO_PROM_MAIN_TIMEOUT": "30s", "SERVO_PROM_MAIN_BASE_URL": "http://p:9091"},
        connector_check=connector_settings_problems,
    )
    shown = effective_config(config, connector_settings=effective_settings)["connectors"][0]["config"]
    assert (shown["timeout"], shown["base_url"]) == ("30s", "http://p:9091")
    assert (
        config.provenance.source_of(("connectors", 0, "config", "timeout")) == "env SERVO_PROM_MAIN_TIMEOUT"
    )


def test_the_longest_connector_name_matches(write_config) -> None:
    # SERVO_PROM_MAIN_TIMEOUT could be prom's "main_timeout": the longer name, prom-main, wins.
    path = write_config(CONFIG)
    config = load_config(
        path,
        env={"SERVO_PROM_MAIN_TIMEOUT": "30s", "SERVO_PROM_TIMEOUT": "2s"},
        connector_check=connector_settings_problems,
    )
    shown = effective_config(config, connector_settings=effective_settings)["connectors"]
    assert (shown[0]["config"]["timeout"], shown[1]["config"]["timeout"]) == ("30s", "2s")


def test_nested_fields_with_double_underscores_and_list_items(write_config) -> None:
    path = write_config(CONFIG)
    env = {"SERVO_PROM_METRICS__0__STEP": "5", "SERVO_PROM_METRICS__0__ABSENT": "zero"}
    metric = effective_config(
        load_config(path, env=env, connector_check=connector_settings_problems),
        connector_settings=effective_settings,
    )["connectors"][1]["config"]["metrics"][0]
    assert (metric["step"], metric["absent"]) == ("5s", "zero")


def test_values_are_yaml_so_lists_and_mappings_can_be_given_whole(write_config) -> None:
    path = write_config(CONFIG)
    env = {"SERVO_PROM_METRICS": '[{name: a, query: up}, {"name": "b", "query": "up"}]'}
    metrics = effective_config(
        load_config(path, env=env, connector_check=connector_settings_problems),
        connector_settings=effective_settings,
    )["connectors"][1]["config"]["metrics"]
    assert [m["name"] for m in metrics] == ["a", "b"]


def test_a_bad_value_names_the_variable(write_config) -> None:
    path = write_config(CONFIG)
    with pytest.raises(ConfigError) as error:
        load_config(path, env={"SERVO_PROM_RETRIES": "many"}, connector_check=connector_settings_problems)
    assert str(error.value).startswith("env SERVO_PROM_RETRIES: connectors[1].config.retries:")
    with pytest.raises(
        ConfigError, match=r"env SERVO_PROM_METRICS__5__STEP: metrics has 1 item\(s\): no index 5"
    ):
        load_config(
            path, env={"SERVO_PROM_METRICS__5__STEP": "5"}, connector_check=connector_settings_problems
        )
    with pytest.raises(ConfigError, match="env SERVO_PROM_RETRIES: the value is not a YAML value"):
        load_config(
            path, env={"SERVO_PROM_RETRIES": "[unclosed"}, connector_check=connector_settings_problems
        )


def test_the_servos_own_variables_and_unknown_connectors_are_left_alone(write_config) -> None:
    path = write_config(CONFIG.replace("name: prom\n", "name: log\n"))
    config = load_config(
        path,
        env={"SERVO_LOG_LEVEL": "debug", "SERVO_NOSUCH_X": "1", "SERVO_LOG_TIMEOUT": "3s"},
        connector_check=connector_settings_problems,
    )
    shown = effective_config(config, connector_settings=effective_settings)["connectors"][1]["config"]
    assert "level" not in shown and shown["timeout"] == "3s"


def test_dotenv_beside_the_file_under_the_environment(write_config, tmp_path) -> None:
    path = write_config(CONFIG)
    (tmp_path / ".env").write_text(
        "# servox users keep these here\nOPSANI_TOKEN=tok-from-dotenv-1234\nexport SERVO_PROM_TIMEOUT=7s\n"
        "SERVO_PROM_RETRIES=2\n",
        encoding="utf-8",
    )
    config = load_config(path, env={"SERVO_PROM_RETRIES": "4"}, connector_check=connector_settings_problems)
    shown = effective_config(config, connector_settings=effective_settings)["connectors"][1]["config"]
    assert (shown["timeout"], shown["retries"]) == ("7s", 4)
    assert config.optimizer is not None and config.optimizer.token is not None
    assert config.optimizer.token.get_secret_value() == "tok-from-dotenv-1234"
    dotenv = str(tmp_path / ".env")
    assert (
        config.provenance.source_of(("connectors", 1, "config", "timeout")) == f"{dotenv} SERVO_PROM_TIMEOUT"
    )
    assert config.provenance.source_of(("connectors", 1, "config", "retries")) == "env SERVO_PROM_RETRIES"
    assert config.provenance.source_of(("optimizer", "token")) == f"{dotenv} OPSANI_TOKEN"


def test_a_dotenv_in_the_working_directory_is_not_read(write_config, tmp_path, monkeypatch) -> None:
    path = write_config(CONFIG)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    (elsewhere / ".env").write_text("SERVO_PROM_RETRIES=9\n", encoding="utf-8")
    monkeypatch.chdir(elsewhere)
    assert (
        effective_config(
            load_config(path, env={}, connector_check=connector_settings_problems),
            connector_settings=effective_settings,
        )["connectors"][1]["config"]["retries"]
        == 1
    )


def test_config_sources_names_every_origin_and_masks_secrets(run_cli, write_config, tmp_path) -> None:
    path = write_config(CONFIG)
    (tmp_path / ".env").write_text("OPSANI_TOKEN=tok-hidden-5678\n", encoding="utf-8")
    result = run_cli(
        ["-c", str(path), "config", "--sources", "--format", "json"], env={"SERVO_PROM_TIMEOUT": "3s"}
    )
    assert result.exit_code == 0, result.stderr
    assert "tok-hidden-5678" not in result.output
    rows = {row["key"]: (row["value"], row["source"]) for row in json.loads(result.output)}
    assert rows["optimizer.id"] == ("example.com/app", str(path))
    assert rows["optimizer.token"] == ("**********", f"{tmp_path / '.env'} OPSANI_TOKEN")
    assert rows["connectors[1].config.timeout"] == ("3s", "env SERVO_PROM_TIMEOUT")
    assert rows["connectors[0].config.timeout"] == ("10s", str(path))
    assert rows["connectors[1].config.retries"] == (1, "default")
    table = run_cli(["-c", str(path), "config", "--sources"], env={"SERVO_PROM_TIMEOUT": "3s"}).output
    assert table.splitlines()[0].split() == ["KEY", "VALUE", "SOURCE"]
    assert "tok-hidden-5678" not in table


def test_a_secret_looking_field_from_a_variable_is_masked(run_cli, write_config) -> None:
    text = CONFIG + "  - name: load\n    type: loadgen\n    config: {url: 'http://127.0.0.1:1/'}\n"
    path = write_config(text)
    secret = "Bearer sekrit-token-4242"
    result = run_cli(
        ["-c", str(path), "config", "--sources"], env={"SERVO_LOAD_HEADERS__AUTHORIZATION": secret}
    )
    assert result.exit_code == 0, result.stderr
    assert "sekrit" not in result.output
    assert "env SERVO_LOAD_HEADERS__AUTHORIZATION" in result.output


def test_a_bad_value_from_dotenv_names_the_file(write_config, tmp_path) -> None:
    path = write_config(CONFIG)
    (tmp_path / ".env").write_text("SERVO_PROM_RETRIES=[unclosed\n", encoding="utf-8")
    with pytest.raises(
        ConfigError, match=rf"^{tmp_path / '.env'} SERVO_PROM_RETRIES: the value is not a YAML value"
    ):
        load_config(path, env={}, connector_check=connector_settings_problems)
