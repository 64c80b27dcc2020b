"""The servo's own observability: Prometheus metrics, health endpoints, structured log lines.

::

    with serving(config.settings.metrics) as server:   # None when settings.metrics.listen is unset
        ...                                            # run the loop; events.* calls count into it

- ``events``: one function per event, called where it happens (runner, runtime, client); each
  writes a log line with the stable fields and updates the metrics and health state when on.
- ``registry.ServoMetrics``: every metric, in a registry of the servo's own.
- ``health.HealthState``: what /healthz and /readyz answer (pure, clock injected).
- ``server.MetricsServer``: the HTTP side, on the configured address only.
- ``log_relay``: connector log lines reach the servo's log, tagged with the connector.

This package sits below every other layer (the runner, the actors and the protocol client call
into it); it imports only the configuration, the logs and ``prometheus_client``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from servo_actors.config.listen import parse_listen
from servo_actors.config.models import MetricsConfig
from servo_actors.observability import events
from servo_actors.observability.health import HealthState, Verdict
from servo_actors.observability.registry import ServoMetrics
from servo_actors.observability.server import MetricsServer

log = logging.getLogger(__name__)


@contextlib.contextmanager
def serving(config: MetricsConfig) -> Iterator[MetricsServer | None]:
    """Serve metrics and health on ``config.listen`` while the block runs (nothing when it is None).

    ConfigError (naming ``settings.metrics.listen``) when the address cannot be bound.
    """
    if config.listen is None:
        yield None
        return
    metrics, health = ServoMetrics(), HealthState(config.stall_after)
    host, port = parse_listen(config.listen)
    server = MetricsServer(host, port, metrics, health)
    events.activate(metrics, health)
    server.start()
    log.info("serving /metrics, /healthz and /readyz on http://%s", server.address)
    try:
        yield server
    finally:
        events.deactivate()
        server.stop()


__all__ = ["HealthState", "MetricsServer", "ServoMetrics", "Verdict", "events", "serving"]
