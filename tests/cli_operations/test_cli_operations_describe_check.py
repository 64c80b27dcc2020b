"""``describe`` and ``check`` through the real supervisor: tables, JSON, failures by connector name."""

from __future__ import annotations

import subprocess
import sys

import pytest

from servo_actors.connectors.synthetic import METRIC_UNITS, SyntheticModel

pytestmark = pytest.mark.timeout(90)

SYNTHETIC = {"name": "app", "type": "synthetic", "config": {"time_scale": 0}}
DB = {
    "db.main": {
        "settings": {"pool": {"type": "range", "min": 1, "max": 8, "step": 1, "value": 2, "pinned": True}}
    }
}


def chaos(name: str, **config: object) -> dict[str, object]:
    return {"name": name, "type": "chaos", "config": config}


def kubernetes(kubeconfig: object) -> dict[str, object]:
    """A kubernetes connector for one Deployment, reading ``kubeconfig``."""
    deployment = {"name": "web", "containers": [{"name": "main", "cpu": {"min": "250m", "max": 2}}]}
    return {
        "name": "k8s",
        "type": "kubernetes",
        "config": {"kubeconfig": str(kubeconfig), "deployments": [deployment]},
    }


def test_describe_table_lists_settings_and_metrics(servo, kit) -> None:
    servo.write_config(SYNTHETIC, chaos("drill", components=DB, metrics={"queue": {"unit": "jobs"}}))
    result = servo.run("describe")
    assert result.returncode == 0, result.stderr
    rows = kit.table_rows(result.stdout)
    assert rows[0] == ["COMPONENT", "SETTING", "TYPE", "VALUE", "RANGE/VALUES", "UNIT"]
    assert ["web", "cpu", "range", "1", "0.25..4 step 0.125", "cores"] in rows
    assert ["web", "gc", "enum", "g1", "serial|parallel|g1", "-"] in rows
    assert ["db.main", "pool", "range (pinned)", "2", "1..8 step 1", "-"] in rows
    assert ["METRIC", "UNIT"] in rows
    metrics = rows[rows.index(["METRIC", "UNIT"]) + 1 :]
    assert metrics == [[name, unit] for name, unit in METRIC_UNITS.items()] + [["queue", "jobs"]]


def test_describe_json_is_the_aggregated_description(servo) -> None:
    servo.write_config(SYNTHETIC, chaos("drill", components=DB))
    result, payload = servo.run_json("describe")
    assert result.returncode == 0, result.stderr
    assert payload["operation"] == "describe"
    assert (payload["status"], payload["reason"], payload["message"]) == ("ok", "success", None)
    assert payload["data"]["components"] == {**SyntheticModel().components(), **DB}
    assert payload["data"]["metrics"] == {name: {"unit": unit} for name, unit in METRIC_UNITS.items()}
    assert payload["connectors"] == {
        "app": {"status": "ok", "reason": "success", "message": None},
        "drill": {"status": "ok", "reason": "success", "message": None},
    }


def test_describe_failure_names_the_connector(servo) -> None:
    servo.write_config(SYNTHETIC, chaos("drill", faults={"describe": {"action": "exit", "exit_code": 3}}))
    result = servo.run("describe")
    assert result.returncode == 1
    assert "connector 'drill' crashed during describe (exit code 3)" in result.stderr
    assert "Traceback" not in result.stderr
    # What the healthy connectors described is still shown.
    assert "web" in result.stdout


def test_check_passes_with_a_row_per_check(servo, kit) -> None:
    servo.write_config(
        SYNTHETIC,
        chaos("drill"),
        {"name": "probe", "type": "command", "config": {"check": {"shell-works": "true"}}},
    )
    result = servo.run("check")
    assert result.returncode == 0, result.stderr
    rows = kit.table_rows(result.stdout)
    assert rows[0] == ["CONNECTOR", "CHECK", "RESULT", "MESSAGE"]
    assert rows[1] == ["app", "-", "ok", "no checks"]
    assert rows[2][:3] == ["drill", "drill is alive", "ok"]
    assert rows[3] == ["probe", "shell-works", "ok", "exited with status 0"]
    assert "\x1b[" not in result.stdout  # not a terminal: no colour


def test_check_json_lists_every_check(servo) -> None:
    servo.write_config(chaos("drill"), {"name": "probe", "type": "command", "config": {"check": "true"}})
    result, payload = servo.run_json("check")
    assert result.returncode == 0, result.stderr
    assert payload["status"] == "ok"
    checks = payload["data"]["checks"]
    assert [(c["connector"], c["success"]) for c in checks] == [("drill", True), ("probe", True)]
    assert checks[0]["name"] == "drill is alive"


def test_a_failed_check_exits_1_naming_connector_and_check(servo, kit) -> None:
    checks = {"disk": "true", "app-up": "echo refused >&2; exit 7"}
    servo.write_config(chaos("drill"), {"name": "probe", "type": "command", "config": {"check": checks}})
    result = servo.run("check")
    assert result.returncode == 1
    rows = kit.table_rows(result.stdout)
    assert ["probe", "disk", "ok", "exited with status 0"] in rows
    assert [row[:3] for row in rows if row[1] == "app-up"] == [["probe", "app-up", "FAILED"]]
    assert "error: 1 of 3 checks failed: connector 'probe': app-up:" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_failed_check_says_failed_in_json_as_its_exit_code_does(servo) -> None:
    checks = {"disk": "true", "app-up": "echo refused >&2; exit 7"}
    servo.write_config(SYNTHETIC, {"name": "probe", "type": "command", "config": {"check": checks}})
    result, payload = servo.run_json("check")
    assert result.returncode == 1
    assert (payload["status"], payload["reason"]) == ("failed", "check-failed")
    assert payload["message"].startswith("1 of 2 checks failed: connector 'probe': app-up:")
    assert payload["connectors"]["probe"]["status"] == "failed"
    assert payload["connectors"]["probe"]["reason"] == "check-failed"
    assert payload["connectors"]["probe"]["message"].startswith("app-up:")
    # The connector whose checks passed is still ok.
    assert payload["connectors"]["app"] == {"status": "ok", "reason": "success", "message": None}


def test_check_json_with_a_missing_kubeconfig_says_failed(servo, tmp_path) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    servo.write_config(kubernetes(missing))
    result, payload = servo.run_json("check")
    assert result.returncode == 1
    assert (payload["status"], payload["reason"]) == ("failed", "check-failed")
    assert f"kubeconfig {missing} does not exist" in payload["message"]
    assert payload["connectors"]["k8s"]["status"] == "failed"
    assert [c["success"] for c in payload["data"]["checks"] if c["connector"] == "k8s"] == [False]


def test_a_connector_that_raises_in_check_exits_1_naming_it(servo, kit) -> None:
    servo.write_config(SYNTHETIC, chaos("drill", faults={"check": "raise"}))
    result, payload = servo.run_json("check")
    assert result.returncode == 1
    assert (payload["status"], payload["reason"]) == ("failed", "connector-error")
    assert (
        payload["connectors"]["drill"]["message"] == "connector 'drill' raised RuntimeError in check: chaos"
    )
    assert "error: check failed (connector-error): connector 'drill' raised RuntimeError" in result.stderr
    table = servo.run("check")
    assert table.returncode == 1
    assert [
        "drill",
        "-",
        "FAILED",
        "connector 'drill' raised RuntimeError in check: chaos",
    ] in kit.table_rows(table.stdout)


def test_a_connector_that_cannot_start_exits_1_naming_it(servo) -> None:
    servo.write_config(chaos("drill", faults={"startup": "raise"}), supervisor={"max_restarts": 1})
    result = servo.run("check")
    assert result.returncode == 1
    # The connector's own log lines (its chaos warnings) come first; the verdict is the last line.
    last = result.stderr.splitlines()[-1]
    assert last.startswith("error: check failed (crash-loop): connector 'drill' is not up"), result.stderr
    assert "startup raised RuntimeError: chaos" in last
    assert "Traceback" not in result.stderr


def test_a_bad_connector_config_exits_2_naming_it(servo) -> None:
    servo.write_config(chaos("drill", faults={"measure": "explode"}))
    result = servo.run("describe")
    assert result.returncode == 2
    assert "servo.yaml: connectors[0].config.faults.measure" in result.stderr
    assert "'explode'" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_works_without_config_and_without_loading_thespian(servo) -> None:
    for command in ("check", "describe", "measure", "adjust"):
        result = servo.run(command, "--help")
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"Usage: servo-actors {command} ")
    assert "[default: 0s, measure now]" in servo.run("measure", "--help").stdout
    probe = "import sys, servo_actors.cli; print(sorted(m for m in sys.modules if m.startswith('thespian')))"
    imported = subprocess.run(
        [sys.executable, "-c", probe], env=servo.env(), capture_output=True, text=True, timeout=30
    )
    assert imported.stdout.strip() == "[]", imported.stderr
