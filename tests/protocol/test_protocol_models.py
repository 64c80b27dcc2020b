"""The wire models: docs/protocol.md's examples round-trip exactly; wrong shapes name the field at fault."""

from __future__ import annotations

import json

import pytest

from servo_actors.errors import ProtocolError
from servo_actors.protocol.commands import (
    AdjustCommand,
    DescribeCommand,
    MeasureCommand,
    OptimizerStatus,
    SleepCommand,
)
from servo_actors.protocol.reading import parse_envelope, parse_param, parse_reply, to_wire, validate
from servo_actors.protocol.results import DescriptionResult, MeasurementResult, Progress
from servo_actors.protocol.wire_types import Envelope
from servo_actors.protocol.writing import (
    adjustment_result,
    description_result,
    envelope,
    failure_result,
    goodbye_param,
    hello_param,
    measurement_result,
    progress_param,
)

# Verbatim from docs/protocol.md.
DESCRIBE = '{"cmd":"DESCRIBE","cmd_uid":"c1","param":{}}'
DESCRIPTION = """{"status":"ok","reason":"success","cmd_uid":"c1",
 "descriptor":{
   "application":{"components":{
     "web":{"settings":{
       "cpu":{"type":"range","unit":"cores","min":0.25,"max":4.0,"step":0.125,"pinned":false,"value":1.0},
       "replicas":{"type":"range","min":1,"max":10,"step":1,"value":2},
       "gc":{"type":"enum","values":["serial","g1"],"value":"g1"}}}}},
   "measurement":{"metrics":{"p99_latency":{"unit":"ms"},"throughput":{"unit":"rps"}}}}}"""
MEASURE = (
    '{"cmd":"MEASURE","cmd_uid":"c2","param":{"metrics":["throughput"],'
    '"control":{"duration":60,"warmup":0,"delay":0}}}'
)
MEASUREMENT = """{"status":"ok","reason":"success","cmd_uid":"c2","annotations":{},
 "metrics":{"throughput":{"unit":"rps","values":[
   {"id":"{instance=\\"10.0.0.7:8080\\",job=\\"web\\"}","data":[[1796221862,1.5],[1796221863,2.5]]}]}}}"""
ADJUST = (
    '{"cmd":"ADJUST","cmd_uid":"c3","param":{"state":{"application":{"components":{"web":'
    '{"settings":{"cpu":{"value":1.5}}}}}},"control":{"settlement":0}}}'
)
SLEEP = '{"cmd":"SLEEP","param":{"duration":60,"data":{"reason":"no active optimization pipeline"}}}'
PROGRESS = '{"progress": 50, "runtime": 12.5, "cmd_uid": "c2", "message": "halfway"}'
CANCELLED = '{"status":"cancelled","reason":"cancelled","message":"aborted by a person","cmd_uid":"c2"}'


def canonical(value: object) -> str:
    """JSON text with sorted keys: equal only if keys, values and number types (1 vs 1.0) agree."""
    return json.dumps(value, sort_keys=True)


@pytest.mark.parametrize(
    ("text", "kind"),
    [(DESCRIBE, DescribeCommand), (MEASURE, MeasureCommand), (ADJUST, AdjustCommand), (SLEEP, SleepCommand)],
)
def test_command_examples_round_trip_exactly(text: str, kind: type) -> None:
    wire = json.loads(text)
    command = parse_reply(wire)
    assert isinstance(command, kind)
    assert canonical(to_wire(command)) == canonical(wire)


@pytest.mark.parametrize(
    ("event", "text", "kind"),
    [
        ("DESCRIPTION", DESCRIPTION, DescriptionResult),
        ("MEASUREMENT", MEASUREMENT, MeasurementResult),
        ("MEASUREMENT", PROGRESS, Progress),
        ("MEASUREMENT", CANCELLED, MeasurementResult),
    ],
)
def test_event_examples_round_trip_exactly(event: str, text: str, kind: type) -> None:
    wire = json.loads(text)
    param = parse_param(event, wire)
    assert isinstance(param, kind)
    assert canonical(to_wire(param)) == canonical(wire)


def test_examples_read_as_the_protocol_means() -> None:
    measure = parse_reply(json.loads(MEASURE))
    assert measure.param.metrics == ["throughput"] and measure.param.control.duration == 60.0
    sleep = parse_reply(json.loads(SLEEP))
    assert sleep.cmd_uid is None and sleep.param.duration == 60.0
    adjust = parse_reply(json.loads(ADJUST))
    assert adjust.param.state.application.components["web"].settings["cpu"].value == 1.5
    description = parse_param("DESCRIPTION", json.loads(DESCRIPTION))
    cpu = description.descriptor.application.components["web"].settings["cpu"]
    assert (cpu.type, cpu.min, cpu.max, cpu.step, cpu.unit, cpu.pinned) == (
        "range",
        0.25,
        4.0,
        0.125,
        "cores",
        False,
    )
    series = parse_param("MEASUREMENT", json.loads(MEASUREMENT)).metrics["throughput"].values
    assert [point for s in series for point in s.data] == [(1796221862, 1.5), (1796221863, 2.5)]


@pytest.mark.parametrize(
    ("written", "seconds"),
    [(30, 30.0), (30.5, 30.5), ("30", 30.0), ("250ms", 0.25), ("5m", 300.0), ("1h30m", 5400.0), (None, 0.0)],
)
def test_control_durations_in_every_form(written: object, seconds: float) -> None:
    command = parse_reply({"cmd": "MEASURE", "cmd_uid": "c", "param": {"control": {"duration": written}}})
    assert command.param.control.duration == seconds
    assert command.param.control.warmup == 0.0  # unset: defaults to 0


def test_metrics_as_a_map_become_names() -> None:
    command = parse_reply(
        {"cmd": "MEASURE", "param": {"metrics": {"throughput": {"unit": "rps"}, "p99": {"unit": "ms"}}}}
    )
    assert command.param.metrics == ["throughput", "p99"]


def test_control_keeps_settlement_load_environment_userdata() -> None:
    control = {
        "duration": "1m",
        "settlement": "10s",
        "load": {"rps": 100},
        "environment": {"mode": "canary"},
        "userdata": {"slo": {"conditions": ["p99 < 200"]}},
    }
    command = parse_reply(
        {
            "cmd": "ADJUST",
            "cmd_uid": "c9",
            "param": {"state": {"application": {"components": {}}}, "control": control},
        }
    )
    assert command.param.control.settlement == 10.0
    assert command.param.control.userdata["slo"] == {"conditions": ["p99 < 200"]}
    assert to_wire(command)["param"]["control"] == {**control, "duration": 60, "settlement": 10}


def test_describe_param_may_be_null_or_missing() -> None:
    assert to_wire(parse_reply({"cmd": "DESCRIBE", "cmd_uid": "c1", "param": None}).param) == {}
    assert isinstance(parse_reply({"cmd": "DESCRIBE", "cmd_uid": "c1"}), DescribeCommand)


def test_sleep_duration_defaults_to_120s() -> None:
    assert parse_reply({"cmd": "SLEEP"}).param.duration == 120.0
    assert parse_reply({"cmd": "SLEEP", "param": {"duration": None}}).param.duration == 120.0


def test_optimizer_statuses_and_extras_are_kept() -> None:
    for name in ("ok", "invalid", "unexpected-event", "cancel"):
        assert parse_reply({"status": name}).status == name
    status = parse_reply({"status": "cancel", "reason": "user", "message": "Abort pressed", "by": "ana"})
    assert isinstance(status, OptimizerStatus)
    assert to_wire(status) == {"status": "cancel", "reason": "user", "message": "Abort pressed", "by": "ana"}
    command = parse_reply({"cmd": "DESCRIBE", "cmd_uid": "c1", "param": {"verbose": True}, "trace": "t-1"})
    assert to_wire(command) == {
        "cmd": "DESCRIBE",
        "cmd_uid": "c1",
        "param": {"verbose": True},
        "trace": "t-1",
    }


@pytest.mark.parametrize(
    ("reply", "field", "words"),
    [
        (
            {"cmd": "MEASURE", "param": {"control": {"duration": "x"}}},
            "param.control.duration",
            "not a duration: 'x'",
        ),
        ({"cmd": "MEASURE", "param": {"control": {"warmup": -1}}}, "param.control.warmup", "negative"),
        ({"cmd": "MEASURE", "param": {"metrics": [1]}}, "param.metrics.0", "string"),
        ({"cmd": "SLEEP", "param": {"duration": True}}, "param.duration", "not a duration"),
        ({"cmd": "ADJUST", "param": {}}, "param.state", "required"),
        (
            {
                "cmd": "ADJUST",
                "param": {
                    "state": {"application": {"components": {"web": {"settings": {"cpu": {"value": [1]}}}}}}
                },
            },
            "param.state.application.components.web.settings.cpu.value",
            "number or a string",
        ),
        ({"cmd": "REBOOT"}, "cmd", "unknown command 'REBOOT'"),
        ({"cmd": None}, "cmd", "unknown command"),
        ({"status": "maybe"}, "status", "'ok'"),
        ({}, "status", "required"),
        ([1, 2], "reply", "expected a JSON object"),
        ("DESCRIBE", "reply", "expected a JSON object"),
    ],
)
def test_wrong_shapes_raise_one_protocol_error_naming_the_field(
    reply: object, field: str, words: str
) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_reply(reply)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
    assert words in str(caught.value)


def test_envelope_is_exactly_three_keys() -> None:
    body = envelope("WHATS_NEXT", None, None)
    assert body == {"event": "WHATS_NEXT", "param": None, "servo_uid": None}
    assert isinstance(parse_envelope(body), Envelope)
    for wrong in (
        {"event": "WHATS_NEXT", "param": None},
        {"event": "WHATS_NEXT", "param": None, "servo_uid": None, "extra": 1},
        {"event": "REBOOT", "param": None, "servo_uid": None},
        {"event": "HELLO", "param": "hi", "servo_uid": None},
    ):
        with pytest.raises(ProtocolError):
            parse_envelope(wrong)


def test_result_builders_from_plain_dicts() -> None:
    components = {
        "web": {"settings": {"replicas": {"type": "range", "min": 1, "max": 4, "step": 1, "value": 2}}}
    }
    description = description_result("c1", components=components, metrics={"rps": {"unit": "rps"}})
    assert description == {
        "status": "ok",
        "reason": "success",
        "cmd_uid": "c1",
        "descriptor": {
            "application": {"components": components},
            "measurement": {"metrics": {"rps": {"unit": "rps"}}},
        },
    }
    metrics = {
        "rps": {"unit": "rps", "values": [{"id": "a", "data": [[1, 2.0]]}, {"id": "b", "data": [[1, 3.0]]}]},
        "cost": {"unit": "$", "value": 4.5},
    }
    measurement = measurement_result("c2", metrics=metrics)
    assert measurement["metrics"] == metrics and measurement["annotations"] == {}
    assert len(measurement["metrics"]["rps"]["values"]) == 2  # every series, not only the last
    adjustment = adjustment_result("c3", components=components)
    assert adjustment["state"] == {"application": {"components": components}}
    cancelled = failure_result("ADJUSTMENT", "c3", status="cancelled", reason="cancelled", message="stop")
    assert cancelled == {"status": "cancelled", "reason": "cancelled", "message": "stop", "cmd_uid": "c3"}
    assert progress_param("c2", progress=40, runtime=3.5) == {"progress": 40, "runtime": 3.5, "cmd_uid": "c2"}
    assert hello_param("servo-actors/0", {"connectors": 2}) == {
        "agent": "servo-actors/0",
        "telemetry": {"connectors": 2},
    }
    assert goodbye_param("SIGTERM") == {"reason": "SIGTERM"}


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: failure_result("WHATS_NEXT", "c", status="failed", reason="boom", message="x"), "event"),
        (lambda: measurement_result("c", metrics={"rps": {"unit": "rps"}}), "param.metrics.rps"),
        (
            lambda: measurement_result("c", metrics={"rps": {"values": [{"data": [[1]]}]}}),
            "param.metrics.rps.values.0.data.0.1",
        ),
        (
            lambda: description_result(
                "c", components={"web": {"settings": {"x": {"type": "enum"}}}}, metrics={}
            ),
            "param.descriptor.application.components.web.settings.x",
        ),
        (
            lambda: description_result(
                "c", components={"web": {"settings": {"x": {"value": float("nan")}}}}, metrics={}
            ),
            "param.descriptor.application.components.web.settings.x.value",
        ),
        (
            lambda: measurement_result("c", metrics={}, annotations={"a": {"b": [float("inf")]}}),
            "param.annotations.a.b.0",
        ),
    ],
)
def test_builders_refuse_wrong_shapes_naming_the_field(build: object, field: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        build()  # type: ignore[operator]
    assert caught.value.field == field


def test_failure_results_are_valid_whatever_status_and_reason_say() -> None:
    # A connector's or the optimizer's words: the result is still valid, the text kept for people.
    result = failure_result("ADJUSTMENT", "c", status="failed", reason="two words", message="x")
    assert (result["status"], result["reason"]) == ("failed", "two-words")
    assert "'two words'" in result["message"]
    result = failure_result("MEASUREMENT", "c", status="exploded", reason="slo violation", message=None)
    assert (result["status"], result["reason"]) == ("failed", "slo-violation")
    assert "'exploded'" in result["message"] and "'slo violation'" in result["message"]
    result = failure_result("DESCRIPTION", "c", status="ok", reason="", message="m")
    assert (result["status"], result["reason"]) == ("failed", "failed")
    result = failure_result("ADJUSTMENT", "c", status="cancelled", reason="user/abort", message="m")
    assert (result["status"], result["reason"]) == ("cancelled", "user-abort")
    assert parse_param("ADJUSTMENT", result) is not None


def test_progress_is_kept_within_bounds() -> None:
    assert len(progress_param("c", progress=1, runtime=1, message="x" * 10**6)["message"]) <= 8192
    assert progress_param("c", progress=101, runtime=-1)["progress"] == 100
    assert progress_param("c", progress=float("nan"), runtime=float("inf")) == {
        "progress": 0.0,
        "runtime": 0.0,
        "cmd_uid": "c",
    }


def test_a_param_with_status_is_a_result_without_is_progress() -> None:
    assert isinstance(parse_param("ADJUSTMENT", {"progress": 10, "cmd_uid": "c"}), Progress)
    with pytest.raises(ProtocolError, match="needs a state"):
        parse_param("ADJUSTMENT", {"status": "ok", "reason": "success", "cmd_uid": "c"})
    with pytest.raises(ProtocolError, match="no status key"):
        validate(Progress, {"progress": 1, "status": "ok"})
