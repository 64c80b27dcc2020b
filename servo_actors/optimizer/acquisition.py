"""Model-based proposals over the whole grid: constrained expected improvement with numpy GPs.

Once a search has a few trials, ``propose_by_model`` fits one Gaussian process (gp.py) to the
objective (log scale when positive) and one to each constraint's margin (``constraint_margin``:
<= 0 met), and picks, among a few thousand candidate settings that were not tried, the one with
the largest *constrained expected improvement*, the feasibility weighed twice
(``FEASIBILITY_POWER``)::

    EI(x) * P(every margin <= 0 at x) ** 2

EI is over the cheapest trial that met every constraint with room to be confirmed
(``CONFIRM_ROOM``; else the cheapest that met them); with none yet, the probability of
feasibility alone (ties to the lower predicted objective). Candidates likely enough to be feasible
(``LIKELY_FEASIBLE``) are preferred when any of them promises an improvement (``PROMISING``;
else those at least ``DOUBTFUL_FEASIBLE``): a far-off setting starved of CPU is cheap, and its
large EI would otherwise outweigh a small feasibility.

Enum ties come first: when a feasible trial at the best one's range values but another enum value
ties it on the objective (``ENUM_TIE``) with room inside every bound (``TIE_SLACK``), and no
cheaper one-step move from that tie was measured yet, the next proposal is the likeliest feasible
of the cheaper one-step moves of a range from it. The models share what they learn about a range
across an enum's values, and an enum value can move a range's cliff: on the demo, memory can go a
step or two lower with gc=parallel than with g1 (less heap), although at equal memory parallel
is a little slower; the models, having seen g1 fail at lower memory, would not try it. On the
demo's own run (scripts/bench_search.py, 30 steps) this took the mean recommendation from 1.022 to
1.020 times the optimum over seeds 0-199 (at the optimum on 119 seeds instead of 115), and from
1.029 to 1.025 over seeds 200-399, which no setting was chosen on.

Candidates, as grid indices so that a thousand cost little: every one- and two-setting step from
the best trials (``LOCAL_CENTERS``), and random points within ``LOCAL_RADIUS`` (unit coordinates,
per setting) of the best one (``LOCAL_CANDIDATES``). Nothing far away: on the demo's problem,
candidates from the whole grid made a third of the proposals saturate the service for nothing
(scripts/bench_search.py measured 1.04-1.05 times the optimum at 32 evaluations with them, 1.02
without). A continuous range is put on a grid of ``CONTINUOUS_POINTS`` values for this.

Margins are modelled squashed smoothly into +-``MARGIN_CAP`` (a factor of e from the bound): far
past a bound only its side matters, and a saturated service's +3 (twenty times the bound) no
longer sets the models' scale. Measured, not derived: with the margins within +-1 and the
feasibility squared, the demo's own run (scripts/bench_search.py, 200 seeds: BENCHMARKS.md)
recommended 1.022 times the optimum after 30 steps on average instead of 1.034 (within +-3, the
feasibility once; before the enum ties above), and the one-reading benchmark gets 1.062 / 1.017 at 16 / 32 evaluations
instead of 1.071 / 1.024.

An enum's length scale in the margins' processes is bounded (``ENUM_MARGIN_SCALE``): with the
trials near a bound mostly at one enum value, the likelihood otherwise makes every value share that
value's cliff. With it, ``CONFIRM_ROOM`` and ``DOUBTFUL_FEASIBLE``, the demo's own run after 30
steps recommends 1.014 times the optimum over seeds 0-199 instead of 1.020, 1.019 instead of 1.029
over seeds 400-599, and 1.019 instead of 1.025 over seeds 200-399, on which nothing was chosen
(BENCHMARKS.md).

Pure: the only randomness is drawn from the ``random.Random`` passed in.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servo_actors.optimizer.gp import GaussianProcess, squared_differences
from servo_actors.optimizer.space import ENUM_SCALE, Parameter, SearchSpace, Settings

__all__ = [
    "CONFIRM_ROOM",
    "CONTINUOUS_POINTS",
    "DOUBTFUL_FEASIBLE",
    "ENUM_MARGIN_SCALE",
    "ENUM_TIE",
    "FEASIBILITY_POWER",
    "Grid",
    "LIKELY_FEASIBLE",
    "LOCAL_CANDIDATES",
    "LOCAL_CENTERS",
    "LOCAL_RADIUS",
    "MARGIN_CAP",
    "MODEL_TRIALS",
    "PROMISING",
    "TIE_SLACK",
    "ModelTrial",
    "propose_by_model",
]

MODEL_TRIALS = 48
"""At most this many trials, the nearest to the best one, are modelled: a fit costs O(n^3)."""
LOCAL_CANDIDATES = 800
LOCAL_CENTERS = 8
LOCAL_RADIUS = 0.15
CONTINUOUS_POINTS = 101
FEASIBILITY_POWER = 2.0
"""How many times the probability of feasibility weighs in the score: twice favours the settings
the margins' models are surer of, where a budget of tens of steps gains most."""
LIKELY_FEASIBLE = 0.3
"""The probability of feasibility a candidate needs to be preferred (when any has it)."""
PROMISING = 1e-4
"""A likely feasible candidate whose score (EI x feasibility squared, EI in the objective's log
units) is below this promises nearly nothing: when none of them reaches it, the preference falls
to ``DOUBTFUL_FEASIBLE``."""
DOUBTFUL_FEASIBLE = 0.1
"""The probability of feasibility preferred once the likely feasible candidates promise nothing
(``PROMISING``): late in a search the safe settings nearby are known, and a step that may fail
but could pay (a lower memory with another gc) teaches more than a safe one that cannot. It still
keeps out what the margins' models are nearly sure fails (a starved service)."""
MARGIN_CAP = 1.0
"""Margins are modelled as ``MARGIN_CAP * tanh(margin / MARGIN_CAP)``: unchanged near the bound,
within +-this far from it (a log ratio: a factor of e), where only the side of the bound matters."""
ENUM_TIE = 0.01
"""A feasible trial that differs from the best one only in enum values, and whose objective (as
modelled: a log ratio when positive) is within this of it, is a *tie*: the models cannot tell which
of the two enum values lets the ranges go further, so the cheaper one-step moves from the tie are
measured before the usual choice (``_step_from_a_tie``)."""
TIE_SLACK = 0.05
"""A tie counts only when it meets every constraint by at least this margin (a log ratio: 5 %
inside each bound); one that only just met them leaves no room for a cheaper step."""
ENUM_MARGIN_SCALE = 1.6
"""The longest length scale an enum may take in the margins' processes (two values are 1 apart:
a correlation of about 0.75). An enum value can move a range's cliff (on the demo, gc=parallel
holds at a memory where g1 runs out of heap), and while the trials near the bound share one value
the likelihood favours the longest scale, under which every value inherits that value's cliff.
The objective's process is not bounded: cost does not depend on the enum there, and bounding it
measured worse."""
CONFIRM_ROOM = 0.01
"""The improvement is measured over the cheapest feasible trial that met every constraint by at
least this (a log ratio: 1 % inside each bound), when there is one. A reading just inside a bound
rarely holds up when confirmation measures it again (confirm.py: the mean plus two standard
errors must hold), so the search goes on looking for settings about as cheap with room, instead of
counting that reading as already won."""
_TINY = 1e-12


@dataclass(frozen=True)
class Grid:
    """The free settings of a space as grid indices, with a feature table per setting."""

    parameters: tuple[Parameter, ...]
    values: tuple[tuple[Any, ...], ...]  # per setting, the values it may take, in order
    tables: tuple[np.ndarray, ...]  # per setting, the features of each value (rows)
    units: tuple[np.ndarray, ...]  # per range setting, each value's unit coordinate (else empty)
    groups: tuple[tuple[int, ...], ...]  # per setting, its feature columns

    @classmethod
    def of(cls, space: SearchSpace) -> Grid:
        return _grid(space)

    @property
    def sizes(self) -> np.ndarray:
        return np.array([len(v) for v in self.values])

    def features(self, index: np.ndarray) -> np.ndarray:
        """(m, d) features of (m, settings) index rows."""
        return np.hstack([table[index[:, k]] for k, table in enumerate(self.tables)])

    def index_of(self, settings: Settings) -> list[int]:
        """The grid index of each free setting of ``settings``: the nearest value."""
        row = []
        for p, values, units in zip(self.parameters, self.values, self.units, strict=True):
            value = settings[p.component][p.name]
            if p.kind == "enum":
                row.append(values.index(value) if value in values else 0)
            elif p.grid_points is not None:
                steps = round((float(value) - p.minimum) / p.step)
                row.append(min(max(steps, 0), len(values) - 1))
            else:
                row.append(int(np.abs(units - p.unit(p.snap(value))).argmin()))
        return row

    def settings(self, space: SearchSpace, index: np.ndarray) -> Settings:
        changes = {
            p.label: values[int(i)] for p, values, i in zip(self.parameters, self.values, index, strict=True)
        }
        return space.replace(space.current(), changes)

    def keys(self, index: np.ndarray) -> np.ndarray:
        """One integer per index row (mixed radix), to find rows already tried."""
        sizes = self.sizes
        radix = np.concatenate([[1], np.cumprod(sizes[:-1])]).astype(np.int64)
        return (np.atleast_2d(index).astype(np.int64) * radix).sum(axis=1)

    def sample(self, generator: np.random.Generator, count: int) -> np.ndarray:
        return np.column_stack([generator.integers(0, size, count) for size in self.sizes])

    def steps_from(self, center: np.ndarray) -> np.ndarray:
        """Every one-setting step (a grid step either way, or another enum value) and every pair of them."""
        singles: list[tuple[int, int]] = []
        for k, p in enumerate(self.parameters):
            size = len(self.values[k])
            if p.kind == "enum":
                singles += [(k, v) for v in range(size) if v != center[k]]
            else:
                singles += [(k, v) for v in (center[k] - 1, center[k] + 1) if 0 <= v < size]
        rows = []
        for a, (k, v) in enumerate(singles):
            row = center.copy()
            row[k] = v
            rows.append(row)
            for k2, v2 in singles[a + 1 :]:
                if k2 != k:
                    pair = row.copy()
                    pair[k2] = v2
                    rows.append(pair)
        return np.array(rows, dtype=np.int64).reshape(-1, len(center))

    def near(
        self, generator: np.random.Generator, center: np.ndarray, radius: float, count: int
    ) -> np.ndarray:
        """Random rows within ``radius`` (unit coordinates) of ``center``; enums change with probability 1/3."""
        columns = []
        for k, p in enumerate(self.parameters):
            size = len(self.values[k])
            if p.kind == "enum":
                keep = generator.random(count) < 2 / 3
                columns.append(np.where(keep, center[k], generator.integers(0, size, count)))
            else:
                units = self.units[k]
                target = units[center[k]] + generator.uniform(-radius, radius, count)
                columns.append(np.abs(units[None, :] - target[:, None]).argmin(axis=1))
        return np.column_stack(columns)


@functools.lru_cache(maxsize=16)
def _grid(space: SearchSpace) -> Grid:
    parameters = space.free
    values, tables, units, groups = [], [], [], []
    column = 0
    for p in parameters:
        if p.kind == "enum":
            choices = tuple(p.values)
            table = np.eye(len(choices)) * ENUM_SCALE
            unit = np.zeros(0)
        else:
            points = p.grid_points
            if points is None:
                choices = tuple(p.from_unit(i / (CONTINUOUS_POINTS - 1)) for i in range(CONTINUOUS_POINTS))
            else:
                choices = tuple(p.value_at(i) for i in range(points))
            unit = np.array([p.unit(v) for v in choices])
            table = unit[:, None]
        values.append(choices)
        tables.append(table)
        units.append(unit)
        groups.append(tuple(range(column, column + table.shape[1])))
        column += table.shape[1]
    return Grid(tuple(parameters), tuple(values), tuple(tables), tuple(units), tuple(groups))


def _normal_cdf(z: np.ndarray) -> np.ndarray:
    """Φ(z) through erf's approximation 7.1.26 of Abramowitz and Stegun (error below 1.5e-7)."""
    x = np.abs(z) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-x * x)
    return 0.5 * (1.0 + np.sign(z) * erf)


def _normal_pdf(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)


@dataclass(frozen=True)
class ModelTrial:
    """What ``propose_by_model`` needs of a trial: settings, objective (lower is better, None if
    unknown), whether it met every constraint, and each constraint's margin (inf if unknown)."""

    settings: Settings
    objective: float | None
    feasible: bool
    margins: tuple[float, ...]


def _squashed(margin: float) -> float:
    """A margin as modelled: itself near the bound, flattening smoothly to +-``MARGIN_CAP`` (inf to the cap)."""
    return MARGIN_CAP * math.tanh(margin / MARGIN_CAP)


def _rank(trial: ModelTrial) -> tuple[int, float]:
    """Feasible trials by objective first, then the others by their worst margin."""
    if trial.feasible and trial.objective is not None:
        return (0, trial.objective)
    return (1, max(trial.margins, default=math.inf))


def _step_from_a_tie(
    grid: Grid,
    tried_index: np.ndarray,
    order: Sequence[int],
    objective: np.ndarray,
    margins: np.ndarray,
    pool: np.ndarray,
    mean: np.ndarray,
    feasibility: np.ndarray,
) -> int | None:
    """The row of ``pool`` to try from a tie of the best trial, or None (see ``ENUM_TIE``).

    A tie is a feasible trial at the best one's range values with other enum values and an
    objective within ``ENUM_TIE`` of it, meeting every constraint by ``TIE_SLACK``. From the first
    tie none of whose cheaper one-step moves
    was measured yet: the untried one-step move of a single range that the objective's model
    predicts cheaper than the tie, the likeliest feasible of them. One such move per tie: a tie
    that only looked feasible (a reading just inside a bound) costs one step, not a descent.
    """
    best = order[0]
    ranges = np.array([p.kind == "range" for p in grid.parameters])
    for i in order[1:]:
        if objective[i] > objective[best] + ENUM_TIE:
            break
        elsewhere = (tried_index[i][ranges] != tried_index[best][ranges]).any()
        if elsewhere or margins[i].max(initial=-np.inf) > -TIE_SLACK:
            continue
        tried_moves = tried_index != tried_index[i][None, :]
        if (
            (tried_moves.sum(axis=1) == 1)
            & ~tried_moves[:, ~ranges].any(axis=1)
            & (np.abs(tried_index - tried_index[i][None, :]).sum(axis=1) == 1)
            & (objective < objective[i])
        ).any():
            continue  # a cheaper step from this tie was measured already: the usual choice goes on
        moved = pool != tried_index[i][None, :]
        steps = (moved.sum(axis=1) == 1) & ~moved[:, ~ranges].any(axis=1) & (mean < objective[i])
        if steps.any():
            return int(np.argmax(np.where(steps, feasibility, -np.inf)))
    return None


def propose_by_model(space: SearchSpace, trials: Sequence[ModelTrial], rng: random.Random) -> Settings | None:
    """The untried settings with the largest constrained expected improvement; None when the
    models cannot be fitted (too few trials) or every candidate was tried."""
    if not space.free or len(trials) < 2:
        return None
    grid = Grid.of(space)
    generator = np.random.default_rng(rng.getrandbits(64))
    every_index = np.array([grid.index_of(t.settings) for t in trials])
    tried_keys = grid.keys(every_index)
    if len(trials) > MODEL_TRIALS:
        features = grid.features(every_index)
        center = features[min(range(len(trials)), key=lambda i: _rank(trials[i]))]
        nearest = np.argsort(((features - center) ** 2).sum(axis=1), kind="stable")[:MODEL_TRIALS]
        trials = [trials[i] for i in sorted(nearest)]
        every_index = every_index[sorted(nearest)]
    tried_index = every_index
    x = grid.features(tried_index)
    known = [t.objective for t in trials if t.objective is not None and math.isfinite(t.objective)]
    if not known:
        return None
    log_scale = min(known) > 0
    scale = np.log if log_scale else (lambda v: np.asarray(v, dtype=float))
    worst = float(np.max(scale(np.array(known))))
    objective = np.array(
        [
            float(scale(t.objective)) if t.objective is not None and math.isfinite(t.objective) else worst
            for t in trials
        ]
    )
    count = max(len(t.margins) for t in trials)
    margins = np.array(
        [
            [
                _squashed(t.margins[j]) if j < len(t.margins) and not math.isnan(t.margins[j]) else MARGIN_CAP
                for j in range(count)
            ]
            for t in trials
        ]
    ).reshape(len(trials), count)
    models = [GaussianProcess.fit(x, objective, grid.groups)]
    longest = [ENUM_MARGIN_SCALE if p.kind == "enum" else math.inf for p in grid.parameters]
    models += [GaussianProcess.fit(x, margins[:, j], grid.groups, longest) for j in range(count)]
    if any(model is None for model in models):
        return None

    feasible = [i for i, t in enumerate(trials) if t.feasible and t.objective is not None]
    order = sorted(feasible, key=lambda i: objective[i]) or sorted(
        range(len(trials)), key=lambda i: margins[i].max(initial=0.0)
    )
    candidates = []
    for i in order[:LOCAL_CENTERS]:
        candidates.append(grid.steps_from(tried_index[i]))
    candidates.append(grid.near(generator, tried_index[order[0]], LOCAL_RADIUS, LOCAL_CANDIDATES))
    pool = np.vstack(candidates)
    keys = grid.keys(pool)
    _, first = np.unique(keys, return_index=True)
    pool, keys = pool[np.sort(first)], keys[np.sort(first)]
    pool = pool[~np.isin(keys, tried_keys)]
    if not len(pool):
        return None

    features = grid.features(pool)
    per_column = squared_differences(features, x)  # shared by every model
    mean, sd = models[0].predict(features, per_column)  # type: ignore[union-attr]  # None returned early above
    feasibility = np.ones(len(pool))
    for model in models[1:]:
        margin_mean, margin_sd = model.predict(features, per_column)  # type: ignore[union-attr]  # as above
        feasibility *= _normal_cdf(-margin_mean / np.maximum(margin_sd, _TINY))
    if feasible:
        # The reference of the improvement: the cheapest feasible trial with room to be confirmed.
        roomy = [i for i in order if margins[i].max(initial=-np.inf) <= -CONFIRM_ROOM]
        best = float(objective[roomy[0] if roomy else order[0]])
        z = (best - mean) / np.maximum(sd, _TINY)
        improvement = (best - mean) * _normal_cdf(z) + sd * _normal_pdf(z)
        score = improvement * feasibility**FEASIBILITY_POWER
        # Candidates likely enough to be feasible come first: far-off cheap settings have a large
        # EI that a small feasibility does not damp enough (a service starved of CPU is cheap).
        likely = feasibility >= LIKELY_FEASIBLE
        if likely.any() and float(score[likely].max()) < PROMISING:
            likely = feasibility >= DOUBTFUL_FEASIBLE
        if likely.any() and float(score[likely].max()) > _TINY:
            score = np.where(likely, score, 0.0)
        if float(score.max()) <= _TINY:
            score = feasibility - 1e-6 * mean  # nothing to gain: the likeliest feasible, cheaper first
        step = _step_from_a_tie(grid, tried_index, order, objective, margins, pool, mean, feasibility)
        if step is not None:
            return grid.settings(space, pool[step])
    else:
        score = feasibility - 1e-6 * mean
    return grid.settings(space, pool[int(np.argmax(score))])
