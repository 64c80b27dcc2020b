"""The supervisor's child processes: spawning, killing, forgetting and polling them.

``SupervisedProcesses`` is held by the ``Supervisor`` actor (``actor.py``): the part that is
about processes rather than rules or messages, apart so that the actor reads as the translation
it is (messages in, the rules' effects out). It holds:

- which process each generation is (``ChildProcess``: address, PID and start time), and when one
  is gone: a ``ChildActorExited`` is believed only for a process that no longer runs, and every
  process is looked at on each tick, as Thespian misses notices when several children die at
  once. A kill is confirmed the same way (the rules repeat ``Kill`` until ``ChildExited``).
- what the connectors leave behind: the supervisor is a child subreaper, sweeps orphans after
  every exit and on every tick, and sweeps until clean before it answers a stop
  (``descendants``).
- the children placed on member systems (``remote``, a ``RemoteHosts`` once the supervisor has its
  convention): started and killed there by their member, known by where they run (``where``),
  never by a local PID;
- the spawns the rules asked for and not yet performed (``spawns``), forked a few per turn of the
  actor's message loop: ``spawn_ready`` is readable while any wait (``keep_spawn_turn_due``).

It imports no Thespian: it is given the actor (``ParentActor``: its ``send`` and
``createActor``, and Thespian's records of its children, which ``child_actors`` reads).
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from servo_actors.actors.convention.remote_hosts import (
    HostLost,
    Placeable,
    RemoteGone,
    RemoteHosts,
    RemoteSpawned,
    RemoteSpawnFailed,
    Unplaced,
)
from servo_actors.actors.host.actor import ConnectorHost, forking
from servo_actors.actors.linux import descendants, processes
from servo_actors.actors.rules import messages as m
from servo_actors.actors.rules.supervision_events import (
    ChildExited,
    ChildHostLost,
    ChildStarted,
    ChildStartupFailed,
    ChildUnplaced,
    Event,
    HostAvailable,
    Kill,
    Spawn,
)
from servo_actors.actors.transport import child_actors

__all__ = ["ChildProcess", "ParentActor", "SupervisedProcesses", "now"]


@dataclass
class ChildProcess:
    """The process of one generation of a child, as the shell knows it (until it is gone)."""

    name: str
    generation: int
    address: Any
    pid: int | None
    started: int | None
    """Start time (clock ticks since boot): with the PID it names this process and no later one."""
    where: str | None = None
    """The member system it runs on (placed children); None: here."""
    outbox: list[Any] | None = None
    """Messages for a placed child whose address is not known yet (sent once it is)."""


def now() -> float:
    """The supervisor's clock (monotonic seconds), the one its rules are handed."""
    return time.monotonic()


class ParentActor(Protocol):
    """The Thespian actor whose children these are (the ``Supervisor``)."""

    def send(self, target: Any, message: Any) -> None: ...

    def createActor(self, actorClass: Any) -> Any: ...  # noqa: N802, N803  # Thespian's names


class SupervisedProcesses:
    """The child processes of one supervisor (see module docstring)."""

    def __init__(self, actor: ParentActor) -> None:
        self._actor = actor
        self._processes: dict[int, ChildProcess] = {}
        self._forget: list[tuple[float, Any]] = []
        """(When, address) of the children gone: Thespian forgets them a tick later (``forget_gone``)."""
        self.remote: RemoteHosts | None = None
        """The children on member systems, once the supervisor has a convention."""
        self.spawns: deque[Spawn] = deque()
        """Spawns the rules asked for, not performed yet (``supervisor.SPAWNS_PER_TURN``)."""
        self.spawn_ready, self._spawn_signal = os.pipe()
        os.set_blocking(self._spawn_signal, False)
        self.sweep_due = False
        """A host is gone since the last sweep: sweep once at the end of this message."""

    def get(self, generation: int) -> ChildProcess | None:
        """The process of ``generation``, while it is known."""
        return self._processes.get(generation)

    def local_pids(self) -> list[int]:
        """PIDs of the children that run here (not on a member system)."""
        return [p.pid for p in self._processes.values() if p.pid is not None and p.where is None]

    def keep_spawn_turn_due(self) -> None:
        """Keep ``spawn_ready`` readable while spawns wait (looked at after every message)."""
        if not select.select([self.spawn_ready], [], [], 0)[0]:
            with contextlib.suppress(BlockingIOError):
                os.write(self._spawn_signal, b"s")

    @property
    def forgetting(self) -> bool:
        """Addresses of children gone wait to be forgotten (``forget_gone``)."""
        return bool(self._forget)

    def forget_gone(self, at: float, after: float) -> None:
        """Drop Thespian's records of children gone for ``after`` seconds at ``at`` (by then Thespian
        has handled their exit)."""
        while self._forget and at - self._forget[0][0] >= after:
            child_actors.forget_child(self._actor, self._forget.pop(0)[1])

    # ----- spawning and killing ----------------------------------------------------------------

    def spawn(self, spawn: Spawn) -> ChildStarted:
        """Fork a ConnectorHost for this generation and hand it its spec."""
        with forking(spawn.spec, spawn.generation, (self.spawn_ready, self._spawn_signal)):
            address = self._actor.createActor(ConnectorHost)
        pid = child_actors.child_pid(self._actor, address)
        started = processes.start_ticks(pid) if pid is not None else None
        self._processes[spawn.generation] = ChildProcess(spawn.name, spawn.generation, address, pid, started)
        self._actor.send(address, m.HostInit(spawn.spec, spawn.generation, os.getpid()))
        return ChildStarted(spawn.name, spawn.generation, pid)

    def kill(self, kill: Kill) -> list[Event]:
        """Kill the generation ``kill`` names (a queued spawn is dropped); the events once it is gone."""
        queued = next((s for s in self.spawns if s.generation == kill.generation), None)
        if queued is not None:
            self.spawns.remove(queued)  # never forked: nothing to kill
        proc = self._processes.get(kill.generation)
        if proc is None:  # already reported gone (or never started): the rules ignore a repeat
            return [ChildExited(kill.name, kill.generation, None)]
        if proc.where is not None:
            assert self.remote is not None
            # Its member kills it (group, descendants, cgroup) and says when it is gone.
            if self.remote.kill(proc.name, proc.generation, now()):
                self._processes.pop(proc.generation, None)
                return [ChildExited(proc.name, proc.generation, None)]
            return []
        if self._kill_process(proc):
            return [self.gone(proc)]
        return []

    def _kill_process(self, proc: ChildProcess) -> bool:
        """SIGKILL ``proc`` with its group, descendants and cgroup if it still runs; True once gone."""
        if proc.pid is None:
            proc.pid = child_actors.child_pid(
                self._actor, proc.address
            )  # PID never learnt: ask Thespian again
            proc.started = processes.start_ticks(proc.pid) if proc.pid is not None else None
        if proc.pid is not None:
            if not self.running(proc):
                return True
            descendants.kill_tree(proc.pid)
            return False
        claimed = {p.pid for p in self._processes.values() if p.pid is not None}
        hosts = descendants.thespian_children(self._actor)
        strays = descendants.unclaimed_children(processes.children_of(os.getpid()), claimed, hosts)
        for pid in strays:
            descendants.kill_tree(pid)
        return not strays

    # ----- children on member systems ----------------------------------------------------------

    def spawn_remote(self, spawn: Spawn) -> list[Event]:
        """Ask a member offering the child's capability to start it (or wait for one)."""
        assert self.remote is not None
        proc = ChildProcess(spawn.name, spawn.generation, None, None, None, where="?", outbox=[])
        self._processes[spawn.generation] = proc
        return self.from_members(self.remote.spawn(spawn.spec, spawn.generation, now()))

    def learn_address(self, proc: ChildProcess, address: Any) -> None:
        """A placed child's address is known: what waited for it goes out now."""
        if proc.address is None and address is not None:
            proc.address = address
            for message in proc.outbox or ():
                self._actor.send(address, message)
            proc.outbox = None

    def from_members(self, events: list[Any]) -> list[Event]:
        """The rules' events for what RemoteHosts reports about the children on member systems."""
        out: list[Event] = []
        for event in events:
            if isinstance(event, Placeable):
                out.append(HostAvailable(event.names))
                continue
            proc = self._processes.get(event.generation)
            if proc is None or proc.where is None:
                continue
            if isinstance(event, RemoteSpawned):
                proc.where, proc.pid = event.member, event.pid
                self.learn_address(proc, event.address)
                out.append(ChildStarted(event.name, event.generation, event.pid, event.member))
                continue
            self._processes.pop(event.generation, None)
            if isinstance(event, RemoteGone):
                out.append(ChildExited(event.name, event.generation, event.exit_code))
            elif isinstance(event, RemoteSpawnFailed):
                out.append(ChildStartupFailed(event.name, event.generation, event.error))
            elif isinstance(event, HostLost):
                out.append(ChildHostLost(event.name, event.generation, event.message))
            elif isinstance(event, Unplaced):
                out.append(ChildUnplaced(event.name, event.generation, event.message))
        return out

    # ----- processes ---------------------------------------------------------------------------

    @staticmethod
    def running(proc: ChildProcess) -> bool:
        """``proc`` still runs (one on a member system is taken to, until its member says not)."""
        if proc.where is not None:
            return True  # on a member: its member agent says when it is gone
        return proc.pid is not None and processes.is_running(proc.pid, proc.started)

    def by_address(self, address: Any) -> ChildProcess | None:
        for proc in self._processes.values():
            if proc.address is not None and proc.address == address:
                return proc
        return None

    def gone(self, proc: ChildProcess) -> ChildExited:
        """``proc`` no longer runs: forget it, sweep what it left, and say how it ended."""
        self._processes.pop(proc.generation, None)
        self._forget.append((now(), proc.address))
        code = child_actors.pop_exit_code(proc.pid, proc.started)
        if code is None and proc.pid is not None:
            code = processes.exit_status_nowait(proc.pid)
        if code is None:  # reaped by multiprocessing when another host was forked
            code = child_actors.reaped_exit_code(self._actor, proc.pid)
        self.sweep_due = True
        return ChildExited(proc.name, proc.generation, code)

    def poll(self) -> list[Event]:
        """Exits nobody told us about (see the module docstring)."""
        return [
            self.gone(proc)
            for proc in list(self._processes.values())
            if proc.pid is not None and not self.running(proc)
        ]
