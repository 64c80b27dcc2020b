"""The console's charts in a real headless Chromium: what they draw, checked in the DOM, and a screenshot."""

from __future__ import annotations

import base64
import json

import pytest

from servo_actors.optimizer.search import SearchDriver
from servo_actors.optimizer.server import OptimizerServer

from .conftest import run_search, search_plan

PAGE_TIMEOUT = 15.0  # generous: the page polls every second on a shared, noisy machine

pytestmark = [pytest.mark.browser]


def count(browser, selector: str) -> int:
    return browser.evaluate(f"document.querySelectorAll({json.dumps(selector)}).length")


@pytest.mark.timeout(90)
def test_the_charts_show_objective_constraints_and_settings_without_relying_on_colour(browser, tmp_path):
    driver = SearchDriver.from_plan(search_plan(steps=8))
    run_search(driver)
    state = driver.state()
    assert state["phase"] == "done"
    steps = state["steps"]
    measured = [s for s in steps if s["status"] == "ok"]
    confirmations = [s for s in measured if s["confirms"] is not None]
    feasible = [s for s in measured if s["confirms"] is None and s["feasible"]]
    infeasible = [s for s in measured if s["confirms"] is None and not s["feasible"]]
    assert confirmations and feasible and infeasible, "the run should show every kind of step"

    with OptimizerServer(driver, app=driver.plan.app) as server:
        browser.open(server.url + "/")
        browser.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1000, "height": 2400, "deviceScaleFactor": 1, "mobile": False},
            session=browser.session,
        )
        browser.wait_for(
            "document.querySelector('#charts svg[data-chart=\"settings\"]') !== null", PAGE_TIMEOUT
        )

        objective = "#charts svg[data-chart='objective']"
        assert count(browser, f"{objective} .marker") == len(measured)
        # Each kind of step has its own shape: circle, cross (a path), square.
        assert count(browser, f"{objective} .marker.feasible circle") == len(feasible)
        assert count(browser, f"{objective} .marker.infeasible path") == len(infeasible)
        assert count(browser, f"{objective} .marker.confirmation rect") == len(confirmations)
        line = browser.evaluate(f"document.querySelector(\"{objective} .best-line\").getAttribute('points')")
        assert line and len(line.split()) >= len(feasible)
        assert browser.evaluate(
            f"document.querySelector(\"{objective} .best-line\").getAttribute('stroke-dasharray')"
        )
        tooltip = browser.evaluate(
            f"document.querySelector(\"{objective} .marker[data-step='0'] title\").textContent"
        )
        assert tooltip.startswith("step 0: cost ")

        # One chart per constraint, each with its limit drawn and labelled in words.
        assert count(browser, "#charts svg[data-chart='constraint']") == 2
        for metric, label in (("p99_latency", "limit <= 250"), ("error_rate", "limit <= 0.01")):
            chart = f"#charts svg[data-metric='{metric}']"
            assert count(browser, f"{chart} line.limit") == 1
            assert browser.evaluate(f'document.querySelector("{chart} .limit-label").textContent') == label
            assert count(browser, f"{chart} .marker") == len(measured)

        # The recommendation's settings against the baseline: two bars per range, words for the enum.
        settings = "#charts svg[data-chart='settings']"
        for name in ("web.cpu", "web.memory", "web.replicas"):
            assert count(browser, f"{settings} g[data-setting='{name}'] rect.baseline") == 1
            assert count(browser, f"{settings} g[data-setting='{name}'] rect.recommended") == 1
        best = state["best"]
        gc = browser.evaluate(
            f"document.querySelector(\"{settings} g[data-setting='web.gc'] text.enum\").textContent"
        )
        assert gc.startswith(f"g1 → {best['settings']['web']['gc']}")
        # Every chart says what it is in text, for screen readers and for print.
        assert browser.evaluate(
            "[...document.querySelectorAll('#charts svg')].every((s) => s.getAttribute('aria-label'))"
        )

        # The recommendation is labelled, with each constraint's value, uncertainty and readings.
        label = browser.evaluate("document.querySelector('#best-label').textContent")
        assert label.startswith("Confirmed: " if best["confirmed"] else "NOT CONFIRMED: ")
        rows = browser.evaluate(
            "[...document.querySelectorAll('#best-constraints tr')].slice(1).map((r) => [...r.cells].map((c) => c.textContent))"
        )
        assert [row[0] for row in rows] == ["p99_latency <= 250", "error_rate <= 0.01"]
        assert all(row[3] == str(best["readings"]) for row in rows)

        shot = browser.call(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True},
            session=browser.session,
        )
        png = base64.b64decode(shot["data"])
        (tmp_path / "console.png").write_bytes(png)
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 20_000


@pytest.mark.timeout(60)
def test_an_unconfirmed_recommendation_is_labelled_so_while_the_search_runs(browser):
    driver = SearchDriver.from_plan(search_plan(steps=8))
    run_search(driver, until_steps=5)
    assert driver.phase == "search" and driver.state()["best"]["confirmed"] is False
    with OptimizerServer(driver, app=driver.plan.app) as server:
        browser.open(server.url + "/")
        browser.wait_for("document.querySelector('#best-label') !== null", PAGE_TIMEOUT)
        assert browser.evaluate("document.querySelector('#best-label').dataset.confirmed") == "false"
        assert browser.evaluate("document.querySelector('#best-label').textContent").startswith(
            "NOT CONFIRMED: "
        )
        assert browser.evaluate("document.querySelector('#charts svg[data-chart=\"objective\"]') !== null")
