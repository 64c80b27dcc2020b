"""The CLI as users start it: the installed script and ``python -m servo_actors``, in a directory
with no servo.yaml. Each start costs ~0.3 s, so only what needs a real process is here."""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.timeout(60)

# A real process running the real main group with one extra command that fails on request.
FAILING_COMMAND = """
import click
from servo_actors.cli import cli, main
from servo_actors.cli.context import pass_state

@cli.command("fail")
@click.argument("how")
@pass_state
def fail(state, how):
    if how == "bug":
        raise ValueError("something broke\\nand a second line")
    if how == "secret":
        token = state.optimizer.token.get_secret_value()
        raise RuntimeError(f"request with {token} failed")

main()
"""
TOKEN = "cli-process-token-8765"


def test_script_help_without_config(run_process, servo_script: str) -> None:
    result = run_process([servo_script, "--help"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: servo-actors [OPTIONS] COMMAND [ARGS]...")
    for command in ("config", "validate", "schema", "connectors", "version", "optimizer"):
        assert f"  {command} " in result.stdout
    assert result.stderr == ""


def test_python_m_help_names_the_program(run_process) -> None:
    result = run_process([sys.executable, "-m", "servo_actors", "--help"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: servo-actors ")


@pytest.mark.parametrize("command", [["validate"], ["optimizer"]], ids=lambda c: c[0])
def test_subcommand_help_with_a_config_that_does_not_exist(run_process, servo_script: str, command) -> None:
    result = run_process([servo_script, *command, "--help"], SERVO_CONFIG="/nonexistent/servo.yaml")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Usage: servo-actors {command[0]} ")


def test_version(run_process, servo_script: str) -> None:
    from servo_actors import __version__

    result = run_process([servo_script, "version"])
    assert (result.returncode, result.stdout) == (0, f"servo-actors {__version__}\n")


def test_a_bug_is_one_line_without_traceback(run_process) -> None:
    result = run_process([sys.executable, "-c", FAILING_COMMAND, "fail", "bug"])
    assert result.returncode == 1
    assert result.stderr == (
        "internal error: ValueError: something broke (run with -l debug for the traceback)\n"
    )
    assert result.stdout == ""


def test_a_bug_with_debug_shows_the_traceback_without_secrets(run_process) -> None:
    argv = [sys.executable, "-c", FAILING_COMMAND, "-l", "debug", "fail", "secret"]
    result = run_process(
        argv, OPSANI_OPTIMIZER="example.com/web", OPSANI_TOKEN=TOKEN, SERVO_CONFIG="/dev/null"
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.rstrip().splitlines()[-1] == (
        "internal error: RuntimeError: request with ********** failed"
    )
    assert TOKEN not in result.stderr + result.stdout
