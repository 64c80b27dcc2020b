"""The state file: written atomically after every result, resumed by a new driver, errors name it."""

from __future__ import annotations

import json

import pytest

from servo_actors.errors import ConfigError
from servo_actors.optimizer.search import SearchDriver

from .conftest import ServoSimulator


def test_every_result_is_written_and_nothing_else_is_left(plan_data, tmp_path):
    path = tmp_path / "state.json"
    driver = SearchDriver.from_plan({**plan_data, "steps": 3}, path)
    servo = ServoSimulator()
    assert not path.exists()
    recorded = []
    for _ in range(20):
        command = servo.stamp(driver.next_command())
        if command["cmd"] == "SLEEP":
            break
        driver.on_result(command, *servo.answer(command))
        if command["cmd"] != "DESCRIBE":
            document = json.loads(path.read_text())
            recorded.append(len(document["steps"]))
    # ADJUST results rewrite the file too (the step is finished only by its MEASURE).
    assert recorded == [1, 1, 2, 2, 3, 3, 4]
    document = json.loads(path.read_text())
    assert document["version"] == 1 and document["app"] == "example.com/web"
    assert document["best"] == driver.state()["best"]
    assert document["steps"] == driver.state()["steps"]
    assert "s3cret-token" not in path.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary file left behind


def test_a_new_driver_resumes_without_redoing_the_baseline(plan_data, tmp_path):
    path = tmp_path / "state.json"
    plan = {**plan_data, "steps": 8}
    servo = ServoSimulator()
    first = SearchDriver.from_plan(plan, path)
    # DESCRIBE, baseline and three full steps, then the optimizer stops mid-step (ADJUST answered).
    for _ in range(2 + 2 * 3 + 1):
        command = servo.stamp(first.next_command())
        first.on_result(command, *servo.answer(command))
    assert [s.n for s in first.steps] == [0, 1, 2, 3]

    second = SearchDriver.from_plan(plan, path)
    assert second.state()["steps"] == first.state()["steps"]
    assert second.state()["best"] == first.state()["best"]
    sent = servo.run(second)
    assert [c["cmd"] for c in sent] == ["DESCRIBE"] + ["ADJUST", "MEASURE"] * 5 + ["SLEEP"]
    assert [s.n for s in second.steps] == list(range(9))


def test_a_resumed_search_proposes_what_an_uninterrupted_one_would(plan_data, tmp_path):
    plan = {**plan_data, "steps": 7, "seed": 3}
    whole = SearchDriver.from_plan(plan)
    ServoSimulator(seed=5).run(whole)

    path = tmp_path / "state.json"
    servo = ServoSimulator(seed=5)
    part = SearchDriver.from_plan(plan, path)
    for _ in range(2 + 2 * 4):
        command = servo.stamp(part.next_command())
        part.on_result(command, *servo.answer(command))
    resumed = SearchDriver.from_plan(plan, path)
    servo.run(resumed)
    assert [s.settings for s in resumed.steps] == [s.settings for s in whole.steps]


def test_a_changed_objective_is_applied_to_the_stored_steps(plan_data, tmp_path):
    path = tmp_path / "state.json"
    ServoSimulator().run(SearchDriver.from_plan({**plan_data, "steps": 2}, path))
    strict = {**plan_data, "steps": 2, "objective": {"minimize": "cost", "constraints": ["p99_latency <= 0"]}}
    state = SearchDriver.from_plan(strict, path).state()
    assert not any(s["feasible"] for s in state["steps"]) and state["best"] is None


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("", "corrupt optimizer state file"),
        ("{not json", "corrupt optimizer state file"),
        ('{"version": 1, "app": "example.com/web", "steps": [', "corrupt optimizer state file"),
        ("[1, 2]", "not a JSON object"),
        ('{"version": 2, "app": "example.com/web", "steps": []}', "version"),
        ('{"version": 1, "app": "example.com/web", "steps": {}}', "steps"),
        (
            '{"version": 1, "app": "example.com/web", "steps": [{"n": 0, "settings": {}, "status": "great"}]}',
            "steps[0].status",
        ),
        (
            '{"version": 1, "app": "example.com/web", "steps": [{"n": 0, "settings": {}, "status": "ok", "metrics": {"cost": "cheap"}}]}',
            "steps[0].metrics.cost",
        ),
        ('{"version": 1, "app": "example.com/other", "steps": []}', "for app 'example.com/other'"),
        (
            '{"version": 1, "app": "example.com/web", "steps": [{"n": 1, "settings": {}, "status": "ok"}, {"n": 1, "settings": {}, "status": "ok"}]}',
            "step numbers repeat",
        ),
    ],
)
def test_an_unusable_state_file_is_a_clear_error_naming_it(plan_data, tmp_path, content, words):
    path = tmp_path / "optimizer-state.json"
    path.write_text(content)
    with pytest.raises(ConfigError) as caught:
        SearchDriver.from_plan(plan_data, path)
    message = str(caught.value)
    assert str(path) in message and words in message, message


def test_a_state_file_in_a_missing_directory_is_refused_up_front(plan_data, tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        SearchDriver.from_plan(plan_data, tmp_path / "nowhere" / "state.json")


def test_a_state_file_that_cannot_be_written_is_reported_and_the_search_goes_on(plan_data, tmp_path):
    path = tmp_path / "state.json"
    driver = SearchDriver.from_plan({**plan_data, "steps": 1}, path)
    path.mkdir()  # a directory where the file should go: the rename fails, even for root
    sent = ServoSimulator().run(driver)
    assert sent[-1]["cmd"] == "SLEEP" and len(driver.steps) == 2
    assert "cannot write" in driver.state()["persist_error"]
    assert list(path.iterdir()) == [] and [p.name for p in tmp_path.iterdir()] == ["state.json"]
