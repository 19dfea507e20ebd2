"""Label-based detectors: they watch labels as they arrive (SHIFT.md §3, §6).

Per set calibrator with ``label_scores``, a conformal test martingale on its conformity scores
``s(x, y)`` in arrival order (valid if the order in which labels arrive does not depend on their
values); per set calibrator with ``alpha``, a coverage-drop betting test on the labelled rows;
per ``mondrian="label"`` calibrator the same test within each true class, since such a
calibrator promises per-class coverage. On correlated rows they test blocks, or hold their
row-level alarms back (:mod:`calwatch.shift.label_blocks`).
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from calwatch.engine.shift.betting import (
    DEFAULT_FALSE_ALARM,
    DEFAULT_SR_THRESHOLD,
    GroupedBetting,
    calibration_null_rates,
    guarantee_text,
    has_finite_threshold,
)
from calwatch.engine.shift.block_labels import DEFAULT_BLOCK_TIMEOUT, MIN_DISPERSION_BATCHES, RunsReading
from calwatch.engine.shift.monitors import (
    DEFAULT_CALIBRATION_DELTA,
    CoverageDrop,
    DeferredResult,
    MonitorResult,
    coverage_drop_words,
)
from calwatch.shift.base import (
    NEW_RUN,
    CalibrationData,
    FloatArray,
    IntArray,
    _MartingaleDetector,
    first_names,
    smallest_testable_count,
)
from calwatch.shift.label_blocks import (
    CHUNK_ROWS,
    LONG_RUN_ROWS,
    BatchFallback,
    BlockConformityTest,
    BlockMissTest,
    ChunkDispersion,
    EvidenceTrail,
    MissLook,
    result_of,
    stretch_words,
)
from calwatch.shift.label_free import BLOCK_NULL


def _positions(
    where: tuple[Any, Any] | None, n: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
    """The labelled rows' ``(batch, row in batch)`` arrays, checked against the rows fed (None: not given)."""
    if where is None:
        return None
    batches, rows = (np.asarray(a, dtype=np.int64) for a in where)
    if batches.shape != (n,) or rows.shape != (n,):
        msg = f"where must give a batch and a row for each of the {n} labelled rows"
        raise ValueError(msg)
    return batches, rows


def _dependence_words(reading: RunsReading, what: str = "misses", *, batches_decide: bool = True) -> str:
    """What a warning (or a held-back look) says when the labelled rows cluster."""
    then = (
        "so this alarm takes whole batches as the unit"
        if batches_decide
        else "so its alarms are held back while they do"
    )
    return (
        f"; rows look correlated, coming in runs ({reading.words(what)}): a row-level bound assumes "
        f"independent rows, {then} — give blocks= to calibrate() and observe() (a day, a session, "
        "a unit) for a test whose bound holds"
    )


#: The ``examples`` entry of a notice about correlated rows (``Monitor.status()`` counts them).
CORRELATED_ROWS = "correlated rows"


def _unsettled_words(reading: RunsReading) -> str:
    """What a look says while the runs check has not read enough to tell whether rows cluster."""
    runs, long_runs, batches = reading.scales
    return (
        f"; the row-level test waits for {MIN_DISPERSION_BATCHES} fully labelled pairs of runs of "
        f"{CHUNK_ROWS} rows (it has {runs.batches}) and of runs of {LONG_RUN_ROWS} rows or of batches "
        f"(it has {long_runs.batches} and {batches.batches}) to tell whether rows cluster, as its bound "
        "assumes independent rows: meanwhile whole batches decide"
    )


def _count_held(detector: Any, statistic: float) -> None:
    """Count a row-level alarm held back (the rows cluster), with the highest evidence held."""
    held = detector.held_back_ or {"looks": 0, "statistic": -math.inf}
    held["looks"] += 1
    held["statistic"] = max(held["statistic"], statistic)
    detector.held_back_ = held


def _held_notice(detector: Any, kind: str, *, batches_decide: bool = True) -> dict[str, Any] | None:
    """The notice of a row-level alarm held back because the rows cluster by batch (None if none)."""
    held = getattr(detector, "held_back_", None)
    reading = getattr(detector, "dispersion_reading_", None)
    if reading is None or not reading.clustered:
        return None
    what = (
        "row-level alarms are held back, as a row-level bound assumes independent rows"
        if held is None
        else f"{held['looks']} row-level alarm{'s' if held['looks'] != 1 else ''} held back (evidence up "
        f"to 10^{held['statistic']:.1f}), as a row-level bound assumes independent rows"
    )
    tail = what + ("; whole batches decide instead" if batches_decide else "")
    return {
        "calibrator": getattr(detector, "calibrator", None),
        "detector": detector.name,
        "classes": 0,
        "examples": CORRELATED_ROWS,
        "message": (
            f"{detector.name}: rows look correlated, coming in runs ({reading.words(kind)}); {tail}. "
            "Give blocks= to calibrate() and observe() (a day, a session, a unit) for a test whose "
            "bound holds on correlated rows"
        ),
    }


class LabelMartingale(_MartingaleDetector):
    """Label-based: a conformal test martingale on a calibrator's conformity scores ``s(x, y)``.

    Fed with newly labelled rows in arrival order. Needs a calibrator with
    ``label_scores(P, y)`` (``SplitConformalClassifier``).

    With ``calibrate(blocks=)`` the unit is the block
    (:class:`~calwatch.shift.label_blocks.BlockConformityTest`: a Kolmogorov–Smirnov distance of each
    complete block's scores to a reference half of the calibration blocks, Ville's rule). Without
    block keys the row martingale runs, and its labelled rows are read for clustering
    (:class:`~calwatch.shift.label_blocks.ChunkDispersion`, on a fixed map of the scores): while they
    cluster, or until enough rows were read to tell, its alarms are held back (its bound
    assumes independent rows) and :meth:`notice` says so.
    """

    needs_labels = True
    uses_positions = True
    action = "recalibrate on recent labelled data; if the alarm keeps recurring, retrain the model"

    def __init__(
        self, calibrator: str, *, block_timeout: int | None = DEFAULT_BLOCK_TIMEOUT, **options: Any
    ) -> None:
        super().__init__(**options)
        self.calibrator = calibrator
        self.name = f"{calibrator}: conformity martingale"
        self.threatens = f"the coverage of {calibrator}'s prediction sets"
        self.block_timeout = block_timeout
        self._scorer: Any = None
        self._init_units()

    def _init_units(self) -> None:
        self.blocks_: BlockConformityTest | None = None
        self.chunks_: ChunkDispersion | None = ChunkDispersion()  # do the p-values cluster?
        self.dispersion_reading_: RunsReading | None = None
        self.held_back_: dict[str, Any] | None = None

    def _after_decode(self) -> None:
        """A snapshot written before block-aware label tests lacks their state."""
        if "chunks_" not in self.__dict__:
            self._init_units()
            self.chunks_ = None  # the rows it saw were not registered: rows only, as then

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the martingale, its units and its scorer's random stream back as they are."""
        restore_martingale = super().checkpoint()
        # Only a randomised scorer draws from its stream when scoring.
        rng = (
            getattr(self._scorer, "_predict_rng", None) if getattr(self._scorer, "randomized", True) else None
        )
        rng_state = None if rng is None else rng.bit_generator.state
        undo = [part.checkpoint() for part in (self.blocks_, self.chunks_) if part is not None]
        reading, held = self.dispersion_reading_, None if self.held_back_ is None else dict(self.held_back_)

        def restore() -> None:
            restore_martingale()
            for step in undo:
                step()
            self.dispersion_reading_, self.held_back_ = reading, held
            if rng is not None:
                rng.bit_generator.state = rng_state

        return restore

    def calibrate(self, data: CalibrationData) -> None:
        """Fit on the calibrator's conformity scores of the calibration rows (by block with blocks)."""
        # A copy: scoring must not advance a randomised calibrator's own random stream.
        self._scorer = copy.deepcopy(data.calibrators[self.calibrator])
        self._sort_free: bool | None = None
        scores = self._conformity(data.probs, data.labels)
        self._fit(scores)
        self._init_units()
        # A fixed map of a score to the share of calibration scores at or above it: the runs check
        # reads these (the martingale's own p-values drift as the stream joins their bag).
        self.calibration_scores_ = np.sort(scores)
        self.run_ = list(NEW_RUN)
        self.block_run_ = list(NEW_RUN)
        if data.blocks is not None:
            self.blocks_ = BlockConformityTest(timeout=self.block_timeout, seed=self.seed)
            self.blocks_.calibrate(scores, data.blocks)

    def check_blocks(self, keys: list[str]) -> None:
        """Raise ``ValueError`` (changing nothing) if these keys would reopen a complete block."""
        if self.blocks_ is not None:
            self.blocks_.ledger_.check(keys)

    def _conformity(self, probs: FloatArray, labels: IntArray) -> FloatArray:
        """The scorer's label scores, summed without sorting where it offers that.

        Calibration and stream scores come from the same function, which is all the martingale's
        exchangeability needs; a scorer's bit-for-bit ``label_scores`` would sort every row.
        """
        label_scores = self._scorer.label_scores
        sort_free = getattr(self, "_sort_free", None)
        if sort_free is None:  # decided once (a signature lookup costs more than small batches)
            sort_free = self._sort_free = "same_bits_as_sets" in inspect.signature(label_scores).parameters
        if sort_free:
            return np.asarray(label_scores(probs, labels, same_bits_as_sets=False), dtype=np.float64)
        return np.asarray(label_scores(probs, labels), dtype=np.float64)

    def observe(self, probs: FloatArray) -> MonitorResult | None:
        """Label-based: nothing to do until labels arrive."""
        return None

    def observed(self, batch: int, m: int, blocks: list[str] | None) -> None:
        """Register a newly observed batch's rows (by block with blocks, else the batch as one block)."""
        if self.blocks_ is not None:
            assert blocks is not None  # the monitor requires blocks= once calibrated with them
            self.blocks_.observed(batch, blocks)
        elif self.chunks_ is not None:
            self.chunks_.observed(batch, m)

    def labelled(
        self,
        probs: FloatArray,
        labels: IntArray,
        covered: dict[str, npt.NDArray[np.bool_]],
        where: tuple[Any, Any] | None = None,
        now: int = 0,
    ) -> MonitorResult | None:
        """Feed the conformity scores of the newly labelled rows (``where``: their batch and row)."""
        scores = self._conformity(probs, labels)
        positions = _positions(where, scores.shape[0])
        what = f"{self.calibrator}'s conformity scores of labelled rows"
        if self.blocks_ is not None:
            if positions is None:
                msg = f"the {self.name} tests blocks: it needs each labelled row's batch and row (where=)"
                raise ValueError(msg)
            statistics, _ = self.blocks_.labelled(*positions, scores, now=now)
            if self.blocks_.martingale_ is None or statistics.size == 0:
                return None
            return self._look(
                statistics, f"whole blocks of {what}", unit="blocks", null=BLOCK_NULL,
                martingale=self.blocks_.martingale_, statistic_name="ville", run_name="block_run_",
            )  # fmt: skip
        if positions is None or self.chunks_ is None:
            return self._look(scores, what)
        chunks = self.chunks_
        reference = self.__dict__.get("calibration_scores_")
        if reference is None or reference.size == 0:
            return self._look(scores, what)
        fixed = 1.0 - np.searchsorted(reference, scores, side="left") / reference.shape[0]

        def hold(p_values: FloatArray, alarm: bool, statistic: float) -> tuple[bool, str]:
            reading = self.dispersion_reading_ = chunks.labelled(*positions, fixed, now=now)
            if reading.clear:
                return alarm, ""
            if not reading.clustered:
                return False, _unsettled_words(reading)
            if alarm:
                _count_held(self, statistic)
            return False, _dependence_words(reading, "conformal p-values", batches_decide=False)

        return self._look(scores, what, hold=hold)

    def notice(self) -> dict[str, Any] | None:
        """Held-back alarms and correlated rows, as a notice for ``Monitor.notices()``."""
        return _held_notice(self, "conformal p-values", batches_decide=False)


class _CoverageUnits:
    """What the two coverage-drop detectors share: their units (blocks, or rows with a batch fallback).

    With ``calibrate(blocks=)`` the test is :attr:`blocks_`; without, the row test decides while
    the runs check is clear (:class:`~calwatch.engine.shift.block_labels.RunsReading`) and
    :attr:`fallback_` (whole batches) decides otherwise.
    """

    name: str
    calibrator: str

    def observe(self, probs: FloatArray) -> MonitorResult | None:
        """Label-based: nothing to do until labels arrive."""
        return None

    def _init_units(self) -> None:
        self.blocks_: BlockMissTest | None = None
        self.fallback_: BatchFallback | None = None
        self.trail_: EvidenceTrail | None = None
        self.dispersion_reading_: RunsReading | None = None
        self.held_back_: dict[str, Any] | None = None

    def _unit_checkpoint(self) -> Callable[[], None]:
        """A function that puts the units back as they are now."""
        undo = [part.checkpoint() for part in (self.blocks_, self.fallback_, self.trail_) if part is not None]
        reading, held = self.dispersion_reading_, None if self.held_back_ is None else dict(self.held_back_)

        def restore() -> None:
            for step in undo:
                step()
            self.dispersion_reading_, self.held_back_ = reading, held

        return restore

    def check_blocks(self, keys: list[str]) -> None:
        """Raise ``ValueError`` (changing nothing) if these keys would reopen a complete block."""
        if self.blocks_ is not None:
            self.blocks_.ledger_.check(keys)

    def observed(self, batch: int, m: int, blocks: list[str] | None) -> None:
        """Register a newly observed batch's rows with their blocks (or the batch as one block)."""
        if self.blocks_ is not None:
            assert blocks is not None  # the monitor requires blocks= once calibrated with them
            self.blocks_.observed(batch, blocks)
        elif self.fallback_ is not None:
            self.fallback_.observed(batch, m)

    def _block_look(
        self, positions: tuple[Any, Any] | None, hits: npt.NDArray[np.bool_], labels: IntArray, now: int
    ) -> MonitorResult | None:
        """The block test's look at newly labelled rows (with ``calibrate(blocks=)``)."""
        assert self.blocks_ is not None
        if positions is None:
            msg = f"the {self.name} tests blocks: it needs each labelled row's batch and row (where=)"
            raise ValueError(msg)
        found = self.blocks_.labelled(*positions, ~hits, labels, now=now)
        return (
            None if found is None else result_of(self.name, found[0], found[1], self.blocks_.blocks_tested_)
        )

    def _decide(
        self,
        row: MonitorResult,
        group: int,
        groups: IntArray,
        hits: npt.NDArray[np.bool_],
        labels: IntArray,
        positions: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]],
        now: int,
        null_rate: float,
    ) -> MonitorResult:
        """Follow the evidence of each group touched (one, or one per class), then decide (:meth:`_decided`).

        ``group`` is the row test's group reported in ``row``; ``groups`` each row's group.
        """
        assert self.fallback_ is not None
        assert self.trail_ is not None
        batches, misses = positions[0], ~hits
        touched = np.unique(groups)
        per = [groups == k for k in touched.tolist()]
        self.trail_.add(
            touched, [int(m.sum()) for m in per], [int(misses[m].sum()) for m in per],
            [int(batches[m].min()) for m in per], [int(batches[m].max()) for m in per],
        )  # fmt: skip
        stretch = self.trail_.stretch(group)
        if row.alarm_rows:
            self.trail_.restart(group)
        reading, batch_look = self.fallback_.labelled(*positions, misses, labels, now=now)
        mine = groups == group
        window = (int(mine.sum()), int(misses[mine].sum()))
        return self._decided(row, reading, batch_look, stretch_words(stretch, null_rate, window))

    def _decided(
        self,
        row: MonitorResult,
        reading: RunsReading,
        batch_look: tuple[MissLook, Callable[[], dict[str, Any]]] | None,
        evidence: str,
    ) -> MonitorResult:
        """The row test's look when the runs check is clear, else the batch test's, saying why."""
        self.dispersion_reading_ = reading
        if reading.clear:
            return _reworded(row, evidence)
        if row.alarm and reading.clustered:
            _count_held(self, row.statistic)
        assert self.fallback_ is not None
        look, words = batch_look if batch_look is not None else self.fallback_.test_.current_look()
        dependence = _dependence_words(reading) if reading.clustered else _unsettled_words(reading)

        def reworded() -> dict[str, Any]:
            out = words()
            out["explanation"] += dependence
            return out

        return result_of(self.name, look, reworded, row.rows_seen)

    def notice(self) -> dict[str, Any] | None:
        """Held-back alarms and correlated rows, as a notice for ``Monitor.notices()``."""
        return _held_notice(self, "misses")


class CoverageDropDetector(_CoverageUnits):
    """Label-based: a betting test of a set calibrator's miss rate (``engine.monitors.CoverageDrop``).

    Three units, one decision:

    - with ``calibrate(blocks=)``, whole blocks (:class:`~calwatch.shift.label_blocks.BlockMissTest`:
      Ville's betting test on each complete block's miss rate, against a null rate computed
      from the calibration blocks);
    - without block keys, rows (Shiryaev-Roberts on each labelled row's miss, anytime threshold)
      while the misses of complete batches do not cluster by batch;
    - while they do (:class:`~calwatch.shift.label_blocks.BatchFallback`: batch-dispersion F test at
      p < 0.001 over ≥ 5 batches), whole batches: the row test's alarms are held back (its bound
      assumes independent rows) and the decision is the batch test's; the warning and
      :meth:`notice` say so and suggest ``blocks=``.
    """

    needs_labels = True
    uses_positions = True

    def __init__(
        self, calibrator: str, *, block_timeout: int | None = DEFAULT_BLOCK_TIMEOUT, **options: Any
    ) -> None:
        self.calibrator = calibrator
        self.name = f"{calibrator}: coverage drop"
        self.options = options
        self.block_timeout = block_timeout
        self.test_: CoverageDrop | None = None
        self._init_units()

    def _after_decode(self) -> None:
        """A snapshot written before block-aware label tests lacks their state (rows only, as then)."""
        if "fallback_" not in self.__dict__:
            self._init_units()

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the tests back as they are now."""
        undo = [self._unit_checkpoint()]
        if self.test_ is not None:
            undo.append(self.test_.test_.checkpoint())

        def restore() -> None:
            for step in undo:
                step()

        return restore

    def calibrate(self, data: CalibrationData) -> None:
        """Set the null miss rate from the calibrator's α and calibration size (or blocks).

        Too few calibration rows for a finite threshold (every set full: nothing can be missed)
        leave nothing to test; the detector then stays silent rather than refusing the monitor.
        """
        cal = data.calibrators[self.calibrator]
        alpha = float(cal.alpha)
        n_cal = int(getattr(cal, "n_calibration_", None) or data.labels.shape[0])
        testable = has_finite_threshold(alpha, n_cal)
        self._init_units()
        classes = data.classes or []
        if data.blocks is not None and data.covered is not None and testable:
            self.test_ = None
            self.blocks_ = BlockMissTest(self.calibrator, timeout=self.block_timeout)
            self.blocks_.calibrate(
                alpha=alpha, misses=~data.covered[self.calibrator], labels=data.labels, keys=data.blocks,
                classes=classes,
            )  # fmt: skip
            return
        self.test_ = CoverageDrop(alpha=alpha, n_calibration=n_cal, **self.options) if testable else None
        if self.test_ is not None:
            self.fallback_ = BatchFallback(self.calibrator)
            self.fallback_.calibrate(alpha, [n_cal], classes)
            self.trail_ = EvidenceTrail([self.test_.null_rate])

    def labelled(
        self,
        probs: FloatArray,
        labels: IntArray,
        covered: dict[str, npt.NDArray[np.bool_]],
        where: tuple[Any, Any] | None = None,
        now: int = 0,
    ) -> MonitorResult | None:
        """Feed whether each newly labelled row was covered (``where``: each row's batch and row)."""
        hits = covered[self.calibrator]
        positions = _positions(where, hits.shape[0])
        if self.blocks_ is not None:
            return self._block_look(positions, hits, labels, now)
        if self.test_ is None:
            return None
        row = self.test_.update(hits, name=self.name)
        if positions is None or self.fallback_ is None or self.trail_ is None:
            return row
        assert self.test_ is not None
        groups = np.zeros(hits.shape[0], dtype=np.intp)
        return self._decide(row, 0, groups, hits, labels, positions, now, self.test_.null_rate)


def _reworded(result: MonitorResult, evidence: str) -> MonitorResult:
    """A row coverage test's result whose explanation cites the stretch that drove it."""
    words: Callable[[], dict[str, Any]] | None = result.__dict__.get("_words")
    if words is None:  # not deferred, or its words were read already
        return result

    def reworded() -> dict[str, Any]:
        out = dict(words())
        out["explanation"] = _evidence_sentence(out["explanation"], evidence)
        return out

    return DeferredResult.later(
        name=result.name, statistic=result.statistic, threshold=result.threshold, alarm=result.alarm,
        rows_seen=result.rows_seen, alarm_rows=result.alarm_rows, words=reworded,
    )  # fmt: skip


def _evidence_sentence(explanation: str, evidence: str) -> str:
    """Replace a coverage-drop explanation's window clause ("; in this window …") by the evidence."""
    head = explanation.split("; in this window", 1)[0]
    return f"{head}; {evidence}"


class ClassCoverageDropDetector(_CoverageUnits):
    """Label-based: a coverage-drop test per true class, for calibrators that promise it per class.

    A ``mondrian="label"`` calibrator promises coverage ``≥ 1 − α`` within every class, so a
    drop in one class (say, late flights) breaks its promise even while the marginal coverage
    holds. One betting test runs per class (the test of
    :class:`~calwatch.engine.shift.monitors.CoverageDrop`, on that class's rows in arrival order,
    against that class's calibration count); with ``K`` classes each test runs at ``δ/K`` (the
    anytime default) or at threshold ``K·c``, so by the union bound the K tests together keep
    the false-alarm control of one test. The K tests advance together
    (:class:`~calwatch.engine.shift.betting.GroupedBetting`): a batch costs a few array
    operations whatever ``K``.

    A class with too few calibration rows for a finite threshold at the calibrator's α (its sets
    always hold it: its coverage cannot drop) has no test; ``untested_`` lists them.

    The units follow :class:`CoverageDropDetector`: whole blocks with ``calibrate(blocks=)``
    (one block test per class, each at ``K·c``, against a null rate from that class's
    calibration rows and their blocks); rows otherwise, and whole batches while the misses of
    complete batches cluster by batch.
    """

    needs_labels = True
    uses_positions = True

    def __init__(
        self,
        calibrator: str,
        *,
        threshold: float | None = None,
        block_timeout: int | None = DEFAULT_BLOCK_TIMEOUT,
    ) -> None:
        self.calibrator = calibrator
        self.name = f"{calibrator}: class coverage drop"
        self.threshold = threshold
        self.block_timeout = block_timeout
        self.test_: GroupedBetting | None = None
        self.alpha_ = math.nan
        self.classes_: list[str] = []
        self._init_units()

    @property
    def untested_(self) -> list[int]:
        """Classes without a test (too few calibration rows at the calibrator's α)."""
        return [] if self.test_ is None else np.flatnonzero(~self.test_.testable).tolist()

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts every class's test back as it is now."""
        undo = [self._unit_checkpoint()]
        if self.test_ is not None:
            undo.append(self.test_.checkpoint())

        def restore() -> None:
            for step in undo:
                step()

        return restore

    def calibrate(self, data: CalibrationData) -> None:
        """One test per class with enough calibration rows, against that class's calibration count."""
        cal = data.calibrators[self.calibrator]
        K = int(getattr(cal, "n_classes_", 0) or data.probs.shape[1])
        counts = np.bincount(data.labels, minlength=K)[:K]
        self.alpha_ = float(cal.alpha)
        testable = np.array([has_finite_threshold(self.alpha_, int(n)) for n in counts.tolist()], dtype=bool)
        rates = np.full(K, np.nan)
        rates[testable] = calibration_null_rates(self.alpha_, counts[testable], DEFAULT_CALIBRATION_DELTA)
        self.classes_ = data.classes if data.classes is not None else [str(c) for c in range(K)]
        self._init_units()
        if data.blocks is not None and data.covered is not None:
            self.test_ = None
            self.blocks_ = BlockMissTest(self.calibrator, by_class=True, timeout=self.block_timeout)
            self.blocks_.calibrate(
                alpha=self.alpha_, misses=~data.covered[self.calibrator], labels=data.labels,
                keys=data.blocks, classes=self.classes_,
            )  # fmt: skip
            return
        # K tests: each at δ/K (anytime, the default) or at threshold K·c, so by the union bound
        # the K together keep one test's false-alarm bound.
        if self.threshold is None:
            self.test_ = GroupedBetting(rates, false_alarm=DEFAULT_FALSE_ALARM / K)
        else:
            self.test_ = GroupedBetting(rates, threshold=self.threshold * K)
        self.fallback_ = BatchFallback(self.calibrator, by_class=True)
        self.fallback_.calibrate(
            self.alpha_,
            [int(n) if ok else 0 for n, ok in zip(counts.tolist(), testable.tolist(), strict=True)],
            self.classes_,
        )
        self.trail_ = EvidenceTrail(np.where(testable, rates, 0.5))

    def notice(self) -> dict[str, Any] | None:
        """The classes without a test, as a notice for ``Monitor.notices()`` (None if every class has one)."""
        untested = self.untested_
        if not untested:
            return _held_notice(self, "misses")
        need = smallest_testable_count(self.alpha_)
        names = [self.classes_[c] if c < len(self.classes_) else str(c) for c in untested]
        return {
            "calibrator": self.calibrator,
            "detector": self.name,
            "classes": len(untested),
            "examples": first_names(names),
            "message": (
                f"{len(untested)} classes have fewer than {need} calibration rows, too few for a "
                f"threshold at α = {self.alpha_:g}: their sets always hold them, so their coverage "
                "cannot drop, and no per-class test runs for them"
            ),
        }

    def _after_decode(self) -> None:
        """Rebuild a snapshot of the one-test-per-class layout (``tests_``) as grouped state.

        A snapshot written before block-aware label tests lacks their state (rows only, as then).
        """
        if "fallback_" not in self.__dict__:
            self._init_units()
        tests: dict[int, CoverageDrop] | None = self.__dict__.pop("tests_", None)
        if tests is None or getattr(self, "test_", None) is not None:
            return
        self.alpha_ = math.nan
        K = len(self.classes_)
        rates = np.full(K, np.nan)
        for c, test in tests.items():
            rates[c] = test.null_rate
        threshold = next(iter(tests.values())).test_.threshold if tests else DEFAULT_SR_THRESHOLD * K
        grouped = GroupedBetting(rates, threshold=threshold)
        alarms: list[tuple[int, int]] = []
        for c, test in tests.items():
            inner = test.test_
            with np.errstate(divide="ignore"):
                grouped.sr[c] = np.exp(inner._log_sr)
            grouped.alarmed[c] = inner.alarmed_
            grouped.rows[c] = inner.rows_
            grouped.events[c] = inner.events_
            grouped.log10_statistic[c] = inner.log10_statistic_
            alarms.extend((c, row) for row in inner.alarms_)
            self.alpha_ = test.alpha
        grouped.alarm_groups = np.array([c for c, _ in alarms], dtype=np.int64)
        grouped.alarm_rows = np.array([row for _, row in alarms], dtype=np.int64)
        self.test_ = grouped

    def labelled(
        self,
        probs: FloatArray,
        labels: IntArray,
        covered: dict[str, npt.NDArray[np.bool_]],
        where: tuple[Any, Any] | None = None,
        now: int = 0,
    ) -> MonitorResult | None:
        """Feed each class's newly labelled rows to its test; report the class most in doubt."""
        hits = covered[self.calibrator]
        positions = _positions(where, hits.shape[0])
        if self.blocks_ is not None:
            return self._block_look(positions, hits, labels, now)
        if self.test_ is None:
            return None
        row = self._row_look(hits, labels)
        if row is None:
            return None
        result, c = row
        if positions is None or self.fallback_ is None or self.trail_ is None:
            return result
        null_rate = float(self.test_.null_rates[c])
        return self._decide(result, c, labels, hits, labels, positions, now, null_rate)

    def _row_look(self, hits: npt.NDArray[np.bool_], labels: IntArray) -> tuple[MonitorResult, int] | None:
        """The row tests' look: the class most in doubt (an alarmed one first), and that class."""
        assert self.test_ is not None
        test = self.test_
        look = test.update(~hits, labels)
        if look.groups.size == 0:
            return None
        alarm = look.alarm_groups.size > 0
        if alarm:  # the alarmed class most in doubt
            candidates = np.flatnonzero(np.isin(look.groups, look.alarm_groups))
            pick = int(candidates[np.argmax(look.peak[candidates])])  # the first of equal peaks
        else:  # the class most in doubt
            pick = int(np.argmax(look.peak))
        c = int(look.groups[pick])
        statistic, limit = float(look.peak[pick]), test.log10_threshold(c)
        window_alarms = tuple(look.alarms_of(c)) if alarm else ()
        rows, covered_rows = int(look.rows[pick]), int(look.rows[pick] - look.events[pick])
        rule = (
            test.detector,
            float(test.null_rates[c]),
            test.threshold,
            len(test.bet_fractions),
            test.false_alarm,
        )
        name = self.classes_[c] if c < len(self.classes_) else str(c)
        alpha, calibrator = self.alpha_, self.calibrator
        n_tests, each = test.n_tests, "δ/K" if test.threshold is None else "threshold K·c"

        def words() -> dict[str, Any]:
            out = coverage_drop_words(
                guarantee=guarantee_text(*rule), rows=rows, covered=covered_rows, alpha=alpha,
                null_rate=rule[1], calibration_delta=DEFAULT_CALIBRATION_DELTA, log10_statistic=statistic,
                log10_threshold=limit,
            )  # fmt: skip
            out["threatens"] = (
                f"coverage within each class of {calibrator}'s prediction sets (class {name!r})"
            )
            out["explanation"] = f"class {name!r}: {out['explanation']}"
            out["guarantee"] = f"{out['guarantee']}; each of the {n_tests} class tests at {each}"
            return out

        result = DeferredResult.later(
            name=self.name,
            statistic=statistic,
            threshold=limit,
            alarm=alarm,
            rows_seen=int(test.rows[c]),
            alarm_rows=window_alarms,
            words=words,
        )
        return result, c
