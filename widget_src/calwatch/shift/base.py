"""What every detector shares: the calibration data, the protocol, the martingale machinery.

A detector looks at each batch as it is observed (label-free) or at labels as they arrive
(label-based), and reports a :class:`~calwatch.engine.shift.monitors.MonitorResult` per look.
Scores enter the martingales on a fixed grid (``resolution=1e-4``), which bounds their memory
and leaves every bound exact (see :class:`~calwatch.engine.shift.detectors.ConformalTestMartingale`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from calwatch.engine.shift.betting import (
    has_finite_threshold,
)
from calwatch.engine.shift.detectors import ConformalTestMartingale
from calwatch.engine.shift.monitors import (
    DeferredResult,
    MonitorResult,
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
StatisticName = Literal["ville", "cusum", "shiryaev-roberts"]

#: A constant threshold for the repeated-detection martingales, for who asks for one
#: (``threshold=``); the default is the anytime threshold at ``false_alarm`` = 0.01.
DEFAULT_CUSUM_THRESHOLD = 1e6
#: Grid on which scores enter the default martingales.
DEFAULT_RESOLUTION = 1e-4
_LN10 = math.log(10.0)


@dataclass
class CalibrationData:
    """What detectors may fit on: calibration probabilities, labels, and the fitted calibrators."""

    probs: FloatArray
    labels: IntArray
    calibrators: dict[str, Any]
    embeddings: npt.NDArray[np.float32] | None = None
    classes: list[str] | None = None  # class names, for explanations
    blocks: list[str] | None = None  # per-row block keys (calibrate(blocks=)), for block martingales
    covered: dict[str, npt.NDArray[np.bool_]] | None = (
        None  # per set calibrator, with blocks: for block nulls
    )


class Detector(Protocol):
    """A shift detector the monitor feeds (label-free ones in ``observe``, others in ``label``)."""

    name: str
    needs_labels: bool

    def calibrate(self, data: CalibrationData) -> None:
        """Fit on the calibration data (called by ``Monitor.calibrate``)."""

    def observe(self, probs: FloatArray) -> MonitorResult | None:
        """Look at a newly observed batch (label-free detectors)."""

    def labelled(
        self, probs: FloatArray, labels: IntArray, covered: dict[str, npt.NDArray[np.bool_]]
    ) -> MonitorResult | None:
        """Look at newly labelled rows, in arrival order (label-based detectors)."""

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the detector back as it is now (a failed call is undone with it)."""


def _nothing_to_restore() -> None:
    """The restore function of a detector that has no state yet."""


#: The null hypothesis of the row-level martingales, as the guarantee states it.
ROW_NULL = "rows exchangeable with calibration"


def _martingale_guarantee(
    statistic: StatisticName,
    threshold: float | None,
    false_alarm: float | None,
    *,
    unit: str = "rows",
    null: str = ROW_NULL,
) -> str:
    name = "CUSUM" if statistic == "cusum" else "Shiryaev–Roberts"
    if threshold is None:
        return (
            f"P(any false alarm over the whole stream, however long) ≤ δ = {false_alarm:g} ({name}, "
            f"restarted after each alarm, against a threshold growing with the {unit} seen; "
            f"null: {null})"
        )
    if statistic == "ville":
        return f"P(any false alarm over the whole stream) ≤ 1/c = {1 / threshold:.2g} (Ville; null: {null})"
    return (
        f"mean {unit} to a false alarm ≥ c = {threshold:.3g}; P(false alarm within L {unit}) ≤ L/c "
        f"({name}; null: {null})"
    )


class _MartingaleDetector:
    """Shared options and bookkeeping of the conformal-test-martingale detectors."""

    name: str
    needs_labels: bool
    threatens: str
    action: str

    def __init__(
        self,
        *,
        statistic: StatisticName = "cusum",
        threshold: float | None = None,
        false_alarm: float | None = None,
        jump: float = 0.01,
        resolution: float | None = DEFAULT_RESOLUTION,
        seed: int = 0,
    ) -> None:
        self.statistic: StatisticName = statistic
        self.threshold = None if threshold is None else float(threshold)
        self.false_alarm = false_alarm
        self.jump = float(jump)
        self.resolution = resolution
        self.seed = int(seed)
        self.martingale_: ConformalTestMartingale | None = None

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the martingale (and the stretch followed for its words) back as it is now."""
        if self.martingale_ is None:
            return _nothing_to_restore
        restore_martingale = self.martingale_.checkpoint()
        runs = {name: list(self.__dict__[name]) for name in ("run_", "block_run_") if name in self.__dict__}

        def restore() -> None:
            restore_martingale()
            for name, run in runs.items():
                self.__dict__[name] = list(run)

        return restore

    def _fit(self, scores: FloatArray) -> None:
        self.martingale_ = ConformalTestMartingale(
            threshold=self.threshold,
            false_alarm=getattr(self, "false_alarm", None),
            jump=self.jump,
            statistic=self.statistic,
            resolution=self.resolution,
            seed=self.seed,
        ).fit(scores)

    def _look(
        self,
        scores: FloatArray,
        what: str,
        *,
        unit: str = "rows",
        null: str = ROW_NULL,
        hold: Callable[[FloatArray, bool, float], tuple[bool, str]] | None = None,
        martingale: ConformalTestMartingale | None = None,
        statistic_name: StatisticName | None = None,
        run_name: str = "run_",
    ) -> MonitorResult:
        """One look: step the martingale on ``scores``; the result with its words (written when read).

        ``hold(p_values, alarm, log10_statistic)`` may hold an alarm back: it returns the alarm to
        report and a sentence to add to the explanation. ``martingale`` and ``statistic_name`` replace the
        detector's own (a label test on blocks runs its own martingale); ``run_name`` names the
        attribute that follows the stretch behind the statistic.
        """
        m = self.martingale_ if martingale is None else martingale
        assert m is not None  # calibrate() runs before any look
        statistic_name = self.statistic if statistic_name is None else statistic_name
        before = len(m.alarm_indices_)
        first_row = m.n_seen_
        step = m.step(scores)
        run = _advance_run(self.__dict__.setdefault(run_name, list(NEW_RUN)), step, statistic_name, first_row)
        values = (
            step.log_cusum
            if statistic_name == "cusum"
            else step.log_sr
            if statistic_name == "shiryaev-roberts"
            else step.log_martingale
        )
        new_alarms = tuple(m.alarm_indices_[before:])
        statistic = float(values.max()) / _LN10 if values.size else -math.inf
        p_values = step.p_value
        limit = m.log10_threshold_
        rule = (statistic_name, m.threshold, getattr(m, "false_alarm", None))
        exchangeable = (
            "exchangeable with the calibration blocks"
            if unit == "blocks"
            else "exchangeable with the calibration data"
        )
        threatens, action = self.threatens, self.action
        alarm, held = bool(new_alarms), ""
        if hold is not None:
            alarm, held = hold(p_values, alarm, statistic)
        start, n_run, p_sum, low, high = run[:5]

        def words() -> dict[str, Any]:
            return {
                "guarantee": _martingale_guarantee(*rule, unit=unit, null=null),
                "threatens": threatens,
                "explanation": (
                    f"{what} no longer look {exchangeable}: the test martingale "
                    f"reached 10^{statistic:.1f} (alarm at 10^{limit:.1f}); "
                    + run_words(start, n_run, p_sum, low, high, unit)
                    + held
                ),
                "action": action,
                "estimate": p_sum / n_run if n_run else math.nan,
                "interval": (math.nan, math.nan),
            }

        return DeferredResult.later(
            name=self.name,
            statistic=statistic,
            threshold=limit,
            alarm=alarm,
            rows_seen=m.n_seen_,
            alarm_rows=new_alarms if alarm else (),
            words=words,
        )


#: A martingale's run before any look: ``[start, n, Σp, #p<0.1, #p>0.9, lowest log martingale]``.
NEW_RUN: tuple[Any, ...] = (0, 0, 0.0, 0, 0, 0.0)


def _advance_run(run: list[Any], step: Any, statistic: str, first_row: int) -> list[Any]:
    """Follow the stretch of p-values behind a martingale's statistic (:data:`NEW_RUN`'s entries).

    For CUSUM the stretch starts after the statistic last stood at 1 (``log ≤ 0``: a restart,
    after an alarm or when the evidence ran out); for the others, after the log martingale's
    lowest point. The run carries over from look to look; updated in place.
    """
    p = step.p_value
    if p.size == 0:
        return run
    if statistic == "cusum":
        restarts = np.flatnonzero(step.log_cusum <= 0.0)
    else:
        level = step.log_martingale
        lowest = int(np.argmin(level))
        restarts = np.array([lowest]) if level[lowest] < run[5] else np.zeros(0, dtype=np.intp)
        run[5] = min(run[5], float(level[lowest]))
    if restarts.size:
        cut = int(restarts[-1]) + 1
        tail = p[cut:]
        run[0], run[1] = first_row + cut, int(tail.size)
        run[2], run[3], run[4] = float(tail.sum()), int((tail < 0.1).sum()), int((tail > 0.9).sum())
    else:
        run[1] += int(p.size)
        run[2] += float(p.sum())
        run[3] += int((p < 0.1).sum())
        run[4] += int((p > 0.9).sum())
    return run


def run_words(start: int, n: int, p_sum: float, low: int, high: int, unit: str) -> str:
    """The stretch behind a martingale's statistic in words (:func:`_advance_run`)."""
    if n == 0:
        return "the evidence stopped growing with the latest " + unit
    text = (
        f"the evidence comes from the {n:,} {unit} since {unit[:-1]} {start + 1:,}, whose conformal p-values "
        f"average {p_sum / n:.2f} with {low / n:.0%} below 0.1 and {high / n:.0%} above 0.9 "
        "(0.5, 10% and 10% when nothing changed)"
    )
    if abs(p_sum / n - 0.5) < 0.05 and abs(low / n - 0.1) < 0.04 and abs(high / n - 0.1) < 0.04:
        text += (
            f"; taken together these {unit} look like nothing changed, so the evidence is in their order: "
            f"similar values come in runs (correlated {unit}, e.g. one unit's or one day's rows together)"
            + ("; if the stream has such blocks, give blocks=" if unit == "rows" else "")
        )
    return text


def first_names(names: list[str], shown: int = 5) -> str:
    """The first few names, comma-separated, with an ellipsis when there are more (for notices).

    Examples
    --------
    >>> first_names(["a", "b", "c"], shown=2)
    'a, b, …'
    """
    return ", ".join(names[:shown]) + (", …" if len(names) > shown else "")


def smallest_testable_count(alpha: float) -> int:
    """Fewest calibration rows that give a finite conformal threshold at level ``α``.

    Examples
    --------
    >>> smallest_testable_count(0.1), smallest_testable_count(0.05)
    (9, 19)
    """
    n = 1
    while not has_finite_threshold(alpha, n):
        n += 1
    return n
