"""The ``servo-actors`` command line (interface.md). Commands live in their own modules; this file
holds the main group, its global options, the error policy and the registration list.

Error policy: a ``ServoError`` prints ``error: <message>`` (one line per line of the message) on
stderr and exits with its ``exit_code`` (2 for configuration and usage errors, else 1). Anything
else is a bug: one line ``internal error: ...`` and exit 1; the traceback only with ``-l debug``.

Adding a command: write it in its own module, then one line below, ``cli.add_command(name)``.
Keep heavy imports (Thespian, HTTP clients) inside the command function so ``--help`` stays fast.
"""

from __future__ import annotations

import logging
import os
import traceback
from typing import Any

import click

from servo_actors import __version__
from servo_actors.cli.agent_cmd import agent_cmd
from servo_actors.cli.check_cmd import check_cmd
from servo_actors.cli.config_cmds import config_cmd, connectors_cmd, schema_cmd, validate_cmd
from servo_actors.cli.context import CliState, SignalAwareGroup, root_app_option
from servo_actors.cli.demo_cmd import demo_cmd
from servo_actors.cli.init_cmd import init_cmd
from servo_actors.cli.kube_cmds import kube_cmd
from servo_actors.cli.operations import adjust_cmd, describe_cmd, measure_cmd
from servo_actors.cli.optimizer_cmds import optimizer
from servo_actors.cli.run_cmd import run_cmd
from servo_actors.cli.servox_cmd import import_servox_cmd
from servo_actors.errors import ServoError
from servo_actors.logs import LOG_FORMATS, LOG_LEVELS, configure_logging, redact

__all__ = [
    "INTERNAL_ERROR_EXIT",
    "PROG_NAME",
    "ServoGroup",
    "cli",
    "main",
    "version_cmd",
]

log = logging.getLogger(__name__)

PROG_NAME = "servo-actors"
# Exit status of a bug (an exception that is not a ServoError): the same as a failed job.
INTERNAL_ERROR_EXIT = 1


class ServoGroup(SignalAwareGroup):
    """A click group that applies the error policy to every command under it."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        # Click's own: usage errors (exit 2), --help/exit, Ctrl-C; and a closed pipe
        # (`servo-actors schema | head`), which click's main() ends quietly.
        except (
            click.exceptions.ClickException,
            click.exceptions.Exit,
            click.exceptions.Abort,
            BrokenPipeError,
        ):
            raise
        except ServoError as exc:
            # For developers only: where it was raised (through the redacting log handler).
            log.debug("%s raised here:", type(exc).__name__, exc_info=True)
            _echo_error(exc)
            ctx.exit(exc.exit_code)
        except Exception as exc:
            state = ctx.find_object(CliState)
            debug = state is not None and state.debug
            if debug:
                click.echo(redact(traceback.format_exc()).rstrip(), err=True)
            lines = str(exc).strip().splitlines()
            detail = f": {lines[0]}" if lines else ""
            hint = "" if debug else " (run with -l debug for the traceback)"
            click.echo(redact(f"internal error: {type(exc).__name__}{detail}{hint}"), err=True)
            ctx.exit(INTERNAL_ERROR_EXIT)


def _echo_error(exc: ServoError) -> None:
    for line in (redact(str(exc)).strip() or type(exc).__name__).splitlines():
        click.echo(f"error: {line}", err=True)


@click.group(
    cls=ServoGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(path_type=str),
    envvar="SERVO_CONFIG",
    show_envvar=True,
    default=None,
    show_default="./servo.yaml",
    help="The configuration file.",
)
@click.option(
    "-l",
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    envvar="SERVO_LOG_LEVEL",
    show_envvar=True,
    default="info",
    show_default=True,
    help="Log this level and above (debug also shows tracebacks).",
)
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS),
    envvar="SERVO_LOG_FORMAT",
    show_envvar=True,
    default="text",
    show_default=True,
    help="Log lines as text or as JSON objects.",
)
@root_app_option
@click.version_option(__version__, "-V", "--version", prog_name=PROG_NAME, message="%(prog)s %(version)s")
@click.pass_context
def cli(
    ctx: click.Context, config_path: str | None, log_level: str, log_format: str, app_names: tuple[str, ...]
) -> None:
    """servo-actors: a servo whose connectors run as supervised, crash-only actors.

    It connects an application to an optimizer: the optimizer asks it to describe, measure and
    adjust the application, and its connectors (Prometheus, Kubernetes, commands...) do the work,
    each in its own process, restarted fresh after a crash or a cancel.
    """
    configure_logging(log_level.lower(), log_format)
    if os.environ.get("NO_COLOR"):
        ctx.color = False
    ctx.obj = CliState(
        config_path=config_path, log_level=log_level.lower(), log_format=log_format, app_names=app_names
    )


@cli.command("version")
def version_cmd() -> None:
    """Print the version."""
    click.echo(f"{PROG_NAME} {__version__}")


cli.add_command(config_cmd)
cli.add_command(validate_cmd)
cli.add_command(schema_cmd)
cli.add_command(connectors_cmd)
cli.add_command(optimizer)
cli.add_command(check_cmd)
cli.add_command(describe_cmd)
cli.add_command(measure_cmd)
cli.add_command(adjust_cmd)
cli.add_command(run_cmd)
cli.add_command(demo_cmd)
cli.add_command(agent_cmd)
cli.add_command(kube_cmd)
cli.add_command(import_servox_cmd)
cli.add_command(init_cmd)


def main() -> None:
    """Run the command line (``servo_actors.__main__`` takes the stop signals before importing it)."""
    from servo_actors import signals

    signals.take_over_process()  # a no-op after __main__; here for a caller that starts from this
    cli.main(prog_name=PROG_NAME)
