"""The command line (being written)."""

import click

from servo_actors.cli.optimizer_cmds import optimizer


@click.group()
def cli() -> None:
    """servo-actors."""


cli.add_command(optimizer)


def main() -> None:
    cli()
