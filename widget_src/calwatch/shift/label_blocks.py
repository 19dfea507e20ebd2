"""The label-based detectors' block side: whole blocks (or batches) as the unit (SHIFT.md §6).

The row-level label tests of :mod:`calwatch.shift.on_labels` bet on each labelled row. Rows that
come in correlated blocks break their null (``P(miss | earlier rows) ≤ ε₀``) with nothing
wrong. This module holds what those detectors use instead:

- with ``calibrate(blocks=)``, tests whose unit is the block: :class:`BlockMissTest` bets on
  each complete block's miss rate (one test, or one per class), :class:`BlockConformityTest`
  runs a conformal test martingale on a statistic of each complete block's conformity scores;
- without block keys, :class:`BatchFallback`: the same miss-rate test with every batch taken
  as one block, and the batch-dispersion reading that tells whether the rows cluster by batch
  (then the row test's bound does not hold, and the detector says so).

The statistics, the null rates and when a block is complete are in
:mod:`calwatch.engine.shift.block_labels`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from calwatch.engine.shift.betting import BET_FRACTIONS, calibration_null_rates, has_finite_threshold
from calwatch.engine.shift.block_labels import (
    DEFAULT_BLOCK_THRESHOLD,
    DEFAULT_BLOCK_TIMEOUT,
    BlockLedger,
    BlockNull,
    BoundedBetting,
    CompleteBlock,
    PairedDispersion,
    RunsReading,
    block_null_rate,
)
from calwatch.engine.shift.blocks import grid_counts, ks_distance, split_blocks
from calwatch.engine.shift.detectors import ConformalTestMartingale
from calwatch.engine.shift.monitors import DEFAULT_CALIBRATION_DELTA, DeferredResult, MonitorResult

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

#: Fewest calibration blocks a block conformity test needs (half build the reference).
MIN_CONFORMITY_BLOCKS = 10
#: The null of the block tests, as their guarantee states it.
BLOCK_LABEL_NULL = (
    "blocks (each whole, its rows however correlated) exchangeable with the calibration blocks; "
    "the order in which blocks complete does not depend on their labels"
)
BATCH_LABEL_NULL = (
    "batches (each whole, its rows however correlated) independent, each missing at most ε₀ of its "
    "labelled rows on average"
)


def _group_name(classes: list[str], group: int) -> str:
    return classes[group] if group < len(classes) else str(group)


@dataclass(frozen=True)
class MissLook:
    """What a miss-rate block test reports after a call: its reading and the words to show."""

    statistic: float
    threshold: float
    alarm: bool
    group: int


class BlockMissTest:
    """Ville's betting test on complete blocks' miss rates, overall or one per class.

    Parameters
    ----------
    calibrator : str
        The calibrator whose misses are tested (for the words).
    by_class : bool
        One test per true class (a ``mondrian="label"`` promise), at ``K·c`` each.
    timeout : int or None
        :class:`~calwatch.engine.shift.block_labels.BlockLedger`'s timeout, in batches.
    threshold : float
        Ville's ``c`` for the family: ``P(any false alarm over the whole stream) ≤ 1/c``.
    unit : {"blocks", "batches"}
        What a block is (for the words).
    """

    def __init__(
        self,
        calibrator: str,
        *,
        by_class: bool = False,
        timeout: int | None = DEFAULT_BLOCK_TIMEOUT,
        threshold: float = DEFAULT_BLOCK_THRESHOLD,
        unit: str = "blocks",
    ) -> None:
        self.calibrator = calibrator
        self.by_class = by_class
        self.threshold = float(threshold)
        self.unit = unit
        self.ledger_ = BlockLedger(timeout, remember_keys=unit == "blocks")  # batches are never checked
        self.nulls_: list[BlockNull | None] = []
        self.test_: BoundedBetting | None = None
        self.tested_: IntArray = np.zeros(0, dtype=np.intp)  # groups with a test -> their index in test_
        self.classes_: list[str] = []
        self.alpha_ = math.nan
        self.blocks_tested_ = 0

    # -- calibration ------------------------------------------------------------
    def calibrate(
        self,
        *,
        alpha: float,
        misses: BoolArray,
        labels: IntArray,
        keys: list[str],
        classes: list[str],
        calibration_delta: float | None = DEFAULT_CALIBRATION_DELTA,
    ) -> None:
        """Set each group's null rate from the calibration blocks (:func:`block_null_rate`)."""
        self.alpha_, self.classes_ = float(alpha), list(classes)
        key_array = np.asarray(keys, dtype=object)
        if self.by_class:
            self.nulls_ = [
                block_null_rate(alpha, misses[labels == c], key_array[labels == c], calibration_delta)
                if np.any(labels == c)
                else None
                for c in range(len(classes))
            ]
        else:
            self.nulls_ = [block_null_rate(alpha, misses, key_array, calibration_delta)]
        self._start([None if n is None else n.rate for n in self.nulls_])

    def start_batches(self, rates: list[float | None], classes: list[str], alpha: float) -> None:
        """Start with given null rates (batches as blocks: the rates move with the stream's dispersion)."""
        self.alpha_, self.classes_ = float(alpha), list(classes)
        self.nulls_ = [None for _ in rates]
        self._start(rates)

    def _start(self, rates: list[float | None]) -> None:
        tested = [g for g, r in enumerate(rates) if r is not None]
        self.tested_ = np.full(len(rates), -1, dtype=np.intp)
        self.tested_[tested] = np.arange(len(tested))
        self.test_ = BoundedBetting([rates[g] for g in tested], threshold=self.threshold) if tested else None
        self.ledger_ = BlockLedger(self.ledger_.timeout, remember_keys=self.ledger_.remember_keys)
        self.blocks_tested_ = 0

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the ledger and the test back as they are now."""
        undo_ledger = self.ledger_.checkpoint()
        undo_test = None if self.test_ is None else self.test_.checkpoint()
        tested = self.blocks_tested_

        def restore() -> None:
            undo_ledger()
            if undo_test is not None:
                undo_test()
            self.blocks_tested_ = tested

        return restore

    # -- the stream ---------------------------------------------------------------
    def observed(self, batch: int, keys: list[str]) -> None:
        """Register a batch's rows with their block keys."""
        self.ledger_.observe(batch, keys)

    def labelled(
        self,
        batches: Any,
        rows: Any,
        misses: BoolArray,
        labels: IntArray,
        *,
        now: int,
        rates: list[float] | None = None,
        on_complete: Callable[[list[CompleteBlock]], None] | None = None,
    ) -> tuple[MissLook, Callable[[], dict[str, Any]]] | None:
        """Add labelled rows; test the blocks they complete. None when no block completed.

        ``rates`` replaces the groups' null rates before the blocks are fed (the batch fallback's
        rates move with the dispersion read before this call); ``on_complete`` sees the blocks
        completed by this call.
        """
        self.ledger_.label(batches, rows, {"miss": misses, "label": labels})
        done = self.ledger_.complete(now)
        if on_complete is not None and done:
            on_complete(done)
        test = self.test_
        if not done or test is None:
            return None
        if rates is not None:
            test.null_rates = np.array([rates[g] for g in range(len(rates)) if self.tested_[g] >= 0])
        groups, values, keys, counts, events = self._values(done)
        if not groups:
            return None
        before = test.alarmed_.copy()
        test.update(
            np.asarray(groups, dtype=np.intp), np.asarray(values), keys=keys, rows=np.asarray(counts),
            events=np.asarray(events),
        )  # fmt: skip
        self.blocks_tested_ += len(set(keys))
        return self._look_at(test.alarmed_ & ~before)

    def current_look(self) -> tuple[MissLook, Callable[[], dict[str, Any]]]:
        """The look as it stands: the group most in doubt (an alarmed one first), and its words."""
        assert self.test_ is not None  # a batch fallback always has a test
        return self._look_at(self.test_.alarmed_)

    def _look_at(self, first: BoolArray) -> tuple[MissLook, Callable[[], dict[str, Any]]]:
        """The look at the group most in doubt, among the ``first`` groups when any (else all)."""
        test = self.test_
        assert test is not None
        statistics = np.array([test.log10_statistic(i) for i in range(test.n_groups)])
        worst = int(np.argmax(np.where(first, statistics, -np.inf) if first.any() else statistics))
        group = int(np.flatnonzero(self.tested_ == worst)[0])
        look = MissLook(float(statistics[worst]), test.log10_threshold, bool(test.alarmed_.any()), group)
        return look, self._words(look, worst)

    def _values(
        self, done: list[CompleteBlock]
    ) -> tuple[list[int], list[float], list[str], list[int], list[float]]:
        """Each complete block's value(s): its miss rate, per class when by class."""
        groups: list[int] = []
        values: list[float] = []
        keys: list[str] = []
        counts: list[int] = []
        events: list[float] = []
        for block in done:
            miss = block.payload["miss"].astype(np.float64)
            if self.by_class:
                labels = block.payload["label"]
                for c in np.unique(labels).tolist():
                    index = int(self.tested_[c]) if c < self.tested_.shape[0] else -1
                    if index < 0:
                        continue
                    part = miss[labels == c]
                    groups.append(index)
                    values.append(float(part.mean()))
                    keys.append(block.key)
                    counts.append(int(part.size))
                    events.append(float(part.sum()))
            else:
                groups.append(0)
                values.append(float(miss.mean()))
                keys.append(block.key)
                counts.append(int(miss.size))
                events.append(float(miss.sum()))
        return groups, values, keys, counts, events

    def _words(self, look: MissLook, index: int) -> Callable[[], dict[str, Any]]:
        """The look's words, written when first read (the stretch as it is now)."""
        assert self.test_ is not None
        test = self.test_
        stretch = test.stretch(index)
        rate = float(test.null_rates[index])
        guarantee = test.guarantee(self.unit)
        null = self.nulls_[look.group] if look.group < len(self.nulls_) else None
        unit, alpha, calibrator = self.unit, self.alpha_, self.calibrator
        name = _group_name(self.classes_, look.group) if self.by_class else None

        def words() -> dict[str, Any]:
            where = f"class {name!r}: " if name is not None else ""
            if stretch.blocks:
                span = stretch.first if stretch.blocks == 1 else f"{stretch.first} to {stretch.last}"
                evidence = (
                    f"over {stretch.blocks} {unit} ({span}; {stretch.rows:,} labelled rows) the mean "
                    f"{unit[:-1]} miss rate was {stretch.mean:.1%} against ε₀ = {rate:.1%} "
                    f"({stretch.events:,.0f} of {stretch.rows:,} rows missed)"
                )
            else:
                evidence = f"no {unit[:-1]} has yet missed more than ε₀ = {rate:.1%}"
            explanation = (
                f"{where}whole {unit} of labelled rows fall outside {calibrator}'s sets more often than "
                f"the calibrator allows: {evidence}; the test's evidence reached 10^{look.statistic:.1f} "
                f"(alarm at 10^{look.threshold:.1f})"
            )
            how = f"; {null.words()}" if null is not None else ""
            null_text = BLOCK_LABEL_NULL if unit == "blocks" else BATCH_LABEL_NULL
            threatened = f"coverage ≥ {1 - alpha:.3g} of {calibrator}'s prediction sets"
            return {
                "guarantee": f"{guarantee}; + {DEFAULT_CALIBRATION_DELTA:g} for an unlucky calibration "
                f"draw{how} "
                f"(null: {null_text})",
                "threatens": threatened if name is None else f"{threatened} within class {name!r}",
                "explanation": explanation,
                "action": "recalibrate on recent labelled data; if it keeps recurring, retrain",
                "estimate": 1.0 - stretch.mean if stretch.blocks else math.nan,
                "interval": (math.nan, math.nan),
            }

        return words


#: Rows of a short run and of a long run, the units whose spread tells whether labelled rows cluster.
CHUNK_ROWS = 32
LONG_RUN_ROWS = 256


class ChunkDispersion:
    """Whether labelled rows cluster, read at three scales: short runs, long runs, whole batches.

    A run is :data:`CHUNK_ROWS` (short) or :data:`LONG_RUN_ROWS` (long) consecutive rows of one
    batch (its last run may be shorter), complete once every row is labelled (or after the
    ledger's timeout). Rows of a correlated block usually arrive together, so runs inherit
    their blocks' spread; a batch that is a block (a day whose rows share a cause) spreads from
    its neighbour batches. Each scale compares neighbouring complete units with the spread
    within units (:class:`~calwatch.engine.shift.block_labels.PairedDispersion`), which does not
    read a coverage drop (a rate that steps up and stays) as clustering
    (:class:`~calwatch.engine.shift.block_labels.RunsReading` combines them).
    """

    def __init__(self, timeout: int | None = DEFAULT_BLOCK_TIMEOUT) -> None:
        self.ledger_ = BlockLedger(timeout, remember_keys=False)
        self.dispersion_ = PairedDispersion()
        self.long_ledger_ = BlockLedger(timeout, remember_keys=False)
        self.long_dispersion_ = PairedDispersion()
        self.batch_ledger_ = BlockLedger(timeout, remember_keys=False)
        self.batch_dispersion_ = PairedDispersion()

    def _after_decode(self) -> None:
        """A snapshot written with fewer scales lacks the others (they start from here)."""
        for name in ("long", "batch"):
            if f"{name}_ledger_" not in self.__dict__:
                setattr(self, f"{name}_ledger_", BlockLedger(self.ledger_.timeout, remember_keys=False))
                setattr(self, f"{name}_dispersion_", PairedDispersion())

    def _scales(self) -> list[tuple[BlockLedger, PairedDispersion]]:
        return [
            (self.ledger_, self.dispersion_),
            (self.long_ledger_, self.long_dispersion_),
            (self.batch_ledger_, self.batch_dispersion_),
        ]

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the units and the sums back as they are now."""
        undo = [part.checkpoint() for scale in self._scales() for part in scale]

        def restore() -> None:
            for step in undo:
                step()

        return restore

    def observed(self, batch: int, m: int) -> None:
        """Register a batch's rows in runs and as one batch (all closed: a batch is whole when observed)."""
        for (ledger, _), size in zip(self._scales(), (CHUNK_ROWS, LONG_RUN_ROWS, None), strict=True):
            ledger.observe_runs(batch, m, size)

    def labelled(self, batches: Any, rows: Any, values: Any, *, now: int) -> RunsReading:
        """Add labelled rows' values; the reading with the units they completed."""
        payload = {"value": np.asarray(values, dtype=np.float64)}
        for ledger, dispersion in self._scales():
            ledger.label(batches, rows, payload)
            for block in ledger.complete(now):
                dispersion.add_run(block.payload["value"])
        return RunsReading(
            self.dispersion_.reading(f"runs of {CHUNK_ROWS} rows"),
            self.long_dispersion_.reading(f"runs of {LONG_RUN_ROWS} rows"),
            self.batch_dispersion_.reading("batches"),
        )


class BatchFallback:
    """Without block keys: every batch as one block, and whether the rows cluster by batch.

    The row test's bound assumes independent rows. :attr:`chunks_` tells whether the labelled
    rows cluster (:class:`ChunkDispersion`); while they do (or while it cannot tell), the
    detector takes its decision from :attr:`test_`, a miss-rate test on whole batches. Its null
    rate for a group with ``n`` calibration rows is the ``1 − δ_c`` quantile of the calibration
    draw's Beta law at ``n / φ`` rows, ``φ`` the design effect of whole batches' miss rates read
    from neighbouring batches (:class:`~calwatch.engine.shift.block_labels.PairedDispersion`:
    ``n_b Var(x̄_b) / σ²``, which a trend or a step in the rate does not inflate), read before
    each call's rows, for the group's own rows (a class's misses may cluster far more than all
    rows'), and at least the ratio of all rows (1 until five pairs of batches are read). If the
    calibration rows were drawn like the stream's batches they carry as little information as
    that; if they were drawn independently this is conservative.
    """

    def __init__(self, calibrator: str, *, by_class: bool = False) -> None:
        self.test_ = BlockMissTest(calibrator, by_class=by_class, unit="batches")
        self.group_dispersions_: list[PairedDispersion] = []  # per class, when by class
        self.chunks_ = ChunkDispersion()  # whether rows cluster; its batch scale sizes the null
        self.counts_: list[int] = []
        self.alpha_ = math.nan

    def calibrate(self, alpha: float, counts: list[int], classes: list[str]) -> None:
        """Start: the calibration count of each group (one group, or one per class)."""
        self.alpha_, self.counts_ = float(alpha), list(counts)
        self.test_.start_batches(self.rates([1.0] * len(counts)), classes, alpha)
        self.group_dispersions_ = [PairedDispersion() for _ in counts] if self.test_.by_class else []
        self.chunks_ = ChunkDispersion()

    def _after_decode(self) -> None:
        """A snapshot written before per-class ratios lacks them (its classes start from here)."""
        if "group_dispersions_" not in self.__dict__:
            self.group_dispersions_ = (
                [PairedDispersion() for _ in self.counts_] if self.test_.by_class else []
            )

    def rates(self, ratios: list[float]) -> list[float | None]:
        """Each group's null rate at its dispersion ratio ``φ`` (None: too few effective rows to test)."""
        out: list[float | None] = []
        for n, ratio in zip(self.counts_, ratios, strict=True):
            n_eff = max(int(n / max(ratio, 1.0)), 1)
            testable = has_finite_threshold(self.alpha_, n_eff)
            out.append(
                float(calibration_null_rates(self.alpha_, np.array([n_eff]), DEFAULT_CALIBRATION_DELTA)[0])
                if testable
                else None
            )
        return out

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the batch test and the dispersion sums back as they are now."""
        parts: list[Any] = [self.test_, self.chunks_, *self.group_dispersions_]
        undo = [part.checkpoint() for part in parts]

        def restore() -> None:
            for step in undo:
                step()

        return restore

    def observed(self, batch: int, m: int) -> None:
        """A batch is one block, whole when observed."""
        self.test_.ledger_.observe_runs(batch, m)
        self.chunks_.observed(batch, m)

    def labelled(
        self, batches: Any, rows: Any, misses: BoolArray, labels: IntArray, *, now: int
    ) -> tuple[RunsReading, tuple[MissLook, Callable[[], dict[str, Any]]] | None]:
        """Add labelled rows: the chunks' dispersion reading, and the batch test's look (if any)."""
        marginal = self.chunks_.batch_dispersion_.reading()  # whole batches' misses, before this call
        overall = marginal.ratio if marginal.settled else 1.0
        if self.group_dispersions_:
            readings = [d.reading() for d in self.group_dispersions_]
            ratios = [max(overall, r.ratio) if r.settled else overall for r in readings]
        else:
            ratios = [overall] * len(self.counts_)
        # A group too small to test at this dispersion bets against 0.5 (little evidence, no false alarm).
        rates = [0.5 if r is None else r for r in self.rates(ratios)]
        groups = self.group_dispersions_

        def add(done: list[CompleteBlock]) -> None:
            for block in done:
                miss = block.payload["miss"]
                for c, group in enumerate(groups):
                    group.add_run(miss[block.payload["label"] == c])

        look = self.test_.labelled(batches, rows, misses, labels, now=now, rates=rates, on_complete=add)
        return self.chunks_.labelled(batches, rows, misses, now=now), look


class BlockConformityTest:
    """A conformal test martingale on complete blocks' conformity scores (labelled rows).

    The calibration blocks are split in two (seeded): one half's labelled conformity scores,
    pooled, are the reference; every score is mapped to ``[0, 1]`` by the reference's empirical
    CDF (a fixed monotone map), and a block's statistic is the Kolmogorov–Smirnov distance of
    its mapped scores to the reference's (:func:`~calwatch.engine.shift.blocks.ks_distance`),
    the same function for the other half's blocks and for each complete stream block. So under
    the block null the statistics are exchangeable and Ville's bound holds for blocks. A block
    that times out before every row is labelled is not scored: the distance depends on the
    number of rows, and a partly labelled block would not be exchangeable with whole
    calibration blocks.
    """

    def __init__(self, *, timeout: int | None = DEFAULT_BLOCK_TIMEOUT, seed: int = 0) -> None:
        self.ledger_ = BlockLedger(timeout)
        self.seed = int(seed)
        self.reference_: FloatArray = np.zeros(0)
        self.reference_cdf_: FloatArray = np.zeros(0)
        self.martingale_: ConformalTestMartingale | None = None

    def calibrate(self, scores: FloatArray, keys: list[str]) -> None:
        """Fit the reference and the martingale on the calibration blocks."""
        names = sorted(set(keys))
        if len(names) < MIN_CONFORMITY_BLOCKS:
            msg = (
                f"blocks: a block conformity test needs at least {MIN_CONFORMITY_BLOCKS} calibration "
                f"blocks (half build its reference); blocks= holds {len(names)}"
            )
            raise ValueError(msg)
        reference_blocks, scored_blocks = split_blocks(len(names), self.seed)
        index = {k: i for i, k in enumerate(names)}
        codes = np.fromiter((index[k] for k in keys), dtype=np.intp, count=len(keys))
        in_reference = np.isin(codes, reference_blocks)
        self.reference_ = np.sort(scores[in_reference])
        pooled = grid_counts(self._mapped(self.reference_))
        self.reference_cdf_ = np.cumsum(pooled) / pooled.sum()
        statistics = [self._statistic(scores[codes == b]) for b in scored_blocks.tolist()]
        self.martingale_ = ConformalTestMartingale(
            threshold=DEFAULT_BLOCK_THRESHOLD, statistic="ville", resolution=None, seed=self.seed
        ).fit(np.asarray(statistics, dtype=np.float64))
        self.ledger_ = BlockLedger(self.ledger_.timeout)

    def _mapped(self, scores: FloatArray) -> FloatArray:
        """The reference's empirical CDF at each score, in ``[0, 1]``."""
        ranks = np.searchsorted(self.reference_, scores, side="right")
        return np.asarray(ranks / max(self.reference_.shape[0], 1), dtype=np.float64)

    def _statistic(self, scores: FloatArray) -> float:
        return ks_distance(grid_counts(self._mapped(scores)), self.reference_cdf_)

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the ledger and the martingale back as they are now."""
        undo_ledger = self.ledger_.checkpoint()
        undo_martingale = None if self.martingale_ is None else self.martingale_.checkpoint()

        def restore() -> None:
            undo_ledger()
            if undo_martingale is not None:
                undo_martingale()

        return restore

    def observed(self, batch: int, keys: list[str]) -> None:
        """Register a batch's rows with their block keys."""
        self.ledger_.observe(batch, keys)

    def labelled(
        self, batches: Any, rows: Any, scores: FloatArray, *, now: int
    ) -> tuple[FloatArray, list[str]]:
        """Add labelled rows' conformity scores; the statistics and keys of the blocks they complete."""
        self.ledger_.label(batches, rows, {"score": np.asarray(scores, dtype=np.float64)})
        statistics: list[float] = []
        keys: list[str] = []
        for block in self.ledger_.complete(now):
            if block.timed_out:  # a partly labelled block is not exchangeable with whole ones
                continue
            statistics.append(self._statistic(block.payload["score"]))
            keys.append(block.key)
        return np.asarray(statistics, dtype=np.float64), keys


def result_of(
    name: str,
    look: MissLook,
    words: Callable[[], dict[str, Any]],
    rows_seen: int,
) -> MonitorResult:
    """A deferred result of a block test's look."""
    return DeferredResult.later(
        name=name,
        statistic=look.statistic,
        threshold=look.threshold,
        alarm=look.alarm,
        rows_seen=rows_seen,
        alarm_rows=(),
        words=words,
    )


class EvidenceTrail:
    """Where a row-level betting test's wealth grew: the stretch of labelled rows behind its evidence.

    The test's capital for bet ``λ_j = u_j/ε₀`` after ``n`` rows with ``e`` misses is
    ``L_j = e·log(1 + u_j(1 − ε₀)/ε₀) + (n − e)·log(1 − u_j)``. The rows since ``L_j`` was lowest
    carry its evidence (a Shiryaev-Roberts or CUSUM statistic is driven by them); the trail keeps,
    per group and bet, the counts at that lowest point, read at the end of each look, and the
    first batch after it. So a warning can say "over these rows, this many missed" — a rate
    above ``ε₀`` by construction whenever the wealth grew — instead of the window's own rate,
    which may lie on the safe side of the null. Memory: a few numbers per group and bet.
    """

    def __init__(self, null_rates: Any, bet_fractions: tuple[float, ...] = BET_FRACTIONS) -> None:
        eps = np.atleast_1d(np.asarray(null_rates, dtype=np.float64))[:, None]
        u = np.asarray(bet_fractions, dtype=np.float64)[None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            self.up_ = np.where(np.isfinite(eps), np.log1p(u * (1.0 - eps) / eps), 0.0)
        self.down_ = np.broadcast_to(np.log1p(-u), self.up_.shape).copy()
        shape = self.up_.shape
        self.rows_ = np.zeros(shape[0])
        self.events_ = np.zeros(shape[0])
        self.low_level_ = np.zeros(shape)
        self.low_rows_ = np.zeros(shape)
        self.low_events_ = np.zeros(shape)
        self.low_batch_ = np.full(shape, -1, dtype=np.int64)  # first batch after the low (-1: not yet)
        self.last_batch_ = np.full(shape[0], -1, dtype=np.int64)

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the trail back as it is now."""
        saved = {name: value.copy() for name, value in vars(self).items()}

        def restore() -> None:
            vars(self).update({name: value.copy() for name, value in saved.items()})

        return restore

    def add(self, groups: IntArray, rows: Any, events: Any, first_batch: Any, last_batch: Any) -> None:
        """End of a look: each touched group's new rows, misses and batch span."""
        g = np.asarray(groups, dtype=np.intp)
        self.rows_[g] += np.asarray(rows, dtype=np.float64)
        self.events_[g] += np.asarray(events, dtype=np.float64)
        first = np.asarray(first_batch, dtype=np.int64)
        self.last_batch_[g] = np.asarray(last_batch, dtype=np.int64)
        level = self._level(g)
        lower = level < self.low_level_[g]
        unset = ~lower & (self.low_batch_[g] < 0)
        low_batch = self.low_batch_[g]
        low_batch[unset] = np.broadcast_to(first[:, None], low_batch.shape)[unset]
        low_batch[lower] = -1
        self.low_batch_[g] = low_batch
        for table, value in ((self.low_level_, level), (self.low_rows_, self.rows_[g, None]),
                             (self.low_events_, self.events_[g, None])):  # fmt: skip
            part = table[g]
            part[lower] = np.broadcast_to(value, part.shape)[lower]
            table[g] = part

    def _level(self, groups: IntArray) -> FloatArray:
        """``L_j`` of each bet for these groups, shape ``(len(groups), bets)``."""
        g = np.asarray(groups, dtype=np.intp)
        level: FloatArray = (
            self.events_[g, None] * self.up_[g] + (self.rows_[g] - self.events_[g])[:, None] * self.down_[g]
        )
        return level

    def restart(self, group: int) -> None:
        """The test restarted (after an alarm): the stretch starts again from here."""
        self.low_level_[group] = self._level(np.array([group]))[0]
        self.low_rows_[group] = self.rows_[group]
        self.low_events_[group] = self.events_[group]
        self.low_batch_[group] = -1

    def stretch(self, group: int = 0) -> tuple[int, int, int, int]:
        """``(rows, misses, first batch, last batch)`` since the best bet's lowest point (rows 0: none)."""
        level = self._level(np.array([group]))[0]
        j = int(np.argmax(level - self.low_level_[group]))
        rows = round(float(self.rows_[group] - self.low_rows_[group, j]))
        events = round(float(self.events_[group] - self.low_events_[group, j]))
        return rows, events, int(self.low_batch_[group, j]), int(self.last_batch_[group])


def stretch_words(stretch: tuple[int, int, int, int], null_rate: float, window: tuple[int, int]) -> str:
    """A coverage test's evidence in words: the stretch that grew it, and the window when it differs.

    ``window``: the look's own labelled rows and misses.
    """
    rows, events, first, last = stretch
    window_rows, window_events = window
    if rows <= 0:
        return (
            f"in this window {window_events} of {window_rows} labelled rows missed "
            f"({window_events / max(window_rows, 1):.1%}) against the allowed {null_rate:.1%}"
        )
    span = f"batch {first}" if first == last or first < 0 else f"batches {first}–{last}"
    text = (
        f"the evidence grew over {rows:,} labelled rows of {span}, where {events:,} missed "
        f"({events / rows:.1%}, against the allowed {null_rate:.1%})"
    )
    window_rate = window_events / max(window_rows, 1)
    if window_rows and window_rate <= null_rate:
        text += (
            f"; the latest labels miss less ({window_events} of {window_rows}, {window_rate:.1%}), "
            "so the evidence is from the stretch, not from this window"
        )
    return text
