"""The scripted driver: plan checking (errors name the key) and fault timing on a controlled clock."""

from __future__ import annotations

from typing import Any

import pytest

from servo_actors.errors import ConfigError
from servo_actors.optimizer.scripted import ScriptedDriver

APP = "example.com/web"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def driver(script: list[dict[str, Any]], clock: FakeClock | None = None, **plan: Any) -> ScriptedDriver:
    plan = {"app": APP, "script": script, **plan}
    return ScriptedDriver.from_plan(plan, source="plan.yaml", clock=clock or FakeClock())


@pytest.mark.parametrize(
    ("plan", "key", "words"),
    [
        ({"script": []}, "app", "required"),
        ({"app": "web", "script": []}, "app", "ORG/APP"),
        ({"app": APP}, "script", "required"),
        ({"app": APP, "script": {}}, "script", "list"),
        ({"app": APP, "script": [], "colour": "red"}, "colour", "not permitted"),
        ({"app": APP, "script": [], "sleep": "soon"}, "sleep", "not a duration"),
        ({"app": APP, "script": ["DESCRIBE"]}, "script.0", "mapping"),
        ({"app": APP, "script": [{"cmd": "REBOOT"}]}, "script.0.cmd", "unknown command"),
        (
            {
                "app": APP,
                "script": [{"cmd": "DESCRIBE"}, {"cmd": "MEASURE", "param": {"control": {"duration": "x"}}}],
            },
            "script.1.param.control.duration",
            "not a duration: 'x'",
        ),
        ({"app": APP, "script": [{"cmd": "ADJUST"}]}, "script.0.param", "required"),
        ({"app": APP, "script": [{"cmd": "MEASURE", "progress": ["maybe"]}]}, "script.0.progress", "'maybe'"),
        (
            {"app": APP, "script": [{"cmd": "MEASURE", "result_reply": {"status": "x"}}]},
            "script.0.result_reply",
            "status",
        ),
        ({"app": APP, "script": [{"cmd": "MEASURE", "when": 1}]}, "script.0.when", "not permitted"),
        ({"app": APP, "script": [{"fault": {}}]}, "script.0.fault", "needs status"),
        (
            {"app": APP, "script": [{"fault": {"status": 503, "for": "1s", "times": 2}}]},
            "script.0.fault",
            "not both",
        ),
        ({"app": APP, "script": [{"fault": {"status": 99}}]}, "script.0.fault.status", "100"),
        ({"app": APP, "script": [{"fault": {"body": "x", "json": 1}}]}, "script.0.fault", "at most one"),
        (
            {"app": APP, "script": [{"fault": {"status": 503, "events": ["NAP"]}}]},
            "script.0.fault.events.0",
            "HELLO",
        ),
        (
            {"app": APP, "script": [{"fault": {"stall": "1s"}, "cmd": "SLEEP"}]},
            "script.0",
            "only the fault key",
        ),
    ],
)
def test_plan_errors_name_the_source_and_key(plan: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        ScriptedDriver.from_plan(plan, source="plan.yaml")
    assert (caught.value.source, caught.value.key) == ("plan.yaml", key)
    assert words in str(caught.value)
    assert str(caught.value).startswith(f"plan.yaml: {key}: ")


def test_a_plan_that_is_not_a_mapping() -> None:
    with pytest.raises(ConfigError, match="mapping"):
        ScriptedDriver.from_plan(["app"], source="plan.yaml")  # type: ignore[arg-type]


def test_commands_in_order_then_sleep_for_the_configured_time() -> None:
    scripted = driver(
        [
            {"cmd": "DESCRIBE"},
            {"cmd": "MEASURE", "param": {"metrics": {"rps": {}}, "control": {"duration": "1m"}}},
        ],
        sleep="3s",
    )
    assert scripted.next_command() == {"cmd": "DESCRIBE"}
    assert scripted.next_command() == {
        "cmd": "MEASURE",
        "param": {"metrics": ["rps"], "control": {"duration": 60}},
    }
    assert scripted.next_command()["param"]["duration"] == 3.0
    assert scripted.next_command()["cmd"] == "SLEEP"
    assert scripted.state()["done"] is True


def test_progress_and_result_replies_follow_the_script() -> None:
    scripted = driver(
        [
            {"cmd": "MEASURE", "progress": ["ok", "unexpected-event", {"status": "cancel", "reason": "slo"}]},
            {"cmd": "DESCRIBE", "result_reply": "cancel"},
        ]
    )
    command = {**scripted.next_command(), "cmd_uid": "c1"}
    replies = [scripted.progress_reply(command, {"progress": p}) for p in (1, 2, 3, 4)]
    assert replies == [
        None,
        {"status": "unexpected-event", "message": "the script did not expect this event"},
        {"status": "cancel", "reason": "slo"},
        None,
    ]
    assert scripted.on_result(command, "MEASUREMENT", {"status": "ok"}) is None
    describe = {**scripted.next_command(), "cmd_uid": "c2"}
    assert scripted.on_result(describe, "DESCRIPTION", {"status": "ok"})["status"] == "cancel"
    state = scripted.state()
    assert [r["cmd_uid"] for r in state["results"]] == ["c1", "c2"] and len(state["progress"]) == 4


def test_a_fault_for_a_time_lasts_from_its_first_hit() -> None:
    clock = FakeClock()
    scripted = driver([{"fault": {"status": 503, "for": "10s"}}, {"cmd": "DESCRIBE"}], clock)
    clock.now += 50  # it starts at the first request it hits, not when the script began
    first = scripted.fault_for("WHATS_NEXT", None)
    assert (first.status, first.body) == (503, None)  # the server writes {"detail": ...}
    clock.now += 9.9
    assert scripted.fault_for("HELLO", {}) is first
    clock.now += 0.2
    assert scripted.fault_for("WHATS_NEXT", None) is None
    assert scripted.next_command() == {"cmd": "DESCRIBE"}


def test_a_fault_for_a_number_of_requests_and_only_some_events() -> None:
    scripted = driver(
        [
            {"cmd": "DESCRIBE"},
            {"fault": {"status": 401, "times": 2, "events": ["DESCRIPTION"]}},
            {"cmd": "SLEEP"},
        ],
        FakeClock(),
    )
    scripted.next_command()
    assert scripted.fault_for("WHATS_NEXT", None) is None  # not one of its events
    assert scripted.fault_for("DESCRIPTION", {}).status == 401
    assert scripted.fault_for("DESCRIPTION", {}).status == 401
    assert scripted.fault_for("DESCRIPTION", {}) is None
    assert scripted.state()["faults_hit"] == 2


def test_a_pending_fault_the_poll_does_not_hit_is_skipped() -> None:
    scripted = driver(
        [
            {"cmd": "DESCRIBE"},
            {"fault": {"status": 503, "for": "1h", "events": ["DESCRIPTION"]}},
            {"cmd": "SLEEP"},
        ]
    )
    scripted.next_command()
    assert scripted.next_command() == {"cmd": "SLEEP"}  # the servo moved on; so does the script
    assert scripted.state()["faults_skipped"] == 1


@pytest.mark.parametrize(
    ("fault", "status", "body", "content_type"),
    [
        ({"body": "not json"}, 200, b"not json", "text/plain; charset=utf-8"),
        ({"json": [1, 2]}, 200, b"[1, 2]", "application/json"),
        ({"json": None}, 200, b"null", "application/json"),
        (
            {"status": 410, "detail": "unexpected servo_uid"},
            410,
            b'{"detail": "unexpected servo_uid"}',
            "application/json",
        ),
        ({"stall": "2s"}, None, None, "application/json"),
    ],
)
def test_fault_answers(
    fault: dict[str, Any], status: int | None, body: bytes | None, content_type: str
) -> None:
    answer = driver([{"fault": fault}]).fault_for("WHATS_NEXT", None)
    assert (answer.status, answer.body, answer.content_type) == (status, body, content_type)
    assert answer.stall == (2.0 if "stall" in fault else 0.0)


def test_the_token_stays_secret() -> None:
    scripted = driver([], token="plan-secret-token")
    assert scripted.token.get_secret_value() == "plan-secret-token"
    assert "plan-secret-token" not in repr(scripted) and "plan-secret-token" not in str(scripted.state())
