"""One restart, one count, one log line, one generation number; a connector that is not up is
visible in the servo's metrics and readiness (real processes, a connector hung in start-up).

Before, a connector hanging in start-up for a while was counted 9 times for 6 restarts (7 host
processes), with repeated generation numbers in the log: the runtime inferred restarts from
listings and deadlines. Now the supervisor records each restart with its reason and the
generation it started, and the runtime counts each record once.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from servo_actors.observability import events
from servo_actors.observability.health import HealthState
from servo_actors.observability.registry import ServoMetrics

HANG_SECONDS = 4.0
"""How long the connector's starts hang (each cut short by its 0.5 s startup_timeout)."""


@pytest.fixture
def observed() -> Iterator[tuple[ServoMetrics, HealthState]]:
    metrics, health = ServoMetrics(), HealthState(stall_after=60.0)
    events.activate(metrics, health)
    yield metrics, health
    events.deactivate()


def test_each_restart_of_a_connector_hung_in_start_up_counts_once(
    start_runtime, kit, observed, tmp_path: Path, caplog
) -> None:
    metrics, health = observed
    hang, startups = tmp_path / "hang", tmp_path / "startups"
    hang.touch()
    fault = {"action": "sleep", "only_if_file": str(hang)}
    metrics.connectors(["fine", "slow"])
    with caplog.at_level(logging.INFO, logger="servo_actors.events"):
        runtime = start_runtime(
            kit.chaos("fine"),
            kit.chaos("slow", faults={"startup": fault}, state_file=str(startups)),
            startup_timeout=0.5,
            max_restarts=100,
            period=60,
            restart_backoff={"min": 0.05, "max": 0.1},
            liveness={"interval": "200ms", "timeout": "5s"},
        )
        # Started within one startup_timeout: nobody waited for the sick connector.
        assert runtime.not_up == {"slow": "start-timeout"}
        assert metrics.registry.get_sample_value("servo_connector_up", {"app": "", "connector": "slow"}) == 0
        readiness = health.readiness()
        assert not readiness.ok and "slow (start-timeout)" in readiness.body["connectors"]
        kit.wait_for(lambda: len(startups.read_text().splitlines()) >= 4, timeout=HANG_SECONDS * 5)
        hang.unlink()
        kit.wait_for(lambda: kit.states(runtime)["slow"] == "ready", timeout=10)
        kit.wait_for(lambda: runtime.not_up == {} and runtime.status() is not None, timeout=5)
        runtime.status()  # one more listing after the last restart
        forks = len(startups.read_text().splitlines())
    counted = metrics.registry.get_sample_value(
        "servo_connector_restarts_total", {"app": "", "connector": "slow", "reason": "start-timeout"}
    )
    assert counted == forks - 1, (counted, forks)
    assert (
        metrics.registry.get_sample_value(
            "servo_connector_restarts_total", {"app": "", "connector": "fine", "reason": "crash"}
        )
        == 0
    )
    lines = [r.getMessage() for r in caplog.records if "slow restarted" in r.getMessage()]
    generations = [int(re.search(r"generation (\d+)", line).group(1)) for line in lines]
    assert len(lines) == forks - 1 and len(set(generations)) == len(generations), lines
    assert generations == sorted(generations)
    assert metrics.registry.get_sample_value("servo_connector_up", {"app": "", "connector": "slow"}) == 1
    assert health.readiness().body["connectors"] == "started"
