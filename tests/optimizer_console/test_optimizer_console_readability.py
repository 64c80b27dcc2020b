"""What a new user reads on the console, checked in a real headless Chromium: charts at the page's
width with round ticks, readings beyond a chart's scale marked with their value, limit labels clear
of the data, numbers without exponents, the margin of a single reading, and a finished command's
progress at 100 %.
"""

from __future__ import annotations

import json
import math
import random

import pytest
import requests

from servo_actors.connectors.synthetic import SyntheticModel
from servo_actors.optimizer.search import SearchDriver
from servo_actors.optimizer.server import OptimizerServer
from servo_actors.readable import number_text

from .conftest import run_search, search_plan

PAGE_TIMEOUT = 15.0  # generous: the page polls every second on a shared, noisy machine
REQUEST_TIMEOUT = 10.0
SEED, STEPS, CANCELLED = 3, 12, (4, 9)
"""The charts test's search: some p99_latency and error_rate readings far beyond 3x their limits."""
LIMITS = {"p99_latency": 250.0, "error_rate": 0.01}
OFF_SCALE_FACTOR = 3
"""A constraint chart's scale stops at this many times its limit (charts.js)."""
NICE_STEPS = (1, 2, 5)
PIXEL_TOLERANCE = 2.0
NUMBERS_COMPARED = 500

pytestmark = [pytest.mark.browser]


def rects(browser, selector: str) -> list[dict[str, float]]:
    return browser.evaluate(
        f"[...document.querySelectorAll({json.dumps(selector)})].map((e) => {{"
        " const r = e.getBoundingClientRect();"
        " return {x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: r.height}; })"
    )


def overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


def human(value: float) -> str:
    """What the console shows for ``value``: the demo's own number text (the test below holds them equal)."""
    return number_text(float(value))


def set_width(browser, width: int) -> None:
    browser.call(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": 2400, "deviceScaleFactor": 1, "mobile": False},
        session=browser.session,
    )


CHARTS_FILL = (
    "(() => { const box = document.querySelector('#charts'); const w = box.clientWidth;"
    " const charts = [...box.querySelectorAll('svg')];"
    " return charts.length >= 4 && charts.every((s) => Math.abs(s.getBoundingClientRect().width - w) <= 2"
    " && Math.abs(s.viewBox.baseVal.width - w) <= 2); })()"
)
"""Every chart is as wide as the charts' container, drawn at that width (one unit, one pixel)."""


@pytest.mark.timeout(120)
def test_charts_fill_the_width_with_round_ticks_marked_off_scale_values_and_clear_limit_labels(browser):
    driver = SearchDriver.from_plan(search_plan(steps=STEPS, seed=SEED))
    run_search(driver, seed=SEED, cancel=CANCELLED)
    steps = [s for s in driver.state()["steps"] if s["status"] == "ok"]
    off_scale = {
        metric: {
            s["n"]: s["metrics"][metric] for s in steps if s["metrics"][metric] > OFF_SCALE_FACTOR * limit
        }
        for metric, limit in LIMITS.items()
    }
    assert all(off_scale.values()), f"the run should have readings beyond the scale: {off_scale}"

    with OptimizerServer(driver, app=driver.plan.app) as server:
        browser.open(server.url + "/")
        set_width(browser, 1000)
        browser.wait_for(
            "document.querySelector('#charts svg[data-chart=\"settings\"]') !== null", PAGE_TIMEOUT
        )
        browser.wait_for(CHARTS_FILL, PAGE_TIMEOUT)
        narrow = rects(browser, "#charts svg")[0]["width"]
        # A wider window: the charts are drawn again at its width (the text keeps its size).
        set_width(browser, 1600)
        browser.wait_for(
            f"document.querySelector('#charts svg').getBoundingClientRect().width > {narrow + 400}",
            PAGE_TIMEOUT,
        )
        browser.wait_for(CHARTS_FILL, PAGE_TIMEOUT)
        assert rects(browser, "#charts svg[data-chart='objective']")[0]["width"] > 1400

        for chart in ("objective", "constraint"):
            for svg in range(
                browser.evaluate(f"document.querySelectorAll('#charts svg[data-chart={chart}]').length")
            ):
                check_round_ticks(browser, f"#charts svg[data-chart={chart}]", svg)

        for metric, values in off_scale.items():
            check_off_scale(browser, metric, values)
            check_limit_label_is_clear(browser, metric)

        # Numbers in the steps table: no exponent for ordinary magnitudes.
        table = browser.evaluate("document.querySelector('#steps').textContent")
        assert "e+" not in table and "e-" not in table, table
        worst = max(off_scale["p99_latency"].values())
        assert human(worst) in table and worst >= 1e4  # e.g. 13203, never 1.320e+4


def check_round_ticks(browser, selector: str, index: int) -> None:
    ticks = browser.evaluate(
        f"[...document.querySelectorAll({json.dumps(selector)})[{index}].querySelectorAll('text.y-tick')]"
        ".map((t) => [t.textContent, Number(t.dataset.value)])"
    )
    assert 3 <= len(ticks) <= 10, ticks
    values = [value for _, value in ticks]
    step = values[1] - values[0]
    power = 10 ** math.floor(math.log10(step) + 1e-9)
    assert any(math.isclose(step, m * power, rel_tol=1e-9) for m in NICE_STEPS), (selector, ticks)
    for value, previous in zip(values[1:], values[:-1], strict=True):
        assert math.isclose(value - previous, step, rel_tol=1e-6), ticks
    for text, value in ticks:
        assert math.isclose(float(text), value, rel_tol=1e-9, abs_tol=step * 1e-9), (text, value)
        assert math.isclose(value / step, round(value / step), abs_tol=1e-6), (text, step)
        # As many decimals as the step needs, never more (0.06621, 0.136 and 0.2058 are not ticks).
        decimals = len(text.partition(".")[2])
        assert decimals <= max(0, -math.floor(math.log10(step) + 1e-9)), ticks


def check_off_scale(browser, metric: str, values: dict[int, float]) -> None:
    chart = f"#charts svg[data-metric='{metric}']"
    [axis] = browser.evaluate(
        f'[...document.querySelectorAll("{chart} .axes line")].slice(1, 2).map((l) => l.getBoundingClientRect().y + scrollY)'
    )
    labels = []
    for n, value in values.items():
        group = f"{chart} .off-scale[data-step='{n}']"
        text = browser.evaluate(f'document.querySelector("{group} text").textContent')
        assert text == f"▲ {human(value)}", (metric, n, text)
        [label] = rects(browser, f"{group} text")
        [marker] = rects(browser, f"{chart} .marker[data-step='{n}']")
        # On the plot's top edge, the label above it, centred on its step.
        assert abs(marker["y"] + marker["height"] / 2 - axis) <= PIXEL_TOLERANCE, (metric, n, marker, axis)
        assert label["y"] + label["height"] <= marker["y"] + PIXEL_TOLERANCE, (metric, n, label, marker)
        centre = marker["x"] + marker["width"] / 2
        assert abs(label["x"] + label["width"] / 2 - centre) <= PIXEL_TOLERANCE, (metric, n, label, marker)
        title = browser.evaluate(
            f"document.querySelector(\"{chart} .marker[data-step='{n}'] title\").textContent"
        )
        assert "off the scale" in title and human(value) in title, title
        labels.append(label)
    for i, a in enumerate(labels):
        assert not any(overlap(a, b) for b in labels[i + 1 :]), labels
    # Values within the scale have no such label.
    assert browser.evaluate(f'document.querySelectorAll("{chart} .off-scale").length') == len(values)


def check_limit_label_is_clear(browser, metric: str) -> None:
    chart = f"#charts svg[data-metric='{metric}']"
    [label] = rects(browser, f"{chart} .limit-label")
    [svg] = rects(browser, chart)
    assert label["x"] + label["width"] <= svg["x"] + svg["width"], (label, svg)  # not cut off
    for marker in rects(browser, f"{chart} .marker") + rects(browser, f"{chart} .off-scale text"):
        assert not overlap(label, marker), (metric, label, marker)


@pytest.mark.timeout(60)
def test_a_single_reading_is_not_said_to_hold_with_margin(browser):
    driver = SearchDriver.from_plan(search_plan(steps=8))
    run_search(driver, until_steps=5)
    best = driver.state()["best"]
    assert best["readings"] == 1 and best["confirmed"] is False
    with OptimizerServer(driver, app=driver.plan.app) as server:
        browser.open(server.url + "/")
        browser.wait_for("document.querySelectorAll('#best-constraints tr').length > 1", PAGE_TIMEOUT)
        rows = browser.evaluate(
            "[...document.querySelectorAll('#best-constraints tr')].slice(1).map((r) => [...r.cells].map((c) => c.textContent))"
        )
    assert rows
    for constraint, _value, spread, readings, margin in rows:
        assert readings == "1" and spread == "-"
        assert margin in ("holds; 1 reading: no margin to speak of", "no"), (constraint, margin)


@pytest.mark.timeout(60)
def test_numbers_are_formatted_without_exponents_for_ordinary_magnitudes_as_the_demo_does(browser):
    driver = SearchDriver.from_plan(search_plan(steps=8))
    with OptimizerServer(driver, app=driver.plan.app) as server:
        browser.open(server.url + "/")
        browser.wait_for("window.OptimizerCharts !== undefined", PAGE_TIMEOUT)
        cases = {
            15370.4: "15370",
            1.537e4: "15370",
            1456.0: "1456",
            0.066214: "0.06621",
            0.136: "0.136",
            726.38: "726.4",
            1234567.8: "1234568",
            -0.25: "-0.25",
            2.5e-7: "2.500e-07",
            3e16: "3.000e+16",
        }
        for value, text in cases.items():
            assert browser.evaluate(f"OptimizerCharts.fmt({value!r})") == text, value
            assert number_text(value) == text, value
        # The page and the demo's terminal lines write every number alike.
        rng = random.Random(SEED)
        values = [rng.choice((-1, 1)) * 10 ** rng.uniform(-6, 17) for _ in range(NUMBERS_COMPARED)]
        shown = browser.evaluate(f"{json.dumps(values)}.map((v) => OptimizerCharts.fmt(v))")
        assert shown == [number_text(v) for v in values]


@pytest.mark.timeout(60)
def test_a_finished_command_shows_its_progress_at_100_percent(browser):
    driver = SearchDriver.from_plan(search_plan(steps=8))
    with OptimizerServer(driver, app=driver.plan.app) as server:
        servo = f"{server.url}{server.servo_path}"

        def post(event: str, param: object) -> dict:
            body = {"event": event, "param": param, "servo_uid": None}
            return requests.post(servo, json=body, timeout=REQUEST_TIMEOUT).json()

        # DESCRIBE answered as the synthetic application's servo would, then the baseline's MEASURE.
        describe = post("WHATS_NEXT", None)
        assert describe["cmd"] == "DESCRIBE"
        descriptor = described()
        post(
            "DESCRIPTION",
            {"status": "ok", "reason": "success", "cmd_uid": describe["cmd_uid"], "descriptor": descriptor},
        )
        command = post("WHATS_NEXT", None)
        while command["cmd"] != "MEASURE":  # an ADJUST to the baseline, if the driver asks for one
            components = command["param"]["state"]["application"]["components"]
            state = {"application": {"components": components}}
            post(
                "ADJUSTMENT",
                {"status": "ok", "reason": "success", "cmd_uid": command["cmd_uid"], "state": state},
            )
            command = post("WHATS_NEXT", None)
        uid = command["cmd_uid"]
        post("MEASUREMENT", {"progress": 40, "cmd_uid": uid, "message": "measuring"})

        browser.open(server.url + "/")
        browser.wait_for("document.querySelector('#progress').dataset.percent === '40'", PAGE_TIMEOUT)
        assert browser.evaluate("document.querySelector('#progress-text').textContent").startswith("40%")
        metrics = {name: {"unit": "", "value": 1.0} for name in command["param"]["metrics"]}
        post(
            "MEASUREMENT",
            {"status": "ok", "reason": "success", "cmd_uid": uid, "metrics": metrics, "annotations": {}},
        )
        browser.wait_for("document.querySelector('#progress').dataset.percent === '100'", PAGE_TIMEOUT)
        assert browser.evaluate("document.querySelector('#progress-text').textContent") == "100% done"
        assert browser.evaluate("document.querySelector('#progress').style.width") == "100%"
        current = browser.evaluate("document.querySelector('#current').textContent")
        assert current == f"none (last: MEASURE {uid} - baseline, ok)", current

        # The next command in flight: the finished one stays in view at 100 %, in a line of its own.
        following = post("WHATS_NEXT", None)
        result_event = {"MEASURE": "MEASUREMENT", "ADJUST": "ADJUSTMENT"}[following["cmd"]]
        post(result_event, {"progress": 10, "cmd_uid": following["cmd_uid"]})
        browser.wait_for("document.querySelector('#progress').dataset.percent === '10'", PAGE_TIMEOUT)
        assert browser.evaluate("document.querySelector('#current').textContent").startswith(
            f"{following['cmd']} {following['cmd_uid']} - step 1"
        )
        last = browser.evaluate("document.querySelector('#last-command').textContent")
        assert last == f"last finished: MEASURE {uid} - baseline: ok, 100 %", last

        # Cancelled (Abort): how far it got, and that it was cancelled; never 100 %.
        requests.post(f"{server.url}/admin/cancel", json={}, timeout=REQUEST_TIMEOUT).raise_for_status()
        assert post(result_event, {"progress": 20, "cmd_uid": following["cmd_uid"]})["status"] == "cancel"
        cancelled = {
            "status": "cancelled",
            "reason": "cancelled",
            "message": "Abort",
            "cmd_uid": following["cmd_uid"],
        }
        post(result_event, cancelled)
        browser.wait_for("document.querySelector('#progress').dataset.percent === '20'", PAGE_TIMEOUT)
        assert (
            browser.evaluate("document.querySelector('#progress-text').textContent") == "20% then cancelled"
        )
        last = browser.evaluate("document.querySelector('#last-command').textContent")
        assert last.startswith(f"last finished: {following['cmd']} {following['cmd_uid']} - step 1"), last
        assert last.endswith(": cancelled, at 20 %"), last


def described() -> dict:
    metrics = {name: {"unit": ""} for name in ("cost", "p99_latency", "error_rate", "throughput")}
    return {"application": {"components": SyntheticModel().components()}, "measurement": {"metrics": metrics}}
