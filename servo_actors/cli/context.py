"""What every command shares: the global options, the lazily loaded config, and output helpers.

A command that needs the configuration asks for it; one that does not (``--help``, ``version``,
``schema``) never touches the file::

    from servo_actors.cli.context import CliState, echo_json, json_option, pass_state

    @click.command("describe")
    @json_option
    @pass_state
    def describe(state: CliState, as_json: bool) -> None:
        config = state.config            # loaded on first use; ConfigError -> "error: ..." exit 2
        ...

Failures are raised, not printed: raise a ``ServoError`` subclass and the main group prints
``error: <message>`` and exits with its exit code. Results go to stdout, logs and errors to stderr.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import click

from servo_actors.config import OptimizerConfig, ServoApps, ServoConfig, load_apps, require_optimizer
from servo_actors.connectors.registry import connector_settings_problems
from servo_actors.errors import ConfigError

__all__ = [
    "APP_ENV",
    "APP_HELP",
    "CliState",
    "app_option",
    "SignalAwareGroup",
    "color_enabled",
    "echo_json",
    "format_table",
    "is_terminal",
    "json_option",
    "limit_option",
    "pass_state",
    "root_app_option",
    "styled",
    "watches_stop_signals",
]


@dataclass
class CliState:
    """The global options, and the configuration they point at, loaded on first use."""

    config_path: str | None = None
    """``-c/--config`` (click already folded ``SERVO_CONFIG`` in); None means ``./servo.yaml``."""
    log_level: str = "info"
    log_format: str = "text"
    app_names: tuple[str, ...] = ()
    """The root's ``--app/-n/--name`` (or ``SERVO_NAME``): the applications of any command that
    names none itself (``select``); empty: every one."""
    _apps: ServoApps | None = field(default=None, init=False, repr=False)

    @property
    def apps(self) -> ServoApps:
        """Every application of the file (one per YAML document), validated on first use;
        raises ConfigError (exit 2) if the file is missing or wrong."""
        if self._apps is None:
            self._apps = load_apps(self.config_path, connector_check=connector_settings_problems)
        return self._apps

    @property
    def config(self) -> ServoConfig:
        """The configuration of the one application: the file's only one, or the one the root's
        ``--app`` selects; else a ConfigError (exit 2) that names them and says how to pick one."""
        configs = self.select(())
        if len(configs) > 1:
            apps = self.apps
            raise ConfigError(
                f"holds {len(apps)} applications ({', '.join(apps.names)}): choose one with --app ORG/APP",
                source=apps.source,
            )
        return configs[0]

    def select(self, names: Sequence[str]) -> tuple[ServoConfig, ...]:
        """The applications a command's own ``--app`` names, else the root's ``--app/-n/--name``
        (or ``SERVO_NAME``), else all of them: a command's own selection replaces the root's.
        ConfigError (exit 2) naming an unknown one and the known ones."""
        return self.apps.select(tuple(names) or self.app_names)

    @property
    def optimizer(self) -> OptimizerConfig:
        """The optimizer section; raises ConfigError when none is configured."""
        return require_optimizer(self.config)

    @property
    def debug(self) -> bool:
        return self.log_level == "debug"


pass_state = click.make_pass_decorator(CliState, ensure=True)
"""Pass the CliState as the first argument (a default one when a command runs on its own)."""

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
"""The ``--json`` flag, the same on every command that has one; the parameter is ``as_json``."""

APP_ENV = "SERVO_NAME"
"""The environment variable that selects applications as the root's ``--app`` does (servox's name
for it); several are separated by whitespace."""

APP_HELP = (
    "Only this application of a multi-document servo.yaml (repeatable); replaces the one the "
    f"root's --app/-n/--name or {APP_ENV} selects (default: every one)."
)

root_app_option = click.option(
    "--app",
    "-n",
    "--name",
    "app_names",
    multiple=True,
    metavar="ORG/APP",
    envvar=APP_ENV,
    show_envvar=True,
    help="Only this application of a multi-document servo.yaml, for any command (repeatable; "
    "default: every one). A command's own --app replaces it.",
)
"""The main group's ``--app ORG/APP`` (also ``-n/--name``, and ``SERVO_NAME`` as servox users
know them), before the command: ``servo-actors -n acme.com/web check``."""

app_option = click.option(
    "--app", "-n", "--name", "app_names", multiple=True, metavar="ORG/APP", help=APP_HELP
)
"""A command's ``--app ORG/APP`` (also ``-n/--name``); the parameter is ``app_names``, a tuple.
``SERVO_NAME`` is read by the main group's option, so that a command's own option given on the
command line always wins over it."""

limit_option = click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="At most N applications run the operation at once (default: all of them).",
)
"""``--limit N``: how many applications run an operation at once; the parameter is ``limit``."""


def color_enabled(stream: TextIO | None = None) -> bool:
    """Colour only on a terminal, and never when ``NO_COLOR`` is set to anything (no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    stream = stream or sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)())


def styled(text: str, stream: TextIO | None = None, **styles: Any) -> str:
    """``click.style(text, **styles)`` when colour is enabled for ``stream``, else ``text``."""
    return click.style(text, **styles) if color_enabled(stream) else text


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default stderr, where progress goes) is a terminal: show progress bars."""
    stream = stream or sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)())


def echo_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout (anything not JSON-native as ``str``)."""
    click.echo(json.dumps(data, indent=2, default=str))


def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A plain aligned table: a header line, a rule, then the rows (``None`` shows as ``-``).

    >>> print(format_table(["name", "ok"], [["prom", True], ["k8s", None]]))
    name  ok
    ----  ----
    prom  True
    k8s   -
    """
    table = [[str(header) for header in headers]]
    table += [["-" if cell is None else str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    rule = ["-" * width for width in widths]
    lines = [table[0], rule, *table[1:]]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


# ----- stop signals ----------------------------------------------------------------------------

_WATCHES_STOP = "watches_stop_signals"


def watches_stop_signals(command: click.Command) -> click.Command:
    """Mark ``command`` as one that runs in ``signals.watching()`` and checks its stop at every wait.

    Such a command keeps the signals the entry point took (signals.py); any other command gets
    the default dispositions back before it runs (``SignalAwareGroup``).
    """
    setattr(command, _WATCHES_STOP, True)
    return command


class SignalAwareGroup(click.Group):
    """A group that hands the stop signals back to a command that does not watch them."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None and not isinstance(command, click.Group):
            if not getattr(command, _WATCHES_STOP, False):
                from servo_actors import signals

                signals.give_back_process()
        return name, command, rest
