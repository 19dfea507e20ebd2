"""Shift warnings with false-alarm control (SHIFT.md §1): conformal test martingales.

Every guarantee calwatch shows assumes the stream is exchangeable with the calibration rows.
:class:`ConformalTestMartingale` watches that assumption online: each new row gets a smoothed
conformal p-value against every row before it, the p-values feed a betting martingale, and
an alarm goes off when the bet has grown past a threshold ``c``, with a stated bound on false
alarms.

Scores
    One nonconformity score per row, larger = less conforming. Label-free scores watch the
    inputs and the model (covariate shift): ``1 − max p``, the distance to the reference set,
    a per-row risk estimate, an embedding's nearest-neighbour distance. Label-based scores
    watch the conditional (concept shift) once labels arrive: a calibrator's score
    ``s(x, y)``. Feed late labels' scores in the order the labels arrive; that is valid as long
    as the order in which labels arrive does not depend on their values (a label that comes
    back sooner *because* the prediction was wrong breaks exchangeability of the fed sequence,
    and the alarm may then fire without a shift).

Why the p-values are fully online
    Row ``n``'s p-value is computed against the calibration rows *and* every earlier stream
    row (the calibration rows are the first elements of the sequence). Under exchangeability
    these p-values are independent and uniform, which is what makes the bounds below exact.
    P-values against the fixed calibration set alone are dependent (they share the
    calibration draw) and Ville's bound is then only approximate; calwatch does not take that
    shortcut.

False-alarm guarantees (under exchangeability of calibration + stream)
    ``"ville"``: ``P(sup_n S_n ≥ c) ≤ 1/c`` over the whole, unbounded stream (Ville's
    inequality); with ``c = 100``, at most a 1% chance of ever alarming. This is the "ever
    violated since calibration" flag, and its anytime-valid p-value is ``1 / max_k S_k``.
    It reacts slowly after a long quiet stretch (``log S_n`` drifts far below 0 under the
    null and must climb back).

    ``"cusum"`` and ``"shiryaev-roberts"``: change detectors on the martingale's factors
    ``F_n = S_n / S_{n−1}``, restarted after every alarm, so they stay quick after a quiet
    stretch. Their control is a rate, not a probability over the whole stream: the mean
    number of rows to a false alarm is at least ``c`` (``R_n − n`` is a martingale for
    Shiryaev–Roberts, and CUSUM never exceeds it), and the probability of a false alarm
    within any ``L`` rows is at most ``L/c``. Choose ``c = L/δ`` and state both: e.g.
    ``c = 10⁶`` keeps the chance of a false alarm within 10,000 rows below 1%.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, NamedTuple, Self

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.engine._validation import check_alpha
from calwatch.engine.errors import NotFittedError
from calwatch.engine.shift.betting import (
    DEFAULT_FALSE_ALARM,
    log_threshold_table,
    threshold_now,
    thresholds_at,
)
from calwatch.engine.shift.martingale import GridScoreBag, ScoreBag

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
StatisticName = Literal["ville", "cusum", "shiryaev-roberts"]

#: The statistics an alarm can be raised on.
STATISTICS: tuple[StatisticName, ...] = ("ville", "cusum", "shiryaev-roberts")
#: Rows ranked against each other per step of an update (larger updates are cut into chunks).
MAX_CHUNK = 4096
#: Version of the layout returned by :meth:`ConformalTestMartingale.state`.
STATE_VERSION = 1
_LN10 = math.log(10.0)
_COLUMNS = ("row", "p_value", "log10_martingale", "log10_cusum", "log10_sr", "alarm")


def _check_number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        msg = f"{name} must be a real number; got {value!r}"
        raise TypeError(msg)
    return float(value)


def _check_scores(scores: Any, name: str) -> FloatArray:
    if type(scores) is np.ndarray and scores.dtype == np.float64 and scores.ndim == 1:  # the usual case
        if np.isnan(scores).any():
            msg = f"{name} contains NaN (first in row {int(np.flatnonzero(np.isnan(scores))[0])})"
            raise ValueError(msg)
        checked: FloatArray = scores
        return checked
    arr = np.asarray(scores)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        msg = f"{name} must be a numeric array of scores; got dtype {arr.dtype}"
        raise TypeError(msg)
    if arr.ndim != 1:
        msg = f"{name} must be a 1-D array with one score per row; got shape {arr.shape}"
        raise ValueError(msg)
    out = np.asarray(arr, dtype=np.float64)
    if np.isnan(out).any():
        msg = f"{name} contains NaN (first in row {int(np.flatnonzero(np.isnan(out))[0])})"
        raise ValueError(msg)
    return out


class MartingaleStep(NamedTuple):
    """One batch of a :class:`ConformalTestMartingale`, one entry per row (natural logs).

    ``p_value``, ``log_martingale`` (``log S_n``), ``log_cusum``, ``log_sr`` (before any
    restart) and ``alarm`` (the chosen statistic alarmed at this row).
    """

    p_value: FloatArray
    log_martingale: FloatArray
    log_cusum: FloatArray
    log_sr: FloatArray
    alarm: npt.NDArray[np.bool_]


def _log_or_none(value: float) -> float | None:
    """``-inf`` as ``None`` (strict JSON has no infinities)."""
    return None if value == -math.inf else value


class ConformalTestMartingale:
    """Online exchangeability test: smoothed conformal p-values, simple-jumper martingale, alarms.

    Parameters
    ----------
    threshold : float
        The alarm threshold ``c > 1`` of the chosen ``statistic``. Ville: false alarm
        probability ``≤ 1/c`` over the whole stream (default 100: 1%). CUSUM and
        Shiryaev–Roberts: mean time to a false alarm ``≥ c`` rows, ``P(false alarm within L
        rows) ≤ L/c``, so use ``c = L/δ`` (e.g. ``1e6``). CUSUM and Shiryaev–Roberts restart
        after reaching ``c`` (their columns are reported whichever statistic is chosen).
    jump : float
        The simple jumper's jump rate ``J`` in ``[0, 1]``: each row, a share ``J`` of the
        capital is pooled and shared out evenly over the three bets ``ε ∈ {−1, 0, 1}``
        (bet on small p-values, no bet, bet on large ones), with ``f_ε(p) = 1 + ε(p − ½)``.
    statistic : {"ville", "cusum", "shiryaev-roberts"}
        Which statistic raises ``alarm``, ``alarmed_`` and ``first_alarm_index_``.
    resolution : float, optional
        If set, every score (calibration and stream) is replaced by ``⌊score / resolution⌋``
        before it enters the bag. That is a fixed, data-independent map, so exchangeability,
        the p-values' uniformity and every bound above are unchanged (ties are broken by
        ``θ``); it bounds the bag's memory by the number of grid cells the scores occupy, at
        the price of ignoring differences finer than ``resolution``. ``None`` keeps scores
        exact.
    seed : int
        Seed of the tie-breaking draws ``θ_n ~ U(0, 1)``: ``numpy.random.default_rng(seed)``,
        one ``random()`` draw per stream row in order (batching does not change them).

    Attributes
    ----------
    n_calibration_ : int
        Calibration rows (the first elements of the bag).
    n_seen_ : int
        Stream rows seen so far; ``row`` in :meth:`update`'s output counts from 0.
    log10_martingale_ : float
        ``log10 S_n`` now (``S_0 = 1``).
    max_log10_martingale_ : float
        ``log10 max_{k≤n} S_k``; ``anytime_p_value_ = min(1, 1 / max_k S_k)``.
    log10_cusum_, log10_sr_ : float
        CUSUM's ``log10 γ_n`` and Shiryaev–Roberts's ``log10 R_n`` now (after a restart: 0 and
        ``-inf``).
    alarmed_ : bool
        Whether the chosen statistic has reached ``threshold`` (Ville: ever; sticky).
    first_alarm_index_ : int or None
        The stream row of the first alarm.
    alarm_indices_ : list of int
        Every alarm row (CUSUM and Shiryaev–Roberts: one per restart; Ville: the first
        crossing only).

    Notes
    -----
    The bag is exact, not a sketch: sorted runs of distinct values with counts, a new batch
    merged into the run before it while it is at least a quarter of that run's size (a
    log-structured merge), so there are ``O(log N)`` runs, a p-value costs one binary search
    per run, and within a batch each row is ranked against the rows before it by a
    merge-sort count (:func:`calwatch.engine.shift.martingale.earlier_counts`), ``O(b log b)``. A
    fixed-resolution sketch would shift every p-value by up to one cell's mass, and a product
    martingale compounds a per-row bias ``δ`` into a factor up to ``(1 + δ)^n``: over a long
    stream that alone could cross ``c``. Exactness keeps the bounds exact; memory is 16 bytes
    per *distinct* score (16 MB per million continuous scores), and ``resolution`` bounds it
    without approximating the guarantee. The martingale works in log space: a batch's 3×3
    factors ``D_n M`` are multiplied by a blocked parallel prefix scan
    (:func:`calwatch.engine.shift.martingale.simple_jumper`), and CUSUM and Shiryaev–Roberts by
    cumulative sums, running minima and ``logaddexp`` accumulation.

    Examples
    --------
    >>> cal = np.linspace(0.0, 1.0, 201)  # calibration scores
    >>> m = ConformalTestMartingale(threshold=100.0, jump=0.01, seed=0).fit(cal)
    >>> quiet = m.update(np.random.default_rng(1).uniform(size=300))
    >>> bool(quiet["alarm"].any()), m.alarmed_
    (False, False)
    >>> shifted = m.update(np.full(100, 2.0))  # every new row less conforming than all before
    >>> m.alarmed_, m.first_alarm_index_
    (True, 324)
    """

    _bag: ScoreBag | GridScoreBag

    def __init__(
        self,
        *,
        threshold: float | None = 100.0,
        jump: float = 0.01,
        statistic: StatisticName = "ville",
        resolution: float | None = None,
        seed: int = 0,
        false_alarm: float | None = None,
    ) -> None:
        if threshold is None and statistic == "ville":
            threshold = 1.0 / check_alpha(false_alarm, "false_alarm") if false_alarm is not None else 100.0
            false_alarm = None
        if threshold is not None:
            c: float | None = _check_number(threshold, "threshold")
            if not (math.isfinite(threshold) and threshold > 1.0):
                msg = (
                    f"threshold must be a finite number > 1 (S_0 = 1 would alarm at once); got {threshold!r}"
                )
                raise ValueError(msg)
            if false_alarm is not None:
                msg = "give threshold= (a constant c) or false_alarm= (δ), not both"
                raise ValueError(msg)
        else:
            c = None
            false_alarm = (
                DEFAULT_FALSE_ALARM if false_alarm is None else check_alpha(false_alarm, "false_alarm")
            )
        j = _check_number(jump, "jump")
        if not 0.0 <= j <= 1.0:
            msg = f"jump must be in [0, 1]; got {jump!r}"
            raise ValueError(msg)
        if statistic not in STATISTICS:
            msg = f"statistic must be one of {STATISTICS}; got {statistic!r}"
            raise ValueError(msg)
        if resolution is not None:
            r = _check_number(resolution, "resolution")
            if not (math.isfinite(r) and r > 0.0):
                msg = f"resolution must be None or a finite number > 0; got {resolution!r}"
                raise ValueError(msg)
            resolution = r
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            msg = f"seed must be an integer ≥ 0; got {seed!r}"
            raise ValueError(msg)
        self.threshold = c
        self.false_alarm = false_alarm
        self.jump = j
        self.statistic: StatisticName = statistic
        self.resolution = resolution
        self.seed = int(seed)

    def __repr__(self) -> str:
        options = [f"threshold={self.threshold!r}", f"jump={self.jump!r}"]
        if getattr(self, "false_alarm", None) is not None:
            options.append(f"false_alarm={self.false_alarm!r}")
        if self.statistic != "ville":
            options.append(f"statistic={self.statistic!r}")
        if self.resolution is not None:
            options.append(f"resolution={self.resolution!r}")
        options.append(f"seed={self.seed!r}")
        return f"ConformalTestMartingale({', '.join(options)})"

    # ------------------------------------------------------------------ fitting
    def _grid(self, scores: FloatArray) -> FloatArray:
        return scores if self.resolution is None else np.floor(scores / self.resolution)

    def _new_bag(self, values: FloatArray) -> ScoreBag | GridScoreBag:
        """A grid bag for gridded scores that fit one (the fast case), sorted runs otherwise."""
        if self.resolution is not None and GridScoreBag.accepts(values):
            return GridScoreBag.from_values(values)
        return ScoreBag(values)

    def _bag_for(self, batch: FloatArray) -> ScoreBag | GridScoreBag:
        """The bag, moved to sorted runs when a grid bag cannot hold this batch (same counts)."""
        bag = self._bag
        if isinstance(bag, GridScoreBag) and not GridScoreBag.accepts(batch, bag.lo, bag.hi):
            self._bag = ScoreBag.from_counts(*bag.counts())
        return self._bag

    def _after_decode(self) -> None:
        """A snapshot from before grid bags holds sorted runs: gridded scores move to a grid bag."""
        bag = getattr(self, "_bag", None)
        if isinstance(bag, ScoreBag) and self.resolution is not None:
            values, counts = bag.counts()
            if GridScoreBag.accepts(values):
                self._bag = GridScoreBag.from_counts(values, counts)

    def fit(self, scores_cal: Any) -> Self:
        """Start a test: the calibration scores become the first elements of the bag.

        Parameters
        ----------
        scores_cal : array-like of shape (n,)
            Nonconformity scores of the calibration rows (larger = less conforming), ``n ≥ 1``;
            ``±inf`` is allowed, NaN is not.

        Returns
        -------
        ConformalTestMartingale
            ``self``, with the martingale at ``S_0 = 1`` and no stream rows seen.
        """
        scores = _check_scores(scores_cal, "scores_cal")
        if scores.shape[0] == 0:
            msg = "scores_cal is empty: expected at least one calibration score"
            raise ValueError(msg)
        self._bag = self._new_bag(self._grid(scores))
        self._rng = np.random.default_rng(self.seed)
        self._capital = np.full(3, 1.0 / 3.0)
        self._log_s = 0.0
        self._max_log_s = 0.0
        self._log_cusum = 0.0
        self._log_sr = -math.inf
        self.n_calibration_ = int(scores.shape[0])
        self.n_seen_ = 0
        self.alarmed_ = False
        self.first_alarm_index_: int | None = None
        self.alarm_indices_: list[int] = []
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "_bag"):
            msg = "this ConformalTestMartingale is not fitted yet: call fit(scores_cal) first"
            raise NotFittedError(msg)

    # ------------------------------------------------------------- attributes
    @property
    def log10_martingale_(self) -> float:
        """``log10 S_n`` after the rows seen so far."""
        self._check_fitted()
        return self._log_s / _LN10

    @property
    def max_log10_martingale_(self) -> float:
        """``log10 max_{k≤n} S_k`` (``S_0 = 1`` included, so never below 0)."""
        self._check_fitted()
        return self._max_log_s / _LN10

    @property
    def anytime_p_value_(self) -> float:
        """Anytime-valid p-value of exchangeability, ``min(1, 1 / max_{k≤n} S_k)``."""
        self._check_fitted()
        return math.exp(-self._max_log_s)

    @property
    def log10_cusum_(self) -> float:
        """CUSUM's ``log10 γ_n`` now (0 after a restart)."""
        self._check_fitted()
        return self._log_cusum / _LN10

    @property
    def log10_sr_(self) -> float:
        """Shiryaev–Roberts's ``log10 R_n`` now (``-inf`` after a restart)."""
        self._check_fitted()
        return self._log_sr / _LN10

    # ----------------------------------------------------------------- update
    def update(self, scores: Any) -> pl.DataFrame:
        """Feed a batch of stream scores, in arrival order; one output row per score.

        Parameters
        ----------
        scores : array-like of shape (b,)
            Nonconformity scores of the new rows (any ``b ≥ 0``).

        Returns
        -------
        polars.DataFrame
            ``row`` (stream index from 0), ``p_value`` (smoothed conformal p-value against the
            calibration rows and every earlier stream row, this one included),
            ``log10_martingale`` (``log10 S_n``), ``log10_cusum``, ``log10_sr`` (each after
            this row, before any restart), and ``alarm``: the chosen statistic is at or above
            ``threshold`` at this row (for CUSUM and Shiryaev–Roberts, which then restart).
        """
        self._check_fitted()
        start = self.n_seen_
        step = self.step(scores)
        return pl.DataFrame(
            {
                "row": np.arange(start, start + step.p_value.shape[0], dtype=np.int64),
                "p_value": step.p_value,
                "log10_martingale": step.log_martingale / _LN10,
                "log10_cusum": step.log_cusum / _LN10,
                "log10_sr": step.log_sr / _LN10,
                "alarm": step.alarm,
            }
        )

    def log_thresholds(self, rows: Any) -> FloatArray:
        """``log c`` at these stream row counts (1-based): constant, or the anytime threshold.

        With ``threshold=None`` CUSUM and Shiryaev–Roberts alarm at the anytime threshold of
        :func:`calwatch.engine.shift.betting.anytime_thresholds` (CUSUM ≤ Shiryaev–Roberts, whose
        ``R_t + (L − t)`` is a non-negative supermartingale under exchangeability), so
        ``P(any false alarm over the whole stream) ≤ false_alarm`` however long it runs.
        """
        out: FloatArray = np.log(thresholds_at(rows, self.threshold, self._false_alarm))
        return out

    @property
    def _false_alarm(self) -> float | None:
        """``δ`` of an anytime threshold (None with a constant one)."""
        if self.threshold is not None:
            return None
        return float(getattr(self, "false_alarm", None) or DEFAULT_FALSE_ALARM)

    @property
    def log10_threshold_(self) -> float:
        """``log10 c`` at the latest row (the threshold now)."""
        return threshold_now(getattr(self, "n_seen_", 0), self.threshold, self._false_alarm)

    def step(self, scores: Any) -> MartingaleStep:
        """:meth:`update` as plain arrays (natural logs), for callers that need no data frame."""
        self._check_fitted()
        raw = _check_scores(scores, "scores")
        b = raw.shape[0]
        theta: FloatArray = np.asarray(self._rng.random(b), dtype=np.float64)
        which = STATISTICS.index(self.statistic)
        state = np.array([self._log_s, self._log_cusum, self._log_sr, self._max_log_s])
        capital = self._capital.copy()
        rows = None
        bag = self._bag
        if b and self.resolution is not None and isinstance(bag, GridScoreBag):  # the fast case
            log_table, epoch_rows = log_threshold_table(self.threshold, self._false_alarm)
            rows = bag.run_martingale(
                raw, self.resolution, theta, seen=self.n_seen_, jump=self.jump, capital=capital, state=state,
                log_table=log_table, epoch_rows=epoch_rows, which=which,
            )  # fmt: skip
        if rows is None:  # a score off the grid bag's range, or sorted runs
            rows = self._rows(self._grid(raw), theta, capital, state, which)
        p, log_s, log_cusum, log_sr, alarms, n_alarms = rows
        self._capital = capital
        alarm = alarms[which]
        start = self.n_seen_
        if b:
            self._log_s, self._log_cusum, self._log_sr, self._max_log_s = (float(v) for v in state)
            self.n_seen_ += b
            if n_alarms:
                hits = np.flatnonzero(alarm)
                if self.statistic == "ville":
                    hits = hits[:1] if not self.alarmed_ else hits[:0]
                self.alarm_indices_.extend((hits + start).tolist())
                if self.first_alarm_index_ is None and self.alarm_indices_:
                    self.first_alarm_index_ = self.alarm_indices_[0]
                self.alarmed_ = True
        return MartingaleStep(p, log_s, log_cusum, log_sr, alarm)

    def _rows(
        self, batch: FloatArray, theta: FloatArray, capital: FloatArray, state: FloatArray, which: int
    ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, npt.NDArray[np.bool_], int]:
        """A batch's rows outside the fast case: a grid bag that must grow or give way, or sorted runs.

        The same rows as :meth:`GridScoreBag.run_martingale` (``capital`` and ``state`` updated
        in place).
        """
        b = batch.shape[0]
        bag = self._bag_for(batch)
        log_limits = self.log_thresholds(self.n_seen_ + np.arange(1, b + 1))
        if isinstance(bag, GridScoreBag):  # every step in one compiled pass
            rows, flags = bag.martingale_step(
                batch, theta, jump=self.jump, capital=capital, state=state[:3], log_thresholds=log_limits
            )
        else:  # sorted runs give the p-values; the same compiled rows do the rest
            from calwatch.engine.shift.kernels import martingale_from_p_values

            p_runs = np.empty(b)
            for lo in range(0, b, MAX_CHUNK):
                hi = min(b, lo + MAX_CHUNK)
                p_runs[lo:hi] = bag.p_values(batch[lo:hi], theta[lo:hi])
            rows, flags = np.empty((b, 4)), np.zeros((b, 2), dtype=np.bool_)
            martingale_from_p_values(p_runs, float(self.jump), capital, state[:3], log_limits, rows, flags)
        p, log_s, log_cusum, log_sr = (np.ascontiguousarray(rows[:, i]) for i in range(4))
        alarms = np.stack([log_s >= log_limits, flags[:, 0], flags[:, 1]])
        if b:
            state[3] = max(state[3], float(log_s.max()))
        return p, log_s, log_cusum, log_sr, alarms, int(np.count_nonzero(alarms[which]))

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the test back exactly as it is now (for all-or-nothing updates).

        Cheap: the bag's own checkpoint (a copy of a grid bag's counts, or the list of a runs
        bag's immutable runs), the random generator's state and a few numbers.
        """
        self._check_fitted()
        bag, restore_bag = self._bag, self._bag.checkpoint()
        rng_state = self._rng.bit_generator.state
        scalars = (self._log_s, self._max_log_s, self._log_cusum, self._log_sr, self.n_seen_)
        capital = self._capital.copy()
        flags = (self.alarmed_, self.first_alarm_index_, len(self.alarm_indices_))

        def restore() -> None:
            restore_bag()
            self._bag = bag
            self._rng.bit_generator.state = rng_state
            self._log_s, self._max_log_s, self._log_cusum, self._log_sr, self.n_seen_ = scalars
            self._capital = capital.copy()
            self.alarmed_, self.first_alarm_index_ = flags[0], flags[1]
            del self.alarm_indices_[flags[2] :]

        return restore

    # ------------------------------------------------------------------ state
    def state(self) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
        """The whole test as plain arrays and a JSON-able dict (for snapshots; no pickle).

        Returns
        -------
        arrays : dict of str to ndarray
            ``bag_values`` (sorted distinct scores, after ``resolution``), ``bag_counts``
            (their multiplicities), ``capital`` (the three bets' capital, summing to 1) and
            ``alarm_indices``.
        info : dict
            Options, counters, the log statistics (``None`` for ``-inf``), alarm flags and the
            random generator's state; ``json.dumps`` accepts it.
        """
        self._check_fitted()
        values, counts = self._bag.counts()
        arrays: dict[str, npt.NDArray[Any]] = {
            "bag_values": values.copy(),
            "bag_counts": counts.copy(),
            "capital": self._capital.copy(),
            "alarm_indices": np.asarray(self.alarm_indices_, dtype=np.int64),
        }
        info: dict[str, Any] = {
            "kind": "ConformalTestMartingale",
            "version": STATE_VERSION,
            "params": {
                "threshold": self.threshold,
                "false_alarm": getattr(self, "false_alarm", None),
                "jump": self.jump,
                "statistic": self.statistic,
                "resolution": self.resolution,
                "seed": self.seed,
            },
            "n_calibration": self.n_calibration_,
            "n_seen": self.n_seen_,
            "log_martingale": self._log_s,
            "max_log_martingale": self._max_log_s,
            "log_cusum": self._log_cusum,
            "log_sr": _log_or_none(self._log_sr),
            "alarmed": self.alarmed_,
            "first_alarm_index": self.first_alarm_index_,
            "rng": self._rng.bit_generator.state,
        }
        return arrays, info

    @classmethod
    def from_state(cls, arrays: dict[str, Any], info: dict[str, Any]) -> ConformalTestMartingale:
        """Rebuild a test from :meth:`state`'s output; it continues exactly where it stopped.

        Raises
        ------
        ValueError
            ``info`` is not a state of this class or version, or the arrays do not match it.
        """
        if info.get("kind") != "ConformalTestMartingale" or info.get("version") != STATE_VERSION:
            msg = (
                f"not a ConformalTestMartingale state of version {STATE_VERSION}: "
                f"kind={info.get('kind')!r}, version={info.get('version')!r}"
            )
            raise ValueError(msg)
        missing = {"bag_values", "bag_counts", "capital", "alarm_indices"} - set(arrays)
        if missing:
            msg = f"state arrays are missing {sorted(missing)}"
            raise ValueError(msg)
        values = np.asarray(arrays["bag_values"], dtype=np.float64)
        counts = np.asarray(arrays["bag_counts"], dtype=np.int64)
        capital = np.asarray(arrays["capital"], dtype=np.float64)
        n_calibration, n_seen = int(info["n_calibration"]), int(info["n_seen"])
        if (
            values.ndim != 1
            or counts.shape != values.shape
            or np.any(counts < 1)
            or np.any(np.diff(values) <= 0)
            or int(counts.sum()) != n_calibration + n_seen
        ):
            msg = (
                "state arrays bag_values/bag_counts do not hold a sorted bag of n_calibration + n_seen scores"
            )
            raise ValueError(msg)
        if capital.shape != (3,) or np.any(capital < 0) or not math.isclose(float(capital.sum()), 1.0):
            msg = f"state array capital must be 3 non-negative numbers summing to 1; got {capital!r}"
            raise ValueError(msg)
        out = cls(**info["params"])
        gridded = out.resolution is not None and GridScoreBag.accepts(values)
        out._bag = (
            GridScoreBag.from_counts(values, counts) if gridded else ScoreBag.from_counts(values, counts)
        )
        out._rng = np.random.default_rng()
        out._rng.bit_generator.state = info["rng"]
        out._capital = capital.copy()
        out._log_s = float(info["log_martingale"])
        out._max_log_s = float(info["max_log_martingale"])
        out._log_cusum = float(info["log_cusum"])
        out._log_sr = -math.inf if info["log_sr"] is None else float(info["log_sr"])
        out.n_calibration_ = n_calibration
        out.n_seen_ = n_seen
        out.alarmed_ = bool(info["alarmed"])
        first = info["first_alarm_index"]
        out.first_alarm_index_ = None if first is None else int(first)
        out.alarm_indices_ = [int(i) for i in np.asarray(arrays["alarm_indices"]).tolist()]
        return out
