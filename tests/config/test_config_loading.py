"""load_config: where the file is found, what the environment overrides, how problems are reported."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from servo_actors.config import ServoConfig, config_path, load_config, read_token, require_optimizer
from servo_actors.connectors.registry import connector_settings_problems, validate_connector_config
from servo_actors.errors import ConfigError

MINIMAL = "optimizer: {id: example.com/web}\n"


def test_path_comes_from_argument_then_env_then_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert config_path(None, {}) == Path("servo.yaml")
    assert config_path(None, {"SERVO_CONFIG": "/etc/servo.yaml"}) == Path("/etc/servo.yaml")
    assert config_path("mine.yaml", {"SERVO_CONFIG": "/etc/servo.yaml"}) == Path("mine.yaml")


def test_loads_from_servo_config_env_and_from_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "other.yaml").write_text("servo_uid: from-env-path\n")
    (tmp_path / "servo.yaml").write_text("servo_uid: from-cwd\n")
    monkeypatch.chdir(tmp_path)
    assert (
        load_config(
            env={"SERVO_CONFIG": str(tmp_path / "other.yaml")}, connector_check=connector_settings_problems
        ).servo_uid
        == "from-env-path"
    )
    config = load_config(env={}, connector_check=connector_settings_problems)
    assert config.servo_uid == "from-cwd"
    assert config.source == "servo.yaml"


def test_empty_file_gives_every_default(write_config) -> None:
    config = load_config(write_config("# nothing yet\n"), env={}, connector_check=connector_settings_problems)
    assert config.model_dump() == ServoConfig().model_dump()
    assert config.optimizer is None
    assert config.settings.backoff.max == 60.0


def test_durations_are_seconds(write_config) -> None:
    config = load_config(
        write_config("settings: {progress_interval: 250ms, backoff: {max_time: 1h30m}}"),
        env={},
        connector_check=connector_settings_problems,
    )
    assert config.settings.progress_interval == 0.25
    assert config.settings.backoff.max_time == 5400.0


def test_env_optimizer_needs_no_section_in_the_file(write_config) -> None:
    env = {"OPSANI_OPTIMIZER": "example.com/api", "OPSANI_TOKEN": "tok-from-env-123", "SERVO_UID": "uid-1"}
    config = load_config(
        write_config("connectors: []\n"), env=env, connector_check=connector_settings_problems
    )
    optimizer = require_optimizer(config)
    assert optimizer.id == "example.com/api"
    assert read_token(optimizer) == SecretStr("tok-from-env-123")
    assert config.servo_uid == "uid-1"
    assert optimizer.servo_url == "https://api.opsani.com/accounts/example.com/applications/api/servo"


def test_env_overrides_every_optimizer_key(write_config) -> None:
    path = write_config("optimizer: {id: example.com/web, base_url: 'http://127.0.0.1:1'}\nservo_uid: file\n")
    env = {
        "OPSANI_OPTIMIZER": "example.com/api",
        "OPSANI_BASE_URL": "http://127.0.0.1:8085/",
        "OPSANI_URL": "http://127.0.0.1:9000/custom/",
        "SERVO_UID": "env",
    }
    config = load_config(path, env=env, connector_check=connector_settings_problems)
    assert config.optimizer.id == "example.com/api"
    assert config.optimizer.base_url == "http://127.0.0.1:8085"
    assert config.optimizer.servo_url == "http://127.0.0.1:9000/custom/servo"
    assert config.servo_uid == "env"


def test_env_token_replaces_token_file_from_the_file(write_config) -> None:
    path = write_config("optimizer: {id: example.com/web, token_file: /nonexistent/token}\n")
    config = load_config(
        path, env={"OPSANI_TOKEN": "tok-from-env-123"}, connector_check=connector_settings_problems
    )
    assert config.optimizer.token_file is None
    assert read_token(config.optimizer).get_secret_value() == "tok-from-env-123"


def test_env_token_file_replaces_token_from_the_file(write_config, tmp_path: Path) -> None:
    (tmp_path / "env-token").write_text("  tok-in-a-file-456\n\n")
    path = write_config("optimizer: {id: example.com/web, token: tok-in-yaml-789}\n")
    config = load_config(
        path,
        env={"OPSANI_TOKEN_FILE": str(tmp_path / "env-token")},
        connector_check=connector_settings_problems,
    )
    assert config.optimizer.token is None
    assert read_token(config.optimizer).get_secret_value() == "tok-in-a-file-456"


def test_empty_env_variables_count_as_unset(write_config) -> None:
    path = write_config("optimizer: {id: example.com/web, token: tok-in-yaml-789}\n")
    config = load_config(
        path,
        env={"OPSANI_OPTIMIZER": "", "OPSANI_TOKEN": "  ", "OPSANI_TOKEN_FILE": ""},
        connector_check=connector_settings_problems,
    )
    assert config.optimizer.id == "example.com/web"
    assert read_token(config.optimizer).get_secret_value() == "tok-in-yaml-789"


def test_env_without_an_optimizer_id_configures_no_optimizer(write_config) -> None:
    config = load_config(
        write_config("servo_uid: x\n"),
        env={"OPSANI_TOKEN": "tok-from-env-123"},
        connector_check=connector_settings_problems,
    )
    assert config.optimizer is None
    with pytest.raises(ConfigError) as caught:
        require_optimizer(config)
    assert str(caught.value).startswith(f"{config.source}: optimizer: no optimizer is configured")
    assert "OPSANI_OPTIMIZER" in str(caught.value)


def test_relative_token_file_is_relative_to_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "token").write_text("tok-next-to-config\n")
    (conf / "servo.yaml").write_text("optimizer: {id: example.com/web, token_file: token}\n")
    monkeypatch.chdir(tmp_path)
    config = load_config("conf/servo.yaml", env={}, connector_check=connector_settings_problems)
    assert config.optimizer.token_file == str(Path("conf") / "token")
    assert read_token(config.optimizer).get_secret_value() == "tok-next-to-config"


def test_unreadable_token_file_names_key_and_path_never_content(tmp_path: Path, write_config) -> None:
    token = tmp_path / "token"
    token.write_bytes(b"\xffsecret-bytes\xfe")
    config = load_config(
        write_config(f"optimizer: {{id: example.com/web, token_file: '{token}'}}\n"),
        env={},
        connector_check=connector_settings_problems,
    )
    with pytest.raises(ConfigError) as caught:
        read_token(config.optimizer)
    message = str(caught.value)
    assert message.startswith(f"{config.source}: optimizer.token_file: '{token}' is not UTF-8 text")
    assert "secret" not in message.replace(str(tmp_path), "") and "\\xff" not in message


def test_token_file_error_names_the_env_variable(write_config) -> None:
    config = load_config(
        write_config(MINIMAL),
        env={"OPSANI_TOKEN_FILE": "/nonexistent/opsani-token"},
        connector_check=connector_settings_problems,
    )
    with pytest.raises(ConfigError) as caught:
        read_token(config.optimizer)
    assert str(caught.value) == (
        "env OPSANI_TOKEN_FILE: optimizer.token_file: cannot read '/nonexistent/opsani-token': No such file or directory"
    )


def test_no_token_at_all_is_none(write_config) -> None:
    assert (
        read_token(
            load_config(write_config(MINIMAL), env={}, connector_check=connector_settings_problems).optimizer
        )
        is None
    )


def test_one_error_lists_every_problem(write_config) -> None:
    path = write_config("optimizer: {id: ab/web}\nsupervisor: {period: fast, strategy: x}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={"SERVO_UID": "u"}, connector_check=connector_settings_problems)
    error = caught.value
    assert [(p.key, p.source) for p in error.problems] == [
        ("optimizer.id", str(path)),
        ("supervisor.strategy", str(path)),
        ("supervisor.period", str(path)),
    ]
    assert str(error).splitlines() == [str(problem) for problem in error.problems]
    assert error.exit_code == 2


def test_connector_checks_run_even_when_other_keys_are_wrong(write_config) -> None:
    path = write_config("bogus: 1\nconnectors: [{name: a, type: nope.missing:Thing}]\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={}, connector_check=connector_settings_problems)
    assert sorted(p.key for p in caught.value.problems) == ["bogus", "connectors[0].type"]


def test_without_a_connector_check_nothing_is_imported(write_config) -> None:
    config = load_config(write_config("connectors: [{name: a, type: nope.missing:Thing}]\n"), env={})
    assert config.connectors[0].type == "nope.missing:Thing"


def test_connector_config_is_validated_by_its_model(write_config, test_plugins) -> None:
    import sa_test_connectors

    path = write_config(
        "connectors: [{name: s, type: sa-strict, config: {url: 'http://127.0.0.1:1', limits: {period: 2m}}}]"
    )
    config = load_config(path, env={}, connector_check=connector_settings_problems)
    spec = config.connectors[0]
    assert spec.config == {"url": "http://127.0.0.1:1", "limits": {"period": "2m"}}  # raw, as written
    validated = validate_connector_config(sa_test_connectors.StrictConnector, spec.config)
    assert isinstance(validated, sa_test_connectors.StrictConfig)
    assert validated.limits.period == 120.0


def test_a_connector_without_model_gets_a_dict_copy() -> None:
    from servo_actors.connectors import Connector

    raw = {"anything": [1, 2]}
    validated = validate_connector_config(Connector, raw)
    assert validated == raw and validated is not raw


def test_yaml_error_names_line_and_column(write_config) -> None:
    path = write_config("optimizer:\n  id: example.com/web\n  base_url: [unclosed\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={}, connector_check=connector_settings_problems)
    assert str(caught.value).startswith(f"{path}: line 4, column 1: ")


def test_duplicate_keys_are_refused_at_any_depth(write_config) -> None:
    path = write_config("settings:\n  timeouts: {connect: 1s}\n  timeouts: {read: 1s}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={}, connector_check=connector_settings_problems)
    assert (
        str(caught.value) == f"{path}: line 3, column 3: duplicate key 'timeouts' (first written at line 2)"
    )


def test_a_directory_is_not_a_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path, env={}, connector_check=connector_settings_problems)


def test_config_alone_imports_no_connector_code(write_config) -> None:
    """Without a connector check, config keeps the type name and the raw settings: nothing imported."""
    from servo_actors.config import load_config as load_config_only

    path = write_config("bogus: 1\nconnectors: [{name: a, type: nope.missing:Thing, config: {x: 1}}]\n")
    with pytest.raises(ConfigError) as caught:
        load_config_only(path, env={})
    assert [p.key for p in caught.value.problems] == ["bogus"]
    config = load_config_only(
        write_config("connectors: [{name: a, type: nope.missing:Thing, config: {x: 1}}]\n"), env={}
    )
    assert (config.connectors[0].type, config.connectors[0].config) == ("nope.missing:Thing", {"x": 1})
