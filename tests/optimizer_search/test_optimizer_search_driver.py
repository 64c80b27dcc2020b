"""SearchDriver driven through its Driver methods with results shaped as a servo posts them."""

from __future__ import annotations

import json
import math

import pytest

from servo_actors.optimizer.search import COMMAND_ATTEMPTS, SearchDriver
from servo_actors.optimizer.steps import reduce_metrics

from .conftest import COMPONENTS, ServoSimulator


def driver_for(plan_data, **changes) -> SearchDriver:
    return SearchDriver.from_plan({**plan_data, **changes})


def test_the_sequence_is_describe_baseline_then_adjust_measure_rounds_then_sleep(plan_data):
    driver = driver_for(plan_data)
    servo = ServoSimulator()
    sent = servo.run(driver)
    assert [c["cmd"] for c in sent] == ["DESCRIBE", "MEASURE"] + ["ADJUST", "MEASURE"] * 6 + ["SLEEP"]
    measure = sent[1]["param"]
    assert measure["control"] == {"duration": 30.0, "warmup": 5.0, "delay": 0.0}
    # By default every described metric is measured (the objective's and constraints' included).
    assert measure["metrics"] == ["cost", "error_rate", "p99_latency", "throughput"]
    assert sent[-1]["param"]["duration"] == 600.0
    adjust = sent[2]["param"]
    assert adjust["control"] == {"settlement": 0.0}
    assert set(adjust["state"]["application"]["components"]["web"]["settings"]) == {
        "cpu",
        "memory",
        "replicas",
        "gc",
    }
    # Once done, it keeps sleeping.
    assert driver.next_command()["cmd"] == "SLEEP" and driver.phase == "done"
    state = driver.state()
    assert [s["n"] for s in state["steps"]] == list(range(7))
    assert state["steps"][0]["settings"] == {"web": {"cpu": 1.0, "memory": 2.0, "replicas": 2, "gc": "g1"}}
    assert all(s["status"] == "ok" for s in state["steps"])
    json.dumps(state, allow_nan=False)  # JSON as the server sends it


def test_each_step_records_what_is_in_force_and_the_reduced_metrics(plan_data):
    driver = driver_for(plan_data, steps=3)
    servo = ServoSimulator()
    servo.run(driver)
    for step in driver.state()["steps"]:
        # The simulator's series are v*0.9, v*1.1 and v: their mean is v, the model's own value.
        expected = servo.model(step["settings"])
        for name in ("cost", "throughput"):  # without noise in the model for these two
            assert step["metrics"][name] == pytest.approx(expected[name], rel=0.2)
        assert step["feasible"] == (step["metrics"]["p99_latency"] <= 250)
        assert step["objective"] == step["metrics"]["cost"]
        assert step["constraints"] == [
            {
                "constraint": "p99_latency <= 250",
                "value": step["metrics"]["p99_latency"],
                "met": step["feasible"],
            }
        ]


def test_best_is_the_lowest_objective_among_feasible_steps(plan_data):
    driver = driver_for(plan_data, steps=10)
    ServoSimulator().run(driver)
    state = driver.state()
    feasible = [s for s in state["steps"] if s["feasible"]]
    assert feasible, "the stand-in application should have feasible points"
    winner = min(feasible, key=lambda s: s["objective"])
    best = state["best"]
    assert (best["step"], best["settings"], best["metrics"], best["objective"]) == (
        winner["n"],
        winner["settings"],
        winner["metrics"],
        winner["objective"],
    )
    # Confirmation is off in these plans: the best is a single reading, and says so.
    assert best["confirmed"] is False and best["readings"] == 1 and "off" in best["note"]
    cheaper_infeasible = [
        s for s in state["steps"] if not s["feasible"] and s["objective"] < winner["objective"]
    ]
    assert cheaper_infeasible, "some infeasible step should have been cheaper, or this test proves little"


def test_maximize_picks_the_highest(plan_data):
    driver = driver_for(plan_data, steps=4, objective={"maximize": "throughput", "constraints": []})
    ServoSimulator().run(driver)
    state = driver.state()
    assert state["best"]["objective"] == max(s["metrics"]["throughput"] for s in state["steps"])


def test_a_constraint_on_a_missing_metric_is_not_met(plan_data):
    driver = driver_for(
        plan_data, steps=1, objective={"minimize": "cost", "constraints": ["queue_depth < 5"]}
    )
    ServoSimulator().run(driver)
    state = driver.state()
    assert all(not s["feasible"] for s in state["steps"])
    assert state["steps"][0]["constraints"] == [
        {"constraint": "queue_depth < 5", "value": None, "met": False}
    ]
    assert state["best"] is None


def test_metric_reduction():
    metrics = {
        "p99_latency": {
            "unit": "ms",
            "values": [{"id": "a", "data": [[1, 100], [2, 200]]}, {"id": "b", "data": [[1, 600]]}],
        },
        "throughput": {"unit": "rps", "value": 42},
        "broken": {"unit": "x", "values": [{"id": "a", "data": [[1, None], [2, "nan"], [3]]}]},
        "partial": {"values": [{"id": "a", "data": [[1, float("nan")], [2, 4.0]]}, "junk"]},
        "empty": {"values": []},
        "odd": 7,
    }
    assert reduce_metrics(metrics) == {"p99_latency": 300.0, "throughput": 42.0, "partial": 4.0}
    assert reduce_metrics(None) == {}


def test_pinned_settings_are_never_sent(plan_data):
    components = json.loads(json.dumps(COMPONENTS))
    components["web"]["settings"]["memory"]["pinned"] = True
    driver = driver_for(plan_data, steps=5)
    sent = ServoSimulator(components=components).run(driver)  # the simulator fails on a pinned ADJUST
    for command in sent:
        if command["cmd"] == "ADJUST":
            assert "memory" not in command["param"]["state"]["application"]["components"]["web"]["settings"]
    assert {s["settings"]["web"]["memory"] for s in driver.state()["steps"]} == {2.0}


def _start(driver: SearchDriver, servo: ServoSimulator) -> dict:
    """DESCRIBE and the baseline; returns the first ADJUST as sent."""
    for _ in range(2):
        command = servo.stamp(driver.next_command())
        driver.on_result(command, *servo.answer(command))
    return servo.stamp(driver.next_command())


def test_a_failed_adjust_ends_its_step_and_the_search_goes_on(plan_data):
    driver, servo = driver_for(plan_data, steps=3), ServoSimulator()
    adjust = _start(driver, servo)
    assert adjust["cmd"] == "ADJUST"
    failure = {
        "status": "rejected",
        "reason": "out-of-range",
        "message": "web.cpu too big",
        "cmd_uid": adjust["cmd_uid"],
    }
    driver.on_result(adjust, "ADJUSTMENT", failure)
    assert servo.stamp(driver.next_command())["cmd"] == "ADJUST"  # step 2: no MEASURE for step 1
    step = driver.state()["steps"][1]
    assert (step["n"], step["status"], step["reason"], step["message"]) == (
        1,
        "rejected",
        "out-of-range",
        "web.cpu too big",
    )
    assert step["feasible"] is False and step["metrics"] == {}


def test_a_cancelled_measure_is_recorded_and_skipped(plan_data):
    driver, servo = driver_for(plan_data, steps=3), ServoSimulator()
    adjust = _start(driver, servo)
    driver.on_result(adjust, *servo.answer(adjust))
    measure = servo.stamp(driver.next_command())
    assert measure["cmd"] == "MEASURE"
    assert (
        driver.progress_reply(
            measure, {"progress": 40, "message": "measuring", "cmd_uid": measure["cmd_uid"]}
        )
        is None
    )
    assert driver.state()["current"]["progress"] == 40
    driver.on_cancelled(measure, "cancelled")  # the server answered a progress post with cancel
    cancelled = {
        "status": "cancelled",
        "reason": "cancelled",
        "message": "stopped",
        "cmd_uid": measure["cmd_uid"],
    }
    driver.on_result(measure, "MEASUREMENT", cancelled)
    following = servo.stamp(driver.next_command())
    assert following["cmd"] == "ADJUST"  # not retried: Abort means abort
    step = driver.state()["steps"][1]
    assert (step["n"], step["status"], step["feasible"]) == (1, "cancelled", False)
    assert driver.state()["current"]["step"] == 2


def test_cancel_in_reply_to_the_result_counts_as_cancelled(plan_data):
    driver, servo = driver_for(plan_data, steps=2), ServoSimulator()
    adjust = _start(driver, servo)
    driver.on_cancelled(adjust, "slo-violation")  # server answered the result post cancel; no on_result
    assert servo.stamp(driver.next_command())["cmd"] == "ADJUST"
    step = driver.state()["steps"][1]
    assert (step["status"], step["reason"]) == ("cancelled", "slo-violation")


def test_an_ok_result_after_a_cancel_still_counts_as_cancelled(plan_data):
    driver, servo = driver_for(plan_data, steps=2), ServoSimulator()
    command = servo.stamp(driver.next_command())
    driver.on_result(command, *servo.answer(command))
    baseline = servo.stamp(driver.next_command())
    driver.on_cancelled(baseline, "cancelled")
    driver.on_result(baseline, *servo.answer(baseline))
    step = driver.state()["steps"][0]
    assert step["status"] == "cancelled" and step["metrics"]  # what was measured is kept, but not trusted
    assert driver.state()["best"] is None


def test_a_command_whose_result_never_comes_is_reissued_then_given_up(plan_data):
    driver, servo = driver_for(plan_data, steps=2), ServoSimulator()
    adjust = _start(driver, servo)
    issues = [adjust]
    for _ in range(COMMAND_ATTEMPTS - 1):
        again = servo.stamp(driver.next_command())  # the servo polled again without a result
        assert (
            again["cmd"] == "ADJUST"
            and again["param"] == adjust["param"]
            and again["cmd_uid"] != adjust["cmd_uid"]
        )
        issues.append(again)
    assert driver.state()["current"]["attempt"] == COMMAND_ATTEMPTS
    following = servo.stamp(driver.next_command())
    assert following["cmd"] == "ADJUST" and following["param"] != adjust["param"]
    step = driver.state()["steps"][1]
    assert (step["status"], step["reason"]) == ("failed", "lost")
    # A late result of an earlier issue is not mistaken for the command in flight.
    assert driver.on_result(issues[0], *servo.answer(issues[0])) is None
    assert len(driver.state()["steps"]) == 2


def test_describe_that_keeps_failing_ends_the_plan(plan_data):
    driver = driver_for(plan_data)
    for _ in range(COMMAND_ATTEMPTS):
        command = {**driver.next_command(), "cmd_uid": "d"}
        assert command["cmd"] == "DESCRIBE"
        driver.on_result(
            command, "DESCRIPTION", {"status": "failed", "reason": "connector-crashed", "message": "boom"}
        )
    sleep = driver.next_command()
    assert sleep["cmd"] == "SLEEP" and driver.phase == "failed"
    assert "boom" in driver.state()["message"] and "boom" in sleep["param"]["data"]["reason"]


def test_an_unusable_description_is_a_failed_describe(plan_data):
    driver = driver_for(plan_data)
    command = {**driver.next_command(), "cmd_uid": "d1"}
    descriptor = {
        "application": {
            "components": {"web": {"settings": {"cpu": {"type": "range", "min": 4, "max": 1, "step": 1}}}}
        }
    }
    driver.on_result(command, "DESCRIPTION", {"status": "ok", "reason": "success", "descriptor": descriptor})
    assert driver.phase == "describe" and "min 4 is above max 1" in driver.state()["message"]
    assert driver.next_command()["cmd"] == "DESCRIBE"


def test_nothing_free_means_baseline_only(plan_data):
    components = {
        "web": {
            "settings": {"cpu": {"type": "range", "min": 1, "max": 4, "step": 1, "value": 1, "pinned": True}}
        }
    }
    driver = driver_for(plan_data)
    sent = ServoSimulator(
        model=lambda settings, rng=None: {"cost": 1.0, "p99_latency": 1.0}, components=components
    ).run(driver)
    assert [c["cmd"] for c in sent] == ["DESCRIBE", "MEASURE", "SLEEP"]
    assert driver.phase == "done" and "no free settings" in driver.state()["message"]


def test_the_token_is_not_in_the_state(plan_data):
    driver = driver_for(plan_data, steps=1)
    ServoSimulator().run(driver)
    assert "s3cret-token" not in json.dumps(driver.state())


def test_no_nan_reaches_the_state(plan_data):
    driver = driver_for(plan_data, steps=1)
    servo = ServoSimulator(model=lambda settings, rng=None: {"cost": math.nan, "p99_latency": math.inf})
    servo.run(driver)
    state = driver.state()
    json.dumps(state, allow_nan=False)
    assert state["steps"][0]["metrics"] == {} and state["best"] is None
