"""The search strategy's rules: the grid, margins, the trust radius, and what it proposes when.

Each rule gets a small history built by hand; the claim that the whole search beats random
sampling is tested on the synthetic application (test_optimizer_search_strategy_synthetic.py).
"""

from __future__ import annotations

import math
import random
import statistics
import time
from typing import Any

import pytest

from servo_actors.optimizer.space import Parameter, SearchSpace, parameter_from_description
from servo_actors.optimizer.strategy import propose
from servo_actors.optimizer.trials import StrategyOptions, Trial, constraint_margin, replay

from .conftest import COMPONENTS

# Generous bounds that only a hang would break (a proposal takes ~10-40 ms on a quiet machine).
PROPOSAL_SECONDS = 1.0
LONG_HISTORY_SECONDS = 5.0


def _space(**changes: dict[str, Any]) -> SearchSpace:
    settings = {
        name: {**spec, **changes.get(name, {})} for name, spec in COMPONENTS["web"]["settings"].items()
    }
    return SearchSpace.from_components({"web": {"settings": settings}})


def _on_grid(space: SearchSpace, settings: dict[str, dict[str, Any]]) -> bool:
    return all(
        p.snap(settings[p.component][p.name]) == settings[p.component][p.name] for p in space.parameters
    )


def _web(**values: Any) -> dict[str, dict[str, Any]]:
    return {"web": values}


def _within(p: Parameter, value: float, center: float, radius: float) -> bool:
    """Whether a range value is within ``radius`` (unit coordinates) of ``center``, give or take
    the grid step it was rounded to."""
    low, high = p.from_unit(p.unit(center) - radius), p.from_unit(p.unit(center) + radius)
    return low - p.step - 1e-9 <= value <= high + p.step + 1e-9


# --- the grid and unit coordinates ----------------------------------------------------------------


def test_ranges_snap_to_their_step_within_bounds():
    cpu = parameter_from_description("web", "cpu", COMPONENTS["web"]["settings"]["cpu"])
    assert cpu.grid_points == 31
    assert cpu.snap(1.06) == 1.0 and cpu.snap(1.07) == 1.125
    assert cpu.snap(-3) == 0.25 and cpu.snap(99) == 4.0
    assert cpu.snap(0.1 + 0.2) == 0.25
    assert cpu.snap(0.3 + 0.075) == 0.375  # float error does not leak into values
    replicas = parameter_from_description("web", "replicas", COMPONENTS["web"]["settings"]["replicas"])
    assert replicas.snap(3.4) == 3 and isinstance(replicas.snap(3.4), int)
    # A max that is not on the grid: the top grid point below it is the highest value.
    odd = Parameter("web", "x", "range", minimum=0.0, maximum=1.0, step=0.3)
    assert odd.grid_points == 4 and odd.snap(1.0) == 0.9
    continuous = Parameter("web", "y", "range", minimum=0.0, maximum=1.0, step=0)
    assert continuous.snap(0.4321) == 0.4321 and continuous.snap(7) == 1.0
    with pytest.raises(ValueError, match="web.cpu: 'lots' is not a number"):
        cpu.snap("lots")


def test_enums_take_only_their_values():
    gc = parameter_from_description("web", "gc", COMPONENTS["web"]["settings"]["gc"])
    assert gc.snap("g1") == "g1"
    with pytest.raises(ValueError, match="web.gc: 'cms' is not one of"):
        gc.snap("cms")
    assert gc.neighbours("g1") == ["serial", "parallel"]


@pytest.mark.parametrize(
    ("described", "words"),
    [
        ({"type": "range", "min": 1, "step": 1}, "max must be a number"),
        ({"type": "range", "min": 5, "max": 1, "step": 1}, "min 5 is above max 1"),
        ({"type": "range", "min": 0, "max": 1, "step": -1}, "step must not be negative"),
        ({"type": "enum", "values": []}, "non-empty list"),
        ({"type": "slider"}, "unknown setting type"),
    ],
)
def test_unusable_descriptions_name_the_setting(described, words):
    with pytest.raises(ValueError, match=f"web.x: .*{words}"):
        parameter_from_description("web", "x", described)


def test_wide_positive_ranges_are_measured_on_a_log_scale():
    space = _space()
    cpu, memory, replicas, _ = space.parameters
    assert cpu.log_scale and memory.log_scale and replicas.log_scale
    # 1 -> 2 replicas is as far as 5 -> 10: resources act multiplicatively.
    assert replicas.unit(2) - replicas.unit(1) == pytest.approx(replicas.unit(10) - replicas.unit(5))
    assert cpu.unit(0.25) == 0.0 and cpu.unit(4.0) == 1.0 and cpu.from_unit(0.5) == pytest.approx(1.0)
    narrow = Parameter("web", "x", "range", minimum=1.0, maximum=3.0, step=0.5)
    signed = Parameter("web", "y", "range", minimum=-1.0, maximum=10.0, step=1.0)
    assert not narrow.log_scale and not signed.log_scale
    assert narrow.unit(2.0) == 0.5 and signed.unit(4.5) == 0.5
    # Two different enum values are 1 apart; a setting's features follow the free settings' order.
    features = space.encode(_web(cpu=1.0, memory=2.0, replicas=2, gc="g1"))
    other = space.encode(_web(cpu=1.0, memory=2.0, replicas=2, gc="serial"))
    assert len(features) == 3 + 3
    assert math.dist(features, other) == pytest.approx(1.0)


def test_a_move_smaller_than_a_grid_step_still_happens_in_proportion():
    replicas = _space().parameters[2]
    rng = random.Random(3)
    # A quarter of the way from 2 to 3 replicas: one move in four lands on 3, the rest stay on 2.
    quarter = replicas.unit(2.25) - replicas.unit(2)
    moves = [replicas.move(2, quarter, rng) for _ in range(2000)]
    assert set(moves) == {2, 3}
    assert 0.2 < moves.count(3) / len(moves) < 0.3
    assert replicas.move(2, -5.0, rng) == 1 and replicas.move(2, 5.0, rng) == 10  # clamped
    continuous = Parameter("web", "y", "range", minimum=0.0, maximum=1.0, step=0)
    assert continuous.move(0.5, 0.1, rng) == pytest.approx(0.6)
    assert continuous.neighbours(0.5) == pytest.approx([0.45, 0.55])


# --- constraint margins -----------------------------------------------------------------------


def test_a_margin_is_a_signed_log_ratio_of_a_positive_metric_to_its_bound():
    assert constraint_margin(500.0, "<=", 250.0) == pytest.approx(math.log(2))
    assert constraint_margin(125.0, "<=", 250.0) == pytest.approx(-math.log(2))
    assert constraint_margin(250.0, "<", 250.0) == 0.0
    # At least: more is better, so the sign flips.
    assert constraint_margin(50.0, ">=", 100.0) == pytest.approx(math.log(2))
    assert constraint_margin(200.0, ">", 100.0) == pytest.approx(-math.log(2))
    assert constraint_margin(90.0, "==", 100.0) == pytest.approx(abs(math.log(0.9)))
    # A metric or bound that is not positive: the difference relative to the bound's size.
    assert constraint_margin(0.0, "<=", 0.01) == pytest.approx(-1.0)
    assert constraint_margin(-3.0, "<=", 0.0) == -3.0
    assert constraint_margin(1.5, ">=", -2.0) == pytest.approx(-3.5 / 2.0)
    # Missing or not a number: unknown, so as bad as it gets.
    assert constraint_margin(None, "<=", 1.0) == math.inf
    assert constraint_margin(math.nan, "<=", 1.0) == math.inf
    with pytest.raises(ValueError, match="unknown constraint operator '!='"):
        constraint_margin(1.0, "!=", 1.0)


# --- the trust radius ---------------------------------------------------------------------------


def test_the_radius_follows_the_history():
    options = StrategyOptions(
        initial_samples=2, radius=0.2, min_radius=0.1, max_radius=0.4, growth=1.5, failure_tolerance=2
    )
    point = _web(cpu=1.0)
    start = [Trial(point, 10.0, 0.0), Trial(point, 12.0, 0.0)]
    assert replay(start[:1], options).exploring
    assert replay(start, options).radius == 0.2 and not replay(start, options).exploring
    improving = start + [Trial(point, 9.0, 0.0), Trial(point, 8.0, 0.0)]
    assert replay(improving, options).radius == pytest.approx(0.4)  # 0.2 * 1.5, then capped
    assert replay(improving, options).incumbent.objective == 8.0
    failing = start + [Trial(point, 11.0, 0.0)] * 2
    assert replay(failing, options).radius == pytest.approx(0.1)
    assert replay(failing + [Trial(point, 11.0, 0.0)] * 4, options).radius == pytest.approx(0.1)  # floor
    # An infeasible trial never displaces a feasible one, however good its objective.
    assert replay(start + [Trial(point, 1.0, 0.5)], options).incumbent.objective == 10.0
    # A cancelled step says nothing: it neither counts as a sample nor as a failure.
    assert replay(start[:1] + [Trial(point, 1.0, 0.0, informative=False)], options).exploring


# --- what it proposes ----------------------------------------------------------------------------


def test_proposals_stay_on_the_grid_never_repeat_and_never_move_pinned_settings():
    space = _space(memory={"pinned": True, "value": 3.3}, gc={"pinned": True})
    assert [p.name for p in space.free] == ["cpu", "replicas"]
    history: list[Trial] = []
    rng = random.Random(0)
    for n in range(40):
        settings = space.current() if n == 0 else propose(space, history, rng)
        assert settings["web"]["memory"] == 3.3 and settings["web"]["gc"] == "g1"
        assert all(p.snap(settings["web"][p.name]) == settings["web"][p.name] for p in space.free)
        cost = settings["web"]["cpu"] * settings["web"]["replicas"]
        # No margins given: the strategy models the total violation instead.
        history.append(Trial(settings, cost, 0.0 if cost >= 4 else 1.0))
    assert len({space.key(t.settings) for t in history}) == 40  # no point tried twice


def test_the_initial_design_stays_near_the_described_values():
    space = _space()
    options = StrategyOptions(initial_samples=4, initial_radius=0.1)
    described = space.encode(space.current())
    for seed in range(10):
        history = [Trial(space.current(), 1.0, 0.0)]
        for n in range(1, 4):
            settings = propose(space, history, random.Random(f"{seed}/{n}"), options)
            assert replay(history, options).exploring
            assert all(
                _within(p, settings["web"][p.name], space.current()["web"][p.name], 0.1)
                for p in space.free
                if p.kind == "range"
            ), settings
            history.append(Trial(settings, 1.0, 0.0))
        assert len({tuple(space.encode(t.settings)) for t in history}) == 4
    assert described == space.encode(space.current())


def test_a_larger_initial_design_than_model_after_is_completed_before_the_model_proposes():
    space = _space()
    options = StrategyOptions(initial_samples=9, initial_radius=0.1)
    assert options.initial_samples > options.model_after
    history = [Trial(space.current(), 1.0, 0.0)]
    for n in range(1, 9):
        settings = propose(space, history, random.Random(f"0/{n}"), options)
        assert all(
            _within(p, settings["web"][p.name], space.current()["web"][p.name], 0.1)
            for p in space.free
            if p.kind == "range"
        ), (n, settings)
        history.append(Trial(settings, 1.0, 0.0))


def _threshold_problem(x: int) -> Trial:
    """Cost x; latency 400 / x must stay <= 100, so x >= 4 is feasible."""
    latency = 400.0 / x
    margin = constraint_margin(latency, "<=", 100.0)
    return Trial(_web(x=x), float(x), max(0.0, margin), margins=(margin,))


def test_it_proposes_the_cheapest_point_predicted_feasible():
    space = SearchSpace.from_components(
        {"web": {"settings": {"x": {"type": "range", "min": 1, "max": 10, "step": 1, "value": 8}}}}
    )
    history = [_threshold_problem(x) for x in (8, 10, 6, 2)]
    for seed in range(8):
        proposal = propose(space, history, random.Random(seed))["web"]["x"]
        # Cheaper than the incumbent (6) and not in the region that failed (x <= 3).
        assert proposal in (4, 5), proposal


def test_after_a_failure_it_goes_back_to_the_feasible_incumbent():
    space = _space()
    options = StrategyOptions()
    incumbent = _web(cpu=1.0, memory=2.0, replicas=2, gc="g1")
    far = _web(cpu=0.25, memory=0.5, replicas=1, gc="serial")
    history = [
        Trial(incumbent, 0.1, 0.0, margins=(-0.2,)),
        Trial(_web(cpu=2.0, memory=4.0, replicas=4, gc="g1"), 0.4, 0.0, margins=(-1.5,)),
        Trial(_web(cpu=1.5, memory=3.0, replicas=3, gc="parallel"), 0.2, 0.0, margins=(-1.0,)),
        Trial(_web(cpu=1.25, memory=2.25, replicas=2, gc="g1"), 0.12, 0.0, margins=(-0.4,)),
        Trial(far, 0.01, 40.0, margins=(math.log(40.0),)),
    ]
    radius = replay(history, options).radius
    origin = space.encode(incumbent)
    for seed in range(8):
        proposal = propose(space, history, random.Random(seed), options)
        assert all(
            _within(p, proposal["web"][p.name], incumbent["web"][p.name], radius)
            for p in space.free
            if p.kind == "range"
        ), proposal
        assert math.dist(space.encode(proposal), origin) < math.dist(
            space.encode(proposal), space.encode(far)
        )


def _capacity_trial(cpu: float, memory: float, replicas: int, gc: str, need: float) -> Trial:
    """Latency 100 * need / (cpu * replicas), saturating at 2000 ms; the bound is 250 ms."""
    latency = min(100.0 * need / (cpu * replicas), 2000.0)
    margin = constraint_margin(latency, "<=", 250.0)
    settings = _web(cpu=cpu, memory=memory, replicas=replicas, gc=gc)
    return Trial(settings, cpu * replicas, max(0.0, margin), margins=(margin,))


def test_while_nothing_is_feasible_it_heads_for_the_cheapest_likely_feasible_point_nearby():
    space = _space()
    options = StrategyOptions()
    history = [
        _capacity_trial(*point, need=6.0)
        for point in [
            (1.0, 2.0, 2, "g1"),
            (1.125, 2.0, 2, "g1"),
            (0.875, 2.25, 2, "g1"),
            (1.0, 1.75, 1, "g1"),
        ]
    ]
    status = replay(history, options)
    assert status.incumbent.violation > 0
    incumbent = status.incumbent.settings["web"]
    for seed in range(6):
        proposal = propose(space, history, random.Random(seed), options)["web"]
        # More capacity than the least violating trial, and close to it.
        assert proposal["cpu"] * proposal["replicas"] > incumbent["cpu"] * incumbent["replicas"], proposal
        assert all(
            _within(p, proposal[p.name], incumbent[p.name], status.radius)
            for p in space.free
            if p.kind == "range"
        ), proposal


def test_when_every_trial_is_equally_saturated_it_looks_anywhere():
    space = _space()
    options = StrategyOptions()
    # Latency pinned at 2000 ms around the described values: nothing nearby says which way to go.
    history = [
        _capacity_trial(*point, need=600.0)
        for point in [
            (1.0, 2.0, 2, "g1"),
            (1.125, 2.0, 2, "g1"),
            (0.875, 2.25, 2, "g1"),
            (1.0, 1.75, 2, "g1"),
        ]
    ]
    incumbent = replay(history, options).incumbent.settings["web"]
    far = 0
    for seed in range(8):
        proposal = propose(space, history, random.Random(seed), options)["web"]
        near = all(
            _within(p, proposal[p.name], incumbent[p.name], options.max_radius)
            for p in space.free
            if p.kind == "range"
        )
        far += not near
    assert far >= 4, far


def test_every_enum_value_is_tried_at_the_incumbent_when_it_looks_safe():
    space = _space()
    options = StrategyOptions()

    def trial(cpu: float, memory: float, replicas: int, gc: str) -> Trial:
        latency = 100.0 / (cpu * replicas)  # far inside the bound, and gc does not matter
        margin = constraint_margin(latency, "<=", 250.0)
        return Trial(
            _web(cpu=cpu, memory=memory, replicas=replicas, gc=gc), cpu * replicas, 0.0, margins=(margin,)
        )

    history = [
        trial(1.0, 2.0, 2, "g1"),
        trial(1.25, 2.5, 2, "g1"),
        trial(1.0, 1.75, 3, "g1"),
        trial(0.875, 2.25, 2, "g1"),
    ]
    incumbent = replay(history, options).incumbent.settings
    tried_values = set()
    for n in range(2):
        proposal = propose(space, history, random.Random(n), options)
        # The incumbent with another collector: a probe, not a random jump.
        assert {k: v for k, v in proposal["web"].items() if k != "gc"} == {
            k: v for k, v in incumbent["web"].items() if k != "gc"
        }
        tried_values.add(proposal["web"]["gc"])
        history.append(trial(**proposal["web"]))
    assert tried_values == {"serial", "parallel"}


def test_failed_cancelled_and_unmeasured_steps_do_not_break_it():
    space = _space()
    history = [
        Trial(space.current(), 0.1, 0.0, margins=(-0.2, -1.0)),
        Trial(_web(cpu=1.5, memory=2.0, replicas=2, gc="g1"), None, math.inf, margins=(math.inf, math.inf)),
        Trial(_web(cpu=0.5, memory=2.0, replicas=2, gc="g1"), 0.05, 0.0, informative=False),
        Trial(_web(cpu=1.0, memory=3.0, replicas=2, gc="g1"), 0.12, math.inf, margins=(-0.3, math.inf)),
        Trial(_web(cpu=1.0, memory=2.0, replicas=3, gc="g1"), 0.15, 0.0, margins=(-0.5, -1.2)),
        Trial(_web(cpu=0.75, memory=2.0, replicas=2, gc="g1"), None, 0.0, margins=(-0.1, -1.0)),
    ]
    tried = {space.key(t.settings) for t in history}
    for seed in range(5):
        proposal = propose(space, history, random.Random(seed))
        assert _on_grid(space, proposal) and space.key(proposal) not in tried


def test_a_maximized_objective_without_constraints_is_searched_too():
    space = _space()
    history: list[Trial] = []
    for n in range(12):
        settings = space.current() if n == 0 else propose(space, history, random.Random(n))
        web = settings["web"]
        throughput = min(web["cpu"] * web["replicas"], 3.0) * 100  # negated: lower is better
        history.append(Trial(settings, -throughput, 0.0))
    assert len({space.key(t.settings) for t in history}) == 12
    assert min(t.objective for t in history) < history[0].objective  # found more than the baseline


def test_a_space_with_nothing_free_proposes_the_current_values():
    space = _space(
        cpu={"pinned": True},
        memory={"min": 2.0, "max": 2.0},
        replicas={"pinned": True},
        gc={"values": ["g1"]},
    )
    assert space.free == ()
    assert propose(space, [Trial(space.current(), 1.0, 0.0)], random.Random(0)) == space.current()


def test_a_tiny_space_repeats_a_point_rather_than_stopping():
    space = SearchSpace.from_components(
        {"web": {"settings": {"gc": {"type": "enum", "values": ["serial", "g1"], "value": "g1"}}}}
    )
    history = [Trial({"web": {"gc": v}}, 1.0, 0.0) for v in ("serial", "g1")] * 2
    assert propose(space, history, random.Random(0))["web"]["gc"] in ("serial", "g1")


def test_the_same_history_and_seed_give_the_same_proposal():
    space = _space()
    history = [Trial(space.current(), 10.0, 0.0, margins=(-0.1,))] + [
        Trial(
            space.sample(random.Random(i)), 20.0 + i, 0.0 if i % 2 else 1.0, margins=(-0.2 if i % 2 else 0.5,)
        )
        for i in range(6)
    ]
    first = propose(space, history, random.Random("7/7"))
    assert all(propose(space, history, random.Random("7/7")) == first for _ in range(3))


def test_history_from_an_older_description_does_not_break_the_search():
    """Steps stored before the description changed (a setting gone, an enum value gone, one added)."""
    space = _space()
    old = [
        Trial(_web(cpu=9.0, memory=2.0, replicas=2, gc="cms", threads=4), 5.0, 0.0),
        Trial(_web(cpu=1.0), 6.0, 0.0),
        Trial({"other": {"x": 1}}, 7.0, 0.0),
        Trial(_web(cpu="lots", memory=2.0, replicas=2, gc="g1"), 8.0, 0.0),
        Trial(_web(cpu=2.0, memory=3.0, replicas=4, gc="serial"), 9.0, 0.0),
    ]
    # Out of range: snapped into it; no longer allowed: the described value.
    assert space.snap(old[0].settings) == _web(cpu=4.0, memory=2.0, replicas=2, gc="g1")
    for n in range(10):
        proposal = propose(space, old, random.Random(n))
        assert _on_grid(space, proposal)


@pytest.mark.timeout(60)
def test_a_proposal_is_quick_even_after_a_long_history():
    space = _space()
    rng = random.Random(1)
    history = []
    for _ in range(300):
        settings = space.sample(rng)
        web = settings["web"]
        latency = 300.0 / (web["cpu"] * web["replicas"])
        margin = constraint_margin(latency, "<=", 250.0)
        history.append(Trial(settings, web["cpu"] * web["replicas"], max(0.0, margin), margins=(margin,)))
    durations = []
    for n in (20, 20, 20, 300):
        started = time.perf_counter()
        propose(space, history[:n], random.Random(n))
        durations.append(time.perf_counter() - started)
    # The model is fitted on the trials nearest the incumbent, so history length hardly matters.
    assert statistics.median(durations[:3]) < PROPOSAL_SECONDS, durations
    assert durations[3] < LONG_HISTORY_SECONDS, durations
