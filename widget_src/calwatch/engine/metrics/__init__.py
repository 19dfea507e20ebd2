"""Metrics shared across the package: exact binomial intervals and (selective) calibration errors.

The metrics of predictive distributions (CRPS, PIT) live with MCC in
:mod:`calwatch.engine.regression.metrics`.
"""

from calwatch.engine.metrics.calibration import *  # noqa: F403 - the classification calibration metrics
from calwatch.engine.metrics.calibration import __all__ as _calibration_all
from calwatch.engine.metrics.intervals import clopper_pearson

__all__ = ["clopper_pearson", *_calibration_all]
