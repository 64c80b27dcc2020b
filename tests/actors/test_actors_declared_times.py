"""Connector-declared operation times: a connector that says its operation takes longer than its
control is not killed as ``timeout`` within that time (real processes), and a declaration that is
broken counts as none."""

from __future__ import annotations

import logging

import pytest

from servo_actors.actors.rules import messages as m
from servo_actors.actors.runtime.declared_times import DECLARED_MAX, DeclaredTimes
from servo_actors.connectors.base import Control

pytestmark = pytest.mark.timeout(60)

GRACE = 0.5
ADJUST_SECONDS = 1.5
KNOB = {"knob": {"settings": {}}}


def _slow(declared: float) -> dict:
    config = {"adjust_seconds": ADJUST_SECONDS, "declared": declared}
    return {"name": "slow", "type": "declaring_connector:SlowAdjust", "config": config}


def test_a_connector_declaring_a_longer_time_is_not_killed(start_runtime, kit) -> None:
    runtime = start_runtime(_slow(declared=ADJUST_SECONDS + 2), kit.chaos("other"), operation_grace=GRACE)
    before = kit.pids(runtime)
    result = runtime.run("adjust", components=KNOB)
    assert result.ok, result
    assert kit.pids(runtime) == before  # nobody killed


def test_without_the_declaration_the_same_adjust_is_killed_at_the_deadline(start_runtime, kit) -> None:
    runtime = start_runtime(_slow(declared=0), operation_grace=GRACE)
    before = kit.pids(runtime)["slow"]
    part = runtime.run("adjust", components=KNOB).parts["slow"]
    assert (part.status, part.reason) == ("failed", "timeout")
    kit.wait_for(lambda: kit.pids(runtime)["slow"] not in (None, before), timeout=10)


def _spec(name: str, cls: str, **config) -> m.ChildSpec:
    return m.ChildSpec(name, cls, config=config, import_path=f"declaring_connector:{cls}")


def test_declarations_by_connector_and_operation() -> None:
    times = DeclaredTimes([_spec("slow", "SlowAdjust", declared=90), _spec("quick", "SlowAdjust")])
    assert times.for_operation("adjust", Control()) == {"slow": 90.0}
    assert times.for_operation("measure", Control()) == {}
    assert DeclaredTimes([_spec("huge", "SlowAdjust", declared=1e12)]).for_operation("adjust", Control()) == {
        "huge": DECLARED_MAX
    }


def test_a_broken_declaration_counts_as_none_with_a_warning(caplog) -> None:
    times = DeclaredTimes([_spec("raises", "RaisingDeclaration"), _spec("nan", "NotANumber")])
    with caplog.at_level(logging.WARNING):
        assert times.for_operation("adjust", Control()) == {}
    text = caplog.text
    assert "connector 'raises': operation_seconds raised RuntimeError: no idea" in text
    assert "connector 'nan': operation_seconds returned nan" in text
