"""Running one command of the ``command`` connector: its own process group, a timeout, output
in temporary files, and the whole group killed when it overruns or exits."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servo_actors.connectors.base import ConnectorFailure
from servo_actors.connectors.wait import DEFAULT_PROGRESS_INTERVAL
from servo_actors.durations import format_duration

__all__ = [
    "MAX_OUTPUT_BYTES",
    "REAP_TIMEOUT",
    "STDERR_TAIL_CHARS",
    "STDERR_TAIL_LINES",
    "CommandSpec",
    "run_command",
    "seconds_text",
]

REAP_TIMEOUT = 5.0
"""Seconds to wait for a SIGKILLed command to be reaped before giving up on it."""
STDERR_TAIL_LINES = 10
STDERR_TAIL_CHARS = 2000
MAX_OUTPUT_BYTES = 16 * 1024 * 1024
"""Largest stdout read from a command; more is a failure rather than a memory blow-up."""


@dataclass(frozen=True)
class CommandSpec:
    """What to run and how: the operation (for messages), the command, shell, cwd, environment."""

    operation: str
    command: str
    shell: str
    cwd: str | None
    env: dict[str, str]


def run_command(
    spec: CommandSpec,
    timeout: float,
    extra_env: dict[str, str],
    *,
    on_tick: Callable[[float], None] | None = None,
    tick_interval: float = DEFAULT_PROGRESS_INTERVAL,
) -> str:
    """Run ``spec`` with ``extra_env`` added; its stdout, or ConnectorFailure saying what went wrong.

    ``on_tick(elapsed_seconds)`` is called every ``tick_interval`` while the command runs.

    The command gets its own process group; that group is SIGKILLed when the command overruns
    ``timeout`` and again when it exits (so nothing it started outlives it). stdout and stderr
    go to temporary files, not pipes, so a background child holding them open cannot stall us.
    """
    op = spec.operation
    env = {**spec.env, **extra_env}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                [spec.shell, "-c", spec.command],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                cwd=spec.cwd,
                process_group=0,
                preexec_fn=_die_with_parent,
            )
        except (OSError, ValueError) as exc:
            # ValueError: an embedded NUL byte in a value; OSError: no such shell or cwd.
            raise ConnectorFailure(f"{op} command could not start: {exc}", reason="start-failed") from None
        try:
            finished = _wait_for_exit(proc, timeout, tick_interval, on_tick)
        finally:
            # Kill before reaping: the zombie leader keeps the group id from being reused.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            try:
                proc.wait(timeout=REAP_TIMEOUT)
            except subprocess.TimeoutExpired:
                raise ConnectorFailure(
                    f"{op} command (pid {proc.pid}) did not die within {format_duration(REAP_TIMEOUT)} of SIGKILL",
                    reason="timeout",
                ) from None
        if not finished:
            raise ConnectorFailure(
                f"{op} command timed out after {format_duration(timeout)}; killed it and its process group",
                reason="timeout",
            )
        if proc.returncode != 0:
            raise ConnectorFailure(
                f"{op} command {_exit_text(proc.returncode)}{_tail(err)}", reason="command-failed"
            )
        out.seek(0)
        data = out.read(MAX_OUTPUT_BYTES + 1)
    if len(data) > MAX_OUTPUT_BYTES:
        raise ConnectorFailure(
            f"{op} command printed more than {MAX_OUTPUT_BYTES} bytes", reason="bad-output"
        )
    return data.decode("utf-8", errors="replace")


def _wait_for_exit(
    proc: subprocess.Popen[Any], timeout: float, tick_interval: float, on_tick: Callable[[float], None] | None
) -> bool:
    """True when the command's process exits within ``timeout``; it is left unreaped (Linux)."""
    began = time.monotonic()
    deadline = began + timeout
    try:
        pidfd: int | None = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None  # not Linux, or an old kernel: fall back to Popen.wait, which reaps
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            step = min(tick_interval, remaining)
            if pidfd is not None:
                if select.select([pidfd], [], [], step)[0]:
                    return True
            else:
                try:
                    proc.wait(timeout=step)
                    return True
                except subprocess.TimeoutExpired:
                    pass
            if on_tick is not None and time.monotonic() < deadline:
                on_tick(time.monotonic() - began)
    finally:
        if pidfd is not None:
            os.close(pidfd)


if sys.platform == "linux":
    import ctypes

    _LIBC = ctypes.CDLL(None, use_errno=True)
    _PR_SET_PDEATHSIG = 1

    def _die_with_parent() -> None:
        # Runs in the child between fork and exec. A cancel SIGKILLs the connector's process,
        # which cannot then kill this group: the kernel does it for the direct child.
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

else:  # pragma: no cover - only Linux has PR_SET_PDEATHSIG

    def _die_with_parent() -> None:
        pass


def _exit_text(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _tail(err_file: Any) -> str:
    err_file.seek(0, os.SEEK_END)
    size = err_file.tell()
    err_file.seek(max(0, size - STDERR_TAIL_CHARS))
    text = err_file.read().decode("utf-8", errors="replace")
    lines = text.strip().splitlines()[-STDERR_TAIL_LINES:]
    return ": " + " | ".join(lines) if lines else " (no stderr)"


def seconds_text(value: float) -> str:
    """Seconds as an environment variable gives them: ``30`` for a whole number, else ``2.5``."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))
