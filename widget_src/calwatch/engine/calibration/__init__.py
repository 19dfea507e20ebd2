"""Post-hoc calibration maps of classifier outputs (ALGORITHMS.md §4.1, §5) (papers 000, 003, 004)."""

from calwatch.engine.calibration.binning import HistogramBinning, IsotonicCalibration
from calwatch.engine.calibration.maps import PlattScaling, TemperatureScaling

__all__ = ["HistogramBinning", "IsotonicCalibration", "PlattScaling", "TemperatureScaling"]
