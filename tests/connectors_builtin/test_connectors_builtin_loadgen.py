"""``loadgen`` against real HTTP servers on 127.0.0.1 with known latency and error rates.

Tolerances are generous: the machine is shared and noisy. The lower latency bounds are exact
(a handler that sleeps 20 ms cannot answer sooner); upper bounds only catch gross errors.
"""

from __future__ import annotations

import socket
import time

import pytest
from pydantic import ValidationError

from servo_actors.connectors.base import ConnectorFailure, Control
from servo_actors.connectors.loadgen import METRIC_UNITS, LoadgenConfig, LoadgenConnector

SERVER_DELAY = 0.02  # seconds each answer takes
EVERY_NTH_FAILS = 10


def slow_and_sometimes_failing(handler, number, release):
    time.sleep(SERVER_DELAY)
    return (500 if number % EVERY_NTH_FAILS == 0 else 200), b"ok"


def load(url: str, **config) -> LoadgenConnector:
    return LoadgenConnector("load", {"url": url, "progress_interval": "250ms", **config})


@pytest.mark.timeout(60)
def test_measures_throughput_latency_and_error_rate(http_server, progress):
    server = http_server(slow_and_sometimes_failing)
    connector = load(server.url, concurrency=4, rate=0)
    began = time.monotonic()
    result = connector.measure(list(METRIC_UNITS), Control(warmup=0.5, duration=2.0, delay=5), progress)
    assert time.monotonic() - began < 20  # load for 2.5 s, no wait for the delay

    metrics = result["metrics"]
    assert set(metrics) == set(METRIC_UNITS)
    assert {name: reading["unit"] for name, reading in metrics.items()} == METRIC_UNITS
    values = {name: reading["value"] for name, reading in metrics.items()}
    # 4 threads of 20 ms requests: at most 200 rps; a loaded machine gives less, but not nothing.
    assert 20 <= values["throughput"] <= 4 / SERVER_DELAY * 1.1
    assert 0.06 <= values["error_rate"] <= 0.14
    assert values["latency_p50"] >= SERVER_DELAY * 1000
    assert values["latency_p50"] < 500
    assert values["latency_p50"] <= values["latency_p90"] <= values["latency_p99"] <= values["latency_max"]
    # Requests counted = throughput * duration; the server saw those plus the warmup's.
    assert len(server.requests) >= values["throughput"] * 2.0
    assert progress.percents[-1] == 100 and len(progress.calls) >= 5
    assert any("requests measured" in message for _, _, message in progress.calls)


@pytest.mark.timeout(60)
def test_rate_limits_the_load(http_server, progress):
    server = http_server(lambda handler, number, release: (200, b"fast"))
    result = load(server.url, concurrency=4, rate=20).measure(["throughput"], Control(duration=2.0), progress)
    throughput = result["metrics"]["throughput"]["value"]
    assert 10 <= throughput <= 22  # unthrottled, a local server answers hundreds per second
    assert list(result["metrics"]) == ["throughput"]  # only what was asked for


@pytest.mark.timeout(60)
def test_warmup_requests_are_left_out(http_server, progress):
    started = time.monotonic()
    refused = []

    def failing_at_first(handler, number, release):
        if time.monotonic() - started < 0.6:
            refused.append(number)
            return 503, b""
        return 200, b""

    server = http_server(failing_at_first)
    result = load(server.url, concurrency=2, rate=50).measure(
        ["error_rate", "throughput"], Control(warmup=1.0, duration=1.0), progress
    )
    assert len(refused) >= 5  # the warmup did see errors...
    assert result["metrics"]["error_rate"]["value"] == 0.0  # every 503 came during the warmup
    assert result["metrics"]["throughput"]["value"] > 0


@pytest.mark.timeout(60)
def test_request_timeouts_count_as_errors_and_stay_bounded(http_server, progress):
    server = http_server(lambda handler, number, release: (release.wait(30), (200, b"late"))[1])
    began = time.monotonic()
    result = load(server.url, concurrency=2, timeout="300ms").measure(
        ["error_rate", "latency_p50"], Control(duration=1.0), progress
    )
    assert time.monotonic() - began < 15  # 1 s of load, then at most timeout + grace to join
    assert result["metrics"]["error_rate"]["value"] == 1.0
    assert result["metrics"]["latency_p50"]["value"] >= 300


@pytest.mark.timeout(60)
def test_refused_connections_are_errors(progress):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens on it once closed
    result = load(f"http://127.0.0.1:{port}/", concurrency=1, rate=20, timeout="1s").measure(
        ["error_rate"], Control(duration=0.5), progress
    )
    assert result["metrics"]["error_rate"]["value"] == 1.0


@pytest.mark.timeout(60)
def test_method_headers_and_body_reach_the_server(http_server, progress):
    server = http_server(lambda handler, number, release: (201, b""))
    connector = load(
        server.url, method="post", rate=10, concurrency=1, headers={"X-Test": "yes"}, body='{"hello": "✓"}'
    )
    result = connector.measure(["error_rate"], Control(duration=0.5), progress)
    assert result["metrics"]["error_rate"]["value"] == 0.0
    first = server.requests[0]
    assert first["method"] == "POST"
    assert first["headers"]["X-Test"] == "yes"
    assert first["body"] == '{"hello": "✓"}'.encode()


@pytest.mark.timeout(30)
def test_no_measurement_window_is_a_clear_failure(http_server, progress):
    server = http_server(lambda handler, number, release: (200, b""))
    with pytest.raises(ConnectorFailure, match="no request") as failure:
        load(server.url).measure(["throughput"], Control(duration=0), progress)
    assert failure.value.reason == "no-data"


def test_describe_and_config():
    connector = load("http://127.0.0.1:9/")
    assert connector.describe() == {
        "components": {},
        "metrics": {n: {"unit": u} for n, u in METRIC_UNITS.items()},
    }
    config = LoadgenConfig.model_validate(
        {"url": "http://127.0.0.1:8080/", "timeout": "250ms", "method": "put"}
    )
    assert (config.timeout, config.method, config.rate, config.concurrency) == (0.25, "PUT", 0.0, 4)
    assert "secret" not in repr(LoadgenConfig(url="http://127.0.0.1/", headers={"Authorization": "secret"}))
    for bad in (
        {"url": "127.0.0.1:8080"},
        {"url": "http://127.0.0.1/", "rate": -1},
        {"url": "http://127.0.0.1/", "concurrency": 0},
        {"url": "http://127.0.0.1/", "method": "FETCH"},
        {"url": "http://127.0.0.1/", "timeout": 0},
        {},
    ):
        with pytest.raises(ValidationError):
            LoadgenConfig.model_validate(bad)
