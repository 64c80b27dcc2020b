"""Messages between the runtime, the Supervisor and the ConnectorHosts: small plain data.

They are pickled by module path, so they live here in the package (never in ``__main__``). Every
request carries a ``request_id`` and every answer echoes it: an external ``ask``/``listen`` returns
the next message of any kind, so the receiver matches ids and drops the rest. Host messages also
carry the connector's ``generation`` (bumped at every spawn) so answers from a process the
supervisor has already replaced are dropped.

Flow: runtime -> Supervisor (``Start``, ``Begin``, ``Cancel``, ``Reconfigure``, ``Stop``,
``GetStatus``); Supervisor -> runtime (``Ready``, ``Progress``, ``Done``, ``Cancelled``,
``Stopped``, ``Status``, ``ConnectorFailed``); Supervisor <-> ConnectorHost (``Host*``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servo_actors.actors.rules.results import ConnectorOutcome, OperationResult
from servo_actors.config import defaults
from servo_actors.connectors.base import Control

# ----- child specs and status --------------------------------------------------------------------


__all__ = [
    "Begin",
    "Cancel",
    "Cancelled",
    "ChildSpec",
    "ChildStatus",
    "ConnectorFailed",
    "Done",
    "GetStatus",
    "HostCall",
    "HostInit",
    "HostProgress",
    "HostReady",
    "HostReply",
    "HostShutdown",
    "HostShutdownDone",
    "HostStartupFailed",
    "Progress",
    "Ready",
    "Reconfigure",
    "Start",
    "Status",
    "Stop",
    "Stopped",
    "SupervisorSettings",
]


@dataclass(frozen=True)
class ChildSpec:
    """One connector as the supervisor sees it (from ``ConnectorSpec``), durations in seconds."""

    name: str
    type: str
    restart: str = defaults.RESTART
    shutdown_timeout: float = defaults.SHUTDOWN_TIMEOUT
    config: dict[str, Any] = field(default_factory=dict)
    import_path: str | None = None
    """``module:Class`` the type resolved to in the servo, so a fresh host need not resolve again."""
    max_result_bytes: int = defaults.MAX_RESULT_BYTES
    """Most bytes the connector's result may pickle to (supervisor.max_result_bytes)."""
    descendant_tracking: str = defaults.DESCENDANT_TRACKING
    """How the host contains the processes the connector starts (supervisor.descendant_tracking)."""


@dataclass(frozen=True)
class SupervisorSettings:
    """The supervisor's own settings (from ``SupervisorConfig``), durations in seconds; each default
    is servo.yaml's (``config.defaults``)."""

    strategy: str = defaults.STRATEGY
    max_restarts: int = defaults.MAX_RESTARTS
    period: float = defaults.PERIOD
    backoff_min: float = defaults.BACKOFF_MIN
    backoff_max: float = defaults.BACKOFF_MAX
    backoff_jitter: float = defaults.BACKOFF_JITTER
    operation_grace: float = defaults.OPERATION_GRACE
    startup_timeout: float = defaults.STARTUP_TIMEOUT
    failed_retry: float = defaults.FAILED_RETRY
    idle_interval: float = defaults.LIVENESS_IDLE_INTERVAL
    """How often the children's processes are looked at while nothing is in flight."""
    convention: Any = None
    """``convention.ConventionSettings`` when connectors may run on member systems, else None."""


@dataclass(frozen=True)
class ChildStatus:
    """A child as reported by ``Status`` and ``Ready``: its process and state now."""

    name: str
    state: str
    pid: int | None
    generation: int
    restarts: int
    where: str | None = None
    """Where it runs: None here; a member system's ``HOST:PORT``, or what it waits for (placed)."""
    down_reason: str | None = None
    """Why it is not up while its starts fail: ``start-timeout`` or ``crash-loop`` (None once up)."""
    down_why: str = ""
    """While ``down_reason`` is set: the latest failure in words (``its start failed (...)``)."""
    history: tuple[tuple[int, str], ...] = ()
    """Its latest restarts, oldest first: ``(generation started, reason)``, at most
    ``supervision.RESTART_HISTORY`` of them, so every restart is counted once by whoever reads
    listings (``restart_ledger``), however many fall between two of them."""


# ----- runtime -> Supervisor ---------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """Start the children. ``owner_pid``/``owner_started`` identify the servo process to watch."""

    request_id: str
    settings: SupervisorSettings
    children: tuple[ChildSpec, ...]
    owner_pid: int
    owner_started: int | None


@dataclass(frozen=True)
class Begin:
    """Run ``operation`` on the connectors (see ``OperationResult`` for the answer's shape).

    ``declared``: seconds the operation may take, by connector, as the connectors declared
    (``Connector.operation_seconds``); the longest widens the deadline beyond the control's times.
    """

    request_id: str
    operation: str
    metrics: tuple[str, ...] | None = None
    components: dict[str, Any] | None = None
    control: Control = field(default_factory=Control)
    declared: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Cancel:
    """Kill every connector at once and start them all fresh; answered by ``Cancelled``.

    ``operation_id`` names the operation being cancelled: should its ``Begin`` arrive after this
    (Thespian does not promise order), it is answered ``cancelled`` at once.
    """

    request_id: str
    operation_id: str | None = None


@dataclass(frozen=True)
class Reconfigure:
    """Stop every child (as ``Stop`` does) and start these instead; answered by ``Ready``."""

    request_id: str
    settings: SupervisorSettings
    children: tuple[ChildSpec, ...]


@dataclass(frozen=True)
class Stop:
    """Shut every child down (graceful up to its shutdown timeout, then SIGKILL); answered by ``Stopped``."""

    request_id: str


@dataclass(frozen=True)
class GetStatus:
    request_id: str


# ----- Supervisor -> runtime ---------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """Every child answered after ``Start``/``Reconfigure``, or is known not to be up (a start of
    it failed: ``ChildStatus.down_reason``; or it is down, failed or waiting for a host). A child
    that hangs in its start is known at ``startup_timeout``: that bounds this answer."""

    request_id: str
    children: tuple[ChildStatus, ...]
    supervisor_pid: int
    session_id: int


@dataclass(frozen=True)
class Progress:
    request_id: str
    percent: float
    message: str
    connector: str


@dataclass(frozen=True)
class Done:
    request_id: str
    result: OperationResult


@dataclass(frozen=True)
class Cancelled:
    request_id: str
    children: tuple[ChildStatus, ...]


@dataclass(frozen=True)
class Stopped:
    request_id: str


@dataclass(frozen=True)
class Status:
    request_id: str
    children: tuple[ChildStatus, ...]
    supervisor_pid: int
    session_id: int
    tracked_addresses: int = 0
    """Child addresses Thespian still tracks in the supervisor (stays near the number of children)."""


@dataclass(frozen=True)
class ConnectorFailed:
    """Restart intensity exceeded for ``connector``: the supervisor marked it failed and goes on
    with the others (it is tried again every ``failed_retry``). Not terminal."""

    connector: str
    message: str


# ----- Supervisor <-> ConnectorHost --------------------------------------------------------------


@dataclass(frozen=True)
class HostInit:
    """Run ``spec``. ``supervisor_pid`` is the host's parent (the process that kills it): the
    supervisor, or on a member system its ``MemberAgent``, which sets ``reply_to`` to the leader's
    supervisor: the host answers there rather than to the sender."""

    spec: ChildSpec
    generation: int
    supervisor_pid: int
    reply_to: Any = None


@dataclass(frozen=True)
class HostReady:
    """The connector's ``startup()`` returned."""

    name: str
    generation: int
    pid: int


@dataclass(frozen=True)
class HostStartupFailed:
    name: str
    generation: int
    error: str


@dataclass(frozen=True)
class HostCall:
    request_id: str
    generation: int
    operation: str
    metrics: tuple[str, ...] | None = None
    components: dict[str, Any] | None = None
    control: Control = field(default_factory=Control)


@dataclass(frozen=True)
class HostProgress:
    request_id: str
    name: str
    generation: int
    percent: float
    message: str


@dataclass(frozen=True)
class HostReply:
    """The connector's outcome; for adjust, ``claimed`` lists the requested components it owns."""

    request_id: str
    name: str
    generation: int
    outcome: ConnectorOutcome
    claimed: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostShutdown:
    generation: int


@dataclass(frozen=True)
class HostShutdownDone:
    name: str
    generation: int
