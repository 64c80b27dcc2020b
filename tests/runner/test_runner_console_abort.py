"""The console's Abort button in a real headless Chromium, pressed while a real servo MEASUREs."""

from __future__ import annotations

import json
import signal

import pytest
from browser import Chromium, require_chromium

from servo_actors.optimizer.search import SearchDriver

PAGE_TIMEOUT = 20.0
"""Generous: the page polls every second on a shared, noisy machine."""

pytestmark = [pytest.mark.browser]


@pytest.mark.timeout(120)
def test_abort_in_the_console_cancels_the_running_measure(servo, optimizer, kit, tmp_path) -> None:
    driver = SearchDriver.from_plan(
        {
            "app": "example.com/web",
            "steps": 2,
            # 600 s at time_scale 0.05: a 30 s MEASURE, long enough to press Abort while it runs.
            "measure": {"duration": "600s"},
            "objective": {"minimize": "cost"},
            "sleep": 1,
        }
    )
    server = optimizer(driver)
    synthetic = {"name": "app", "type": "synthetic", "config": {"seed": 2, "time_scale": 0.05}}
    proc = servo(kit.servo_config(server, [synthetic], progress_interval="200ms"))
    kit.wait_until(
        lambda: (server.state()["current"] or {}).get("cmd") == "MEASURE",
        PAGE_TIMEOUT,
        what="the baseline MEASURE",
    )
    measure_uid = server.state()["current"]["cmd_uid"]

    browser = Chromium(require_chromium(), tmp_path / "profile")
    try:
        browser.open(server.url + "/")
        browser.wait_for("document.querySelector('#current').textContent.includes('MEASURE')", PAGE_TIMEOUT)
        browser.click("#abort")
        browser.wait_for("document.querySelector('#abort-result').dataset.answers === '1'", PAGE_TIMEOUT)
        answer = browser.evaluate("document.querySelector('#abort-result').textContent")
        assert measure_uid in answer, answer
    finally:
        browser.close()

    def cancelled_post():
        for entry in server.state()["history"]:
            param = entry.get("param") or {}
            if param.get("cmd_uid") == measure_uid and param.get("status") == "cancelled":
                return entry
        return None

    entry = kit.wait_until(cancelled_post, PAGE_TIMEOUT, what="the servo's cancelled result")
    history = server.state()["history"]
    replies = [
        e.get("reply", {}).get("status")
        for e in history
        if (e.get("param") or {}).get("cmd_uid") == measure_uid
    ]
    assert "cancel" in replies, json.dumps(replies)
    assert entry["param"]["reason"] == "cancelled"
    # The plan goes on after the Abort: the next command is answered by fresh connectors.
    kit.wait_until(lambda: driver.phase != "baseline", PAGE_TIMEOUT, what="the plan moving on")
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0
    kit.check_trace(server.state()["history"])
