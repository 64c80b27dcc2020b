"""Linux process facts and kills, read from /proc: sessions, liveness, parent death, listening sockets.

The actor system's processes all share one session (Thespian's admin calls ``setsid``), so the
session id finds every process of one servo's system and nothing else. A zombie counts as gone:
it holds no resources and only its parent can reap it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import select
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "KILL_POLL_INTERVAL",
    "KILL_SESSION_TIMEOUT",
    "PR_SET_PDEATHSIG",
    "ProcStat",
    "all_processes",
    "children_of",
    "exit_status_nowait",
    "is_running",
    "kill_pids",
    "kill_process_group",
    "kill_session",
    "libc",
    "listeners_on",
    "listening_sockets",
    "proc_stat",
    "session_members",
    "set_parent_death_signal",
    "start_ticks",
    "stop_child",
    "wait_for_exit_or",
]

PR_SET_PDEATHSIG = 1
"""prctl option: a signal the kernel sends this process when its parent thread exits."""
KILL_POLL_INTERVAL = 0.01
"""Seconds between checks while waiting for killed processes to disappear."""
KILL_SESSION_TIMEOUT = 2.0
"""Seconds ``kill_session`` waits, by default, for the killed processes to disappear."""


@dataclass(frozen=True)
class ProcStat:
    pid: int
    state: str
    ppid: int
    pgid: int
    sid: int
    start_ticks: int

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")


def proc_stat(pid: int) -> ProcStat | None:
    """``/proc/PID/stat`` parsed, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name is in parentheses and may itself contain spaces or parentheses.
    fields = raw[raw.rfind(")") + 2 :].split()
    if len(fields) < 20:  # read as the process vanished: nothing to parse
        return None
    return ProcStat(
        pid=pid,
        state=fields[0],
        ppid=int(fields[1]),
        pgid=int(fields[2]),
        sid=int(fields[3]),
        start_ticks=int(fields[19]),
    )


def start_ticks(pid: int) -> int | None:
    """When the process started (clock ticks since boot): with the PID it names one process for good."""
    stat = proc_stat(pid)
    return stat.start_ticks if stat else None


def is_running(pid: int, started: int | None = None) -> bool:
    """Whether ``pid`` is a live (non-zombie) process, and the same one that started at ``started``."""
    stat = proc_stat(pid)
    if stat is None or not stat.alive:
        return False
    return started is None or stat.start_ticks == started


def all_processes() -> list[ProcStat]:
    stats = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = proc_stat(int(entry))
            if stat is not None:
                stats.append(stat)
    return stats


def session_members(sid: int, *, include_zombies: bool = False) -> list[int]:
    """PIDs of the processes in session ``sid`` (live ones unless ``include_zombies``)."""
    return sorted(s.pid for s in all_processes() if s.sid == sid and (include_zombies or s.alive))


def children_of(ppid: int) -> list[ProcStat]:
    """Direct children of ``ppid``, zombies included."""
    return [s for s in all_processes() if s.ppid == ppid]


def kill_process_group(pgid: int) -> None:
    """SIGKILL every process in the group ``pgid``; a group already gone is fine."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_pids(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def kill_session(
    sid: int, *, exclude: Iterable[int] = (), timeout: float = KILL_SESSION_TIMEOUT, own: bool = False
) -> list[int]:
    """SIGKILL every live process of session ``sid`` but ``exclude``; wait up to ``timeout`` seconds.

    Returns the PIDs still alive at the end (normally none). Refuses the init session and, unless
    ``own`` is set, the caller's own session: that would take the caller's terminal with it.
    """
    if sid <= 1 or (not own and sid == os.getsid(0)):
        raise ValueError(f"refusing to kill session {sid}: not an actor system's session")
    keep = set(exclude)
    deadline = time.monotonic() + timeout
    while True:
        targets = [pid for pid in session_members(sid) if pid not in keep]
        if not targets or time.monotonic() >= deadline:
            return targets
        # Groups first: a connector's subprocesses may sit in its group under another session.
        for pid in targets:
            stat = proc_stat(pid)
            if stat is not None and stat.pgid == pid:
                kill_process_group(pid)
        kill_pids(targets)
        time.sleep(KILL_POLL_INTERVAL)


@functools.cache
def libc() -> ctypes.CDLL:
    """The C library already loaded into this process (for prctl)."""
    # The symbols already loaded into this process: no find_library (which runs ldconfig).
    # Cached, and so inherited by every process forked after the first call.
    return ctypes.CDLL(None, use_errno=True)


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent (thread) exits. Linux only."""
    try:
        return libc().prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def exit_status_nowait(pid: int) -> int | None:
    """Exit code of our exited child ``pid`` without reaping it (its reaper still gets it).

    Negative for a signal, as ``multiprocessing`` reports it; None while it runs or if it is not
    our child.
    """
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except (ChildProcessError, OSError):
        return None
    if info is None:
        return None
    if info.si_code == os.CLD_EXITED:
        return info.si_status
    return -info.si_status


def wait_for_exit_or(pids: Iterable[int], fds: Iterable[int], timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for one of ``pids`` to end or one of ``fds`` to be readable.

    Through pidfds (Linux 5.3+), so an exit ends the wait at once; a PID already gone ends it
    before it begins. Returns False, without waiting, where this kernel or Python has no pidfds:
    the caller must then look for exits itself.
    """
    if not hasattr(os, "pidfd_open"):
        return False
    opened: list[int] = []
    try:
        for pid in pids:
            try:
                opened.append(os.pidfd_open(pid))
            except ProcessLookupError:
                return True
            except OSError:  # ENOSYS: a kernel without them
                return False
        select.select([*opened, *fds], [], [], max(0.0, timeout))
    finally:
        for fd in opened:
            os.close(fd)
    return True


def stop_child(proc: subprocess.Popen[Any], timeout: float) -> None:
    """SIGTERM ``proc`` (a process this one started) and wait; SIGKILL it if it outlives ``timeout``."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


def _socket_inodes(pid: int) -> set[int]:
    inodes: set[int] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except (FileNotFoundError, PermissionError):
        return inodes
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def _hex_address(text: str) -> str:
    """The printable IP of a /proc/net/tcp(6) address field (little-endian hex words)."""
    raw = bytes.fromhex(text)
    if len(raw) == 4:
        return ".".join(str(b) for b in raw[::-1])
    words = [raw[i : i + 4][::-1] for i in range(0, 16, 4)]
    joined = b"".join(words)
    if joined[:12] == b"\x00" * 10 + b"\xff\xff":
        return ".".join(str(b) for b in joined[12:])
    return ":".join(joined[i : i + 2].hex() for i in range(0, 16, 2))


def listening_sockets(pid: int) -> list[tuple[str, int]]:
    """``(address, port)`` of every TCP socket ``pid`` holds that is listening (IPv4 and IPv6).

    Read from the process's own network namespace (``/proc/PID/net``): a member system in another
    namespace is seen as it is there."""
    inodes = _socket_inodes(pid)
    found = []
    for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
        try:
            with open(table) as handle:
                lines = handle.readlines()[1:]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        for line in lines:
            cols = line.split()
            # st "0A" is TCP_LISTEN; column 9 is the socket's inode.
            if cols[3] == "0A" and int(cols[9]) in inodes:
                address, port = cols[1].split(":")
                found.append((_hex_address(address), int(port, 16)))
    return found


def listeners_on(port: int, pids: Iterable[int], *, ipv6: bool = False) -> list[int]:
    """Those of ``pids`` that hold a TCP socket listening on ``port`` (IPv4, or IPv6 with ``ipv6``),
    the table read once (the kernel takes milliseconds to write it), from the first one's network
    namespace (``pids`` share one)."""
    pids = list(pids)
    if not pids:
        return []
    listening: set[int] = set()
    for table in (f"/proc/{pids[0]}/net/tcp6" if ipv6 else f"/proc/{pids[0]}/net/tcp",):
        try:
            with open(table) as handle:
                lines = handle.readlines()[1:]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        local = f":{port:04X} "  # the local address's port, as the table writes it
        for line in lines:
            if local not in line:
                continue  # most lines: split only the few that may match
            cols = line.split()
            # st "0A" is TCP_LISTEN; column 9 is the socket's inode.
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                listening.add(int(cols[9]))
    return [pid for pid in pids if listening & _socket_inodes(pid)] if listening else []
