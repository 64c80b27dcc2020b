"""The connectors started for one operation of ``check``, ``describe``, ``measure`` or ``adjust``,
and stopped again on every way out; a stop signal meanwhile becomes a clean exit (128 + signal).

Apart from the commands: it is the part of them that starts and stops processes and watches
signals, the same for all four.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import click

from servo_actors import signals
from servo_actors.errors import UsageError

if TYPE_CHECKING:
    from servo_actors.actors import Operation, ServoRuntime
    from servo_actors.actors.runtime.operation_path import OperationPath
    from servo_actors.config import ServoConfig

__all__ = ["SIGNAL_EXIT_BASE", "only_connectors", "running_connectors"]

SIGNAL_EXIT_BASE = 128


def only_connectors(config: ServoConfig, names: Sequence[str]) -> ServoConfig:
    """``config`` with only the connectors ``names`` (all of them when none is named), to start
    no other; a UsageError (exit 2) naming an unknown one and the configured ones."""
    if not names:
        return config
    known = [spec.name for spec in config.connectors]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UsageError(
            f"unknown connector(s) {', '.join(unknown)} (configured: {', '.join(known) or 'none'})"
        )
    return config.model_copy(
        update={"connectors": [spec for spec in config.connectors if spec.name in names]}
    )


@contextlib.contextmanager
def running_connectors(
    config: ServoConfig, operation: str
) -> Iterator[tuple[ServoRuntime, OperationPath[Operation], signals.SignalWatcher]]:
    """The started runtime, the operation path (``OperationPath``) on it and the watcher of the
    stop signals (for a command's own pauses); on every way out the runtime is stopped, and a stop
    signal (``StopRequested`` raised in the block) becomes a clean exit.

    The signal handler only records the signal (signals.py): the start and every wait of the path
    look at it, so a signal at any moment abandons the operation within one wait slice, and a
    second one changes nothing (the stop is bounded on its own).
    """
    from servo_actors.actors import ServoRuntime
    from servo_actors.actors.runtime.operation_path import OperationPath

    interrupted: int | None = None
    with signals.watching() as watcher:
        runtime = ServoRuntime(config)
        path = OperationPath(runtime, stop=watcher.stop)
        try:
            path.check_stop()
            if not runtime.start(stop=watcher.stop):  # False: stopped while the connectors started
                raise signals.StopRequested("stop")
            yield runtime, path, watcher
        except signals.StopRequested:
            interrupted = watcher.stop_signum or signal.SIGTERM
        finally:
            runtime.stop()
    if interrupted is not None:
        click.echo(
            f"interrupted by {signal.Signals(interrupted).name}: {operation} abandoned, "
            "its connectors were stopped",
            err=True,
        )
        raise click.exceptions.Exit(SIGNAL_EXIT_BASE + interrupted)
