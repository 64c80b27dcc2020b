"""MetricsServer and events in-process: the endpoints, their bodies, the metric names, the binding.

The end-to-end tests (a real servo scraped by a real Prometheus) are in test_observability_e2e.py.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from servo_actors.actors.linux import processes
from servo_actors.actors.transport.ports import free_loopback_port
from servo_actors.errors import ConfigError
from servo_actors.observability import events
from servo_actors.observability.health import HealthState
from servo_actors.observability.registry import ServoMetrics
from servo_actors.observability.server import MetricsServer
from servo_actors.protocol.commands import OptimizerStatus

TIMEOUT = 5.0
FAMILIES = {
    "servo_commands_received",
    "servo_command_results",
    "servo_cancels",
    "servo_operation_duration_seconds",
    "servo_connector_restarts",
    "servo_connector_processes_alive",
    "servo_connectors_configured",
    "servo_restart_intensity_escalations",
    "servo_microreboots",
    "servo_optimizer_requests",
    "servo_optimizer_retries",
    "servo_optimizer_backoff_seconds",
    "servo_last_successful_poll_timestamp_seconds",
    "servo_healthy",
    "servo_ready",
    "servo_build_info",
}
"""Every family the servo exports (docs/observability.md lists the same), as the parser names them."""


@pytest.fixture
def served() -> Iterator[tuple[MetricsServer, ServoMetrics, HealthState]]:
    metrics, health = ServoMetrics(), HealthState(stall_after=60.0)
    server = MetricsServer("127.0.0.1", free_loopback_port(), metrics, health)
    server.start()
    events.activate(metrics, health)
    yield server, metrics, health
    events.deactivate()
    server.stop()


def get(server: MetricsServer, path: str, **kwargs: Any) -> requests.Response:
    return requests.request(
        kwargs.pop("method", "GET"), f"http://{server.address}{path}", timeout=TIMEOUT, **kwargs
    )


def families(server: MetricsServer) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(get(server, "/metrics").text)}


def test_metrics_are_served_in_the_text_format_with_every_family(served) -> None:
    server, metrics, _ = served
    metrics.connectors(["prom", "k8s"])
    found = families(server)
    assert FAMILIES <= set(found), FAMILIES - set(found)
    build = found["servo_build_info"].samples[0]
    assert set(build.labels) == {"version", "python", "thespian"} and build.value == 1
    # Known label values exist at 0 from the start: rate() and increase() see the first step.
    restarts = {
        (s.labels["connector"], s.labels["reason"]) for s in found["servo_connector_restarts"].samples
    }
    assert ("k8s", "crash") in restarts and ("prom", "reload") in restarts
    assert not any(name.endswith("_created") for name in found), "no _created series"


def test_health_endpoints_answer_json_200_or_503_saying_why(served) -> None:
    server, _, health = served
    ready = get(server, "/readyz")
    assert ready.status_code == 503 and ready.headers["Content-Type"] == "application/json"
    assert ready.json()["reasons"] == [
        "the connectors are starting",
        "the optimizer has not been reached yet",
    ]
    health.connectors_ready()
    events.exchange("WHATS_NEXT", 200)
    assert get(server, "/readyz").json() == {
        "status": "ready",
        "reasons": [],
        "connectors": "started",
        "optimizer": "reached",
        "command": None,
    }
    assert get(server, "/healthz").status_code == 200
    events.run_ended("the supervisor gave up on 'crasher'")
    healthz = get(server, "/healthz")
    assert healthz.status_code == 503
    assert healthz.json()["reasons"] == ["the run ended: the supervisor gave up on 'crasher'"]
    gauges = families(server)
    assert gauges["servo_healthy"].samples[0].value == gauges["servo_ready"].samples[0].value == 0


def test_other_paths_and_methods_are_refused_in_json(served) -> None:
    server, _, _ = served
    missing = get(server, "/admin")
    assert missing.status_code == 404 and missing.json()["paths"] == ["/metrics", "/healthz", "/readyz"]
    posted = get(server, "/metrics", method="POST", data=b"x")
    assert posted.status_code == 405 and posted.headers["Allow"] == "GET"


def test_events_count_into_the_metrics(served) -> None:
    server, metrics, _ = served
    value = metrics.registry.get_sample_value
    events.command_received("MEASURE", "c1")
    events.answer(
        "MEASUREMENT", {"progress": 10, "cmd_uid": "c1"}, OptimizerStatus(status="cancel", reason="x")
    )
    events.answer(
        "MEASUREMENT", {"status": "cancelled", "reason": "x", "cmd_uid": "c1"}, OptimizerStatus(status="ok")
    )
    events.command_received("ADJUST", "c2")
    events.answer(
        "ADJUSTMENT", {"status": "ok", "reason": "success", "cmd_uid": "c2"}, OptimizerStatus(status="cancel")
    )
    events.command_received("MEASURE", "c3")
    events.answer("MEASUREMENT", {"progress": 5, "cmd_uid": "c3"}, OptimizerStatus(status="invalid"))
    events.answer("MEASUREMENT", {"progress": 5, "cmd_uid": "c3"}, OptimizerStatus(status="unexpected-event"))
    events.answer("MEASUREMENT", {"progress": 5, "cmd_uid": "c3"}, None)  # not delivered: nothing
    events.exchange("WHATS_NEXT", 503)
    events.exchange("WHATS_NEXT", None, "timed out (ReadTimeout)")
    events.exchange("HELLO", None, "cannot connect (ConnectionError)")
    events.backoff("WHATS_NEXT", 0.25)
    events.backoff("WHATS_NEXT", 0.5)
    events.operation_finished("measure", 0.3)
    events.connector_restarted("prom", "cancel", 4, 1234)
    events.escalated("prom", "gave up")
    events.microreboot("the supervisor (pid 1) died")
    assert value("servo_commands_received_total", {"app": "", "cmd": "MEASURE"}) == 2
    assert value("servo_command_results_total", {"app": "", "cmd": "MEASURE", "status": "cancelled"}) == 1
    assert value("servo_command_results_total", {"app": "", "cmd": "ADJUST", "status": "ok"}) == 1
    assert {
        kind: value("servo_cancels_total", {"app": "", "kind": kind})
        for kind in ("progress", "result", "invalid", "unexpected-event")
    } == {
        "progress": 1,
        "result": 1,
        "invalid": 1,
        "unexpected-event": 1,
    }
    assert value("servo_optimizer_requests_total", {"app": "", "event": "WHATS_NEXT", "status": "503"}) == 1
    assert (
        value("servo_optimizer_requests_total", {"app": "", "event": "WHATS_NEXT", "status": "timeout"}) == 1
    )
    assert (
        value("servo_optimizer_requests_total", {"app": "", "event": "HELLO", "status": "connection-error"})
        == 1
    )
    assert value("servo_optimizer_retries_total", {"app": "", "event": "WHATS_NEXT"}) == 2
    assert value("servo_optimizer_backoff_seconds_total", {"app": "", "event": "WHATS_NEXT"}) == 0.75
    assert value("servo_operation_duration_seconds_count", {"app": "", "operation": "measure"}) == 1
    assert value("servo_connector_restarts_total", {"app": "", "connector": "prom", "reason": "cancel"}) == 1
    assert value("servo_restart_intensity_escalations_total", {"app": "", "connector": "prom"}) == 1
    assert value("servo_microreboots_total", {"app": ""}) == 1
    assert abs(value("servo_last_successful_poll_timestamp_seconds", {"app": ""}) - time.time()) < 60
    readiness = get(server, "/readyz").json()
    assert readiness["optimizer"].startswith(
        "the last request to the optimizer failed: POST HELLO: cannot connect"
    )
    assert "a microreboot is under way" in readiness["connectors"]


def test_an_address_in_use_is_refused_naming_the_setting() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(ConfigError) as caught:
            MetricsServer("127.0.0.1", port, ServoMetrics(), HealthState(60.0))
    assert caught.value.key == "settings.metrics.listen"
    assert f"cannot listen on 127.0.0.1:{port}" in str(caught.value)


def test_stop_frees_the_port_and_a_forked_child_never_holds_it(served) -> None:
    server, _, _ = served
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child (forked from a process with threads): say it runs, sleep, go
        os.write(ready_w, b"!")
        time.sleep(10)
        os._exit(0)
    try:
        os.close(ready_w)
        # The child's own code runs after the fork handlers: once it has written, they are done.
        assert select.select([ready_r], [], [], TIMEOUT)[0] and os.read(ready_r, 1) == b"!"
        os.close(ready_r)
        assert ("127.0.0.1", server.port) not in processes.listening_sockets(pid)
        assert ("127.0.0.1", server.port) in processes.listening_sockets(os.getpid())
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    server.stop()
    with socket.socket() as again:
        again.bind(("127.0.0.1", server.port))  # free: nothing else holds it
