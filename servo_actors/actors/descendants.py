"""Every process a connector starts dies with it, whatever session or process group it moved to.

A connector's host is its own process group, and the supervisor kills that group; but a child
that calls ``setsid`` (or ``setpgid``) leaves the group, and a double-forked daemon also leaves
the process tree. Three mechanisms, each closing what the one before leaves open:

- **The process tree** (``kill_tree``): a host is killed together with every process whose chain
  of parents leads to it, read from ``/proc`` (only where neither of the next two is available).
- **A child subreaper** (``become_subreaper``; Linux ``PR_SET_CHILD_SUBREAPER``): the supervisor
  adopts every orphaned descendant instead of init, so a double-forked daemon, or a child that
  forked while its parent was being killed, becomes the supervisor's child. ``sweep`` kills
  (and reaps, by PID only: Thespian reaps the hosts itself) every such child that belongs to no
  live host.
- **A cgroup per host** (``contain_self``), where the machine lets the servo create one: every
  descendant stays in it whatever it does with sessions and groups, and the whole cgroup is
  killed at once (cgroup v2 ``cgroup.kill``; cgroup v1 freezer: freeze, kill, thaw).

An orphan of a live connector is left alone until its connector is killed, if it can be told
apart: by its cgroup, or else by the host's PID in the environment it was started with (HOST_ENV,
which every program a connector runs inherits unless given another environment). An orphan
that names no live host is killed at the next sweep.

Exits: the supervisor sweeps until no orphan is left before it reports its children stopped and
when its owner is gone (``sweep_until_clean``), and releases the system's cgroups
(``release_session``), as does the servo after killing its actor system; a supervisor starting
releases those of systems with no process left (``release_stale_sessions``).

Cgroups live under the cgroup the servo started in, one directory per actor system (named by its
session id) and one per host (named by its PID): ``servo-actors-<sid>/host-<pid>``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servo_actors.actors import processes

PR_SET_CHILD_SUBREAPER = 36
"""prctl option: orphaned descendants of this process are reparented to it, not to init."""
FREEZE_TIMEOUT = 0.5
"""Seconds a cgroup-v1 kill waits for the freezer to report FROZEN before killing anyway."""
FREEZE_POLL_INTERVAL = 0.005
RELEASE_TIMEOUT = 2.0
"""Seconds ``release_session`` waits, by default, for the killed processes to leave their cgroups."""
DRAIN_TIMEOUT = 1.0
"""Seconds ``sweep_until_clean`` may take (it normally takes a few milliseconds)."""
SESSION_PREFIX = "servo-actors-"
HOST_PREFIX = "host-"
TRACKING_MODES = ("auto", "cgroup-v2", "cgroup-v1", "subreaper")
HOST_ENV = "SERVO_ACTORS_CONNECTOR_HOST"
"""Environment variable naming the connector host (its PID) in the programs its connector runs."""
ENVIRON_LIMIT = 1 << 20
"""Most bytes of a process's environment read when looking for HOST_ENV."""

_log = logging.getLogger(__name__)
_subreaper = False
"""Whether this process became a subreaper (then orphans come to ``sweep``: no tree scan at kill)."""


# ----- cgroups -----------------------------------------------------------------------------------


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


def _mounts(mounts_text: str) -> tuple[Path | None, Path | None]:
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


def _own_paths(cgroup_text: str) -> tuple[str | None, str | None]:
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


def _read(path: str | Path) -> str:
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
    v2_mount, v1_mount = _mounts(_read("/proc/self/mounts"))
    v2_path, v1_path = _own_paths(_read("/proc/self/cgroup"))
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
        target.mkdir(parents=True, exist_ok=True)
        (target / "cgroup.procs").write_text("0\n")
    except OSError as exc:
        _log.warning("no %s cgroup for this connector (%s); relying on the subreaper", kind.name, exc)
        with contextlib.suppress(OSError):
            target.rmdir()
        return None
    return kind


def _members(directory: Path) -> list[int]:
    return [int(word) for word in _read(directory / "cgroup.procs").split() if word.isdigit()]


def _kill_cgroup(kind: CgroupKind, directory: Path, *, freeze: bool) -> None:
    """SIGKILL every process in ``directory`` (a host cgroup); gone in an instant with cgroup v2."""
    if kind.name == "cgroup-v2":
        with contextlib.suppress(OSError):
            (directory / "cgroup.kill").write_text("1\n")
        return
    state = directory / "freezer.state"
    frozen = False
    if freeze:
        # Frozen, nothing in it can fork between reading the members and killing them.
        with contextlib.suppress(OSError):
            state.write_text("FROZEN\n")
            frozen = True
        deadline = time.monotonic() + FREEZE_TIMEOUT
        while frozen and _read(state).strip() == "FREEZING" and time.monotonic() < deadline:
            time.sleep(FREEZE_POLL_INTERVAL)
    processes.kill_pids(_members(directory))
    if frozen:
        with contextlib.suppress(OSError):
            state.write_text("THAWED\n")  # the kills are delivered as the processes thaw


def _remove(directory: Path) -> bool:
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


def _host_dirs(sid: int) -> list[tuple[CgroupKind, Path, int]]:
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


def release_session(sid: int, *, timeout: float = RELEASE_TIMEOUT, reap: bool = False) -> list[int]:
    """Kill every process in the cgroups of actor system ``sid`` and remove them all.

    For the exits of a servo: after its actor system is killed (the servo), or when its owner is
    gone (the supervisor, with ``reap``: it reaps every exited child of its own first, as a zombie
    keeps its cgroup busy and nobody else would reap it before the supervisor itself is gone).
    Returns the PIDs still in a cgroup after ``timeout`` seconds (normally none).
    """
    deadline = time.monotonic() + timeout
    while True:
        if reap:
            for child in own_children():
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(child, os.WNOHANG)
        left: list[int] = []
        for kind, directory, _pid in _host_dirs(sid):
            _kill_cgroup(kind, directory, freeze=True)
            if not _remove(directory):
                left.extend(_members(directory))
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(processes.KILL_POLL_INTERVAL)
    for kind in available_kinds():
        _remove(kind.session_dir(sid))
    return left


def release_stale_sessions() -> list[int]:
    """Kill and remove the cgroups of actor systems whose session has no live process left (their
    servo and supervisor were killed together, so nobody released them). Returns their sids."""
    live_sessions = {stat.sid for stat in processes.all_processes() if stat.alive}
    stale = set()
    for kind in available_kinds():
        with contextlib.suppress(OSError):
            for entry in os.scandir(kind.base):
                suffix = entry.name[len(SESSION_PREFIX) :]
                if (
                    entry.name.startswith(SESSION_PREFIX)
                    and suffix.isdigit()
                    and int(suffix) not in live_sessions
                ):
                    stale.add(int(suffix))
    for sid in sorted(stale):
        release_session(sid, timeout=0.0)
    return sorted(stale)


def mark_environment() -> None:
    """Name this host in its environment (HOST_ENV), which the programs its connector runs inherit:
    without a cgroup, that is how ``sweep`` tells their orphans from those of no live host."""
    os.environ[HOST_ENV] = str(os.getpid())


def environment_host(pid: int) -> int | None:
    """The host named (HOST_ENV) in the environment ``pid`` was started with, or None.

    The environment a program was exec'd with: a child that a connector forks without exec
    shows its host's own, which the host cannot change (nor can it name the host); a program
    started with a cleared environment names none.
    """
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = handle.read(ENVIRON_LIMIT)
    except OSError:
        return None
    prefix = HOST_ENV.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix) and entry[len(prefix) :].isdigit():
            return int(entry[len(prefix) :])
    return None


def owning_host(pid: int) -> int | None:
    """The host ``pid`` belongs to: by its cgroup, else by its environment; None if unknown."""
    found = cgroup_host(pid)
    return found if found is not None else environment_host(pid)


def cgroup_host(pid: int) -> int | None:
    """The host whose cgroup ``pid`` is in (the PID in its ``host-<pid>`` name), or None."""
    for line in _read(f"/proc/{pid}/cgroup").splitlines():
        path = line.split(":", 2)[-1]
        parent, _, leaf = path.rpartition("/")
        if leaf.startswith(HOST_PREFIX) and parent.rpartition("/")[2].startswith(SESSION_PREFIX):
            suffix = leaf[len(HOST_PREFIX) :]
            if suffix.isdigit():
                return int(suffix)
    return None


# ----- the process tree and the subreaper --------------------------------------------------------


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux 3.4+); False if not possible."""
    global _subreaper
    try:
        _subreaper = processes.libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        _subreaper = False
    return _subreaper


def is_subreaper() -> bool:
    """Whether this process is a child subreaper (for tests and status)."""
    value = ctypes.c_int(0)
    try:
        ok = processes.libc().prctl(PR_SET_CHILD_SUBREAPER + 1, ctypes.byref(value), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    return ok and value.value == 1


def own_children() -> list[int]:
    """PIDs of this process's children (any thread's), zombies included."""
    found: set[int] = set()
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        tasks = []
    listed = False
    for tid in tasks:
        text = _read(f"/proc/self/task/{tid}/children")
        listed = listed or os.path.exists(f"/proc/self/task/{tid}/children")
        found.update(int(word) for word in text.split())
    if not listed:  # a kernel without CONFIG_PROC_CHILDREN: scan every process
        found = {s.pid for s in processes.children_of(os.getpid())}
    return sorted(found)


def _children_by_parent() -> dict[int, list[int]]:
    by_parent: dict[int, list[int]] = {}
    for stat in processes.all_processes():
        if stat.alive:
            by_parent.setdefault(stat.ppid, []).append(stat.pid)
    return by_parent


def tree(root: int, by_parent: dict[int, list[int]] | None = None) -> list[int]:
    """``root``'s live descendants (not ``root`` itself), read from ``/proc``; parents first."""
    if by_parent is None:
        by_parent = _children_by_parent()
    found: list[int] = []
    frontier = [root]
    while frontier:
        children = by_parent.get(frontier.pop(), [])
        found.extend(children)
        frontier.extend(children)
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL host ``pid``, its process group, and its descendants: its cgroup's members if it has
    one; else, in a process that is not a subreaper, every process whose chain of parents leads to
    it (in a subreaper its children come to ``sweep`` as orphans once it is dead: no /proc scan,
    which costs milliseconds per kill on a busy machine).

    Non-blocking and safe to repeat.
    """
    stat = processes.proc_stat(pid)
    sid = stat.sid if stat is not None else os.getsid(0)
    contained = False
    for kind in available_kinds():
        directory = kind.host_dir(sid, pid)
        if directory.is_dir():
            _kill_cgroup(kind, directory, freeze=False)
            contained = True
    members = [] if contained or _subreaper else tree(pid)
    processes.kill_pids([pid])
    processes.kill_process_group(pid)
    processes.kill_pids(members)


def thespian_children(actor: Any) -> set[int] | None:
    """PIDs of the child actors Thespian started for ``actor`` and has not reaped yet (it records
    each at ``createActor``, before the child runs); None when its internals are not as in 4.0.1."""
    manager = getattr(actor, "_myRef", None)
    if manager is None:
        return None
    pids = set()
    for info in getattr(manager, "_child_procs", None) or ():
        pid = getattr(getattr(info, "childProc", None), "pid", None)
        if not isinstance(pid, int):
            return None
        pids.add(pid)
    return pids


def sweep(started: Iterable[int] | None) -> list[int]:
    """Kill what no live host owns: the supervisor's periodic check, and after every kill.

    ``started``: the PIDs of every child process the caller started itself and has not reaped
    (``thespian_children``); every other child of the caller is an adopted orphan. Kills (with
    their descendants) the orphans that no live started host owns (``owning_host``), reaps dead orphans
    (by PID: never a started child, whose exit status belongs to its reaper), and kills and removes
    the cgroups of hosts that are no longer alive. Does nothing when ``started`` is None (unknown:
    any child might be a host). Never blocks. Returns the PIDs it sent SIGKILL to.
    """
    if started is None:
        return []
    mine = set(started)
    live = {pid for pid in mine if processes.is_running(pid)}
    killed: list[int] = []
    by_parent: dict[int, list[int]] | None = None
    for child in own_children():
        if child in mine:
            continue
        stat = processes.proc_stat(child)
        if stat is not None and stat.alive:
            if owning_host(child) not in live:
                by_parent = _children_by_parent() if by_parent is None else by_parent
                processes.kill_pids([child, *tree(child, by_parent)])
                killed.append(child)
            continue
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(child, os.WNOHANG)
    for kind, directory, pid in _host_dirs(os.getsid(0)):
        if pid in live:
            continue
        members = _members(directory)
        if members:
            _kill_cgroup(kind, directory, freeze=True)
            killed.extend(members)
        else:
            _remove(directory)
    return killed


def sweep_until_clean(started: Iterable[int] | None, timeout: float = DRAIN_TIMEOUT) -> list[int]:
    """``sweep`` until no orphan is left, alive or unreaped: for the supervisor's last moments
    (all hosts stopped, or the owner gone), when no later sweep will come.

    A process killed while it forks leaves an orphan that arrives only after its parent exits;
    once every orphan is dead and reaped, nothing more can come. Blocks at most ``timeout``
    seconds. ``started`` as for ``sweep``; an empty one when the caller is about to exit (then
    its hosts are killed and reaped too). Returns the PIDs of the orphans still there (normally
    none).
    """
    if started is None:
        return []
    mine = set(started)
    deadline = time.monotonic() + timeout
    while True:
        sweep(mine)
        left = [child for child in own_children() if child not in mine]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(processes.KILL_POLL_INTERVAL)
