"""Hand-computed calibration scores of modular conformal calibration (ALGORITHMS.md §3, paper 001 §4.2)."""

import math

import numpy as np
import pytest
from scipy import stats

from calwatch.engine.regression.scores import (
    CDFPrediction,
    build_score_map,
    check_levels,
    rearrange_quantiles,
    solve_increasing,
)

PHI_1 = 0.8413447460685429  # Φ(1)


def score_map(prediction, pred, *, score="z", levels=None, members=None, weights=None):
    return build_score_map(
        prediction,
        pred,
        "pred",
        score=score,
        levels=None if levels is None else np.asarray(levels, dtype=float),
        members=members,
        weights=None if weights is None else np.asarray(weights, dtype=float),
    )


def col(values):
    return np.asarray(values, dtype=float).reshape(-1, 1)


def test_point_score_is_the_residual():
    m = score_map("point", np.array([1.0, 2.0]))
    np.testing.assert_array_equal(m.score(col([3.0, 1.0])), col([2.0, -1.0]))
    np.testing.assert_array_equal(m.inverse(col([2.0, -1.0])), col([3.0, 1.0]))
    np.testing.assert_array_equal(m.derivative(col([0.0, 0.0])), col([1.0, 1.0]))


def test_interval_score_is_zero_at_lower_and_one_at_upper():
    m = score_map("interval", np.array([[0.0, 4.0]]))
    np.testing.assert_allclose(
        m.score(np.array([[0.0, 4.0, 1.0, 5.0, -2.0]])), [[0.0, 1.0, 0.25, 1.25, -0.5]]
    )
    np.testing.assert_allclose(m.inverse(np.array([[0.5, -0.5]])), [[2.0, -2.0]])
    np.testing.assert_allclose(m.derivative(np.array([[7.0]])), [[0.25]])


def test_quantile_score_interpolates_levels_and_extends_end_slopes():
    # levels (.25, .5, .75) at q = (1, 2, 4): slopes .25 on [1, 2] and .125 on [2, 4]
    m = score_map("quantile", np.array([[1.0, 2.0, 4.0]]), levels=[0.25, 0.5, 0.75])
    y = np.array([[1.0, 1.5, 2.0, 3.0, 4.0, 0.0, -3.0, 6.0]])
    want = [[0.25, 0.375, 0.5, 0.625, 0.75, 0.0, -0.75, 1.0]]
    np.testing.assert_allclose(m.score(y), want)
    np.testing.assert_allclose(m.inverse(np.array(want)), y)
    np.testing.assert_allclose(m.derivative(np.array([[0.0, 1.5, 3.0, 9.0]])), [[0.25, 0.25, 0.125, 0.125]])


def test_quantile_score_rows_have_their_own_knots():
    m = score_map("quantile", np.array([[1.0, 2.0], [10.0, 14.0]]), levels=[0.2, 0.6])
    np.testing.assert_allclose(m.score(np.array([[1.5], [12.0]])), [[0.4], [0.4]])
    np.testing.assert_allclose(m.inverse(np.array([[0.6, 1.0]])), [[2.0, 3.0], [14.0, 18.0]])


def test_gaussian_cdf_and_z_scores():
    pred = np.array([[1.0, 2.0]])
    cdf = score_map("distribution", pred, score="cdf")
    z = score_map("distribution", pred, score="z")
    np.testing.assert_allclose(cdf.score(np.array([[1.0, 3.0, -1.0]])), [[0.5, PHI_1, 1 - PHI_1]])
    np.testing.assert_allclose(z.score(np.array([[1.0, 3.0, -1.0]])), [[0.0, 1.0, -1.0]])
    np.testing.assert_allclose(cdf.inverse(np.array([[0.5, PHI_1, 0.0, 1.0]])), [[1.0, 3.0, -np.inf, np.inf]])
    np.testing.assert_allclose(z.inverse(np.array([[1.0]])), [[3.0]])
    # dΦ((y−μ)/σ)/dy at y = μ is φ(0)/σ = 0.39894/2
    np.testing.assert_allclose(cdf.derivative(np.array([[1.0]])), [[0.19947114020071635]])
    np.testing.assert_allclose(z.derivative(np.array([[5.0]])), [[0.5]])
    assert cdf.score_range == (0.0, 1.0)
    assert z.score_range == (-math.inf, math.inf)


def test_ensemble_score_is_the_weighted_sum_and_inverts_by_bisection():
    # point μ = 0 (weight 1) + Gaussian z with μ = 1, σ = 2 (weight 2): φ(3) = 3 + 2·1 = 5
    m = score_map("ensemble", [np.array([0.0]), np.array([[1.0, 2.0]])], weights=[1.0, 2.0])
    np.testing.assert_allclose(m.score(np.array([[3.0, 1.0]])), [[5.0, 1.0]])
    np.testing.assert_allclose(m.inverse(np.array([[5.0, 1.0, -7.0]])), [[3.0, 1.0, -3.0]], rtol=1e-12)
    np.testing.assert_allclose(m.derivative(np.array([[0.0]])), [[2.0]])


def test_ensemble_of_cdf_scores_has_a_bounded_range_and_infinite_inverse_at_its_ends():
    pred = [np.array([[0.0, 1.0]]), np.array([[1.0, 1.0]])]
    m = score_map("ensemble", pred, score="cdf")
    assert m.score_range == (0.0, 2.0)
    y = m.inverse(np.array([[0.0, 1.0, 2.0]]))
    assert y[0, 0] == -np.inf and y[0, 2] == np.inf
    assert abs(y[0, 1] - 0.5) < 1e-12  # Φ(y) + Φ(y − 1) = 1 at y = 1/2 by symmetry


def test_ensemble_member_types_are_inferred_from_shapes():
    pred = [np.zeros(2), np.ones((2, 2)), np.array([[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]])]
    m = score_map("ensemble", pred, levels=[0.1, 0.5, 0.9])
    kinds = [type(k).__name__ for k in m.members]
    assert kinds == ["PointScores", "GaussianScores", "QuantileScores"]
    m2 = score_map("ensemble", [np.array([[0.0, 4.0]])], members=["interval"])
    np.testing.assert_allclose(m2.score(np.array([[1.0]])), [[0.25]])


def test_callable_cdf_from_scipy_and_bisection_without_ppf():
    dist = stats.t(df=4, loc=np.array([0.0, 2.0]), scale=np.array([1.0, 3.0]))
    pred = CDFPrediction.from_scipy(dist)
    m = score_map("distribution", pred, score="cdf")
    y = np.array([[0.5], [-1.0]])
    np.testing.assert_allclose(m.score(y), [[stats.t.cdf(0.5, 4)], [stats.t.cdf(-1.0, 4)]])
    bare = CDFPrediction(pred.cdf, n_rows=2, mean=[0.0, 2.0], std=[1.0, 3.0])
    mb = score_map("distribution", bare, score="cdf")
    np.testing.assert_allclose(
        mb.inverse(np.array([[0.1, 0.7]])), m.inverse(np.array([[0.1, 0.7]])), rtol=1e-10
    )
    assert not mb.has_derivative
    z = score_map("distribution", pred, score="z")  # (y − mean)/std with the t's std sqrt(2)·scale
    np.testing.assert_allclose(z.score(np.array([[math.sqrt(2.0)], [2.0]])), [[1.0], [0.0]])


def test_every_score_is_strictly_increasing_in_y():
    y = np.linspace(-30.0, 30.0, 2_001)[None, :]
    maps = [
        score_map("point", np.array([0.3])),
        score_map("interval", np.array([[-1.0, 2.0]])),
        score_map("quantile", np.array([[-1.0, 0.0, 0.5, 3.0]]), levels=[0.1, 0.4, 0.6, 0.9]),
        score_map("distribution", np.array([[0.0, 5.0]]), score="cdf"),
        score_map("distribution", np.array([[0.0, 0.5]]), score="z"),
        score_map("ensemble", [np.array([0.0]), np.array([[1.0, 3.0]])], score="cdf", weights=[0.5, 2.0]),
    ]
    for m in maps:
        assert np.all(np.diff(m.score(y)[0]) > 0), type(m).__name__


def test_bad_predictions_raise_errors_naming_the_argument():
    with pytest.raises(ValueError, match=r"lower < upper.*row 1"):
        score_map("interval", np.array([[0.0, 1.0], [2.0, 2.0]]))
    with pytest.raises(ValueError, match=r"strictly increasing.*rearrange_quantiles"):
        score_map("quantile", np.array([[0.0, 1.0, 0.5]]), levels=[0.1, 0.5, 0.9])
    with pytest.raises(ValueError, match="3 columns but quantile_levels has 2"):
        score_map("quantile", np.array([[0.0, 1.0, 2.0]]), levels=[0.1, 0.9])
    with pytest.raises(ValueError, match=r"needs? quantile_levels"):
        score_map("quantile", np.array([[0.0, 1.0]]))
    with pytest.raises(ValueError, match="sd column must be positive"):
        score_map("distribution", np.array([[0.0, 0.0]]))
    with pytest.raises(ValueError, match=r"shape \(m, 2\) with columns \(mean, sd\)"):
        score_map("distribution", np.array([[0.0, 1.0, 2.0]]))
    with pytest.raises(ValueError, match="NaN"):
        score_map("point", np.array([0.0, np.nan]))
    with pytest.raises(TypeError, match="numeric"):
        score_map("point", np.array(["a", "b"]))
    with pytest.raises(ValueError, match="1-D"):
        score_map("point", np.zeros((2, 2)))
    with pytest.raises(TypeError, match="list of member predictions"):
        score_map("ensemble", np.zeros(3))
    with pytest.raises(ValueError, match=r"pred\[1\] has 3 rows but 2"):
        score_map("ensemble", [np.zeros(2), np.zeros(3)])
    with pytest.raises(ValueError, match="cannot tell the type"):
        score_map("ensemble", [np.zeros((2, 5))])
    with pytest.raises(ValueError, match="needs the prediction's mean and std"):
        score_map("distribution", CDFPrediction(lambda y: y, n_rows=1), score="z")
    with pytest.raises(TypeError, match="cdf must be callable"):
        CDFPrediction(3.0, n_rows=1)


def test_levels_must_be_increasing_inside_the_unit_interval():
    np.testing.assert_array_equal(check_levels([0.1, 0.9]), [0.1, 0.9])
    for bad in ([0.5], [0.0, 0.5], [0.5, 1.0], [0.6, 0.4], [0.2, 0.2]):
        with pytest.raises(ValueError, match="quantile_levels"):
            check_levels(bad)


def test_rearrange_quantiles_sorts_and_opens_ties():
    Q = np.array([[3.0, 1.0, 2.0], [1.0, 1.0, 1.0], [0.0, 5.0, 5.0]])
    np.testing.assert_array_equal(
        rearrange_quantiles(Q, min_gap=0.5), [[1.0, 2.0, 3.0], [1.0, 1.5, 2.0], [0.0, 5.0, 5.5]]
    )


def test_solve_increasing_expands_brackets_and_reports_unreachable_targets():
    y = solve_increasing(np.tanh, np.array([0.5, -0.999, 2.0]), np.zeros(3), np.zeros(3))
    np.testing.assert_allclose(y[:2], [np.arctanh(0.5), np.arctanh(-0.999)], rtol=1e-12)
    assert y[2] == np.inf  # tanh never reaches 2
