"""Aggregating connector outcomes into one operation result (pure)."""

from __future__ import annotations

import pytest

from servo_actors.actors.rules.results import ConnectorOutcome, aggregate, empty_data, worst_status


def test_worst_status_orders_ok_rejected_aborted_failed_cancelled() -> None:
    assert worst_status([]) == "ok"
    assert worst_status(["ok", "rejected"]) == "rejected"
    assert worst_status(["aborted", "rejected"]) == "aborted"
    assert worst_status(["failed", "aborted"]) == "failed"
    assert worst_status(["failed", "cancelled", "ok"]) == "cancelled"
    assert worst_status(["ok", "weird"]) == "failed"


def test_measure_merges_metrics_and_annotations_of_ok_parts_only() -> None:
    parts = [
        ConnectorOutcome("a", data={"metrics": {"x": {"unit": "ms"}}, "annotations": {"a.pid": "1"}}),
        ConnectorOutcome("b", "failed", "timeout", "connector 'b' timed out", {"metrics": {"y": {}}}),
        ConnectorOutcome("c", data={"metrics": {"z": {"unit": "rps"}}, "annotations": {}}),
    ]
    result = aggregate("measure", parts)
    assert result.status == "failed"
    assert result.reason == "timeout"
    assert result.message == "connector 'b' timed out"
    assert result.data == {
        "metrics": {"x": {"unit": "ms"}, "z": {"unit": "rps"}},
        "annotations": {"a.pid": "1"},
    }
    assert list(result.parts) == ["a", "b", "c"]


def test_reason_comes_from_the_first_part_with_the_worst_status_and_all_faults_are_named() -> None:
    parts = [
        ConnectorOutcome("a", "aborted", "slo-violation", "connector 'a': p99 too high"),
        ConnectorOutcome("b", "failed", "connector-crashed", "connector 'b' crashed"),
        ConnectorOutcome("c", "failed", "timeout", "connector 'c' timed out"),
    ]
    result = aggregate("adjust", parts)
    assert (result.status, result.reason) == ("failed", "connector-crashed")
    assert result.message == "connector 'a': p99 too high; connector 'b' crashed; connector 'c' timed out"


def test_check_results_are_listed_with_their_connector() -> None:
    parts = [
        ConnectorOutcome("a", data={"checks": [{"name": "up", "success": True, "message": ""}]}),
        ConnectorOutcome("b", data={"checks": [{"name": "reachable", "success": False, "message": "no"}]}),
    ]
    result = aggregate("check", parts)
    assert result.ok
    assert result.data["checks"] == [
        {"connector": "a", "name": "up", "success": True, "message": ""},
        {"connector": "b", "name": "reachable", "success": False, "message": "no"},
    ]


def test_an_extra_problem_counts_like_a_part() -> None:
    result = aggregate(
        "adjust",
        [ConnectorOutcome("a", data={"components": {"web": {}}})],
        extra_problem=("rejected", "unknown-component", "no connector owns component(s) db"),
    )
    assert (result.status, result.reason, result.message) == (
        "rejected",
        "unknown-component",
        "no connector owns component(s) db",
    )
    assert result.data == {"components": {"web": {}}}


def test_no_parts_is_an_ok_empty_result() -> None:
    result = aggregate("describe", [])
    assert result.ok and result.data == {"components": {}, "metrics": {}} and result.message is None


def test_unknown_operation_is_named() -> None:
    with pytest.raises(ValueError, match="'sleep'"):
        empty_data("sleep")
