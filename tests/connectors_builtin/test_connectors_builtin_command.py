"""``command``: real shell commands in real process groups; no mocks."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError
from waiting import wait_until

from servo_actors.connectors.base import ConnectorFailure, Control
from servo_actors.connectors.command import CommandConfig, CommandConnector, setting_env_name

PY = shlex.quote(sys.executable)
DESCRIPTION = {
    "components": {
        "web": {"settings": {"replicas": {"type": "range", "min": 1, "max": 8, "step": 1, "value": 2}}}
    },
    "metrics": {"p99_latency": {"unit": "ms"}, "throughput": {"unit": "rps"}},
}
DUMP_ENV = (
    f'{PY} -c \'import json, os; json.dump({{k: v for k, v in os.environ.items() if k.startswith("SERVO_")}}, '
    f'open(os.environ["OUT"], "w"))\''
)


def prints(document: object) -> str:
    """A shell command printing ``document`` as JSON (quoted safely for the shell)."""
    return f"printf '%s\\n' {shlex.quote(json.dumps(document))}"


def connector(**config: object) -> CommandConnector:
    return CommandConnector("app", config)


def gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (a zombie nobody reaped counts as gone: it runs no code)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


GONE_BOUND = 5.0
"""Generous bound until a killed process is gone: only a survivor (or a hang) breaks it."""


# --- success ----------------------------------------------------------------------------------


def test_describe_measure_adjust_check_succeed(progress, tmp_path):
    app = connector(
        describe=prints(DESCRIPTION),
        measure=prints(
            {
                "metrics": {"p99_latency": {"value": 12.5}, "throughput": {"unit": "rps", "value": 300}},
                "annotations": {"note": "ok"},
            }
        ),
        adjust=DUMP_ENV,
        check={"always": "true", "state-dir": f"test -d {shlex.quote(str(tmp_path))}"},
        env={"OUT": str(tmp_path / "env.json")},
        timeout="10s",
    )
    assert app.describe() == DESCRIPTION

    measured = app.measure(["p99_latency"], Control(duration=1), progress)
    # Only the requested metric, its missing unit taken from describe.
    assert measured == {
        "metrics": {"p99_latency": {"unit": "ms", "value": 12.5}},
        "annotations": {"note": "ok"},
    }
    assert progress.percents[0] == 0 and progress.percents[-1] == 100

    adjusted = app.adjust({"web": {"settings": {"replicas": {"value": 3}}}}, Control(), progress)
    # No output: the requested value is echoed, with the bounds describe gave.
    assert adjusted == {
        "web": {
            "settings": {"replicas": {**DESCRIPTION["components"]["web"]["settings"]["replicas"], "value": 3}}
        }
    }
    assert app.check() == [
        {"name": "always", "success": True, "message": "exited with status 0"},
        {"name": "state-dir", "success": True, "message": "exited with status 0"},
    ]


def test_measure_simple_form_gets_units_from_describe(progress):
    app = connector(
        describe=prints(DESCRIPTION), measure=prints({"p99_latency": 40, "throughput": 12.5, "x": 1})
    )
    assert app.measure(["p99_latency", "throughput"], Control(), progress)["metrics"] == {
        "p99_latency": {"unit": "ms", "value": 40},
        "throughput": {"unit": "rps", "value": 12.5},
    }


def test_measure_passes_metrics_and_control_in_the_environment(progress, tmp_path):
    out = tmp_path / "env.json"
    app = connector(measure=f"{DUMP_ENV} && echo '{{}}'", env={"OUT": str(out)})
    app.measure(["a", "b"], Control(duration=1.5, warmup=2, delay=0, userdata={"slo": ["x < 1"]}), progress)
    env = json.loads(out.read_text())
    assert env["SERVO_METRICS"] == "a,b"
    assert (env["SERVO_DURATION"], env["SERVO_WARMUP"], env["SERVO_DELAY"]) == ("1.5", "2", "0")
    assert env["SERVO_OPERATION"] == "measure" and env["SERVO_CONNECTOR"] == "app"
    assert json.loads(env["SERVO_CONTROL_USERDATA"]) == {"slo": ["x < 1"]}


def test_adjust_uses_the_components_the_command_prints(progress):
    in_force = {"web": {"settings": {"replicas": {"value": 4}}}}
    app = connector(adjust=prints({"components": in_force}))
    assert app.adjust({"web": {"settings": {"replicas": {"value": 3}}}}, Control(), progress) == in_force


@pytest.mark.timeout(30)
def test_measure_reports_progress_while_the_command_runs(progress):
    app = connector(measure="sleep 1.2; echo '{}'", progress_interval="200ms")
    app.measure([], Control(duration=1.2), progress)
    running = progress.percents[1:-1]
    assert len(running) >= 3
    assert running == sorted(running) and all(0 <= p <= 99 for p in running)
    assert progress.percents[-1] == 100


def test_operations_without_a_command(progress):
    app = connector()
    assert app.describe() == {"components": {}, "metrics": {}}
    assert app.measure(["x"], Control(), progress) == {"metrics": {}, "annotations": {}}
    assert app.check() == []
    with pytest.raises(ConnectorFailure) as failure:
        app.adjust({"web": {"settings": {"a": {"value": 1}}}}, Control(), progress)
    assert failure.value.status == "rejected" and "no adjust command" in str(failure.value)


# --- failures ---------------------------------------------------------------------------------


def test_non_zero_exit_names_operation_status_and_stderr_tail(progress):
    noisy = "; ".join(f"echo line{i} >&2" for i in range(30))
    app = connector(describe=f"{noisy}; echo 'disk full: /var' >&2; exit 7")
    with pytest.raises(ConnectorFailure) as failure:
        app.describe()
    message = str(failure.value)
    assert failure.value.status == "failed"
    assert "describe" in message and "status 7" in message
    assert "disk full: /var" in message and "line29" in message
    assert "line0 " not in message  # only the tail


def test_command_killed_by_a_signal_says_so():
    with pytest.raises(ConnectorFailure, match="SIGTERM"):
        connector(describe="kill -TERM $$").describe()


@pytest.mark.parametrize(
    ("operation", "stdout", "expected"),
    [
        ("describe", "{'components': ", "invalid JSON"),
        ("describe", "", "nothing"),
        ("describe", "[1, 2]", "list"),
        ("describe", '{"components": {}, "metric": {}}', "unexpected keys"),
        ("describe", '{"components": {"web": {"settings": 3}}}', '"web.settings"'),
        ("measure", '{"p99_latency": "fast"}', '"p99_latency"'),
        ("measure", '{"metrics": {"p99_latency": {"unit": "ms"}}}', 'without "value"'),
        ("measure", '{"metrics": {"p99_latency": {"value": "NaN?"}}}', "not a number"),
        ("adjust", '{"web": {"settings": {}}}', 'without "components"'),
        ("adjust", "ok, done", "invalid JSON"),
    ],
)
def test_bad_output_names_the_operation_and_the_problem(progress, operation, stdout, expected):
    app = connector(**{operation: f"printf '%s' {shlex.quote(stdout)}"})
    with pytest.raises(ConnectorFailure) as failure:
        if operation == "describe":
            app.describe()
        elif operation == "measure":
            app.measure(["p99_latency"], Control(), progress)
        else:
            app.adjust({"web": {"settings": {"replicas": {"value": 1}}}}, Control(), progress)
    assert failure.value.reason == "bad-output"
    assert str(failure.value).startswith(f"{operation} command printed")
    assert expected in str(failure.value)


@pytest.mark.timeout(30)
def test_timeout_kills_the_command_with_its_children(tmp_path):
    pid_file = tmp_path / "child.pid"
    # The child ignores SIGTERM and SIGHUP: only a SIGKILL of the group gets rid of it.
    hang = f"sh -c 'trap \"\" TERM HUP; sleep 300' & echo $! > {shlex.quote(str(pid_file))}; sleep 300"
    app = connector(describe=hang, timeout="1s")
    began = time.monotonic()
    with pytest.raises(ConnectorFailure) as failure:
        app.describe()
    assert time.monotonic() - began < 15  # 1 s plus a kill; only a hang breaks this
    assert failure.value.status == "failed" and failure.value.reason == "timeout"
    assert "describe" in str(failure.value) and "1s" in str(failure.value)
    child = int(pid_file.read_text())
    wait_until(lambda: gone(child), GONE_BOUND, what=f"child {child} of the timed-out command gone")


@pytest.mark.timeout(30)
def test_background_leftovers_are_killed_when_the_command_exits(tmp_path):
    pid_file = tmp_path / "child.pid"
    app = connector(describe=f"sleep 300 & echo $! > {shlex.quote(str(pid_file))}; echo '{{}}'")
    began = time.monotonic()
    assert app.describe() == {"components": {}, "metrics": {}}
    assert time.monotonic() - began < 15  # did not wait for the background sleep
    child = int(pid_file.read_text())
    wait_until(lambda: gone(child), GONE_BOUND, what=f"background child {child} gone")


@pytest.mark.timeout(30)
def test_failed_and_timed_out_checks_are_reported_not_raised():
    app = connector(
        check={"ok": "true", "bad": "echo 'port 8080 closed' >&2; exit 1", "slow": "sleep 300"},
        timeout="500ms",
    )
    results = {r["name"]: r for r in app.check()}
    assert results["ok"]["success"] is True
    assert results["bad"]["success"] is False and "port 8080 closed" in results["bad"]["message"]
    assert results["slow"]["success"] is False and "timed out" in results["slow"]["message"]


def test_a_check_given_as_a_mapping_carries_its_remedy_severity_tags_and_id(tmp_path):
    app = connector(
        check={
            "ready": {
                "run": "test -e flag",
                "remedy": "touch flag",
                "severity": "critical",
                "tags": ["files"],
            },
            "plain": "true",
        },
        cwd=str(tmp_path),
    )
    ready, plain = app.check()
    assert ready == {
        "name": "ready",
        "success": False,
        "message": ready["message"],
        "remedy": "touch flag",
        "severity": "critical",
        "tags": ["files"],
    }
    assert not (tmp_path / "flag").exists()  # a remedy is for a person: never run
    assert plain == {"name": "plain", "success": True, "message": "exited with status 0"}
    for bad in ({"run": " "}, {"run": "true", "severity": "loud"}, {"remedy": "x"}, {"run": "true", "x": 1}):
        with pytest.raises(ValidationError):
            CommandConfig.model_validate({"check": {"c": bad}})


def test_missing_shell_or_cwd_fails_to_start(tmp_path):
    with pytest.raises(ConnectorFailure, match="could not start") as failure:
        connector(describe="true", shell=str(tmp_path / "no-such-shell")).describe()
    assert failure.value.reason == "start-failed"
    with pytest.raises(ConnectorFailure, match="could not start"):
        connector(describe="true", cwd=str(tmp_path / "no-such-dir")).describe()


# --- values reach commands intact, never as shell code -----------------------------------------

HOSTILE_VALUES = [
    "; rm -rf {victim}",
    "$(touch {marker})",
    "`touch {marker}`",
    "it's a \"quoted\" 'value'",
    "line one\nline two\n",
    "ünïcødé ✓ 日本語",
    "${HOME} $HOME \\n %s %n",
    "* ? [a-z] ~ | & > /dev/null",
    "  leading and trailing spaces  ",
    "",
]


def test_adjust_values_with_shell_metacharacters_arrive_intact(progress, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    marker = tmp_path / "marker"
    out = tmp_path / "env.json"
    values = [v.replace("{victim}", str(victim)).replace("{marker}", str(marker)) for v in HOSTILE_VALUES]
    settings = {f"s{i}": {"value": value} for i, value in enumerate(values)}
    settings.update({"cpu.limit": {"value": 1.5}, "enabled": {"value": True}, "replicas": {"value": 3}})
    request = {"my-app": {"settings": settings}}

    app = connector(adjust=DUMP_ENV, env={"OUT": str(out)})
    app.adjust(request, Control(settlement=0.5), progress)
    env = json.loads(out.read_text(encoding="utf-8"))

    for i, value in enumerate(values):
        assert env[f"SERVO_MY_APP_S{i}"] == value
    assert env["SERVO_MY_APP_CPU_LIMIT"] == "1.5"
    assert env["SERVO_MY_APP_ENABLED"] == "true"
    assert env["SERVO_MY_APP_REPLICAS"] == "3"
    assert json.loads(env["SERVO_ADJUST"]) == request
    assert env["SERVO_CONTROL_SETTLEMENT"] == "0.5"
    assert victim.is_dir() and not marker.exists()


def test_adjust_rejects_values_the_environment_cannot_carry(progress):
    app = connector(adjust="true")
    with pytest.raises(ConnectorFailure) as failure:
        app.adjust({"web": {"settings": {"name": {"value": "a\0b"}}}}, Control(), progress)
    assert failure.value.status == "rejected" and "web.name" in str(failure.value)
    with pytest.raises(ConnectorFailure, match="SERVO_A_B_C"):
        app.adjust(
            {"a-b": {"settings": {"c": {"value": 1}}}, "a": {"settings": {"b.c": {"value": 2}}}},
            Control(),
            progress,
        )


def test_setting_env_names():
    assert setting_env_name("web", "cpu") == "SERVO_WEB_CPU"
    assert setting_env_name("my-app", "gc.type") == "SERVO_MY_APP_GC_TYPE"
    assert setting_env_name("wéb", "x") == "SERVO_W_B_X"


def test_the_servo_token_is_withheld_from_commands(progress, tmp_path, monkeypatch):
    monkeypatch.setenv("OPSANI_TOKEN", "s3cret-token")
    monkeypatch.setenv("SERVO_FROM_PARENT", "inherited")
    out = tmp_path / "env.json"
    dump_all = f'{PY} -c \'import json, os; json.dump(dict(os.environ), open(os.environ["OUT"], "w"))\''
    connector(adjust=dump_all, env={"OUT": str(out), "PORT": 8080}).adjust(
        {"web": {"settings": {"a": {"value": 1}}}}, Control(), progress
    )
    env = json.loads(out.read_text())
    assert "OPSANI_TOKEN" not in env
    assert env["SERVO_FROM_PARENT"] == "inherited" and env["PORT"] == "8080"


# --- configuration ------------------------------------------------------------------------------


def test_config_model():
    config = CommandConfig.model_validate({"check": "true", "timeout": "1m30s", "env": {"A": 1, "B": True}})
    assert config.check == {"check": "true"}
    assert config.timeout == 90.0
    assert config.env == {"A": "1", "B": "true"}
    assert config.shell == "/bin/sh"
    for bad in ({"timeout": 0}, {"timeout": "later"}, {"describe": "  "}, {"env": {"A=B": "x"}}, {"typo": 1}):
        with pytest.raises(ValidationError):
            CommandConfig.model_validate(bad)


def test_connector_takes_a_validated_model_too():
    config = CommandConfig(describe=prints(DESCRIPTION))
    assert CommandConnector("app", config).config is config
    assert CommandConnector("app", config).describe() == DESCRIPTION


@pytest.mark.timeout(60)
def test_command_dies_when_the_connector_process_is_killed(tmp_path):
    """A cancel SIGKILLs the connector's process; the command it was running must not live on."""
    pid_file = tmp_path / "command.pid"
    host_code = (
        "from servo_actors.connectors.command import CommandConnector\n"
        f"CommandConnector('app', {{'describe': 'echo $$ > {pid_file}; exec sleep 300', 'timeout': 120}}).describe()\n"
    )
    host = subprocess.Popen([sys.executable, "-c", host_code])
    command_pid = None
    try:
        wait_until(
            lambda: pid_file.exists() and pid_file.read_text().strip() != "",
            30,
            what="the command's pid file",
        )
        command_pid = int(pid_file.read_text())
        assert not gone(command_pid)
        os.kill(host.pid, signal.SIGKILL)
        host.wait(timeout=10)
        wait_until(
            lambda: gone(command_pid), GONE_BOUND, what="the command gone with its connector's process"
        )
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(timeout=10)
        if command_pid is not None and not gone(command_pid):
            os.kill(command_pid, signal.SIGKILL)
