"""The adjust arguments as pure functions: parsing, locating the setting, converting the value.

These run in-process (no connectors): they pin down the rules the subprocess tests exercise
end to end, including the corners that are slow to reach through a whole run.
"""

from __future__ import annotations

import pytest

from servo_actors.cli.assignments import (
    convert_value,
    nearest_on_grid,
    parse_assignments,
    resolve_assignments,
)
from servo_actors.connectors.synthetic import SyntheticModel
from servo_actors.errors import UsageError

WEB = SyntheticModel().components()["web"]["settings"]


def test_parse_keeps_order_and_strips_spaces() -> None:
    assert parse_assignments(["web.cpu = 1.5", "db.main.mode=b"]) == [
        ("web.cpu", "1.5"),
        ("db.main.mode", "b"),
    ]


def test_a_value_may_hold_equals_signs() -> None:
    assert parse_assignments(["app.flags=a=b"]) == [("app.flags", "a=b")]


@pytest.mark.parametrize("argument", ["web.cpu", "cpu=1", ".cpu=1", "web.=1", "=1"])
def test_malformed_arguments_are_named(argument: str) -> None:
    with pytest.raises(UsageError, match="is not COMPONENT.SETTING=VALUE"):
        parse_assignments([argument])


@pytest.mark.parametrize(
    ("setting", "raw", "expected"),
    [
        ("cpu", "2.5", 2.5),
        ("cpu", "0.25", 0.25),
        ("cpu", "4", 4.0),
        ("cpu", "0.375", 0.375),
        ("replicas", "3", 3),
        ("replicas", "3.0", 3),
        ("replicas", "1e1", 10),
        ("gc", "parallel", "parallel"),
    ],
)
def test_values_convert_to_the_settings_kind(setting: str, raw: str, expected: object) -> None:
    value = convert_value(f"web.{setting}", WEB[setting], raw)
    assert value == expected and type(value) is type(expected)


def test_float_error_on_the_grid_is_accepted() -> None:
    spec = {"type": "range", "min": 0.0, "max": 1.0, "step": 0.1}
    assert convert_value("x.y", spec, str(0.1 + 0.2)) == pytest.approx(0.3)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("4.125", "outside its range 0.25..4"),
        ("-1", "outside its range"),
        ("inf", "not a finite number"),
        ("1.0625", "not on the step 0.125 from 0.25"),
        ("one", "'one' is not a number"),
    ],
)
def test_bad_range_values_are_named(raw: str, message: str) -> None:
    with pytest.raises(UsageError, match=f"^web.cpu(=|={raw!r}).*{message}"):
        convert_value("web.cpu", WEB["cpu"], raw)


@pytest.mark.parametrize(
    ("raw", "nearest"),
    [
        ("1.3", "1.25 or 1.375"),  # the example
        ("0.3", "0.25 or 0.375"),
        ("3.95", "3.875 or 4"),
        ("1.0625", "1 or 1.125"),
    ],
)
def test_a_value_off_the_step_names_the_nearest_valid_values(raw: str, nearest: str) -> None:
    with pytest.raises(UsageError) as raised:
        convert_value("web.cpu", WEB["cpu"], raw)
    assert str(raised.value) == f"web.cpu={raw} is not on the step 0.125 from 0.25 (nearest: {nearest})"


def test_the_nearest_values_stay_in_the_range_and_keep_integers() -> None:
    assert nearest_on_grid(9.5, 1, 10, 2) == [9]  # 11 is past the end of the range
    assert nearest_on_grid(2.5, 1, 10, 1) == [2, 3]
    assert all(type(v) is int for v in nearest_on_grid(2.5, 1, 10, 1))
    assert nearest_on_grid(0.35, 0.0, 1.0, 0.1) == [0.3, 0.4]  # no float error in what is shown


def test_enum_values_match_as_declared_even_when_not_strings() -> None:
    spec = {"type": "enum", "values": [1, 2, "auto"]}
    assert convert_value("x.y", spec, "2") == 2
    with pytest.raises(UsageError, match=r"x.y='3' is not one of its values: 1, 2, auto"):
        convert_value("x.y", spec, "3")


def test_untyped_settings_take_numbers_or_text() -> None:
    assert convert_value("x.y", {}, "7") == 7
    assert convert_value("x.y", {}, "7.5") == 7.5
    assert convert_value("x.y", {}, "fast") == "fast"


def test_components_with_dots_in_their_names_are_found() -> None:
    components = {
        "db.main": {"settings": {"mode": {"type": "enum", "values": ["a", "b"]}}},
        "web": {"settings": WEB},
    }
    request = resolve_assignments([("db.main.mode", "b"), ("web.replicas", "4")], components)
    assert request == {
        "db.main": {"settings": {"mode": {"value": "b"}}},
        "web": {"settings": {"replicas": {"value": 4}}},
    }


def test_unknown_names_list_what_is_known() -> None:
    components = {"web": {"settings": WEB}}
    with pytest.raises(UsageError, match=r"unknown component 'db' in db.mode \(known: web\)"):
        resolve_assignments([("db.mode", "a")], components)
    with pytest.raises(
        UsageError, match=r"unknown setting 'disk' in web.disk \(settings of web: cpu, memory"
    ):
        resolve_assignments([("web.disk", "1")], components)
