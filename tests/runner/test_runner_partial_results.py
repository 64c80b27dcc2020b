"""A MEASURE failed by one running connector still carries what the others measured (README,
"Partial results": what the other connectors produced is never thrown away).

One servo (`servo-actors run` against the embedded optimizer over loopback HTTP) with a healthy
connector (``other``, metric ``y``) beside others that fail a measure on request (each fault
applies only while its file exists): one that sleeps past the deadline (``timeout``), one that
raises (``connector-error``), one whose result is not of the protocol's shape (``invalid-result``),
one whose result is over ``max_result_bytes`` (``result-too-large``), and one that closes its
host's file descriptors and returns (its process ends: ``connector-crashed``, saying why). Each
MEASURE is ``failed`` with that reason, names the connector, and carries the healthy connectors'
values. A connector whose data breaks the protocol (a boolean where a number goes) is left out and
named, the others kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(240)

FINISH_TIMEOUT = 60.0
"""Generous bound on a command's round trip: only a hang breaks it."""
PLUGINS = Path(__file__).parent.parent / "config" / "plugins"
HOSTILE = "sa_test_connectors.hostile:HostileConnector"
MB = 1024 * 1024

HEALTHY = {"name": "other", "type": "chaos", "config": {"metrics": {"y": {"unit": "n"}}, "values": {"y": 2}}}


def sick_chaos(name: str, metric: str, fault: dict[str, Any], flag: Path) -> dict[str, Any]:
    return {
        "name": name,
        "type": "chaos",
        "config": {
            "metrics": {metric: {"unit": "n"}},
            "values": {metric: 1},
            "faults": {"measure": {**fault, "only_if_file": str(flag)}},
        },
    }


def measure(*metrics: str) -> dict[str, Any]:
    return {"cmd": "MEASURE", "param": {"metrics": list(metrics), "control": {"duration": 0}}}


def value_of(result: dict[str, Any], metric: str) -> float:
    return result["metrics"][metric]["values"][0]["data"][0][1]


def answered(driver, command: dict[str, Any], proc) -> dict[str, Any]:
    entry = driver.push(command)
    assert entry.finished.wait(FINISH_TIMEOUT), proc.log()
    assert entry.result is not None, proc.log()
    return entry.result


@pytest.fixture
def plugins_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The servo process imports the test connectors (tests/config/plugins)."""
    monkeypatch.setenv("PYTHONPATH", str(PLUGINS))


def test_a_measure_failed_by_one_running_connector_keeps_the_others_metrics(
    servo, optimizer, kit, tmp_path: Path, plugins_on_path: None
) -> None:
    flags = {
        name: tmp_path / f"{name}.fault" for name in ("slow", "raiser", "invalid", "big", "liar", "closer")
    }
    connectors = [
        HEALTHY,
        sick_chaos("slow", "s", {"action": "sleep", "seconds": 600}, flags["slow"]),
        sick_chaos("raiser", "r", {"action": "raise", "message": "boom"}, flags["raiser"]),
        {
            "name": "invalid",
            "type": HOSTILE,
            "config": {"measure": "list", "only_if_file": str(flags["invalid"])},
        },
        sick_chaos("big", "b", {"action": "huge_result", "megabytes": 2}, flags["big"]),
        {
            "name": "closer",
            "type": HOSTILE,
            "config": {"measure": "close_fds", "only_if_file": str(flags["closer"])},
        },
        {
            "name": "liar",
            "type": HOSTILE,
            "config": {"measure": "true_value", "only_if_file": str(flags["liar"])},
        },
    ]
    driver = kit.QueueDriver(idle_sleep=0.05)
    server = optimizer(driver)
    config = kit.servo_config(server, connectors)
    config["supervisor"] = {"operation_grace": "3s", "max_result_bytes": MB}
    proc = servo(config)
    everything = ("y", "s", "r", "m", "b")
    first = answered(driver, measure(*everything), proc)
    assert first["status"] == "ok", first
    flags["liar"].touch()
    result = answered(driver, measure(*everything), proc)
    flags["liar"].unlink()
    assert (result["status"], result["reason"]) == ("failed", "invalid-result"), result
    assert result["message"] == (
        "the MEASURE result of connector 'liar' does not fit the protocol:"
        " param.metrics.m.value: expected a number, got True"
    ), result
    # Both test connectors measure ``m``: the one that fits (``invalid``, not failing now) is kept.
    assert set(result["metrics"]) == {"y", "s", "r", "m", "b"} and value_of(result, "y") == 2, result
    # The huge_result fault keeps its padding in that process: its case comes last.
    cases = [
        ("slow", "timeout", "did not finish measure in time", {"y", "r", "m", "b"}),
        ("raiser", "connector-error", "raised RuntimeError in measure: boom", {"y", "s", "m", "b"}),
        # ``m`` here is the other test connector's (``liar``, not failing now).
        ("invalid", "invalid-result", "returned an invalid measure result", {"y", "s", "r", "m", "b"}),
        # It closed its host's descriptors and returned at once: its process ended, said so.
        ("closer", "connector-crashed", "exit code 86: its host lost its channel", {"y", "s", "r", "m", "b"}),
        ("big", "result-too-large", "over the limit", {"y", "s", "r", "m"}),
    ]
    for name, reason, words, kept in cases:
        flags[name].touch()
        result = answered(driver, measure(*everything), proc)
        flags[name].unlink()
        assert (result["status"], result["reason"]) == ("failed", reason), result
        assert f"connector {name!r}" in result["message"] and words in result["message"], result
        assert result["metrics"] is not None and value_of(result, "y") == 2, result
        assert set(result["metrics"]) == kept, result
    assert "Traceback" not in proc.log()
