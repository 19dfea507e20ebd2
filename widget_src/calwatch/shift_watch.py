"""The monitor's shift layer: detectors fed by the stream, and the warning log (SHIFT.md).

Detectors look at each batch as it is observed (label-free) or at labels as they arrive
(label-based), and report a :class:`~calwatch.engine.shift.monitors.MonitorResult` per look. An
:class:`~calwatch.engine.shift.monitors.EpisodeTracker` turns alarms into one warning per episode;
warnings can be acknowledged, with a note, and the acknowledgement is kept in the log.

Default detectors (``Monitor(shift="default")``):

- a label-free conformal test martingale on the model's confidence ``1 − max p`` (CUSUM,
  restarted after each alarm, against the anytime threshold of
  :mod:`calwatch.engine.shift.betting`: ``P(any false alarm over the whole stream) ≤ 0.01``,
  however long it runs);
- when the model gives embeddings, the same kind of martingale on each row's distance to the
  calibration embeddings (:class:`ReferenceDistanceMartingale`);
- per set calibrator with ``label_scores``: a conformal test martingale on its conformity
  scores ``s(x, y)`` as labels arrive, in arrival order (valid if the order in which labels
  arrive does not depend on their values);
- per set calibrator with ``alpha``: a coverage-drop betting test on the labelled rows;
- per ``mondrian="label"`` calibrator: the same test within each true class
  (:class:`ClassCoverageDropDetector`), since such a calibrator promises per-class coverage.

Scores enter the martingales on a fixed grid (``resolution=1e-4``), which bounds their memory
and leaves every bound exact (see :class:`~calwatch.engine.shift.detectors.ConformalTestMartingale`).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.engine.conformal.scores import top_probability
from calwatch.engine.shift.betting import (
    DEFAULT_FALSE_ALARM,
    DEFAULT_SR_THRESHOLD,
    GroupedBetting,
    calibration_null_rates,
    guarantee_text,
    has_finite_threshold,
)
from calwatch.engine.shift.block_labels import DEFAULT_BLOCK_TIMEOUT, MIN_DISPERSION_BATCHES, RunsReading
from calwatch.engine.shift.blocks import (
    BlockAccumulator,
    calibration_blocks,
    grid_mean,
    ks_distance,
    split_blocks,
)
from calwatch.engine.shift.detectors import ConformalTestMartingale
from calwatch.engine.shift.monitors import (
    DEFAULT_CALIBRATION_DELTA,
    CoverageDrop,
    DeferredResult,
    EpisodeTracker,
    MonitorResult,
    ShiftWarning,
    coverage_drop_words,
)
from calwatch.label_blocks import (
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
from calwatch.looks import LookStore
from calwatch.who import default_author

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


class ConfidenceMartingale(_MartingaleDetector):
    """Label-free: a conformal test martingale on the model's confidence score ``1 − max p``.

    Parameters
    ----------
    statistic : {"cusum", "shiryaev-roberts", "ville"}
        Which statistic alarms (CUSUM by default: repeated detection with a bounded
        false-alarm rate; Ville: the "ever since calibration" flag).
    threshold : float
        Alarm threshold ``c``.
    jump, resolution, seed
        Passed to :class:`~calwatch.engine.shift.detectors.ConformalTestMartingale`.
    """

    needs_labels = False
    name = "confidence martingale"
    threatens = "every guarantee shown (they assume the stream is exchangeable with calibration)"
    action = "collect labels for recent rows to check coverage; recalibrate if it has dropped"

    def calibrate(self, data: CalibrationData) -> None:
        """Fit on the calibration rows' confidence scores."""
        self._fit(1.0 - top_probability(data.probs))

    def observe(self, probs: FloatArray) -> MonitorResult | None:
        """Feed a batch's confidence scores."""
        return self._look(1.0 - top_probability(probs), "the model's confidence scores")

    def labelled(
        self, probs: FloatArray, labels: IntArray, covered: dict[str, npt.NDArray[np.bool_]]
    ) -> MonitorResult | None:
        """Label-free: labels are not used."""
        return None


class _NearestReference:
    """A kNN reference of calibration embeddings and the map of distances onto ``[0, 1)``.

    Distances enter as ``d / (d + m)`` (``m``: the median distance of the scored calibration
    rows), a strictly increasing map that leaves every conformal rank as it was and puts the
    scores on the martingales' bounded grid.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.index_: Any = None
        self.scale_ = 1.0

    def _index(
        self, reference: npt.NDArray[np.float32], scored: npt.NDArray[np.float32], seed: int
    ) -> FloatArray:
        """Index ``reference`` exactly (faiss); the mapped distances of the ``scored`` rows to it."""
        from calwatch.engine.knn import KNNIndex

        self.index_ = KNNIndex(kind="flat", seed=seed).fit(reference)
        distances = self.index_.search(scored, 1)[0][:, 0]
        median = float(np.median(distances))
        self.scale_ = median if median > 0 else 1.0
        return self._score(distances)

    def _score(self, distances: FloatArray) -> FloatArray:
        return np.asarray(distances / (distances + self.scale_), dtype=np.float64)

    def _distance_scores(self, embeddings: npt.NDArray[np.float32]) -> FloatArray:
        """Each row's mapped distance to its nearest reference row."""
        return self._score(self.index_.search(embeddings, 1)[0][:, 0])


class ReferenceDistanceMartingale(_NearestReference, _MartingaleDetector):
    """Label-free: a conformal test martingale on each row's distance to the calibration embeddings.

    The calibration rows are split in two (seeded): one half is the reference, indexed exactly
    (faiss); the other half's distances to their nearest reference row are the calibration
    scores, and each streamed row's distance to its nearest reference row is its score. Under
    exchangeability the two kinds of distances are exchangeable, so the martingale's
    false-alarm bound holds. Distances enter as ``d / (d + m)`` (``m``: the median calibration
    distance), a strictly increasing map onto ``[0, 1)`` that leaves every conformal rank as it
    was and lets the scores use the martingale's bounded grid. Added by ``shift="default"``
    when the calibration outputs have embeddings (a torch model with ``embedding_layer``, or
    ``embeddings=``): it sees inputs moving into regions of the embedding space the model was
    not calibrated on, before any label arrives.
    """

    needs_labels = False
    needs_embeddings = True
    name = "reference distance martingale"
    threatens = "every guarantee shown: new rows lie farther from the calibration data than it does itself"
    action = "inspect the rows far from the reference (new kinds of inputs?); recalibrate on recent data"

    def calibrate(self, data: CalibrationData) -> None:
        """Index half of the calibration embeddings; score the other half against it."""
        if data.embeddings is None:
            msg = "the reference distance martingale needs calibration embeddings: pass embeddings="
            raise ValueError(msg)
        n = data.embeddings.shape[0]
        if n < 4:
            msg = f"the reference distance martingale needs at least 4 calibration rows; got {n}"
            raise ValueError(msg)
        order = np.random.default_rng([self.seed, 7]).permutation(n)
        half = n // 2
        self._fit(self._index(data.embeddings[order[:half]], data.embeddings[order[half:]], self.seed))

    def observe(
        self, probs: FloatArray, embeddings: npt.NDArray[np.float32] | None = None
    ) -> MonitorResult | None:
        """Feed a batch's distances to the reference (no look when the batch has no embeddings)."""
        if embeddings is None:
            return None
        return self._look(
            self._distance_scores(embeddings), "distances of new rows to the calibration embeddings"
        )

    def labelled(
        self, probs: FloatArray, labels: IntArray, covered: dict[str, npt.NDArray[np.bool_]]
    ) -> MonitorResult | None:
        """Label-free: labels are not used."""
        return None


#: Calibration blocks a block martingale needs: half build its reference, half are scored.
MIN_CALIBRATION_BLOCKS = 4
#: The null hypothesis of the block martingales, as the guarantee states it.
BLOCK_NULL = (
    "blocks (each whole, its rows in any order and however correlated) exchangeable with the "
    "calibration blocks"
)


class _BlockMartingale(_MartingaleDetector):
    """Shared part of the block martingales: one conformal p-value per complete block.

    A subclass gives the per-row score in ``[0, 1]`` (:meth:`_row_scores`), the statistic of a
    block's grid counts (:meth:`_statistic`) and the calibration blocks' statistics
    (:meth:`_calibration_statistics`). The statistic is one fixed function for calibration and
    stream blocks alike, so under the block null of :mod:`calwatch.engine.shift.blocks` the
    p-values are independent and uniform and every bound holds with "rows" read as "blocks".

    The alarm is Ville's by default (``P(any false alarm over the whole stream) ≤ 1/c``, c =
    100): a stream has far fewer blocks than rows, and the anytime CUSUM threshold, sized for
    long row streams, would need about twice as many blocks to alarm.
    """

    needs_labels = False
    uses_blocks = True
    what = ""

    def __init__(self, **options: Any) -> None:
        options.setdefault("resolution", None)  # block statistics are continuous: exact bag
        options.setdefault("statistic", "ville")
        super().__init__(**options)
        self.blocks_ = BlockAccumulator()
        self.calibration_blocks_ = 0

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the martingale and the open block back as they are now."""
        restore_martingale = super().checkpoint()
        restore_blocks = self.blocks_.checkpoint()

        def restore() -> None:
            restore_martingale()
            restore_blocks()

        return restore

    def _row_scores(self, probs: FloatArray, embeddings: npt.NDArray[np.float32] | None) -> FloatArray | None:
        raise NotImplementedError

    def _statistic(self, counts: npt.NDArray[np.int64]) -> float:
        raise NotImplementedError

    def _calibration_statistics(self, data: CalibrationData, keys: list[str]) -> FloatArray:
        raise NotImplementedError

    def calibrate(self, data: CalibrationData) -> None:
        """Fit on the calibration blocks (every distinct key of ``data.blocks`` is one block)."""
        if data.blocks is None:
            msg = f"the {self.name} needs the calibration rows' block keys: pass blocks= to calibrate()"
            raise ValueError(msg)
        n_blocks = len(set(data.blocks))
        if n_blocks < MIN_CALIBRATION_BLOCKS:
            msg = (
                f"blocks: the {self.name} needs at least {MIN_CALIBRATION_BLOCKS} calibration blocks "
                f"(half build its reference, half are scored against it); blocks= holds {n_blocks}"
            )
            raise ValueError(msg)
        statistics = self._calibration_statistics(data, data.blocks)
        self.calibration_blocks_ = int(statistics.shape[0])
        self.blocks_ = BlockAccumulator()
        self._fit(statistics)

    def check_blocks(self, keys: list[str]) -> None:
        """Raise ``ValueError`` (changing nothing) if these stream keys would reopen a complete block."""
        self.blocks_.check(keys)

    def observe(
        self,
        probs: FloatArray,
        embeddings: npt.NDArray[np.float32] | None = None,
        blocks: list[str] | None = None,
    ) -> MonitorResult | None:
        """Add a batch's rows to their blocks; a look when blocks are complete (None otherwise)."""
        if blocks is None:
            msg = f"the {self.name} needs each row's block key: pass blocks= to observe()"
            raise ValueError(msg)
        scores = self._row_scores(probs, embeddings)
        if scores is None:
            return None
        self.blocks_.check(blocks)
        _, counts = self.blocks_.feed(scores, blocks)
        if not counts:
            return None
        statistics = np.array([self._statistic(c) for c in counts], dtype=np.float64)
        return self._look(statistics, self.what, unit="blocks", null=BLOCK_NULL)

    def labelled(
        self, probs: FloatArray, labels: IntArray, covered: dict[str, npt.NDArray[np.bool_]]
    ) -> MonitorResult | None:
        """Label-free: labels are not used."""
        return None


class BlockConfidenceMartingale(_BlockMartingale):
    """Label-free, for seasonal streams: the confidence martingale on whole blocks (e.g. days).

    The calibration blocks are split in two (seeded): one half pools its confidence scores
    ``1 − max p`` into a reference distribution; each block of the other half, and each
    complete stream block, is scored by the Kolmogorov–Smirnov distance of its scores to the
    reference (:func:`~calwatch.engine.shift.blocks.ks_distance`), and those distances feed a
    fully online conformal test martingale. Its promise holds under the block null
    (:mod:`calwatch.engine.shift.blocks`), which correlated rows within a day do not break.
    Added by ``shift="default"`` in place of :class:`ConfidenceMartingale` when ``calibrate()``
    is given ``blocks=``.

    Parameters
    ----------
    **options
        As :class:`ConfidenceMartingale` (``statistic``, ``threshold``, ``false_alarm``,
        ``jump``, ``seed``); the statistic defaults to Ville's and ``resolution`` to None.
    """

    name = "confidence martingale (blocks)"
    threatens = "every guarantee shown (they assume the stream's blocks are exchangeable with calibration's)"
    action = "collect labels for the latest blocks to check coverage; recalibrate if it has dropped"
    what = "the blocks' confidence distributions"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.reference_cdf_: FloatArray = np.zeros(0)

    def _row_scores(self, probs: FloatArray, embeddings: npt.NDArray[np.float32] | None) -> FloatArray:
        return np.asarray(1.0 - top_probability(probs), dtype=np.float64)

    def _statistic(self, counts: npt.NDArray[np.int64]) -> float:
        return ks_distance(counts, self.reference_cdf_)

    def _calibration_statistics(self, data: CalibrationData, keys: list[str]) -> FloatArray:
        _, counts = calibration_blocks(self._row_scores(data.probs, None), keys)
        reference, scored = split_blocks(counts.shape[0], self.seed)
        pooled = counts[reference].sum(axis=0)
        self.reference_cdf_ = np.cumsum(pooled) / pooled.sum()
        return np.array([self._statistic(counts[i]) for i in scored], dtype=np.float64)


class BlockDistanceMartingale(_NearestReference, _BlockMartingale):
    """Label-free, for seasonal streams: the reference distance martingale on whole blocks.

    The calibration *blocks* are split in two (seeded): the rows of one half are the
    reference, indexed exactly (faiss); each block of the other half, and each complete stream
    block, is scored by its rows' mean distance to their nearest reference row (mapped by
    ``d / (d + m)`` onto ``[0, 1)`` as in :class:`ReferenceDistanceMartingale`, then gridded).
    Added by ``shift="default"`` in place of :class:`ReferenceDistanceMartingale` when
    ``calibrate()`` is given ``blocks=`` and the model gives embeddings.
    """

    needs_embeddings = True
    name = "reference distance martingale (blocks)"
    threatens = (
        "every guarantee shown: new blocks lie farther from the calibration data than its own blocks do"
    )
    action = "inspect the latest blocks' rows far from the reference; recalibrate on recent data"
    what = "the blocks' mean distances to the calibration embeddings"

    def _row_scores(self, probs: FloatArray, embeddings: npt.NDArray[np.float32] | None) -> FloatArray | None:
        return None if embeddings is None else self._distance_scores(embeddings)

    def _statistic(self, counts: npt.NDArray[np.int64]) -> float:
        return grid_mean(counts)

    def _calibration_statistics(self, data: CalibrationData, keys: list[str]) -> FloatArray:
        if data.embeddings is None:
            msg = f"the {self.name} needs calibration embeddings: pass embeddings="
            raise ValueError(msg)
        names = sorted(set(keys))
        reference_blocks, _ = split_blocks(len(names), self.seed)
        reference = {names[i] for i in reference_blocks}
        in_reference = np.fromiter((k in reference for k in keys), dtype=np.bool_, count=len(keys))
        held_out = np.flatnonzero(~in_reference)
        scores = self._index(data.embeddings[in_reference], data.embeddings[held_out], self.seed)
        _, counts = calibration_blocks(scores, [keys[int(i)] for i in held_out])
        return np.array([self._statistic(c) for c in counts], dtype=np.float64)


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
    (:class:`~calwatch.label_blocks.BlockConformityTest`: a Kolmogorov–Smirnov distance of each
    complete block's scores to a reference half of the calibration blocks, Ville's rule). Without
    block keys the row martingale runs, and its labelled rows are read for clustering
    (:class:`~calwatch.label_blocks.ChunkDispersion`, on a fixed map of the scores): while they
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

    - with ``calibrate(blocks=)``, whole blocks (:class:`~calwatch.label_blocks.BlockMissTest`:
      Ville's betting test on each complete block's miss rate, against a null rate computed
      from the calibration blocks);
    - without block keys, rows (Shiryaev-Roberts on each labelled row's miss, anytime threshold)
      while the misses of complete batches do not cluster by batch;
    - while they do (:class:`~calwatch.label_blocks.BatchFallback`: batch-dispersion F test at
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

    def observe(self, probs: FloatArray) -> MonitorResult | None:
        """Label-based: nothing to do until labels arrive."""
        return None

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

    def observe(self, probs: FloatArray) -> MonitorResult | None:
        """Label-based: nothing to do until labels arrive."""
        return None

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


@contextlib.contextmanager
def detectors_kept_on_failure(watch: ShiftWatch | None) -> Iterator[None]:
    """Run the block; should it raise, put the detectors back as they were.

    :meth:`ShiftWatch.kept_on_failure` (nothing to do without detectors).
    """
    if watch is None:
        yield
        return
    with watch.kept_on_failure():
        yield


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


def default_detectors(
    calibrators: dict[str, Any], *, embeddings: bool = False, blocks: bool = False
) -> list[Detector]:
    """The detectors ``Monitor(shift="default")`` runs for these calibrators.

    ``embeddings``: whether the model gives embeddings (adds the reference distance martingale).
    ``blocks``: whether ``calibrate()`` was given block keys; the label-free martingales then
    test whole blocks (:class:`BlockConfidenceMartingale`, :class:`BlockDistanceMartingale`),
    for streams whose rows are exchangeable only block by block (days, hours).
    """
    detectors: list[Detector] = [BlockConfidenceMartingale() if blocks else ConfidenceMartingale()]
    if embeddings:
        detectors.append(BlockDistanceMartingale() if blocks else ReferenceDistanceMartingale())
    for key, cal in calibrators.items():
        if getattr(cal, "kind", None) == "risk":
            continue
        if hasattr(cal, "label_scores"):
            detectors.append(LabelMartingale(key))
        if getattr(cal, "alpha", None) is not None:
            detectors.append(CoverageDropDetector(key))
        if getattr(cal, "mondrian", None) == "label":
            detectors.append(ClassCoverageDropDetector(key))
    return detectors


@dataclass
class Acknowledgement:
    """Who acknowledged a warning, when, and what they noted."""

    by: str
    at: str
    note: str


class _Changes:
    """What a :meth:`ShiftWatch.kept_on_failure` block would undo: checkpoints and looks written."""

    __slots__ = ("looks", "restores")

    def __init__(self) -> None:
        self.restores: dict[int, Callable[[], None]] = {}  # id(detector) -> its checkpoint
        self.looks: list[tuple[tuple[str, int], dict[str, Any] | None]] = []  # (key, what it held)

    def adopt(self, inner: _Changes) -> None:
        """Take over what a nested block that succeeded would undo (this block's checkpoints are older)."""
        for key, restore in inner.restores.items():
            self.restores.setdefault(key, restore)
        self.looks.extend(inner.looks)


@dataclass
class ShiftWatch:
    """The monitor's detectors, their per-batch statistics and the warning log."""

    detectors: list[Detector]
    patience: int = 3
    tracker: EpisodeTracker = field(init=False)
    acknowledgements: dict[int, Acknowledgement] = field(default_factory=dict)
    looks: LookStore = field(default_factory=LookStore)  # (detector, batch) -> look, as columns

    def __post_init__(self) -> None:
        names = [d.name for d in self.detectors]
        if len(set(names)) != len(names):
            msg = f"shift detectors must have distinct names; got {names}"
            raise ValueError(msg)
        self.tracker = EpisodeTracker(patience=self.patience)

    def _after_decode(self) -> None:
        """A snapshot written before :class:`~calwatch.looks.LookStore` kept the looks as a dict."""
        looks = self.__dict__.get("looks")
        if isinstance(looks, dict):
            self.looks = LookStore(looks)

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts every detector, the looks and the warning episodes back as they are now.

        The monitor takes one before it feeds a batch or labels to the detectors and calls it if
        anything raises, so a failed ``observe`` or ``label`` leaves the detectors as they were
        (each detector's own checkpoint copies only what its update changes: a few arrays of
        the size of its state, never the data it has seen).
        """
        restores = [detector.checkpoint() for detector in self.detectors]
        looks = self.looks.copy()
        tracker = self.tracker
        warnings = list(tracker._warnings)
        episodes = {name: list(state) for name, state in tracker._open.items()}

        def restore() -> None:
            for undo in restores:
                undo()
            self.looks = looks.copy()
            tracker._warnings = list(warnings)
            tracker._open = {name: list(state) for name, state in episodes.items()}

        return restore

    @contextlib.contextmanager
    def kept_on_failure(self) -> Iterator[None]:
        """Run the block; should it raise, put every detector, the looks and the episodes back.

        :meth:`checkpoint` for one block, paying only for what the block changes: a detector's
        checkpoint is taken when the block first feeds it (:meth:`observe` feeds only the
        label-free ones), and the looks are not copied (a copy grows with the stream): the block
        keeps a journal of the looks it writes, with what each held before, and a failure undoes
        them in reverse order. The warning episodes are copied (one entry per episode). Blocks
        may nest; an inner block that succeeds hands what it would undo to the outer one.
        """
        tracker = self.tracker
        warnings = list(tracker._warnings)
        episodes = {name: list(state) for name, state in tracker._open.items()}
        outer: _Changes | None = self.__dict__.get("_changes")
        changes = self.__dict__["_changes"] = _Changes()
        try:
            yield
        except BaseException:
            for undo in changes.restores.values():
                undo()
            for key, look in reversed(changes.looks):
                if look is None:
                    del self.looks[key]
                else:
                    self.looks[key] = look
            tracker._warnings = warnings
            tracker._open = episodes
            raise
        else:
            if outer is not None:
                outer.adopt(changes)
        finally:
            if outer is None:
                del self.__dict__["_changes"]
            else:
                self.__dict__["_changes"] = outer

    def _feeding(self, detector: Detector) -> None:
        """About to feed ``detector``: inside :meth:`kept_on_failure`, take its checkpoint first (once)."""
        changes: _Changes | None = self.__dict__.get("_changes")
        if changes is not None and id(detector) not in changes.restores:
            changes.restores[id(detector)] = detector.checkpoint()

    def calibrate(self, data: CalibrationData) -> None:
        """Fit every detector (fresh state: warnings and looks of an earlier calibration stay)."""
        for detector in self.detectors:
            detector.calibrate(data)
        self.calibration_keys_ = set(data.blocks) if data.blocks is not None else set()

    def _record(
        self, detector: Detector, result: MonitorResult | None, batch: int, rows: tuple[int, int]
    ) -> None:
        if result is None:
            return
        calibrator = getattr(detector, "calibrator", None)
        key = (result.name, batch)
        previous = self.looks.get(key)
        changes: _Changes | None = self.__dict__.get("_changes")
        if changes is not None:  # inside kept_on_failure(): what the key held, to undo
            changes.looks.append((key, previous))
        self.looks[key] = {
            "batch": batch,
            "detector": result.name,
            "calibrator": calibrator,
            "log10_statistic": result.statistic if math.isfinite(result.statistic) else None,
            "log10_threshold": result.threshold,
            "alarm": result.alarm or bool(previous and previous["alarm"]),
        }
        self.tracker.observe(result, batch=batch, rows=rows)

    def observe(
        self,
        batch: int,
        rows: tuple[int, int],
        probs: FloatArray,
        embeddings: npt.NDArray[np.float32] | None = None,
        blocks: list[str] | None = None,
    ) -> None:
        """Feed a newly observed batch to the label-free detectors (``blocks``: per-row block keys)."""
        for detector in self.detectors:
            if detector.needs_labels:
                observed = getattr(detector, "observed", None)
                if observed is not None:  # label tests register the rows their labels will join
                    self._feeding(detector)
                    observed(batch, probs.shape[0], blocks)
                continue
            self._feeding(detector)
            if getattr(detector, "uses_blocks", False):
                result = detector.observe(probs, embeddings, blocks)  # type: ignore[call-arg]
            elif getattr(detector, "needs_embeddings", False):
                result = detector.observe(probs, embeddings)  # type: ignore[call-arg]
            else:
                result = detector.observe(probs)
            self._record(detector, result, batch, rows)

    @property
    def uses_blocks(self) -> bool:
        """Whether a detector tests whole blocks (then ``observe`` needs each row's block key)."""
        return any(getattr(d, "uses_blocks", False) for d in self.detectors) or bool(
            self.__dict__.get("calibration_keys_")
        )

    def check_blocks(self, blocks: list[str]) -> None:
        """Raise ``ValueError`` (changing nothing) if a block detector would refuse these keys.

        A key that named calibration rows is refused too: a block split between calibration and
        the stream would be tested against itself.
        """
        calibration_keys: set[str] = self.__dict__.get("calibration_keys_") or set()
        if calibration_keys:
            shared = calibration_keys.intersection(blocks)
            if shared:
                key = min(shared)
                msg = (
                    f"blocks: key {key!r} names calibration rows too; a block must lie wholly in the "
                    "calibration data or wholly in the stream (give stream blocks keys of their own)"
                )
                raise ValueError(msg)
        for detector in self.detectors:
            check = getattr(detector, "check_blocks", None)
            if check is not None:
                check(blocks)

    def labelled(
        self,
        batch: int,
        rows: tuple[int, int],
        probs: FloatArray,
        labels: IntArray,
        covered: dict[str, npt.NDArray[np.bool_]],
        where: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None,
    ) -> None:
        """Feed newly labelled rows (arrival order) to the label-based detectors.

        ``batch`` is the latest batch at the time: their looks are charted there. ``where``:
        each row's batch and position in it, which the block-aware label tests need to join a
        label to its block (or batch).
        """
        if labels.shape[0] == 0:
            return
        for detector in self.detectors:
            if detector.needs_labels:
                self._feeding(detector)
                if where is not None and getattr(detector, "uses_positions", False):
                    result = detector.labelled(probs, labels, covered, where=where, now=batch)  # type: ignore[call-arg]
                else:
                    result = detector.labelled(probs, labels, covered)
                self._record(detector, result, batch, rows)

    def acknowledge(self, episode: int, note: str = "", by: str | None = None) -> Acknowledgement:
        """Acknowledge a warning; the note, who and when are kept in the log."""
        if not 0 <= episode < len(self.tracker.warnings_):
            msg = f"episode must be one of 0..{len(self.tracker.warnings_) - 1}; got {episode!r}"
            raise ValueError(msg)
        who = by if by is not None else default_author()
        ack = Acknowledgement(by=who, at=datetime.now(UTC).isoformat(timespec="seconds"), note=str(note))
        self.acknowledgements[episode] = ack
        return ack

    def notices(self) -> list[dict[str, Any]]:
        """What the detectors do by rule (e.g. classes too rare to test), one dict per rule applied."""
        out = []
        for detector in self.detectors:
            notice = getattr(detector, "notice", None)
            found = notice() if callable(notice) else None
            if found is not None:
                out.append(found)
        return out

    def warning_records(self) -> list[dict[str, Any]]:
        """Every warning so far as plain dicts (oldest first), with its acknowledgement."""
        out = []
        for warning in self.tracker.warnings_:
            ack = self.acknowledgements.get(warning.episode)
            out.append(_warning_dict(warning, ack))
        return out

    def warnings(self) -> pl.DataFrame:
        """The warning log as a polars frame (one row per episode)."""
        schema: dict[str, Any] = {
            "episode": pl.Int64, "name": pl.String, "threatens": pl.String, "statistic": pl.Float64,
            "threshold": pl.Float64, "false_alarm_control": pl.String, "first_batch": pl.Int64,
            "last_batch": pl.Int64, "first_row": pl.Int64, "last_row": pl.Int64, "open": pl.Boolean,
            "explanation": pl.String, "action": pl.String, "acknowledged": pl.Boolean,
            "ack_by": pl.String, "ack_at": pl.String, "ack_note": pl.String,
        }  # fmt: skip
        return pl.DataFrame(self.warning_records(), schema=schema)

    def look_rows(self, batches: tuple[int, ...] | None = None) -> list[dict[str, Any]]:
        """The per-batch detector statistics (for the shift chart)."""
        wanted = None if batches is None else set(batches)
        return [dict(look) for (_, batch), look in self.looks.items() if wanted is None or batch in wanted]


def _warning_dict(warning: ShiftWarning, ack: Acknowledgement | None) -> dict[str, Any]:
    return {
        "episode": warning.episode,
        "name": warning.name,
        "threatens": warning.threatens,
        "statistic": warning.statistic if math.isfinite(warning.statistic) else None,
        "threshold": warning.threshold,
        "false_alarm_control": warning.false_alarm_control,
        "first_batch": warning.first_batch,
        "last_batch": warning.last_batch,
        "first_row": warning.rows[0],
        "last_row": warning.rows[1],
        "open": warning.open,
        "explanation": warning.explanation,
        "action": warning.action,
        "acknowledged": ack is not None,
        "ack_by": None if ack is None else ack.by,
        "ack_at": None if ack is None else ack.at,
        "ack_note": None if ack is None else ack.note,
    }
