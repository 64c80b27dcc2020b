"""Fast-fail on SLO conditions, and a Prometheus that dies while a measurement runs."""

from __future__ import annotations

import threading
import time

import pytest

from servo_actors.connectors.base import ConnectorFailure, Control

from .conftest import EXPORTER_THREAD

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(60)]

LATENCY = {"name": "latency", "unit": "s", "query": "max(app_latency_seconds)"}  # 0.25 from the exporter
PERIOD = 0.2  # fast_fail_period in these tests
LONG_WINDOW = 30.0  # a window the tests must never sit through


def _slo(*conditions: dict) -> dict:
    return {"slo": {"conditions": list(conditions)}}


@pytest.mark.parametrize(
    ("keep", "threshold"),
    [("below", 0.1), ("above", 1.0)],
)
def test_a_violated_condition_aborts_well_before_the_window_ends(
    prometheus, make_connector, progress, keep: str, threshold: float
) -> None:
    connector = make_connector(prometheus.base_url, [LATENCY], fast_fail_period=PERIOD)
    condition = {"metric": "latency", "threshold": threshold, "keep": keep, "trigger_count": 3}
    began = time.monotonic()
    with pytest.raises(ConnectorFailure) as caught:
        connector.measure(["latency"], Control(duration=LONG_WINDOW, userdata=_slo(condition)), progress)
    elapsed = time.monotonic() - began
    failure = caught.value
    assert (failure.status, failure.reason) == ("aborted", "slo-violation")
    assert "latency" in failure.message and "0.25" in failure.message and f"{threshold:g}" in failure.message
    assert "3 evaluation(s) in a row" in failure.message
    assert 3 * PERIOD <= elapsed < LONG_WINDOW / 2  # needed three evaluations; nowhere near the end
    assert progress.calls and progress.calls[-1][0] < 100


def test_a_condition_that_holds_lets_the_measurement_finish(prometheus, make_connector, progress) -> None:
    connector = make_connector(prometheus.base_url, [LATENCY], fast_fail_period=PERIOD)
    conditions = _slo(
        {"metric": "latency", "threshold": 1.0, "keep": "below", "trigger_count": 1},
        # A condition on another connector's metric is not this connector's business.
        {"metric": "throughput", "threshold": 0, "keep": "below"},
    )
    result = connector.measure(["latency"], Control(duration=1.5, userdata=conditions), progress)
    assert result["metrics"]["latency"]["values"]
    assert progress.calls[-1][0] == 100


def test_conditions_are_evaluated_even_when_their_metric_is_not_requested(
    prometheus, make_connector, progress
) -> None:
    connector = make_connector(
        prometheus.base_url,
        [LATENCY, {"name": "requests", "query": "http_requests_total"}],
        fast_fail_period=PERIOD,
    )
    condition = {"metric": "latency", "threshold": 0.1}
    with pytest.raises(ConnectorFailure) as caught:
        connector.measure(["requests"], Control(duration=LONG_WINDOW, userdata=_slo(condition)), progress)
    assert caught.value.reason == "slo-violation"


@pytest.mark.parametrize("during", ["final-query", "fast-fail"])
@pytest.mark.timeout(90)
def test_prometheus_stopped_mid_measure_fails_the_measurement(
    prometheus_factory, make_connector, progress, during: str
) -> None:
    doomed = prometheus_factory()
    connector = make_connector(
        doomed.base_url,
        [{"name": "const", "query": "vector(1)"}],
        fast_fail_period=PERIOD,
        timeout="2s",
    )
    userdata = _slo({"metric": "const", "threshold": 100}) if during == "fast-fail" else {}
    duration = LONG_WINDOW if during == "fast-fail" else 2.0
    threads_before = set(threading.enumerate())
    stopper = threading.Timer(0.7, doomed.stop)
    stopper.start()
    began = time.monotonic()
    try:
        with pytest.raises(ConnectorFailure) as caught:
            connector.measure(["const"], Control(duration=duration, userdata=userdata), progress)
    finally:
        stopper.join()
    elapsed = time.monotonic() - began
    assert doomed.process.returncode is not None  # it really was stopped
    failure = caught.value
    assert (failure.status, failure.reason) == ("failed", "prometheus-unreachable")
    assert doomed.base_url in failure.message and "'vector(1)'" in failure.message
    if during == "fast-fail":
        assert "SLO query" in failure.message
        assert elapsed < LONG_WINDOW / 2  # noticed while the window ran, not at its end
    # The calling process is fine: no query thread left behind, and it goes on measuring. (The
    # session's Prometheus scrapes the exporter in this process every second, each scrape a thread.)
    left = [t.name for t in threading.enumerate() if t not in threads_before and t.name != EXPORTER_THREAD]
    assert left == []


def test_skip_holds_the_first_evaluation_back(prometheus, make_connector, progress) -> None:
    skip = 1.0
    connector = make_connector(prometheus.base_url, [LATENCY], fast_fail_period=PERIOD, fast_fail_skip=skip)
    condition = {"metric": "latency", "threshold": 0.1, "trigger_count": 1}
    began = time.monotonic()
    with pytest.raises(ConnectorFailure) as caught:
        connector.measure(["latency"], Control(duration=LONG_WINDOW, userdata=_slo(condition)), progress)
    assert caught.value.reason == "slo-violation"
    assert skip <= time.monotonic() - began < LONG_WINDOW / 2  # not before skip; nowhere near the end


def test_treat_zero_as_missing_lets_a_zero_pass(prometheus, make_connector, progress) -> None:
    zero = {"name": "idle", "unit": "", "query": "max(app_latency_seconds) * 0"}
    condition = {"metric": "idle", "threshold": -1.0, "keep": "below", "trigger_count": 1}  # 0 breaks it
    strict = make_connector(prometheus.base_url, [zero], fast_fail_period=PERIOD)
    with pytest.raises(ConnectorFailure) as caught:
        strict.measure(["idle"], Control(duration=LONG_WINDOW, userdata=_slo(condition)), progress)
    assert caught.value.reason == "slo-violation"
    lenient = make_connector(
        prometheus.base_url, [zero], fast_fail_period=PERIOD, fast_fail_treat_zero_as_missing=True
    )
    result = lenient.measure(["idle"], Control(duration=1.0, userdata=_slo(condition)), progress)
    assert "idle" in result["metrics"]


def test_span_judges_each_series_mean_over_the_span_not_its_current_value(
    prometheus, make_connector, progress
) -> None:
    # vector(time()) is now at an instant and, over a span of 600 s, about now - 300 on average:
    # a threshold at now - 150 is broken by the current value and kept by the mean.
    clock = {"name": "clock", "unit": "s", "query": "vector(time())", "step": 1}
    condition = {"metric": "clock", "threshold": time.time() - 150, "keep": "below", "trigger_count": 1}
    instant = make_connector(prometheus.base_url, [clock], fast_fail_period=PERIOD)
    with pytest.raises(ConnectorFailure) as caught:
        instant.measure([], Control(duration=LONG_WINDOW, userdata=_slo(condition)), progress)
    assert caught.value.reason == "slo-violation"
    spanned = make_connector(prometheus.base_url, [clock], fast_fail_period=PERIOD, fast_fail_span="10m")
    result = spanned.measure(["clock"], Control(duration=1.0, userdata=_slo(condition)), progress)
    assert result["metrics"]["clock"]["values"]


def test_span_and_skip_are_checked() -> None:
    from pydantic import ValidationError

    from servo_actors.connectors.prometheus import PrometheusConfig

    for bad, words in (({"fast_fail_span": 0}, "more than 0"), ({"fast_fail_skip": -1}, "not be negative")):
        with pytest.raises(ValidationError, match=words):
            PrometheusConfig.model_validate({"metrics": [LATENCY], **bad})
