"""The progress line of ``measure`` and ``adjust`` on a terminal: one line on stderr, rewritten
in place while the operation runs.

Apart from the commands: a ``Reporter`` of the operation path that only draws, with its own
clock and terminal handling.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from servo_actors.cli.context import color_enabled, is_terminal

if TYPE_CHECKING:
    from servo_actors.actors.operation_path import InFlight

__all__ = ["BAR_WIDTH", "REFRESH_INTERVAL", "ProgressLine", "progress_line_for"]

REFRESH_INTERVAL = 0.2
"""Seconds between two redraws of the progress line (the path looks at a stop more often)."""
BAR_WIDTH = 24
"""Characters of the progress bar itself."""


class ProgressLine:
    """One line on stderr, rewritten in place: ``measure [#####-----]  45%  13s/30s  message``;
    redrawn after each wait of the operation path that brought no result (a ``Reporter``, see
    actors/operation_path.py: the CLI imports the actors only when a command needs them).

    With a known duration the bar follows the clock (the runtime reports the furthest connector,
    which says little about the slowest); otherwise it shows what the connectors report.
    """

    def __init__(self, label: str, expected_seconds: float) -> None:
        self._label = label
        self._expected = expected_seconds
        self._began = time.monotonic()
        self._drawn = 0
        self._color = color_enabled(sys.stderr)

    def draw(self, reported: float, message: str) -> None:
        elapsed = time.monotonic() - self._began
        if self._expected > 0:
            percent = min(99.0, 100.0 * elapsed / self._expected)
            clock = f"{elapsed:.0f}s/{self._expected:.0f}s"
        else:
            percent, clock = reported, f"{elapsed:.0f}s"
        filled = round(BAR_WIDTH * percent / 100)
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        if self._color:
            bar = click.style("#" * filled, fg="green") + "-" * (BAR_WIDTH - filled)
        text = f"{self._label} [{bar}] {percent:3.0f}%  {clock}  {message}".rstrip()
        # Never wrap: a wrapped line cannot be rewritten with a carriage return.
        width = shutil.get_terminal_size().columns - 1
        visible = len(click.unstyle(text))
        if visible > width:
            text = click.unstyle(text)[:width]
            visible = width
        click.echo("\r" + text + " " * max(0, self._drawn - visible), err=True, nl=False)
        self._drawn = visible

    def next_wait(self, op: InFlight, now: float) -> float:
        return REFRESH_INTERVAL

    def verdict(self) -> None:
        return None

    def report(self, op: InFlight, now: float) -> None:
        self.draw(op.progress, op.message)

    def settle(self) -> None:
        return None

    def cancelled(self, op: InFlight, verdict: Any) -> None:
        pass

    def close(self) -> None:
        if self._drawn:
            click.echo("\r" + " " * self._drawn + "\r", err=True, nl=False)
            self._drawn = 0


def progress_line_for(label: str, expected_seconds: float) -> ProgressLine | None:
    """A ``ProgressLine`` when stderr is a terminal, else None (no line to rewrite)."""
    return ProgressLine(label, expected_seconds) if is_terminal(sys.stderr) else None
