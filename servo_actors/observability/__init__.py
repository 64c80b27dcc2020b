"""The servo's own observability: Prometheus metrics, health endpoints, structured log lines.

::

    with serving(config.settings.metrics) as server:   # None when settings.metrics.listen is unset
        ...                                            # run the loop; events.* calls count into it

- ``events``: one function per event, called where it happens (runner, runtime, client); each
  writes a log line with the stable fields and updates the metrics and health state when on.
- ``registry.ServoMetrics``: every metric, in a registry of the servo's own.
- ``health.HealthState``: what /healthz and /readyz answer (pure, clock injected).
- ``server.MetricsServer``: the HTTP side, on the configured address only.
- ``log_relay``: connector log lines reach the servo's log, tagged with the connector; with it,
  ``output_capture`` makes a connector's stdout and stderr lines of its own, bounded.

This package sits below every other layer (the runner, the actors and the protocol client call
into it); it imports only the configuration, the logs and ``prometheus_client``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping

from servo_actors.config.listen import parse_listen
from servo_actors.config.optimizer_section import MetricsConfig

# log_relay's module-level logger must exist before the servo forks its actor system (log_relay).
from servo_actors.observability import events, log_relay
from servo_actors.observability.health import AppsHealth, HealthState, Verdict
from servo_actors.observability.registry import ServoMetrics
from servo_actors.observability.server import MetricsServer

log = logging.getLogger(__name__)


@contextlib.contextmanager
def serving(
    config: MetricsConfig, connectors: Iterable[str] = (), *, app: str = ""
) -> Iterator[MetricsServer | None]:
    """Serve metrics and health on ``config.listen`` while the block runs (nothing when it is None).

    ``connectors``: the configured names, whose per-connector series exist from the start (at 0);
    ``app``: the application (ORG/APP), every metric's ``app`` label.
    ConfigError (naming ``settings.metrics.listen``) when the address cannot be bound.
    """
    with serving_apps(config, {app: list(connectors)}) as server:
        yield server


@contextlib.contextmanager
def serving_apps(config: MetricsConfig, apps: Mapping[str, Iterable[str]]) -> Iterator[MetricsServer | None]:
    """``serving`` for a servo of several applications: ``apps`` maps each (ORG/APP) to its
    connectors' names. Each application's lines count under its own ``app`` label (the context's,
    ``logs.log_as_app``), and /healthz and /readyz answer for each (``AppsHealth``). With one
    application the probes answer as a servo of one always did."""
    if config.listen is None:
        yield None
        return
    names = list(apps) or [""]
    metrics = ServoMetrics(names)
    health: HealthState | AppsHealth = (
        AppsHealth(names, config.stall_after) if len(names) > 1 else HealthState(config.stall_after)
    )
    for app, connectors in apps.items():
        metrics.connectors(connectors, app)
    host, port = parse_listen(config.listen)
    server = MetricsServer(host, port, metrics, health)
    events.activate(metrics, health, names)
    server.start()
    log.info("serving /metrics, /healthz and /readyz on http://%s", server.address)
    try:
        yield server
    finally:
        events.deactivate()
        server.stop()


def linger(config: MetricsConfig, server: MetricsServer | None, stop: threading.Event) -> None:
    """After a terminal failure, keep ``server`` up for ``exit_linger`` (or until ``stop``), so the
    next scrape records what happened."""
    if server is None or config.exit_linger <= 0:
        return
    log.info(
        "serving /metrics for %gs more before exiting (settings.metrics.exit_linger)", config.exit_linger
    )
    stop.wait(config.exit_linger)


__all__ = [
    "AppsHealth",
    "HealthState",
    "MetricsServer",
    "ServoMetrics",
    "Verdict",
    "events",
    "linger",
    "log_relay",
    "serving",
    "serving_apps",
]
