"""The search algorithm: which settings to try next, given the described settings and the history.

Pure: no I/O and no clock; randomness comes only from the ``random.Random`` passed in, and the
proposal depends only on (space, history, rng), so a resumed search proposes what the first run
would have. A ``Trial`` is one finished step as the search sees it: its settings, its objective
(lower is better), its total violation (0 when feasible) and, per constraint, its *margin*
(``constraint_margin``: <= 0 met, > 0 violated, a log ratio to the bound).

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
   models cannot be fitted.

On the synthetic application (minimize cost, p99_latency <= 250, error_rate <= 0.01; 20 seeds,
one noisy reading per evaluation) the cheapest step that looked feasible is on average 1.07 times
each seed's optimum at 16 evaluations and 1.02 at 32 (the trust region alone: 1.11 and 1.08;
random sampling 1.27). The model probes the constraint's boundary: ~60 % of its proposals read
infeasible (the trust region alone: ~30 %), about a third of those twice or more over a bound
(confirm.py keeps a step that only looked feasible from being recommended). A model
proposal with 31 trials takes ~15 ms of CPU. Measured by scripts/bench_search.py (BENCHMARKS.md),
kept by tests/optimizer_search/test_optimizer_search_strategy_synthetic.py.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from servo_actors.optimizer.acquisition import ModelTrial, propose_by_model
from servo_actors.optimizer.gp import Prediction, Surrogate
from servo_actors.optimizer.space import (
    GRID_DECIMALS,
    Parameter,
    SearchSpace,
    Settings,
    parameter_from_description,
)

__all__ = [
    "GRID_DECIMALS",
    "Parameter",
    "SearchSpace",
    "SearchStatus",
    "Settings",
    "StrategyOptions",
    "Trial",
    "constraint_margin",
    "parameter_from_description",
    "propose",
    "replay",
]

# How many random draws to make before giving up on finding a point not tried yet.
PROPOSAL_ATTEMPTS = 64
# Margins are modelled within +-this (a factor of e^3 ~ 20 from the bound): beyond it, only the
# sign matters, and a saturated service 80x over its latency bound must not swamp the model.
MARGIN_CAP = 3.0
# The margin assumed for a trial that met its constraints when the caller gave no margins.
UNKNOWN_SLACK = -0.1
# Infeasible trials whose margins all lie within this of each other (a factor of ~1.2 in a
# log ratio) show no way out: a saturated service is slow everywhere.
FLAT_SPREAD = 0.2
# Chance that each enum setting changes in a point of the initial design.
INITIAL_ENUM_CHANGE = 0.5
_TINY = 1e-12


def constraint_margin(value: float | None, op: str, bound: float) -> float:
    """How far ``value`` is from meeting ``value op bound``: <= 0 met, > 0 violated, inf if unknown.

    A log ratio when value and bound are both positive (latency 500 against 250 is +0.69, 125
    is -0.69: the same size either way), else the difference relative to the bound's size. On
    the bound it is 0 (even for a strict ``<``: the step's feasibility is judged elsewhere).
    """
    if value is None or isinstance(value, bool) or not math.isfinite(value):
        return math.inf
    if value > 0 and bound > 0:
        difference = math.log(value / bound)
    else:
        difference = (value - bound) / (abs(bound) or 1.0)
    if op in ("<=", "<"):
        return difference
    if op in (">=", ">"):
        return -difference
    if op == "==":
        return abs(difference)
    raise ValueError(f"unknown constraint operator {op!r} (<= < >= > ==)")


@dataclass(frozen=True)
class Trial:
    """A finished step as the search sees it.

    ``objective``: lower is better (the caller negates a maximized metric); None when unknown.
    ``violation``: 0 when every constraint held; ``math.inf`` for a failed step or a missing metric.
    ``informative``: False for a cancelled step (tried, but it says nothing about its settings).
    ``margins``: ``constraint_margin`` of each constraint, in the plan's order (may be empty).
    """

    settings: Settings
    objective: float | None
    violation: float
    informative: bool = True
    margins: tuple[float, ...] = ()

    @property
    def rank(self) -> tuple[int, float]:
        """Sort key, smallest best: feasible by objective, then infeasible by violation."""
        if self.violation == 0:
            return (0, self.objective if self.objective is not None else math.inf)
        return (1, self.violation)


@dataclass(frozen=True)
class StrategyOptions:
    """The knobs of the search; the defaults suit budgets of 10-50 steps over a few settings.

    Distances are in unit coordinates (each range spans 1: space.py).
    """

    initial_samples: int = 4  # trials (the baseline counts) before the model is used
    initial_radius: float = 0.1  # how far the initial design strays from the described values
    radius: float = 0.2  # trust radius: how far from the incumbent candidates reach
    min_radius: float = 0.2
    max_radius: float = 0.4
    growth: float = 1.5  # the radius grows by this factor after each improvement
    failure_tolerance: int = 2  # consecutive trials without improvement that halve it
    candidates: int = 150  # random candidates drawn within the trust radius
    enum_change_probability: float = 0.3  # chance that each enum changes in a random candidate
    model_trials: int = 20  # the surrogate is fitted on this many trials nearest the incumbent
    improve_probability: float = 0.5  # predicted feasibility an improvement needs
    safe_probability: float = 0.6  # predicted feasibility a probe or an expansion needs
    probe_distance: float = 0.2  # trials this close (in the other settings) show a setting's effect
    targets: int = 10  # promising points an expansion is chosen to learn about
    model_after: int = 6  # from this many trials on, proposals come from acquisition.py's GPs


@dataclass(frozen=True)
class SearchStatus:
    """Where the search stands after replaying the history (for proposals and for display)."""

    incumbent: Trial | None
    radius: float
    exploring: bool


def replay(history: Sequence[Trial], options: StrategyOptions) -> SearchStatus:
    """The incumbent and the trust radius that ``history`` leads to (cancelled trials skipped)."""
    trials = [t for t in history if t.informative]
    if len(trials) < options.initial_samples:
        return SearchStatus(min(trials, key=lambda t: t.rank, default=None), options.radius, True)
    incumbent = min(trials[: options.initial_samples], key=lambda t: t.rank)
    radius, failures = options.radius, 0
    for trial in trials[options.initial_samples :]:
        if trial.rank < incumbent.rank:
            incumbent, failures = trial, 0
            radius = min(radius * options.growth, options.max_radius)
        else:
            failures += 1
            if failures >= options.failure_tolerance:
                radius, failures = max(radius / 2, options.min_radius), 0
    return SearchStatus(incumbent, radius, False)


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
    if len(trials) >= options.model_after:
        chosen = propose_by_model(space, [_model_trial(t) for t in trials], rng)
        if chosen is not None:
            return chosen
    if status.exploring or status.incumbent is None:
        return _initial_point(space, trials, status.incumbent, tried, rng, options)
    center = space.snap(status.incumbent.settings)
    beliefs = _Beliefs.fit(space, trials, status.incumbent, center, options)
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


@dataclass(frozen=True)
class _Scored:
    """A candidate as the surrogate sees it; ``mean`` and ``improvement`` in model units."""

    settings: Settings
    features: list[float]
    prediction: Prediction
    mean: float
    improvement: float
    feasibility: float


class _Beliefs:
    """The surrogate fitted around the incumbent, read as objective, improvement and feasibility."""

    def __init__(self, space: SearchSpace, model: Surrogate, best: float | None) -> None:
        self.space = space
        self.model = model
        self.best = best  # the feasible incumbent's objective in model units, None if infeasible

    @classmethod
    def fit(
        cls,
        space: SearchSpace,
        trials: Sequence[Trial],
        incumbent: Trial,
        center: Settings,
        options: StrategyOptions,
    ) -> _Beliefs | None:
        origin = space.encode(center)
        rows = [(space.encode(space.snap(t.settings)), t) for t in trials]
        rows.sort(key=lambda row: _squared(row[0], origin))  # stable: ties keep history order
        rows = rows[: options.model_trials]
        chosen = [t for _, t in rows]
        values = [_known(t.objective) for t in chosen]
        known = [v for v in values if v is not None]
        scale: Callable[[float], float] = math.log if known and min(known) > 0 else float
        worst = max((scale(v) for v in known), default=0.0)  # a missing objective counts as the worst
        objective = [scale(v) if v is not None else worst for v in values]
        model = Surrogate.fit(
            [x for x, _ in rows],
            [objective, *_margin_outputs(chosen, trials)],
            _one_group(rows[0][0]),
        )
        if model is None:
            return None
        best = _known(incumbent.objective) if incumbent.violation == 0 else None
        if best is not None and scale is math.log and best <= 0:
            best = None  # cannot happen while the incumbent is among the chosen; no log of it
        return cls(space, model, scale(best) if best is not None else None)

    def score(self, candidates: Sequence[Settings]) -> list[_Scored]:
        """Each candidate as the model sees it (one pass over them all)."""
        features = [self.space.encode(settings) for settings in candidates]
        predictions = self.model.predict_all(features)
        return [
            self._scored(settings, row, prediction)
            for settings, row, prediction in zip(candidates, features, predictions, strict=True)
        ]

    def _scored(self, settings: Settings, features: list[float], prediction: Prediction) -> _Scored:
        mean, sd = prediction.means[0], prediction.sds[0]
        feasibility = 1.0
        for margin, spread in zip(prediction.means[1:], prediction.sds[1:], strict=True):
            feasibility *= _normal_cdf(-margin / max(spread, _TINY))
        improvement = 0.0
        if self.best is not None:  # expected improvement over the incumbent
            z = (self.best - mean) / max(sd, _TINY)
            improvement = (self.best - mean) * _normal_cdf(z) + sd * _normal_pdf(z)
        return _Scored(settings, features, prediction, mean, improvement, feasibility)

    def lesson(self, point: _Scored, targets: Sequence[_Scored]) -> float:
        """How much measuring ``point`` would teach about the feasibility of ``targets``, by their promise."""
        cov = self.model.covariance
        noise = self.model.noise_ratios
        total = 0.0
        for output in range(1, len(point.prediction.means)):
            spread = (
                max(cov(output, point.features, point.prediction, point.features, point.prediction), 0.0)
                + noise[output]
            )
            total += sum(
                t.improvement
                * cov(output, point.features, point.prediction, t.features, t.prediction) ** 2
                / spread
                for t in targets
            )
        return total


def _one_group(features: Sequence[float]) -> list[tuple[int, ...]]:
    """Every column under one length scale: the trust region fits the few trials before
    ``model_after``, where a scale per setting overfits (scripts/bench_search.py, 20 seeds: 1.085
    against 1.071 times the optimum at 16 evaluations). acquisition.py, with more trials, fits one
    per setting."""
    return [tuple(range(len(features)))]


def _model_trial(trial: Trial) -> ModelTrial:
    margins = trial.margins
    if not margins:  # the caller gave no margins: one from the violation
        margins = (min(trial.violation, MARGIN_CAP) if trial.violation > 0 else UNKNOWN_SLACK,)
    return ModelTrial(trial.settings, trial.objective, trial.violation == 0, margins)


def _known(value: float | None) -> float | None:
    """The objective when it is a finite number."""
    return value if value is not None and math.isfinite(value) else None


def _margin_outputs(chosen: Sequence[Trial], trials: Sequence[Trial]) -> list[list[float]]:
    """Per constraint, the clamped margins of ``chosen``; one from the violations if none were given."""
    count = max((len(t.margins) for t in trials), default=0)
    if count == 0:
        if not any(t.violation > 0 for t in trials):
            return []
        return [[min(t.violation, MARGIN_CAP) if t.violation > 0 else UNKNOWN_SLACK for t in chosen]]
    outputs = []
    for j in range(count):
        column = []
        for t in chosen:
            margin = t.margins[j] if j < len(t.margins) else (math.inf if t.violation > 0 else UNKNOWN_SLACK)
            column.append(min(max(margin, -MARGIN_CAP), MARGIN_CAP) if not math.isnan(margin) else MARGIN_CAP)
        outputs.append(column)
    return outputs


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
            elsewhere = _squared(features, origin) - _squared(features[start:stop], origin[start:stop])
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
    columns = _margin_outputs(trials, trials)
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


def _squared(a: Sequence[float], b: Sequence[float]) -> float:
    return sum((x - y) ** 2 for x, y in zip(a, b, strict=True))


def _normal_cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def _normal_pdf(z: float) -> float:
    return math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
