"""ServoMetrics: every metric the servo exports, in a registry of its own (never the global one).

The names are a contract (docs/observability.md, the alerting rules in ``deploy/prometheus``):

=====================================================  =========================================
``servo_commands_received_total{cmd}``                 commands the optimizer sent (SLEEP too)
``servo_command_results_total{cmd,status}``            results posted, by the status they carried
``servo_cancels_total{kind}``                          ``progress`` (cancel on progress),
                                                       ``result`` (cancel on the result),
                                                       ``unexpected-event``, ``invalid``
``servo_operation_duration_seconds{operation}``        histogram: describe/measure/adjust/check,
                                                       begin to the supervisor's answer
``servo_connector_restarts_total{connector,reason}``   ``cancel``, ``deadline``, ``crash``,
                                                       ``start-timeout``, ``retry`` (of a failed
                                                       one), ``reload``, ``microreboot``,
                                                       ``host-lost``
``servo_connector_up{connector}``                      1 while it is up, 0 while its starts
                                                       fail or it is marked failed
``servo_connector_processes_alive``                    connector processes running now
``servo_connectors_configured``                        connectors in the configuration
``servo_restart_intensity_escalations_total``          a connector marked failed (``{connector}``)
``servo_microreboots_total``                           fresh actor systems after a lost one
``servo_optimizer_requests_total{event,status}``       exchanges by HTTP status, or ``timeout``,
                                                       ``connection-error``, ``error``
``servo_optimizer_retries_total{event}``               backoff waits before a retry
``servo_optimizer_backoff_seconds_total{event}``       seconds spent in them
``servo_last_successful_poll_timestamp_seconds``       when WHATS_NEXT last brought a command
``servo_healthy``, ``servo_ready``                     what /healthz and /readyz answer (1/0)
``servo_build_info{version,python,thespian}``          always 1
=====================================================  =========================================

Every metric but ``servo_build_info`` (the servo's own) carries an ``app`` label first: the
application (ORG/APP) of a servo of several, or of a servo of one (empty without an optimizer).

Label values are known words (commands, statuses, reasons, connector names from the
configuration), so the number of series stays bounded. Every update is a counter increment or a
gauge set: about a microsecond each.
"""

from __future__ import annotations

import importlib.metadata
import platform
import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, disable_created_metrics
from prometheus_client.process_collector import ProcessCollector

from servo_actors import __version__
from servo_actors.vocabulary import COMMANDS, EVENTS, OPERATIONS, RESTART_REASONS

CANCEL_KINDS = ("progress", "result", "unexpected-event", "invalid")
DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    1800.0, 3600.0,
)  # fmt: skip
"""Seconds: a no-op DESCRIBE takes milliseconds, a MEASURE may take an hour."""


def _thespian_version() -> str:
    try:
        return importlib.metadata.version("thespian")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class ServoMetrics:
    """The servo's metrics (see module docstring); ``registry`` is what /metrics serves."""

    def __init__(self, apps: Iterable[str] = ("",), *, wall_clock: Callable[[], float] = time.time) -> None:
        self._wall_clock = wall_clock
        # No ``*_created`` series beside every counter: twice the series for nothing an alert uses.
        disable_created_metrics()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        ProcessCollector(registry=r)
        self.commands_received = Counter(
            "servo_commands_received", "Commands received from the optimizer.", ["app", "cmd"], registry=r
        )
        self.command_results = Counter(
            "servo_command_results",
            "Results posted to the optimizer, by command and the status they carried.",
            ["app", "cmd", "status"],
            registry=r,
        )
        self.cancels = Counter(
            "servo_cancels",
            "Operations the optimizer ended: cancel on progress or on the result, unexpected-event, invalid.",
            ["app", "kind"],
            registry=r,
        )
        self.operation_duration = Histogram(
            "servo_operation_duration_seconds",
            "Operations on the connectors, from begin to the supervisor's answer.",
            ["app", "operation"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.connector_restarts = Counter(
            "servo_connector_restarts",
            "Connector processes killed and started fresh, by connector and reason.",
            ["app", "connector", "reason"],
            registry=r,
        )
        self.processes_alive = Gauge(
            "servo_connector_processes_alive", "Connector processes running now.", ["app"], registry=r
        )
        self.connector_up = Gauge(
            "servo_connector_up",
            "1 while the connector is up; 0 while its starts fail or it is marked failed.",
            ["app", "connector"],
            registry=r,
        )
        self.connectors_configured = Gauge(
            "servo_connectors_configured", "Connectors in the running configuration.", ["app"], registry=r
        )
        self.escalations = Counter(
            "servo_restart_intensity_escalations",
            "Times a connector was marked failed: restart intensity exceeded (it is retried every failed_retry).",
            ["app", "connector"],
            registry=r,
        )
        self.microreboots = Counter(
            "servo_microreboots",
            "Fresh actor systems started after the supervisor, admin or logger was lost.",
            ["app"],
            registry=r,
        )
        self.optimizer_requests = Counter(
            "servo_optimizer_requests",
            "Requests to the optimizer, by event and HTTP status (or timeout, connection-error, error).",
            ["app", "event", "status"],
            registry=r,
        )
        self.optimizer_retries = Counter(
            "servo_optimizer_retries",
            "Backoff waits before a request was retried.",
            ["app", "event"],
            registry=r,
        )
        self.optimizer_backoff = Counter(
            "servo_optimizer_backoff_seconds",
            "Seconds spent waiting before retrying a request.",
            ["app", "event"],
            registry=r,
        )
        self.last_poll = Gauge(
            "servo_last_successful_poll_timestamp_seconds",
            "Unix time at which WHATS_NEXT last brought a command (0: never).",
            ["app"],
            registry=r,
        )
        self.healthy = Gauge("servo_healthy", "1 while /healthz answers 200.", ["app"], registry=r)
        self.ready = Gauge("servo_ready", "1 while /readyz answers 200.", ["app"], registry=r)
        Info("servo_build", "The servo's version and what it runs on.", registry=r).info(
            {"version": __version__, "python": platform.python_version(), "thespian": _thespian_version()}
        )
        for app in apps:
            self.application(app)

    def application(self, app: str) -> None:
        """Series of application ``app`` that exist from the start, at 0: rate() and increase()
        see their first step."""
        for cmd in COMMANDS:
            self.commands_received.labels(app, cmd)
        for kind in CANCEL_KINDS:
            self.cancels.labels(app, kind)
        for operation in OPERATIONS:
            self.operation_duration.labels(app, operation)
        for event in EVENTS:
            self.optimizer_requests.labels(app, event, "200")
            self.optimizer_retries.labels(app, event)
            self.optimizer_backoff.labels(app, event)
        self.microreboots.labels(app)
        self.last_poll.labels(app)

    def connectors(self, names: Iterable[str], app: str = "") -> None:
        """The configured connectors of ``app``: their restart and escalation series exist from
        now, at 0."""
        names = list(names)
        self.connectors_configured.labels(app).set(len(names))
        for name in names:
            self.escalations.labels(app, name)
            self.connector_up.labels(app, name).set(1)
            for reason in RESTART_REASONS:
                self.connector_restarts.labels(app, name, reason)

    def polled(self, app: str = "") -> None:
        self.last_poll.labels(app).set(self._wall_clock())


__all__ = ["CANCEL_KINDS", "ServoMetrics"]
