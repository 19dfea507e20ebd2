"""Label-free detectors: conformal test martingales on each observed batch (SHIFT.md §2).

A martingale on the model's confidence ``1 − max p`` (CUSUM, restarted after each alarm, against
the anytime threshold of :mod:`calwatch.engine.shift.betting`: ``P(any false alarm over the whole
stream) ≤ 0.01``, however long it runs); when the model gives embeddings, the same kind of
martingale on each row's distance to the calibration embeddings; and, with ``blocks=``, both on
whole blocks of correlated rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from calwatch.engine.conformal.scores import top_probability
from calwatch.engine.shift.blocks import (
    BlockAccumulator,
    calibration_blocks,
    grid_mean,
    ks_distance,
    split_blocks,
)
from calwatch.engine.shift.monitors import (
    MonitorResult,
)
from calwatch.shift.base import CalibrationData, FloatArray, IntArray, _MartingaleDetector


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
