"""`servo-actors run` with no optimizer listening: it says once, plainly, where and what to do."""

from __future__ import annotations

import signal
import socket

import pytest

RETRIES_SEEN = 20.0
"""Generous bound until the servo has logged a few retries (100-300 ms apart here)."""


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.timeout(90)
def test_run_names_the_url_it_cannot_reach_once_and_how_to_start_the_embedded_optimizer(servo, kit) -> None:
    port = free_port()
    config = {
        "optimizer": {"id": "example.com/web", "base_url": f"http://127.0.0.1:{port}"},
        "settings": {"backoff": {"min": "100ms", "max": "300ms", "max_time": "10m"}},
        "connectors": [{"name": "app", "type": "synthetic", "config": {"time_scale": 0}}],
    }
    proc = servo(config)
    url = f"http://127.0.0.1:{port}/accounts/example.com/applications/web/servo"
    kit.wait_until(lambda: proc.log().count(f"POST HELLO to {url} failed") >= 4, RETRIES_SEEN, what="retries")
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0
    log = proc.log()
    told = [line for line in log.splitlines() if "cannot reach the optimizer" in line]
    assert len(told) == 1, log  # once, however many retries
    [line] = told
    assert f"cannot reach the optimizer at {url} (connection refused)" in line
    assert f"servo-actors optimizer serve --port {port} --plan PLAN" in line and "example.com/web" in line
    # The retries say what failed in words, not an exception's class name.
    assert "cannot connect: connection refused" in log and "(ConnectionError)" not in log
