"""The search strategy: snapping, enums and pinned settings, and that it beats random sampling.

The comparison with random sampling uses the project's synthetic application
(``servo_actors.connectors.synthetic.SyntheticModel``), not a surface written for this test.
"""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pytest

from servo_actors.connectors.synthetic import SyntheticModel
from servo_actors.optimizer.strategy import (
    Parameter,
    SearchSpace,
    StrategyOptions,
    Trial,
    parameter_from_description,
    propose,
    replay,
)

from .conftest import COMPONENTS

P99_LIMIT = 250.0
BUDGET = 20  # evaluations, the baseline included, for both searches
SEEDS = range(12)


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
    rng = random.Random(1)
    assert {gc.perturb("g1", 0.1, rng) for _ in range(50)} == {"serial", "parallel"}


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


def _space(**changes: dict[str, Any]) -> SearchSpace:
    settings = {
        name: {**spec, **changes.get(name, {})} for name, spec in COMPONENTS["web"]["settings"].items()
    }
    return SearchSpace.from_components({"web": {"settings": settings}})


def _on_grid(space: SearchSpace, settings: dict[str, dict[str, Any]]) -> bool:
    return all(
        p.snap(settings[p.component][p.name]) == settings[p.component][p.name] for p in space.parameters
    )


def test_proposals_stay_on_the_grid_and_never_move_pinned_settings():
    space = _space(memory={"pinned": True, "value": 3.3}, gc={"pinned": True})
    assert [p.name for p in space.free] == ["cpu", "replicas"]
    history: list[Trial] = []
    rng = random.Random(0)
    for n in range(40):
        settings = space.current() if n == 0 else propose(space, history, rng)
        assert settings["web"]["memory"] == 3.3 and settings["web"]["gc"] == "g1"
        assert all(p.snap(settings["web"][p.name]) == settings["web"][p.name] for p in space.free)
        cost = settings["web"]["cpu"] * settings["web"]["replicas"]
        history.append(Trial(settings, cost, 0.0 if cost >= 4 else 1.0))
    assert len({space.key(t.settings) for t in history}) == 40  # no point tried twice


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
    history = [Trial({"web": {"gc": v}}, 1.0, 0.0) for v in ("serial", "g1")]
    assert propose(space, history, random.Random(0))["web"]["gc"] in ("serial", "g1")


def test_the_radius_follows_the_history():
    options = StrategyOptions(initial_samples=2, initial_radius=0.2, success_tolerance=2, failure_tolerance=3)
    point = {"web": {"cpu": 1.0}}
    start = [Trial(point, 10.0, 0.0), Trial(point, 12.0, 0.0)]
    assert replay(start[:1], options).exploring
    assert replay(start, options).radius == 0.2
    improving = start + [Trial(point, 9.0, 0.0), Trial(point, 8.0, 0.0)]
    assert replay(improving, options).radius == 0.4
    assert replay(improving, options).incumbent.objective == 8.0
    failing = start + [Trial(point, 11.0, 0.0)] * 3
    assert replay(failing, options).radius == 0.1
    # An infeasible trial never displaces a feasible one, however good its objective.
    assert replay(start + [Trial(point, 1.0, 0.5)], options).incumbent.objective == 10.0
    # A cancelled step says nothing: it neither counts as a sample nor as a failure.
    assert replay(start[:1] + [Trial(point, 1.0, 0.0, informative=False)], options).exploring


def test_the_same_history_and_seed_give_the_same_proposal():
    space = _space()
    history = [Trial(space.current(), 10.0, 0.0)] + [
        Trial(space.sample(random.Random(i)), 20.0 + i, 0.0) for i in range(6)
    ]
    first = propose(space, history, random.Random("7/7"))
    assert all(propose(space, history, random.Random("7/7")) == first for _ in range(3))


# --- against random sampling on the synthetic application ---------------------------------------


def _search(seed: int, choose) -> float:
    """Best feasible cost in BUDGET evaluations; step 0 is the described values for both searches."""
    model = SyntheticModel(seed=seed, noise=0.05)
    space = SearchSpace.from_components(model.components())
    noise = random.Random(f"noise/{seed}")
    history: list[Trial] = []
    best = math.inf
    for n in range(BUDGET):
        settings = space.current() if n == 0 else choose(space, history, random.Random(f"{seed}/{n}"))
        assert _on_grid(space, settings)
        metrics = model.evaluate(settings["web"], noise)
        violation = max(0.0, metrics["p99_latency"] - P99_LIMIT) / P99_LIMIT
        history.append(Trial(settings, metrics["cost"], violation))
        if violation == 0:
            best = min(best, metrics["cost"])
    return best


@pytest.mark.timeout(60)
def test_the_strategy_beats_random_sampling_on_the_synthetic_application():
    strategy = [_search(seed, propose) for seed in SEEDS]
    sampled = [_search(seed, lambda space, history, rng: space.sample(rng)) for seed in SEEDS]
    assert all(math.isfinite(cost) for cost in strategy), strategy
    mean_strategy, mean_random = statistics.mean(strategy), statistics.mean(sampled)
    # Measured: 0.0988 against 0.1056 $/h (the optimum is 0.0876). Random sampling rarely beats
    # the described values; the search does on most seeds and is worse on almost none.
    assert mean_strategy < 0.97 * mean_random, (mean_strategy, mean_random)
    wins = sum(s < r for s, r in zip(strategy, sampled, strict=True))
    losses = sum(s > r for s, r in zip(strategy, sampled, strict=True))
    assert wins >= len(SEEDS) // 3 and losses <= 1, (strategy, sampled)


def test_history_from_an_older_description_does_not_break_the_search():
    """Steps stored before the description changed (a setting gone, an enum value gone, one added)."""
    space = _space()
    old = [
        Trial({"web": {"cpu": 9.0, "memory": 2.0, "replicas": 2, "gc": "cms", "threads": 4}}, 5.0, 0.0),
        Trial({"web": {"cpu": 1.0}}, 6.0, 0.0),
        Trial({"other": {"x": 1}}, 7.0, 0.0),
        Trial({"web": {"cpu": "lots", "memory": 2.0, "replicas": 2, "gc": "g1"}}, 8.0, 0.0),
        Trial({"web": {"cpu": 2.0, "memory": 3.0, "replicas": 4, "gc": "serial"}}, 9.0, 0.0),
    ]
    # Out of range: snapped into it; no longer allowed: the described value.
    assert space.snap(old[0].settings) == {"web": {"cpu": 4.0, "memory": 2.0, "replicas": 2, "gc": "g1"}}
    for n in range(10):
        proposal = propose(space, old, random.Random(n))
        assert _on_grid(space, proposal)
