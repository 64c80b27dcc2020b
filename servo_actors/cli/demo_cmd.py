"""`servo-actors demo`: a complete local optimization of a synthetic application."""

from __future__ import annotations

import click


@click.command("demo")
@click.option(
    "--steps", default=15, show_default=True, type=click.IntRange(1, 500), help="ADJUST/MEASURE steps."
)
@click.option(
    "--seed", default=0, show_default=True, type=int, help="Seed of the application and the search."
)
@click.option(
    "--abort-every",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="Press Abort on every Nth MEASURE or ADJUST, to watch recovery (0: never).",
)
def demo_cmd(steps: int, seed: int, abort_every: int) -> None:
    """Run the embedded optimizer and a servo with a synthetic application; print each step and the best settings."""
    from servo_actors.demo import DemoOptions, run_demo

    code = run_demo(DemoOptions(steps=steps, seed=seed, abort_every=abort_every), echo=click.echo)
    if code:
        raise click.exceptions.Exit(code)
