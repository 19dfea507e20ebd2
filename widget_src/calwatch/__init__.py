"""calwatch: watch, live in a notebook, whether a model's uncertainty can be trusted.

Attach calibrators to any model, stream batches of predictions through a :class:`Monitor`
(labels may arrive later, or never) and watch coverage, set sizes and label progress live.
"""

from calwatch import shift
from calwatch.core.codec import SnapshotError
from calwatch.core.models import ModelOutputs, wrap
from calwatch.engine.conformal.adaptive import Adaptive
from calwatch.engine.conformal.classifier import SplitConformalClassifier
from calwatch.engine.conformal.group_conditional import GroupConditionalConformal
from calwatch.engine.errors import NotFittedError
from calwatch.engine.pac.sets import PACConfidenceSets
from calwatch.engine.risk.estimator import RiskEstimator
from calwatch.kinds import KINDS
from calwatch.monitor.compare import compare
from calwatch.monitor.monitor import LabelReport, Monitor, Note, register_task
from calwatch.monitor.regression import RegressionMonitor
from calwatch.stream.row_codec import use_kinds

register_task("regression", RegressionMonitor)  # Monitor(task="regression") builds one
use_kinds(KINDS)  # the rows' codec (a layer below the kinds) writes each kind's per-row results through them
del KINDS, RegressionMonitor, register_task, use_kinds


def _installed_version() -> str:
    """The installed distribution's version (``0+unknown`` in a source tree that was not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("calwatch")
    except PackageNotFoundError:
        return "0+unknown"


__version__ = _installed_version()


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
    "serve": "calwatch.publish.server",
    "DashboardServer": "calwatch.publish.server",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[name]), name)
    msg = f"module 'calwatch' has no attribute {name!r}"
    raise AttributeError(msg)


def __dir__() -> list[str]:
    """The public names only: what tab completion and ``dir(calwatch)`` show (not the submodules)."""
    return sorted(__all__)


__all__ = [
    "Adaptive",
    "BaselineSelector",
    "CalwatchWarning",
    "DashboardServer",
    "GroupConditionalConformal",
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
    "shift",
    "wrap",
]
