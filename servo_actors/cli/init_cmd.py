"""``init``: a commented servo.yaml for the connectors named on the command line.

Each built-in connector type has a commented example of its ``config`` in ``init_templates/``
(package data); ``init prometheus loadgen`` writes them under an ``optimizer`` section, and
``NAME:TYPE`` names a connector (``init prom1:prometheus prom2:prometheus``), as servox's
``generate`` took ``alias:connector``.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import click

from servo_actors.cli.output_file import write_file
from servo_actors.errors import ConfigError, UsageError

__all__ = ["init_cmd"]

TEMPLATES = "init_templates"
OUTPUT_MODE = 0o644
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
HEADER = """\
# servo.yaml written by `servo-actors init`: edit the values, then `servo-actors validate`.
# Durations are seconds, or strings such as 250ms, 5s, 1m30s, 2h. `servo-actors schema` lists
# every key; `servo-actors config` shows the configuration with its defaults filled in.
optimizer:
  id: example.com/web            # ORG/APP of your optimizer (env OPSANI_OPTIMIZER)
  # token_file: optimizer.token  # the API token, a file beside this one (or env OPSANI_TOKEN)
connectors:
"""


def template_types() -> list[str]:
    """The connector types ``init`` has an example for."""
    folder = resources.files("servo_actors.cli").joinpath(TEMPLATES)
    return sorted(
        entry.name.removesuffix(".yaml") for entry in folder.iterdir() if entry.name.endswith(".yaml")
    )


def render(connectors: list[tuple[str, str]]) -> str:
    """The servo.yaml text for ``(name, type)`` pairs."""
    folder = resources.files("servo_actors.cli").joinpath(TEMPLATES)
    parts = [HEADER]
    for name, type_name in connectors:
        body = folder.joinpath(f"{type_name}.yaml").read_text(encoding="utf-8")
        lines = body.splitlines()
        comments = [line for line in lines if line.startswith("#")]
        config = [line for line in lines if not line.startswith("#")]
        parts.extend(f"  {line}\n" for line in comments)
        parts.append(f"  - name: {name}\n    type: {type_name}\n    config:\n")
        parts.extend(f"      {line}\n" if line.strip() else "\n" for line in config)
    return "".join(parts)


def _pairs(specs: tuple[str, ...]) -> list[tuple[str, str]]:
    known = template_types()
    pairs = []
    for spec in specs:
        name, colon, type_name = spec.partition(":")
        if not colon:
            name = type_name = spec
        if type_name not in known:
            raise UsageError(f"no example for connector type {type_name!r} (init knows: {', '.join(known)})")
        if not _NAME.fullmatch(name):
            raise UsageError(f"{name!r} is not a connector name (letters, digits, '_', '.', '-'; at most 63)")
        pairs.append((name, type_name))
    names = [name for name, _ in pairs]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UsageError(f"connector name(s) given twice: {', '.join(twice)} (use NAME:TYPE)")
    return pairs


@click.command("init")
@click.argument("connectors", nargs=-1, required=True, metavar="[NAME:]TYPE...")
@click.option(
    "-o",
    "--output",
    default="servo.yaml",
    show_default=True,
    help="Where to write it; - for stdout.",
)
@click.option("--force", is_flag=True, help="Replace the file if it exists.")
def init_cmd(connectors: tuple[str, ...], output: str, force: bool) -> None:
    """Write a commented servo.yaml with an example of each connector named.

    TYPE is a built-in connector type; NAME:TYPE names the connector (default: its type).
    """
    text = render(_pairs(connectors))
    if output == "-":
        click.echo(text, nl=False)
        return
    path = Path(output)
    if path.exists() and not force:
        raise ConfigError("exists: give --force to replace it", source=str(path))
    write_file(path, text, OUTPUT_MODE)
    click.echo(f"wrote {path}: check it with servo-actors -c {path} validate", err=True)
