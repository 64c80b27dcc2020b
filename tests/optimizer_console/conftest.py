"""Shared by the console tests: a finished search on the synthetic application, and a browser.

``run_search`` plays a servo in-process (DESCRIBE, MEASURE, ADJUST answered from
``SyntheticModel`` with its noise, one reading per MEASURE), so the console has real steps,
confirmation steps and a recommendation to show; the page itself is then served over HTTP by a
real ``OptimizerServer`` and read by a real headless Chromium.
"""

from __future__ import annotations

import copy
import itertools
import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import Chromium, require_chromium

from servo_actors.connectors.synthetic import SyntheticModel
from servo_actors.optimizer.search import SearchDriver

MAX_COMMANDS = 500


def search_plan(app: str = "example.com/web", steps: int = 8, **extra: Any) -> dict[str, Any]:
    return {
        "app": app,
        "steps": steps,
        "objective": {"minimize": "cost", "constraints": ["p99_latency <= 250", "error_rate <= 0.01"]},
        "confirm": {"repeats": 2, "candidates": 2},
        **extra,
    }


def run_search(
    driver: SearchDriver, seed: int = 0, until_steps: int | None = None, cancel: Iterable[int] = ()
) -> None:
    """Answer ``driver``'s commands as a servo on the synthetic application would.

    Stops at SLEEP, or once ``until_steps`` steps are recorded (a search still under way). The
    MEASURE or ADJUST commands numbered in ``cancel`` (1 is the first of them) are cancelled as an
    Abort does: the optimizer answers ``cancel`` to their progress, the servo posts ``cancelled``.
    """
    cancelled = set(cancel)
    operations = 0
    model = SyntheticModel(seed=seed)
    rng = random.Random(seed)
    components = copy.deepcopy(model.components())
    uids = (f"c{i}" for i in itertools.count(1))
    for _ in range(MAX_COMMANDS):
        if until_steps is not None and len(driver.steps) >= until_steps:
            return
        command = {**driver.next_command()}
        if command["cmd"] == "SLEEP":
            return
        command["cmd_uid"] = next(uids)
        ok = {"status": "ok", "reason": "success", "cmd_uid": command["cmd_uid"]}
        if command["cmd"] in ("MEASURE", "ADJUST"):
            operations += 1
            if operations in cancelled:
                driver.on_cancelled(command, "cancelled")
                event = "MEASUREMENT" if command["cmd"] == "MEASURE" else "ADJUSTMENT"
                result = {**ok, "status": "cancelled", "reason": "cancelled", "message": "Abort pressed"}
                driver.on_result(command, event, result)
                continue
        if command["cmd"] == "DESCRIBE":
            metrics = {name: {"unit": ""} for name in ("cost", "p99_latency", "error_rate", "throughput")}
            descriptor = {
                "application": {"components": copy.deepcopy(components)},
                "measurement": {"metrics": metrics},
            }
            driver.on_result(command, "DESCRIPTION", {**ok, "descriptor": descriptor})
        elif command["cmd"] == "ADJUST":
            wanted = command["param"]["state"]["application"]["components"]
            for name, body in wanted.items():
                for setting, value in body["settings"].items():
                    components[name]["settings"][setting]["value"] = value["value"]
            state = {"application": {"components": copy.deepcopy(components)}}
            driver.on_result(command, "ADJUSTMENT", {**ok, "state": state})
        else:
            settings = {k: v["value"] for k, v in components["web"]["settings"].items()}
            values = model.evaluate(settings, rng)
            metrics = {name: {"unit": "", "value": values[name]} for name in command["param"]["metrics"]}
            driver.on_result(command, "MEASUREMENT", {**ok, "metrics": metrics, "annotations": {}})
    raise AssertionError(f"no SLEEP after {MAX_COMMANDS} commands")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    """One headless Chromium for the module's tests (each opens its own page)."""
    chromium = Chromium(require_chromium(), Path(tmp_path_factory.mktemp("profile")))
    try:
        yield chromium
    finally:
        chromium.close()
