"""The shift detectors a monitor can run: ``Monitor(shift=[...])`` takes any of them.

``Monitor(shift="default")`` (the default) builds :func:`default_detectors`; a list chooses them::

    import calwatch as cw

    mon = cw.Monitor(model, calibrators=..., shift=[
        cw.shift.ConfidenceMartingale(),
        cw.shift.CoverageDropDetector("lac"),
    ])

Label-free detectors watch each observed batch (:class:`ConfidenceMartingale`,
:class:`ReferenceDistanceMartingale`, and on blocks of correlated rows
:class:`BlockConfidenceMartingale`, :class:`BlockDistanceMartingale`); the others watch labels
as they come (:class:`LabelMartingale`, :class:`CoverageDropDetector`,
:class:`ClassCoverageDropDetector`). A detector of your own implements :class:`Detector`.
"""

from calwatch.shift_watch import (
    BlockConfidenceMartingale,
    BlockDistanceMartingale,
    CalibrationData,
    ClassCoverageDropDetector,
    ConfidenceMartingale,
    CoverageDropDetector,
    Detector,
    LabelMartingale,
    ReferenceDistanceMartingale,
    default_detectors,
)

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
    "default_detectors",
]
