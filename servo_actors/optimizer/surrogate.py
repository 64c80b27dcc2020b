"""A small Gaussian-process regression: what the search believes about settings it has not tried.

``Surrogate.fit(inputs, outputs)`` models several outputs (the objective, each constraint's
margin) measured at the same inputs (``SearchSpace.encode`` rows). Each output is a linear trend
(a ridge fit, so a setting that helped keeps helping beyond the data) plus a Gaussian process on
what the trend leaves over, with a Matérn 5/2 kernel. Each output gets the length scale of
``LENGTH_SCALES`` under which its points are best predicted from the others (closed-form
leave-one-out: a smooth cost and a latency with a cliff need different ones), and its
maximum-likelihood variance.

``predict(x)`` gives each output's mean and standard deviation at ``x``; ``covariance`` tells how
much observing one point would teach about another. Pure Python: meant for tens of points, where
fitting takes a few milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Candidate kernel length scales, in unit coordinates (a range spans 1).
LENGTH_SCALES = (0.15, 0.3, 0.6, 1.0)
# Measurement noise, as a fraction of each output's variance (also keeps the kernel invertible).
NUGGET = 1e-2
# Ridge penalty of the linear trend's slopes (outputs are standardized, features span 0-1): it
# keeps a trend fitted on few points modest. Measured against 0.01 and a leave-one-out choice:
# as good a search, with fewer infeasible trials.
RIDGE = 0.1
# Variances below this are treated as this (a constant output, a point on top of the data).
_TINY = 1e-12
_SQRT5 = math.sqrt(5.0)


def matern52(squared_distance: float, length_scale: float) -> float:
    """The Matérn 5/2 correlation of two points ``sqrt(squared_distance)`` apart."""
    r = _SQRT5 * math.sqrt(squared_distance) / length_scale
    return (1.0 + r + r * r / 3.0) * math.exp(-r)


@dataclass(frozen=True)
class Prediction:
    """Each output's mean and standard deviation at a point, and its whitened kernel rows."""

    means: list[float]
    sds: list[float]
    whitened: dict[float, list[float]]  # by length scale: L^-1 k(x, inputs)


class Surrogate:
    """A fitted model of several outputs; build it with ``Surrogate.fit``."""

    def __init__(self, inputs: list[list[float]], fits: list[_OutputFit]) -> None:
        self.inputs = inputs
        self._fits = fits
        self._lowers = {f.length_scale: f.lower for f in fits}  # one kernel row per distinct scale

    @property
    def length_scales(self) -> list[float]:
        """The length scale chosen for each output."""
        return [f.length_scale for f in self._fits]

    @classmethod
    def fit(cls, inputs: Sequence[Sequence[float]], outputs: Sequence[Sequence[float]]) -> Surrogate | None:
        """Fit every output on the same ``inputs``; None when there are fewer than two points."""
        points = [list(x) for x in inputs]
        n = len(points)
        if n < 2 or not outputs:
            return None
        rows = [[1.0, *x] for x in points]
        squared = [[_squared_distance(a, b) for b in points] for a in points]
        kernels = {}
        for length_scale in LENGTH_SCALES:
            matrix = [
                [matern52(squared[i][j], length_scale) + (NUGGET if i == j else 0.0) for j in range(n)]
                for i in range(n)
            ]
            lower = _cholesky(matrix)
            if lower is not None:
                kernels[length_scale] = (lower, _inverse_diagonal(lower))
        if not kernels:
            return None
        fits = [_OutputFit.fit(rows, y, kernels) for y in outputs]
        return cls(points, fits)

    def predict(self, x: Sequence[float]) -> Prediction:
        """Every output's mean and standard deviation at ``x`` (in the outputs' own units)."""
        distances = [_squared_distance(x, p) for p in self.inputs]
        rows, whitened, spreads = {}, {}, {}
        for scale, lower in self._lowers.items():
            row = [matern52(d, scale) for d in distances]
            w = _forward(lower, row)
            rows[scale], whitened[scale] = row, w
            spreads[scale] = max(1.0 + NUGGET - _dot(w, w), _TINY)
        features = [1.0, *x]
        means, sds = [], []
        for f in self._fits:
            means.append(f.mean + f.sd * (_dot(f.trend, features) + _dot(rows[f.length_scale], f.alpha)))
            sds.append(f.sd * math.sqrt(f.variance * spreads[f.length_scale]))
        return Prediction(means, sds, whitened)

    def covariance(
        self, output: int, a: Sequence[float], a_pred: Prediction, b: Sequence[float], b_pred: Prediction
    ) -> float:
        """Posterior covariance of ``output`` at two points, in units of that output's GP variance."""
        scale = self._fits[output].length_scale
        prior = matern52(_squared_distance(a, b), scale)
        return prior - _dot(a_pred.whitened[scale], b_pred.whitened[scale])


@dataclass(frozen=True)
class _OutputFit:
    """One output: standardization, linear trend, and the GP on the residuals."""

    mean: float
    sd: float
    trend: list[float]
    length_scale: float
    lower: list[list[float]]
    alpha: list[float]
    variance: float

    @classmethod
    def fit(
        cls,
        rows: list[list[float]],
        y: Sequence[float],
        kernels: dict[float, tuple[list[list[float]], list[float]]],
    ) -> _OutputFit:
        n = len(y)
        mean = sum(y) / n
        sd = math.sqrt(sum((v - mean) ** 2 for v in y) / n) or 1.0
        standardized = [(v - mean) / sd for v in y]
        trend = _ridge(rows, standardized)
        residual = [v - _dot(trend, r) for v, r in zip(standardized, rows, strict=True)]
        best = None
        for length_scale, (lower, inverse_diagonal) in kernels.items():
            alpha = _solve_cholesky(lower, residual)
            variance = max(_dot(residual, alpha) / n, _TINY)
            score = 0.0
            for i in range(n):
                # Leave-one-out: error alpha_i / [K^-1]_ii, variance s^2 / [K^-1]_ii.
                held_out = variance / inverse_diagonal[i]
                error = alpha[i] / inverse_diagonal[i]
                score += 0.5 * math.log(held_out) + 0.5 * error * error / held_out
            if best is None or score < best[0]:
                best = (score, length_scale, lower, alpha, variance)
        _, length_scale, lower, alpha, variance = best  # type: ignore[misc]  # the loop above ran at least once: best is set
        return cls(mean, sd, trend, length_scale, lower, alpha, variance)


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _squared_distance(a: Sequence[float], b: Sequence[float]) -> float:
    return sum((x - y) ** 2 for x, y in zip(a, b, strict=True))


def _ridge(rows: list[list[float]], targets: list[float]) -> list[float]:
    """Least squares with a ridge on every slope (not the intercept); zero slopes if singular."""
    size = len(rows[0])
    gram = [
        [sum(r[i] * r[j] for r in rows) + (RIDGE if i == j and i > 0 else 0.0) for j in range(size)]
        for i in range(size)
    ]
    moments = [sum(r[i] * y for r, y in zip(rows, targets, strict=True)) for i in range(size)]
    lower = _cholesky(gram)
    if lower is None:
        return [sum(targets) / len(targets)] + [0.0] * (size - 1)
    return _solve_cholesky(lower, moments)


def _cholesky(matrix: list[list[float]]) -> list[list[float]] | None:
    """Lower-triangular L with L L' = matrix; None when it is not positive definite."""
    n = len(matrix)
    lower = [[0.0] * n for _ in range(n)]
    for i in range(n):
        row = lower[i]
        for j in range(i + 1):
            other = lower[j]
            s = matrix[i][j] - sum(row[k] * other[k] for k in range(j))
            if i == j:
                if s <= _TINY:
                    return None
                row[i] = math.sqrt(s)
            else:
                row[j] = s / other[j]
    return lower


def _forward(lower: list[list[float]], b: Sequence[float]) -> list[float]:
    """x with L x = b."""
    x: list[float] = []
    for i, row in enumerate(lower):
        x.append((b[i] - sum(row[k] * x[k] for k in range(i))) / row[i])
    return x


def _backward(lower: list[list[float]], b: Sequence[float]) -> list[float]:
    """x with L' x = b."""
    n = len(b)
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (b[i] - sum(lower[k][i] * x[k] for k in range(i + 1, n))) / lower[i][i]
    return x


def _solve_cholesky(lower: list[list[float]], b: Sequence[float]) -> list[float]:
    return _backward(lower, _forward(lower, b))


def _inverse_diagonal(lower: list[list[float]]) -> list[float]:
    """diag((L L')^-1): the squared length of each column of L^-1 (L x = e_i gives column i)."""
    n = len(lower)
    diagonal = []
    for i in range(n):
        column = [0.0] * n  # entries above i stay 0: L^-1 is lower triangular
        column[i] = 1.0 / lower[i][i]
        for k in range(i + 1, n):
            row = lower[k]
            column[k] = -sum(row[m] * column[m] for m in range(i, k)) / row[k]
        diagonal.append(sum(value * value for value in column[i:]))
    return diagonal
