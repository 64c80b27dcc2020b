"""``measure`` through the real supervisor: requested metrics, -d, table and JSON, failures."""

from __future__ import annotations

import pytest

from servo_actors.connectors.synthetic import METRIC_UNITS

pytestmark = pytest.mark.timeout(90)

SYNTHETIC = {"name": "app", "type": "synthetic", "config": {"time_scale": 0}}


def chaos(name: str, **config: object) -> dict[str, object]:
    return {"name": name, "type": "chaos", "config": config}


def test_measure_json_has_the_requested_metrics_over_the_duration(servo) -> None:
    servo.write_config(SYNTHETIC, chaos("drill", metrics={"queue": {"unit": "jobs"}}, values={"queue": 7}))
    result, payload = servo.run_json("measure", "throughput", "p99_latency", "queue", "-d", "2s")
    assert result.returncode == 0, result.stderr
    assert (payload["operation"], payload["status"], payload["reason"]) == ("measure", "ok", "success")
    metrics = payload["data"]["metrics"]
    assert sorted(metrics) == ["p99_latency", "queue", "throughput"]
    assert metrics["throughput"]["unit"] == "rps"
    (throughput,) = metrics["throughput"]["values"]
    assert throughput["id"] == '{component="web"}'
    # The synthetic connector reports one point per simulated second of the 2 s window.
    assert len(throughput["data"]) == 2
    # One p99 series per replica (2 by default).
    assert len(metrics["p99_latency"]["values"]) == 2
    (queue,) = metrics["queue"]["values"]
    assert (metrics["queue"]["unit"], queue["id"], [value for _, value in queue["data"]]) == (
        "jobs",
        "drill",
        [7.0],
    )
    assert set(payload["data"]["annotations"]) >= {"drill.pid", "drill.operations"}
    assert payload["connectors"]["app"]["status"] == "ok"
    assert "measure [" not in result.stderr  # not a terminal: no progress line


def test_measure_table_without_arguments_reads_every_metric_now(servo, kit) -> None:
    servo.write_config(SYNTHETIC)
    result = servo.run("measure")
    assert result.returncode == 0, result.stderr
    rows = kit.table_rows(result.stdout)
    assert rows[0] == ["METRIC", "SERIES", "POINTS", "MEAN", "LAST", "UNIT"]
    by_metric = {}
    for row in rows[1:]:
        by_metric.setdefault(row[0], []).append(row)
    assert sorted(by_metric) == sorted(METRIC_UNITS)
    for name, found in by_metric.items():
        assert all(row[2] == "1" and row[5] == METRIC_UNITS[name] for row in found), found
        # One point: its mean is its last value.
        assert all(row[3] == row[4] for row in found), found
    cost = by_metric["cost"][0]
    assert float(cost[3]) > 0


def test_measure_holds_the_window_with_a_wait_connector(servo) -> None:
    servo.write_config(SYNTHETIC, {"name": "hold", "type": "wait", "config": {"progress_interval": "250ms"}})
    result, payload = servo.run_json("measure", "cost", "-d", "1500ms")
    assert result.returncode == 0, result.stderr
    assert list(payload["data"]["metrics"]) == ["cost"]
    assert len(payload["data"]["metrics"]["cost"]["values"][0]["data"]) == 2  # ceil(1.5 s)
    assert payload["connectors"]["hold"] == {"status": "ok", "reason": "success", "message": None}


def test_an_unknown_metric_exits_2_naming_it(servo) -> None:
    servo.write_config(SYNTHETIC)
    result = servo.run("measure", "throughput", "latency_p42")
    assert result.returncode == 2
    assert result.stderr.startswith(
        "error: unknown metric(s) latency_p42 (the connectors describe: p99_latency,"
    )
    assert result.stdout == ""


def test_a_bad_duration_is_a_usage_error(servo) -> None:
    servo.write_config(SYNTHETIC)
    result = servo.run("measure", "-d", "5 parsecs")
    assert result.returncode == 2
    assert "Invalid value for '-d' / '--duration': not a duration: '5 parsecs'" in result.stderr


def test_a_failing_connector_exits_1_naming_it(servo, kit) -> None:
    fault = {
        "action": "failure",
        "message": "p99 above 250 ms",
        "status": "aborted",
        "reason": "slo-violation",
    }
    servo.write_config(SYNTHETIC, chaos("drill", faults={"measure": fault}))
    result, payload = servo.run_json("measure", "-d", "1s")
    assert result.returncode == 1
    assert (payload["status"], payload["reason"]) == ("aborted", "slo-violation")
    assert payload["message"] == "connector 'drill': p99 above 250 ms"
    # The healthy connector's metrics are still there.
    assert "throughput" in payload["data"]["metrics"]
    assert result.stderr.strip().splitlines()[-1] == (
        "error: measure aborted (slo-violation): connector 'drill': p99 above 250 ms"
    )
    assert "Traceback" not in result.stderr


def test_a_connector_crashing_mid_measure_exits_1_naming_it(servo) -> None:
    servo.write_config(SYNTHETIC, chaos("drill", faults={"measure": {"action": "exit", "exit_code": 4}}))
    result = servo.run("measure")
    assert result.returncode == 1
    assert "connector 'drill' crashed during measure (exit code 4)" in result.stderr
    assert "Traceback" not in result.stderr


def test_measure_connector_starts_only_the_connectors_named(servo) -> None:
    # The chaos connector would fail every measurement: left out, it is never started.
    servo.write_config(SYNTHETIC, chaos("drill", faults={"measure": "raise"}))
    result, payload = servo.run_json("measure", "--connector", "app")
    assert result.returncode == 0, result.stderr
    assert sorted(payload["connectors"]) == ["app"]
    assert sorted(payload["data"]["metrics"]) == sorted(METRIC_UNITS)
    unknown = servo.run("measure", "--connector", "nope")
    assert unknown.returncode == 2
    assert "unknown connector(s) nope (configured: app, drill)" in unknown.stderr
