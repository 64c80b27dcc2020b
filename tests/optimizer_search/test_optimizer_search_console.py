"""The console page in a real headless Chromium: it shows the search, and Abort works every time."""

from __future__ import annotations

import json

import pytest
from browser import Chromium, require_chromium

from servo_actors.optimizer.plan import parse_plan
from servo_actors.optimizer.search import SearchDriver
from servo_actors.optimizer.server import OptimizerServer

from .conftest import HttpServo

PAGE_TIMEOUT = 15.0  # generous: the page polls every second on a shared, noisy machine

pytestmark = [pytest.mark.browser]


def text(browser: Chromium, selector: str) -> str:
    return browser.evaluate(f"document.querySelector({json.dumps(selector)}).textContent")


@pytest.mark.timeout(90)
def test_the_console_shows_the_search_and_abort_cancels_every_time(plan_data, tmp_path):
    plan = parse_plan({**plan_data, "steps": 3})
    driver = SearchDriver(plan)
    with OptimizerServer(driver, app=plan.app, token=plan.token.get_secret_value()) as server:
        servo = HttpServo(server, plan.token.get_secret_value())
        describe = servo.next_command()
        servo.complete(describe)
        baseline = servo.next_command()
        assert baseline["cmd"] == "MEASURE"

        browser = Chromium(require_chromium(), tmp_path / "profile")
        try:
            browser.open(server.url + "/")
            browser.wait_for(
                "document.querySelector('#current').textContent.includes('MEASURE')", PAGE_TIMEOUT
            )
            assert "baseline" in text(browser, "#current")
            assert text(browser, "#phase") == "baseline"

            # Pressed twice while the baseline MEASURE runs: both presses are answered.
            for presses in (1, 2):
                browser.click("#abort")
                browser.wait_for(
                    f"document.querySelector('#abort-result').dataset.answers === '{presses}'", PAGE_TIMEOUT
                )
                assert f"MEASURE {baseline['cmd_uid']} will be answered cancel" in text(
                    browser, "#abort-result"
                )
            assert (
                servo.post("MEASUREMENT", {"progress": 5, "runtime": 1, "cmd_uid": baseline["cmd_uid"]})[
                    "status"
                ]
                == "cancel"
            )
            cancelled = {
                "status": "cancelled",
                "reason": "cancelled",
                "message": "stopped",
                "cmd_uid": baseline["cmd_uid"],
            }
            servo.post("MEASUREMENT", cancelled)

            # The next command: the page follows it, and Abort works again for it.
            adjust = servo.next_command()
            assert adjust["cmd"] == "ADJUST"
            browser.wait_for(
                "document.querySelector('#current').textContent.includes('ADJUST')", PAGE_TIMEOUT
            )
            browser.wait_for(
                "document.querySelector('#steps tbody tr[data-step=\"0\"]') !== null", PAGE_TIMEOUT
            )
            assert "cancelled" in text(browser, "#steps tbody tr[data-step='0']")
            browser.click("#abort")
            browser.wait_for("document.querySelector('#abort-result').dataset.answers === '3'", PAGE_TIMEOUT)
            assert f"ADJUST {adjust['cmd_uid']} will be answered cancel" in text(browser, "#abort-result")
            assert servo.complete(adjust)["status"] == "cancel"  # armed: the result post is answered cancel

            # Finish the plan; the table and the best settings appear.
            while (command := servo.next_command())["cmd"] != "SLEEP":
                servo.complete(command)
            best = driver.state()["best"]
            browser.wait_for(
                "document.querySelector('#current').textContent.startsWith('none')", PAGE_TIMEOUT
            )
            rows = browser.wait_for(
                "document.querySelectorAll('#steps tbody tr').length === 4 && 4", PAGE_TIMEOUT
            )
            assert rows == 4
            if best is not None:
                browser.wait_for("document.querySelector('#best dl') !== null", PAGE_TIMEOUT)
                assert f"web.cpu{best['settings']['web']['cpu']}" in text(browser, "#best").replace(" ", "")
            # With nothing in flight the button still answers (the server says there is nothing to cancel).
            browser.click("#abort")
            browser.wait_for("document.querySelector('#abort-result').dataset.answers === '4'", PAGE_TIMEOUT)
            assert "nothing to cancel" in text(browser, "#abort-result")
        finally:
            browser.close()
    assert browser.process.returncode is not None
