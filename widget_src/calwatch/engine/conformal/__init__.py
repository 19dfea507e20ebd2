"""Split, Mondrian and weighted conformal prediction, conformal scores and ACI (ALGORITHMS.md §0-1).

The regression and weighted variants load on first use (they import scipy's special functions).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from calwatch.engine.conformal.adaptive import Adaptive, ConformalLevels
from calwatch.engine.conformal.classifier import SplitConformalClassifier
from calwatch.engine.conformal.group_conditional import GroupConditionalConformal
from calwatch.engine.errors import NotFittedError

_LAZY = {
    "SplitConformalRegressor": "calwatch.engine.conformal.regression",
    "WeightedConformalClassifier": "calwatch.engine.conformal.weighted",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


__all__ = [
    "Adaptive",
    "ConformalLevels",
    "GroupConditionalConformal",
    "NotFittedError",
    "SplitConformalClassifier",
    "SplitConformalRegressor",
    "WeightedConformalClassifier",
]
