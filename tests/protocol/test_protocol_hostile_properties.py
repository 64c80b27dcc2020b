"""Property-based: whatever the optimizer answers and whatever connectors return, only
well-formed protocol messages leave the servo, and nothing on the way raises.

Two paths, each from its hostile input to the bytes that would be POSTed:

- a reply body (any bytes: JSON of any shape, nested past any limit, NaN, huge numbers, unicode)
  -> ``decode_reply`` -> ``parse_reply`` -> the result the runner posts for it (the ``cancelled``
  result of a cancel, or a result for a command's cmd_uid) -> ``request_body``;
- an ``OperationResult`` (any status, reason, message and data) -> ``runner.result_param`` ->
  ``request_body``.

What leaves is parsed back strictly (``NaN`` refused) and checked with ``parse_envelope`` and
``parse_param``: a result of a known status and a one-word reason. No processes here: the
end-to-end cases are in tests/runner/test_runner_hostile.py.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from servo_actors.actors.rules.results import OperationResult
from servo_actors.errors import ProtocolError
from servo_actors.protocol.commands import Command, OptimizerStatus, SleepCommand
from servo_actors.protocol.exchange import MAX_REPLY_BYTES
from servo_actors.protocol.json_bounds import MAX_NESTING, decode_reply
from servo_actors.protocol.reading import parse_envelope, parse_param, parse_reply
from servo_actors.protocol.statuses import is_word
from servo_actors.protocol.wire_types import RESULT_EVENT
from servo_actors.protocol.writing import failure_result, request_body
from servo_actors.runner import result_param
from servo_actors.runner.params import cancel_reason
from servo_actors.vocabulary import SERVO_STATUSES

HOSTILE = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

floats = st.floats(allow_nan=True, allow_infinity=True)
huge = st.integers(-(10**400), 10**400)
texts = st.text(max_size=30)  # any unicode, surrogates excluded by hypothesis's default alphabet
leaves = st.none() | st.booleans() | st.integers() | huge | floats | texts
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=30,
)


def deep(depth: int, leaf: Any = 1) -> Any:
    for n in range(depth):
        leaf = [leaf] if n % 2 else {"k": leaf}
    return leaf


deeply_nested = st.integers(MAX_NESTING - 2, 3 * MAX_NESTING).map(deep)
# Shapes near the protocol's, with hostile parts: what breaks a parser is what almost fits.
numbers = st.integers() | huge | floats
durations = numbers | texts | st.sampled_from(["5m", "250ms", "1h30m", "-1s", "1e400s"])
statuses = st.fixed_dictionaries(
    {"status": st.sampled_from(["ok", "cancel", "invalid", "unexpected-event"])},
    optional={"reason": texts, "message": texts, "extra": values},
) | st.fixed_dictionaries(
    {"status": texts | values}, optional={"reason": texts | values, "message": texts | values}
)
control = st.fixed_dictionaries(
    {},
    optional={
        "duration": durations,
        "warmup": durations,
        "delay": durations,
        "settlement": durations,
        "userdata": values | deeply_nested,
    },
)
settings_values = st.dictionaries(
    texts, st.fixed_dictionaries({"value": numbers | texts | values}), max_size=3
)
state = st.fixed_dictionaries(
    {
        "application": st.fixed_dictionaries(
            {
                "components": st.dictionaries(
                    texts, st.fixed_dictionaries({"settings": settings_values}), max_size=3
                )
            }
        )
    }
)
uids = texts | values
commands = st.one_of(
    st.fixed_dictionaries({"cmd": st.just("DESCRIBE")}, optional={"cmd_uid": uids, "param": values}),
    st.fixed_dictionaries(
        {"cmd": st.just("MEASURE")},
        optional={
            "cmd_uid": uids,
            "param": st.fixed_dictionaries(
                {}, optional={"metrics": st.lists(texts, max_size=3) | values, "control": control}
            ),
        },
    ),
    st.fixed_dictionaries(
        {
            "cmd": st.just("ADJUST"),
            "param": st.fixed_dictionaries({"state": state}, optional={"control": control}),
        },
        optional={"cmd_uid": uids},
    ),
    st.fixed_dictionaries(
        {"cmd": st.just("SLEEP")},
        optional={"param": st.fixed_dictionaries({}, optional={"duration": durations, "data": values})},
    ),
    st.fixed_dictionaries(
        {"cmd": texts | values}, optional={"cmd_uid": uids, "param": values | deeply_nested}
    ),
)
replies = statuses | commands | values | deeply_nested


def _reply_bytes(value: Any) -> bytes:
    try:
        return json.dumps(value).encode()  # NaN and Infinity as Python writes them: hostile too
    except (RecursionError, ValueError):
        return b"[" * 5000 + b"]" * 5000


raw_replies = (
    replies.map(_reply_bytes)
    | st.binary(max_size=200)
    | st.integers(1000, 20000).map(lambda n: b"[" * n + b"]" * n)
    | st.integers(1000, 5000).map(lambda n: b'{"cmd":' * n + b"1" + b"}" * n)
)


def note(text: str) -> None:
    event(text.split()[0])  # the status that went out: the spread shows in --hypothesis-show-statistics


def _reject_constant(name: str) -> Any:
    raise AssertionError(f"{name} went out on the wire")


def assert_well_formed(body: bytes) -> dict[str, Any]:
    """The body is strict JSON, a protocol envelope, and its param a valid message; the param."""
    wire = json.loads(body, parse_constant=_reject_constant)
    envelope = parse_envelope(wire)
    parse_param(envelope.event, envelope.param)
    param = envelope.param
    assert param is not None
    if "status" in param:
        assert param["status"] in SERVO_STATUSES, param["status"]
        assert is_word(param["reason"]), param["reason"]
    return param


def _operation_result(command: Command) -> OperationResult:
    operation = {"DESCRIBE": "describe", "MEASURE": "measure", "ADJUST": "adjust"}[command.cmd]
    return OperationResult(operation, "ok", "success", None, {})


@HOSTILE
@given(raw_replies)
def test_any_reply_becomes_a_bad_reply_or_well_formed_answers(raw: bytes) -> None:
    try:
        reply = parse_reply(decode_reply(raw, MAX_REPLY_BYTES))
    except (ValueError, ProtocolError) as exc:  # a bad reply: logged by the client, polled again
        assert str(exc)
        event("bad reply")
        return
    event(f"read as {type(reply).__name__}")
    if isinstance(reply, OptimizerStatus):
        # The runner's answer to a cancel: a cancelled result, whatever the reason said.
        reason, message = cancel_reason(reply)
        param = failure_result("MEASUREMENT", "c1", status="cancelled", reason=reason, message=message)
        sent = assert_well_formed(request_body("MEASUREMENT", param, "servo-1"))
        assert sent["status"] == "cancelled"
        return
    if isinstance(reply, SleepCommand):
        assert reply.param.duration >= 0
        return
    result_event = RESULT_EVENT[reply.cmd]
    requested = list(getattr(reply.param, "metrics", []) or [])
    param = result_param(result_event, reply, _operation_result(reply), requested)
    assert_well_formed(request_body(result_event, param, "servo-1"))


point_values = floats | huge | st.integers()
series = st.fixed_dictionaries(
    {"data": st.lists(st.tuples(point_values, point_values) | values, max_size=4)},
    optional={"id": texts | values},
)
measured = st.dictionaries(
    texts,
    st.fixed_dictionaries({"values": st.lists(series, max_size=3)}, optional={"unit": texts})
    | st.fixed_dictionaries({"value": point_values}, optional={"unit": texts})
    | values,
    max_size=3,
)
range_setting = st.fixed_dictionaries(
    {"type": st.just("range"), "min": numbers, "max": numbers, "step": numbers}, optional={"value": numbers}
)
described = st.dictionaries(
    texts,
    st.fixed_dictionaries({"settings": st.dictionaries(texts, range_setting | values, max_size=3)}),
    max_size=3,
)
connector_data = st.fixed_dictionaries(
    {},
    optional={
        "components": described | values | deeply_nested,
        "metrics": measured | st.dictionaries(texts, st.fixed_dictionaries({"unit": texts})) | values,
        "annotations": st.dictionaries(texts, values, max_size=3) | values | deeply_nested,
    },
)
operation_results = st.builds(
    OperationResult,
    operation=st.sampled_from(["describe", "measure", "adjust"]),
    status=st.sampled_from(["ok", "ok", *SERVO_STATUSES]) | texts,
    reason=texts | st.sampled_from(["success", "slo violation", "user/abort", ""]),
    message=st.none() | texts,
    data=connector_data | values,
)


@HOSTILE
@given(operation_results, st.none() | st.lists(texts, max_size=3), texts)
def test_any_connector_result_goes_out_as_a_valid_result(
    result: OperationResult, requested: list[str] | None, cmd_uid: str
) -> None:
    cmd = {"describe": "DESCRIBE", "measure": "MEASURE", "adjust": "ADJUST"}[result.operation]
    param = {"state": {"application": {"components": {}}}} if cmd == "ADJUST" else {}
    command = parse_reply({"cmd": cmd, "cmd_uid": cmd_uid, "param": param})
    assert isinstance(command, Command)
    result_event = RESULT_EVENT[cmd]
    sent = assert_well_formed(
        request_body(result_event, result_param(result_event, command, result, requested), None)
    )
    note(f"{sent['status']} {sent['reason']}")
    assert sent["cmd_uid"] == cmd_uid
    if result.status != "ok":
        assert sent["status"] != "ok"  # a failure never turns into success


def test_a_trailing_newline_is_not_part_of_a_word() -> None:
    # re's ``$`` also matches before a final newline: every name and word check matches whole.
    from servo_actors.cli.agent_cmd import CAPABILITY_NAME
    from servo_actors.config.fields import split_optimizer_id
    from servo_actors.optimizer.plan import METRIC_NAME
    from servo_actors.protocol.statuses import reason_word

    assert is_word("timeout") and not is_word("timeout\n")
    assert reason_word("timeout\n") == "timeout"  # the newline is stripped, not kept
    assert split_optimizer_id("example.com/app") == ("example.com", "app")
    for bad in ("example.com\n/app", "example.com/app\n"):
        try:
            split_optimizer_id(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was taken as an optimizer id")
    assert CAPABILITY_NAME.fullmatch("gpu") and not CAPABILITY_NAME.fullmatch("gpu\n")
    assert METRIC_NAME.fullmatch("p99") and not METRIC_NAME.fullmatch("p99\n")
