"""The shift detectors a monitor can run: ``Monitor(shift=[...])`` takes any of them.

``Monitor(shift="default")`` (the default) builds :func:`default_detectors`; a list chooses
them, e.g. ``cw.Monitor(model, calibrators=..., shift=[cw.shift.ConfidenceMartingale(),
cw.shift.CoverageDropDetector("lac")])``.

Label-free detectors watch each observed batch (:class:`ConfidenceMartingale`,
:class:`ReferenceDistanceMartingale`, and on blocks of correlated rows
:class:`BlockConfidenceMartingale`, :class:`BlockDistanceMartingale`); the others watch labels
as they come (:class:`LabelMartingale`, :class:`CoverageDropDetector`,
:class:`ClassCoverageDropDetector`). A detector of your own implements :class:`Detector`.

The package's modules: :mod:`~calwatch.shift.base` (what detectors share),
:mod:`~calwatch.shift.label_free`, :mod:`~calwatch.shift.on_labels` and its block side
:mod:`~calwatch.shift.label_blocks`, :mod:`~calwatch.shift.watch` (the monitor's detectors and
its warning log) and :mod:`~calwatch.shift.looks` (every look, as columns).
"""

from calwatch.shift.base import CalibrationData, Detector
from calwatch.shift.label_free import (
    BlockConfidenceMartingale,
    BlockDistanceMartingale,
    ConfidenceMartingale,
    ReferenceDistanceMartingale,
)
from calwatch.shift.on_labels import ClassCoverageDropDetector, CoverageDropDetector, LabelMartingale
from calwatch.shift.watch import ShiftWatch, default_detectors

__all__ = [
    "BlockConfidenceMartingale",
    "BlockDistanceMartingale",
    "CalibrationData",
    "ClassCoverageDropDetector",
    "ConfidenceMartingale",
    "CoverageDropDetector",
    "Detector",
    "LabelMartingale",
    "ReferenceDistanceMartingale",
    "ShiftWatch",
    "default_detectors",
]
