"""The embedded optimizer as a process of its own, for the demo: started on a free loopback port
(``servo-actors optimizer serve``), its address read from its first lines, its log relayed to our
stderr, and stopped by PID on the way out. Apart from the run: process control, not the demo's loop.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path

from servo_actors import signals
from servo_actors.actors.linux import processes
from servo_actors.demo.errors import DemoError

__all__ = ["OPTIMIZER_START_TIMEOUT", "OPTIMIZER_STOP_TIMEOUT", "STDERR_TAIL_LINES", "running_optimizer"]

OPTIMIZER_START_TIMEOUT = 15.0
"""Seconds the optimizer process may take to print its address."""
OPTIMIZER_STOP_TIMEOUT = 5.0
"""Seconds the optimizer process gets to exit after SIGTERM before SIGKILL."""
STDERR_TAIL_LINES = 20
"""Last lines of the optimizer's stderr kept for an error message, should it fail to start."""


@contextlib.contextmanager
def running_optimizer(
    plans: Sequence[Path], state: Path, watcher: signals.SignalWatcher
) -> Iterator[str | None]:
    """Start ``optimizer serve`` on a free loopback port, one application per plan; yield its URL
    (None if a stop signal came first); stop it by PID. Its stderr (its log) goes on to ours, line
    by line. ``state`` is the state file of one plan, or an existing folder for several (one file
    per application)."""
    command = [
        sys.executable,
        "-m",
        "servo_actors",
        "optimizer",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        *(arg for plan in plans for arg in ("--plan", str(plan))),
        "--state",
        str(state),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
    relay = threading.Thread(target=_relay_stderr, args=(process, tail), name="optimizer-stderr", daemon=True)
    relay.start()
    try:
        yield _read_url(process, watcher, relay, tail)
    finally:
        processes.stop_child(process, OPTIMIZER_STOP_TIMEOUT)
        relay.join(OPTIMIZER_STOP_TIMEOUT)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def _relay_stderr(process: subprocess.Popen[str], tail: deque[str]) -> None:
    """Copy the optimizer's stderr to this process's (the terminal, or the demo's log file), keeping
    its last lines; a pipe nobody read would stall the optimizer once full."""
    assert process.stderr is not None
    for line in process.stderr:
        tail.append(line.rstrip("\n"))
        with contextlib.suppress(OSError):
            os.write(2, line.encode(errors="replace"))


def _read_url(
    process: subprocess.Popen[str], watcher: signals.SignalWatcher, relay: threading.Thread, tail: deque[str]
) -> str | None:
    assert process.stdout is not None
    deadline = time.monotonic() + OPTIMIZER_START_TIMEOUT
    fd = process.stdout.fileno()
    os.set_blocking(fd, True)
    wake = watcher.wake_fd
    while (remaining := deadline - time.monotonic()) > 0 and not watcher.stop.is_set():
        ready, _, _ = select.select([fd] if wake is None else [fd, wake], [], [], remaining)
        if fd not in ready:
            if wake in ready and not watcher.stop.is_set():
                watcher.drain_wake()  # woken for something else than a stop: never spin on it
            continue
        line = process.stdout.readline()
        if not line:
            break
        if ": http://" in line:
            return line.rsplit(": ", 1)[1].strip()
    if watcher.stop.is_set():
        return None
    if process.poll() is not None:
        relay.join(OPTIMIZER_STOP_TIMEOUT)
        err = " | ".join(tail)
        raise DemoError(f"the embedded optimizer exited with code {process.returncode}: {err}")
    raise DemoError(
        f"the embedded optimizer did not print its address within {OPTIMIZER_START_TIMEOUT:.0f} s"
    )
