"""Deprecated: the search has one Gaussian process, ``servo_actors.optimizer.gp`` (README,
"Migration notes").

This module held a second, pure-Python one; on scripts/bench_search.py the numpy process of gp.py
searched better and in less CPU (BENCHMARKS.md), so issue 24 kept that one and the strategy's
trust region now reads it too (``gp.Surrogate``, the same interface). The old names import from
here for one release.
"""

from __future__ import annotations

from servo_actors.optimizer.gp import LENGTH_SCALES, RIDGE, Prediction, Surrogate, matern52

__all__ = ["LENGTH_SCALES", "NUGGET", "RIDGE", "Prediction", "Surrogate", "matern52"]

NUGGET = 1e-2
"""The retired process's fixed noise ratio; gp.py chooses each output's (``Surrogate.noise_ratios``)."""
