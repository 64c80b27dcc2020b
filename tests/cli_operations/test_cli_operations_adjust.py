"""``adjust`` through the real supervisor: values checked against describe, converted, applied.

A ``command`` connector whose adjust command records ``SERVO_ADJUST`` shows exactly what reached
the connector, and that a rejected request reaches nothing.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

SYNTHETIC = {"name": "app", "type": "synthetic", "config": {"time_scale": 0}}
APP_COMPONENTS = {
    "api.v2": {
        "settings": {
            "cpu": {"type": "range", "unit": "cores", "min": 0.25, "max": 4.0, "step": 0.125, "value": 1.0},
            "replicas": {"type": "range", "min": 1, "max": 10, "step": 1, "value": 2},
            "gc": {"type": "enum", "values": ["serial", "g1"], "value": "g1"},
            "shards": {"type": "range", "min": 1, "max": 8, "step": 1, "value": 4, "pinned": True},
        }
    }
}


def scripted(servo, tmp_path: Path) -> Path:
    """A config with one command connector describing APP_COMPONENTS; returns the adjust record."""
    described = tmp_path / "describe.json"
    described.write_text(json.dumps({"components": APP_COMPONENTS, "metrics": {}}))
    record = tmp_path / "adjusted.json"
    config = {
        "describe": f"cat {shlex.quote(str(described))}",
        "adjust": f'printf "%s" "$SERVO_ADJUST" > {shlex.quote(str(record))}',
    }
    servo.write_config({"name": "script", "type": "command", "config": config})
    return record


def test_adjust_converts_values_and_applies_them_through_the_owner(servo, tmp_path, kit) -> None:
    record = scripted(servo, tmp_path)
    result = servo.run("adjust", "api.v2.cpu=2.5", "api.v2.replicas=3", "api.v2.gc=serial")
    assert result.returncode == 0, result.stderr
    # Numbers arrive as numbers of the setting's kind (replicas an int), enums as declared.
    assert json.loads(record.read_text()) == {
        "api.v2": {"settings": {"cpu": {"value": 2.5}, "replicas": {"value": 3}, "gc": {"value": "serial"}}}
    }
    rows = kit.table_rows(result.stdout)
    assert rows[0] == ["COMPONENT", "SETTING", "VALUE", "UNIT"]
    assert ["api.v2", "cpu", "2.5", "cores"] in rows
    assert ["api.v2", "replicas", "3", "-"] in rows
    assert ["api.v2", "gc", "serial", "-"] in rows


def test_adjust_json_reports_what_is_now_in_force(servo) -> None:
    servo.write_config(SYNTHETIC)
    result, payload = servo.run_json("adjust", "web.cpu=2.5", "web.replicas=3.0")
    assert result.returncode == 0, result.stderr
    assert (payload["operation"], payload["status"], payload["reason"]) == ("adjust", "ok", "success")
    settings = payload["data"]["components"]["web"]["settings"]
    assert settings["cpu"]["value"] == 2.5
    assert settings["replicas"]["value"] == 3 and isinstance(settings["replicas"]["value"], int)
    assert settings["gc"]["value"] == "g1"  # untouched settings are reported as they are
    # Each run starts fresh connectors: a later describe shows the connector's initial state again.
    _, described = servo.run_json("describe")
    assert described["data"]["components"]["web"]["settings"]["cpu"]["value"] == 1.0


@pytest.mark.parametrize(
    ("assignment", "error"),
    [
        ("web.cpu=1", "unknown component 'web' in web.cpu (known: api.v2)"),
        ("api.v2.memory=1", "unknown setting 'memory' in api.v2.memory (settings of api.v2: cpu, replicas,"),
        ("api.v2.cpu=4.5", "api.v2.cpu=4.5 is outside its range 0.25..4"),
        ("api.v2.cpu=0.1", "api.v2.cpu=0.1 is outside its range 0.25..4"),
        ("api.v2.cpu=1.1", "api.v2.cpu=1.1 is not on the step 0.125 from 0.25 (nearest: 1 or 1.125)"),
        ("api.v2.replicas=2.5", "api.v2.replicas=2.5 is not on the step 1 from 1 (nearest: 2 or 3)"),
        ("api.v2.gc=zgc", "api.v2.gc='zgc' is not one of its values: serial, g1"),
        ("api.v2.cpu=lots", "api.v2.cpu='lots' is not a number"),
        ("api.v2.shards=2", "api.v2.shards is pinned: it cannot be adjusted"),
    ],
    ids=["component", "setting", "above", "below", "step", "int-step", "enum", "number", "pinned"],
)
def test_a_bad_assignment_exits_2_naming_it_and_adjusts_nothing(servo, tmp_path, assignment, error) -> None:
    record = scripted(servo, tmp_path)
    # A valid assignment beside the bad one is not applied either.
    companion = "api.v2.cpu=2" if ".gc=" in assignment else "api.v2.gc=serial"
    result = servo.run("adjust", companion, assignment)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: {error}")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert not record.exists()
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (["web.cpu"], "error: 'web.cpu' is not COMPONENT.SETTING=VALUE (e.g. web.cpu=1.5)\n"),
        (["cpu=2"], "error: 'cpu=2' is not COMPONENT.SETTING=VALUE (e.g. web.cpu=1.5)\n"),
        (["web.cpu=2", "web.cpu=3"], "error: web.cpu is given more than once\n"),
    ],
    ids=["no-value", "no-component", "twice"],
)
def test_malformed_assignments_exit_2_before_starting_anything(servo, arguments, error) -> None:
    # A config whose connector could not even start: the arguments are refused before it is tried.
    servo.write_config({"name": "drill", "type": "chaos", "config": {"faults": {"startup": "raise"}}})
    result = servo.run("adjust", *arguments)
    assert (result.returncode, result.stderr) == (2, error)


def test_a_connector_failing_its_adjust_exits_1_naming_it(servo) -> None:
    servo.write_config(
        SYNTHETIC,
        {
            "name": "drill",
            "type": "chaos",
            "config": {
                "components": {
                    "db": {"settings": {"mode": {"type": "enum", "values": ["a", "b"], "value": "a"}}}
                },
                "faults": {"adjust": {"action": "raise", "exception": "OSError", "message": "disk full"}},
            },
        },
    )
    result, payload = servo.run_json("adjust", "db.mode=b", "web.cpu=2")
    assert result.returncode == 1
    assert (payload["status"], payload["reason"]) == ("failed", "connector-error")
    assert (
        payload["connectors"]["drill"]["message"] == "connector 'drill' raised OSError in adjust: disk full"
    )
    # The other owner applied its part and says so.
    assert payload["data"]["components"]["web"]["settings"]["cpu"]["value"] == 2.0
    assert "error: adjust failed (connector-error): connector 'drill' raised OSError" in result.stderr
    assert "Traceback" not in result.stderr
