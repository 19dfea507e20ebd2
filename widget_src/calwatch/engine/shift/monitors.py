"""Simpler shift monitors, each with a stated test (SHIFT.md §4), and episodic warnings (§5).

This module holds the monitors' state between looks and the records of their looks and
warnings. Every monitor's ``update`` takes the next window of rows and returns a
:class:`MonitorResult`: statistic, threshold, alarm, and the false-alarm control that the test
offers ("under the null" below means: the stream rows are i.i.d. from the calibration
distribution, the exchangeability every calwatch guarantee rests on).

- :class:`CoverageDrop` (labels needed): are labelled rows missed more often than the
  calibrator promises? A betting test of the miss rate (below).
- :class:`RiskJump` (label-free): the window's mean estimated risk (any per-row risk, e.g.
  :meth:`~calwatch.engine.risk.estimator.RiskEstimator.row_risk`) against its calibration value, with a
  confidence interval; repeated looks are paid for by alpha spending.
- :class:`ReferenceExceedance` (label-free): the share of rows whose distance to the
  reference set exceeds the calibration rows' 95th percentile, against 5%; the betting test.
- :class:`PredictionMix` (label-free): predicted-class counts of the window against the
  calibration rows' (chi-square, alpha spending over looks).

**The betting test** (:class:`~calwatch.engine.shift.betting.BernoulliBetting`) and **the null
rate** ``ε₀`` of a conformal threshold (:func:`~calwatch.engine.shift.betting.calibration_null_rate`)
live in :mod:`calwatch.engine.shift.betting`, with the false-alarm bounds of its two detectors
(Ville: ``P(any false alarm) ≤ 1/c``; Shiryaev-Roberts: mean rows to a false alarm ``≥ c``).
What a betting test did over a window and its words (:class:`BettingLook`,
:func:`coverage_drop_words`) live in :mod:`calwatch.engine.shift.betting_looks`; the tests of
one window of the label-free monitors (alpha spending, :func:`chi_square_two_sample`) in
:mod:`calwatch.engine.shift.window_tests`. Their public names are importable from here too.

**Warnings** (SHIFT.md §5): :class:`EpisodeTracker` turns a sequence of results into
:class:`ShiftWarning` records, one per episode: an episode opens at the first alarm and closes
only after ``patience`` consecutive looks without one (hysteresis in time), so an alarm that
flickers on and off raises one warning, not one per batch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import check_alpha
from calwatch.engine.conformal.quantiles import conformal_rank
from calwatch.engine.errors import NotFittedError
from calwatch.engine.metrics.intervals import clopper_pearson
from calwatch.engine.shift.betting import (
    BET_FRACTIONS,
    DEFAULT_SR_THRESHOLD,
    DEFAULT_VILLE_THRESHOLD,
    DETECTOR_NAMES,
    BernoulliBetting,
    DetectorName,
    alarm_thresholds,
    calibration_null_rate,
    guarantee_text,
    has_finite_threshold,
)
from calwatch.engine.shift.betting_looks import (
    BettingLook,
    betting_alarm,
    betting_guarantee,
    coverage_drop_words,
)
from calwatch.engine.shift.window_tests import (
    _as_1d,
    chi_square_two_sample,
    prediction_mix_look,
    risk_jump_look,
)

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]

#: Default false-alarm budget of the alpha-spending tests (over all looks).
DEFAULT_DELTA = 0.01
#: Default share of the calibration draws allowed to count as false alarms (see the module doc).
DEFAULT_CALIBRATION_DELTA = 0.01
#: Looks an episode stays open without an alarm before it closes.
DEFAULT_PATIENCE = 3


# ------------------------------------------------------------------------- records
@dataclass(frozen=True)
class MonitorResult:
    """One look of a monitor.

    Attributes
    ----------
    name : str
        The monitor.
    statistic, threshold : float
        The test statistic and the value at which it alarms (same scale: ``log10`` for the
        betting tests).
    alarm : bool
        Whether the test alarms at this look.
    guarantee : str
        The false-alarm control the test offers, in words with the numbers.
    threatens : str
        Which calwatch guarantee an alarm puts at risk.
    explanation : str
        One line in plain words about what was seen.
    action : str
        What to do about an alarm.
    estimate : float
        The window's own estimate (coverage, risk jump, exceedance share, …).
    interval : tuple of float
        A confidence interval for ``estimate`` (``nan`` where none).
    rows_seen : int
        Rows the monitor has seen so far, this window included.
    alarm_rows : tuple of int
        0-based indices (in the monitor's own row count) where the test alarmed in this window.
    """

    name: str
    statistic: float
    threshold: float
    alarm: bool
    guarantee: str
    threatens: str
    explanation: str
    action: str
    estimate: float = math.nan
    interval: tuple[float, float] = (math.nan, math.nan)
    rows_seen: int = 0
    alarm_rows: tuple[int, ...] = ()


#: The fields of a :class:`DeferredResult` written when first read.
DEFERRED_FIELDS = ("guarantee", "threatens", "explanation", "action", "estimate", "interval")


def _deferred_field(name: str) -> Any:
    """A field of :class:`DeferredResult`: written by its words function on first read."""
    slot = "_" + name

    def get(self: DeferredResult) -> Any:
        values = self.__dict__
        if slot not in values:
            self._write()
        return values[slot]

    def put(self: DeferredResult, value: Any) -> None:  # the dataclass __init__ (``replace``)
        self.__dict__[slot] = value

    return property(get, put, doc=f"``{name}``, written when first read.")


class DeferredResult(MonitorResult):
    """A :class:`MonitorResult` whose words are written when they are first read.

    A detector looks at every batch, but the monitor reads only a look's numbers (``name``,
    ``statistic``, ``threshold``, ``alarm``) for its chart; the words (``guarantee``,
    ``threatens``, ``explanation``, ``action``) and the window's ``estimate`` and ``interval``
    (a Clopper-Pearson interval: two inverse incomplete betas) are read when an alarm opens a
    warning, or when a caller reads them. They are written then, once, by ``words``: a
    function of values fixed at the look (never of the detector's later state), so they read
    exactly as if written at once. Otherwise the same frozen record (equality, ``repr``,
    ``dataclasses.replace`` and ``asdict`` read every field).
    """

    guarantee = _deferred_field("guarantee")
    threatens = _deferred_field("threatens")
    explanation = _deferred_field("explanation")
    action = _deferred_field("action")
    estimate = _deferred_field("estimate")
    interval = _deferred_field("interval")

    @classmethod
    def later(
        cls,
        *,
        name: str,
        statistic: float,
        threshold: float,
        alarm: bool,
        rows_seen: int,
        alarm_rows: tuple[int, ...],
        words: Callable[[], dict[str, Any]],
    ) -> DeferredResult:
        """A look with its numbers now and ``words()`` (a dict of :data:`DEFERRED_FIELDS`) later."""
        out = object.__new__(cls)
        out.__dict__.update(
            name=name, statistic=statistic, threshold=threshold, alarm=alarm, rows_seen=rows_seen,
            alarm_rows=alarm_rows, _words=words,
        )  # fmt: skip
        return out

    def _write(self) -> None:
        values = self.__dict__
        written = values["_words"]()
        for name in DEFERRED_FIELDS:
            values["_" + name] = written[name]
        del values["_words"]

    def __getstate__(self) -> dict[str, Any]:
        """The record with its words written (for ``pickle`` and ``copy``: no function inside)."""
        if "_words" in self.__dict__:
            self._write()
        return dict(self.__dict__)


@dataclass(frozen=True)
class ShiftWarning:
    """A warning that the stream no longer looks like the calibration data (SHIFT.md §5).

    Attributes
    ----------
    name : str
        The monitor that raised it.
    threatens : str
        The guarantee at risk.
    statistic, threshold : float
        The statistic at the first alarm of the episode, and its threshold.
    false_alarm_control : str
        The false-alarm bound the test offers.
    first_batch, last_batch : int
        Batches of the first and of the latest alarm of the episode.
    rows : tuple of int
        First and last stream row (inclusive) of the windows that alarmed in this episode.
    explanation : str
        One line in plain words.
    action : str
        Suggested action.
    episode : int
        0-based episode number across all monitors of the tracker.
    open : bool
        Whether the episode is still running.
    """

    name: str
    threatens: str
    statistic: float
    threshold: float
    false_alarm_control: str
    first_batch: int
    rows: tuple[int, int]
    explanation: str
    action: str
    last_batch: int
    episode: int
    open: bool = True


class EpisodeTracker:
    """One warning per episode, with hysteresis in time.

    An episode of a monitor (by ``result.name``) opens at its first alarm and closes after
    ``patience`` consecutive looks without an alarm; alarms in between extend it (its last
    batch and rows) and raise no new warning.

    Parameters
    ----------
    patience : int
        Quiet looks that close an episode (≥ 1).

    Examples
    --------
    >>> def look(alarm):
    ...     return MonitorResult("m", 1.0, 0.5, alarm, "g", "t", "e", "a")
    >>> tracker = EpisodeTracker(patience=2)
    >>> [tracker.observe(look(a), batch=b, rows=(10 * b, 10 * b + 9)) is not None
    ...  for b, a in enumerate([True, False, True, False, False, True])]
    [True, False, False, False, False, True]
    >>> [(w.first_batch, w.last_batch, w.rows, w.open) for w in tracker.warnings_]
    [(0, 2, (0, 29), False), (5, 5, (50, 59), True)]
    """

    def __init__(self, patience: int = DEFAULT_PATIENCE) -> None:
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            msg = f"patience must be an integer ≥ 1; got {patience!r}"
            raise ValueError(msg)
        self.patience = patience
        self._warnings: list[ShiftWarning] = []
        self._open: dict[str, list[int]] = {}  # name -> [episode index, quiet looks]

    @property
    def warnings_(self) -> list[ShiftWarning]:
        """Every episode's warning so far, oldest first (open ones with their latest extent)."""
        return list(self._warnings)

    def active(self, name: str) -> bool:
        """Whether ``name`` has an open episode."""
        return name in self._open

    def observe(self, result: MonitorResult, *, batch: int, rows: tuple[int, int]) -> ShiftWarning | None:
        """Record one look; return the new warning when it opens an episode, else None.

        Parameters
        ----------
        result : MonitorResult
            The look.
        batch : int
            The stream batch it belongs to.
        rows : tuple of int
            First and last stream row (inclusive) of the look's window.
        """
        state = self._open.get(result.name)
        if result.alarm:
            if state is None:
                warning = ShiftWarning(
                    name=result.name,
                    threatens=result.threatens,
                    statistic=result.statistic,
                    threshold=result.threshold,
                    false_alarm_control=result.guarantee,
                    first_batch=batch,
                    rows=(int(rows[0]), int(rows[1])),
                    explanation=result.explanation,
                    action=result.action,
                    last_batch=batch,
                    episode=len(self._warnings),
                )
                self._open[result.name] = [len(self._warnings), 0]
                self._warnings.append(warning)
                return warning
            index = state[0]
            old = self._warnings[index]
            self._warnings[index] = dataclasses.replace(
                old, last_batch=batch, rows=(old.rows[0], max(old.rows[1], int(rows[1])))
            )
            state[1] = 0
            return None
        if state is not None:
            state[1] += 1
            if state[1] >= self.patience:
                index = state[0]
                self._warnings[index] = dataclasses.replace(self._warnings[index], open=False)
                del self._open[result.name]
        return None


# ------------------------------------------------------------------ results of betting looks
def betting_result(
    look: BettingLook,
    name: str,
    *,
    estimate: float,
    interval: tuple[float, float],
    calibration_delta: float | None,
    threatens: str,
    explanation: str,
    action: str,
) -> MonitorResult:
    """A :class:`MonitorResult` for one window of a betting test, with its full guarantee."""
    return MonitorResult(
        name=name,
        statistic=look.log10_statistic,
        threshold=look.log10_threshold,
        alarm=betting_alarm(look),
        guarantee=betting_guarantee(look.guarantee, calibration_delta),
        threatens=threatens,
        explanation=explanation,
        action=action,
        estimate=estimate,
        interval=interval,
        rows_seen=look.rows_seen,
        alarm_rows=look.window_alarms,
    )


def coverage_drop_result(
    look: BettingLook,
    hits: BoolArray,
    *,
    name: str,
    alpha: float,
    null_rate: float,
    calibration_delta: float | None,
) -> MonitorResult:
    """The result of a coverage-drop test over a window of labelled rows (``hits``: covered or not).

    A :class:`DeferredResult`: its words and interval are written when first read.
    """
    rows, covered = int(hits.shape[0]), int(np.count_nonzero(hits))
    return DeferredResult.later(
        name=name,
        statistic=look.log10_statistic,
        threshold=look.log10_threshold,
        alarm=betting_alarm(look),
        rows_seen=look.rows_seen,
        alarm_rows=look.window_alarms,
        words=lambda: coverage_drop_words(
            guarantee=look.guarantee, rows=rows, covered=covered, alpha=alpha, null_rate=null_rate,
            calibration_delta=calibration_delta, log10_statistic=look.log10_statistic,
            log10_threshold=look.log10_threshold,
        ),
    )  # fmt: skip


# ------------------------------------------------------------------ the monitors
class CoverageDrop:
    """Test whether labelled rows are missed more often than promised (labels needed).

    A :class:`BernoulliBetting` test of the miss indicators ``1{y ∉ C(x)}`` against
    ``ε₀`` (:func:`calibration_null_rate`: ``α`` plus the calibration draw's margin). Run one
    per calibrator; per class, run one per class on that class's rows (marginal calibrators
    promise no per-class coverage, so there an alarm is expected, not false).

    Parameters
    ----------
    alpha : float
        The calibrator's miscoverage level.
    n_calibration : int, optional
        Its calibration rows (per class for a by-label calibrator's class test); required
        unless ``calibration_delta=None``.
    calibration_delta : float or None
        See the module docstring (default 0.01).
    detector : {"sr", "ville"}
        Shiryaev-Roberts (default) or Ville.
    threshold : float, optional
        A constant alarm threshold ``c``.
    false_alarm : float, optional
        ``δ`` of the anytime threshold (Shiryaev-Roberts' default, 0.01: P(any false alarm over
        the whole stream) ≤ δ); see :mod:`calwatch.engine.shift.betting`.

    Examples
    --------
    >>> m = CoverageDrop(alpha=0.1, calibration_delta=None, detector="ville")
    >>> r = m.update(np.r_[np.zeros(40, bool), np.ones(60, bool)])  # 40 misses in 100 rows
    >>> r.alarm, round(r.estimate, 2)
    (True, 0.6)
    """

    name = "coverage drop"

    def __init__(
        self,
        alpha: float = 0.1,
        *,
        n_calibration: int | None = None,
        calibration_delta: float | None = DEFAULT_CALIBRATION_DELTA,
        detector: DetectorName = "sr",
        threshold: float | None = None,
        false_alarm: float | None = None,
    ) -> None:
        self.alpha = check_alpha(alpha)
        alarm_thresholds(detector, threshold, false_alarm)  # refused before anything is set
        if calibration_delta is not None and n_calibration is None:
            msg = "pass n_calibration= (the calibrator's calibration rows), or calibration_delta=None"
            raise ValueError(msg)
        self.n_calibration = n_calibration
        self.calibration_delta = calibration_delta
        self.detector: DetectorName = detector
        self.threshold = threshold
        self.false_alarm = false_alarm
        rate = calibration_null_rate(self.alpha, n_calibration or 0, calibration_delta)
        self.test_ = BernoulliBetting(rate, detector=detector, threshold=threshold, false_alarm=false_alarm)

    @property
    def null_rate(self) -> float:
        """``ε₀``, the miss rate tested against."""
        return self.test_.null_rate

    def update(self, covered: Any, *, name: str | None = None) -> MonitorResult:
        """Feed whether each newly labelled row was covered (in arrival order).

        ``name``: the result's name (default: the monitor's, ``"coverage drop"``).
        """
        if (
            isinstance(covered, np.ndarray)
            and covered.dtype == np.bool_
            and covered.ndim == 1
            and covered.size
        ):
            hits = covered  # read, never kept
        else:
            hits = _as_1d(covered, "covered", dtype=bool)
        test = self.test_
        before, events_before = len(test.alarms_), test.events_
        peak = test.advance(~hits)  # the evidence at its highest (the statistic resets after an alarm)
        rows, covered_rows = int(hits.shape[0]), int(hits.shape[0]) - (test.events_ - events_before)
        window_alarms = tuple(test.alarms_[before:])
        threshold = test.log10_threshold
        rule = (
            test.detector,
            test.null_rate,
            test.threshold,
            len(test.bet_fractions),
            getattr(test, "false_alarm", None),
        )
        alpha, null_rate, calibration_delta = self.alpha, self.null_rate, self.calibration_delta
        return DeferredResult.later(
            name=self.name if name is None else name,
            statistic=peak,
            threshold=threshold,
            alarm=bool(window_alarms) or (test.detector == "ville" and test.alarmed_),
            rows_seen=test.rows_,
            alarm_rows=window_alarms,
            words=lambda: coverage_drop_words(
                guarantee=guarantee_text(*rule), rows=rows, covered=covered_rows, alpha=alpha,
                null_rate=null_rate, calibration_delta=calibration_delta, log10_statistic=peak,
                log10_threshold=threshold,
            ),
        )  # fmt: skip


class ReferenceExceedance:
    """Test the share of rows far from the reference set against 5% (label-free).

    ``fit`` takes the calibration rows' nearest-reference distances ``d`` and sets the
    threshold at their conformal 95th percentile ``d_(⌈(n+1)·0.95⌉)``, so a fresh row exceeds
    it with probability ≤ 5% on average; ``update`` runs the betting test on exceedances
    against ``ε₀`` (5% plus the calibration margin).

    Parameters
    ----------
    share : float
        The tail share (default 0.05).
    calibration_delta : float or None
        See the module docstring.
    detector : {"sr", "ville"}
        Shiryaev-Roberts (default) or Ville.
    threshold : float, optional
        Alarm threshold ``c``.

    Examples
    --------
    19 calibration distances 1..19: ``⌈20·0.95⌉ = 19`` -> threshold 19.

    >>> m = ReferenceExceedance(calibration_delta=None).fit(np.arange(1.0, 20.0))
    >>> m.distance_threshold_
    19.0
    """

    name = "reference distance"

    def __init__(
        self,
        *,
        share: float = 0.05,
        calibration_delta: float | None = DEFAULT_CALIBRATION_DELTA,
        detector: DetectorName = "sr",
        threshold: float | None = None,
        false_alarm: float | None = None,
    ) -> None:
        self.share = check_alpha(share, "share")
        alarm_thresholds(detector, threshold, false_alarm)
        self.calibration_delta = calibration_delta
        self.detector: DetectorName = detector
        self.threshold = threshold
        self.false_alarm = false_alarm

    def fit(self, d_cal: Any) -> ReferenceExceedance:
        """Set the distance threshold from the calibration rows' reference distances."""
        d = np.sort(_as_1d(d_cal, "d_cal"))
        n = d.shape[0]
        k = conformal_rank(n, self.share)
        if k > n:
            msg = f"{n} calibration distances are too few for a {1 - self.share:.0%} percentile"
            raise ValueError(msg)
        self.distance_threshold_ = float(d[k - 1])
        rate = calibration_null_rate(self.share, n, self.calibration_delta)
        self.test_ = BernoulliBetting(
            rate,
            detector=self.detector,
            threshold=self.threshold,
            false_alarm=getattr(self, "false_alarm", None),
        )
        return self

    def update(self, d: Any) -> MonitorResult:
        """Feed the next rows' nearest-reference distances (in arrival order)."""
        if not hasattr(self, "test_"):
            msg = "this ReferenceExceedance is not fitted yet: call fit(d_cal) first"
            raise NotFittedError(msg)
        far = _as_1d(d, "d") > self.distance_threshold_
        before = len(self.test_.alarms_)
        self.test_.update(far)
        lo, hi = clopper_pearson([int(far.sum())], [far.shape[0]])
        return betting_result(
            BettingLook.of(self.test_, self.test_.alarms_[before:]),
            self.name,
            estimate=float(far.mean()),
            interval=(float(lo[0]), float(hi[0])),
            calibration_delta=self.calibration_delta,
            threatens="exchangeability with the calibration data (every coverage and calibration guarantee)",
            explanation=(
                f"{far.mean():.1%} of the new rows lie farther from the reference data than "
                f"{1 - self.share:.0%} of the calibration rows (expected ≤ {self.share:.0%})"
            ),
            action="collect labels for the far rows and check coverage there; retrain if they persist",
        )


class RiskJump:
    """Test the window's mean estimated risk against its calibration value (label-free).

    ``fit`` takes per-row risks of the calibration rows (any label-free estimate in
    ``[0, 1]``, e.g. ``RiskEstimator(...).row_risk(P_cal)``; held-out rows if you have them);
    ``update`` takes the window's. Look ``k`` computes the jump ``Δ = mean_w − mean_cal``, its
    standard error ``sqrt(v_w/m + v_cal/n)`` and a normal (Welch) interval
    ``Δ ± z_k·se`` with ``z_k = Φ⁻¹(1 − δ_k)``, ``δ_k = 6δ/(π²k²)``; it alarms when the interval's
    lower end exceeds ``min_jump``. The ``δ_k`` sum to ``δ``, so by the union bound
    ``P(any false alarm over all looks) ≤ δ`` (normal approximation: bounded risks, windows of
    ≥ ~30 rows).

    Parameters
    ----------
    delta : float
        False-alarm budget over all looks.
    min_jump : float
        Smallest risk increase worth an alarm (0: any significant increase).

    Examples
    --------
    >>> m = RiskJump(delta=0.01).fit(np.array([0.1, 0.2, 0.1, 0.2]))
    >>> r = m.update(np.array([0.4, 0.5, 0.4, 0.5]))
    >>> round(r.estimate, 12), r.alarm
    (0.3, True)
    """

    name = "risk jump"

    def __init__(self, *, delta: float = DEFAULT_DELTA, min_jump: float = 0.0) -> None:
        self.delta = check_alpha(delta, "delta")
        if not (math.isfinite(min_jump) and min_jump >= 0):
            msg = f"min_jump must be a finite number ≥ 0; got {min_jump!r}"
            raise ValueError(msg)
        self.min_jump = float(min_jump)

    def fit(self, risk_cal: Any) -> RiskJump:
        """Take the calibration rows' per-row risks."""
        r = _as_1d(risk_cal, "risk_cal")
        if r.shape[0] < 2:
            msg = "risk_cal needs at least 2 rows"
            raise ValueError(msg)
        self.calibration_mean_ = float(r.mean())
        self.calibration_var_ = float(r.var(ddof=1))
        self.n_calibration_ = int(r.shape[0])
        self.looks_ = 0
        self.rows_ = 0
        return self

    def update(self, risk: Any) -> MonitorResult:
        """Feed the next window's per-row risks."""
        if not hasattr(self, "calibration_mean_"):
            msg = "this RiskJump is not fitted yet: call fit(risk_cal) first"
            raise NotFittedError(msg)
        r = _as_1d(risk, "risk")
        self.looks_ += 1
        self.rows_ += int(r.shape[0])
        look = risk_jump_look(
            r,
            calibration_mean=self.calibration_mean_,
            calibration_var=self.calibration_var_,
            n_calibration=self.n_calibration_,
            min_jump=self.min_jump,
            delta=self.delta,
            look=self.looks_,
        )
        return MonitorResult(name=self.name, rows_seen=self.rows_, **look)


class PredictionMix:
    """Test the window's predicted-class proportions against the calibration rows' (label-free).

    Look ``k``: Pearson's chi-square on the ``2 × K'`` table of calibration and window
    prediction counts (classes predicted in neither dropped, ``K' − 1`` degrees of freedom;
    a two-sample test, so the calibration proportions' own noise is accounted for), alarm
    above the ``1 − δ_k`` quantile, ``δ_k = 6δ/(π²k²)``: ``P(any false alarm over all looks) ≤ δ``
    by the union bound (chi-square approximation: expected counts ≥ ~5).

    Parameters
    ----------
    delta : float
        False-alarm budget over all looks.

    Examples
    --------
    Calibration counts (50, 50), window (30, 10): column totals (80, 60) of 140, so the
    expected counts are (400/7, 300/7) and (160/7, 120/7); every cell is off by 50/7, and
    ``(50/7)² · (7/400 + 7/300 + 7/160 + 7/120) = 175/24 ≈ 7.2917`` on 1 degree of freedom.

    >>> m = PredictionMix().fit(np.r_[np.zeros(50, int), np.ones(50, int)], n_classes=2)
    >>> round(m.update(np.r_[np.zeros(30, int), np.ones(10, int)]).statistic, 4)
    7.2917
    """

    name = "prediction mix"

    def __init__(self, *, delta: float = DEFAULT_DELTA) -> None:
        self.delta = check_alpha(delta, "delta")

    def fit(self, predicted_cal: Any, n_classes: int | None = None) -> PredictionMix:
        """Count the calibration rows' predicted classes (``0..K-1``)."""
        pred = _as_1d(predicted_cal, "predicted_cal", dtype=np.int64)
        if pred.min() < 0:
            msg = "predicted_cal must hold class indices ≥ 0"
            raise ValueError(msg)
        K = int(pred.max()) + 1 if n_classes is None else int(n_classes)
        if pred.max() >= K:
            msg = f"predicted_cal holds class {int(pred.max())} but n_classes is {K}"
            raise ValueError(msg)
        self.n_classes_ = K
        self.calibration_counts_ = np.bincount(pred, minlength=K).astype(np.float64)
        self.looks_ = 0
        self.rows_ = 0
        return self

    def update(self, predicted: Any) -> MonitorResult:
        """Feed the next window's predicted classes."""
        if not hasattr(self, "calibration_counts_"):
            msg = "this PredictionMix is not fitted yet: call fit(predicted_cal) first"
            raise NotFittedError(msg)
        pred = _as_1d(predicted, "predicted", dtype=np.int64)
        if pred.min() < 0 or pred.max() >= self.n_classes_:
            msg = f"predicted must hold class indices 0..{self.n_classes_ - 1}"
            raise ValueError(msg)
        self.looks_ += 1
        self.rows_ += int(pred.shape[0])
        window = np.bincount(pred, minlength=self.n_classes_).astype(np.float64)
        look = prediction_mix_look(self.calibration_counts_, window, delta=self.delta, look=self.looks_)
        return MonitorResult(name=self.name, rows_seen=self.rows_, **look)


__all__ = [
    "BET_FRACTIONS",
    "DEFAULT_CALIBRATION_DELTA",
    "DEFAULT_DELTA",
    "DEFAULT_PATIENCE",
    "DEFAULT_SR_THRESHOLD",
    "DEFAULT_VILLE_THRESHOLD",
    "DEFERRED_FIELDS",
    "DETECTOR_NAMES",
    "BernoulliBetting",
    "BettingLook",
    "CoverageDrop",
    "DeferredResult",
    "EpisodeTracker",
    "MonitorResult",
    "PredictionMix",
    "ReferenceExceedance",
    "RiskJump",
    "ShiftWarning",
    "betting_alarm",
    "betting_guarantee",
    "betting_result",
    "calibration_null_rate",
    "chi_square_two_sample",
    "coverage_drop_result",
    "coverage_drop_words",
    "has_finite_threshold",
]
