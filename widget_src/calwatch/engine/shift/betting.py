"""The betting test of a 0/1 event rate, one stream at a time or many side by side.

Events ``e_t ∈ {0, 1}`` (a miss, an exceedance) with null ``E[e_t | past] ≤ ε₀``. For a fixed
bet ``λ ∈ [0, 1/ε₀]`` the capital ``K_t = Π_{s ≤ t} (1 + λ (e_s − ε₀))`` is a non-negative
supermartingale under the null. We bet on a fixed grid of ten ``λ_j = u_j / ε₀``, ``u_j``
geometric from 0.005 to 0.5 (Kelly's bet ``(ε₁ − ε₀)/(ε₀(1 − ε₀))`` for rates ``ε₁`` from a few
tenths of a point to several times ``ε₀`` above the null), and average with equal weights:

- ``detector="ville"``: ``K_t = mean_j K_{j,t}`` is a test supermartingale, so by Ville's
  inequality ``P(sup_t K_t ≥ c) ≤ 1/c`` over the whole stream. The alarm is sticky. Closed form
  from the counts: ``log K_{j,t} = E_t log(1 + λ_j(1 − ε₀)) + (t − E_t) log(1 − λ_j ε₀)``.
- ``detector="sr"`` (default): Shiryaev-Roberts for repeated detection,
  ``R_{j,t} = F_{j,t} (1 + R_{j,t−1})``, ``R_{j,0} = 0``, ``F`` the row's betting factor; alarm
  at ``mean_j R_{j,t} ≥ c``, then reset to 0. ``R_t − t`` is a supermartingale under the null,
  so ``R_t + (L − t)`` is a non-negative supermartingale on ``t ≤ L`` starting at ``L``, and by
  Ville's inequality ``P(a false alarm within L rows) ≤ L/c`` (a reset only lowers ``R``: the
  restarted statistic never exceeds the one that was not restarted, so the bound covers the
  alarms after a reset too).

  **Anytime (the default, ``false_alarm=δ``).** A constant ``c`` bounds false alarms only
  within ``L`` rows: a stream of 10⁷ labelled rows against ``c = 10⁶`` expects several. So the
  threshold grows with the rows tested, in epochs ``k = 1, 2, …`` of rows
  ``N_{k−1} < t ≤ N_k``, ``N_k = B·2^{k−1}`` (``B`` = :data:`EPOCH_ROWS`):
  ``c_k = N_k / (δ w_k)`` with ``w_k = 6/(π² k²)``. Epoch ``k`` errs with probability at most
  ``N_k / c_k = δ w_k``, and the ``w_k`` sum to 1: ``P(any false alarm, however long the stream
  runs) ≤ δ``. The price is a threshold that grows like ``t log² t``, so evidence must grow a
  little more before an alarm late in a long stream (``log c`` is 16.6 at 10⁵ rows and 25.6 at
  10⁷ for ``δ = 0.01``, against ``log 10⁶ = 13.8``).
  Vectorised: with ``L_t = Σ_{s≤t} log F_s``, ``R_t = e^{L_t} (R_0 + Σ_{k<t} e^{−L_k})``, a
  cumulative log-sum-exp.

**Many tests at once.** A per-class coverage test runs one such test per class, each on its
class's rows in arrival order. :class:`GroupedBetting` holds their states as arrays (one row
per group) and advances every group touched by a batch in one pass: the batch's rows are
grouped, laid out as a padded ``groups × rows × bets`` block (groups of similar size together,
so padding at most doubles the work), and the recursions above run along the rows axis for all
groups at once. Padding sits after a group's last row and is never read, so each group's values
are computed by exactly the floating-point operations of the one-group test
(:class:`BernoulliBetting`, which runs the same kernel with one group): the per-class test costs
a few array operations per batch whatever the number of classes, not a call per class.

**The null rate** ``ε₀`` of a conformal threshold: the threshold ``s_(k)``,
``k = ⌈(n+1)(1−α)⌉``, misses a fresh row with probability ``ε ~ Beta(n+1−k, k)`` over the
calibration draw (exactly for continuous scores, stochastically smaller with ties or with the
top class added). ``ε`` is ``α`` only on average, so ``calibration_delta=δ_c`` tests against
``ε₀ =`` the ``1 − δ_c`` quantile of that Beta, and the false-alarm bound gains ``+ δ_c``.
``calibration_delta=None`` tests against ``α`` exactly.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import check_alpha
from calwatch.engine.conformal.quantiles import conformal_rank

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
DetectorName = Literal["sr", "ville"]
DETECTOR_NAMES: tuple[DetectorName, ...] = ("sr", "ville")

#: Bets ``u_j = λ_j ε₀`` of the betting mixture: a share of the largest bet ``1/ε₀``.
BET_FRACTIONS: tuple[float, ...] = tuple(float(u) for u in np.geomspace(0.005, 0.5, 10))
#: Alarm thresholds ``c`` of the constant-threshold tests: Shiryaev-Roberts (a false alarm
#: within ``L`` rows has probability ≤ ``L/c``) and Ville (≤ ``1/c`` over the whole stream).
DEFAULT_SR_THRESHOLD = 1e6
DEFAULT_VILLE_THRESHOLD = 100.0
#: Default ``δ`` of the anytime tests: P(any false alarm over the whole stream) ≤ δ.
DEFAULT_FALSE_ALARM = 0.01
#: Rows ``B`` of the first epoch of an anytime threshold (the epochs double after it).
EPOCH_ROWS = 100_000
_LN10 = math.log(10.0)


# ----------------------------------------------------------------------- null rates
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
    a = check_alpha(alpha)
    if calibration_delta is None:
        return a
    n = int(n_calibration)
    if not has_finite_threshold(a, n):
        msg = (
            f"{n} calibration rows give no finite threshold at level {a} (every set is full, "
            "nothing can be missed): nothing to test"
        )
        raise ValueError(msg)
    return float(calibration_null_rates(a, np.array([n]), calibration_delta)[0])


def calibration_null_rates(alpha: float, n_calibration: Any, calibration_delta: float) -> FloatArray:
    """:func:`calibration_null_rate` for many calibration sizes at once (all must be testable).

    One call of the regularised incomplete beta's inverse for every size (``scipy.special.betaincinv``,
    the function ``scipy.stats.beta.ppf`` evaluates, without its per-call overhead).

    Examples
    --------
    >>> calibration_null_rates(0.1, [9, 99], 0.01).round(4).tolist()
    [0.4005, 0.1805]
    """
    from scipy.special import betaincinv  # on first use: `import calwatch` stays fast

    a = check_alpha(alpha)
    delta = check_alpha(calibration_delta, "calibration_delta")
    n = np.asarray(n_calibration, dtype=np.int64)
    k = np.array([conformal_rank(int(v), a) for v in n.tolist()], dtype=np.int64)
    if n.size and (np.any(n < 1) or np.any(k > n)):
        msg = f"calibration sizes {n[(n < 1) | (k > n)].tolist()} give no finite threshold at level {a}"
        raise ValueError(msg)
    return np.asarray(betaincinv(n + 1 - k, k, 1.0 - delta), dtype=np.float64)


def anytime_thresholds(rows: Any, false_alarm: float, epoch_rows: int = EPOCH_ROWS) -> FloatArray:
    """The anytime threshold ``c_k`` in force at each row count (module docstring).

    Row ``t`` (1-based) lies in epoch ``k = 1 + max(0, ⌈log2(t/B)⌉)``, which ends at
    ``N_k = B·2^{k−1}``; its threshold is ``c_k = N_k π² k² / (6δ)``.

    Examples
    --------
    With ``B = 100`` and ``δ = 0.01``: rows 1..100 are epoch 1 (``c = 100·π²/0.06 ≈ 16,449``),
    rows 101..200 epoch 2 (``c = 200·4π²/0.06``).

    >>> anytime_thresholds([1, 100, 101, 200], 0.01, epoch_rows=100).round(0).tolist()
    [16449.0, 16449.0, 131595.0, 131595.0]
    """
    n = np.maximum(np.asarray(rows, dtype=np.float64), 1.0)
    if n.ndim == 1 and n.size >= 1:  # a batch usually sits inside one epoch: one number for all
        low, high = (float(n[0]), float(n[-1])) if n.size <= 2 else (float(n.min()), float(n.max()))
        if _epoch(low, epoch_rows) == _epoch(high, epoch_rows):
            return np.full(n.shape, anytime_threshold(high, false_alarm, epoch_rows))
    k = 1.0 + np.maximum(0.0, np.ceil(np.log2(n / epoch_rows)))
    out: FloatArray = epoch_rows * 2.0 ** (k - 1.0) * math.pi**2 * k**2 / (6.0 * false_alarm)
    return out


def _epoch(rows: float, epoch_rows: int) -> float:
    """The epoch ``k`` holding row ``rows`` (1-based)."""
    return 1.0 + max(0.0, math.ceil(math.log2(max(rows, 1.0) / epoch_rows)))


def anytime_threshold(rows: float, false_alarm: float, epoch_rows: int = EPOCH_ROWS) -> float:
    """:func:`anytime_thresholds` at one row count (plain floats: for the threshold shown now)."""
    k = _epoch(rows, epoch_rows)
    return float(epoch_rows * 2.0 ** (k - 1.0) * math.pi**2 * k**2 / (6.0 * false_alarm))


def alarm_thresholds(
    detector: DetectorName, threshold: float | None, false_alarm: float | None
) -> tuple[float | None, float | None]:
    """The ``(threshold, false_alarm)`` a test runs with: a constant ``c``, or an anytime ``δ``.

    Shiryaev-Roberts without ``threshold`` is anytime at ``false_alarm`` (default
    :data:`DEFAULT_FALSE_ALARM`); with one, constant. Ville is always constant, ``c = 1/δ``
    when given ``false_alarm`` (default :data:`DEFAULT_VILLE_THRESHOLD`).
    """
    check_detector(detector, threshold)
    if threshold is not None and false_alarm is not None:
        msg = "give threshold= (a constant c) or false_alarm= (δ), not both"
        raise ValueError(msg)
    if false_alarm is not None:
        false_alarm = check_alpha(false_alarm, "false_alarm")
    if detector == "ville":
        if threshold is not None:
            return float(threshold), None
        return (DEFAULT_VILLE_THRESHOLD if false_alarm is None else 1.0 / false_alarm), None
    if threshold is not None:
        return float(threshold), None
    return None, DEFAULT_FALSE_ALARM if false_alarm is None else false_alarm


def thresholds_at(rows: Any, threshold: float | None, false_alarm: float | None) -> FloatArray:
    """The threshold ``c`` at each row count: ``threshold`` if constant, else the anytime one at δ.

    A test written before anytime thresholds existed has neither (its ``threshold`` was the
    constant default): it keeps :data:`DEFAULT_SR_THRESHOLD`.
    """
    n = np.asarray(rows, dtype=np.float64)
    if threshold is not None or false_alarm is None:
        return np.full(n.shape, float(threshold or DEFAULT_SR_THRESHOLD))
    return anytime_thresholds(n, false_alarm)


#: Epochs in a threshold table: epoch 48 ends past 2^63 rows, beyond any row count.
TABLE_EPOCHS = 48


@functools.lru_cache(maxsize=256)
def threshold_table(threshold: float | None, false_alarm: float | None) -> tuple[FloatArray, int]:
    """:func:`thresholds_at` as a table for the compiled loops: ``(c per epoch, B)``.

    Row ``t`` (1-based) alarms at ``table[k]``, ``k`` the 0-based epoch holding ``t``
    (:func:`calwatch.engine.shift.kernels.epoch_of`); a constant threshold is a table of one
    entry with ``B = 0``. Each entry is :func:`anytime_threshold` at its epoch, the very number
    :func:`thresholds_at` gives every row of that epoch.
    """
    if threshold is not None or false_alarm is None:
        table, epoch_rows = np.array([float(threshold or DEFAULT_SR_THRESHOLD)]), 0
    else:
        ends = (EPOCH_ROWS * 2.0**k for k in range(TABLE_EPOCHS))
        table, epoch_rows = np.array([anytime_threshold(n, false_alarm) for n in ends]), EPOCH_ROWS
    table.flags.writeable = False  # shared by every caller (cached)
    return table, epoch_rows


@functools.lru_cache(maxsize=256)
def log_threshold_table(threshold: float | None, false_alarm: float | None) -> tuple[FloatArray, int]:
    """:func:`threshold_table` in natural logs (``np.log`` of the table: the same bits as of each row's)."""
    table, epoch_rows = threshold_table(threshold, false_alarm)
    log_table = np.log(table)
    log_table.flags.writeable = False
    return log_table, epoch_rows


def threshold_now(rows: int, threshold: float | None, false_alarm: float | None) -> float:
    """:func:`thresholds_at` after ``rows`` rows (at least the first), as ``log10 c``."""
    if threshold is not None or false_alarm is None:
        return math.log10(threshold or DEFAULT_SR_THRESHOLD)
    return math.log10(anytime_threshold(max(rows, 1), false_alarm))


def check_detector(detector: str, threshold: float | None) -> None:
    """Refuse an unknown detector name or a threshold that is not a finite number above 1."""
    if detector not in DETECTOR_NAMES:
        msg = f"detector must be one of {DETECTOR_NAMES}; got {detector!r}"
        raise ValueError(msg)
    if threshold is not None and not (math.isfinite(threshold) and threshold > 1):
        msg = f"threshold must be a finite number > 1; got {threshold!r}"
        raise ValueError(msg)


def check_bet_fractions(bet_fractions: Any) -> FloatArray:
    """The bet fractions ``u_j`` as an array, refused unless a non-empty list of numbers in (0, 1)."""
    u = np.asarray(bet_fractions, dtype=np.float64)
    if u.ndim != 1 or u.size == 0 or not ((u > 0) & (u < 1)).all():
        msg = f"bet_fractions must be numbers in (0, 1); got {bet_fractions!r}"
        raise ValueError(msg)
    return u


def log_up_factors(null_rates: FloatArray, u: FloatArray) -> FloatArray:
    """``log(1 + λ_j (1 − ε₀))`` of an event, ``λ_j = u_j/ε₀``, shape ``(groups, bets)``."""
    eps = null_rates[:, None]
    out: FloatArray = np.log1p(u[None, :] * (1.0 - eps) / eps)
    return out


# --------------------------------------------------------------------------- the kernel
def run_betting(
    events: BoolArray,
    groups: IntArray,
    *,
    log_up: FloatArray,
    log_down: FloatArray,
    sr: FloatArray,
    rows: IntArray,
    counts: IntArray,
    alarmed: BoolArray,
    detector: DetectorName,
    thresholds: FloatArray,
) -> tuple[FloatArray, BoolArray]:
    """Advance the tests of ``groups`` over the rows, in arrival order; return the trace and alarms.

    The state arrays (``sr``, ``rows``, ``counts``, ``alarmed``) are updated in place; row
    ``t`` alarms at ``thresholds[t]``. The rows run through
    :func:`calwatch.engine.shift.kernels.betting_rows`, the recursion row by row.
    """
    from calwatch.engine.shift.kernels import betting_rows

    trace = np.empty(events.shape[0])
    alarm = np.zeros(events.shape[0], dtype=np.bool_)
    betting_rows(
        np.ascontiguousarray(events), np.ascontiguousarray(groups, dtype=np.int64), log_up, log_down,
        sr, rows, counts, alarmed, detector == "ville", np.ascontiguousarray(thresholds, dtype=np.float64),
        trace, alarm,
    )  # fmt: skip
    return trace, alarm


def guarantee_text(
    detector: DetectorName,
    null_rate: float,
    threshold: float | None,
    n_bets: int,
    false_alarm: float | None = None,
) -> str:
    """The false-alarm bound of a betting test, in words with the numbers."""
    if threshold is None:
        return (
            f"Shiryaev-Roberts on a mixture of {n_bets} betting martingales against rate {null_rate:.4g}, "
            f"restarted after each alarm, its threshold growing with the rows tested (epochs of "
            f"{EPOCH_ROWS:,}·2^(k−1) rows, c_k = N_k·π²k²/(6δ)): P(any false alarm over the whole "
            f"stream, however long) ≤ δ = {false_alarm:g}"
        )
    if detector == "ville":
        return (
            f"Ville's inequality on a mixture of {n_bets} betting martingales "
            f"against rate {null_rate:.4g}: P(any false alarm over the whole stream) "
            f"≤ 1/c = {1.0 / threshold:.3g}"
        )
    return (
        f"Shiryaev-Roberts on a mixture of {n_bets} betting martingales "
        f"against rate {null_rate:.4g}, c = {threshold:.3g}: mean rows to a false alarm ≥ c; "
        f"P(a false alarm within L rows) ≤ L/c ({min(1.0, 1e4 / threshold):.3g} for 10,000 rows)"
    )


def as_events(events: Any) -> BoolArray:
    """0/1 or boolean events as a 1-D boolean array, refused otherwise."""
    e = np.asarray(events)
    if e.ndim != 1:
        msg = f"events must be a 1-D array of 0/1 or booleans; got shape {e.shape}"
        raise ValueError(msg)
    if e.dtype != np.bool_:
        if not np.isin(e, (0, 1)).all():
            msg = "events must hold only 0/1 or booleans"
            raise ValueError(msg)
        e = e.astype(bool)
    return e


# ------------------------------------------------------------------------ one stream
_NO_GROUPS = np.empty(0, dtype=np.int64)  # every row in group 0
_ONE_GROUP = np.ones(1, dtype=np.bool_)  # which is tested
_NO_TRACE = np.empty(0)  # no per-row trace wanted


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
        A constant alarm threshold ``c > 1`` (Ville's default: 100).
    false_alarm : float, optional
        ``δ`` of an anytime threshold (Shiryaev-Roberts' default: 0.01, see the module
        docstring); for Ville, ``c = 1/δ``. Give ``threshold`` or ``false_alarm``, not both.

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
        false_alarm: float | None = None,
        bet_fractions: tuple[float, ...] = BET_FRACTIONS,
    ) -> None:
        eps = check_alpha(null_rate, "null_rate")
        self.threshold, self.false_alarm = alarm_thresholds(detector, threshold, false_alarm)
        u = check_bet_fractions(bet_fractions)
        self.null_rate = eps
        self.detector: DetectorName = detector
        self.bet_fractions = tuple(float(v) for v in u)
        self._log_up = log_up_factors(np.array([eps]), u)[0]  # factor 1 + λ(1 − ε₀) of an event
        self._log_down = np.log1p(-u)  # factor 1 − λ ε₀ of a non-event
        self._log_sr = np.full(u.size, -math.inf)
        self.rows_ = 0
        self.events_ = 0
        self.alarms_: list[int] = []
        self.log10_statistic_ = -math.inf if detector == "sr" else 0.0

    @property
    def log10_threshold(self) -> float:
        """``log10 c`` now (an anytime threshold: at the latest row)."""
        # false_alarm is absent in snapshots from before anytime thresholds
        return threshold_now(self.rows_, self.threshold, getattr(self, "false_alarm", None))

    def guarantee(self) -> str:
        """The false-alarm bound, in words with the numbers."""
        return guarantee_text(
            self.detector,
            self.null_rate,
            self.threshold,
            len(self.bet_fractions),
            getattr(self, "false_alarm", None),
        )

    def update(self, events: Any) -> FloatArray:
        """Feed the next events in order; return ``log10`` of the statistic after each row."""
        e = as_events(events)
        trace = np.empty(e.shape[0])
        if e.shape[0]:
            self.advance(e, trace)
        return trace

    def advance(self, events: BoolArray, trace: FloatArray | None = None) -> float:
        """Feed a non-empty boolean array of events; return the highest ``log10`` statistic among them.

        :meth:`update` without the per-row trace unless ``trace`` (shape ``(m,)``) is given to
        fill: a caller that reports the window's peak (:class:`~calwatch.engine.shift.monitors.CoverageDrop`)
        needs one logarithm, not one per row.
        """
        from calwatch.engine.shift.kernels import betting_batch

        m = events.shape[0]
        table, epoch_rows = threshold_table(self.threshold, getattr(self, "false_alarm", None))
        rows = np.array([self.rows_], dtype=np.int64)
        counts = np.array([self.events_], dtype=np.int64)
        peak, last, alarm_rows = np.full(1, -math.inf), np.full(1, -math.inf), np.empty(m, dtype=np.int64)
        with np.errstate(divide="ignore"):
            sr = np.exp(self._log_sr)[None, :]  # kept in log form (snapshots), run in linear form
            n_alarms = betting_batch(
                events, _NO_GROUPS, _ONE_GROUP, self._log_up[None, :], self._log_down, sr, rows, counts,
                np.array([self.alarmed_]), self.detector == "ville", table, epoch_rows,
                _NO_TRACE if trace is None else trace, np.zeros(1, dtype=np.int64),
                np.zeros(1, dtype=np.int64), peak, last, np.empty(m, dtype=np.int64), alarm_rows,
            )  # fmt: skip
            self._log_sr = np.log(sr[0])
        if n_alarms:
            self.alarms_.extend(alarm_rows[:n_alarms].tolist())
        self.rows_, self.events_ = int(rows[0]), int(counts[0])
        self.log10_statistic_ = float(last[0])
        return float(peak[0])

    @property
    def alarmed_(self) -> bool:
        """Whether the test has ever alarmed."""
        return bool(self.alarms_)

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the test back exactly as it is now."""
        log_sr = self._log_sr.copy()
        rows, events, statistic, n_alarms = self.rows_, self.events_, self.log10_statistic_, len(self.alarms_)

        def restore() -> None:
            self._log_sr = log_sr.copy()
            self.rows_, self.events_, self.log10_statistic_ = rows, events, statistic
            del self.alarms_[n_alarms:]

        return restore


# ----------------------------------------------------------------------- many streams
@dataclass(frozen=True)
class GroupLook:
    """One batch of a :class:`GroupedBetting`, for the groups it touched.

    Attributes
    ----------
    groups : ndarray of int64
        The groups with rows in the batch (sorted).
    rows, events : ndarray of int64
        Per touched group, its rows and events in this batch.
    peak : ndarray of float64
        Per touched group, the highest ``log10`` statistic within the batch.
    last : ndarray of float64
        Per touched group, the ``log10`` statistic after its last row.
    alarm_groups, alarm_rows : ndarray of int64
        The batch's alarms: the group, and the row in that group's own row count (from 0).
    """

    groups: IntArray
    rows: IntArray
    events: IntArray
    peak: FloatArray
    last: FloatArray
    alarm_groups: IntArray
    alarm_rows: IntArray

    def alarms_of(self, group: int) -> list[int]:
        """The alarm rows of one group in this batch."""
        rows: list[int] = self.alarm_rows[self.alarm_groups == group].tolist()
        return rows


class GroupedBetting:
    """Independent :class:`BernoulliBetting` tests, one per group, advanced together.

    Group ``i`` tests its own rows in arrival order against its own null rate ``ε₀,i``; every
    group shares the bets, the detector and the threshold. Groups whose null rate is ``nan``
    have no test (a class too small to test): their rows are ignored. The values equal those
    of one :class:`BernoulliBetting` per group fed that group's rows (same floating-point
    operations), at the cost of a few array operations per batch.

    Parameters
    ----------
    null_rates : array-like of shape (g,)
        ``ε₀`` per group in (0, 1), or ``nan`` for a group without a test.
    detector, threshold, false_alarm, bet_fractions
        As for :class:`BernoulliBetting`, for each group's test (an anytime threshold runs on
        the group's own row count).

    Attributes
    ----------
    rows, events : ndarray of int64, shape (g,)
        Rows and events each group has seen.
    log10_statistic : ndarray of shape (g,)
        Each group's current statistic.
    alarm_groups, alarm_rows : ndarray of int64
        Every alarm so far (group, row in the group's own count), oldest batch first.

    Examples
    --------
    Two groups with one bet ``u = 0.5`` at ``ε₀ = 0.1`` (×5.5 an event, ×0.5 a non-event): the
    rows of group 0 are events 1, 1 and group 1's are 0, 1, each in its own Shiryaev-Roberts.

    >>> t = GroupedBetting([0.1, 0.1], bet_fractions=(0.5,))
    >>> look = t.update(np.array([True, False, True, True]), np.array([0, 1, 0, 1]))
    >>> (10 ** look.last).round(6).tolist()  # 5.5·(1 + 5.5) and 5.5·(1 + 0.5)
    [35.75, 8.25]
    """

    def __init__(
        self,
        null_rates: Any,
        *,
        detector: DetectorName = "sr",
        threshold: float | None = None,
        false_alarm: float | None = None,
        bet_fractions: tuple[float, ...] = BET_FRACTIONS,
    ) -> None:
        rates = np.asarray(null_rates, dtype=np.float64)
        testable = ~np.isnan(rates)
        if rates.ndim != 1 or not ((rates[testable] > 0) & (rates[testable] < 1)).all():
            msg = f"null_rates must be a 1-D array of rates in (0, 1) or nan; got {null_rates!r}"
            raise ValueError(msg)
        self.threshold, self.false_alarm = alarm_thresholds(detector, threshold, false_alarm)
        u = check_bet_fractions(bet_fractions)
        self.null_rates = rates
        self.testable = testable
        self.detector: DetectorName = detector
        self.bet_fractions = tuple(float(v) for v in u)
        self.log_up = np.zeros((rates.size, u.size))
        self.log_up[testable] = log_up_factors(rates[testable], u)
        self.log_down = np.log1p(-u)
        g = rates.size
        self.sr = np.zeros((g, u.size))  # Shiryaev-Roberts R_j per group, linear scale
        self.alarmed = np.zeros(g, dtype=np.bool_)
        self.rows = np.zeros(g, dtype=np.int64)
        self.events = np.zeros(g, dtype=np.int64)
        self.log10_statistic = np.full(g, -math.inf if detector == "sr" else 0.0)
        self.alarm_groups = np.empty(0, dtype=np.int64)
        self.alarm_rows = np.empty(0, dtype=np.int64)

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts every group's test back exactly as it is now (copies of g × bets numbers)."""
        arrays = {name: getattr(self, name).copy() for name in self._STATE}

        def restore() -> None:
            for name, value in arrays.items():
                setattr(self, name, value.copy())

        return restore

    _STATE = ("sr", "alarmed", "rows", "events", "log10_statistic", "alarm_groups", "alarm_rows")

    @property
    def n_tests(self) -> int:
        """Groups with a test."""
        return int(np.count_nonzero(self.testable))

    def log10_threshold(self, group: int) -> float:
        """``log10 c`` of a group's test now (an anytime threshold: at its latest row)."""
        return threshold_now(int(self.rows[group]), self.threshold, self.false_alarm)

    def guarantee(self, group: int) -> str:
        """Group ``group``'s false-alarm bound, in words with the numbers."""
        return guarantee_text(
            self.detector,
            float(self.null_rates[group]),
            self.threshold,
            len(self.bet_fractions),
            self.false_alarm,
        )

    def update(self, events: Any, groups: Any) -> GroupLook:
        """Feed the next rows (in arrival order) with their groups; rows of untested groups are skipped.

        Parameters
        ----------
        events : array-like of bool, shape (m,)
            The rows' events.
        groups : array-like of int, shape (m,)
            The rows' groups, ``0 ≤ group < g``.
        """
        from calwatch.engine.shift.kernels import betting_batch

        e = as_events(events)
        gid = np.ascontiguousarray(groups, dtype=np.int64)
        if gid.shape != e.shape:
            msg = f"groups must hold one group per event: shape {e.shape}; got {gid.shape}"
            raise ValueError(msg)
        g, m = self.null_rates.size, e.shape[0]
        table, epoch_rows = threshold_table(self.threshold, self.false_alarm)
        batch_rows, batch_events = np.zeros(g, dtype=np.int64), np.zeros(g, dtype=np.int64)
        peak, last = np.full(g, -math.inf), np.full(g, -math.inf)
        alarm_groups, alarm_rows = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64)
        n_alarms = betting_batch(
            e, gid, self.testable, self.log_up, self.log_down, self.sr, self.rows, self.events,
            self.alarmed, self.detector == "ville", table, epoch_rows, _NO_TRACE, batch_rows,
            batch_events, peak, last, alarm_groups, alarm_rows,
        )  # fmt: skip
        if n_alarms < 0:
            msg = f"groups must be integers in 0..{g - 1}"
            raise ValueError(msg)
        touched = np.flatnonzero(batch_rows)
        if touched.size == 0:
            empty = np.empty(0, dtype=np.int64)
            return GroupLook(empty, empty, empty, np.empty(0), np.empty(0), empty, empty)
        last = last[touched]
        self.log10_statistic[touched] = last
        alarm_groups, alarm_rows = alarm_groups[:n_alarms], alarm_rows[:n_alarms]  # arrival order
        if n_alarms:
            by_group = np.argsort(alarm_groups, kind="stable")  # by group, oldest first within one
            alarm_groups, alarm_rows = alarm_groups[by_group], alarm_rows[by_group]
            self.alarm_groups = np.concatenate([self.alarm_groups, alarm_groups])
            self.alarm_rows = np.concatenate([self.alarm_rows, alarm_rows])
        return GroupLook(
            touched, batch_rows[touched], batch_events[touched], peak[touched], last, alarm_groups, alarm_rows
        )


__all__ = [
    "BET_FRACTIONS",
    "DEFAULT_FALSE_ALARM",
    "DEFAULT_SR_THRESHOLD",
    "DEFAULT_VILLE_THRESHOLD",
    "DETECTOR_NAMES",
    "EPOCH_ROWS",
    "BernoulliBetting",
    "GroupLook",
    "GroupedBetting",
    "alarm_thresholds",
    "anytime_threshold",
    "anytime_thresholds",
    "calibration_null_rate",
    "calibration_null_rates",
    "has_finite_threshold",
    "log_threshold_table",
    "run_betting",
    "threshold_now",
    "threshold_table",
    "thresholds_at",
]
