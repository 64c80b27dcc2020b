"""A connector that cannot start never silences the servo (issue: a hung startup() kept the
optimizer from hearing even HELLO).

Each case runs `servo-actors run` against the embedded optimizer with a sick connector (``probe``,
owning component ``api`` and metric ``x``) beside a healthy one (``other``: component ``web``,
metric ``y``): hung in ``startup()`` for good, crash-looping at start, and hung only on its first
start. Every case asserts HELLO within a bound that does not depend on the sick connector
(``startup_timeout`` plus margin), an answer to every command, and the healthy connector's values in
those answers; a command that needs the sick connector is ``failed`` naming it and why.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

FINISH_TIMEOUT = 60.0
"""Generous bound on a command's round trip: only a hang breaks it."""
STARTUP_TIMEOUT = 2.0
HELLO_BOUND = STARTUP_TIMEOUT + 30.0
"""HELLO must come within startup_timeout, whatever the connectors do; the rest is a generous
margin for a loaded 2-core machine (interpreter and actor system start-up), which only a wait on the
sick connector (several startup_timeouts: it is restarted for ever) would break."""

HEALTHY = {
    "name": "other",
    "type": "chaos",
    "config": {
        "metrics": {"y": {"unit": "n"}},
        "values": {"y": 2},
        "components": {
            "web": {"settings": {"replicas": {"type": "range", "min": 1, "max": 4, "step": 1, "value": 2}}}
        },
    },
}


def sick(startup_fault: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "probe",
        "type": "chaos",
        "config": {
            "metrics": {"x": {"unit": "n"}},
            "values": {"x": 1},
            "components": {
                "api": {"settings": {"cpu": {"type": "range", "min": 1, "max": 4, "step": 1, "value": 1}}}
            },
            "faults": {"startup": startup_fault},
        },
    }


DESCRIBE = {"cmd": "DESCRIBE", "param": {}}
MEASURE = {"cmd": "MEASURE", "param": {"metrics": ["x", "y"], "control": {"duration": 0}}}


def adjust(component: str, setting: str, value: float) -> dict[str, Any]:
    return {
        "cmd": "ADJUST",
        "param": {
            "state": {"application": {"components": {component: {"settings": {setting: {"value": value}}}}}}
        },
    }


def start(servo, optimizer, kit, connector: dict[str, Any], **supervisor: Any):
    driver = kit.QueueDriver(idle_sleep=0.05)
    server = optimizer(driver)
    driver.server = server
    config = kit.servo_config(server, [connector, HEALTHY])
    config["supervisor"] = {
        "startup_timeout": f"{STARTUP_TIMEOUT:g}s",
        "max_restarts": 3,
        "period": "1m",
        "restart_backoff": {"min": "50ms", "max": "200ms"},
        "failed_retry": "1h",
        **supervisor,
    }
    started = time.monotonic()
    proc = servo(config)
    return driver, server, proc, started


def events(server) -> list[str]:
    return [entry["event"] for entry in server.state()["history"] if entry.get("event")]


def answered(driver, command: dict[str, Any], proc) -> dict[str, Any]:
    entry = driver.push(command)
    assert entry.finished.wait(FINISH_TIMEOUT), proc.log()
    assert entry.result is not None, proc.log()
    return entry.result


def assert_partial(result: dict[str, Any], reasons: tuple[str, ...]) -> None:
    """Failed, naming the sick connector and why, with what the healthy one has."""
    assert result["status"] == "failed", result
    assert result["reason"] in reasons, result
    assert "probe" in result["message"], result


def hello_and_healthy_answers(servo, optimizer, kit, connector, reasons) -> tuple[Any, Any, Any]:
    driver, server, proc, started = start(servo, optimizer, kit, connector)
    kit.wait_until(lambda: "HELLO" in events(server), HELLO_BOUND, what="HELLO")
    assert time.monotonic() - started < HELLO_BOUND
    description = answered(driver, DESCRIBE, proc)
    assert_partial(description, reasons)
    components = description["descriptor"]["application"]["components"]
    assert set(components) == {"web"}, description  # the healthy one's, the sick one's absent
    assert description["descriptor"]["measurement"]["metrics"] == {"y": {"unit": "n"}}
    measurement = answered(driver, MEASURE, proc)
    assert_partial(measurement, reasons)
    assert set(measurement["metrics"]) == {"y"}, measurement
    # An ADJUST only the healthy connector takes part in is ok; one of the sick one's setting fails.
    ok = answered(driver, adjust("web", "replicas", 3), proc)
    assert ok["status"] == "ok", ok
    refused = answered(driver, adjust("api", "cpu", 2), proc)
    assert_partial(refused, reasons)
    return driver, server, proc


def finish(proc, server, kit) -> None:
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
    kit.check_trace(server.state()["history"])
    assert "Traceback" not in proc.log()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_connector_hung_in_startup_for_good(servo, optimizer, kit) -> None:
    driver, server, proc = hello_and_healthy_answers(
        servo, optimizer, kit, sick({"action": "sleep"}), ("start-timeout", "crash-loop")
    )
    # Its starts keep failing: past max_restarts it is marked failed, and the servo carries on
    # (never spins: one more start per failed_retry, an hour here).
    kit.wait_until(lambda: "marked failed" in proc.log(), FINISH_TIMEOUT, what="the connector marked failed")
    later = answered(driver, MEASURE, proc)
    assert_partial(later, ("start-timeout",))
    assert "supervisor.failed_retry" in later["message"]
    assert set(later["metrics"]) == {"y"}
    finish(proc, server, kit)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_connector_crash_looping_at_start(servo, optimizer, kit) -> None:
    driver, server, proc = hello_and_healthy_answers(
        servo, optimizer, kit, sick({"action": "exit", "exit_code": 3}), ("crash-loop",)
    )
    kit.wait_until(lambda: "marked failed" in proc.log(), FINISH_TIMEOUT, what="the connector marked failed")
    assert proc.proc.poll() is None, proc.log()
    assert_partial(answered(driver, DESCRIBE, proc), ("crash-loop",))
    finish(proc, server, kit)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_connector_hung_only_on_its_first_start(servo, optimizer, kit, tmp_path: Path) -> None:
    first_start = tmp_path / "first-start"
    first_start.touch()
    connector = sick({"action": "sleep", "only_if_file": str(first_start)})
    driver, server, proc, _ = start(servo, optimizer, kit, connector)
    kit.wait_until(lambda: "HELLO" in events(server), HELLO_BOUND, what="HELLO")
    first_start.unlink()  # its next start goes through
    description = answered(driver, DESCRIBE, proc)
    if description["status"] != "ok":
        assert_partial(description, ("start-timeout",))

    # Once restarted, it answers like the others: every component and metric is there again.
    def whole() -> bool:
        result = answered(driver, DESCRIBE, proc)
        return result["status"] == "ok" and set(result["descriptor"]["application"]["components"]) == {
            "api",
            "web",
        }

    kit.wait_until(whole, FINISH_TIMEOUT, what="the restarted connector answering")
    measurement = answered(driver, MEASURE, proc)
    assert measurement["status"] == "ok" and set(measurement["metrics"]) == {"x", "y"}, measurement
    # Its restart is logged once, with its reason, at the next listing of the connectors.
    kit.wait_until(
        lambda: "probe restarted (start-timeout)" in proc.log(), FINISH_TIMEOUT, what="the restart"
    )
    finish(proc, server, kit)
