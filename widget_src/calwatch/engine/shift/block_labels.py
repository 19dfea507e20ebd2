"""Label-based tests whose unit is a block of correlated rows (SHIFT.md §6).

Why
    A betting test on row-level miss indicators tests "each row's miss probability *given the
    rows before it* is ≤ ε₀". Rows that come in correlated blocks (repeated measurements of one
    unit, one user's session, one day) violate that even when every row's marginal miss rate is
    ≤ α: after a missed row of a hard block the next row of that block is likely missed too, the
    wealth grows with nothing wrong, and Ville's bound holds for a null the stream never
    satisfied. Making the block the unit restores it: each complete block becomes one bounded
    number (its rows' miss rate), and the blocks, each taken whole, are exchangeable with the
    calibration blocks under the null.

The test (:class:`BoundedBetting`)
    Values ``x_b ∈ [0, 1]`` (a block's miss rate), null ``E[x_b | past blocks] ≤ ε₀``. For a bet
    ``λ ∈ [0, 1/ε₀)`` the capital ``Π_b (1 + λ (x_b − ε₀))`` is a non-negative supermartingale
    under the null (each factor is ≥ ``1 − λε₀ > 0`` and has mean ≤ 1). The bets are the grid
    of :data:`~calwatch.engine.shift.betting.BET_FRACTIONS` (``λ_j = u_j / ε₀``) mixed with equal
    weights, and the alarm is Ville's: ``P(sup_b K_b ≥ c) ≤ 1/c`` over the whole stream (a stream
    has far fewer blocks than rows, so a constant ``c = 100`` is the default, as for the block
    martingales). With ``G`` groups (one test per class) each runs at ``G·c``: by the union
    bound the family keeps ``1/c``. For 0/1 values it is the row test of
    :class:`~calwatch.engine.shift.betting.BernoulliBetting` (Ville), one block per row.

The null rate of blocks (:func:`block_null_rate`)
    A conformal threshold's true miss rate varies from one calibration draw to the next; for
    independent rows it is ``Beta(n+1−k, k)`` and the test is run against its ``1 − δ_c``
    quantile (:func:`~calwatch.engine.shift.betting.calibration_null_rate`). Blocked calibration
    rows carry less information than their count: a draw of ``m`` blocks of correlated rows
    varies like ``n_eff = n / deff`` independent rows, with the design effect
    ``deff = 1 + (m̃ − 1) ρ̂`` (Kish), ``m̃ = Σ n_b² / n`` the size-weighted mean block size and
    ``ρ̂`` the ANOVA intraclass correlation of the calibration rows' miss indicators within their
    blocks (:func:`intraclass_correlation`). ``ρ̂ = 1`` gives ``n_eff = n² / Σ n_b²``, about one
    row per block; ``ρ̂ ≤ 0`` gives ``n``. So ``ε₀`` is that Beta's quantile at ``n_eff``, plus
    the amount by which the calibration blocks' *mean* miss rate exceeds their rows' (the test
    averages blocks, not rows). This is an approximation (the Beta law is exact for independent
    rows only); the validity tests on real blocked data check it.

When a block is complete (:class:`BlockLedger`)
    Labels arrive late. A stream block is *closed* when a row with another key is observed
    (its rows arrive together, in one run); it is *complete* when it is closed and every row is
    labelled, or when ``timeout`` more batches were observed after it closed (labels lost or
    very late): it is then tested on the rows labelled so far, or dropped if none were. Blocks
    are tested in the order they complete; as for the row tests, that order must not depend on
    the labels' values. A label that arrives after its block was tested is not used by the
    block tests (it still counts in every coverage figure).

Without block keys (:class:`PairedDispersion`, :class:`RunsReading`)
    The default cannot know the blocks, but it can see their symptom: miss indicators (or
    conformity scores) that cluster. Neighbouring runs of rows (and neighbouring batches) are
    compared with the spread within them (:class:`PairedDispersion`: ``φ`` about 1 for
    independent rows, also when the rate steps up or drifts; far above 1 for rows in correlated
    runs), at three scales (:class:`RunsReading`). The detectors then say so and hand the
    decision to a test that takes each batch as one block.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from calwatch.engine.shift.betting import BET_FRACTIONS, calibration_null_rates, has_finite_threshold

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

#: Ville's threshold of the block tests: P(any false alarm over the whole stream) ≤ 1/c.
DEFAULT_BLOCK_THRESHOLD = 100.0
#: Batches observed after a block closed before it is tested on the labels it has.
DEFAULT_BLOCK_TIMEOUT = 10
#: p-value of a runs check below which labelled rows are said to cluster (each of its two scales).
DEFAULT_DISPERSION_LEVEL = 0.0005
#: Fewest pairs of runs before a runs check is read.
MIN_DISPERSION_BATCHES = 5
_LN10 = math.log(10.0)


# ----------------------------------------------------------------- calibration
def intraclass_correlation(values: Any, groups: Any) -> tuple[float, float]:
    """ANOVA intraclass correlation of values within groups, and the size-weighted group size.

    One-way ANOVA: ``MSB = Σ n_g (ȳ_g − ȳ)² / (G − 1)``, ``MSW = Σ Σ (y − ȳ_g)² / (N − G)``,
    ``n₀ = (N − Σ n_g² / N) / (G − 1)``, ``ρ̂ = (MSB − MSW) / (MSB + (n₀ − 1) MSW)``.

    Returns
    -------
    (rho, m_tilde) : tuple of float
        ``ρ̂`` (0 when undefined: one group, all rows alone, or no spread) and
        ``m̃ = Σ n_g² / N``.

    Examples
    --------
    Two groups of two, perfectly clustered (a group is all misses or all hits): ``ρ̂ = 1``.

    >>> intraclass_correlation([1, 1, 0, 0], [0, 0, 1, 1])
    (1.0, 2.0)
    """
    y = np.asarray(values, dtype=np.float64)
    _, codes = np.unique(np.asarray(groups), return_inverse=True)
    n_g = np.bincount(codes).astype(np.float64)
    big_n, n_groups = float(y.shape[0]), n_g.shape[0]
    m_tilde = float((n_g**2).sum() / big_n) if big_n else 0.0
    if n_groups < 2 or big_n <= n_groups:
        return 0.0, m_tilde
    sums = np.bincount(codes, weights=y)
    means = sums / n_g
    grand = y.mean()
    msb = float((n_g * (means - grand) ** 2).sum() / (n_groups - 1))
    msw = float(((y - means[codes]) ** 2).sum() / (big_n - n_groups))
    n0 = (big_n - (n_g**2).sum() / big_n) / (n_groups - 1)
    denominator = msb + (n0 - 1.0) * msw
    if denominator <= 0.0:
        return 0.0, m_tilde
    return float(min(1.0, (msb - msw) / denominator)), m_tilde


def effective_rows(n_rows: int, rho: float, m_tilde: float) -> float:
    """Kish's effective sample size ``n / (1 + (m̃ − 1) max(ρ̂, 0))``.

    Examples
    --------
    >>> effective_rows(1000, 0.1, 11.0)  # deff = 2
    500.0
    """
    return float(n_rows) / (1.0 + max(m_tilde - 1.0, 0.0) * max(rho, 0.0))


@dataclass(frozen=True)
class BlockNull:
    """The null rate of a block test and how it was reached (for the warning's words)."""

    rate: float
    effective_rows: float
    rho: float
    n_blocks: int
    block_excess: float  # calibration blocks' mean miss rate less their rows' (≥ 0)

    def words(self) -> str:
        """How ``ε₀`` was computed, in one clause."""
        excess = (
            f", plus {self.block_excess:.3f} by which the calibration blocks' mean miss rate "
            "exceeds their rows'"
            if self.block_excess > 0
            else ""
        )
        return (
            f"ε₀ = {self.rate:.4g} from {self.n_blocks} calibration blocks (intraclass correlation of "
            f"misses {self.rho:.2f}: as informative as {self.effective_rows:,.0f} independent rows{excess})"
        )


def block_null_rate(
    alpha: float, misses: Any, blocks: Any, calibration_delta: float | None
) -> BlockNull | None:
    """The rate ``ε₀`` a block test of a calibrator's misses runs against (module docstring).

    Parameters
    ----------
    alpha : float
        The calibrator's miscoverage level.
    misses : array-like of bool, shape (n,)
        Whether each calibration row falls outside its (fitted) set.
    blocks : array-like, shape (n,)
        Each calibration row's block key.
    calibration_delta : float or None
        Share of calibration draws allowed to count as false alarms; None tests against ``α``
        plus the block excess.

    Returns
    -------
    BlockNull or None
        None when the blocks are as informative as fewer rows than a finite threshold at
        ``α`` needs (the draw is too small to bound: nothing to test).
    """
    miss = np.asarray(misses, dtype=np.float64)
    keys = np.asarray(blocks)
    n = int(miss.shape[0])
    rho, m_tilde = intraclass_correlation(miss, keys)
    n_eff = effective_rows(n, rho, m_tilde)
    _, codes = np.unique(keys, return_inverse=True)
    n_blocks = int(codes.max()) + 1 if n else 0
    sizes = np.bincount(codes, minlength=n_blocks)
    block_rates = np.bincount(codes, weights=miss, minlength=n_blocks) / np.maximum(sizes, 1)
    excess = max(0.0, float(block_rates.mean() - miss.mean())) if n else 0.0
    whole = max(math.floor(n_eff), 1)
    if calibration_delta is None:
        base = float(alpha)
    else:
        if not has_finite_threshold(alpha, whole):
            return None
        base = float(calibration_null_rates(alpha, np.array([whole]), calibration_delta)[0])
    rate = min(base + excess, 1.0 - 1e-9)
    return BlockNull(rate=rate, effective_rows=n_eff, rho=rho, n_blocks=n_blocks, block_excess=excess)


# ------------------------------------------------------------------ the test
@dataclass
class Stretch:
    """The stretch of blocks where a test's wealth grew the most (for explanations)."""

    first: str = ""
    last: str = ""
    blocks: int = 0
    rows: int = 0
    events: float = 0.0
    value_sum: float = 0.0

    @property
    def mean(self) -> float:
        """The stretch's mean block value."""
        return self.value_sum / self.blocks if self.blocks else math.nan


@dataclass
class _Trail:
    """Running sums of one group's blocks, and the sums where its best bet's wealth was lowest."""

    blocks: int = 0
    rows: int = 0
    events: float = 0.0
    value_sum: float = 0.0
    low: dict[str, Any] = field(default_factory=dict)  # at the lowest wealth: sums and the next key


class BoundedBetting:
    """Ville's betting test of bounded values against ``ε₀``, one test per group (module docstring).

    Parameters
    ----------
    null_rates : array-like of float, shape (G,)
        ``ε₀`` per group, each in (0, 1).
    threshold : float
        Ville's ``c`` for the family; each of the ``G`` groups alarms at ``G·c``.
    bet_fractions : tuple of float
        The bets ``u_j = λ_j ε₀``, each in (0, 1).

    Examples
    --------
    One bet by hand: ``ε₀ = 0.1``, ``u = 0.5`` (``λ = 5``). A block missing 30% of its rows
    multiplies the capital by ``1 + 5·(0.3 − 0.1) = 2``, a block with no miss by ``0.5``:

    >>> t = BoundedBetting([0.1], bet_fractions=(0.5,))
    >>> (10 ** t.update(np.array([0, 0, 0]), np.array([0.3, 0.3, 0.0]))).round(6).tolist()
    [2.0, 4.0, 2.0]
    """

    def __init__(
        self,
        null_rates: Any,
        *,
        threshold: float = DEFAULT_BLOCK_THRESHOLD,
        bet_fractions: tuple[float, ...] = BET_FRACTIONS,
    ) -> None:
        rates = np.atleast_1d(np.asarray(null_rates, dtype=np.float64))
        if rates.size == 0 or not ((rates > 0) & (rates < 1)).all():
            msg = f"null_rates must be numbers in (0, 1); got {null_rates!r}"
            raise ValueError(msg)
        if not (math.isfinite(threshold) and threshold > 1):
            msg = f"threshold must be a finite number > 1; got {threshold!r}"
            raise ValueError(msg)
        self.null_rates = rates
        self.threshold = float(threshold)
        self.bet_fractions = tuple(float(u) for u in bet_fractions)
        self.log_wealth_ = np.zeros((rates.size, len(self.bet_fractions)))
        self.alarmed_ = np.zeros(rates.size, dtype=np.bool_)
        self.trails_ = [_Trail() for _ in range(rates.size)]

    @property
    def n_groups(self) -> int:
        """``G``, the number of tests."""
        return int(self.null_rates.size)

    @property
    def log10_threshold(self) -> float:
        """``log10(G·c)``, each group's alarm level."""
        return math.log10(self.threshold * self.n_groups)

    def log10_statistic(self, group: int = 0) -> float:
        """``log10`` of the group's mixture capital ``mean_j K_j``."""
        row = self.log_wealth_[group]
        top = float(row.max())
        return (top + math.log(float(np.exp(row - top).mean()))) / _LN10

    def guarantee(self, unit: str = "blocks") -> str:
        """The false-alarm bound in words, with the numbers."""
        each = (
            f"; each of the {self.n_groups} tests at c = {self.threshold * self.n_groups:.3g}"
            if self.n_groups > 1
            else ""
        )
        return (
            f"Ville's inequality on a mixture of {len(self.bet_fractions)} betting martingales on the "
            f"{unit}' miss rates: P(any false alarm over the whole stream) ≤ 1/c = "
            f"{1.0 / self.threshold:.3g}{each}"
        )

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the test back as it is now."""
        wealth, alarmed = self.log_wealth_.copy(), self.alarmed_.copy()
        trails = [_copy_trail(t) for t in self.trails_]

        def restore() -> None:
            self.log_wealth_, self.alarmed_ = wealth, alarmed
            self.trails_ = trails

        return restore

    def update(
        self,
        groups: Any,
        values: Any,
        *,
        keys: list[str] | None = None,
        rows: Any = None,
        events: Any = None,
    ) -> FloatArray:
        """Feed blocks in order: each block's group and value; return each group's log10 statistic after it.

        ``keys``, ``rows`` and ``events`` (the block's name, labelled rows and misses) feed the
        stretch kept for explanations (:meth:`stretch`).
        """
        g = np.asarray(groups, dtype=np.intp)
        x = np.asarray(values, dtype=np.float64)
        if g.shape != x.shape or x.ndim != 1:
            msg = f"groups and values must be 1-D of one length; got {g.shape} and {x.shape}"
            raise ValueError(msg)
        if x.size and (not np.isfinite(x).all() or x.min() < 0.0 or x.max() > 1.0):
            msg = "values must be numbers in [0, 1] (a block's miss rate)"
            raise ValueError(msg)
        u = np.asarray(self.bet_fractions)
        limit = self.log10_threshold
        out = np.empty(x.size)
        for i in range(x.size):
            group, value = int(g[i]), float(x[i])
            eps = self.null_rates[group]
            self.log_wealth_[group] += np.log1p(u / eps * (value - eps))
            out[i] = self.log10_statistic(group)
            if out[i] >= limit:
                self.alarmed_[group] = True
            self._follow(
                group,
                keys[i] if keys is not None else str(i),
                value,
                0 if rows is None else int(np.asarray(rows)[i]),
                value if events is None else float(np.asarray(events)[i]),
            )
        return out

    def _follow(self, group: int, key: str, value: float, rows: int, events: float) -> None:
        """Advance the group's running sums, and remember them where its best bet's wealth is lowest."""
        trail = self.trails_[group]
        if not trail.low:
            trail.low = {"level": 0.0, "blocks": 0, "rows": 0, "events": 0.0, "value_sum": 0.0, "next": key}
        trail.blocks += 1
        trail.rows += rows
        trail.events += events
        trail.value_sum += value
        level = float(self.log_wealth_[group].max())
        if level < trail.low["level"]:
            trail.low = {
                "level": level, "blocks": trail.blocks, "rows": trail.rows, "events": trail.events,
                "value_sum": trail.value_sum, "next": "",
            }  # fmt: skip
        elif not trail.low["next"]:
            trail.low["next"] = key
        trail.low["last"] = key

    def stretch(self, group: int = 0) -> Stretch:
        """The blocks since the group's best bet's wealth was lowest: those that grew it to now.

        Ville's capital is a product over every block; the blocks before its lowest point only
        lowered it, so the stretch after it carries the evidence (the whole stream when the
        wealth never fell below its start).
        """
        trail = self.trails_[group]
        low = trail.low
        if not low or trail.blocks == low["blocks"]:
            return Stretch()
        return Stretch(
            first=low["next"], last=low.get("last", ""), blocks=trail.blocks - low["blocks"],
            rows=trail.rows - low["rows"], events=trail.events - low["events"],
            value_sum=trail.value_sum - low["value_sum"],
        )  # fmt: skip


def _copy_trail(trail: _Trail) -> _Trail:
    return _Trail(trail.blocks, trail.rows, trail.events, trail.value_sum, dict(trail.low))


# -------------------------------------------------------------- stream side
@dataclass
class CompleteBlock:
    """A stream block ready to be tested: its key, rows, and its labelled rows' payload."""

    key: str
    n_rows: int
    n_labelled: int
    payload: dict[str, npt.NDArray[Any]]
    timed_out: bool


class BlockLedger:
    """Which observed row belongs to which block, and the labels each block has received.

    Observed rows register their block (:meth:`observe`); labelled rows add their payload (a
    few arrays: misses, classes, scores) to their block (:meth:`label`); :meth:`complete`
    hands over the blocks that are complete (module docstring) and forgets them. Memory: one
    block code per row of the batches that still hold a block awaiting labels, plus the
    payload of the labelled rows of those blocks.

    Parameters
    ----------
    timeout : int or None
        Batches observed after a block closed before it is tested on the labels it has (None:
        wait for every label).
    remember_keys : bool
        Keep the keys of tested blocks, so that :meth:`check` refuses one that comes back (user
        block keys); a ledger of runs of rows (:meth:`observe_runs`) never checks, and keeps none.
    """

    def __init__(self, timeout: int | None = DEFAULT_BLOCK_TIMEOUT, *, remember_keys: bool = True) -> None:
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0):
            msg = f"timeout must be None or an integer ≥ 0 (batches); got {timeout!r}"
            raise ValueError(msg)
        self.timeout = timeout
        self.remember_keys = remember_keys
        self.batch_codes_: dict[int, npt.NDArray[np.int64]] = {}
        self.keys_: dict[int, str] = {}  # block code -> key (pending blocks)
        self.rows_: dict[int, int] = {}  # code -> rows observed
        self.labelled_: dict[int, int] = {}  # code -> rows labelled
        self.closed_at_: dict[int, int] = {}  # code -> batch at which it closed
        self.payload_: dict[int, list[dict[str, npt.NDArray[Any]]]] = {}
        self.open_code_: int | None = None
        self.next_code_ = 0
        self.done_keys_: set[str] = set()
        self.latest_batch_ = -1

    # -- checks -------------------------------------------------------------
    def check(self, keys: list[str]) -> None:
        """Raise ``ValueError`` if these keys, observed next, would reopen a closed block (no change)."""
        done = {self.keys_[c] for c in self.closed_at_}  # closed, not yet tested
        previous = None if self.open_code_ is None else self.keys_[self.open_code_]
        for key in _run_keys(keys):
            if key in done or key in self.done_keys_:
                msg = (
                    f"blocks: key {key!r} comes back after its block was complete (another key came "
                    "in between); the rows of a block must arrive together, in one run"
                )
                raise ValueError(msg)
            if previous is not None and key != previous:
                done.add(previous)
            previous = key

    # -- updates ------------------------------------------------------------
    def observe(self, batch: int, keys: list[str]) -> None:
        """Register a batch's rows and their block keys (call :meth:`check` first)."""
        codes = np.empty(len(keys), dtype=np.int64)
        start = 0
        for key, stop in _runs_with_ends(keys):
            open_key = None if self.open_code_ is None else self.keys_[self.open_code_]
            if key != open_key:
                if self.open_code_ is not None:
                    self.closed_at_[self.open_code_] = batch
                code = self.open_code_ = self.next_code_
                self.next_code_ += 1
                self.keys_[code], self.rows_[code], self.labelled_[code] = key, 0, 0
                self.payload_[code] = []
            assert self.open_code_ is not None
            codes[start:stop] = self.open_code_
            self.rows_[self.open_code_] += stop - start
            start = stop
        self.batch_codes_[batch] = codes
        self.latest_batch_ = max(self.latest_batch_, batch)

    def observe_runs(self, batch: int, m: int, size: int | None = None) -> None:
        """Register a batch's ``m`` rows as runs of ``size`` consecutive rows, each a block closed now.

        :meth:`observe` with keys ``f"{batch}:{i // size}"`` (or ``str(batch)`` for the whole
        batch, ``size=None``) then :meth:`close_open`, without building a key per row.
        """
        self.close_open(batch)
        width = m if size is None else size
        n_runs = -(-m // width) if m else 0
        first = self.next_code_
        for j in range(n_runs):
            code = first + j
            self.keys_[code] = str(batch) if size is None else f"{batch}:{j}"
            self.rows_[code], self.labelled_[code] = min(width, m - j * width), 0
            self.payload_[code] = []
            self.closed_at_[code] = batch
        self.next_code_ += n_runs
        self.batch_codes_[batch] = first + np.arange(m, dtype=np.int64) // max(width, 1)
        self.latest_batch_ = max(self.latest_batch_, batch)

    def close_open(self, batch: int) -> None:
        """Close the open block now (batches as blocks: a batch is whole when observed)."""
        if self.open_code_ is not None:
            self.closed_at_[self.open_code_] = batch
            self.open_code_ = None

    def label(self, batches: Any, rows: Any, payload: dict[str, npt.NDArray[Any]]) -> None:
        """Add newly labelled rows (each row's batch and position in it) to their blocks.

        Rows of batches the ledger no longer holds (their blocks were tested) are ignored.
        """
        b = np.asarray(batches, dtype=np.int64)
        r = np.asarray(rows, dtype=np.int64)
        codes = np.full(b.shape[0], -1, dtype=np.int64)
        for batch in np.unique(b).tolist():
            held = self.batch_codes_.get(int(batch))
            if held is not None:
                mask = b == batch
                codes[mask] = held[r[mask]]
        for code in np.unique(codes[codes >= 0]).tolist():
            if code not in self.keys_:
                continue  # tested already (timed out): a label after the test is not used
            mask = codes == code
            self.labelled_[code] += int(mask.sum())
            self.payload_[code].append({name: values[mask] for name, values in payload.items()})

    def complete(self, now: int | None = None) -> list[CompleteBlock]:
        """The blocks complete now (closed and fully labelled, or timed out), oldest first; forgotten."""
        now = self.latest_batch_ if now is None else now
        ready: list[CompleteBlock] = []
        for code in sorted(self.closed_at_):
            full = self.labelled_[code] >= self.rows_[code]
            timed_out = self.timeout is not None and now - self.closed_at_[code] >= self.timeout
            if not (full or timed_out):
                continue
            parts = self.payload_.pop(code)
            names = parts[0].keys() if parts else ()
            payload = {name: np.concatenate([p[name] for p in parts]) for name in names}
            if self.labelled_[code]:
                ready.append(
                    CompleteBlock(self.keys_[code], self.rows_[code], self.labelled_[code], payload, not full)
                )
            if self.remember_keys:
                self.done_keys_.add(self.keys_[code])
            for table in (self.keys_, self.rows_, self.labelled_, self.closed_at_):
                del table[code]
        # A batch's codes are ascending and consecutive: it is done once none in its range is pending.
        for batch in [b for b, codes in self.batch_codes_.items() if not self._pending_in(codes)]:
            del self.batch_codes_[batch]
        return ready

    def _pending_in(self, codes: npt.NDArray[np.int64]) -> bool:
        """Whether a block of these (ascending, consecutive) codes still awaits its test."""
        return bool(codes.size) and any(c in self.keys_ for c in range(int(codes[0]), int(codes[-1]) + 1))

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the ledger back as it is now (its tables are small: copied)."""
        state = {
            name: (
                dict(value) if isinstance(value, dict) else set(value) if isinstance(value, set) else value
            )
            for name, value in vars(self).items()
        }
        payload = {code: list(parts) for code, parts in self.payload_.items()}

        def restore() -> None:
            vars(self).update(state)
            self.payload_ = {code: list(parts) for code, parts in payload.items()}

        return restore

    @property
    def pending(self) -> int:
        """Blocks observed and not yet tested (the open one included)."""
        return len(self.keys_)


def _run_keys(keys: list[str]) -> list[str]:
    return [key for key, _ in _runs_with_ends(keys)]


def _runs_with_ends(keys: list[str]) -> list[tuple[str, int]]:
    """Consecutive runs of equal keys: each run's key and its end (exclusive)."""
    out: list[tuple[str, int]] = []
    for i, key in enumerate(keys):
        if out and out[-1][0] == key:
            out[-1] = (key, i + 1)
        else:
            out.append((key, i + 1))
    return out


# ---------------------------------------------------------- batch dispersion
@dataclass(frozen=True)
class Dispersion:
    """A dispersion F test's reading: ``φ``, its p-value, and how many groups (pairs) it read."""

    ratio: float  # φ
    p_value: float
    batches: int  # groups read (pairs, for a paired reading)
    rows: int
    unit: str = "runs of rows"

    @property
    def clustered(self) -> bool:
        """Whether the rows cluster at :data:`DEFAULT_DISPERSION_LEVEL`."""
        return self.batches >= MIN_DISPERSION_BATCHES and self.p_value < DEFAULT_DISPERSION_LEVEL

    @property
    def settled(self) -> bool:
        """Whether enough groups were read to tell (at least :data:`MIN_DISPERSION_BATCHES`)."""
        return self.batches >= MIN_DISPERSION_BATCHES

    def words(self, what: str = "misses") -> str:
        """The reading in one clause."""
        return (
            f"{what} cluster: neighbouring {self.unit} differ {self.ratio:.1f}× as much as independent "
            f"rows would (F test over {self.batches:,} pairs, p = {self.p_value:.1g})"
        )


@dataclass(frozen=True)
class RunsReading:
    """The three scales of a runs check: short runs of rows, long runs of rows, whole batches.

    Rows that come in correlated blocks shift neighbouring short runs apart when the blocks are
    shorter than a run, neighbouring long runs apart when a few blocks fill one, and
    neighbouring batches apart when a batch is a block (a day). Neighbours within one block
    look alike, so each scale sees only blocks smaller than its unit.
    """

    runs: Dispersion
    long_runs: Dispersion
    batches: Dispersion

    @property
    def scales(self) -> tuple[Dispersion, Dispersion, Dispersion]:
        """The three readings."""
        return self.runs, self.long_runs, self.batches

    @property
    def clustered(self) -> bool:
        """Any scale finds clustering (each at :data:`DEFAULT_DISPERSION_LEVEL`)."""
        return any(scale.clustered for scale in self.scales)

    @property
    def clear(self) -> bool:
        """The row tests may decide: the check has read enough (:attr:`settled`), and no scale clusters."""
        return self.settled and not self.clustered

    @property
    def settled(self) -> bool:
        """Five pairs of short runs read, and five of long runs or of batches.

        Blocks longer than a short run are invisible to it (neighbours inside one block look
        alike): the row tests wait until a longer scale can see them too (2,560 labelled rows
        in runs of 256, or ten batches).
        """
        return self.runs.settled and (self.long_runs.settled or self.batches.settled)

    def evidence(self) -> Dispersion:
        """The scale that speaks for clustering (the smallest p-value)."""
        return min(self.scales, key=lambda scale: scale.p_value)

    def words(self, what: str = "misses") -> str:
        """The clustering reading in one clause."""
        return self.evidence().words(what)


class PairedDispersion:
    """Do labelled rows cluster? Neighbouring runs of rows compared with the spread within runs.

    Runs of consecutive rows (chunks) are paired in the order they complete: ``(1, 2), (3, 4),
    …``. For a pair with means ``x̄₁, x̄₂`` of ``n₁, n₂`` rows, ``d = (x̄₂ − x̄₁)² / (1/n₁ +
    1/n₂)`` has mean ``σ²`` when the pair's rows are independent with one mean; the within-run
    mean square ``MSW = Σ (y − x̄_run)² / (N − C)`` estimates ``σ²`` too. So ``φ = mean(d) /
    MSW`` is about 1, and ``F(P, N − C)`` (``P`` pairs) gives its p-value. Rows that come in
    correlated blocks make runs differ from their neighbours far more than their own rows
    differ (``φ`` ≫ 1). A miss rate that drifts or steps up over the stream barely moves
    neighbours apart, so, unlike an ANOVA across all runs, a real coverage drop is not read
    as clustering. Five totals, whatever the stream's length.

    Examples
    --------
    By hand: pairs ``(1, 0)`` and ``(2/3, 1/3)`` of 3 rows give ``d = 1/(2/3) = 1.5`` and
    ``(1/9)/(2/3) = 1/6`` (mean 5/6); the runs' own spread is ``(0 + 0 + 2/3 + 2/3) / (12 − 4) =
    1/6``; ``φ = 5``.

    >>> d = PairedDispersion()
    >>> for run in ([1, 1, 1], [0, 0, 0], [1, 0, 1], [0, 1, 0]): d.add_run(np.array(run, float))
    >>> r = d.reading(); round(r.ratio, 12), r.batches, r.rows
    (5.0, 2, 12)
    """

    def __init__(self) -> None:
        self.totals_ = [0.0, 0.0, 0.0, 0.0]  # pairs, Σd, N, within SS
        self.runs_ = 0
        self.waiting_: list[float] = []  # the first run of a pair: [n, mean]

    def add_run(self, values: Any) -> None:
        """Add one complete run's labelled values (nothing if it has none)."""
        y = np.asarray(values, dtype=np.float64)
        if y.size == 0:
            return
        n, mean = float(y.size), float(y.mean())
        t = self.totals_
        t[2] += n
        t[3] += float(((y - mean) ** 2).sum())
        self.runs_ += 1
        if self.waiting_:
            n1, mean1 = self.waiting_
            t[0] += 1.0
            t[1] += (mean - mean1) ** 2 / (1.0 / n1 + 1.0 / n)
            self.waiting_ = []
        else:
            self.waiting_ = [n, mean]

    def reading(self, unit: str = "runs of rows") -> Dispersion:
        """The F test on the pairs so far (``φ = 1``, ``p = 1`` while undefined)."""
        pairs, d_sum, rows, within = self.totals_
        n_pairs, runs = int(pairs), self.runs_
        if n_pairs < 1 or rows <= runs:
            return Dispersion(1.0, 1.0, n_pairs, int(rows), unit)
        msw = within / (rows - runs)
        mean_d = d_sum / n_pairs
        if msw <= 1e-12:
            spread = mean_d > 1e-12
            return Dispersion(math.inf if spread else 1.0, 0.0 if spread else 1.0, n_pairs, int(rows), unit)
        from scipy.special import fdtrc  # on first use: `import calwatch` stays fast

        ratio = mean_d / msw
        return Dispersion(ratio, float(fdtrc(n_pairs, rows - runs, ratio)), n_pairs, int(rows), unit)

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the totals back as they are now."""
        saved = (list(self.totals_), self.runs_, list(self.waiting_))

        def restore() -> None:
            self.totals_, self.runs_, self.waiting_ = list(saved[0]), saved[1], list(saved[2])

        return restore
