"""calwatch: watch, live in a notebook, whether a model's uncertainty can be trusted.

Attach calibrators to any model, stream batches of predictions through a :class:`Monitor`
(labels may arrive later, or never) and watch coverage, set sizes and label progress live.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

import calwatch.regression_monitor  # noqa: F401 - registers Monitor(task="regression")
from calwatch.compare import compare
from calwatch.engine.conformal.adaptive import Adaptive
from calwatch.engine.conformal.classifier import SplitConformalClassifier
from calwatch.engine.errors import NotFittedError
from calwatch.engine.pac.sets import PACConfidenceSets
from calwatch.engine.risk.estimator import RiskEstimator
from calwatch.models import ModelOutputs, wrap
from calwatch.monitor import LabelReport, Monitor, Note
from calwatch.state_codec import SnapshotError

try:
    __version__ = version("calwatch")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0+unknown"


class CalwatchWarning(UserWarning):
    """Warnings raised by calwatch."""


# Calibrators whose engines import torch or faiss load on first use, so `import calwatch` stays fast.
_LAZY = {
    "VennAdmit": "calwatch.engine.venn_admit.admit",
    "SelectiveCalibrator": "calwatch.engine.selective.calibrator",
    "BaselineSelector": "calwatch.engine.selective.calibrator",
    "ModularConformalCalibrator": "calwatch.engine.regression.calibrator",
    "SplitConformalRegressor": "calwatch.engine.conformal.regression",
    # The live dashboard server (tornado) loads when asked for: calwatch.serve(path).
    "serve": "calwatch.server",
    "DashboardServer": "calwatch.server",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[name]), name)
    msg = f"module 'calwatch' has no attribute {name!r}"
    raise AttributeError(msg)


__all__ = [
    "Adaptive",
    "BaselineSelector",
    "CalwatchWarning",
    "DashboardServer",
    "LabelReport",
    "ModelOutputs",
    "ModularConformalCalibrator",
    "Monitor",
    "NotFittedError",
    "Note",
    "PACConfidenceSets",
    "RiskEstimator",
    "SelectiveCalibrator",
    "SnapshotError",
    "SplitConformalClassifier",
    "SplitConformalRegressor",
    "VennAdmit",
    "__version__",
    "compare",
    "serve",
    "wrap",
]
