"""Calibrated selective classification (paper 002; ALGORITHMS.md §6).

Importing this package loads torch; ``calwatch.SelectiveCalibrator`` loads it on first use.
"""

from calwatch.engine.selective.calibrator import BaselineSelector, SelectiveCalibrator

__all__ = ["BaselineSelector", "SelectiveCalibrator"]
