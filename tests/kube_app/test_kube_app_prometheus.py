"""A real Prometheus scrapes the test application: histogram_quantile gives its p99 latency."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from app_process import AppProcess
from prometheus_server import PrometheusServer
from waiting import wait_until

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(600)]

WORK_MS = 10
P99_TIMEOUT = 60.0
"""Seconds until the rate over the window has two scrapes with traffic (scrapes are 1 s apart)."""
P99 = 'histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket{path="/work", code="200"}[30s])))'


def test_prometheus_computes_the_p99_of_work(start_app: Callable[..., AppProcess], tmp_path: Path) -> None:
    app = start_app({"WORK_MS": str(WORK_MS)})
    server = PrometheusServer(tmp_path, [f"127.0.0.1:{app.port}"], job="app")
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            app.get("/work")
            stop.wait(0.02)

    client = threading.Thread(target=load)
    try:
        server.wait_ready()
        server.wait_for_scrape("app")
        client.start()

        def p99() -> float | None:
            result = server.query(P99)
            value = float(result[0]["value"][1]) if result else math.nan
            return value if math.isfinite(value) else None

        seconds = wait_until(p99, P99_TIMEOUT, interval=0.5, what="a finite p99 of /work")
        # Every request costs WORK_MS of CPU, so none is faster; interpolation inside the bucket
        # that holds it can land at most one bucket (1.2x) below.
        assert seconds >= WORK_MS / 1000 / 1.2, seconds
        [series] = server.query('http_requests_total{path="/work", code="200"}')
        assert series["metric"]["job"] == "app"
        assert float(series["value"][1]) > 0
        [gogc] = server.query("go_gc_gogc_percent")
        assert float(gogc["value"][1]) == 100
    finally:
        stop.set()
        if client.is_alive():
            client.join(30)
        server.stop()
