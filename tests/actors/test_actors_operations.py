"""Operations through the real runtime: fan-out, aggregation, routing, progress, stale answers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from servo_actors.actors import ServoRuntime
from servo_actors.actors.rules import messages as m
from servo_actors.actors.rules.results import ConnectorOutcome, aggregate
from servo_actors.connectors.base import Control
from servo_actors.errors import ConfigError, SupervisorError

REPLICAS = {"type": "range", "min": 1, "max": 4, "step": 1, "value": 2}
pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def pair(start_runtime, kit):
    """Two well-behaved connectors: ``web`` owns a component and a metric, ``load`` a metric."""
    return start_runtime(
        kit.chaos(
            "web",
            components={"web": {"settings": {"replicas": dict(REPLICAS)}}},
            metrics={"latency": {"unit": "ms"}},
            values={"latency": 12.5},
        ),
        kit.chaos("load", metrics={"throughput": {"unit": "rps"}}, values={"throughput": 99}),
    )


def test_describe_aggregates_every_connector(pair: ServoRuntime) -> None:
    result = pair.run("describe")
    assert result.ok, result.message
    assert result.data["components"] == {"web": {"settings": {"replicas": REPLICAS}}}
    assert result.data["metrics"] == {"latency": {"unit": "ms"}, "throughput": {"unit": "rps"}}
    assert set(result.parts) == {"web", "load"}


def test_measure_runs_every_connector_with_only_its_requested_metrics(pair: ServoRuntime) -> None:
    result = pair.run("measure", metrics=["throughput"], control=Control(duration=0.1))
    assert result.ok, result.message
    assert list(result.data["metrics"]) == ["throughput"]
    assert result.data["metrics"]["throughput"]["values"][0]["data"][0][1] == 99
    # Both ran (a load generator must run during every measurement), each annotated its PID.
    assert {"web.pid", "load.pid"} <= set(result.data["annotations"])
    assert result.parts["web"].data["metrics"] == {}


def test_measure_without_a_metric_list_measures_everything_described(pair: ServoRuntime) -> None:
    result = pair.run("measure")
    assert set(result.data["metrics"]) == {"latency", "throughput"}


def test_adjust_goes_to_the_owner_only_and_returns_its_new_state(pair: ServoRuntime) -> None:
    before = pair.run("measure").data["annotations"]["load.operations"]
    result = pair.run("adjust", components={"web": {"settings": {"replicas": {"value": 3}}}})
    assert result.ok, result.message
    assert result.data["components"]["web"]["settings"]["replicas"]["value"] == 3
    assert set(result.parts) == {"web"}
    # ``load`` owns nothing requested: its adjust() was never called.
    assert pair.run("measure").data["annotations"]["load.operations"] == str(int(before) + 1)


def test_adjust_of_a_component_nobody_owns_is_rejected_by_name(pair: ServoRuntime) -> None:
    result = pair.run("adjust", components={"db": {"settings": {"cpu": {"value": 1}}}})
    assert (result.status, result.reason) == ("rejected", "unknown-component")
    assert "db" in result.message


def test_check_lists_every_connectors_checks(pair: ServoRuntime) -> None:
    result = pair.run("check")
    assert result.ok
    assert [(c["connector"], c["success"]) for c in result.data["checks"]] == [("web", True), ("load", True)]


def test_progress_is_forwarded_while_the_connector_blocks(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("stuck", faults={"measure": "sleep"}), operation_grace=30)
    seen: list[tuple[float, str]] = []
    op = runtime.begin("measure")
    # chaos reports 5% and then sleeps (hangs) inside measure: the 5% must arrive anyway.
    kit.wait_for(lambda: runtime.wait(op, 0.05) is None and op.progress >= 5, timeout=10)
    seen.append((op.progress, op.message))
    assert seen == [(5.0, "measure started")] and op.connector == "stuck"
    runtime.cancel()
    assert op.result is not None and op.result.status == "cancelled"


def test_run_calls_on_progress_with_the_highest_progress(pair: ServoRuntime) -> None:
    reported: list[float] = []
    result = pair.run(
        "measure", control=Control(duration=0.4), on_progress=lambda pct, msg: reported.append(pct)
    )
    assert result.ok
    assert reported and reported == sorted(reported) and reported[-1] <= 100


def test_connector_failure_gives_its_own_status_and_reason(start_runtime, kit) -> None:
    runtime = start_runtime(
        kit.chaos(
            "slo",
            faults={
                "measure": {
                    "action": "failure",
                    "status": "aborted",
                    "reason": "slo-violation",
                    "message": "p99 above 250 ms",
                }
            },
        ),
        kit.chaos("fine"),
    )
    result = runtime.run("measure")
    assert (result.status, result.reason) == ("aborted", "slo-violation")
    assert result.message == "connector 'slo': p99 above 250 ms"
    assert result.parts["fine"].ok


def test_an_exception_names_connector_type_and_message_and_the_servo_goes_on(start_runtime, kit) -> None:
    runtime = start_runtime(
        kit.chaos("buggy", faults={"check": {"action": "raise", "exception": "KeyError", "message": "nope"}})
    )
    pid = kit.pids(runtime)["buggy"]
    result = runtime.run("check")
    assert (result.status, result.reason) == ("failed", "connector-error")
    assert result.message == "connector 'buggy' raised KeyError in check: 'nope'"
    # An exception is not a crash: same process, and it keeps answering.
    assert kit.pids(runtime)["buggy"] == pid
    assert runtime.run("describe").ok


def test_a_second_operation_while_one_runs_is_rejected(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("slow", faults={"measure": {"action": "sleep", "seconds": 0.5}}))
    first = runtime.begin("measure")
    second = runtime.begin("describe")
    result = runtime.wait(second, 10)
    assert (result.status, result.reason) == ("rejected", "busy")
    # The first op's answer is no longer awaited: dropped, not mistaken for another's; once it
    # is done the supervisor takes new work again.
    assert first.result is None
    assert kit.wait_for(lambda: runtime.run("describe").ok, timeout=10)
    assert first.result is None


def test_late_answers_of_a_finished_operation_are_dropped(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("quick"))
    first = runtime.begin("measure")
    assert runtime.wait(first, 5).ok
    second = runtime.begin("check")
    # As they would come out of listen(): progress and a duplicate result of the finished op.
    runtime._receive(m.Progress(first.request_id, 88.0, "late", "quick"))
    runtime._receive(m.Done(first.request_id, aggregate("measure", [])))
    result = runtime.wait(second, 5)
    assert result.operation == "check" and result.ok
    assert second.progress == 0.0


def test_a_reply_from_a_replaced_generation_is_dropped(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("stuck", faults={"measure": "sleep"}), operation_grace=30)
    old_generation = runtime.status().children[0].generation
    runtime.cancel()
    op = runtime.begin("measure")
    forged = ConnectorOutcome("stuck", data={"metrics": {"forged": {}}, "annotations": {}})
    # A real message through the real system, as a host of the old generation would send it.
    runtime._link.system.tell(
        runtime._link.supervisor, m.HostReply(op.request_id, "stuck", old_generation, forged)
    )
    assert runtime.wait(op, 0.5) is None
    runtime.cancel()
    assert op.result.status == "cancelled"


def test_bad_connector_config_is_a_config_error_naming_the_connector(kit) -> None:
    with pytest.raises(ConfigError, match=r"connectors\[0\] \(bad\)\.config: faults\.measure\.action"):
        ServoRuntime(kit.servo_config(kit.chaos("bad", faults={"measure": "explode"})))
    with pytest.raises(ConfigError, match=r"connectors\[0\] \(ghost\)\.type"):
        ServoRuntime(kit.servo_config({"name": "ghost", "type": "no_such_type"}))


def test_operations_need_a_started_runtime(kit) -> None:
    runtime = ServoRuntime(kit.servo_config(kit.chaos("a")))
    with pytest.raises(SupervisorError, match="not running"):
        runtime.begin("describe")
    with pytest.raises(ValueError, match="'sleep'"):
        runtime.begin("sleep")


def test_thespian_logs_to_the_run_directory(start_runtime, kit, tmp_path: Path) -> None:
    runtime = start_runtime(kit.chaos("a"))
    assert runtime.run_dir == tmp_path / "run0"
    assert os.environ["THESPLOG_FILE"] == str(runtime.run_dir / "thespian.log")
    assert (runtime.run_dir / "connectors.log").exists()


def test_a_begin_that_arrives_after_its_cancel_is_answered_cancelled(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("a"))
    # Thespian does not promise message order: the Cancel may overtake the Begin it cancels.
    runtime._link.tell(m.Cancel("cancel-early", "measure-late"))
    assert runtime._link.await_answer("cancel-early", 10) is not None
    runtime._link.tell(m.Begin("measure-late", "measure"))
    reply = None
    for _ in range(100):
        message = runtime._link.system.listen(0.1)
        if isinstance(message, m.Done) and message.request_id == "measure-late":
            reply = message
            break
    assert reply is not None and (reply.result.status, reply.result.reason) == ("cancelled", "cancelled")
    assert runtime.run("check").ok
