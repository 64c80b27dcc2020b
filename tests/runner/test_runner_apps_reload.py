"""SIGHUP in a servo of several applications (issue 36): an application added starts, one removed
stops with GOODBYE, one changed restarts its loop and connectors; the others are not touched
(same connector processes, no new HELLO). A broken file changes nothing."""

from __future__ import annotations

import signal

import pytest

pytestmark = pytest.mark.timeout(180)

FINISH_TIMEOUT = 60.0
"""Generous bound on a command's round trip or a reload: only a hang breaks it."""
WEB, DB, CI = "acme.com/web", "acme.com/db", "acme.com/ci"


def probe(name: str) -> dict:
    return {"name": name, "type": "chaos", "config": {"metrics": {"x": {"unit": "n"}}, "values": {"x": 1}}}


def measure() -> dict:
    return {"cmd": "MEASURE", "param": {"metrics": ["x"], "control": {"duration": 0}}}


def pids(entry) -> dict[str, int]:
    return {key: int(value) for key, value in entry.result["annotations"].items() if key.endswith(".pid")}


def measured(driver, proc):
    entry = driver.push(measure())
    assert entry.finished.wait(FINISH_TIMEOUT), proc.log()
    assert entry.result is not None and entry.result["status"] == "ok", (entry.result, proc.log())
    return entry


def events(server) -> list[str]:
    return [entry["event"] for entry in server.state()["history"]]


def test_sighup_adds_removes_and_restarts_only_what_changed(servo, optimizer, kit) -> None:
    drivers, servers, configs = {}, {}, {}
    for app in (WEB, DB, CI):
        driver = kit.QueueDriver(idle_sleep=0.1)
        servers[app] = optimizer(driver, app=app)
        driver.server = servers[app]
        drivers[app] = driver
        configs[app] = kit.servo_config(servers[app], [probe("p1")])
    proc = servo([configs[WEB], configs[DB]])
    web_before = pids(measured(drivers[WEB], proc))
    db_before = pids(measured(drivers[DB], proc))
    assert events(servers[DB]).count("HELLO") == 1

    # A broken file: refused, nothing changes.
    proc.config_path.write_text("optimizer: {id: acme.com/web}\n---\noptimizer: {id: acme.com/web}\n")
    proc.signal(signal.SIGHUP)
    kit.wait_until(lambda: "configuration reload refused" in proc.log(), FINISH_TIMEOUT, what="refused")
    assert pids(measured(drivers[WEB], proc)) == web_before

    # WEB removed, CI added, DB as it was.
    proc.write_config([configs[DB], configs[CI]])
    proc.signal(signal.SIGHUP)
    kit.wait_until(lambda: "GOODBYE" in events(servers[WEB]), FINISH_TIMEOUT, what="web's GOODBYE")
    assert servers[WEB].state()["history"][-1]["param"] == {"reason": "shutdown"}
    measured(drivers[CI], proc)
    assert pids(measured(drivers[DB], proc)) == db_before
    assert events(servers[DB]).count("HELLO") == 1

    # CI changed: its loop says GOODBYE and HELLO again, with fresh connectors; DB untouched.
    ci_before = pids(measured(drivers[CI], proc))
    changed = dict(configs[CI], settings={**configs[CI]["settings"], "progress_interval": "300ms"})
    proc.write_config([configs[DB], changed])
    proc.signal(signal.SIGHUP)
    kit.wait_until(lambda: events(servers[CI]).count("HELLO") == 2, FINISH_TIMEOUT, what="ci's second HELLO")
    assert "GOODBYE" in events(servers[CI])
    assert set(pids(measured(drivers[CI], proc)).values()).isdisjoint(ci_before.values())
    assert pids(measured(drivers[DB], proc)) == db_before
    assert events(servers[DB]).count("HELLO") == 1 and "GOODBYE" not in events(servers[DB])

    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
    assert events(servers[DB])[-1] == "GOODBYE" and events(servers[CI])[-1] == "GOODBYE"
