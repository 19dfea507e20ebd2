"""Split, Mondrian and weighted conformal prediction, conformal scores and ACI (ALGORITHMS.md §0-1)."""

from calwatch.engine.conformal.adaptive import Adaptive, ConformalLevels
from calwatch.engine.conformal.classifier import NotFittedError, SplitConformalClassifier
from calwatch.engine.conformal.regression import SplitConformalRegressor
from calwatch.engine.conformal.weighted import WeightedConformalClassifier

__all__ = [
    "Adaptive",
    "ConformalLevels",
    "NotFittedError",
    "SplitConformalClassifier",
    "SplitConformalRegressor",
    "WeightedConformalClassifier",
]
