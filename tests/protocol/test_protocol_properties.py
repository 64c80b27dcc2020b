"""Property-based: every wire message round-trips; any JSON value gives a model or a ProtocolError."""

from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servo_actors.errors import ProtocolError
from servo_actors.protocol.reading import parse_envelope, parse_param, parse_reply, to_wire
from servo_actors.protocol.wire_types import Event

names = st.text(min_size=1, max_size=12)
words = st.from_regex(r"\A[a-z][a-z0-9-]{0,10}\Z")
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
numbers = st.integers(-(10**12), 10**12) | finite
scalars = numbers | st.text(max_size=12)
# Durations go out as written when written as seconds: ints, or non-integral positive floats.
seconds = st.integers(0, 10**9) | st.floats(min_value=0.001, max_value=1e9).filter(
    lambda x: not x.is_integer()
)
json_values = st.recursive(
    st.none() | st.booleans() | numbers | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
free = st.dictionaries(st.text(max_size=8), json_values, max_size=3)


def optional(**fields: st.SearchStrategy) -> st.SearchStrategy[dict]:
    """Dicts holding any subset of ``fields``."""
    return st.fixed_dictionaries({}, optional=fields)


range_setting = st.builds(
    lambda lo, span, step, extra: {"type": "range", "min": lo, "max": lo + span, "step": step, **extra},
    st.integers(0, 100),
    st.integers(1, 100),
    st.integers(1, 10) | st.sampled_from([0.125, 0.5]),
    optional(value=numbers, unit=names, pinned=st.booleans()),
)
enum_setting = st.builds(
    lambda values, extra: {"type": "enum", "values": values, **extra},
    st.lists(scalars, min_size=1, max_size=4),
    optional(value=scalars, unit=names, pinned=st.booleans()),
)
value_setting = st.fixed_dictionaries({"value": scalars})
components = st.dictionaries(
    names,
    st.fixed_dictionaries({"settings": st.dictionaries(names, range_setting | enum_setting, max_size=3)}),
    max_size=3,
)
state_components = st.dictionaries(
    names, st.fixed_dictionaries({"settings": st.dictionaries(names, value_setting, max_size=3)}), max_size=3
)
control = optional(
    duration=seconds,
    warmup=seconds,
    delay=seconds,
    settlement=seconds,
    load=free,
    environment=free,
    userdata=free,
)
uid = st.text(min_size=1, max_size=8)

commands = st.one_of(
    st.builds(lambda u, p: {"cmd": "DESCRIBE", "cmd_uid": u, "param": p}, uid, free),
    st.builds(
        lambda u, m, c: {"cmd": "MEASURE", "cmd_uid": u, "param": {"metrics": m, "control": c}},
        uid,
        st.lists(names, max_size=4),
        control,
    ),
    st.builds(
        lambda u, s, c: {
            "cmd": "ADJUST",
            "cmd_uid": u,
            "param": {"state": {"application": {"components": s}}, "control": c},
        },
        uid,
        state_components,
        control,
    ),
    st.builds(lambda d, data: {"cmd": "SLEEP", "param": {"duration": d, "data": data}}, seconds, free),
)
statuses = st.builds(
    lambda s, extra: {"status": s, **extra},
    st.sampled_from(["ok", "invalid", "unexpected-event", "cancel"]),
    optional(message=st.text(max_size=20), reason=st.text(max_size=10)),
)
series = st.fixed_dictionaries(
    {"data": st.lists(st.tuples(numbers, numbers).map(list), max_size=4)}, optional={"id": names}
)
metric = st.one_of(
    st.fixed_dictionaries({"values": st.lists(series, max_size=3)}, optional={"unit": names}),
    st.fixed_dictionaries({"value": numbers}, optional={"unit": names}),
)
status_fields = st.fixed_dictionaries(
    {"status": st.just("ok"), "reason": words}, optional={"message": st.text(max_size=20), "cmd_uid": uid}
)
results = st.one_of(
    st.tuples(
        st.just("DESCRIPTION"),
        st.builds(
            lambda s, c, m: {
                **s,
                "descriptor": {"application": {"components": c}, "measurement": {"metrics": m}},
            },
            status_fields,
            components,
            st.dictionaries(names, optional(unit=names), max_size=3),
        ),
    ),
    st.tuples(
        st.just("MEASUREMENT"),
        st.builds(
            lambda s, m, a: {**s, "metrics": m, "annotations": a},
            status_fields,
            st.dictionaries(names, metric, max_size=3),
            free,
        ),
    ),
    st.tuples(
        st.just("ADJUSTMENT"),
        st.builds(lambda s, c: {**s, "state": {"application": {"components": c}}}, status_fields, components),
    ),
    st.tuples(
        st.sampled_from(["DESCRIPTION", "MEASUREMENT", "ADJUSTMENT"]),
        st.builds(
            lambda s, r, extra: {"status": s, "reason": r, **extra},
            st.sampled_from(["failed", "rejected", "aborted", "cancelled"]),
            words,
            optional(message=st.text(max_size=20), cmd_uid=uid),
        ),
    ),
    st.tuples(
        st.sampled_from(["MEASUREMENT", "ADJUSTMENT"]),
        st.builds(
            lambda p, r, extra: {"progress": p, "runtime": r, **extra},
            st.integers(0, 100) | st.floats(0, 100),
            st.integers(0, 10**6) | st.floats(0, 1e6),
            optional(cmd_uid=uid, message=st.text(max_size=20)),
        ),
    ),
)


def canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commands | statuses)
def test_replies_round_trip(wire: dict) -> None:
    assert canonical(to_wire(parse_reply(wire))) == canonical(wire)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(results)
def test_events_round_trip(event_and_param: tuple[str, dict]) -> None:
    event, wire = event_and_param
    assert canonical(to_wire(parse_param(event, wire))) == canonical(wire)


def _only_protocol_errors(parse, value: object) -> None:  # type: ignore[no-untyped-def]
    try:
        parsed = parse(value)
    except ProtocolError as exc:
        assert str(exc)  # a message, naming what it can
        return
    if parsed is not None:
        json.dumps(to_wire(parsed))  # whatever is accepted can be written back


anything = json_values | st.floats()  # plus NaN and infinities, which Python's json accepts
shaped = st.fixed_dictionaries(
    {"cmd": st.sampled_from(["DESCRIBE", "MEASURE", "ADJUST", "SLEEP"]) | json_values},
    optional={
        "cmd_uid": json_values,
        "param": json_values
        | st.fixed_dictionaries(
            {},
            optional={
                "metrics": json_values,
                "control": json_values
                | st.dictionaries(
                    st.sampled_from(["duration", "warmup", "settlement", "userdata"]),
                    json_values | st.floats(),
                ),
                "state": json_values,
                "duration": json_values | st.floats(),
                "data": json_values,
            },
        ),
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(anything | shaped | st.dictionaries(st.sampled_from(["status", "message", "reason"]), json_values))
def test_parse_reply_raises_nothing_but_protocol_error(value: object) -> None:
    _only_protocol_errors(parse_reply, value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([event.value for event in Event]) | st.text(max_size=8), anything)
def test_parse_param_raises_nothing_but_protocol_error(event: str, value: object) -> None:
    _only_protocol_errors(lambda v: parse_param(event, v), value)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(anything | st.dictionaries(st.sampled_from(["event", "param", "servo_uid", "x"]), json_values))
def test_parse_envelope_raises_nothing_but_protocol_error(value: object) -> None:
    _only_protocol_errors(parse_envelope, value)


def test_nan_and_huge_durations_are_protocol_errors() -> None:
    for duration in (math.nan, math.inf, 10**400, -1, "1x"):
        try:
            parse_reply({"cmd": "SLEEP", "param": {"duration": duration}})
        except ProtocolError as exc:
            assert exc.field == "param.duration"
        else:
            raise AssertionError(f"{duration!r} was accepted")
