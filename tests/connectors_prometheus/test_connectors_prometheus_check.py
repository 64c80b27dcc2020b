"""check(): reachability, each metric's query, and the scrape targets, against real servers."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(60)]


def _by_name(results: list[dict]) -> dict[str, dict]:
    # A failed check carries a remedy (the curl to try); reachability is critical.
    assert all(set(result) <= {"name", "success", "message", "remedy", "severity"} for result in results)
    assert all(("remedy" in result) == (not result["success"]) for result in results)
    return {result["name"]: result for result in results}


def test_all_checks_pass_on_a_healthy_setup(prometheus, make_connector) -> None:
    connector = make_connector(
        prometheus.base_url,
        [
            {"name": "requests", "query": "http_requests_total"},
            {"name": "latency", "query": "app_latency_seconds"},
        ],
    )
    results = _by_name(connector.check())
    assert list(results) == ["prometheus reachable", "query requests", "query latency", "scrape targets up"]
    assert all(result["success"] for result in results.values()), results
    assert prometheus.base_url in results["prometheus reachable"]["message"]
    assert "2." in results["prometheus reachable"]["message"]  # the server's version
    assert results["query requests"]["message"].startswith("3 series")
    assert results["scrape targets up"]["message"] == "all 1 targets up"


def test_query_checks_report_errors_and_absences_by_policy(prometheus, make_connector) -> None:
    connector = make_connector(
        prometheus.base_url,
        [
            {"name": "broken", "query": "sum(up"},
            {"name": "needed", "query": "nonexistent_metric_total", "absent": "fail"},
            {"name": "optional", "query": "nonexistent_metric_total", "absent": "zero"},
        ],
    )
    results = _by_name(connector.check())
    assert results["prometheus reachable"]["success"]
    broken = results["query broken"]
    assert not broken["success"] and "parse error" in broken["message"] and "'sum(up'" in broken["message"]
    assert not results["query needed"]["success"]
    assert "no data" in results["query needed"]["message"]
    assert "/api/v1/label/__name__/values" in results["query needed"]["remedy"]
    assert broken["remedy"].startswith(
        f"curl -sSG {prometheus.base_url}/api/v1/query --data-urlencode 'query=sum(up'"
    )
    assert results["query optional"]["success"]  # its absence is tolerated by config
    assert "no data" in results["query optional"]["message"]


def test_an_unreachable_prometheus_gives_one_failed_check_naming_the_url(dead_url, make_connector) -> None:
    connector = make_connector(dead_url, [{"name": "requests", "query": "up"}], timeout="2s")
    (result,) = connector.check()
    assert result["name"] == "prometheus reachable" and not result["success"]
    assert dead_url in result["message"]
    assert result["severity"] == "critical"
    assert result["remedy"].startswith(f"curl -sS {dead_url}/api/v1/status/buildinfo")


@pytest.mark.timeout(90)
def test_a_down_scrape_target_fails_the_targets_check(prometheus_factory, dead_url, make_connector) -> None:
    dead_target = dead_url.removeprefix("http://")
    server = prometheus_factory([dead_target])
    server.wait_for_scrape(health="down")
    connector = make_connector(server.base_url, [{"name": "const", "query": "vector(1)"}])
    results = _by_name(connector.check())
    assert results["prometheus reachable"]["success"] and results["query const"]["success"]
    targets = results["scrape targets up"]
    assert not targets["success"]
    assert "1 of 1 down" in targets["message"] and dead_target in targets["message"]
    assert "connection refused" in targets["message"].lower()  # Prometheus's lastError
    assert "/api/v1/targets?state=active" in targets["remedy"]
