"""The vocabulary of supervision: child states, the events the rules take, the effects they return.

``supervision.Supervision`` is a pure state machine: ``handle(event, now)`` takes one of the
events below and returns a list of effects; it never touches a process, a socket or the clock.
The Thespian ``Supervisor`` is the shell that turns messages and wakeups into events and performs
the effects, and a test plays the world instead (``tests/support/supervision_world.py``).

A child's life, as ``ChildState``::

    QUEUED --Spawn--> STARTING --ChildReady--> READY
       ^                 |                       |
       |             (crash, startup timeout, deadline, cancel, stop: Kill)
       |                 v                       v
       +------------- KILLING --ChildExited--> QUEUED, DOWN or FAILED (``then``)

A child whose process exits unasked goes from STARTING/READY straight back to QUEUED (restarted
after its backoff) or to DOWN (its restart type says it stays down). A generation number, bumped
at every ``Spawn``, names one process of one child: events from an older generation are ignored.

The effect contract the shell keeps: after ``Spawn`` it reports ``ChildStarted`` (the PID, if it
can learn it); after ``Kill`` it reports ``ChildExited`` once the process is gone, and the rules
repeat ``Kill`` for a generation until then (each repeat is "kill it if it still runs, else tell
me it is gone"), so a lost exit notice costs a few milliseconds, not the servo.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from servo_actors.actors.rules import messages as m
from servo_actors.actors.rules.results import ConnectorOutcome

__all__ = [
    "CancelRequested",
    "ChildExited",
    "ChildHostLost",
    "ChildProgressed",
    "ChildReady",
    "ChildReplied",
    "ChildShutdownDone",
    "ChildStarted",
    "ChildStartupFailed",
    "ChildState",
    "ChildUnplaced",
    "Effect",
    "Escalate",
    "Event",
    "FinalSweep",
    "HostAvailable",
    "Kill",
    "OperationRequested",
    "Reply",
    "ScheduleWakeup",
    "SendToChild",
    "Spawn",
    "StartRequested",
    "StopRequested",
    "Tick",
    "UNSETTLED",
]


class ChildState(StrEnum):
    """Where a child is in its life (see the module docstring); the value is what status shows."""

    QUEUED = "queued"
    """No process: waits for its backoff (``not_before``) and for the child it starts after."""
    STARTING = "starting"
    """Spawned; its connector's ``startup()`` runs, within ``startup_timeout``."""
    READY = "ready"
    """Answered: takes operations."""
    KILLING = "killing"
    """SIGKILL sent; ``then`` (QUEUED or DOWN) applies once the process is confirmed gone."""
    DOWN = "down"
    """Stays without a process (stopped, or not restarted by its restart type)."""
    FAILED = "failed"
    """Gave up on for now: its restarts exceeded restart intensity (``max_restarts`` within
    ``period``, or more than ``max_restarts`` failed starts in a row). No process; its part of each
    operation fails at once, naming why; one fresh start is tried every ``failed_retry`` seconds.
    Settled: the others carry on without it."""
    WAITING = "waiting"
    """No process, and no host can take it now (a connector placed on member systems, none of
    which offers its capability): its part of each operation fails at once, ``host-unavailable``;
    it starts once a host can take it (``HostAvailable``). Settled, like DOWN."""


UNSETTLED = frozenset({ChildState.QUEUED, ChildState.STARTING, ChildState.KILLING})
"""States a start, a cancel or a sibling waiting to start after this child waits out."""

# ----- events: what happened (the shell reports, the rules decide) -------------------------------


@dataclass(frozen=True)
class StartRequested:
    """The runtime's ``Start``: supervise these children; ``Ready`` goes to ``reply_to``."""

    request_id: str
    settings: m.SupervisorSettings
    children: tuple[m.ChildSpec, ...]
    reply_to: Any


@dataclass(frozen=True)
class OperationRequested:
    """The runtime's ``Begin``. ``declared``: seconds a connector says this operation may take
    (beyond the control's own times), by connector name; the longest widens the deadline."""

    begin: m.Begin
    reply_to: Any
    declared: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class CancelRequested:
    """The runtime's ``Cancel``: every connector is killed and started fresh."""

    request_id: str
    operation_id: str | None
    reply_to: Any


@dataclass(frozen=True)
class StopRequested:
    """The runtime's ``Stop`` (``replacement`` None) or ``Reconfigure`` (the children that follow)."""

    request_id: str
    reply_to: Any
    replacement: m.Reconfigure | None = None


@dataclass(frozen=True)
class ChildStarted:
    """The shell performed ``Spawn``: the process exists (``pid`` None when it could not tell).
    ``where`` names the host it runs on when that is not this one."""

    name: str
    generation: int
    pid: int | None
    where: str | None = None


@dataclass(frozen=True)
class ChildReady:
    """The connector's ``startup()`` returned; ``pid`` is the host's own."""

    name: str
    generation: int
    pid: int


@dataclass(frozen=True)
class ChildStartupFailed:
    name: str
    generation: int
    error: str


@dataclass(frozen=True)
class ChildProgressed:
    name: str
    generation: int
    request_id: str
    percent: float
    message: str


@dataclass(frozen=True)
class ChildReplied:
    """The connector's part of operation ``request_id``; for adjust, the components it owns."""

    name: str
    generation: int
    request_id: str
    outcome: ConnectorOutcome
    claimed: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChildShutdownDone:
    """The connector's ``shutdown()`` returned (a graceful stop)."""

    name: str
    generation: int


@dataclass(frozen=True)
class ChildExited:
    """The process of this generation is gone. ``exit_code``: 0 normal, > 0 abnormal, < 0 killed
    by that signal, None unknown (counts as abnormal)."""

    name: str
    generation: int
    exit_code: int | None


@dataclass(frozen=True)
class ChildHostLost:
    """The host this generation ran on (a member system) is lost, and the process with it. Not a
    crash: its part fails ``host-lost``, and it starts again at once, wherever a host can take it."""

    name: str
    generation: int
    message: str


@dataclass(frozen=True)
class ChildUnplaced:
    """No host could take this generation (none offers what its placement needs). Not a crash:
    its part fails ``host-unavailable`` and it waits (WAITING) until ``HostAvailable``."""

    name: str
    generation: int
    message: str


@dataclass(frozen=True)
class HostAvailable:
    """A host that can take these children joined: those WAITING start."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class Tick:
    """Time passed: a wakeup the rules asked for, or the shell's periodic check. Deadlines
    (startup, operation, shutdown, kill checks) are noticed here."""


Event = (
    StartRequested
    | OperationRequested
    | CancelRequested
    | StopRequested
    | ChildStarted
    | ChildReady
    | ChildStartupFailed
    | ChildProgressed
    | ChildReplied
    | ChildShutdownDone
    | ChildExited
    | ChildHostLost
    | ChildUnplaced
    | HostAvailable
    | Tick
)

# ----- effects: what the shell must do, in order ---------------------------------------------------


@dataclass(frozen=True)
class Spawn:
    """Start a fresh process for this generation of the child (then report ``ChildStarted``)."""

    name: str
    generation: int
    spec: m.ChildSpec


@dataclass(frozen=True)
class Kill:
    """SIGKILL this generation's process (and what it started) if it still runs; report
    ``ChildExited`` once it is gone. Repeated until then; never blocks."""

    name: str
    generation: int
    pid: int | None
    where: str | None = None


@dataclass(frozen=True)
class SendToChild:
    """Send ``message`` (a ``Host*`` message) to this generation's process."""

    name: str
    generation: int
    message: Any


@dataclass(frozen=True)
class Reply:
    """Send ``message`` (``Ready``, ``Done``, ``Progress``, ``Cancelled``, ``Stopped``) to ``to``."""

    to: Any
    message: Any


@dataclass(frozen=True)
class ScheduleWakeup:
    """Deliver a ``Tick`` at ``at`` (the rules' clock) or soon after."""

    at: float


@dataclass(frozen=True)
class Escalate:
    """Restart intensity exceeded for ``connector``: it is marked FAILED (the others carry on);
    the shell tells the runtime, which logs and counts it. Not terminal."""

    connector: str
    message: str


@dataclass(frozen=True)
class FinalSweep:
    """Every child is down for a stop: kill and reap every orphan before the answer goes out."""


Effect = Spawn | Kill | SendToChild | Reply | ScheduleWakeup | Escalate | FinalSweep
