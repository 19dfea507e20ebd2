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
import getpass
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
from calwatch.looks import LookStore

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
        """A function that puts the martingale back as it is now."""
        return _nothing_to_restore if self.martingale_ is None else self.martingale_.checkpoint()

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
        self, scores: FloatArray, what: str, *, unit: str = "rows", null: str = ROW_NULL
    ) -> MonitorResult:
        assert self.martingale_ is not None  # calibrate() runs before any look
        m = self.martingale_
        before = len(m.alarm_indices_)
        step = m.step(scores)
        statistic_name = self.statistic
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

        def words() -> dict[str, Any]:
            p_mean = float(p_values.mean()) if p_values.size else math.nan
            return {
                "guarantee": _martingale_guarantee(*rule, unit=unit, null=null),
                "threatens": threatens,
                "explanation": (
                    f"{what} no longer look {exchangeable}: the test martingale "
                    f"reached 10^{statistic:.1f} (alarm at 10^{limit:.1f}); "
                    f"mean conformal p-value of the window {p_mean:.2f} (0.5 when nothing changed)"
                ),
                "action": action,
                "estimate": p_mean,
                "interval": (math.nan, math.nan),
            }

        return DeferredResult.later(
            name=self.name,
            statistic=statistic,
            threshold=limit,
            alarm=bool(new_alarms),
            rows_seen=m.n_seen_,
            alarm_rows=new_alarms,
            words=words,
        )


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


class LabelMartingale(_MartingaleDetector):
    """Label-based: a conformal test martingale on a calibrator's conformity scores ``s(x, y)``.

    Fed with newly labelled rows in arrival order. Needs a calibrator with
    ``label_scores(P, y)`` (``SplitConformalClassifier``).
    """

    needs_labels = True
    action = "recalibrate on recent labelled data; if the alarm keeps recurring, retrain the model"

    def __init__(self, calibrator: str, **options: Any) -> None:
        super().__init__(**options)
        self.calibrator = calibrator
        self.name = f"{calibrator}: conformity martingale"
        self.threatens = f"the coverage of {calibrator}'s prediction sets"
        self._scorer: Any = None

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the martingale and its scorer's random stream back as they are now."""
        restore_martingale = super().checkpoint()
        # Only a randomised scorer draws from its stream when scoring.
        rng = (
            getattr(self._scorer, "_predict_rng", None) if getattr(self._scorer, "randomized", True) else None
        )
        rng_state = None if rng is None else rng.bit_generator.state

        def restore() -> None:
            restore_martingale()
            if rng is not None:
                rng.bit_generator.state = rng_state

        return restore

    def calibrate(self, data: CalibrationData) -> None:
        """Fit on the calibrator's conformity scores of the calibration rows."""
        # A copy: scoring must not advance a randomised calibrator's own random stream.
        self._scorer = copy.deepcopy(data.calibrators[self.calibrator])
        self._sort_free: bool | None = None
        self._fit(self._conformity(data.probs, data.labels))

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

    def labelled(
        self, probs: FloatArray, labels: IntArray, covered: dict[str, npt.NDArray[np.bool_]]
    ) -> MonitorResult | None:
        """Feed the conformity scores of the newly labelled rows."""
        scores = self._conformity(probs, labels)
        return self._look(scores, f"{self.calibrator}'s conformity scores of labelled rows")


class CoverageDropDetector:
    """Label-based: a betting test of a set calibrator's miss rate (``engine.monitors.CoverageDrop``)."""

    needs_labels = True

    def __init__(self, calibrator: str, **options: Any) -> None:
        self.calibrator = calibrator
        self.name = f"{calibrator}: coverage drop"
        self.options = options
        self.test_: CoverageDrop | None = None

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts the test back as it is now."""
        return _nothing_to_restore if self.test_ is None else self.test_.test_.checkpoint()

    def calibrate(self, data: CalibrationData) -> None:
        """Set the null miss rate from the calibrator's α and calibration size.

        Too few calibration rows for a finite threshold (every set full: nothing can be missed)
        leave nothing to test; the detector then stays silent rather than refusing the monitor.
        """
        cal = data.calibrators[self.calibrator]
        n_cal = int(getattr(cal, "n_calibration_", None) or data.labels.shape[0])
        testable = has_finite_threshold(float(cal.alpha), n_cal)
        self.test_ = (
            CoverageDrop(alpha=float(cal.alpha), n_calibration=n_cal, **self.options) if testable else None
        )

    def observe(self, probs: FloatArray) -> MonitorResult | None:
        """Label-based: nothing to do until labels arrive."""
        return None

    def labelled(
        self, probs: FloatArray, labels: IntArray, covered: dict[str, npt.NDArray[np.bool_]]
    ) -> MonitorResult | None:
        """Feed whether each newly labelled row was covered."""
        if self.test_ is None:
            return None
        return self.test_.update(covered[self.calibrator], name=self.name)


class ClassCoverageDropDetector:
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
    """

    needs_labels = True

    def __init__(self, calibrator: str, *, threshold: float | None = None) -> None:
        self.calibrator = calibrator
        self.name = f"{calibrator}: class coverage drop"
        self.threshold = threshold
        self.test_: GroupedBetting | None = None
        self.alpha_ = math.nan
        self.classes_: list[str] = []

    @property
    def untested_(self) -> list[int]:
        """Classes without a test (too few calibration rows at the calibrator's α)."""
        return [] if self.test_ is None else np.flatnonzero(~self.test_.testable).tolist()

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts every class's test back as it is now."""
        return _nothing_to_restore if self.test_ is None else self.test_.checkpoint()

    def calibrate(self, data: CalibrationData) -> None:
        """One test per class with enough calibration rows, against that class's calibration count."""
        cal = data.calibrators[self.calibrator]
        K = int(getattr(cal, "n_classes_", 0) or data.probs.shape[1])
        counts = np.bincount(data.labels, minlength=K)[:K]
        self.alpha_ = float(cal.alpha)
        testable = np.array([has_finite_threshold(self.alpha_, int(n)) for n in counts.tolist()], dtype=bool)
        rates = np.full(K, np.nan)
        rates[testable] = calibration_null_rates(self.alpha_, counts[testable], DEFAULT_CALIBRATION_DELTA)
        # K tests: each at δ/K (anytime, the default) or at threshold K·c, so by the union bound
        # the K together keep one test's false-alarm bound.
        if self.threshold is None:
            self.test_ = GroupedBetting(rates, false_alarm=DEFAULT_FALSE_ALARM / K)
        else:
            self.test_ = GroupedBetting(rates, threshold=self.threshold * K)
        self.classes_ = data.classes if data.classes is not None else [str(c) for c in range(K)]

    def notice(self) -> dict[str, Any] | None:
        """The classes without a test, as a notice for ``Monitor.notices()`` (None if every class has one)."""
        untested = self.untested_
        if not untested:
            return None
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
        """Rebuild a snapshot of the one-test-per-class layout (``tests_``) as grouped state."""
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
        self, probs: FloatArray, labels: IntArray, covered: dict[str, npt.NDArray[np.bool_]]
    ) -> MonitorResult | None:
        """Feed each class's newly labelled rows to its test; report the class most in doubt."""
        if self.test_ is None:
            return None
        hits = covered[self.calibrator]
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

        return DeferredResult.later(
            name=self.name,
            statistic=statistic,
            threshold=limit,
            alarm=alarm,
            rows_seen=int(test.rows[c]),
            alarm_rows=window_alarms,
            words=words,
        )


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
        return any(getattr(d, "uses_blocks", False) for d in self.detectors)

    def check_blocks(self, blocks: list[str]) -> None:
        """Raise ``ValueError`` (changing nothing) if a block detector would refuse these keys."""
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
    ) -> None:
        """Feed newly labelled rows (arrival order) to the label-based detectors.

        ``batch`` is the latest batch at the time: their looks are charted there.
        """
        if labels.shape[0] == 0:
            return
        for detector in self.detectors:
            if detector.needs_labels:
                self._feeding(detector)
                self._record(detector, detector.labelled(probs, labels, covered), batch, rows)

    def acknowledge(self, episode: int, note: str = "", by: str | None = None) -> Acknowledgement:
        """Acknowledge a warning; the note, who and when are kept in the log."""
        if not 0 <= episode < len(self.tracker.warnings_):
            msg = f"episode must be one of 0..{len(self.tracker.warnings_) - 1}; got {episode!r}"
            raise ValueError(msg)
        who = by if by is not None else _current_user()
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


def _current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name in this environment
        return "unknown"
