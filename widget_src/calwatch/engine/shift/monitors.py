"""Simpler shift monitors, each with a stated test (SHIFT.md §4), and episodic warnings (§5).

Every monitor's ``update`` takes the next window of rows and returns a :class:`MonitorResult`:
statistic, threshold, alarm, and the false-alarm control that the test offers ("under the
null" below means: the stream rows are i.i.d. from the calibration distribution, the
exchangeability every calwatch guarantee rests on).

- :class:`CoverageDrop` (labels needed): are labelled rows missed more often than the
  calibrator promises? A betting test of the miss rate (below).
- :class:`RiskJump` (label-free): the window's mean estimated risk (any per-row risk, e.g.
  :meth:`~calwatch.engine.risk.estimator.RiskEstimator.row_risk`) against its calibration value, with a
  confidence interval; repeated looks are paid for by alpha spending.
- :class:`ReferenceExceedance` (label-free): the share of rows whose distance to the
  reference set exceeds the calibration rows' 95th percentile, against 5%; the betting test.
- :class:`PredictionMix` (label-free): predicted-class counts of the window against the
  calibration rows' (chi-square, alpha spending over looks).

**The betting test** (:class:`BernoulliBetting`). Events ``e_t ∈ {0, 1}`` (a miss, an
exceedance) with null ``E[e_t | past] ≤ ε₀``. For a fixed bet ``λ ∈ [0, 1/ε₀]`` the capital
``K_t = Π_{s ≤ t} (1 + λ (e_s − ε₀))`` is a non-negative supermartingale under the null. We
bet on a fixed grid of ten ``λ_j = u_j / ε₀``, ``u_j`` geometric from 0.005 to 0.5 (Kelly's
bet ``(ε₁ − ε₀)/(ε₀(1 − ε₀))`` for rates ``ε₁`` from a few tenths of a point to several
times ``ε₀`` above the null), and average with equal weights:

- ``detector="ville"``: ``K_t = mean_j K_{j,t}`` is a test supermartingale, so by Ville's
  inequality ``P(sup_t K_t ≥ c) ≤ 1/c`` over the whole stream. The alarm is sticky (the
  "violated since calibration" flag). Closed form from the counts: ``log K_{j,t} =
  E_t log(1 + λ_j(1 − ε₀)) + (t − E_t) log(1 − λ_j ε₀)``.
- ``detector="sr"`` (default): Shiryaev-Roberts for repeated detection,
  ``R_{j,t} = F_{j,t} (1 + R_{j,t−1})``, ``R_{j,0} = 0``, ``F`` the row's betting factor;
  alarm at ``mean_j R_{j,t} ≥ c``, then reset to 0. ``R_t − t`` is a supermartingale under the
  null, so the mean number of rows to a false alarm is ``≥ c`` and, by Doob's maximal
  inequality on the submartingale ``R_t``, ``P(a false alarm within L rows) ≤ L/c``: choose
  ``c = L/δ``. (CUSUM, ``F·max(1, ·)``, is never above SR, so it has the same bounds and
  alarms no sooner.) Vectorised per batch: with ``L_t = Σ_{s≤t} log F_s``,
  ``R_t = e^{L_t} (R_0 + Σ_{k<t} e^{−L_k})``, a cumulative log-sum-exp.

**The null rate** ``ε₀`` of a conformal threshold: the threshold ``s_(k)``,
``k = ⌈(n+1)(1−α)⌉``, misses a fresh row with probability ``ε ~ Beta(n+1−k, k)`` over the
calibration draw (exactly for continuous scores, stochastically smaller with ties or with
the top class added). ``ε`` is ``α`` only on average: a test against ``α`` itself would, on a
long enough clean stream, alarm for about half of all calibration draws (those with
``ε > α``). So ``calibration_delta=δ_c`` tests against ``ε₀ =`` the ``1 − δ_c`` quantile of that
Beta, and the false-alarm bound gains ``+ δ_c`` (a calibration draw this unlucky counts as a
false alarm). ``calibration_delta=None`` tests against ``α`` exactly.

**Warnings** (SHIFT.md §5): :class:`EpisodeTracker` turns a sequence of results into
:class:`ShiftWarning` records, one per episode: an episode opens at the first alarm and closes
only after ``patience`` consecutive looks without one (hysteresis in time), so an alarm that
flickers on and off raises one warning, not one per batch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import check_alpha
from calwatch.engine.conformal.quantiles import conformal_rank
from calwatch.engine.errors import NotFittedError
from calwatch.engine.metrics.intervals import clopper_pearson

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]
DetectorName = Literal["sr", "ville"]
DETECTOR_NAMES: tuple[DetectorName, ...] = ("sr", "ville")

#: Bets ``u_j = λ_j ε₀`` of the betting mixture: a share of the largest bet ``1/ε₀``.
BET_FRACTIONS: tuple[float, ...] = tuple(float(u) for u in np.geomspace(0.005, 0.5, 10))
#: Default alarm thresholds ``c``: Shiryaev-Roberts (mean rows to a false alarm ≥ c) and Ville.
DEFAULT_SR_THRESHOLD = 1e6
DEFAULT_VILLE_THRESHOLD = 100.0
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


# ------------------------------------------------------------------ betting test
def has_finite_threshold(alpha: float, n_calibration: int) -> bool:
    """Whether ``n`` calibration scores give a conformal threshold at level ``α`` (else every set is full).

    The threshold is the ``k``-th smallest score, ``k = ⌈(n+1)(1−α)⌉``; with ``k > n`` it is
    infinite, every set holds every class and nothing can be missed: a coverage test has nothing
    to test.

    Examples
    --------
    >>> has_finite_threshold(0.1, 9), has_finite_threshold(0.1, 8)
    (True, False)
    """
    n = int(n_calibration)
    return n >= 1 and conformal_rank(n, check_alpha(alpha)) <= n


def calibration_null_rate(alpha: float, n_calibration: int, calibration_delta: float | None) -> float:
    """The miss rate ``ε₀`` that a conformal threshold from ``n`` scores is tested against.

    ``None``: ``α`` itself. Otherwise the ``1 − δ_c`` quantile of ``Beta(n+1−k, k)``,
    ``k = ⌈(n+1)(1−α)⌉``, the distribution of the threshold's true miss rate over calibration
    draws.

    Examples
    --------
    n = 99, α = 0.1: ``k = 90``, so ``ε ~ Beta(10, 90)`` (mean 0.1); its 99% quantile:

    >>> round(calibration_null_rate(0.1, 99, 0.01), 4)
    0.1805
    """
    from scipy.stats import beta  # on first use: `import calwatch` stays fast

    a = check_alpha(alpha)
    if calibration_delta is None:
        return a
    delta = check_alpha(calibration_delta, "calibration_delta")
    n = int(n_calibration)
    k = conformal_rank(n, a)
    if n < 1 or k > n:
        msg = (
            f"{n} calibration rows give no finite threshold at level {a} (every set is full, "
            "nothing can be missed): nothing to test"
        )
        raise ValueError(msg)
    return float(beta.ppf(1.0 - delta, n + 1 - k, k))


class BernoulliBetting:
    """Sequential test of ``H0: E[e_t | past] ≤ ε₀`` for 0/1 events, by betting.

    See the module docstring for the martingales and their false-alarm bounds.

    Parameters
    ----------
    null_rate : float
        ``ε₀`` in (0, 1).
    detector : {"sr", "ville"}
        Shiryaev-Roberts (repeated detection, reset after each alarm) or Ville (one sticky
        alarm over the whole stream).
    threshold : float, optional
        Alarm threshold ``c > 1``; default ``1e6`` (SR) or ``100`` (Ville).

    Attributes
    ----------
    log10_statistic_ : float
        ``log10`` of the current mixture statistic (``−inf`` for SR before any row).
    rows_, events_ : int
        Rows and events seen.
    alarms_ : list of int
        0-based rows at which the test alarmed.

    Examples
    --------
    One bet, by hand: ``ε₀ = 0.1`` and ``u = 0.5`` (``λ = 5``): an event multiplies the capital by
    ``1 + 5·0.9 = 5.5``, a non-event by ``1 − 5·0.1 = 0.5``. Shiryaev-Roberts on events 1, 1, 0:
    ``R = 5.5·(1+0) = 5.5``, then ``5.5·(1+5.5) = 35.75``, then ``0.5·(1+35.75) = 18.375``.

    >>> t = BernoulliBetting(0.1, bet_fractions=(0.5,))
    >>> (10 ** t.update(np.array([True, True, False]))).round(6).tolist()
    [5.5, 35.75, 18.375]
    """

    def __init__(
        self,
        null_rate: float,
        *,
        detector: DetectorName = "sr",
        threshold: float | None = None,
        bet_fractions: tuple[float, ...] = BET_FRACTIONS,
    ) -> None:
        eps = check_alpha(null_rate, "null_rate")
        if detector not in DETECTOR_NAMES:
            msg = f"detector must be one of {DETECTOR_NAMES}; got {detector!r}"
            raise ValueError(msg)
        if threshold is None:
            threshold = DEFAULT_SR_THRESHOLD if detector == "sr" else DEFAULT_VILLE_THRESHOLD
        if not (math.isfinite(threshold) and threshold > 1):
            msg = f"threshold must be a finite number > 1; got {threshold!r}"
            raise ValueError(msg)
        u = np.asarray(bet_fractions, dtype=np.float64)
        if u.ndim != 1 or u.size == 0 or not ((u > 0) & (u < 1)).all():
            msg = f"bet_fractions must be numbers in (0, 1); got {bet_fractions!r}"
            raise ValueError(msg)
        self.null_rate = eps
        self.detector: DetectorName = detector
        self.threshold = float(threshold)
        self.bet_fractions = tuple(float(v) for v in u)
        self._log_up = np.log1p(u * (1.0 - eps) / eps)  # factor 1 + λ(1 − ε₀) of an event
        self._log_down = np.log1p(-u)  # factor 1 − λ ε₀ of a non-event
        self._log_j = math.log(u.size)
        self._log_sr = np.full(u.size, -math.inf)
        self.rows_ = 0
        self.events_ = 0
        self.alarms_: list[int] = []
        self.log10_statistic_ = -math.inf if detector == "sr" else 0.0

    @property
    def log10_threshold(self) -> float:
        """``log10 c``."""
        return math.log10(self.threshold)

    def guarantee(self) -> str:
        """The false-alarm bound, in words with the numbers."""
        c = self.threshold
        if self.detector == "ville":
            return (
                f"Ville's inequality on a mixture of {len(self.bet_fractions)} betting martingales "
                f"against rate {self.null_rate:.4g}: P(any false alarm over the whole stream) "
                f"≤ 1/c = {1.0 / c:.3g}"
            )
        return (
            f"Shiryaev-Roberts on a mixture of {len(self.bet_fractions)} betting martingales "
            f"against rate {self.null_rate:.4g}, c = {c:.3g}: mean rows to a false alarm ≥ c; "
            f"P(a false alarm within L rows) ≤ L/c ({min(1.0, 1e4 / c):.3g} for 10,000 rows)"
        )

    def update(self, events: Any) -> FloatArray:
        """Feed the next events in order; return ``log10`` of the statistic after each row."""
        e = np.asarray(events)
        if e.ndim != 1:
            msg = f"events must be a 1-D array of 0/1 or booleans; got shape {e.shape}"
            raise ValueError(msg)
        if e.dtype != np.bool_:
            if not np.isin(e, (0, 1)).all():
                msg = "events must hold only 0/1 or booleans"
                raise ValueError(msg)
            e = e.astype(bool)
        m = e.shape[0]
        if m == 0:
            return np.empty(0)
        out = self._ville(e) if self.detector == "ville" else self._shiryaev_roberts(e)
        self.rows_ += m
        self.events_ += int(np.count_nonzero(e))
        self.log10_statistic_ = float(out[-1])
        return out

    def _ville(self, e: BoolArray) -> FloatArray:
        from scipy.special import logsumexp  # on first use: `import calwatch` stays fast

        events = self.events_ + np.cumsum(e)
        rows = self.rows_ + np.arange(1, e.shape[0] + 1)
        log_k = events[:, None] * self._log_up[None, :] + (rows - events)[:, None] * self._log_down[None, :]
        log10_mix: FloatArray = (logsumexp(log_k, axis=1) - self._log_j) / math.log(10.0)
        if not self.alarms_:
            crossed = np.flatnonzero(log10_mix >= self.log10_threshold)
            if crossed.size:
                self.alarms_.append(self.rows_ + int(crossed[0]))
        return log10_mix

    def _shiryaev_roberts(self, e: BoolArray) -> FloatArray:
        from scipy.special import logsumexp  # on first use: `import calwatch` stays fast

        log_f = np.where(e[:, None], self._log_up[None, :], self._log_down[None, :])
        out = np.empty(e.shape[0])
        start = 0
        log_c = self.log10_threshold
        while start < e.shape[0]:
            block = log_f[start:]
            cum = np.cumsum(block, axis=0)  # L_t
            terms = np.vstack([self._log_sr[None, :], np.zeros((1, block.shape[1])), -cum[:-1]])
            acc = np.logaddexp.accumulate(terms, axis=0)[1:]  # log(R_0 + Σ_{k<t} e^{−L_k})
            log_r = cum + acc
            log10_mix = (logsumexp(log_r, axis=1) - self._log_j) / math.log(10.0)
            crossed = np.flatnonzero(log10_mix >= log_c)
            if crossed.size == 0:
                out[start:] = log10_mix
                self._log_sr = log_r[-1]
                break
            stop = int(crossed[0])
            out[start : start + stop + 1] = log10_mix[: stop + 1]
            self.alarms_.append(self.rows_ + start + stop)
            self._log_sr = np.full(block.shape[1], -math.inf)  # reset after the alarm
            start += stop + 1
        return out

    @property
    def alarmed_(self) -> bool:
        """Whether the test has ever alarmed."""
        return bool(self.alarms_)


def _check_detector(detector: str, threshold: float | None) -> None:
    if detector not in DETECTOR_NAMES:
        msg = f"detector must be one of {DETECTOR_NAMES}; got {detector!r}"
        raise ValueError(msg)
    if threshold is not None and not (math.isfinite(threshold) and threshold > 1):
        msg = f"threshold must be a finite number > 1; got {threshold!r}"
        raise ValueError(msg)


def _spent_level(delta: float, look: int) -> float:
    """Alpha spending over looks: look ``k`` (1-based) gets ``6δ / (π² k²)``; the levels sum to δ."""
    return 6.0 * delta / (math.pi**2 * look**2)


def _as_1d(values: Any, name: str, *, dtype: Any = np.float64) -> npt.NDArray[Any]:
    arr = np.asarray(values.to_numpy() if hasattr(values, "to_numpy") else values)
    if arr.ndim != 1 or arr.shape[0] == 0:
        msg = f"{name} must be a non-empty 1-D array; got shape {arr.shape}"
        raise ValueError(msg)
    out = arr.astype(dtype)
    if np.issubdtype(out.dtype, np.floating) and not np.isfinite(out).all():
        msg = f"{name} contains NaN or inf"
        raise ValueError(msg)
    return out


def _betting_result(
    test: BernoulliBetting,
    name: str,
    window_alarms: list[int],
    *,
    estimate: float,
    interval: tuple[float, float],
    calibration_delta: float | None,
    threatens: str,
    explanation: str,
    action: str,
    statistic: float | None = None,
) -> MonitorResult:
    guarantee = test.guarantee()
    if calibration_delta is not None:
        guarantee += f"; + {calibration_delta:g} for an unlucky calibration draw"
    guarantee += " (null: rows i.i.d. like the calibration rows)"
    alarm = bool(window_alarms) or (test.detector == "ville" and test.alarmed_)
    return MonitorResult(
        name=name,
        statistic=test.log10_statistic_ if statistic is None else statistic,
        threshold=test.log10_threshold,
        alarm=alarm,
        guarantee=guarantee,
        threatens=threatens,
        explanation=explanation,
        action=action,
        estimate=estimate,
        interval=interval,
        rows_seen=test.rows_,
        alarm_rows=tuple(window_alarms),
    )


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
        Alarm threshold ``c``.

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
    ) -> None:
        self.alpha = check_alpha(alpha)
        _check_detector(detector, threshold)
        if calibration_delta is not None and n_calibration is None:
            msg = "pass n_calibration= (the calibrator's calibration rows), or calibration_delta=None"
            raise ValueError(msg)
        self.n_calibration = n_calibration
        self.calibration_delta = calibration_delta
        self.detector: DetectorName = detector
        self.threshold = threshold
        rate = calibration_null_rate(self.alpha, n_calibration or 0, calibration_delta)
        self.test_ = BernoulliBetting(rate, detector=detector, threshold=threshold)

    @property
    def null_rate(self) -> float:
        """``ε₀``, the miss rate tested against."""
        return self.test_.null_rate

    def update(self, covered: Any) -> MonitorResult:
        """Feed whether each newly labelled row was covered (in arrival order)."""
        hits = _as_1d(covered, "covered", dtype=bool)
        before = len(self.test_.alarms_)
        trace = self.test_.update(~hits)
        peak = float(trace.max()) if trace.size else -math.inf  # the evidence at its highest
        coverage = float(hits.mean())
        lo, hi = clopper_pearson([int(hits.sum())], [hits.shape[0]])
        eps = self.null_rate
        return _betting_result(
            self.test_,
            self.name,
            self.test_.alarms_[before:],
            estimate=coverage,
            interval=(float(lo[0]), float(hi[0])),
            calibration_delta=self.calibration_delta,
            threatens=f"coverage ≥ {1 - self.alpha:.3g} of the prediction sets",
            explanation=(
                f"labelled rows have fallen outside their sets more often than the calibrator allows "
                f"({eps:.1%}): the betting test's evidence reached 10^{peak:.1f} "
                f"(alarm at 10^{self.test_.log10_threshold:.1f}); in this window "
                f"{hits.shape[0] - int(hits.sum())} of {hits.shape[0]} missed ({1 - coverage:.1%})"
            ),
            action="recalibrate on recent labelled data; if it keeps recurring, retrain",
            statistic=peak,  # the window's highest evidence (the statistic resets after an alarm)
        )


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
    ) -> None:
        self.share = check_alpha(share, "share")
        _check_detector(detector, threshold)
        self.calibration_delta = calibration_delta
        self.detector: DetectorName = detector
        self.threshold = threshold

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
        self.test_ = BernoulliBetting(rate, detector=self.detector, threshold=self.threshold)
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
        return _betting_result(
            self.test_,
            self.name,
            self.test_.alarms_[before:],
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
        from scipy.stats import norm  # on first use: `import calwatch` stays fast

        if not hasattr(self, "calibration_mean_"):
            msg = "this RiskJump is not fitted yet: call fit(risk_cal) first"
            raise NotFittedError(msg)
        r = _as_1d(risk, "risk")
        self.looks_ += 1
        self.rows_ += int(r.shape[0])
        level = _spent_level(self.delta, self.looks_)
        z = float(norm.isf(level))
        m = r.shape[0]
        var_w = float(r.var(ddof=1)) if m > 1 else 0.0
        se = math.sqrt(var_w / m + self.calibration_var_ / self.n_calibration_)
        jump = float(r.mean()) - self.calibration_mean_
        threshold = self.min_jump + z * se
        return MonitorResult(
            name=self.name,
            statistic=jump,
            threshold=threshold,
            alarm=jump > threshold,
            guarantee=(
                f"one-sided Welch z-test, look {self.looks_} at level {level:.3g} (alpha spending "
                f"6δ/(π²k²)): P(any false alarm over all looks) ≤ δ = {self.delta:g} "
                "(normal approximation; null: window rows i.i.d. like the calibration rows)"
            ),
            threatens="the risk estimate and the coverage it predicts (estimated error is rising)",
            explanation=(
                f"the estimated error of the new rows is {r.mean():.1%} against {self.calibration_mean_:.1%} "
                "on the calibration rows"
            ),
            action="collect labels to confirm the error rate; recalibrate or retrain if it holds",
            estimate=jump,
            interval=(jump - z * se, jump + z * se),
            rows_seen=self.rows_,
        )


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
        from scipy.stats import chi2  # on first use: `import calwatch` stays fast

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
        statistic, df = chi_square_two_sample(self.calibration_counts_, window)
        level = _spent_level(self.delta, self.looks_)
        threshold = float(chi2.isf(level, df)) if df > 0 else math.inf
        shares = window / window.sum()
        expected = self.calibration_counts_ / self.calibration_counts_.sum()
        worst = int(np.argmax(np.abs(shares - expected)))
        return MonitorResult(
            name=self.name,
            statistic=statistic,
            threshold=threshold,
            alarm=statistic > threshold,
            guarantee=(
                f"chi-square two-sample test, look {self.looks_} at level {level:.3g} (alpha spending "
                f"6δ/(π²k²)): P(any false alarm over all looks) ≤ δ = {self.delta:g} "
                "(chi-square approximation; null: window rows i.i.d. like the calibration rows)"
            ),
            threatens="exchangeability with the calibration data (the predicted-class mix has moved)",
            explanation=(
                f"class {worst} is predicted for {shares[worst]:.1%} of the new rows against "
                f"{expected[worst]:.1%} of the calibration rows"
            ),
            action="check whether the population changed; collect labels and recalibrate (by class)",
            estimate=float(np.abs(shares - expected).sum() / 2.0),  # total variation distance
            rows_seen=self.rows_,
        )


def chi_square_two_sample(counts_a: Any, counts_b: Any) -> tuple[float, int]:
    """Pearson's chi-square of a ``2 × K`` table of counts; returns (statistic, degrees of freedom).

    Columns empty in both rows are dropped; ``df = K' − 1``.

    Examples
    --------
    >>> chi_square_two_sample([50, 50, 0], [30, 10, 0])  # 175/24; the empty third class dropped
    (7.291666666666668, 1)
    """
    table = np.vstack([np.asarray(counts_a, dtype=np.float64), np.asarray(counts_b, dtype=np.float64)])
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2 or (table.sum(axis=1) == 0).any():
        return 0.0, max(table.shape[1] - 1, 0)
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    return float(((table - expected) ** 2 / expected).sum()), int(table.shape[1] - 1)


__all__ = [
    "BET_FRACTIONS",
    "DEFAULT_CALIBRATION_DELTA",
    "DEFAULT_DELTA",
    "DEFAULT_PATIENCE",
    "DEFAULT_SR_THRESHOLD",
    "DEFAULT_VILLE_THRESHOLD",
    "DETECTOR_NAMES",
    "BernoulliBetting",
    "CoverageDrop",
    "EpisodeTracker",
    "MonitorResult",
    "PredictionMix",
    "ReferenceExceedance",
    "RiskJump",
    "ShiftWarning",
    "calibration_null_rate",
    "chi_square_two_sample",
    "has_finite_threshold",
]
