"""Shift detectors with false-alarm control (SHIFT.md): conformal test martingales and simpler monitors."""

from calwatch.engine.shift.detectors import ConformalTestMartingale

__all__ = ["ConformalTestMartingale"]
