"""The CLI in-process (click's CliRunner on the real ``cli`` group): help, the error policy,
version, schema, connectors, and the output helpers other command modules use."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import yaml

from servo_actors import __version__
from servo_actors.cli import ServoGroup, cli
from servo_actors.cli.context import color_enabled, format_table, styled
from servo_actors.config import ServoConfig, effective_config, load_apps
from servo_actors.connectors.registry import (
    BUILTIN_CONNECTORS,
    connector_settings_problems,
    effective_settings,
)
from servo_actors.errors import (
    ConfigError,
    ConnectorError,
    OptimizerError,
    ProtocolError,
    ServoError,
    SupervisorError,
    UsageError,
)

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "config").glob("*.yaml"))


def _command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        yield (*prefix, name)
        if isinstance(command, click.Group):
            yield from _command_paths(command, (*prefix, name))


# Every command, including those other modules register later: all must show help without a config.
COMMANDS = list(_command_paths(cli))


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_command_has_help_without_a_config(path, run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli([*path, "--help"], env={"SERVO_CONFIG": str(tmp_path / "missing.yaml")})
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(f"Usage: {cli.name or 'cli'} {' '.join(path)}")
    assert result.stderr == ""


def test_the_documented_commands_are_registered() -> None:
    assert {"config", "validate", "schema", "connectors", "version", "optimizer"} <= set(cli.commands)


def test_version_and_dash_dash_version(run_cli) -> None:
    assert run_cli(["version"]).stdout == f"servo-actors {__version__}\n"
    assert run_cli(["--version"]).stdout == f"servo-actors {__version__}\n"


def test_unknown_command_and_bad_log_level_are_usage_errors(run_cli) -> None:
    assert run_cli(["frobnicate"]).exit_code == 2
    result = run_cli(["version"], env={"SERVO_LOG_LEVEL": "loud"})
    assert result.exit_code == 2
    assert "'loud' is not one of" in result.stderr


def test_validate_ok_line(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "servo.yaml"
    path.write_text("connectors: [{name: a, type: 'servo_actors.connectors.base:Connector'}]\n")
    result = run_cli(["--config", str(path), "validate"])
    assert (result.exit_code, result.stdout) == (
        0,
        f"OK: {path} is valid (1 connector(s): a; no optimizer)\n",
    )
    result = run_cli(["validate"], env={"SERVO_CONFIG": str(path), "OPSANI_OPTIMIZER": "example.com/web"})
    assert result.stdout == f"OK: {path} is valid (1 connector(s): a; optimizer example.com/web)\n"


def test_validate_warns_of_a_kubeconfig_that_does_not_exist(run_cli, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    deployment = {"name": "web", "containers": [{"name": "main", "cpu": {"min": "250m", "max": 2}}]}
    config = {
        "connectors": [
            {
                "name": "k8s",
                "type": "kubernetes",
                "config": {"kubeconfig": str(missing), "deployments": [deployment]},
            }
        ]
    }
    path = tmp_path / "servo.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run_cli(["--config", str(path), "validate"])
    # Still a valid file (exit 0), and the warning is check's own sentence naming the connector.
    assert result.exit_code == 0
    assert result.stdout == f"OK: {path} is valid (1 connector(s): k8s; no optimizer), with 1 warning\n"
    assert result.stderr == (
        f"warning: connector 'k8s': kubeconfig {missing} does not exist (check and run will fail on it)\n"
    )
    # A kubeconfig that is there: no warning.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "current-context": "here",
                "contexts": [{"name": "here", "context": {"cluster": "c", "user": "u"}}],
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )
    config["connectors"][0]["config"]["kubeconfig"] = str(kubeconfig)
    path.write_text(yaml.safe_dump(config))
    result = run_cli(["--config", str(path), "validate"])
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == f"OK: {path} is valid (1 connector(s): k8s; no optimizer)\n"


def _policy_group(error: BaseException) -> click.Group:
    """The real main group's options and callback, with one command that raises ``error``."""
    group = ServoGroup(name="servo-actors", params=cli.params, callback=cli.callback)

    @group.command("fail")
    def fail() -> None:
        raise error

    return group


@pytest.mark.parametrize(
    ("error", "exit_code"),
    [
        (ConfigError("unknown key", source="servo.yaml", key="settings.x"), 2),
        (UsageError("no setting web.cpux"), 2),
        (OptimizerError("http://127.0.0.1:1/servo: 401 Unauthorized"), 1),
        (ConnectorError("connector 'prom' failed its checks"), 1),
        (SupervisorError("restart intensity exceeded"), 1),
        (ProtocolError("not a string", field="cmd"), 1),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else str(value),
)
def test_servo_errors_print_error_line_and_exit_code(error: ServoError, exit_code: int) -> None:
    from click.testing import CliRunner

    result = CliRunner().invoke(_policy_group(error), ["fail"], catch_exceptions=False)
    assert result.exit_code == exit_code
    assert result.output == f"error: {error}\n"


def test_multi_line_errors_prefix_every_line() -> None:
    from click.testing import CliRunner

    error = ConfigError("servo.yaml: a: wrong\nservo.yaml: b: wrong too")
    result = CliRunner().invoke(_policy_group(error), ["fail"], catch_exceptions=False)
    assert result.output == "error: servo.yaml: a: wrong\nerror: servo.yaml: b: wrong too\n"


def test_unexpected_exceptions_are_one_line_unless_debug() -> None:
    from click.testing import CliRunner

    group = _policy_group(KeyError("gone"))
    result = CliRunner().invoke(group, ["fail"], catch_exceptions=False)
    assert (result.exit_code, result.output) == (
        1,
        "internal error: KeyError: 'gone' (run with -l debug for the traceback)\n",
    )
    result = CliRunner().invoke(group, ["-l", "debug", "fail"], catch_exceptions=False)
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.output
    assert result.output.endswith("internal error: KeyError: 'gone'\n")


def test_schema_is_the_config_model_schema(run_cli) -> None:
    result = run_cli(["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert "several documents" in schema.pop("$comment")  # the multi-document form (issue 36)
    assert schema == json.loads(json.dumps(ServoConfig.model_json_schema()))
    assert set(schema["properties"]) == set(ServoConfig.model_fields)
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_schema_accepts_the_examples_and_their_effective_config(path: Path, run_cli) -> None:
    jsonschema = pytest.importorskip(
        "jsonschema", reason="jsonschema checks the schema; pip install jsonschema"
    )
    schema = json.loads(run_cli(["schema"]).stdout)
    for document in yaml.safe_load_all(path.read_text()):  # the schema is one document's
        jsonschema.validate(document, schema)
    for config in load_apps(path, env={}, connector_check=connector_settings_problems):
        jsonschema.validate(effective_config(config, connector_settings=effective_settings), schema)


def test_schema_rejects_what_the_loader_rejects(run_cli) -> None:
    jsonschema = pytest.importorskip(
        "jsonschema", reason="jsonschema checks the schema; pip install jsonschema"
    )
    schema = json.loads(run_cli(["schema"]).stdout)
    for bad in ({"settings": {"backoff": {"min": "fast"}}}, {"bogus": 1}, {"supervisor": {"strategy": "x"}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    jsonschema.validate({"settings": {"progress_interval": "1m30s", "backoff": {"min": 0.5}}}, schema)


def test_connectors_lists_built_ins_and_entry_points(run_cli, test_plugins) -> None:
    result = run_cli(["connectors"])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["TYPE", "ORIGIN", "IMPORT", "PATH", "STATUS"]
    for name, target in BUILTIN_CONNECTORS.items():
        assert any(line.startswith(f"{name} ") and "built-in" in line and target in line for line in lines)
    rows = {(row["name"], row["origin"]): row for row in json.loads(run_cli(["connectors", "--json"]).stdout)}
    plugin = "entry point (sa-test-connectors)"
    assert rows[("sa-strict", plugin)]["status"] == "ok"
    assert rows[("sa-strict", plugin)]["import_path"] == "sa_test_connectors:StrictConnector"
    assert rows[("sa-broken", plugin)]["status"].endswith("this plugin is broken on purpose")
    assert rows[("prometheus", plugin)]["status"] == "ignored: a built-in type has this name"


def test_color_only_on_a_terminal_and_never_with_no_color(monkeypatch) -> None:
    master, replica = os.openpty()
    try:
        with open(replica, "w", closefd=True) as terminal:
            assert color_enabled(terminal)
            assert styled("ok", terminal, fg="green") == click.style("ok", fg="green")
            monkeypatch.setenv("NO_COLOR", "1")
            assert not color_enabled(terminal)
            assert styled("ok", terminal, fg="green") == "ok"
            monkeypatch.setenv("NO_COLOR", "")  # empty means unset (no-color.org)
            assert color_enabled(terminal)
    finally:
        os.close(master)
    with open(os.devnull, "w") as not_a_terminal:
        assert not color_enabled(not_a_terminal)


def test_format_table_aligns_columns() -> None:
    table = format_table(["name", "status"], [["prometheus", "ok"], ["k8s", None], ["a", 3]])
    assert table.splitlines() == [
        "name        status",
        "----------  ------",
        "prometheus  ok",
        "k8s         -",
        "a           3",
    ]
