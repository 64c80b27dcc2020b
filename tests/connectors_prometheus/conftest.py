"""Fixtures: a small metrics exporter and a real Prometheus server scraping it, on loopback.

The session's Prometheus starts once (it needs ~5 s before its first scrape: target discovery
batches updates). Tests that stop or break a server start their own with ``prometheus_factory``.
The server itself is ``tests/support/prometheus_server.py`` (shared with tests/observability).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_server import STOP_TIMEOUT, PrometheusServer, free_port

from servo_actors.connectors.prometheus import PrometheusConfig, PrometheusConnector

EXPORTER_THREAD = "exporter"
"""The name of every thread the exporter runs (its server loop and one per scrape), so a test that
counts its own threads can tell the session's scrapes apart from what it started."""


class _NamedThreadsServer(ThreadingHTTPServer):
    """A threading HTTP server whose request threads are named ``EXPORTER_THREAD``: Prometheus
    scrapes the exporter every second, and each scrape is a short-lived thread of this process."""

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name=EXPORTER_THREAD,
            daemon=True,
        )
        thread.start()


class Exporter:
    """Serves /metrics in the Prometheus text format; counters grow by one step per scrape.

    Series (``job`` and ``instance`` are added by Prometheus):
    ``http_requests_total{pod,code}`` (3 series), ``app_latency_seconds{pod}`` (0.25 and 0.05),
    ``app_info{version}`` (a label value with quotes), ``app_request_duration_seconds`` histogram.
    """

    def __init__(self) -> None:
        self.scrapes = 0
        self._lock = threading.Lock()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                body = exporter.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                """Quiet: the scrape every second would flood the test output."""

        self.server = _NamedThreadsServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name=EXPORTER_THREAD, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def render(self) -> str:
        with self._lock:
            self.scrapes += 1
            n = self.scrapes
        return "\n".join(
            [
                "# TYPE http_requests_total counter",
                f'http_requests_total{{pod="web-0",code="200"}} {n * 10}',
                f'http_requests_total{{pod="web-0",code="500"}} {n}',
                f'http_requests_total{{pod="web-1",code="200"}} {n * 7}',
                "# TYPE app_latency_seconds gauge",
                'app_latency_seconds{pod="web-0"} 0.25',
                'app_latency_seconds{pod="web-1"} 0.05',
                "# TYPE app_info gauge",
                'app_info{version="1.0 \\"beta\\""} 1',
                "# TYPE app_request_duration_seconds histogram",
                f'app_request_duration_seconds_bucket{{le="0.1"}} {n * 5}',
                f'app_request_duration_seconds_bucket{{le="0.5"}} {n * 9}',
                f'app_request_duration_seconds_bucket{{le="+Inf"}} {n * 10}',
                f"app_request_duration_seconds_sum {n * 1.5}",
                f"app_request_duration_seconds_count {n * 10}",
                "",
            ]
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(STOP_TIMEOUT)


@pytest.fixture(scope="session")
def exporter() -> Iterator[Exporter]:
    served = Exporter()
    served.start()
    yield served
    served.stop()


@pytest.fixture(scope="session")
def prometheus(exporter: Exporter, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """The shared Prometheus, scraping the exporter every second; ready and scraped once."""
    server = PrometheusServer(tmp_path_factory.mktemp("prometheus"), [exporter.address])
    try:
        server.wait_ready()
        server.wait_for_scrape()
        yield server
    finally:
        server.stop()


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[Callable[..., PrometheusServer]]:
    """Start extra, test-owned Prometheus servers (stopped at teardown if the test did not)."""
    started: list[PrometheusServer] = []

    def start(targets: list[str] | None = None) -> PrometheusServer:
        workdir = tmp_path / f"prometheus-{len(started)}"
        workdir.mkdir()
        server = PrometheusServer(workdir, targets or [])
        started.append(server)
        server.wait_ready()
        return server

    yield start
    for server in started:
        server.stop()


def _make_connector(base_url: str, metrics: list[dict[str, Any]], **config: Any) -> PrometheusConnector:
    model = PrometheusConfig.model_validate({"base_url": base_url, "metrics": metrics, **config})
    return PrometheusConnector("prom", model)


@pytest.fixture
def make_connector() -> Callable[..., PrometheusConnector]:
    """``make_connector(base_url, metrics, **config)``: a connector named ``prom``, config validated
    as servo.yaml's would be."""
    return _make_connector


class ProgressLog:
    """A ``progress`` callback that remembers every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, str]] = []

    def __call__(self, percent: float, message: str = "") -> None:
        self.calls.append((percent, message))


@pytest.fixture
def progress() -> ProgressLog:
    return ProgressLog()


@pytest.fixture
def dead_url() -> str:
    """A loopback URL where nothing listens."""
    return f"http://127.0.0.1:{free_port()}"
