"""Large results are walked once (issue 20, item 4): the merged checks mean what the separate ones
meant, and what the builders made is sent as it is.

``json_problem`` replaced, on the way out, a walk for nesting and another for NaN per builder and
per request body (about twenty walks over a result's points in all); ``PlainConverter`` builds the
path of an item only for an error message. These tests hold the new code to the old meanings, with
hypothesis over random JSON-like trees.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servo_actors.actors.transport.plain_data import NotPlainData, ResultTooLarge, refuse_oversize, to_plain
from servo_actors.errors import ProtocolError
from servo_actors.protocol.json_bounds import (
    MAX_NESTING,
    NON_FINITE,
    TOO_DEEP,
    first_non_finite,
    json_problem,
    nested_deeper_than,
)
from servo_actors.protocol.writing import WireParam, measurement_result, request_body

LEAVES = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3)
TREES = st.recursive(
    LEAVES,
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=2), children, max_size=3)
    ),
    max_leaves=40,
)


@settings(max_examples=500, deadline=None)
@given(TREES, st.integers(1, 6))
def test_one_walk_finds_what_the_two_walks_found(value: Any, limit: int) -> None:
    if nested_deeper_than(value, limit):
        expected = TOO_DEEP
    elif first_non_finite(value) is not None:
        expected = NON_FINITE
    else:
        expected = None
    assert json_problem(value, limit) == expected


def test_a_point_at_the_nesting_limit_and_one_past_it() -> None:
    def nested(levels: int) -> Any:
        value: Any = [1.0, 2.0]
        for _ in range(levels - 1):
            value = [value]
        return value

    assert json_problem(nested(MAX_NESTING)) is None
    assert json_problem(nested(MAX_NESTING + 1)) == TOO_DEEP
    assert json_problem([[1, math.nan]]) == NON_FINITE
    assert json_problem([[1, math.inf]], 1) == TOO_DEEP  # deep wins, as the two walks had it


def points(count: int, nan_every: int = 0) -> dict[str, Any]:
    data = [[1_700_000_000 + n, float(n % 7)] for n in range(count)]
    for point in data[nan_every - 1 :: nan_every] if nan_every else ():
        point[1] = math.nan
    return {"x": {"unit": "n", "values": [{"id": "s", "data": data}]}}


def test_a_measurement_goes_out_as_built_and_non_finite_points_are_still_dropped_and_said() -> None:
    clean = measurement_result("c", metrics=points(1000))
    assert isinstance(clean, WireParam) and "message" not in clean
    body = json.loads(request_body("MEASUREMENT", clean, "servo-1"))
    assert body == {"event": "MEASUREMENT", "param": dict(clean), "servo_uid": "servo-1"}
    dropped = measurement_result("c", metrics=points(1000, nan_every=10))
    assert len(dropped["metrics"]["x"]["values"][0]["data"]) == 900
    assert dropped["message"] == "dropped 100 values that are not a finite number (NaN or infinity): x 100"
    assert dropped["annotations"] == {"servo_actors.dropped_values": "x 100"}


def test_a_param_not_made_by_the_builders_is_still_checked_once_sent() -> None:
    with pytest.raises(ProtocolError) as caught:
        request_body("MEASUREMENT", {"status": "ok", "a": [1, {"b": math.inf}]}, None)
    assert caught.value.field == "param.a.1.b"
    deep: Any = 1
    for _ in range(MAX_NESTING):
        deep = [deep]
    with pytest.raises(ProtocolError, match="nested deeper than"):
        request_body("MEASUREMENT", {"status": "ok", "deep": deep}, None)


def test_a_point_that_is_not_a_pair_of_numbers_is_named_where_it_is() -> None:
    for wrong in ([[1, True]], [[1, "2"]], [[1]]):
        metrics = {"x": {"values": [{"data": [[0, 1.0], *wrong]}]}}
        with pytest.raises(ProtocolError) as caught:
            measurement_result("c", metrics=metrics)
        assert caught.value.field is not None and caught.value.field.startswith(
            "param.metrics.x.values.0.data.1"
        )


def test_the_converter_names_the_path_of_what_is_wrong_deep_in_lists() -> None:
    with pytest.raises(NotPlainData, match=r"^measure\(\)\.a\[1\]\.b\[1\]: a object is not plain data$"):
        to_plain({"a": [1, {"b": [2, object()]}]}, where="measure()")
    with pytest.raises(NotPlainData, match=r"^r\.m\[0\]\[0\]: contains itself"):
        loop: list[Any] = []
        loop.append(loop)
        to_plain({"m": [loop]}, where="r")
    assert to_plain({"a": (1, [2.5, "x"], {"k": None})}, where="r") == {"a": [1, [2.5, "x"], {"k": None}]}


def test_an_oversize_value_is_refused_by_its_pickled_size_before_any_walk() -> None:
    with pytest.raises(ResultTooLarge) as caught:
        refuse_oversize(points(10_000), 100_000)
    assert caught.value.exact and caught.value.at_least > 100_000
    refuse_oversize(points(10), 100_000)  # under the limit: nothing to say
    refuse_oversize((n for n in range(3)), 1)  # cannot be pickled: the conversion judges it


FINITE_TREES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=2), children, max_size=3)
    ),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(FINITE_TREES)
def test_the_converter_gives_plain_data_back_as_json_has_it(value: Any) -> None:
    assert to_plain(value, where="r", byte_limit=1 << 20) == json.loads(json.dumps(value))
