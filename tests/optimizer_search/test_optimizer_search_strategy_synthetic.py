"""The strategy against random sampling on the project's synthetic application: a seeded regression test.

The problem is the demo's: minimize cost subject to p99_latency <= 250 and error_rate <= 0.01 on
``SyntheticModel(seed)`` (servo_actors/connectors/synthetic.py), each evaluation one noisy
reading, step 0 the described values. Each seed's optimum is found here by grid search over all
28,830 settings (noise-free). Both searches get the same budget and the same noise; proposal n
uses ``random.Random(f"{seed}/{n}")`` as the driver does. One 32-evaluation run per seed also
gives the 16-evaluation result (baseline + the demo's 15 steps): a proposal depends only on the
history before it. The best is the cheapest step that *looked* feasible (scripts/bench_search.py
measures the same, with timings and Optuna beside it; BENCHMARKS.md has the table).

Measured when written (20 seeds): 1.067 times each seed's optimum at 16 evaluations, 1.021 at
32 (the trust-region strategy alone: 1.106 and 1.091; random sampling 1.270 and 1.266). The
model-based proposals (acquisition.py) probe the constraint's boundary: about 60 % of the
proposals after the initial design read infeasible, most of them by a few percent (confirmation,
confirm.py, keeps such a step from being recommended). Bounds here are generous: they catch a
search that broke, not a small drift; no wall-clock assertion.
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
from servo_actors.optimizer.strategy import propose
from servo_actors.optimizer.trials import StrategyOptions, Trial, constraint_margin

from .conftest import ServoSimulator

SEEDS = range(20)
BUDGET = 32  # evaluations, the baseline included
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
    violations: list[float]

    def best(self, budget: int) -> float:
        return min(
            (c for c, ok in zip(self.costs[:budget], self.feasible[:budget], strict=True) if ok),
            default=math.inf,
        )

    def infeasible_share(self, budget: int) -> float:
        """The share of proposals after the initial design that broke a constraint."""
        later = self.feasible[INITIAL_SAMPLES:budget]
        return sum(not ok for ok in later) / len(later)

    def far_share(self, budget: int) -> float:
        """The share of proposals after the initial design twice or more over some bound."""
        later = self.violations[INITIAL_SAMPLES:budget]
        return sum(v >= 1.0 for v in later) / len(later)


def search(seed: int, choose) -> Run:
    model = SyntheticModel(seed=seed, noise=NOISE)
    noise = random.Random(f"noise/{seed}")
    space = SearchSpace.from_components(model.components())
    history: list[Trial] = []
    costs, feasible, violations = [], [], []
    for n in range(BUDGET):
        settings = space.current() if n == 0 else choose(space, history, random.Random(f"{seed}/{n}"))
        metrics = model.evaluate(settings["web"], noise)
        margins = tuple(constraint_margin(metrics[name], op, bound) for name, op, bound in CONSTRAINTS)
        violation = sum(max(0.0, metrics[name] - bound) / bound for name, _, bound in CONSTRAINTS)
        history.append(Trial(settings, metrics["cost"], violation, margins=margins))
        costs.append(metrics["cost"])
        feasible.append(violation == 0)
        violations.append(violation)
    return Run(costs, feasible, violations)


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
    # Measured 1.067 (16) and 1.021 (32); the worst seeds 1.205 and 1.101.
    assert statistics.mean(ratios) < (1.12 if budget == DEMO_BUDGET else 1.07), ratios
    assert max(ratios) < 1.3, ratios


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
    assert wins >= 14 and losses <= 2, (strategy, sampled)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("budget", [DEMO_BUDGET, BUDGET])
def test_proposals_stay_near_the_feasible_region(results, budget):
    shares = [run.infeasible_share(budget) for run in results["strategy"]]
    far = [run.far_share(budget) for run in results["strategy"]]
    print(f"\nbudget {budget}: infeasible share per seed", [round(s, 2) for s in shares])
    print(f"budget {budget}: share twice or more over a bound", [round(s, 2) for s in far])
    # The boundary is probed (measured ~0.6 infeasible), but rarely far past it.
    assert statistics.mean(shares) < 0.8, shares
    assert statistics.mean(far) < 0.3, far


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
