"""`servo-actors demo`: a complete local optimization of a synthetic application.

On a terminal (stderr is one) the demo shows its steps and a progress line; the logs of the servo,
its connectors and the optimizer go to a file whose path it prints first (``-v`` shows them on
the terminal instead, without the progress line). Off a terminal, the logs go to stderr as for
every other command.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import click

from servo_actors.cli.context import is_terminal, watches_stop_signals
from servo_actors.demo.setup import MAX_APPS

__all__ = [
    "LOG_NAME",
    "demo_cmd",
]

LOG_NAME = "servo-actors-demo-{stamp}-{pid}.log"
"""The demo's log file, in the system's temporary directory (kept after the demo for reading)."""


class _TerminalLines:
    """Step lines on stdout and one self-rewriting progress line on ``terminal``, from any thread."""

    def __init__(self, terminal: TextIO) -> None:
        self._terminal = terminal
        self._lock = threading.Lock()
        self._status = ""
        self._drawn = 0

    def line(self, text: str) -> None:
        with self._lock:
            self._erase()
            click.echo(text)
            sys.stdout.flush()
            self._draw()

    def status(self, text: str) -> None:
        with self._lock:
            self._status = text
            self._erase()
            self._draw()

    def _erase(self) -> None:
        if self._drawn:
            self._terminal.write("\r" + " " * self._drawn + "\r")
            self._terminal.flush()
            self._drawn = 0

    def _draw(self) -> None:
        if not self._status:
            return
        # Never wrap: a wrapped line cannot be rewritten with a carriage return.
        text = self._status[: max(1, shutil.get_terminal_size().columns - 1)]
        self._terminal.write(text)
        self._terminal.flush()
        self._drawn = len(text)


@contextlib.contextmanager
def _logs_in_a_file() -> Iterator[tuple[Path, TextIO]]:
    """Point this process's stderr (fd 2, which the connectors' processes and the optimizer inherit
    or are relayed to) at a new log file; yield its path and a stream to the terminal it was."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = Path(tempfile.gettempdir()) / LOG_NAME.format(stamp=stamp, pid=os.getpid())
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    sys.stderr.flush()
    saved = os.dup(2)
    terminal = os.fdopen(os.dup(saved), "w", encoding="utf-8", errors="replace")
    os.dup2(log_fd, 2)
    os.close(log_fd)
    try:
        yield path, terminal
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # the error of a failed demo is printed after this, on the terminal
        os.close(saved)
        terminal.close()


@watches_stop_signals
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
@click.option(
    "--apps",
    default=1,
    show_default=True,
    type=click.IntRange(1, MAX_APPS),
    help="Applications the one servo optimizes, each against its own optimizer session "
    "(seeds SEED, SEED+1...).",
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="On a terminal, show the logs there instead of writing them to a file.",
)
def demo_cmd(steps: int, seed: int, abort_every: int, apps: int, verbose: bool) -> None:
    """Run the embedded optimizer and a servo with a synthetic application; print each step and the
    recommendation against the baseline.

    With --apps N the one servo runs N applications (one multi-document configuration), each
    optimized on its own; every line names its application, and each has its own summary.

    SIGTERM or Ctrl-C stops both (the servo says GOODBYE) and exits 128 + the signal.
    """
    from servo_actors.demo import DemoOptions, run_demo

    options = DemoOptions(steps=steps, seed=seed, abort_every=abort_every, apps=apps)
    if not is_terminal(sys.stderr) or verbose:
        code = run_demo(options, echo=click.echo)
    else:
        with _logs_in_a_file() as (log_path, terminal):
            click.echo(f"logs: {log_path}  (-v shows them here)")
            lines = _TerminalLines(terminal)
            code = run_demo(options, echo=lines.line, status=lines.status)
        click.echo(f"logs: {log_path}")
    if code:
        raise click.exceptions.Exit(code)
