"""Confirmation: settings are recommended only when they hold up when measured again."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from typing import Any

import pytest

from servo_actors.errors import ConfigError
from servo_actors.optimizer.confirm import evidence, next_to_confirm, points, recommend, verdict
from servo_actors.optimizer.plan import ConfirmSpec, parse_plan
from servo_actors.optimizer.search import SearchDriver
from servo_actors.optimizer.steps import StepRecord

from .conftest import ServoSimulator

OBJECTIVE = parse_plan(
    {"app": "example.com/web", "objective": {"minimize": "cost", "constraints": ["p99_latency <= 250"]}}
).objective
SPEC = ConfirmSpec(repeats=2, sigmas=2.0, candidates=3)
CHEAP = {"web": {"cpu": 0.5}}
DEAR = {"web": {"cpu": 2.0}}


def step(n: int, settings: dict[str, Any], p99: float, cost: float, confirms: int | None = None, **kw):
    return StepRecord(
        n=n,
        settings=settings,
        status=kw.pop("status", "ok"),
        metrics={"p99_latency": p99, "cost": cost},
        confirms=confirms,
        **kw,
    )


def test_a_candidate_that_only_looked_feasible_is_rejected_and_the_next_one_is_measured():
    steps = [step(0, DEAR, 200.0, 2.0), step(1, CHEAP, 246.0, 1.0)]
    # The cheap point looks best: it is measured again first.
    assert next_to_confirm(OBJECTIVE, steps, SPEC).first == 1
    steps += [step(2, CHEAP, 262.0, 1.0, confirms=1), step(3, CHEAP, 259.0, 1.0, confirms=1)]
    cheap = points(steps)[1]
    assert verdict(OBJECTIVE, cheap, SPEC) == "rejected"
    # Its mean (255.7) now breaks the bound: it is no candidate any more; the dear one is next.
    assert next_to_confirm(OBJECTIVE, steps, SPEC).first == 0
    unconfirmed = recommend(OBJECTIVE, steps, SPEC)
    assert unconfirmed.point.first == 0 and not unconfirmed.confirmed
    steps += [step(4, DEAR, 204.0, 2.0, confirms=0), step(5, DEAR, 199.0, 2.0, confirms=0)]
    assert next_to_confirm(OBJECTIVE, steps, SPEC) is None  # confirmed: done
    chosen = recommend(OBJECTIVE, steps, SPEC)
    assert chosen.point.first == 0 and chosen.confirmed
    [judged] = chosen.evidence
    assert judged.readings == 3 and judged.value == pytest.approx(201.0)
    assert judged.uncertainty == pytest.approx(math.sqrt(7.0) / math.sqrt(3.0))


def test_a_mean_inside_the_bound_is_not_enough_when_the_readings_spread_widely():
    steps = [
        step(0, CHEAP, 249.0, 1.0),
        step(1, CHEAP, 200.0, 1.0, confirms=0),
        step(2, CHEAP, 245.0, 1.0, confirms=0),
    ]
    [judged] = evidence(OBJECTIVE, points(steps)[0], SPEC.sigmas)
    # Every reading holds, and so does their mean, but not by the margin: 231.3 + 2 x 15.4 > 250.
    assert judged.met and not judged.met_with_margin
    assert verdict(OBJECTIVE, points(steps)[0], SPEC) == "rejected"
    # Without a margin the same readings would do.
    assert verdict(OBJECTIVE, points(steps)[0], ConfirmSpec(repeats=2, sigmas=0.0)) == "confirmed"


def test_a_failed_confirmation_rejects_and_a_cancelled_one_is_no_reading_and_is_measured_again():
    failed = [step(0, CHEAP, 200.0, 1.0), step(1, CHEAP, 0.0, 1.0, confirms=0, status="failed")]
    assert verdict(OBJECTIVE, points(failed)[0], SPEC) == "rejected"
    cancelled = [step(0, CHEAP, 200.0, 1.0), step(1, CHEAP, 0.0, 1.0, confirms=0, status="cancelled")]
    assert verdict(OBJECTIVE, points(cancelled)[0], SPEC) == "pending"
    cancelled.append(step(2, CHEAP, 0.0, 1.0, confirms=0, status="cancelled"))
    # Two cancels, no evidence either way: still pending, and measured again (cancels spend nothing).
    assert verdict(OBJECTIVE, points(cancelled)[0], SPEC) == "pending"
    assert next_to_confirm(OBJECTIVE, cancelled, SPEC).first == 0
    chosen = recommend(OBJECTIVE, cancelled, SPEC)
    assert chosen.point.first == 0 and not chosen.confirmed
    cancelled += [step(3, CHEAP, 201.0, 1.0, confirms=0), step(4, CHEAP, 199.0, 1.0, confirms=0)]
    assert next_to_confirm(OBJECTIVE, cancelled, SPEC) is None
    assert recommend(OBJECTIVE, cancelled, SPEC).confirmed


def test_confirmation_stops_after_confirm_cancels_cancelled_steps():
    spec = ConfirmSpec(repeats=2, sigmas=2.0, candidates=3, cancels=2)
    steps = [step(0, DEAR, 200.0, 2.0), step(1, CHEAP, 200.0, 1.0)]
    steps.append(StepRecord(n=2, settings=CHEAP, status="cancelled", metrics={}, confirms=1))
    assert next_to_confirm(OBJECTIVE, steps, spec).first == 1
    steps.append(StepRecord(n=3, settings=CHEAP, status="cancelled", metrics={}, confirms=1))
    assert next_to_confirm(OBJECTIVE, steps, spec) is None
    chosen = recommend(OBJECTIVE, steps, spec)
    assert chosen.point.first == 1 and not chosen.confirmed


def test_settings_first_tried_by_a_cancelled_step_are_named_by_the_step_that_measured_them():
    # Step 4 tried the cheap settings and was cancelled (no values); steps 19, 21 and 22 measured them.
    steps = [
        step(0, DEAR, 200.0, 2.0),
        StepRecord(n=4, settings=CHEAP, status="cancelled", metrics={}),
        step(19, CHEAP, 240.0, 1.0),
        step(21, CHEAP, 238.0, 1.0, confirms=19),
        step(22, CHEAP, 241.0, 1.0, confirms=19),
    ]
    chosen = recommend(OBJECTIVE, steps, SPEC)
    assert chosen.point.first == 19 and chosen.confirmed
    assert [r.n for r in chosen.point.readings] == [19, 21, 22]
    # Confirmation asks for the settings by the same name.
    assert next_to_confirm(OBJECTIVE, steps[:3], SPEC).first == 19


def test_at_most_candidates_points_are_examined():
    spec = ConfirmSpec(repeats=1, sigmas=2.0, candidates=1)
    steps = [step(0, DEAR, 200.0, 2.0), step(1, CHEAP, 249.0, 1.0), step(2, CHEAP, 251.0, 1.0, confirms=1)]
    assert next_to_confirm(OBJECTIVE, steps, spec) is None
    chosen = recommend(OBJECTIVE, steps, spec)
    assert chosen.point.first == 0 and not chosen.confirmed


def lucky_first_readings(baseline: dict[str, Any]):
    """Every setting but the baseline breaks p99 <= 250 (255 ms), yet its first reading says 240."""
    seen: Counter[str] = Counter()

    def model(settings: dict[str, Any], rng: random.Random | None = None) -> dict[str, float]:
        web = settings["web"]
        key = json.dumps(settings, sort_keys=True)
        seen[key] += 1
        noise = rng.gauss(0, 2.0) if rng else 0.0
        if web == baseline:
            p99 = 200.0 + noise
        else:
            p99 = 240.0 if seen[key] == 1 else 255.0 + noise
        cost = web["replicas"] * (web["cpu"] * 10 + web["memory"] * 2)
        return {"p99_latency": p99, "throughput": 100.0, "error_rate": 0.0, "cost": cost}

    return model


def test_the_driver_measures_again_rejects_the_lucky_ones_and_recommends_what_holds(plan_data):
    simulator = ServoSimulator()
    baseline = simulator.settings()["web"]
    simulator.model = lucky_first_readings(baseline)
    plan = {**plan_data, "steps": 6, "confirm": {"repeats": 2, "sigmas": 2, "candidates": 10}}
    driver = SearchDriver.from_plan(plan)
    sent = simulator.run(driver)
    assert driver.phase == "done" and sent[-1]["cmd"] == "SLEEP"
    state = driver.state()
    examined = state["confirmation"]["examined"]
    cheaper = [
        s for s in state["steps"] if s["confirms"] is None and s["objective"] < state["steps"][0]["objective"]
    ]
    assert cheaper, "the search should have tried something cheaper than the baseline"
    # Each cheaper point looked feasible once, was measured once more, missed the bound (255 ms) and
    # was rejected at once: a point whose readings do not all hold is never recommended.
    assert [e["verdict"] for e in examined[:-1]] == ["rejected"] * (len(examined) - 1)
    assert examined[-1]["step"] == 0 and examined[-1]["verdict"] == "confirmed"
    for e in examined[:-1]:
        assert e["readings"] == 2 and e["constraints"][0]["value"] == pytest.approx(247.5, abs=8)
    assert all(s["rejected"] for s in state["steps"] if s["n"] in {e["step"] for e in examined[:-1]})
    best = state["best"]
    assert best["step"] == 0 and best["confirmed"] is True and best["readings"] == 3
    [p99] = best["constraints"]
    assert p99["constraint"] == "p99_latency <= 250" and p99["readings"] == 3
    assert p99["value"] == pytest.approx(200.0, abs=5) and p99["uncertainty"] > 0 and p99["met_with_margin"]
    assert driver.best().n == 0
    # A confirmation step is an ADJUST to the candidate's settings and a MEASURE.
    confirmations = [s for s in state["steps"] if s["confirms"] is not None]
    assert len(confirmations) == (len(examined) - 1) + 2
    assert [c["cmd"] for c in sent[-1 - 2 * len(confirmations) : -1]] == ["ADJUST", "MEASURE"] * len(
        confirmations
    )
    json.dumps(state, allow_nan=False)


def test_the_best_is_labelled_unconfirmed_until_confirmation_ends(plan_data):
    simulator = ServoSimulator()
    driver = SearchDriver.from_plan({**plan_data, "steps": 2, "confirm": {"repeats": 2}})
    for _ in range(2 + 2 * 2):  # DESCRIBE, baseline, two search steps
        command = simulator.stamp(driver.next_command())
        driver.on_result(command, *simulator.answer(command))
    best = driver.state()["best"]
    assert best is not None and best["confirmed"] is False and best["readings"] == 1
    assert best["note"] == "1 of 3 readings (not measured again yet)"
    assert best["constraints"][0]["uncertainty"] is None and best["constraints"][0]["readings"] == 1


def test_confirmation_steps_are_stored_and_resumed(plan_data, tmp_path):
    path = tmp_path / "state.json"
    plan = {**plan_data, "steps": 2, "confirm": {"repeats": 2, "candidates": 1}}
    simulator = ServoSimulator()
    first = SearchDriver.from_plan(plan, path)
    # DESCRIBE, baseline, two steps, then one confirmation step (ADJUST + MEASURE).
    for _ in range(2 + 2 * 2 + 2):
        command = simulator.stamp(first.next_command())
        first.on_result(command, *simulator.answer(command))
    assert first.phase == "confirm" and first.steps[-1].confirms is not None
    second = SearchDriver.from_plan(plan, path)
    assert second.state()["steps"] == first.state()["steps"]
    sent = simulator.run(second)
    assert [c["cmd"] for c in sent] == ["DESCRIBE", "ADJUST", "MEASURE", "SLEEP"]
    assert sum(s.confirms is not None for s in second.steps) == 2


@pytest.mark.parametrize(
    ("confirm", "where"),
    [
        ({"repeats": -1}, "confirm.repeats"),
        ({"sigmas": "x"}, "confirm.sigmas"),
        ({"tries": 1}, "confirm.tries"),
    ],
)
def test_a_bad_confirm_section_names_its_key(plan_data, confirm, where):
    with pytest.raises(ConfigError) as caught:
        parse_plan({**plan_data, "confirm": confirm}, source="plan.yaml")
    assert where in str(caught.value) and "plan.yaml" in str(caught.value)
