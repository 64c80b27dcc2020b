"""Fixtures: a small metrics exporter and a real Prometheus server scraping it, on loopback.

The session's Prometheus starts once (it needs ~5 s before its first scrape: target discovery
batches updates). Tests that stop or break a server start their own with ``prometheus_factory``.
The Prometheus binary comes from the Debian package ``prometheus``; without it the fixtures fail
(CI installs it), they do not skip.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from servo_actors.connectors.prometheus import PrometheusConfig, PrometheusConnector

READY_TIMEOUT = 30.0  # seconds for /-/ready after start
FIRST_SCRAPE_TIMEOUT = 30.0  # seconds until the exporter target has been scraped
STOP_TIMEOUT = 10.0  # seconds for Prometheus to exit on SIGTERM before SIGKILL
POLL = 0.1  # seconds between readiness probes
PROBE_TIMEOUT = 2.0  # seconds for one readiness probe
SCRAPE_INTERVAL = "1s"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def prometheus_binary() -> str:
    """The path of the prometheus binary; fails the test (never skips) when it is missing."""
    found = shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None
    )
    if not found:
        pytest.fail(
            "the prometheus binary is missing: install the Debian package "
            "(apt-get install prometheus); these tests need a real Prometheus server"
        )
    return found


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

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="exporter", daemon=True)

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


class PrometheusServer:
    """A real Prometheus process on a free loopback port, with its own temporary storage."""

    def __init__(self, workdir: Path, targets: list[str]) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        lines = ["global:", f"  scrape_interval: {SCRAPE_INTERVAL}", f"  scrape_timeout: {SCRAPE_INTERVAL}"]
        if targets:
            lines += [
                "scrape_configs:",
                "  - job_name: exporter",
                "    static_configs:",
                f"      - targets: {targets!r}",
            ]
        config.write_text("\n".join(lines) + "\n")
        self.log_path = workdir / "prometheus.log"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    prometheus_binary(),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C on pytest is not its business; we stop it by PID
            )

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"prometheus exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if requests.get(f"{self.base_url}/-/ready", timeout=PROBE_TIMEOUT).ok:
                    return
            except requests.RequestException:
                pass
            time.sleep(POLL)
        pytest.fail(f"prometheus at {self.base_url} not ready within {READY_TIMEOUT}s:\n{self.log_tail()}")

    def wait_for_scrape(self, job: str = "exporter", health: str = "up") -> None:
        """Until every target of ``job`` has been scraped with ``health`` (and, if up, data is queryable)."""
        deadline = time.monotonic() + FIRST_SCRAPE_TIMEOUT
        while time.monotonic() < deadline:
            targets = requests.get(f"{self.base_url}/api/v1/targets", timeout=PROBE_TIMEOUT).json()["data"]
            mine = [t for t in targets["activeTargets"] if t["labels"].get("job") == job]
            if mine and all(t["health"] == health for t in mine):
                if health != "up" or self._has_samples(job):
                    return
            time.sleep(POLL)
        pytest.fail(f"{job} target never became {health} within {FIRST_SCRAPE_TIMEOUT}s:\n{self.log_tail()}")

    def _has_samples(self, job: str) -> bool:
        answer = requests.get(
            f"{self.base_url}/api/v1/query", params={"query": f'up{{job="{job}"}}'}, timeout=PROBE_TIMEOUT
        ).json()
        return bool(answer["data"]["result"])

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL if it lingers; always reaped."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT)


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
