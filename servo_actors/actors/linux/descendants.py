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
- **A cgroup per host** (``cgroups.contain_self``), where the machine lets the servo create one: every
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
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable
from typing import Any

from servo_actors.actors.linux import cgroups, processes

PR_SET_CHILD_SUBREAPER = 36
"""prctl option: orphaned descendants of this process are reparented to it, not to init."""
RELEASE_TIMEOUT = 2.0
"""Seconds ``release_session`` waits, by default, for the killed processes to leave their cgroups."""
DRAIN_TIMEOUT = 1.0
"""Seconds ``sweep_until_clean`` may take (it normally takes a few milliseconds)."""
HOST_ENV = "SERVO_ACTORS_CONNECTOR_HOST"
"""Environment variable naming the connector host (``PID:start ticks``) in the programs its
connector runs."""
ENVIRON_LIMIT = 1 << 20
"""Most bytes of a process's environment read when looking for HOST_ENV."""

_log = logging.getLogger(__name__)
_subreaper = False
"""Whether this process became a subreaper (then orphans come to ``sweep``: no tree scan at kill)."""


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
        for kind, directory, _pid in cgroups.host_dirs(sid):
            cgroups.kill(kind, directory, freeze=True)
            if not cgroups.remove(directory):
                left.extend(cgroups.members(directory))
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(processes.KILL_POLL_INTERVAL)
    for kind in cgroups.available_kinds():
        cgroups.remove(kind.session_dir(sid))
    return left


def last_sweep() -> None:
    """The supervisor's last moments when its servo is gone (``lifeline.before_end``): kill every
    child and adopted orphan, and the cgroups of this session, before the session is killed."""
    sweep_until_clean(set())
    sid = os.getsid(0)
    if sid > 1:
        release_session(sid, timeout=RELEASE_TIMEOUT, reap=True)


def release_stale_sessions() -> list[int]:
    """Kill and remove the cgroups of actor systems whose session has no live process left (their
    servo and supervisor were killed together, so nobody released them). Returns their sids.

    Only where every process left in them is visible here: sessions are judged by what this
    process sees in /proc."""
    live_sessions = {stat.sid for stat in processes.all_processes() if stat.alive}
    stale = set()
    for kind in cgroups.available_kinds():
        with contextlib.suppress(OSError):
            for entry in os.scandir(kind.base):
                suffix = entry.name[len(cgroups.SESSION_PREFIX) :]
                if (
                    entry.name.startswith(cgroups.SESSION_PREFIX)
                    and suffix.isdigit()
                    and int(suffix) not in live_sessions
                ):
                    stale.add(int(suffix))
    released = []
    for sid in sorted(stale):
        members = [
            pid for _kind, directory, _host in cgroups.host_dirs(sid) for pid in cgroups.members(directory)
        ]
        # A member this process cannot see is in another PID namespace (another container sharing
        # the hierarchy), whose sessions are not ours to judge: leave them alone.
        if all(pid > 0 and processes.proc_stat(pid) is not None for pid in members):
            release_session(sid, timeout=0.0)
            released.append(sid)
    return released


def mark_environment() -> None:
    """Name this host in its environment (HOST_ENV), which the programs its connector runs inherit:
    without a cgroup, that is how ``sweep`` tells their orphans from those of no live host."""
    me = os.getpid()
    os.environ[HOST_ENV] = f"{me}:{processes.start_ticks(me)}"


def environment_host(pid: int) -> int | None:
    """The live host named (HOST_ENV: ``PID:start ticks``) in the environment ``pid`` was started
    with, or None.

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
        if entry.startswith(prefix):
            host_pid, _, started = entry[len(prefix) :].partition(b":")
            # With its start time: a process that reuses a dead host's PID is not that host.
            if (
                host_pid.isdigit()
                and started.isdigit()
                and processes.start_ticks(int(host_pid)) == int(started)
            ):
                return int(host_pid)
    return None


def owning_host(pid: int) -> int | None:
    """The host ``pid`` belongs to: by its cgroup, else by its environment; None if unknown."""
    found = cgroups.cgroup_host(pid)
    return found if found is not None else environment_host(pid)


# ----- the process tree and the subreaper --------------------------------------------------------


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux 3.4+); False if not possible."""
    global _subreaper
    try:
        _subreaper = processes.libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        _subreaper = False
    return _subreaper


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
    # A host made its cgroup in the session it was started in, ours (should its connector have
    # moved it to a session of its own since, the cgroup is still named by ours).
    sid = os.getsid(0)
    contained = False
    for kind in cgroups.available_kinds():
        if cgroups.kill(kind, kind.host_dir(sid, pid), freeze=False):
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
    their descendants) the orphans that no live started host owns (``owning_host``), reaps dead
    orphans (by PID: never a started child, whose exit status belongs to its reaper), and kills
    and removes the cgroups of hosts that are no longer alive. Does nothing when ``started`` is None (unknown:
    any child might be a host). Never blocks. Returns the PIDs it sent SIGKILL to.
    """
    if started is None:
        return []
    mine = set(started)

    def live(host: int | None) -> bool:
        # Asked only about owners and cgroups found: a cancel of many hosts sweeps once per host.
        return host is not None and host in mine and processes.is_running(host)

    killed: list[int] = []
    by_parent: dict[int, list[int]] | None = None
    for child in own_children():
        if child in mine:
            continue
        stat = processes.proc_stat(child)
        if stat is not None and stat.alive:
            if not live(owning_host(child)):
                by_parent = _children_by_parent() if by_parent is None else by_parent
                processes.kill_pids([child, *tree(child, by_parent)])
                killed.append(child)
            continue
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(child, os.WNOHANG)
    me = os.getpid()
    for kind, directory, pid in cgroups.host_dirs(os.getsid(0)):
        if live(pid) or _anothers_live_host(pid, me):
            continue
        members = cgroups.members(directory)
        if members:
            cgroups.kill(kind, directory, freeze=True)
            killed.extend(members)
        else:
            cgroups.remove(directory)
    return killed


def _anothers_live_host(pid: int, me: int) -> bool:
    """Whether ``pid`` is a live host another supervisor of this session started (a servo of
    several applications has a supervisor each in one session): its cgroup is not ours to judge."""
    stat = processes.proc_stat(pid)
    return stat is not None and stat.alive and stat.ppid != me


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


def unclaimed_children(
    children: Iterable[processes.ProcStat], claimed: set[int], hosts: set[int] | None
) -> list[int]:
    """Live children of the supervisor that are no generation's known process and no host at all.

    The supervisor's fallback when a generation's PID was never learnt: such a process is killed,
    but never a host Thespian started (``hosts``: a sibling's fresh process, PID known or not);
    with ``hosts`` unknown, nothing is.
    """
    if hosts is None:
        return []
    return [c.pid for c in children if c.alive and c.pid not in claimed and c.pid not in hosts]
