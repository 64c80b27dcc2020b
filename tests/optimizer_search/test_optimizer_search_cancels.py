"""The recommendation under cancels: a cancelled measurement is no reading, and the answer after
any pattern of Aborts is the best one the completed readings support.

The standing of every point is computed here again, independently of confirm.py, from the raw
steps: its completed readings, whether each of them holds every constraint, and the margin test.
"""

from __future__ import annotations

import copy
import math
import statistics
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servo_actors.optimizer.confirm import recommend
from servo_actors.optimizer.plan import ConfirmSpec, parse_plan
from servo_actors.optimizer.search import SearchDriver
from servo_actors.optimizer.steps import StepRecord

from .conftest import COMPONENTS, ServoSimulator

BOUND = 250.0
OBJECTIVE = parse_plan(
    {
        "app": "example.com/web",
        "objective": {"minimize": "cost", "constraints": [f"p99_latency <= {BOUND:g}"]},
    }
).objective
SPEC = ConfirmSpec(repeats=2, sigmas=2.0, candidates=3, cancels=10)
NEEDED = 1 + SPEC.repeats
# Four settings; the baseline (step 0) is cpu 1.0. Cost grows with cpu.
CPUS = (0.5, 0.75, 1.0, 1.5)
BASELINE_CPU = 1.0
COMMANDS_BOUND = 400
"""A run ends with SLEEP within this many commands, whatever is cancelled."""


# The application starts generously sized: its baseline holds p99 <= 250 (about 120 ms) with room,
# and cheaper settings hold too (cpu 2.5, memory 4: about 200 ms).
ROOMY = copy.deepcopy(COMPONENTS)
for _name, _value in (("cpu", 3.0), ("memory", 6.0), ("replicas", 3)):
    ROOMY["web"]["settings"][_name]["value"] = _value


def cost_of(cpu: float) -> float:
    return cpu * 10.0


@st.composite
def histories(draw: st.DrawFn) -> list[StepRecord]:
    """A baseline, then steps at random settings, some confirming earlier ones, any of them cancelled."""
    steps = []
    baseline_p99 = draw(st.floats(150.0, 300.0))
    steps.append(_step(0, BASELINE_CPU, "ok", baseline_p99, None))
    for n in range(1, draw(st.integers(1, 14)) + 1):
        cpu = draw(st.sampled_from(CPUS))
        status = draw(st.sampled_from(["ok", "ok", "ok", "cancelled", "failed"]))
        p99 = draw(st.floats(150.0, 300.0))
        confirms = draw(st.none() | st.just(-1))
        steps.append(_step(n, cpu, status, p99, confirms))
    # A confirmation step names the first step at its settings.
    first: dict[float, int] = {}
    for record in steps:
        cpu = record.settings["web"]["cpu"]
        first.setdefault(cpu, record.n)
        if record.confirms == -1:
            record.confirms = first[cpu] if first[cpu] != record.n else None
    return steps


def _step(n: int, cpu: float, status: str, p99: float, confirms: int | None) -> StepRecord:
    metrics = {"p99_latency": p99, "cost": cost_of(cpu)} if status == "ok" else {}
    return StepRecord(n=n, settings={"web": {"cpu": cpu}}, status=status, metrics=metrics, confirms=confirms)


def standing(steps: list[StepRecord]) -> dict[float, dict[str, Any]]:
    """Per cpu: completed readings, whether all hold, whether excluded (failed confirmation or margin)."""
    found: dict[float, dict[str, Any]] = {}
    for record in steps:
        cpu = record.settings["web"]["cpu"]
        entry = found.setdefault(cpu, {"p99": [], "failed_confirmation": False})
        if record.status == "ok":
            entry["p99"].append(record.metrics["p99_latency"])
        elif record.status == "failed" and record.confirms is not None:
            entry["failed_confirmation"] = True
    for entry in found.values():
        values = entry["p99"]
        entry["holds"] = bool(values) and all(v <= BOUND for v in values)
        margin_missed = False
        if len(values) >= NEEDED:
            error = statistics.stdev(values) / math.sqrt(len(values))
            margin_missed = statistics.fmean(values) + SPEC.sigmas * error > BOUND
        entry["confirmed"] = (
            entry["holds"]
            and len(values) >= NEEDED
            and not margin_missed
            and not entry["failed_confirmation"]
        )
        entry["candidate"] = entry["holds"] and not entry["failed_confirmation"] and not margin_missed
    # The baseline is what runs already: a candidate whenever its readings all hold.
    found[BASELINE_CPU]["candidate"] = found[BASELINE_CPU]["holds"]
    return found


@settings(max_examples=300, deadline=None)
@given(histories())
def test_the_recommendation_is_never_outdone_by_a_cheaper_point_with_more_holding_readings(steps) -> None:
    chosen = recommend(OBJECTIVE, steps, SPEC)
    table = standing(steps)
    base = table[BASELINE_CPU]
    baseline_holds = base["candidate"]
    candidates = {
        cpu: entry
        for cpu, entry in table.items()
        if entry["candidate"] and (not baseline_holds or cost_of(cpu) <= cost_of(BASELINE_CPU))
    }
    if not candidates:
        assert chosen is None
        return
    assert chosen is not None
    cpu = chosen.point.settings["web"]["cpu"]
    assert cpu in candidates, (cpu, table)
    mine = candidates[cpu]
    # Every reading of the recommendation holds; a cancelled step is none of them.
    assert all(r.status == "ok" for r in chosen.point.readings)
    assert len(chosen.point.readings) == len(mine["p99"])
    assert chosen.confirmed == mine["confirmed"]
    if baseline_holds:
        assert cost_of(cpu) <= cost_of(BASELINE_CPU)
    for other_cpu, other in candidates.items():
        if cost_of(other_cpu) < cost_of(cpu):
            assert min(len(other["p99"]), NEEDED) <= min(len(mine["p99"]), NEEDED), (other_cpu, cpu, table)
            assert not other["confirmed"] or mine["confirmed"]
    if any(entry["confirmed"] for entry in candidates.values()):
        assert chosen.confirmed


def answered_with_cancels(cancel_at: set[int], seed: int) -> tuple[SearchDriver, list[dict[str, Any]]]:
    """A driver run to SLEEP against a noisy application, the commands numbered in ``cancel_at`` cancelled."""
    simulator = ServoSimulator(components=ROOMY, seed=seed)
    driver = SearchDriver.from_plan(
        {
            "app": "example.com/web",
            "steps": 6,
            "seed": seed,
            "objective": {"minimize": "cost", "constraints": ["p99_latency <= 250"]},
            "confirm": {"repeats": 2, "candidates": 3, "cancels": 6},
        }
    )
    sent = []
    for index in range(COMMANDS_BOUND):
        command = simulator.stamp(driver.next_command())
        sent.append(command)
        if command["cmd"] == "SLEEP":
            return driver, sent
        if index in cancel_at and command["cmd"] in ("ADJUST", "MEASURE"):
            driver.on_cancelled(command, "test-abort")
            event = {"ADJUST": "ADJUSTMENT", "MEASURE": "MEASUREMENT"}[command["cmd"]]
            driver.on_result(command, event, {"status": "cancelled", "reason": "test-abort"})
            continue
        driver.on_result(command, *simulator.answer(command))
    raise AssertionError(f"no SLEEP after {COMMANDS_BOUND} commands")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sets(st.integers(2, 60), max_size=25), st.integers(0, 3))
def test_under_any_cancel_pattern_the_run_ends_and_recommends_no_worse_than_a_holding_baseline(
    cancel_at, seed
) -> None:
    driver, _ = answered_with_cancels(cancel_at, seed)
    assert driver.phase == "done"
    state = driver.state()
    baseline = next(s for s in state["steps"] if s["n"] == 0)
    best = state["best"]
    cancelled = state["confirmation"]["cancelled"]
    at_baseline = [s for s in state["steps"] if s["settings"] == baseline["settings"] and s["status"] == "ok"]
    if baseline["status"] == "ok" and all(s["feasible"] for s in at_baseline):
        # The baseline holds: the recommendation costs no more than its readings' mean.
        assert best is not None
        assert best["objective"] <= statistics.fmean(s["objective"] for s in at_baseline) + 1e-9
    if best is not None:
        readings = [s for s in state["steps"] if s["n"] in best["steps"]]
        assert readings and all(s["status"] == "ok" and s["feasible"] for s in readings)
        if not best["confirmed"] and cancelled < 6:
            # Cancels did not use the confirmation up: it ended for a reason the note names.
            assert "cancel" not in best["note"], best["note"]
        if not best["confirmed"] and cancelled >= 6:
            assert "confirmation stopped after" in best["note"], best["note"]


def test_a_cancelled_confirmation_is_measured_again_until_the_point_is_confirmed() -> None:
    driver, sent = answered_with_cancels(set(), 1)
    plain = driver.state()["best"]
    assert plain["confirmed"]
    # DESCRIBE, the baseline's MEASURE, six search steps (ADJUST + MEASURE): then confirmation.
    first_confirmation = 2 + 2 * 6
    assert sent[first_confirmation]["cmd"] == "ADJUST"
    # Its first ADJUST is cancelled, and so is the ADJUST of the next confirmation step.
    driver, _ = answered_with_cancels({first_confirmation, first_confirmation + 3}, 1)
    state = driver.state()
    best = state["best"]
    assert state["confirmation"]["cancelled"] == 2
    assert best["confirmed"] and best["step"] == plain["step"] and best["readings"] == plain["readings"]
    assert "2 confirmation steps cancelled and measured again" in best["note"], best["note"]


def test_without_cancels_the_search_finds_and_confirms_settings_cheaper_than_the_baseline() -> None:
    # The properties above are only worth something if the search can beat a holding baseline.
    driver, _ = answered_with_cancels(set(), 1)
    state = driver.state()
    baseline = next(s for s in state["steps"] if s["n"] == 0)
    assert baseline["feasible"]
    assert state["best"]["confirmed"] and state["best"]["objective"] < baseline["objective"]
