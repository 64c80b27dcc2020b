"""The search algorithm: which settings to try next, given the described settings and the history.

Pure: no I/O and no clock; randomness comes only from the ``random.Random`` passed in, and the
proposal depends only on (space, history, rng), so a resumed search proposes what the first run
would have. A ``Trial`` is one finished step as the search sees it: its settings, its objective
(lower is better), its total violation (0 when feasible) and, per constraint, its *margin*
(``constraint_margin``: <= 0 met, > 0 violated, a log ratio to the bound).

Here: ``propose`` and its candidates, probes and initial design. ``Trial``, the options and the
trust region's replay live in trials.py, the surrogate's reading of the trials in beliefs.py.

How it works: a constrained, model-based trust-region search for the first ``model_after``
trials (6), then constrained expected improvement with Gaussian processes over the settings near
the best trials (acquisition.py). Both read the same Gaussian process (gp.py: numpy).

1. Initial design: until ``initial_samples`` trials exist (the baseline counts), random points
   within ``initial_radius`` (unit coordinates: space.py) of the best trial so far, at first the
   described values.
2. The incumbent is the best trial: the cheapest feasible one, else the least violating one. A
   surrogate (gp.py ``Surrogate``: linear trend plus Gaussian process) is fitted on the trials nearest
   it, one output for the objective (log scale when positive) and one per constraint margin, so
   each prediction says how good a point is and how likely it meets every constraint
   (``feasibility``, the product over constraints).
3. Candidates, never a point already tried: the incumbent's neighbours (one grid step, every other
   enum value) and ``candidates`` random points within the trust radius of it.
4. The choice, in order: a *probe* of a setting whose effect near the incumbent is unknown (an
   enum value, or a range not varied nearby yet), when predicted safe; else the best *improvement*
   (expected improvement x feasibility) among the candidates predicted cheaper and feasible with
   probability >= ``improve_probability``; else an *expansion*: the safe point (feasibility >=
   ``safe_probability``) that teaches most about the promising cheaper ones (posterior
   covariance), e.g. one more replica, to learn how much CPU could then go. After an infeasible
   trial the model knows more and the next proposal comes from around the feasible incumbent.
5. While nothing is feasible: the cheapest nearby point likely to be; a random point when every
   trial is about equally infeasible (a saturated service is slow everywhere near it).
6. The trust radius, replayed from the history, grows by ``growth`` after each improvement (up to
   ``max_radius``) and halves after ``failure_tolerance`` trials without one (to ``min_radius``).
7. From ``model_after`` trials on, ``acquisition.propose_by_model`` proposes instead (steps 1-6
   are then only the initial design); the trust-region code above is its fallback when the
   models cannot be fitted. A plan's ``initial_samples`` above ``model_after`` delays the model
   until the initial design is complete (the design's size is the plan's to set).

On the synthetic application (minimize cost, p99_latency <= 250, error_rate <= 0.01; 60 seeds,
one noisy reading per evaluation) the cheapest step that looked feasible is on average 1.085 times
each seed's optimum at 16 evaluations and 1.013 at 32 (the trust region alone: 1.13 and 1.08;
random sampling 1.38); the demo's own run, confirmation included, recommends 1.014 times it after
30 steps (seeds 0-199; 1.019 over seeds 200-399). The model probes the constraint's boundary:
~60 % of its proposals read infeasible (the trust region alone: ~30 %), about a third of those
twice or more over a bound (confirm.py keeps a step that only looked feasible from being
recommended). A model proposal with 31 trials takes ~7 ms of CPU. Measured by scripts/bench_search.py (BENCHMARKS.md),
kept by tests/optimizer_search/test_optimizer_search_strategy_synthetic.py.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from servo_actors.optimizer.acquisition import ModelTrial, propose_by_model
from servo_actors.optimizer.beliefs import (
    MARGIN_CAP,
    UNKNOWN_SLACK,
    Beliefs,
    margin_outputs,
    squared_distance,
)
from servo_actors.optimizer.space import (
    SearchSpace,
    Settings,
)
from servo_actors.optimizer.trials import StrategyOptions, Trial, replay

__all__ = ["propose"]

# How many random draws to make before giving up on finding a point not tried yet.
PROPOSAL_ATTEMPTS = 64
# Infeasible trials whose margins all lie within this of each other (a factor of ~1.2 in a
# log ratio) show no way out: a saturated service is slow everywhere.
FLAT_SPREAD = 0.2
# Chance that each enum setting changes in a point of the initial design.
INITIAL_ENUM_CHANGE = 0.5


def propose(
    space: SearchSpace,
    history: Sequence[Trial],
    rng: random.Random,
    options: StrategyOptions | None = None,
) -> Settings:
    """The settings to try next: on the grid, pinned ones untouched, not tried before when avoidable."""
    options = options or StrategyOptions()
    if not space.free:
        return space.current()
    tried = {space.key(t.settings) for t in history}
    status = replay(history, options)
    trials = [t for t in history if t.informative]
    if len(trials) >= max(options.model_after, options.initial_samples):
        chosen = propose_by_model(space, [_model_trial(t) for t in trials], rng)
        if chosen is not None:
            return chosen
    if status.exploring or status.incumbent is None:
        return _initial_point(space, trials, status.incumbent, tried, rng, options)
    center = space.snap(status.incumbent.settings)
    beliefs = Beliefs.fit(space, trials, status.incumbent, center, options)
    if beliefs is None:
        return _random_point(space, tried, rng)
    if beliefs.best is None:
        # Nothing feasible yet. Every trial about equally bad (a saturated service is slow
        # everywhere): the model has nothing to go on, so a random point. Otherwise the cheapest
        # nearby point likely to be feasible, or failing that the likeliest.
        candidates = [] if _flat(trials) else _candidates(space, center, status.radius, tried, rng, options)
        if not candidates:
            return _random_point(space, tried, rng)
        scored = beliefs.score(candidates)
        likely = [s for s in scored if s.feasibility >= options.improve_probability]
        if likely:
            return min(likely, key=lambda s: s.mean).settings
        return max(scored, key=lambda s: (s.feasibility, -s.mean)).settings
    candidates = _candidates(space, center, status.radius, tried, rng, options)
    if not candidates:
        return _random_point(space, tried, rng)
    scored = beliefs.score(candidates)
    cheaper = [s for s in scored if s.mean < beliefs.best]
    improvements = [s for s in cheaper if s.feasibility >= options.improve_probability]
    probes = beliefs.score(_probes(space, center, trials, tried, options))
    if probes:
        probe = max(probes, key=lambda s: (s.feasibility, -s.mean))
        if not improvements or probe.feasibility >= options.safe_probability:
            return probe.settings
    if improvements:
        return max(improvements, key=lambda s: s.improvement * s.feasibility).settings
    safe = [s for s in scored if s.feasibility >= options.safe_probability]
    if safe and cheaper:
        targets = sorted(cheaper, key=lambda s: -s.improvement)[: options.targets]
        return max(safe, key=lambda s: beliefs.lesson(s, targets)).settings
    return max(cheaper or scored, key=lambda s: (s.feasibility, s.improvement)).settings


def _model_trial(trial: Trial) -> ModelTrial:
    margins = trial.margins
    if not margins:  # the caller gave no margins: one from the violation
        margins = (min(trial.violation, MARGIN_CAP) if trial.violation > 0 else UNKNOWN_SLACK,)
    return ModelTrial(trial.settings, trial.objective, trial.violation == 0, margins)


def _candidates(
    space: SearchSpace,
    center: Settings,
    radius: float,
    tried: set[tuple[Any, ...]],
    rng: random.Random,
    options: StrategyOptions,
) -> list[Settings]:
    """The incumbent's neighbours, then random points within ``radius`` of it; none tried before."""
    seen = set(tried)
    found: list[Settings] = []

    def add(settings: Settings) -> None:
        key = space.key(settings)
        if key not in seen:
            seen.add(key)
            found.append(settings)

    for p in space.free:
        for value in p.neighbours(center[p.component][p.name]):
            add(space.replace(center, {p.label: value}))
    for _ in range(options.candidates):
        add(_near(space, center, radius, options.enum_change_probability, rng))
    return found


def _near(
    space: SearchSpace, center: Settings, radius: float, enum_change: float, rng: random.Random
) -> Settings:
    """A random point within ``radius`` of ``center``: every range moves, each enum maybe."""
    changes = {}
    for p in space.free:
        value = center[p.component][p.name]
        if p.kind == "range":
            changes[p.label] = p.move(value, rng.uniform(-radius, radius), rng)
        elif rng.random() < enum_change:
            changes[p.label] = rng.choice(p.values)
    return space.replace(center, changes)


def _probes(
    space: SearchSpace,
    center: Settings,
    trials: Sequence[Trial],
    tried: set[tuple[Any, ...]],
    options: StrategyOptions,
) -> list[Settings]:
    """One-setting moves from the incumbent for the settings whose effect near it is unknown.

    A setting's effect is known when some trial close to the incumbent in the *other* settings
    has another value of it. An enum is probed at each value not seen that way; a range at its
    neighbours while it has not been varied.
    """
    origin = space.encode(center)
    rows = [(space.encode(snapped), snapped) for snapped in (space.snap(t.settings) for t in trials)]
    limit = options.probe_distance**2
    probes = []
    start = 0
    for p in space.free:
        stop = start + p.width
        own = center[p.component][p.name]
        seen = {own}
        for features, snapped in rows:
            elsewhere = squared_distance(features, origin) - squared_distance(
                features[start:stop], origin[start:stop]
            )
            if elsewhere <= limit:
                seen.add(snapped[p.component][p.name])
        start = stop
        if p.kind == "enum":
            probes += [space.replace(center, {p.label: v}) for v in p.values if v not in seen]
        elif len(seen) == 1:
            probes += [space.replace(center, {p.label: v}) for v in p.neighbours(own)]
    return [settings for settings in probes if space.key(settings) not in tried]


def _initial_point(
    space: SearchSpace,
    trials: Sequence[Trial],
    incumbent: Trial | None,
    tried: set[tuple[Any, ...]],
    rng: random.Random,
    options: StrategyOptions,
) -> Settings:
    """A point of the initial design, not tried yet: near the best trial so far (at first the
    described values), or anywhere when every trial is about equally infeasible (``_flat``)."""
    if incumbent is None or _flat(trials):
        return _random_point(space, tried, rng)
    center = space.snap(incumbent.settings)
    point = _first_untried(
        space, tried, lambda: _near(space, center, options.initial_radius, INITIAL_ENUM_CHANGE, rng)
    )
    return point or _random_point(space, tried, rng)


def _flat(trials: Sequence[Trial]) -> bool:
    """Whether every trial is infeasible and about as far from meeting each constraint.

    Margins within FLAT_SPREAD of each other (after clamping) mean the surface gives no
    direction; with no margins given, the total violations are compared the same way.
    """
    if len(trials) < 2 or any(t.violation == 0 for t in trials):
        return False
    columns = margin_outputs(trials, trials)
    return all(max(column) - min(column) < FLAT_SPREAD for column in columns)


def _first_untried(
    space: SearchSpace, tried: set[tuple[Any, ...]], draw: Callable[[], Settings]
) -> Settings | None:
    """The first of up to PROPOSAL_ATTEMPTS draws not tried yet, or None."""
    for _ in range(PROPOSAL_ATTEMPTS):
        candidate = draw()
        if space.key(candidate) not in tried:
            return candidate
    return None


def _random_point(space: SearchSpace, tried: set[tuple[Any, ...]], rng: random.Random) -> Settings:
    # When every draw was tried already (a tiny space), repeating a point beats stopping the search.
    return _first_untried(space, tried, lambda: space.sample(rng)) or space.sample(rng)
