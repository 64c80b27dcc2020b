"""Agent processes: start with a marker, find every process carrying it, read CPU time, stop by PID.

Every process an agent starts (servo-actors' actor system and connectors, anything servox might
spawn) inherits its environment, so a unique ``MARKER_VAR=<hex>`` there finds all of them, and
nothing else, in /proc. Only processes carrying a marker this benchmark created are ever killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

MARKER_VAR = "SERVO_BENCH_LOOP_MARK"
STOP_TIMEOUT = 20.0
"""Seconds an agent gets to exit after SIGTERM before it is SIGKILLed."""
GONE_TIMEOUT = 5.0
"""Seconds the processes of a stopped agent get to disappear before they count as leaked."""
POLL_INTERVAL = 0.02
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` from the state field on (the name in parentheses may hold spaces)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()


def memory_kib(pid: int) -> dict[str, int] | None:
    """``{"pss": KiB, "rss": KiB}`` of ``pid`` from ``/proc/PID/smaps_rollup``; None once it is gone.

    PSS divides each page shared by N processes by N, so the PSS of all of an agent's processes
    adds up to the memory they hold together; their RSS counts a shared page once per process.
    """
    found: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as handle:
            for line in handle:
                key, _, rest = line.partition(b":")
                if key in (b"Pss", b"Rss"):
                    found[key.decode().lower()] = int(rest.split()[0])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return found if len(found) == 2 else None


def alive(pid: int) -> bool:
    """Running, not a zombie (a zombie holds nothing; only its parent can reap it)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of every thread of ``pid`` so far (seconds), None if it is gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    # stat(5): utime and stime are fields 14 and 15; fields[0] here is field 3 (state).
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def scheduler_seconds(pid: int) -> float | None:
    """On-CPU time of the live threads of ``pid`` (seconds, nanosecond precision), None if it is gone.

    From ``/proc/PID/task/*/schedstat``; unlike utime+stime (whole clock ticks) it resolves the
    hundredths of a percent an idle agent uses, but it misses threads that ended in the meantime.
    """
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    total = 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as handle:
                total += int(handle.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9


def parent_pid(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def thread_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def marked_pids(marker: str) -> list[int]:
    """Live processes whose environment holds ``MARKER_VAR=marker``."""
    needle = f"{MARKER_VAR}={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
        except OSError:
            continue
        if needle in environ and alive(int(entry)):
            found.append(int(entry))
    return sorted(found)


def wait_gone(marker: str, timeout: float = GONE_TIMEOUT) -> list[int]:
    """Wait until no process carries ``marker``; the PIDs still alive after ``timeout``."""
    deadline = time.monotonic() + timeout
    while (left := marked_pids(marker)) and time.monotonic() < deadline:
        time.sleep(POLL_INTERVAL)
    return left


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@dataclass
class AgentProcess:
    """One agent (``servo-actors ... run`` or ``servo run``) started by the benchmark."""

    agent: str
    popen: subprocess.Popen[bytes]
    marker: str
    started_at: float
    """``time.time()`` just before the exec: the same clock as the optimizer's request log."""
    log_path: Path
    exit_code: int | None = None
    leaked: list[int] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM by PID, SIGKILL after ``timeout``; then every process of it must be gone.

        Survivors carrying the marker are SIGKILLed and recorded in ``leaked`` (the report says so).
        """
        if self.exit_code is not None:
            return self.exit_code
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
        self.exit_code = self.popen.wait(timeout)
        self.leaked = wait_gone(self.marker)
        if self.leaked:
            kill_pids(self.leaked)
        return self.exit_code

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def launch(agent: str, command: list[str], env: dict[str, str], cwd: Path, log_path: Path) -> AgentProcess:
    """Start ``command`` with a fresh marker in its environment, output appended to ``log_path``."""
    marker = uuid.uuid4().hex
    with open(log_path, "ab") as log:  # the child holds its own descriptor; ours can close
        started_at = time.time()
        popen = subprocess.Popen(
            command,
            env={**env, MARKER_VAR: marker},
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return AgentProcess(agent, popen, marker, started_at, log_path)
