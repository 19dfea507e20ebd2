"""What a betting test did over one window, and the words its monitors report about it.

This module turns a window of a :class:`~calwatch.engine.shift.betting.BernoulliBetting` test
into what :class:`~calwatch.engine.shift.monitors.CoverageDrop` and
:class:`~calwatch.engine.shift.monitors.ReferenceExceedance` report: the look's numbers
(:class:`BettingLook`), whether the window alarms (:func:`betting_alarm`), the test's
false-alarm bound in words with the calibration draw's share (:func:`betting_guarantee`), and
the words, estimate and interval of a coverage-drop look (:func:`coverage_drop_words`). The
records these go into live in :mod:`calwatch.engine.shift.monitors`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from calwatch.engine.metrics.intervals import clopper_pearson
from calwatch.engine.shift.betting import BernoulliBetting, DetectorName


@dataclass(frozen=True)
class BettingLook:
    """What a betting test did over one window, as the monitors' results report it.

    Attributes
    ----------
    guarantee : str
        The test's false-alarm bound in words.
    detector : {"sr", "ville"}
        Its detector.
    log10_statistic, log10_threshold : float
        The statistic to report (e.g. the window's peak) and the alarm level.
    window_alarms : tuple of int
        Alarm rows of this window in the test's own row count.
    alarmed_ever : bool
        Whether the test has alarmed at any time (Ville's alarm is sticky).
    rows_seen : int
        Rows the test has seen, this window included.
    """

    guarantee: str
    detector: DetectorName
    log10_statistic: float
    log10_threshold: float
    window_alarms: tuple[int, ...]
    alarmed_ever: bool
    rows_seen: int

    @classmethod
    def of(
        cls, test: BernoulliBetting, window_alarms: list[int], statistic: float | None = None
    ) -> BettingLook:
        """The look of a :class:`BernoulliBetting` after a window (its latest statistic by default)."""
        return cls(
            guarantee=test.guarantee(),
            detector=test.detector,
            log10_statistic=test.log10_statistic_ if statistic is None else statistic,
            log10_threshold=test.log10_threshold,
            window_alarms=tuple(window_alarms),
            alarmed_ever=test.alarmed_,
            rows_seen=test.rows_,
        )


def betting_guarantee(guarantee: str, calibration_delta: float | None) -> str:
    """A betting test's bound in words, with the calibration draw's share and the null it assumes."""
    if calibration_delta is not None:
        guarantee += f"; + {calibration_delta:g} for an unlucky calibration draw"
    return guarantee + " (null: rows i.i.d. like the calibration rows)"


def betting_alarm(look: BettingLook) -> bool:
    """Whether a window of a betting test alarms: an alarm in it, or Ville's sticky one."""
    return bool(look.window_alarms) or (look.detector == "ville" and look.alarmed_ever)


def coverage_drop_words(
    *,
    guarantee: str,
    rows: int,
    covered: int,
    alpha: float,
    null_rate: float,
    calibration_delta: float | None,
    log10_statistic: float,
    log10_threshold: float,
) -> dict[str, Any]:
    """The words, estimate and interval of a coverage-drop look.

    ``rows`` labelled rows in the window, ``covered`` of them inside their sets; ``guarantee``
    is the betting test's own bound (:meth:`BernoulliBetting.guarantee`); the keys are
    :data:`~calwatch.engine.shift.monitors.DEFERRED_FIELDS`.
    """
    coverage = covered / rows if rows else math.nan  # = hits.mean(): an exact count over an exact count
    lo, hi = clopper_pearson([covered], [rows])
    return {
        "guarantee": betting_guarantee(guarantee, calibration_delta),
        "threatens": f"coverage ≥ {1 - alpha:.3g} of the prediction sets",
        "explanation": (
            f"labelled rows have fallen outside their sets more often than the calibrator allows "
            f"({null_rate:.1%}): the betting test's evidence reached 10^{log10_statistic:.1f} "
            f"(alarm at 10^{log10_threshold:.1f}); in this window "
            f"{rows - covered} of {rows} missed ({1 - coverage:.1%})"
        ),
        "action": "recalibrate on recent labelled data; if it keeps recurring, retrain",
        "estimate": coverage,
        "interval": (float(lo[0]), float(hi[0])),
    }


__all__ = ["BettingLook", "betting_alarm", "betting_guarantee", "coverage_drop_words"]
