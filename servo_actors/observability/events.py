"""The servo's observable events: one call per event, from the runner, the runtime and the client.

Each function below is called where the event happens and does two things: it writes a log line
whose ``extra`` fields are the stable ones of ``logs.STABLE_FIELDS`` (for the events worth a line),
and, while ``activate`` has installed metrics and health state (``run`` with ``settings.metrics``),
it updates them. Off, a call costs a global lookup (and its log line, if it has one).

::

    events.activate(ServoMetrics(), HealthState(stall_after=180))
    events.command_received("MEASURE", "c3")          # counted, logged, /healthz shows the command
    events.connector_restarted("prom", "cancel", generation=7, pid=4242)
    events.deactivate()

Everything here runs in the servo's main process: the counters outlive every connector process,
and the actor system's own processes never import prometheus_client's state.
"""

from __future__ import annotations

import functools
import logging
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from servo_actors.logs import current_app
from servo_actors.observability.health import AppsHealth, HealthState, Verdict
from servo_actors.observability.registry import ServoMetrics
from servo_actors.vocabulary import COMMAND_OF_EVENT, SUPERVISOR_LOST

# Named for what it logs, not after this module: a line of the servo's events reads
# "servo_actors.events: command MEASURE ...", and readers (and tests) select them by this name.
log = logging.getLogger("servo_actors.events")

RESULT_COMMANDS = COMMAND_OF_EVENT
"""The command each result event answers."""
PROGRESS_CANCEL_KINDS = {"cancel": "progress", "unexpected-event": "unexpected-event", "invalid": "invalid"}
"""The optimizer's answer to a progress post -> the kind of cancel it is."""
MICROREBOOT_REASON = SUPERVISOR_LOST
"""The ``reason`` of a microreboot's log line (its message says what was lost, and how)."""
_ERROR_KINDS = {
    "timed out": "timeout",
    "no reply in the time allowed": "timeout",
    "cannot connect": "connection-error",
}
"""Phrases of the client's problems -> the ``status`` label of a request that got no HTTP reply."""


class _AppMetric:
    """One metric of ``ServoMetrics`` with its ``app`` label already given."""

    def __init__(self, metric: Any, app: str) -> None:
        self._metric, self._app = metric, app

    def labels(self, *values: str) -> Any:
        return self._metric.labels(self._app, *values)

    def inc(self, amount: float = 1.0) -> None:
        self._metric.labels(self._app).inc(amount)


class _AppMetrics:
    """``ServoMetrics`` as one application counts into it: every metric with its ``app`` label."""

    def __init__(self, metrics: ServoMetrics, app: str) -> None:
        self._metrics, self._app = metrics, app
        for name in (
            "commands_received",
            "command_results",
            "cancels",
            "operation_duration",
            "connector_restarts",
            "connector_up",
            "escalations",
            "microreboots",
            "optimizer_requests",
            "optimizer_retries",
            "optimizer_backoff",
        ):
            setattr(self, name, _AppMetric(getattr(metrics, name), app))

    def connectors(self, names: Iterable[str]) -> None:
        self._metrics.connectors(names, self._app)

    def polled(self) -> None:
        self._metrics.polled(self._app)


class _Active:
    """What ``activate`` installed; one reference, swapped whole. ``metrics`` and ``health`` are
    those of the application the calling context works for (``logs.current_app``), else of
    ``default_app``: a servo of one application."""

    def __init__(self, metrics: ServoMetrics, health: HealthState | AppsHealth, default_app: str) -> None:
        self.all_metrics = metrics
        self.all_health = health
        self.default_app = default_app
        self._views: dict[str, _AppMetrics] = {}

    @property
    def app(self) -> str:
        return current_app() or self.default_app

    @property
    def metrics(self) -> Any:
        app = self.app
        view = self._views.get(app)
        if view is None:
            view = self._views[app] = _AppMetrics(self.all_metrics, app)
        return view

    @property
    def health(self) -> HealthState:
        health = self.all_health
        return health.of(self.app) if isinstance(health, AppsHealth) else health


_active: _Active | None = None
_commands: dict[str, tuple[str, str | None, float]] = {}  # app -> (cmd, cmd_uid, monotonic start)
_children_sources: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


class ChildrenSource(Protocol):
    """Knows the PIDs of the connector processes it started (``RestartLedger``)."""

    def connector_pids(self) -> list[int]: ...


# ----- lifecycle -------------------------------------------------------------------------------


def activate(metrics: ServoMetrics, health: HealthState | AppsHealth, apps: Iterable[str] = ("",)) -> None:
    """Count into ``metrics`` and tell ``health`` from now on (``run`` with ``settings.metrics``),
    for ``apps`` (the first is the one of a context that names none: a servo of one)."""
    global _active
    apps = list(apps) or [""]
    for app in apps:
        state = health.of(app) if isinstance(health, AppsHealth) else health
        metrics.processes_alive.labels(app).set_function(functools.partial(connector_processes_alive, app))
        metrics.healthy.labels(app).set_function(functools.partial(_probe_ok, state.liveness))
        metrics.ready.labels(app).set_function(functools.partial(_probe_ok, state.readiness))
    _active = _Active(metrics, health, apps[0])


def _probe_ok(probe: Callable[[], Verdict]) -> float:
    return float(probe().ok)


def app_removed(app: str) -> None:
    """A reload removed application ``app``: /healthz and /readyz no longer answer for it."""
    active = _active
    if active is not None and isinstance(active.all_health, AppsHealth):
        active.all_health.forget(app)


def deactivate() -> None:
    global _active
    _active = None
    _commands.clear()


def active_metrics() -> ServoMetrics | None:
    active = _active
    return active.all_metrics if active is not None else None


def track_children(source: ChildrenSource) -> None:
    """Count ``source``'s connector processes in ``servo_connector_processes_alive`` (weakly held),
    for the application of the calling context."""
    active = _active
    _children_sources[source] = current_app() or (active.default_app if active is not None else "")


def connector_processes_alive(app: str | None = None) -> int:
    """Connector processes running now, over every tracked source (both sets during a reload),
    of ``app`` only when given."""
    return sum(
        1
        for source, owner in list(_children_sources.items())
        if app is None or owner == app
        for pid in source.connector_pids()
        if _running(pid)
    )


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


# ----- the control loop (runner) -----------------------------------------------------------------


def command_received(cmd: str, cmd_uid: str | None) -> None:
    """WHATS_NEXT brought a command: a successful poll."""
    _commands[current_app() or ""] = (cmd, cmd_uid, time.monotonic())
    log.info(
        "command %s%s",
        cmd,
        f" {cmd_uid}" if cmd_uid else "",
        extra={"event": "command", "cmd": cmd, "cmd_uid": cmd_uid},
    )
    active = _active
    if active is not None:
        active.metrics.commands_received.labels(cmd).inc()
        active.metrics.polled()
        active.health.command(f"{cmd} {cmd_uid}" if cmd_uid else cmd)


def answer(event: str, param: dict[str, Any] | None, reply: Any) -> None:
    """The optimizer's answer to a progress or result post (``reply`` None: none came)."""
    replied = getattr(reply, "status", None)
    cmd = RESULT_COMMANDS.get(event, event)
    cmd_uid = (param or {}).get("cmd_uid")
    active = _active
    if param is not None and "status" in param:
        _result_posted(cmd, cmd_uid, param, active)
        if replied == "cancel":
            _cancelled("result", cmd, cmd_uid, reply, active)
    elif replied in PROGRESS_CANCEL_KINDS:
        _cancelled(PROGRESS_CANCEL_KINDS[replied], cmd, cmd_uid, reply, active)


def _result_posted(cmd: str, cmd_uid: str | None, param: dict[str, Any], active: _Active | None) -> None:
    status, reason = str(param.get("status")), param.get("reason")
    command = _commands.get(current_app() or "")
    started = command[2] if command is not None and command[1] == cmd_uid else None
    duration_ms = round((time.monotonic() - started) * 1000, 3) if started is not None else None
    log.info(
        "result of %s %s: %s (%s)%s",
        cmd,
        cmd_uid,
        status,
        reason,
        f" after {duration_ms:.0f} ms" if duration_ms is not None else "",
        extra={
            "event": "result",
            "cmd": cmd,
            "cmd_uid": cmd_uid,
            "status": status,
            "reason": reason,
            "duration_ms": duration_ms,
        },
    )
    if active is not None:
        active.metrics.command_results.labels(cmd, status).inc()
        active.health.command(None)


def result_undelivered(event: str, param: dict[str, Any], why: str) -> None:
    """A result post that never reached the optimizer, or that it refused (``why``): not counted
    as a result posted; the servo goes on to its next poll."""
    cmd = RESULT_COMMANDS.get(event, event)
    cmd_uid, status, reason = param.get("cmd_uid"), str(param.get("status")), param.get("reason")
    log.error(
        "result of %s %s (%s, %s) not delivered: %s; the servo goes on to poll for its next command",
        cmd,
        cmd_uid,
        status,
        reason,
        why,
        extra={
            "event": "result-undelivered",
            "cmd": cmd,
            "cmd_uid": cmd_uid,
            "status": status,
            "reason": reason,
        },
    )
    active = _active
    if active is not None:
        active.health.command(None)


def _cancelled(kind: str, cmd: str, cmd_uid: str | None, reply: Any, active: _Active | None) -> None:
    said = getattr(reply, "reason", None) or getattr(reply, "status", None)
    fields = {"event": "cancel", "cmd": cmd, "cmd_uid": cmd_uid, "reason": said, "kind": kind}
    # The runner's wording of old: tests and people grep for it.
    if kind == "result":
        log.info(
            "optimizer cancelled %s %s after its result: restarting connectors", cmd, cmd_uid, extra=fields
        )
    else:
        log.info(
            "optimizer answered %s to progress of %s %s: stopping it",
            reply.status,
            cmd,
            cmd_uid,
            extra=fields,
        )
    if active is not None:
        active.metrics.cancels.labels(kind).inc()
        active.health.command(None)


def connectors_ready(names: Iterable[str]) -> None:
    """Every connector answered (at start, after a microreboot or a reload)."""
    active = _active
    if active is not None:
        active.metrics.connectors(names)
        active.health.connectors_ready()


def connectors_not_up(names: Iterable[str], not_up: dict[str, str]) -> None:
    """What the latest listing says of each connector: ``not_up`` maps the ones that are not up
    (their starts fail, or marked failed) to why. /readyz names them; ``servo_connector_up``."""
    active = _active
    if active is None:
        return
    for name in names:
        active.metrics.connector_up.labels(name).set(0 if name in not_up else 1)
    if not_up:
        listed = ", ".join(f"{name} ({why})" for name, why in sorted(not_up.items()))
        active.health.connectors_down(f"connectors not up: {listed}")
    else:
        active.health.connectors_ready()


def connectors_down(why: str) -> None:
    """The connectors are not serving (the actor system was lost; a microreboot follows)."""
    active = _active
    if active is not None:
        active.health.connectors_down(why)


def run_ended(why: str) -> None:
    """The run ended in a terminal failure: the probes say so while the servo lingers."""
    active = _active
    if active is not None:
        active.health.ended(why)


def microreboot(why: str) -> None:
    log.warning(
        "microreboot: starting a fresh actor system (%s)",
        why,
        extra={"event": "microreboot", "reason": MICROREBOOT_REASON},
    )
    active = _active
    if active is not None:
        active.metrics.microreboots.inc()
        active.health.connectors_down(f"a microreboot is under way ({why})")


def reloaded(names: Iterable[str]) -> None:
    """A SIGHUP reload replaced the connectors: each counts as restarted (reason ``reload``)."""
    names = list(names)
    connectors_ready(names)
    for name in names:
        connector_restarted(name, "reload")


# ----- the actor system (runtime) ---------------------------------------------------------------


def actor_system_answered() -> None:
    """A message from the supervisor: the loop turned (the hot path: a few attribute reads)."""
    active = _active
    if active is not None:
        active.health.actor_system_answered()


def operation_finished(operation: str, seconds: float) -> None:
    active = _active
    if active is not None:
        active.metrics.operation_duration.labels(operation).observe(seconds)


def connector_restarted(
    connector: str, reason: str, generation: int | None = None, pid: int | None = None
) -> None:
    log.info(
        "connector %s restarted (%s)%s",
        connector,
        reason,
        f", generation {generation}" if generation else "",
        extra={
            "event": "restart",
            "connector": connector,
            "reason": reason,
            "generation": generation,
            "pid": pid,
        },
    )
    active = _active
    if active is not None:
        active.metrics.connector_restarts.labels(connector, reason).inc()


def escalated(connector: str, message: str) -> None:
    """A connector was marked failed (restart intensity exceeded); the others go on."""
    log.warning(
        "restart intensity exceeded: %s",
        message,
        extra={"event": "escalation", "connector": connector, "reason": "restart-intensity"},
    )
    active = _active
    if active is not None:
        active.metrics.escalations.labels(connector).inc()


# ----- the optimizer (client) -----------------------------------------------------------------


def exchange_began() -> None:
    """A request to the optimizer is on its way (ended by ``exchange_ended``, always)."""
    active = _active
    if active is not None:
        active.health.request_began()


def exchange_ended() -> None:
    active = _active
    if active is not None:
        active.health.request_ended()


def exchange(event: str, http_status: int | None, problem: str = "") -> None:
    """One request to the optimizer completed: ``http_status``, or None with ``problem`` (no reply)."""
    active = _active
    if active is None:
        return
    active.health.turned()
    if http_status is None:
        status = next((kind for phrase, kind in _ERROR_KINDS.items() if phrase in problem), "error")
        active.health.optimizer_failed(f"POST {event}: {problem}")
    else:
        status = str(http_status)
        if 200 <= http_status < 300:
            active.health.optimizer_answered()
        else:
            active.health.optimizer_failed(f"POST {event}: HTTP {http_status}")
    active.metrics.optimizer_requests.labels(event, status).inc()


def backoff(event: str, seconds: float) -> None:
    """The client waits ``seconds`` before retrying ``event``."""
    active = _active
    if active is not None:
        active.metrics.optimizer_retries.labels(event).inc()
        active.metrics.optimizer_backoff.labels(event).inc(seconds)


class AnswerRecorder:
    """An ``AnswerWatcher`` for ``OptimizerClient``: records each answer (``answer``), then hands
    it on to ``inner`` (the identity guard), which also decides the poll delay."""

    def __init__(self, inner: Any = None) -> None:
        self.inner = inner

    def observe(self, event: str, param: dict[str, Any] | None, reply: Any) -> None:
        if self.inner is not None:
            self.inner.observe(event, param, reply)
        answer(event, param, reply)

    def poll_delay(self) -> float:
        return self.inner.poll_delay() if self.inner is not None else 0.0


__all__ = [
    "AnswerRecorder",
    "activate",
    "app_removed",
    "actor_system_answered",
    "exchange_began",
    "exchange_ended",
    "answer",
    "result_undelivered",
    "backoff",
    "command_received",
    "connector_processes_alive",
    "connector_restarted",
    "connectors_down",
    "connectors_not_up",
    "connectors_ready",
    "deactivate",
    "escalated",
    "exchange",
    "microreboot",
    "operation_finished",
    "reloaded",
    "track_children",
]
