"""Modular conformal calibration for regression (paper 001; ALGORITHMS.md §3) and its metrics."""

from calwatch.engine.regression.calibrator import CalibratedCDF, ModularConformalCalibrator

__all__ = ["CalibratedCDF", "ModularConformalCalibrator"]
