"""SIGHUP keeps the running connectors when the new ones cannot start; SIGTERM ends any wait on a
connector's startup() at once (during start-up and during a reload), with exit 0."""

from __future__ import annotations

import signal
import time

import pytest

FINISH_TIMEOUT = 60.0
"""Generous bound on a command's round trip: only a hang breaks it."""
STOP_BOUND = 15.0
"""Generous bound on the exit after SIGTERM while a startup() hangs for a minute: only a wait for
the hang breaks it."""


def probe(**config: object) -> dict:
    return {
        "name": "probe",
        "type": "chaos",
        "config": {"metrics": {"x": {"unit": "n"}}, "values": {"x": 1}, **config},
    }


MEASURE = {"cmd": "MEASURE", "param": {"metrics": ["x"], "control": {"duration": 0}}}


def start(servo, optimizer, kit, connectors):
    driver = kit.QueueDriver()
    server = optimizer(driver)
    driver.server = server
    config = kit.servo_config(server, connectors)
    return driver, server, servo(config), config


@pytest.mark.timeout(120)
def test_sighup_to_a_valid_file_whose_connector_cannot_start_keeps_the_running_connectors(
    servo, optimizer, kit
) -> None:
    driver, server, proc, config = start(servo, optimizer, kit, [probe()])
    before = driver.push(MEASURE)
    assert before.finished.wait(FINISH_TIMEOUT), proc.log()
    members = sorted(kit.marked_pids(proc.marker))

    broken = {
        **config,
        "supervisor": {"max_restarts": 1, "restart_backoff": {"min": "10ms", "max": "50ms"}},
        "connectors": [probe(values={"x": 2}, faults={"startup": {"action": "raise", "message": "no db"}})],
    }
    proc.write_config(broken)
    proc.signal(signal.SIGHUP)
    refused = "failed, keeping the running connectors"
    kit.wait_until(lambda: refused in proc.log(), FINISH_TIMEOUT, what="the failed reload")
    line = next(text for text in proc.log().splitlines() if refused in text)
    assert "probe" in line and "no db" in line, line

    after = driver.push(MEASURE)
    assert after.finished.wait(FINISH_TIMEOUT), proc.log()
    assert after.result["status"] == "ok"
    assert after.result["metrics"]["x"]["values"][0]["data"][0][1] == 1  # the old configuration
    assert after.result["annotations"]["probe.pid"] == before.result["annotations"]["probe.pid"]
    # The failed new system is gone; the old one is untouched.
    assert sorted(kit.marked_pids(proc.marker)) == members
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
    kit.check_trace(server.state()["history"])
    assert "Traceback" not in proc.log()


@pytest.mark.timeout(120)
def test_sigterm_during_start_up_with_a_hung_startup_exits_0_at_once(servo, optimizer, kit) -> None:
    driver, server, proc, _ = start(
        servo, optimizer, kit, [probe(faults={"startup": {"action": "sleep", "seconds": 60}})]
    )
    # The servo, its admin, logger, supervisor and the hung connector.
    kit.wait_until(
        lambda: len(kit.marked_pids(proc.marker)) >= 5, FINISH_TIMEOUT, what="the connector starting"
    )
    sent = time.monotonic()
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
    elapsed = time.monotonic() - sent
    print(f"SIGTERM during start-up -> exit: {elapsed:.2f} s")
    assert elapsed < STOP_BOUND, "the servo waited for the hung startup()"
    assert server.state()["history"] == []  # no HELLO yet, so no GOODBYE owed
    assert "Traceback" not in proc.log()


@pytest.mark.timeout(120)
def test_sigterm_during_a_reload_with_a_hung_startup_says_goodbye_and_exits_0(servo, optimizer, kit) -> None:
    driver, server, proc, config = start(servo, optimizer, kit, [probe()])
    first = driver.push(MEASURE)
    assert first.finished.wait(FINISH_TIMEOUT), proc.log()
    proc.write_config(
        {**config, "connectors": [probe(faults={"startup": {"action": "sleep", "seconds": 60}})]}
    )
    proc.signal(signal.SIGHUP)
    kit.wait_until(lambda: "starting the new connectors" in proc.log(), FINISH_TIMEOUT, what="the reload")
    # Inside the hung startup(): the chaos connector logs its fault as it enters it.
    kit.wait_until(
        lambda: "chaos: sleep fault in startup" in proc.log(),
        FINISH_TIMEOUT,
        what="the new connector's startup hung",
    )
    sent = time.monotonic()
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
    elapsed = time.monotonic() - sent
    print(f"SIGTERM during a reload -> exit: {elapsed:.2f} s")
    assert elapsed < STOP_BOUND, "the servo waited for the hung startup()"
    history = server.state()["history"]
    assert history[-1]["event"] == "GOODBYE" and history[-1]["param"] == {"reason": "SIGTERM"}
    kit.check_trace(history)
    assert "Traceback" not in proc.log()


@pytest.mark.timeout(120)
def test_adjustment_state_carries_the_described_metrics(servo, optimizer, kit) -> None:
    components = {"web": {"settings": {"cpu": {"type": "range", "min": 1, "max": 4, "step": 1, "value": 1}}}}
    driver, server, proc, _ = start(servo, optimizer, kit, [probe(components=components)])
    state = {"application": {"components": {"web": {"settings": {"cpu": {"value": 3}}}}}}
    adjust = {"cmd": "ADJUST", "param": {"state": state, "control": {"settlement": 0}}}
    # Without a DESCRIBE first (the servo asks its connectors), then after one.
    cold = driver.push(adjust)
    describe = driver.push({"cmd": "DESCRIBE", "param": {}})
    warm = driver.push(adjust)
    assert warm.finished.wait(FINISH_TIMEOUT), proc.log()
    described = describe.result["descriptor"]
    assert described["measurement"]["metrics"] == {"x": {"unit": "n"}}
    for entry in (cold, warm):
        assert entry.result["status"] == "ok", entry.result
        posted = entry.result["state"]
        assert set(posted) == set(described), posted  # the same shape as the descriptor
        assert posted["measurement"] == described["measurement"]
        assert posted["application"]["components"]["web"]["settings"]["cpu"]["value"] == 3
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
