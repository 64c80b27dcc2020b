"""The surrogate: interpolation, a trend that extrapolates, uncertainty that grows away from data."""

from __future__ import annotations

import math

import pytest

from servo_actors.optimizer.gp import LENGTH_SCALES, Surrogate


def _fit(points: list[float], *functions) -> Surrogate:
    model = Surrogate.fit([[x] for x in points], [[f(x) for x in points] for f in functions])
    assert model is not None
    return model


def test_it_interpolates_a_smooth_function_between_its_points():
    def wave(x: float) -> float:
        return math.sin(6 * x) + x

    model = _fit([i / 10 for i in range(11)], wave)
    for x in (0.05, 0.35, 0.62, 0.91):
        assert model.predict([x]).means[0] == pytest.approx(wave(x), abs=0.05)


def test_the_trend_carries_beyond_the_data_and_the_uncertainty_grows_there():
    model = _fit([0.0, 0.1, 0.2, 0.3, 0.4, 0.5], lambda x: 2 * x)
    near, far = model.predict([0.25]), model.predict([0.95])
    assert near.means[0] == pytest.approx(0.5, abs=0.02)
    # The line keeps going (shrunk a little by the ridge); a bare GP would sag back toward 0.5.
    assert 1.4 < far.means[0] < 2.0
    assert far.sds[0] > 3 * near.sds[0]


def test_each_output_gets_its_own_length_scale():
    points = [i / 12 for i in range(13)]

    def slow(x: float) -> float:
        return x * x

    def quick(x: float) -> float:
        return 5.0 + math.sin(12 * x)

    model = _fit(points, slow, quick)
    slow_scale, quick_scale = model.length_scales
    assert slow_scale in LENGTH_SCALES and quick_scale in LENGTH_SCALES
    assert quick_scale < slow_scale
    # Both outputs come back in their own units.
    prediction = model.predict([0.45])
    assert prediction.means[0] == pytest.approx(slow(0.45), abs=0.02)
    assert prediction.means[1] == pytest.approx(quick(0.45), abs=0.1)


def test_nearby_points_are_correlated_and_far_ones_much_less():
    model = _fit([0.0, 0.2, 0.8, 1.0], lambda x: x * x)
    a, b, c = [0.5], [0.55], [0.2]
    pa, pb, pc = model.predict(a), model.predict(b), model.predict(c)
    own = model.covariance(0, a, pa, a, pa)
    assert own > 0
    assert model.covariance(0, a, pa, b, pb) > model.covariance(0, a, pa, c, pc)
    assert model.covariance(0, c, pc, c, pc) < own  # c was measured: little left to learn there


def test_fewer_than_two_points_give_no_model():
    assert Surrogate.fit([[0.5]], [[1.0]]) is None
    assert Surrogate.fit([], [[]]) is None
    assert Surrogate.fit([[0.1], [0.2]], []) is None


def test_repeated_points_and_constant_outputs_are_fine():
    model = Surrogate.fit([[0.5], [0.5], [0.5]], [[1.0, 1.0, 1.0], [2.0, 2.2, 1.8]])
    assert model is not None
    prediction = model.predict([0.5])
    assert prediction.means[0] == pytest.approx(1.0)
    assert prediction.means[1] == pytest.approx(2.0, abs=0.05)
    assert all(math.isfinite(v) for v in prediction.means + prediction.sds)
