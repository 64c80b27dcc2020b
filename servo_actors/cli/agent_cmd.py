"""``servo-actors agent``: a member actor system on another host, running the connectors placed on it.

::

    servo-actors agent --listen 10.0.0.7:1901 --join 10.0.0.5:1900 \\
        --capability loadgen-host --capability zone=eu-1 --secret-file /etc/servo/convention.key

It needs no configuration file: the servo it joins sends each connector's settings. It runs until
SIGTERM or SIGINT, then kills every connector it hosts and exits 0 (1 if its actor system failed
on its own; 2 for bad options or an unusable secret file).
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from servo_actors import signals
from servo_actors.cli.context import watches_stop_signals
from servo_actors.durations import parse_duration
from servo_actors.errors import SupervisorError, UsageError

__all__ = [
    "CAPABILITY_NAME",
    "CAPABILITY_VALUE_LIMIT",
    "agent_cmd",
    "parse_capabilities",
]

CAPABILITY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
"""A capability's name: what ``placement.capability`` in a servo's config names."""
CAPABILITY_VALUE_LIMIT = 256


def _endpoint(_ctx: click.Context, param: click.Parameter, value: str) -> object:
    from servo_actors.endpoints import parse_endpoint

    try:
        return parse_endpoint(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param=param) from None


def parse_capabilities(values: tuple[str, ...]) -> dict[str, str]:
    """``("loadgen-host", "zone=eu-1")`` -> ``{"loadgen-host": "", "zone": "eu-1"}``; UsageError
    naming the one that is wrong."""
    found: dict[str, str] = {}
    for raw in values:
        name, _, value = raw.partition("=")
        name = name.strip()
        if not CAPABILITY_NAME.fullmatch(name):
            raise UsageError(
                f"--capability {raw!r}: the name must be 1-63 letters, digits, '_', '.' or '-', "
                "starting with a letter or digit"
            )
        if len(value) > CAPABILITY_VALUE_LIMIT or any(ord(c) < 32 for c in value):
            raise UsageError(
                f"--capability {raw!r}: the value must be at most {CAPABILITY_VALUE_LIMIT} printable characters"
            )
        if name in found and found[name] != value:
            raise UsageError(f"--capability {name!r} is given twice with different values")
        found[name] = value
    return found


def _duration(_ctx: click.Context, param: click.Parameter, value: str) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param=param) from None
    if seconds <= 0:
        raise click.BadParameter("must be more than 0", param=param)
    return seconds


@watches_stop_signals
@click.command("agent")
@click.option(
    "--listen",
    required=True,
    callback=_endpoint,
    metavar="HOST:PORT",
    help="This host's address and port for the member system; every socket of it listens there only.",
)
@click.option(
    "--join",
    required=True,
    callback=_endpoint,
    metavar="HOST:PORT",
    help="The servo's supervisor.convention.listen.",
)
@click.option(
    "--capability",
    "capabilities",
    multiple=True,
    metavar="NAME[=VALUE]",
    help="A capability this host offers (repeat); connectors whose placement names it run here.",
)
@click.option(
    "--secret-file",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="The shared key (the servo's supervisor.convention.secret_file): at least 32 bytes, mode 600.",
)
@click.option(
    "--rejoin-min",
    default="500ms",
    show_default=True,
    callback=_duration,
    help="First wait between two joins.",
)
@click.option(
    "--rejoin-max",
    default="30s",
    show_default=True,
    callback=_duration,
    help="Longest wait between two joins.",
)
@click.option(
    "--run-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Keep the member system's logs (connectors.log, thespian.log) here; default: a temporary directory.",
)
def agent_cmd(
    listen: object,
    join: object,
    capabilities: tuple[str, ...],
    secret_file: Path,
    rejoin_min: float,
    rejoin_max: float,
    run_dir: Path | None,
) -> None:
    """Join a servo's actor system as a member and run the connectors placed on this host.

    Runs until SIGTERM or SIGINT, then kills every connector it hosts and exits 0. While the servo
    is away it keeps trying to join, waiting longer each time (--rejoin-min doubling up to
    --rejoin-max).
    """
    from servo_actors.actors.convention.agent import AgentOptions, run_agent
    from servo_actors.actors.transport.message_auth import key_from_file
    from servo_actors.actors.transport.ports import check_listen_address

    if rejoin_min > rejoin_max:
        raise UsageError("--rejoin-min must not exceed --rejoin-max")
    if listen == join:
        raise UsageError(f"--listen and --join are both {listen}: an agent joins another system")
    try:
        key_from_file(secret_file)  # read again at start; checked here so a bad one exits 2
        check_listen_address(listen)  # type: ignore[arg-type]  # an Endpoint (the option's callback); typed object to keep the import lazy
    except SupervisorError as exc:
        raise UsageError(str(exc)) from None
    options = AgentOptions(
        listen=listen,  # type: ignore[arg-type]  # an Endpoint, as above
        join=join,  # type: ignore[arg-type]  # an Endpoint, as above
        capabilities=parse_capabilities(capabilities),
        secret_file=secret_file,
        rejoin_min=rejoin_min,
        rejoin_max=rejoin_max,
        run_dir=run_dir,
    )
    with signals.watching() as watcher:
        code = run_agent(options, watcher.stop)
    if code:
        raise click.exceptions.Exit(code)
