"""The console's charts in a real headless Chromium: what they draw, checked as a person sees them.

Besides the DOM, the tests read what is rendered: sizes from ``getBoundingClientRect`` and the
pixels of a screenshot (the settings chart's bars must differ in length as their values do).

``SERVO_CONSOLE_SCREENSHOT=docs/console.png`` makes the main test also write its screenshot of
the whole console there: that is how the picture of docs/optimizer.md is made.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from png_pixels import Image, read_png

from servo_actors.optimizer.search import SearchDriver
from servo_actors.optimizer.server import OptimizerServer

from .conftest import run_search, search_plan

PAGE_TIMEOUT = 15.0  # generous: the page polls every second on a shared, noisy machine
PIXEL_TOLERANCE = 2.0
"""Pixels a rendered length may differ from the drawn one by (anti-aliasing, the stroke)."""
SEED, STEPS, CANCELLED = 3, 12, (4, 9)
"""A search whose recommendation is not the baseline, with two operations cancelled (Abort)."""
SCREENSHOT_TARGET = "SERVO_CONSOLE_SCREENSHOT"
BAR_GAP = 3
"""Light pixels in a row that end a bar (its label starts 6 chart units further right)."""

pytestmark = [pytest.mark.browser]


def count(browser, selector: str) -> int:
    return browser.evaluate(f"document.querySelectorAll({json.dumps(selector)}).length")


def rects(browser, selector: str) -> list[dict[str, float]]:
    """The rendered boxes of every element ``selector`` matches (CSS pixels, page coordinates)."""
    return browser.evaluate(
        f"[...document.querySelectorAll({json.dumps(selector)})].map((e) => {{"
        " const r = e.getBoundingClientRect();"
        " return {x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: r.height}; })"
    )


def screenshot(browser, clip: dict[str, float] | None = None) -> bytes:
    params: dict = {"format": "png", "captureBeyondViewport": True}
    if clip is not None:
        params["clip"] = {**clip, "scale": 1}
    return base64.b64decode(browser.call("Page.captureScreenshot", params, session=browser.session)["data"])


def drawn_length(image: Image, rows: range, start: int) -> int:
    """How far right of ``start`` a bar runs, in pixels: the longest unbroken dark run from ``start``
    along any of ``rows`` (the middle of a filled bar; the top edge of an outlined one)."""
    longest = 0
    for row in rows:
        last = start - 1
        for x in range(max(0, start - 1), image.width):
            if sum(image.pixel(x, row)) < 3 * 200:  # darker than light grey: the bar or its outline
                last = x
            elif x - last > BAR_GAP:  # the bar has ended (its value label comes further right)
                break
        longest = max(longest, last - start + 1)
    return longest


@pytest.mark.timeout(120)
def test_the_charts_show_objective_constraints_and_settings_without_relying_on_colour(browser, tmp_path):
    driver = SearchDriver.from_plan(search_plan(steps=STEPS, seed=SEED))
    run_search(driver, seed=SEED, cancel=CANCELLED)
    state = driver.state()
    assert state["phase"] == "done"
    steps = state["steps"]
    measured = [s for s in steps if s["status"] == "ok"]
    cancelled = [s for s in steps if s["status"] == "cancelled"]
    confirmations = [s for s in measured if s["confirms"] is not None]
    feasible = [s for s in measured if s["confirms"] is None and s["feasible"]]
    infeasible = [s for s in measured if s["confirms"] is None and not s["feasible"]]
    assert confirmations and feasible and infeasible and cancelled, "the run should show every kind of step"
    best = state["best"]
    assert best["step"] != 0 and best["settings"] != steps[0]["settings"], "a recommendation to compare"

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
        assert count(browser, f"{objective} .marker:not(.cancelled)") == len(measured)
        # Each kind of step has its own shape: circle, cross (a path), square.
        assert count(browser, f"{objective} .marker.feasible circle") == len(feasible)
        assert count(browser, f"{objective} .marker.infeasible path") == len(infeasible)
        assert count(browser, f"{objective} .marker.confirmation rect") == len(confirmations)
        # A cancelled step has no value: its own shape on the step axis, never a cross.
        for step in cancelled:
            marker = f"{objective} .marker[data-step='{step['n']}']"
            assert count(browser, marker) == 1 and count(browser, f"{marker}.cancelled") == 1
            assert "cancelled" in browser.evaluate(f'document.querySelector("{marker} title").textContent')
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
            assert count(browser, f"{chart} .marker:not(.cancelled)") == len(measured)
            assert count(browser, f"{chart} .marker.cancelled") == len(cancelled)

        # The recommendation's settings against the baseline: two bars per range, words for the enum.
        settings = "#charts svg[data-chart='settings']"
        for name in ("web.cpu", "web.memory", "web.replicas"):
            assert count(browser, f"{settings} g[data-setting='{name}'] rect.baseline") == 1
            assert count(browser, f"{settings} g[data-setting='{name}'] rect.recommended") == 1
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

        # In the steps table a cancelled step says so, in words, and is never called infeasible.
        for step in cancelled:
            cells = browser.evaluate(
                f"[...document.querySelector(\"#steps tr[data-step='{step['n']}']\").cells].map((c) => c.textContent)"
            )
            assert cells[1] == "cancelled" and cells[-1] == "cancelled", cells
        # The recommendation is named by a step that measured it.
        assert browser.evaluate(
            "document.querySelector('#steps tr.best td:nth-child(2)').textContent"
        ).startswith("ok")

        check_the_settings_bars_as_drawn(browser, state)

        png = screenshot(browser)
        (tmp_path / "console.png").write_bytes(png)
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 20_000
        if os.environ.get(SCREENSHOT_TARGET):
            Path(os.environ[SCREENSHOT_TARGET]).write_bytes(png)


def check_the_settings_bars_as_drawn(browser, state: dict) -> None:
    """Each range setting's two bars have the lengths their values give, on screen and in pixels."""
    chart = "#charts svg[data-chart='settings']"
    box = rects(browser, chart)[0]
    # The chart is drawn at its container's width: its viewBox's width is that many CSS pixels.
    view_width = float(browser.evaluate(f'document.querySelector("{chart}").viewBox.baseVal.width'))
    scale = box["width"] / view_width
    expected: dict[str, float] = {}
    for name in ("web.cpu", "web.memory", "web.replicas"):
        for kind in ("baseline", "recommended"):
            selector = f"{chart} g[data-setting='{name}'] rect.{kind}"
            drawn = float(browser.evaluate(f'document.querySelector("{selector}").getAttribute("width")'))
            [rendered] = rects(browser, selector)
            # What a person sees: the box on screen, not the markup (a CSS width once overrode it).
            assert abs(rendered["width"] - drawn * scale) <= PIXEL_TOLERANCE, (name, kind, rendered, drawn)
            expected[f"{name} {kind}"] = rendered["width"]
    assert len({round(width) for width in expected.values()}) >= 3, f"bars of one length: {expected}"

    image = read_png(screenshot(browser, box))
    for label, width in expected.items():
        name, kind = label.split()
        [bar] = rects(browser, f"{chart} g[data-setting='{name}'] rect.{kind}")
        top, middle = round(bar["y"] - box["y"]), round(bar["y"] + bar["height"] / 2 - box["y"])
        start = round(bar["x"] - box["x"])
        seen = drawn_length(image, range(max(0, top - 1), middle + 1), start)
        assert abs(seen - width) <= PIXEL_TOLERANCE + 1, (label, seen, width)


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
