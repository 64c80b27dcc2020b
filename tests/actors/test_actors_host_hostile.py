"""A connector that hands its host hostile objects: its part fails at once, naming the connector
and what is wrong, and the same host process goes on serving (its worker thread survives).

The connectors are ``sa_test_connectors.hostile`` (tests/config/plugins) and chaos. The deadline
is far away (operation_grace 60 s) so that a part that waits for it, instead of failing at once,
shows up as a wait of more than HANG_BOUND.
"""

from __future__ import annotations

import pytest

from servo_actors.actors.host.worker import PROGRESS_MESSAGE_LIMIT
from servo_actors.actors.linux import processes

pytestmark = pytest.mark.timeout(120)

HOSTILE = "sa_test_connectors.hostile:HostileConnector"
GRACE = 60.0
HANG_BOUND = 20.0
"""Seconds within which a part must fail: far less than the deadline, far more than it takes."""
MB = 1024 * 1024


def _hostile(**behaviours: str) -> dict:
    return {"name": "hostile", "type": HOSTILE, "config": behaviours}


def _outcome(runtime, operation: str, **kwargs):
    op = runtime.begin(operation, **kwargs)
    result = runtime.wait(op, HANG_BOUND)
    assert result is not None, f"{operation} waited for its deadline instead of failing at once"
    return result


# operation -> behaviour -> (reason, words the message must contain)
CASES = [
    (
        "measure",
        "unprintable_exception",
        "connector-error",
        ["raised UnprintableError in measure", "<unprintable"],
    ),
    (
        "measure",
        "nameless_exception",
        "connector-error",
        ["raised NamelessError in measure", "<unprintable NamelessError>"],
    ),
    ("measure", "keyboard_interrupt", "connector-error", ["raised KeyboardInterrupt in measure"]),
    ("measure", "empty_exception", "connector-error", ["raised MemoryError in measure (with no message)"]),
    ("measure", "list", "invalid-result", ["measure()", "is a list, not a mapping"]),
    (
        "measure",
        "unprintable_value",
        "invalid-result",
        ["measure().metrics.m", "Unprintable is not plain data"],
    ),
    ("measure", "unprintable_key", "invalid-result", ["key of type HashableUnprintable"]),
    ("measure", "exploding_mapping", "connector-error", ["raised RuntimeError in measure", "no items"]),
    ("measure", "recursive", "invalid-result", ["measure().metrics.m", "contains itself"]),
    ("measure", "deep", "invalid-result", ["nested deeper than"]),
    ("check", "generator_raises", "connector-error", ["raised UnprintableError in check"]),
    ("check", "endless_checks", "result-too-large", ["check result of more than", "max_result_bytes"]),
    ("measure", "endless_value", "invalid-result", ["measure().metrics.m: a count is not plain data"]),
    ("check", "check_not_a_list", "invalid-result", ["check() returned a dict, not a list of checks"]),
    ("check", "list", "invalid-result", ["check()[0]", "is a str, not a mapping"]),
    ("describe", "list", "invalid-result", ["describe()", "is a list, not a mapping"]),
    ("describe", "recursive", "invalid-result", ["contains itself"]),
    ("adjust", "unprintable_value", "invalid-result", ["adjust().metrics.m", "not plain data"]),
]


@pytest.mark.parametrize(("operation", "behaviour", "reason", "words"), CASES)
def test_a_hostile_result_fails_at_once_and_the_host_goes_on(
    start_runtime, kit, test_plugins, operation, behaviour, reason, words
) -> None:
    runtime = start_runtime(_hostile(**{operation: behaviour}), operation_grace=GRACE)
    pid = kit.pids(runtime)["hostile"]
    kwargs = {"components": {"c": {"settings": {"k": {"value": 2}}}}} if operation == "adjust" else {}
    result = _outcome(runtime, operation, **kwargs)
    part = result.parts["hostile"]
    assert (part.status, part.reason) == ("failed", reason), part
    assert part.message.startswith("connector 'hostile'"), part.message
    assert all(word in part.message for word in words), part.message
    # Same process, and its worker still answers: nothing was restarted.
    assert kit.pids(runtime)["hostile"] == pid
    if operation != "check":
        assert _outcome(runtime, "check").ok
    assert kit.pids(runtime)["hostile"] == pid


def test_a_describe_that_returns_a_list_fails_a_measure_naming_describe(
    start_runtime, kit, test_plugins
) -> None:
    runtime = start_runtime(_hostile(describe="list"), operation_grace=GRACE)
    part = _outcome(runtime, "measure").parts["hostile"]
    assert (part.status, part.reason) == ("failed", "invalid-result"), part
    assert part.message == (
        "connector 'hostile': describe() returned an invalid result, needed by measure: describe() is a"
        " list, not a mapping (expected a mapping {components: {...}, metrics: {...}})"
    )


def test_a_connector_that_closes_its_hosts_descriptors_is_reported_as_such_at_once(
    start_runtime, kit, test_plugins, capfd
) -> None:
    runtime = start_runtime(_hostile(measure="close_fds"), operation_grace=GRACE)
    pid = kit.pids(runtime)["hostile"]
    part = _outcome(runtime, "measure").parts["hostile"]
    assert (part.status, part.reason) == ("failed", "connector-crashed"), part
    assert part.message == (
        "connector 'hostile' crashed during measure (exit code 86: its host lost its channel to the"
        " supervisor, as when the connector closes file descriptors it does not own)"
    )
    kit.wait_for(lambda: kit.pids(runtime)["hostile"] not in (None, pid), timeout=HANG_BOUND)
    assert "Traceback" not in capfd.readouterr().err


def test_a_worker_thread_that_dies_fails_its_part_at_once_and_is_replaced(
    start_runtime, kit, test_plugins
) -> None:
    runtime = start_runtime(_hostile(measure="kill_worker"), operation_grace=GRACE)
    pid = kit.pids(runtime)["hostile"]
    for _ in range(2):
        part = _outcome(runtime, "measure").parts["hostile"]
        assert (part.status, part.reason) == ("failed", "host-error"), part
        assert part.message == "connector 'hostile': the host failed: its worker thread ended"
        assert _outcome(runtime, "check").ok  # a fresh worker thread, in the same process
        assert kit.pids(runtime)["hostile"] == pid


def test_a_failure_whose_fields_cannot_be_printed(start_runtime, kit, test_plugins) -> None:
    runtime = start_runtime(_hostile(measure="weird_failure"), operation_grace=GRACE)
    part = _outcome(runtime, "measure").parts["hostile"]
    assert (part.status, part.reason) == ("aborted", "failed")
    assert part.message == "connector 'hostile': <unprintable Unprintable>"


def test_an_unprintable_exception_in_startup_names_its_type(start_runtime, kit, test_plugins) -> None:
    runtime = start_runtime(_hostile(startup="unprintable_exception"), max_restarts=0)
    kit.wait_for(lambda: kit.states(runtime)["hostile"] == "failed", timeout=10)
    part = runtime.run("describe").parts["hostile"]
    assert (part.status, part.reason) == ("failed", "crash-loop")
    assert "startup raised UnprintableError: <unprintable UnprintableError>" in part.message


def test_an_exit_code_out_of_range_still_ends_the_process(start_runtime, kit, test_plugins) -> None:
    runtime = start_runtime(_hostile(measure="huge_exit_code"), operation_grace=GRACE)
    pid = kit.pids(runtime)["hostile"]
    part = _outcome(runtime, "measure").parts["hostile"]
    assert (part.status, part.reason) == ("failed", "connector-crashed")
    assert "exit code 1" in part.message, part.message
    kit.wait_for(lambda: not processes.is_running(pid), timeout=5)


def test_progress_from_many_threads_with_junk_is_bounded(start_runtime, kit, test_plugins, tmp_path) -> None:
    seen_file = tmp_path / "progress-seen"
    connector = _hostile(measure="progress_storm")
    connector["config"]["progress_seen"] = str(seen_file)
    runtime = start_runtime(connector, operation_grace=GRACE)
    pid = kit.pids(runtime)["hostile"]
    op = runtime.begin("measure")
    seen: list[tuple[float, str]] = []
    op.on_progress = lambda percent, message: seen.append((percent, message))
    while (result := runtime.wait(op, 0.05)) is None:
        seen.append((op.progress, op.message))
        if any(percent > 0 for percent, _ in seen):
            seen_file.touch()  # the storm's connector stops repeating its last valid value
        assert len(seen) < HANG_BOUND / 0.05, "measure did not finish"
    assert result.ok, result.message
    assert all(0.0 <= percent <= 100.0 for percent, _ in seen)
    assert all(len(message) <= PROGRESS_MESSAGE_LIMIT + 3 for _, message in seen)
    assert any(percent > 0 for percent, _ in seen)
    assert kit.pids(runtime)["hostile"] == pid


@pytest.mark.parametrize("operation", ["measure", "check"])
def test_a_result_over_the_limit_fails_naming_connector_size_and_limit(start_runtime, kit, operation) -> None:
    limit = MB
    runtime = start_runtime(
        kit.chaos("big", faults={operation: {"action": "huge_result", "megabytes": 2}}),
        max_result_bytes=limit,
        operation_grace=GRACE,
    )
    pid = kit.pids(runtime)["big"]
    part = _outcome(runtime, operation).parts["big"]
    assert (part.status, part.reason) == ("failed", "result-too-large"), part
    # Measured exactly (pickled) before anything else was done with it.
    assert f"connector 'big' returned a {operation} result of " in part.message, part.message
    assert int(part.message.split(" result of ")[1].split(" bytes")[0]) > 2 * MB
    assert f"limit of {limit} bytes (supervisor.max_result_bytes)" in part.message
    assert kit.pids(runtime)["big"] == pid


def test_an_oversize_result_is_refused_before_it_is_walked(start_runtime, kit, test_plugins) -> None:
    # Not plain data where the walk would look first, and over the limit: too large wins, since the
    # size is measured before any other work (a walk over millions of points took longer than the
    # operation's grace, and the part was answered timeout).
    runtime = start_runtime(
        _hostile(measure="huge_and_not_plain"), max_result_bytes=MB, operation_grace=GRACE
    )
    part = _outcome(runtime, "measure").parts["hostile"]
    assert (part.status, part.reason) == ("failed", "result-too-large"), part
    assert f"limit of {MB} bytes (supervisor.max_result_bytes)" in part.message, part.message


def test_a_result_of_points_just_over_the_default_limit_is_refused_and_the_host_goes_on(
    start_runtime, kit
) -> None:
    # 300,000 points pickle to about 5.4 MB, over the default 4 MiB.
    runtime = start_runtime(
        kit.chaos(
            "big",
            metrics={"x": {"unit": "n"}},
            faults={"measure": {"action": "many_points", "points": 300_000}},
        ),
        operation_grace=GRACE,
    )
    pid = kit.pids(runtime)["big"]
    part = _outcome(runtime, "measure", metrics=["x"]).parts["big"]
    assert (part.status, part.reason) == ("failed", "result-too-large"), part
    assert "limit of 4194304 bytes (supervisor.max_result_bytes)" in part.message, part.message
    assert kit.pids(runtime)["big"] == pid
    assert _outcome(runtime, "check").ok


def test_the_limit_is_the_pickled_size_of_what_is_sent(start_runtime, kit) -> None:
    # The data alone fits (the conversion's lower bound stays under the limit); the message as
    # pickled, with its envelope, does not: the exact measurement catches it.
    padding = MB
    limit = padding + 100
    runtime = start_runtime(
        kit.chaos("edge", faults={"measure": {"action": "huge_result", "megabytes": 1}}),
        max_result_bytes=limit,
        operation_grace=GRACE,
    )
    part = _outcome(runtime, "measure").parts["edge"]
    assert (part.status, part.reason) == ("failed", "result-too-large"), part
    size = int(part.message.split(" result of ")[1].split(" bytes")[0])
    assert padding < limit < size < padding + 2000, part.message


def test_a_result_under_the_default_limit_passes(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("big", faults={"measure": {"action": "huge_result", "megabytes": 2}}))
    result = _outcome(runtime, "measure")
    assert result.ok, result.message
    assert len(result.data["annotations"]["big.padding"]) == 2 * MB


def test_raise_unprintable_in_chaos(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("odd", faults={"check": "raise_unprintable"}), operation_grace=GRACE)
    part = _outcome(runtime, "check").parts["odd"]
    assert (part.status, part.reason) == ("failed", "connector-error")
    assert part.message == "connector 'odd' raised UnprintableError in check: <unprintable UnprintableError>"
