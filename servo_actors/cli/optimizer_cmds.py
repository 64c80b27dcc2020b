"""`servo-actors optimizer ...`: the embedded optimizer. (Owned by the optimizer helper; being written.)"""

import click


@click.group("optimizer")
def optimizer() -> None:
    """The embedded optimizer: serve the servo protocol on loopback, or cancel its current command."""
