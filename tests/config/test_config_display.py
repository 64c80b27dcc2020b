"""`servo-actors config`: the effective configuration, secrets masked, and loadable again."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from servo_actors.config import effective_config, load_config
from servo_actors.connectors.registry import connector_settings_problems, effective_settings
from servo_actors.logs import MASK

FILE_TOKEN = "file-token-0123456789"
ENV_TOKEN = "env-token-9876543210"
FILE_CONTENT_TOKEN = "token-file-content-5555"
CONNECTOR_SECRET = "connector-api-token-4444"
RAW_PASSWORD = "raw-password-3333"


def test_durations_show_as_strings_where_exact(write_config) -> None:
    path = write_config(
        "settings: {progress_interval: 1m30s, backoff: {min: 0.0001}}\n"
        "supervisor: {shutdown_timeout: 250ms}\n"
        "connectors: [{name: a, type: 'servo_actors.connectors.base:Connector', shutdown_timeout: 2}]\n"
    )
    data = effective_config(
        load_config(path, env={}, connector_check=connector_settings_problems),
        connector_settings=effective_settings,
    )
    assert data["settings"]["progress_interval"] == "1m30s"
    assert data["settings"]["backoff"]["min"] == 0.0001  # no exact short form: stays seconds
    assert data["settings"]["timeouts"] == {"connect": "5s", "read": "1m"}
    assert data["supervisor"]["shutdown_timeout"] == "250ms"
    assert data["connectors"][0]["shutdown_timeout"] == "2s"


def test_output_loads_back_to_the_same_config(write_config, tmp_path: Path, run_cli, test_plugins) -> None:
    path = write_config(
        "optimizer: {id: example.com/web, base_url: 'http://127.0.0.1:8085/'}\n"
        "settings: {backoff: {min: 10ms, max: 1h, max_time: 0.5}}\n"
        "connectors:\n"
        "  - {name: s, type: sa-strict, config: {url: 'http://127.0.0.1:1', limits: {period: 2.5}}}\n"
        "  - {name: raw, type: 'servo_actors.connectors.base:Connector', config: {list: [1, {a: b}]}}\n"
    )
    for output_format, parse in (("yaml", yaml.safe_load), ("json", json.loads)):
        result = run_cli(["-c", str(path), "config", "--format", output_format])
        assert result.exit_code == 0, result.stderr
        shown = tmp_path / f"shown-{output_format}.yaml"
        shown.write_text(yaml.safe_dump(parse(result.stdout)))
        again = load_config(shown, env={}, connector_check=connector_settings_problems)
        assert again.model_dump(exclude={"connectors"}) == load_config(
            path, env={}, connector_check=connector_settings_problems
        ).model_dump(exclude={"connectors"})
        # Connector configs are shown as their models see them (defaults filled in): showing is stable.
        assert effective_config(again, connector_settings=effective_settings) == effective_config(
            load_config(path, env={}, connector_check=connector_settings_problems),
            connector_settings=effective_settings,
        )
    assert yaml.safe_load(run_cli(["-c", str(path), "config"]).stdout)["connectors"][0]["config"] == {
        "url": "http://127.0.0.1:1",
        "api_token": None,
        "limits": {"count": 1, "period": "2s500ms"},
    }


def test_secrets_never_appear_in_config_output(write_config, tmp_path: Path, run_cli, test_plugins) -> None:
    (tmp_path / "token").write_text(FILE_CONTENT_TOKEN)
    connectors = (
        "connectors:\n"
        f"  - {{name: s, type: sa-strict, config: {{url: x, api_token: {CONNECTOR_SECRET}}}}}\n"
        f"  - {{name: raw, type: 'servo_actors.connectors.base:Connector', config: {{db: {{password: {RAW_PASSWORD}}}}}}}\n"
    )
    with_token = write_config(
        f"optimizer: {{id: example.com/web, token: {FILE_TOKEN}}}\n" + connectors, "a.yaml"
    )
    with_file = write_config("optimizer: {id: example.com/web, token_file: token}\n" + connectors, "b.yaml")
    runs = [
        (with_token, {}, "**********"),
        (with_token, {"OPSANI_TOKEN": ENV_TOKEN}, "**********"),
        (with_file, {}, None),
    ]
    for path, env, token_shown in runs:
        for output_format in ("yaml", "json"):
            result = run_cli(["-l", "debug", "-c", str(path), "config", "--format", output_format], env=env)
            assert result.exit_code == 0, result.stderr
            everything = result.stdout + result.stderr
            for secret in (FILE_TOKEN, ENV_TOKEN, FILE_CONTENT_TOKEN, CONNECTOR_SECRET, RAW_PASSWORD):
                assert secret not in everything
            data = yaml.safe_load(result.stdout)  # JSON is YAML too
            assert data["optimizer"]["token"] == token_shown
            assert data["connectors"][0]["config"]["api_token"] == MASK
            assert data["connectors"][1]["config"]["db"]["password"] == MASK
    shown_path = yaml.safe_load(run_cli(["-c", str(with_file), "config"]).stdout)["optimizer"]["token_file"]
    assert shown_path == str(tmp_path / "token")
