"""A cgroup per connector host: what it starts stays in it, whatever session or group it moves to.

Where the machine lets the servo create cgroups (root, or a delegated subtree), each host moves
itself into its own before the connector runs (``contain_self``), and the whole cgroup is killed
at once: cgroup v2 by ``cgroup.kill`` (Linux 5.14+), cgroup v1 through the freezer hierarchy
(freeze, kill every member, thaw). Cgroups live under the cgroup the servo started in, one
directory per actor system (named by its session id) and one per host (named by its PID):
``servo-actors-<sid>/host-<pid>``. The policy (what is killed when) is ``descendants``'s.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from servo_actors.actors.linux import processes

FREEZE_TIMEOUT = 0.5
"""Seconds a cgroup-v1 kill waits for the freezer to report FROZEN before killing anyway."""
FREEZE_POLL_INTERVAL = 0.005
SESSION_PREFIX = "servo-actors-"
HOST_PREFIX = "host-"
TRACKING_MODES = ("auto", "cgroup-v2", "cgroup-v1", "subreaper")
"""supervisor.descendant_tracking: a cgroup kind, the first allowed (auto), or none (subreaper)."""

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CgroupKind:
    """One way of containing hosts: a hierarchy, and where this process sits in it."""

    name: str
    """``cgroup-v2`` or ``cgroup-v1``."""
    base: Path
    """The cgroup this process was started in (host cgroups go below it)."""

    def session_dir(self, sid: int) -> Path:
        return self.base / f"{SESSION_PREFIX}{sid}"

    def host_dir(self, sid: int, pid: int) -> Path:
        return self.session_dir(sid) / f"{HOST_PREFIX}{pid}"


def parse_mounts(mounts_text: str) -> tuple[Path | None, Path | None]:
    """(cgroup2 mount, cgroup-v1 freezer mount) of a ``/proc/self/mounts`` text."""
    v2 = v1 = None
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        mount, fstype, options = fields[1], fields[2], fields[3].split(",")
        if fstype == "cgroup2" and v2 is None:
            v2 = Path(mount)
        elif fstype == "cgroup" and "freezer" in options and v1 is None:
            v1 = Path(mount)
    return v2, v1


def parse_own_paths(cgroup_text: str) -> tuple[str | None, str | None]:
    """(cgroup2 path, freezer path) of this process from a ``/proc/self/cgroup`` text."""
    v2 = v1 = None
    for line in cgroup_text.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and controllers == "":
            v2 = path
        elif "freezer" in controllers.split(","):
            v1 = path
    return v2, v1


def read_text(path: str | Path) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


@functools.cache
def available_kinds() -> tuple[CgroupKind, ...]:
    """The cgroup kinds this process may create cgroups in, best first (cgroup-v2 needs
    ``cgroup.kill``, Linux 5.14+). Empty when none is mounted or writable (not root, no delegation).

    Cached: looked up once per process (a host inherits its supervisor's answer)."""
    v2_mount, v1_mount = parse_mounts(read_text("/proc/self/mounts"))
    v2_path, v1_path = parse_own_paths(read_text("/proc/self/cgroup"))
    found = []
    if v2_mount is not None and v2_path is not None:
        base = v2_mount / v2_path.lstrip("/")
        if os.access(base, os.W_OK) and ((base / "cgroup.kill").exists() or _kill_file_below(base)):
            found.append(CgroupKind("cgroup-v2", base))
    if v1_mount is not None and v1_path is not None:
        base = v1_mount / v1_path.lstrip("/")
        if os.access(base, os.W_OK) and (base / "cgroup.procs").exists():
            found.append(CgroupKind("cgroup-v1", base))
    return tuple(found)


def _kill_file_below(base: Path) -> bool:
    # The root cgroup has no cgroup.kill of its own: a probe cgroup shows whether the kernel has it.
    probe = base / f"{SESSION_PREFIX}probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        return (probe / "cgroup.kill").exists()
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def choose_kind(mode: str) -> CgroupKind | None:
    """The cgroup kind for ``mode`` (see TRACKING_MODES), or None: subreaper and process tree only.

    Raises ValueError for an unknown mode. A mode naming a kind this machine does not allow gives
    None too (the caller logs it): the other two mechanisms still run.
    """
    if mode not in TRACKING_MODES:
        raise ValueError(
            f"unknown descendant tracking {mode!r} (expected one of {', '.join(TRACKING_MODES)})"
        )
    if mode == "subreaper":
        return None
    for kind in available_kinds():
        if mode in ("auto", kind.name):
            return kind
    return None


def contain_self(mode: str) -> CgroupKind | None:
    """Move this process (a host, before any connector code runs) into a cgroup of its own.

    Returns the kind used, or None when ``mode`` is ``subreaper`` or no cgroup could be made (the
    reason is logged; the process tree and the subreaper still cover the host).
    """
    kind = choose_kind(mode)
    if kind is None:
        return None
    target = kind.host_dir(os.getsid(0), os.getpid())
    try:
        try:
            os.mkdir(target)
        except FileExistsError:  # left by a dead host whose PID this one reuses: not ours to keep
            kill(kind, target, freeze=True)
        except FileNotFoundError:  # the first host of this actor system makes the session's
            target.mkdir(parents=True, exist_ok=True)
        write_control(target / "cgroup.procs", "0\n")
    except OSError as exc:
        _log.warning("no %s cgroup for this connector (%s); relying on the subreaper", kind.name, exc)
        with contextlib.suppress(OSError):
            target.rmdir()
        return None
    return kind


def write_control(path: Path, text: str) -> None:
    """Write a cgroup control file in one system call (raises OSError, FileNotFoundError if the
    cgroup is gone)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def members(directory: Path) -> list[int]:
    return [int(word) for word in read_text(directory / "cgroup.procs").split() if word.isdigit()]


def kill(kind: CgroupKind, directory: Path, *, freeze: bool) -> bool:
    """SIGKILL every process in ``directory`` (a host cgroup); gone in an instant with cgroup v2.

    False when nothing was killed this way: there is no such cgroup (the host never made one, or it
    is removed already) or it refused the write (the caller then kills by process tree)."""
    if kind.name == "cgroup-v2":
        try:
            write_control(directory / "cgroup.kill", "1\n")
        except OSError:
            return False
        return True
    if not directory.is_dir():
        return False
    state = directory / "freezer.state"
    frozen = False
    if freeze:
        # Frozen, nothing in it can fork between reading the members and killing them.
        with contextlib.suppress(OSError):
            state.write_text("FROZEN\n")
            frozen = True
        deadline = time.monotonic() + FREEZE_TIMEOUT
        while frozen and read_text(state).strip() == "FREEZING" and time.monotonic() < deadline:
            time.sleep(FREEZE_POLL_INTERVAL)
    processes.kill_pids(members(directory))
    if frozen:
        with contextlib.suppress(OSError):
            state.write_text("THAWED\n")  # the kills are delivered as the processes thaw
    return True


def remove(directory: Path) -> bool:
    """rmdir a cgroup; False while processes remain in it (EBUSY)."""
    try:
        directory.rmdir()
    except FileNotFoundError:
        return True
    except OSError as exc:
        if exc.errno in (errno.EBUSY, errno.ENOTEMPTY):
            return False
        raise
    return True


def host_dirs(sid: int) -> list[tuple[CgroupKind, Path, int]]:
    found = []
    for kind in available_kinds():
        session = kind.session_dir(sid)
        with contextlib.suppress(OSError):
            for entry in os.scandir(session):
                name = entry.name
                if entry.is_dir(follow_symlinks=False) and name.startswith(HOST_PREFIX):
                    suffix = name[len(HOST_PREFIX) :]
                    if suffix.isdigit():
                        found.append((kind, Path(entry.path), int(suffix)))
    return found


def cgroup_host(pid: int) -> int | None:
    """The host whose cgroup ``pid`` is in (the PID in its ``host-<pid>`` name), or None."""
    for line in read_text(f"/proc/{pid}/cgroup").splitlines():
        path = line.split(":", 2)[-1]
        parent, _, leaf = path.rpartition("/")
        if leaf.startswith(HOST_PREFIX) and parent.rpartition("/")[2].startswith(SESSION_PREFIX):
            suffix = leaf[len(HOST_PREFIX) :]
            if suffix.isdigit():
                return int(suffix)
    return None
