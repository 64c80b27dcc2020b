"""A Gaussian process in numpy, small and quick: what the search believes about untried settings.

``GaussianProcess.fit(x, y, groups)`` models one output measured at the rows of ``x`` (unit
coordinates, ``SearchSpace.encode``) as a linear trend (a ridge fit: a setting that helped keeps
helping past the data) plus a zero-mean process on what the trend leaves, with a Matérn 5/2
kernel that has one length scale per *group* of columns (a setting; an enum's indicator columns
share one): automatic relevance, so a setting that barely matters gets a long scale and one with
a cliff a short one. A caller may bound a group's length scale from above (``longest``): where
few points differ in that group, the likelihood cannot tell "irrelevant" from "not seen yet".

Hyperparameters by type-II maximum likelihood on small grids: the signal variance in closed form
(profiled), the length scales by coordinate ascent over ``LENGTH_SCALES`` (``SWEEPS`` passes over
the groups), the noise as a fraction of the signal over ``NOISE_RATIOS``. Each candidate costs one
Cholesky factorization of an n x n matrix, with jitter added until it succeeds; at the tens of
points a search has, a fit takes about a millisecond and predicting thousands of points less.

``predict(xs)`` gives the posterior mean and standard deviation of the *latent* function (noise
excluded) at each row of ``xs``, in the output's own units; ``correlation`` the posterior
covariance of two sets of points, in units of the signal variance.

``Surrogate`` is the same process for several outputs measured at the same inputs (the
objective, each constraint's margin), one point at a time in plain lists: what the strategy's
trust region (strategy.py) reads. This is the search's only Gaussian process: acquisition.py and
strategy.py both use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

LENGTH_SCALES = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2)
"""Candidate length scales of each group, in unit coordinates (a range spans 1)."""
INITIAL_SCALE = 0.4
NOISE_RATIOS = (1e-4, 1e-2, 0.05, 0.2)
"""Candidate noise variances, as a fraction of the signal variance."""
SWEEPS = 2
"""Passes of coordinate ascent over the groups' length scales."""
RIDGE = 0.1
"""Ridge penalty on the trend's slopes (outputs standardized, features within 0-1)."""
JITTER = 1e-8
"""Added to the diagonal, growing tenfold, until the Cholesky factorization succeeds."""
__all__ = [
    "INITIAL_SCALE",
    "JITTER",
    "LENGTH_SCALES",
    "NOISE_RATIOS",
    "RIDGE",
    "SWEEPS",
    "GaussianProcess",
    "Prediction",
    "Surrogate",
    "matern52",
    "squared_differences",
]

_JITTER_TRIES = 6
_SQRT5 = np.sqrt(5.0)
_TINY = 1e-12


def matern52(scaled_squared: np.ndarray) -> np.ndarray:
    """Matérn 5/2 correlation from squared distances already divided by the squared length scales."""
    r = _SQRT5 * np.sqrt(np.maximum(scaled_squared, 0.0))
    return (1.0 + r + r * r / 3.0) * np.exp(-r)


def squared_differences(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(m, n, d): the squared difference of every row of ``a`` and every row of ``b``, per column."""
    return (a[:, None, :] - b[None, :, :]) ** 2


def _profiled_likelihoods(kernels: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """Log marginal likelihood (signal variance profiled out) of each of a stack of kernel
    matrices (k, n, n) for ``residual``; -inf where a matrix is not positive definite."""
    n = len(residual)
    try:
        lower = np.linalg.cholesky(kernels + JITTER * np.eye(n))
    except np.linalg.LinAlgError:
        return np.array([_one_likelihood(kernel, residual) for kernel in kernels])
    solved = np.linalg.solve(lower, np.broadcast_to(residual[:, None], (len(kernels), n, 1)))[..., 0]
    variance = np.maximum((solved * solved).sum(axis=1) / n, _TINY)
    log_determinant = np.log(np.diagonal(lower, axis1=1, axis2=2)).sum(axis=1)
    return -0.5 * n * np.log(variance) - log_determinant


def _one_likelihood(kernel: np.ndarray, residual: np.ndarray) -> float:
    lower = _cholesky(kernel)
    if lower is None:
        return -np.inf
    solved = np.linalg.solve(lower, residual)
    variance = max(float(solved @ solved) / len(residual), _TINY)
    return -0.5 * len(residual) * np.log(variance) - float(np.log(np.diag(lower)).sum())


def _cholesky(matrix: np.ndarray) -> np.ndarray | None:
    jitter = JITTER
    eye = np.eye(len(matrix))
    for _ in range(_JITTER_TRIES):
        try:
            return np.linalg.cholesky(matrix + jitter * eye)
        except np.linalg.LinAlgError:
            jitter *= 10.0
    return None


def _trend(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Ridge coefficients of [1, x] (intercept not penalized)."""
    rows = np.hstack([np.ones((len(x), 1)), x])
    penalty = RIDGE * np.eye(rows.shape[1])
    penalty[0, 0] = 0.0
    try:
        return np.linalg.solve(rows.T @ rows + penalty, rows.T @ y)
    except np.linalg.LinAlgError:
        return np.concatenate([[y.mean()], np.zeros(x.shape[1])])


@dataclass(frozen=True)
class GaussianProcess:
    """A fitted process; build it with ``fit``."""

    x: np.ndarray
    inverse_scales: np.ndarray  # per column: 1 / its group's length scale
    center: float
    spread: float
    trend: np.ndarray
    alpha: np.ndarray  # K^-1 (residual)
    lower_inverse: np.ndarray  # L^-1
    variance: float  # signal variance, standardized units
    noise: float  # noise ratio chosen

    @property
    def length_scales(self) -> np.ndarray:
        return 1.0 / self.inverse_scales

    @classmethod
    def fit(
        cls,
        x: np.ndarray,
        y: Sequence[float] | np.ndarray,
        groups: Sequence[Sequence[int]],
        longest: Sequence[float] | None = None,
    ) -> GaussianProcess | None:
        """Fit on rows ``x`` (n, d) and values ``y``; ``groups`` lists the columns sharing a length
        scale; ``longest``, per group, the longest length scale it may take (default: any of
        ``LENGTH_SCALES``; the shortest is always allowed). None with fewer than two points."""
        x = np.asarray(x, dtype=float)
        values = np.asarray(y, dtype=float)
        n = len(values)
        if n < 2:
            return None
        center = float(values.mean())
        spread = float(values.std()) or 1.0
        standard = (values - center) / spread
        trend = _trend(x, standard)
        residual = standard - (trend[0] + x @ trend[1:])
        differences = (x[:, None, :] - x[None, :, :]) ** 2  # (n, n, d)
        per_group = np.stack([differences[:, :, list(columns)].sum(axis=2) for columns in groups])
        scales = np.full(len(groups), INITIAL_SCALE)
        noise = NOISE_RATIOS[1]
        eye = np.eye(n)
        every = np.array(LENGTH_SCALES)
        allowed = [
            every[(every <= limit) | (every == every.min())] for limit in (longest or [np.inf] * len(groups))
        ]
        ratios = np.array(NOISE_RATIOS)
        # Coordinate ascent; each step scores all the values of one coordinate in one batch.
        for _ in range(SWEEPS):
            for g in range(len(groups)):
                candidates = allowed[g]
                others = np.tensordot(1.0 / scales**2, per_group, axes=1) - per_group[g] / scales[g] ** 2
                squared = others[None] + per_group[g][None] / (candidates**2)[:, None, None]
                scores = _profiled_likelihoods(matern52(squared) + noise * eye, residual)
                scales[g] = candidates[int(np.argmax(scores))]
            correlation = matern52(np.tensordot(1.0 / scales**2, per_group, axes=1))
            scores = _profiled_likelihoods(correlation[None] + ratios[:, None, None] * eye, residual)
            noise = float(ratios[int(np.argmax(scores))])
        inverse_scales = np.zeros(x.shape[1])
        for columns, scale in zip(groups, scales, strict=True):
            inverse_scales[list(columns)] = 1.0 / scale
        lower = _cholesky(matern52(np.tensordot(1.0 / scales**2, per_group, axes=1)) + noise * eye)
        if lower is None:
            return None
        lower_inverse = np.linalg.inv(lower)
        alpha = lower_inverse.T @ (lower_inverse @ residual)
        variance = max(float(residual @ alpha) / n, _TINY)
        return cls(x, inverse_scales, center, spread, trend, alpha, lower_inverse, variance, noise)

    def predict(self, xs: np.ndarray, per_column: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation of the latent function at each row of ``xs``.

        ``per_column`` may give ``squared_differences(xs, x)``, shared by several processes fitted
        on the same points (it is most of the work for thousands of rows).
        """
        xs = np.asarray(xs, dtype=float)
        if per_column is None:
            per_column = squared_differences(xs, self.x)
        cross = matern52(np.einsum("mnd,d->mn", per_column, self.inverse_scales**2))  # (m, n)
        mean = self.trend[0] + xs @ self.trend[1:] + cross @ self.alpha
        whitened = np.einsum("ij,mj->im", self.lower_inverse, cross)  # (n, m); einsum: no BLAS threads
        latent = np.maximum(1.0 - (whitened * whitened).sum(axis=0), _TINY)
        sd = np.sqrt(self.variance * latent)
        return self.center + self.spread * mean, self.spread * sd

    def whitened(self, xs: np.ndarray, per_column: np.ndarray | None = None) -> np.ndarray:
        """(n, m): ``L^-1 k(x, xs)``, the fitted points' kernel rows at ``xs``, whitened; the
        posterior covariance of two points is their prior correlation minus the dot product of
        their columns here (``Surrogate.covariance``)."""
        xs = np.asarray(xs, dtype=float)
        if per_column is None:
            per_column = squared_differences(xs, self.x)
        cross = matern52(np.einsum("mnd,d->mn", per_column, self.inverse_scales**2))
        result: np.ndarray = np.einsum("ij,mj->im", self.lower_inverse, cross)
        return result

    def prior_correlation(self, a: Sequence[float], b: Sequence[float]) -> float:
        """The kernel's correlation of two points (1 at the same point)."""
        difference = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
        return float(matern52(np.asarray((difference * difference) @ self.inverse_scales**2)))


@dataclass(frozen=True)
class Prediction:
    """Each output's mean and standard deviation at one point (``Surrogate.predict``)."""

    means: list[float]
    sds: list[float]
    whitened: list[np.ndarray]
    """Per output, ``GaussianProcess.whitened`` at the point (for ``Surrogate.covariance``)."""


class Surrogate:
    """Several outputs measured at the same inputs, a ``GaussianProcess`` each; plain lists in and
    out, one point at a time. Build it with ``Surrogate.fit``."""

    def __init__(self, processes: list[GaussianProcess]) -> None:
        self._processes = processes

    @classmethod
    def fit(
        cls,
        inputs: Sequence[Sequence[float]],
        outputs: Sequence[Sequence[float]],
        groups: Sequence[Sequence[int]] | None = None,
    ) -> Surrogate | None:
        """Fit every output on the same ``inputs``; ``groups`` lists the columns sharing a length
        scale (default: each column its own). None with fewer than two points, no outputs, or an
        output the process cannot be fitted to."""
        if len(inputs) < 2 or not outputs:
            return None
        x = np.asarray([list(row) for row in inputs], dtype=float)
        if groups is None:
            groups = [(column,) for column in range(x.shape[1])]
        processes = []
        for y in outputs:
            process = GaussianProcess.fit(x, y, groups)
            if process is None:
                return None
            processes.append(process)
        return cls(processes)

    @property
    def length_scales(self) -> list[float]:
        """Each output's shortest length scale (its only one with a single group of columns)."""
        return [float(p.length_scales.min()) for p in self._processes]

    @property
    def noise_ratios(self) -> list[float]:
        """Each output's measurement noise, as a fraction of its signal variance."""
        return [p.noise for p in self._processes]

    def predict(self, x: Sequence[float]) -> Prediction:
        """Every output's mean and standard deviation at ``x`` (in the outputs' own units)."""
        return self.predict_all([x])[0]

    def predict_all(self, xs: Sequence[Sequence[float]]) -> list[Prediction]:
        """``predict`` at each of ``xs``, in one pass per output."""
        if not xs:
            return []
        rows = np.asarray([list(x) for x in xs], dtype=float)
        per_column = squared_differences(rows, self._processes[0].x)
        fitted = []
        for process in self._processes:
            mean, sd = process.predict(rows, per_column)
            fitted.append((mean.tolist(), sd.tolist(), process.whitened(rows, per_column)))
        return [
            Prediction(
                [means[k] for means, _, _ in fitted],
                [sds[k] for _, sds, _ in fitted],
                [whitened[:, k] for _, _, whitened in fitted],
            )
            for k in range(len(rows))
        ]

    def covariance(
        self, output: int, a: Sequence[float], a_pred: Prediction, b: Sequence[float], b_pred: Prediction
    ) -> float:
        """Posterior covariance of ``output`` at two points (``a_pred``, ``b_pred``: their
        predictions), in units of that output's signal variance."""
        process = self._processes[output]
        shared = float(a_pred.whitened[output] @ b_pred.whitened[output])
        return process.prior_correlation(a, b) - shared
