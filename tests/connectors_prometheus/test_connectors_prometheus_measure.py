"""MEASURE against a real Prometheus scraping the test exporter every second."""

from __future__ import annotations

import time

import pytest
import requests

from servo_actors.connectors.base import ConnectorFailure, Control
from servo_actors.connectors.prometheus import MAX_POINTS_PER_SERIES

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(60)]


def _by_id(metric: dict) -> dict[str, list]:
    return {series["id"]: series["data"] for series in metric["values"]}


def test_every_series_comes_back_under_its_own_stable_id(
    prometheus, exporter, make_connector, progress
) -> None:
    connector = make_connector(
        prometheus.base_url,
        [
            {"name": "requests", "unit": "count", "query": "http_requests_total"},
            {"name": "latency", "unit": "s", "query": "app_latency_seconds"},
            {"name": "info", "query": "app_info"},
        ],
    )
    before = time.time()
    result = connector.measure(["requests", "latency", "info"], Control(warmup=1, duration=2), progress)
    after = time.time()

    requests_ = result["metrics"]["requests"]
    assert requests_["unit"] == "count"
    instance = f'instance="{exporter.address}"'
    expected = {
        f'{{__name__="http_requests_total",code="{code}",{instance},job="exporter",pod="{pod}"}}'
        for pod, code in [("web-0", "200"), ("web-0", "500"), ("web-1", "200")]
    }
    series = _by_id(requests_)
    assert set(series) == expected  # three series, none overwriting another
    for data in series.values():
        stamps = [stamp for stamp, _ in data]
        assert len(stamps) >= 2
        assert stamps == sorted(stamps)
        # The window is after the warmup (both ends rounded to whole seconds).
        assert before + 1 - 0.5 <= stamps[0] and stamps[-1] <= after + 0.5
        values = [value for _, value in data]
        assert values == sorted(values)  # counters only grow

    latency = _by_id(result["metrics"]["latency"])
    assert {round(data[-1][1], 3) for data in latency.values()} == {0.25, 0.05}
    assert any('pod="web-0"' in series_id for series_id in latency)

    (info_id,) = _by_id(result["metrics"]["info"])
    assert 'version="1.0 \\"beta\\""' in info_id
    assert result["annotations"] == {}

    percents = [percent for percent, _ in progress.calls]
    assert percents[-1] == 100 and percents == sorted(percents) and len(percents) >= 3
    assert any("warming up" in message for _, message in progress.calls)
    assert any("measuring" in message for _, message in progress.calls)

    again = connector.measure(["requests"], Control(duration=1), progress)
    assert set(_by_id(again["metrics"]["requests"])) == expected  # same ids every time


def test_only_requested_metrics_are_queried(prometheus, make_connector, progress) -> None:
    connector = make_connector(
        prometheus.base_url,
        [{"name": "requests", "query": "http_requests_total"}, {"name": "broken", "query": "sum("}],
    )
    result = connector.measure(["requests"], Control(duration=0), progress)
    assert list(result["metrics"]) == ["requests"]


def test_absent_policies_ignore_zero_and_warn(prometheus, make_connector, progress) -> None:
    missing = 'nonexistent_metric_total{job="exporter"}'
    connector = make_connector(
        prometheus.base_url,
        [
            {"name": "ignored", "unit": "rps", "query": missing, "absent": "ignore"},
            {"name": "zeroed", "unit": "rps", "query": missing, "absent": "zero"},
            {"name": "warned", "unit": "rps", "query": missing, "absent": "warn"},
        ],
    )
    result = connector.measure(["ignored", "zeroed", "warned"], Control(duration=2), progress)
    metrics = result["metrics"]
    assert metrics["ignored"] == {"unit": "rps", "values": []}
    assert metrics["warned"] == {"unit": "rps", "values": []}
    (zero,) = metrics["zeroed"]["values"]
    assert zero["id"] == "{}"
    assert len(zero["data"]) >= 2 and all(value == 0 for _, value in zero["data"])
    assert set(result["annotations"]) == {"prom:warned"}
    assert missing in result["annotations"]["prom:warned"]
    assert "no data" in result["annotations"]["prom:warned"]


def test_absent_policy_fail_names_the_metric_and_query(prometheus, make_connector, progress) -> None:
    missing = "nonexistent_metric_total"
    connector = make_connector(prometheus.base_url, [{"name": "needed", "query": missing, "absent": "fail"}])
    with pytest.raises(ConnectorFailure) as caught:
        connector.measure(["needed"], Control(duration=1), progress)
    assert (caught.value.status, caught.value.reason) == ("failed", "metric-absent")
    assert "'needed'" in caught.value.message and missing in caught.value.message


def test_a_window_too_long_for_the_step_gets_a_raised_step(prometheus, make_connector) -> None:
    connector = make_connector(prometheus.base_url, [{"name": "const", "query": "vector(1)", "step": "1s"}])
    end = time.time()
    start = end - 4 * 3600  # 14,400 one-second steps: more than Prometheus allows

    # Prometheus itself refuses this step over this window: the limit is real.
    refused = requests.get(
        f"{prometheus.base_url}/api/v1/query_range",
        params={"query": "vector(1)", "start": round(start), "end": round(end), "step": "1"},
        timeout=10,
    )
    assert refused.status_code == 400 and "11,000 points" in refused.json()["error"]

    result = connector.query_range(connector.config.metrics[0], start, end)
    assert result.step_raised and result.step > 1.0
    (series,) = result.values
    stamps = [stamp for stamp, _ in series["data"]]
    assert 10_000 < len(stamps) <= MAX_POINTS_PER_SERIES
    assert stamps[1] - stamps[0] == pytest.approx(result.step)


def test_measure_with_a_tiny_step_says_it_raised_it(prometheus, make_connector, progress) -> None:
    connector = make_connector(
        prometheus.base_url, [{"name": "const", "query": "vector(1)", "step": "100us"}]
    )
    result = connector.measure(["const"], Control(duration=2), progress)
    (series,) = result["metrics"]["const"]["values"]
    assert 0 < len(series["data"]) <= MAX_POINTS_PER_SERIES
    assert "step raised from" in result["annotations"]["prom:const"]


def test_a_promql_syntax_error_fails_naming_the_query_with_prometheus_message(
    prometheus, make_connector, progress
) -> None:
    connector = make_connector(
        prometheus.base_url,
        [
            {"name": "good", "query": "http_requests_total"},
            {"name": "bad", "query": "sum(rate(http_requests_total[1m])"},
        ],
    )
    with pytest.raises(ConnectorFailure) as caught:
        connector.measure(["good", "bad"], Control(duration=1), progress)
    failure = caught.value
    assert (failure.status, failure.reason) == ("failed", "prometheus-error")
    assert "sum(rate(http_requests_total[1m])" in failure.message
    assert "'bad'" in failure.message
    assert "parse error" in failure.message  # Prometheus's own words
    assert "HTTP 400" in failure.message


def test_an_unreachable_prometheus_fails_naming_the_url(dead_url, make_connector, progress) -> None:
    connector = make_connector(dead_url, [{"name": "requests", "query": "http_requests_total"}], timeout="2s")
    with pytest.raises(ConnectorFailure) as caught:
        connector.measure(["requests"], Control(duration=0), progress)
    assert (caught.value.status, caught.value.reason) == ("failed", "prometheus-unreachable")
    assert dead_url in caught.value.message
    assert "Connection refused" in caught.value.message
