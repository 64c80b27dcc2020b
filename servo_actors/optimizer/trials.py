"""What the search knows of its history: the trials, its knobs, and where it stands.

Holds ``Trial`` (a finished step as the search sees it), ``constraint_margin`` (how far a reading
is from meeting a constraint), ``StrategyOptions`` (the search's knobs) and the trust region:
``replay`` walks the history to the incumbent and the trust radius (``SearchStatus``), growing the
radius after each improvement and halving it after ``failure_tolerance`` trials without one.
Pure: no I/O, no clock, no randomness. strategy.py proposes from it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from servo_actors.optimizer.space import Settings

__all__ = [
    "SearchStatus",
    "StrategyOptions",
    "Trial",
    "constraint_margin",
    "replay",
]


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
