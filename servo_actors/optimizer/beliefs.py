"""The search's beliefs: a surrogate fitted on the trials around the incumbent, and how it reads.

Holds ``Beliefs`` (gp.py's ``Surrogate`` fitted on the trials nearest the incumbent: one output
for the objective, log scale when positive, and one per constraint margin, clamped to
``MARGIN_CAP``) and ``Scored`` (a candidate as it predicts it: mean, expected improvement over
the incumbent, and feasibility, the product over constraints of the chance each is met), with
``Beliefs.lesson``: how much measuring a point would teach about promising ones (posterior
covariance). strategy.py chooses among the candidates with them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from servo_actors.optimizer.gp import Prediction, Surrogate
from servo_actors.optimizer.space import SearchSpace, Settings
from servo_actors.optimizer.trials import StrategyOptions, Trial

__all__ = [
    "Beliefs",
    "MARGIN_CAP",
    "Scored",
    "UNKNOWN_SLACK",
    "margin_outputs",
    "squared_distance",
]

# Margins are modelled within +-this (a factor of e^3 ~ 20 from the bound): beyond it, only the
# sign matters, and a saturated service 80x over its latency bound must not swamp the model.
MARGIN_CAP = 3.0
# The margin assumed for a trial that met its constraints when the caller gave no margins.
UNKNOWN_SLACK = -0.1
_TINY = 1e-12


@dataclass(frozen=True)
class Scored:
    """A candidate as the surrogate sees it; ``mean`` and ``improvement`` in model units."""

    settings: Settings
    features: list[float]
    prediction: Prediction
    mean: float
    improvement: float
    feasibility: float


class Beliefs:
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
    ) -> Beliefs | None:
        origin = space.encode(center)
        rows = [(space.encode(space.snap(t.settings)), t) for t in trials]
        rows.sort(key=lambda row: squared_distance(row[0], origin))  # stable: ties keep history order
        rows = rows[: options.model_trials]
        chosen = [t for _, t in rows]
        values = [_known(t.objective) for t in chosen]
        known = [v for v in values if v is not None]
        scale: Callable[[float], float] = math.log if known and min(known) > 0 else float
        worst = max((scale(v) for v in known), default=0.0)  # a missing objective counts as the worst
        objective = [scale(v) if v is not None else worst for v in values]
        model = Surrogate.fit(
            [x for x, _ in rows],
            [objective, *margin_outputs(chosen, trials)],
            _one_group(rows[0][0]),
        )
        if model is None:
            return None
        best = _known(incumbent.objective) if incumbent.violation == 0 else None
        if best is not None and scale is math.log and best <= 0:
            best = None  # cannot happen while the incumbent is among the chosen; no log of it
        return cls(space, model, scale(best) if best is not None else None)

    def score(self, candidates: Sequence[Settings]) -> list[Scored]:
        """Each candidate as the model sees it (one pass over them all)."""
        features = [self.space.encode(settings) for settings in candidates]
        predictions = self.model.predict_all(features)
        return [
            self._scored(settings, row, prediction)
            for settings, row, prediction in zip(candidates, features, predictions, strict=True)
        ]

    def _scored(self, settings: Settings, features: list[float], prediction: Prediction) -> Scored:
        mean, sd = prediction.means[0], prediction.sds[0]
        feasibility = 1.0
        for margin, spread in zip(prediction.means[1:], prediction.sds[1:], strict=True):
            feasibility *= _normal_cdf(-margin / max(spread, _TINY))
        improvement = 0.0
        if self.best is not None:  # expected improvement over the incumbent
            z = (self.best - mean) / max(sd, _TINY)
            improvement = (self.best - mean) * _normal_cdf(z) + sd * _normal_pdf(z)
        return Scored(settings, features, prediction, mean, improvement, feasibility)

    def lesson(self, point: Scored, targets: Sequence[Scored]) -> float:
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


def _known(value: float | None) -> float | None:
    """The objective when it is a finite number."""
    return value if value is not None and math.isfinite(value) else None


def margin_outputs(chosen: Sequence[Trial], trials: Sequence[Trial]) -> list[list[float]]:
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


def squared_distance(a: Sequence[float], b: Sequence[float]) -> float:
    return sum((x - y) ** 2 for x, y in zip(a, b, strict=True))


def _normal_cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def _normal_pdf(z: float) -> float:
    return math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
