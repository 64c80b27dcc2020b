"""The strategy against random sampling on the project's synthetic application.

The problem is the demo's: minimize cost subject to p99_latency <= 250 and error_rate <= 0.01 on
``SyntheticModel(seed)`` (servo_actors/connectors/synthetic.py), each evaluation one noisy
reading, step 0 the described values. Each seed's optimum is found here by grid search over all
28,830 settings (noise-free). Both searches get the same budget and the same noise; proposal n
uses ``random.Random(f"{seed}/{n}")`` as the driver does. One 20-evaluation run per seed also
gives the 16-evaluation result (baseline + the demo's 15 steps): a proposal depends only on the
history before it.

Measured when written (12 seeds): mean best feasible cost 0.0944 $/h, 1.100 times each seed's
optimum, at 16 evaluations and at 20 (the last four never improved); random sampling 0.1056,
1.234 times, rarely beating the described values. Better than random on 11 seeds, equal on 1
(neither beat the described values), worse on none. 28 % (16) and 26 % (20) of the proposals
after the initial design infeasible. Over 48 seeds: 1.119 and 1.112, 30 % and 26 % infeasible.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass
from typing import Any

import pytest

from servo_actors.connectors.synthetic import SyntheticModel
from servo_actors.optimizer.search import SearchDriver
from servo_actors.optimizer.space import SearchSpace
from servo_actors.optimizer.strategy import StrategyOptions, Trial, constraint_margin, propose

from .conftest import ServoSimulator

SEEDS = range(12)
BUDGET = 20  # evaluations, the baseline included
DEMO_BUDGET = 16  # the baseline and the demo's 15 steps
CONSTRAINTS = (("p99_latency", "<=", 250.0), ("error_rate", "<=", 0.01))
NOISE = 0.05  # relative noise of one reading (the model's default)
INITIAL_SAMPLES = StrategyOptions().initial_samples


def _meets(metrics: dict[str, float]) -> bool:
    return all(metrics[name] <= bound for name, _, bound in CONSTRAINTS)


def grid_optimum(seed: int) -> float:
    """The cheapest noise-free feasible settings on the grid, by trying every one."""
    model = SyntheticModel(seed=seed, noise=0.0)
    described = model.components()["web"]["settings"]

    def grid(spec: dict[str, Any]) -> list[float]:
        points = round((spec["max"] - spec["min"]) / spec["step"]) + 1
        return [spec["min"] + i * spec["step"] for i in range(points)]

    best = math.inf
    for cpu in grid(described["cpu"]):
        for memory in grid(described["memory"]):
            for replicas in grid(described["replicas"]):
                for gc in described["gc"]["values"]:
                    metrics = model.evaluate({"cpu": cpu, "memory": memory, "replicas": replicas, "gc": gc})
                    if metrics["cost"] < best and _meets(metrics):
                        best = metrics["cost"]
    return best


@dataclass(frozen=True)
class Run:
    """One search: each evaluation's cost and whether it met every constraint."""

    costs: list[float]
    feasible: list[bool]

    def best(self, budget: int) -> float:
        return min(
            (c for c, ok in zip(self.costs[:budget], self.feasible[:budget], strict=True) if ok),
            default=math.inf,
        )

    def infeasible_share(self, budget: int) -> float:
        """The share of proposals after the initial design that broke a constraint."""
        later = self.feasible[INITIAL_SAMPLES:budget]
        return sum(not ok for ok in later) / len(later)


def search(seed: int, choose) -> Run:
    model = SyntheticModel(seed=seed, noise=NOISE)
    noise = random.Random(f"noise/{seed}")
    space = SearchSpace.from_components(model.components())
    history: list[Trial] = []
    costs, feasible = [], []
    for n in range(BUDGET):
        settings = space.current() if n == 0 else choose(space, history, random.Random(f"{seed}/{n}"))
        metrics = model.evaluate(settings["web"], noise)
        margins = tuple(constraint_margin(metrics[name], op, bound) for name, op, bound in CONSTRAINTS)
        violation = sum(max(0.0, metrics[name] - bound) / bound for name, _, bound in CONSTRAINTS)
        history.append(Trial(settings, metrics["cost"], violation, margins=margins))
        costs.append(metrics["cost"])
        feasible.append(violation == 0)
    return Run(costs, feasible)


def random_sampling(space: SearchSpace, history: list[Trial], rng: random.Random) -> dict[str, Any]:
    """The baseline search: uniformly random settings (``propose``'s signature)."""
    return space.sample(rng)


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    return {
        "optimum": [grid_optimum(seed) for seed in SEEDS],
        "strategy": [search(seed, propose) for seed in SEEDS],
        "random": [search(seed, random_sampling) for seed in SEEDS],
    }


def _ratios(results: dict[str, Any], which: str, budget: int) -> list[float]:
    return [run.best(budget) / best for run, best in zip(results[which], results["optimum"], strict=True)]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("budget", [DEMO_BUDGET, BUDGET])
def test_it_gets_within_about_ten_percent_of_each_seeds_optimum(results, budget):
    ratios = _ratios(results, "strategy", budget)
    print(f"\nbudget {budget}: best / optimum per seed", [round(r, 3) for r in ratios])
    assert all(math.isfinite(r) for r in ratios), ratios
    # Measured 1.100 at both budgets; the worst seed (4) stays at the described values, 1.205.
    assert statistics.mean(ratios) < 1.12, ratios
    assert max(ratios) < 1.25, ratios


@pytest.mark.timeout(180)
@pytest.mark.parametrize("budget", [DEMO_BUDGET, BUDGET])
def test_it_beats_random_sampling_with_the_same_budget(results, budget):
    strategy, sampled = _ratios(results, "strategy", budget), _ratios(results, "random", budget)
    print(
        f"\nbudget {budget}: strategy {statistics.mean(strategy):.3f}, random {statistics.mean(sampled):.3f}"
    )
    assert statistics.mean(strategy) < 0.92 * statistics.mean(sampled), (strategy, sampled)
    wins = sum(s < r for s, r in zip(strategy, sampled, strict=True))
    losses = sum(s > r for s, r in zip(strategy, sampled, strict=True))
    assert wins >= 10 and losses == 0, (strategy, sampled)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("budget", [DEMO_BUDGET, BUDGET])
def test_most_proposals_after_the_initial_design_are_feasible(results, budget):
    shares = [run.infeasible_share(budget) for run in results["strategy"]]
    print(f"\nbudget {budget}: infeasible share per seed", [round(s, 2) for s in shares])
    # Measured 0.28 (16) and 0.26 (20): an infeasible trial is followed by a step back.
    assert statistics.mean(shares) < 0.4, shares
    assert max(shares) <= 0.6, shares


@pytest.mark.timeout(120)
def test_the_driver_gives_the_strategy_each_constraints_margin():
    """Through SearchDriver (margins from the MEASUREMENTs' metrics), the demo's plan improves on the baseline."""
    model = SyntheticModel(seed=0, noise=NOISE)
    servo = ServoSimulator(lambda settings, rng: model.evaluate(settings["web"], rng), model.components())
    driver = SearchDriver.from_plan(
        {
            "app": "example.com/web",
            "steps": DEMO_BUDGET - 1,
            "objective": {"minimize": "cost", "constraints": [f"{m} {op} {b}" for m, op, b in CONSTRAINTS]},
        }
    )
    servo.run(driver)
    steps = [s for s in driver.state()["steps"] if s["confirms"] is None]  # the search's own
    assert len(steps) == DEMO_BUDGET and steps[0]["feasible"]
    best = driver.best()
    assert best is not None and best.metrics["cost"] < 0.95 * steps[0]["metrics"]["cost"]
    later = steps[INITIAL_SAMPLES:]
    assert sum(not s["feasible"] for s in later) <= len(later) // 2, [s["metrics"] for s in later]
