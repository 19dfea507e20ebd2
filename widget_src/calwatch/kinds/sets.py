"""Prediction sets: split and Mondrian conformal classifiers, PAC confidence sets (ALGORITHMS.md §1, §4).

A calibrator of this kind has ``predict_sets(P) -> (m, K) bool``. Its per-row results are the
sets (kept as packed bits); its batch statistics count rows by set size and labelled rows by
true class, with those whose set holds the label (coverage per class and overall).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from calwatch.core.invariants import (
    array_order_problems,
    count_problems,
    counts_problems,
    is_count,
    is_counts,
    number_problems,
    order_problems,
)
from calwatch.core.models import ModelOutputs
from calwatch.engine.conformal.adaptive import Adaptive, ConformalLevels
from calwatch.engine.conformal.classifier import SplitConformalClassifier
from calwatch.kinds.base import CalibratorKind, IntArray, calibrator_inputs, int_array, null_where
from calwatch.stream.records import BatchRows
from calwatch.stream.row_codec import binary_series, packed_of

BoolArray = npt.NDArray[np.bool_]
#: Set bits of each byte value: row set sizes from packed bits without unpacking them.
POPCOUNT = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).sum(axis=1).astype(np.int64)


#: Up to this many classes :func:`pack_sets` ORs columns in; past it ``np.packbits`` is faster.
_COLUMN_PACK_CLASSES = 16


def pack_sets(sets: BoolArray) -> npt.NDArray[np.uint8]:
    """``np.packbits(sets, axis=1)`` (big-endian bits, rows of ``⌈K/8⌉`` bytes), faster for few classes.

    ``np.packbits`` along a short axis works row by row: for a binary model, about 60 ns a row.
    For ``K ≤ 16`` this ORs each class's column into its byte with one shift, a handful of
    whole-column operations, 4-10× faster and equal bit for bit.

    Examples
    --------
    >>> sets = np.array([[True, False, True], [False, True, True]])
    >>> pack_sets(sets), np.packbits(sets, axis=1)
    (array([[160],
           [ 96]], dtype=uint8), array([[160],
           [ 96]], dtype=uint8))
    """
    m, K = sets.shape
    if K > _COLUMN_PACK_CLASSES or sets.dtype != np.bool_:
        return np.packbits(sets, axis=1)
    bits = sets.view(np.uint8)
    out = np.zeros(((K + 7) // 8, m), dtype=np.uint8)
    for j in range(K):
        out[j >> 3] |= bits[:, j] << np.uint8(7 - (j & 7))
    return np.ascontiguousarray(out.T)


@dataclass(frozen=True)
class SetRows:
    """Prediction sets of a batch's rows, packed 8 classes to a byte (``np.packbits`` on axis 1)."""

    packed: npt.NDArray[np.uint8]
    n_classes: int
    level: float | None = None  # the α at which the sets were taken (ACI moves it)

    @classmethod
    def from_sets(cls, sets: BoolArray, level: float | None = None) -> SetRows:
        """Pack an ``(m, K)`` boolean set matrix (bytes as ``np.packbits(sets, axis=1)``)."""
        return cls(pack_sets(sets), int(sets.shape[1]), level)

    def take(self, rows: IntArray) -> Self:
        """The sets of the given rows."""
        return type(self)(self.packed[rows], self.n_classes, self.level)

    @property
    def sets(self) -> BoolArray:
        """The ``(m, K)`` boolean set matrix."""
        return np.unpackbits(self.packed, axis=1, count=self.n_classes).astype(bool)

    def sizes(self) -> npt.NDArray[np.int64]:
        """Each row's set size."""
        sizes: npt.NDArray[np.int64] = POPCOUNT[self.packed].sum(axis=1)
        return sizes

    def contains(self, labels: IntArray) -> BoolArray:
        """Whether row ``i``'s set holds ``labels[i]``."""
        rows = np.arange(self.packed.shape[0])
        bits = self.packed[rows, labels // 8] >> (7 - labels % 8)
        return (bits & 1).astype(bool)


@dataclass
class CalibratorBatchStats:
    """Counts for one batch and one set calibrator (a monoid: :meth:`empty`, :meth:`merge`).

    ``alpha_level`` is the level the sets were taken at; pooled over rows it is their
    row-weighted mean (a merge weighs each side by its rows, ``size_counts.sum()``).

    Examples
    --------
    >>> a = CalibratorBatchStats(np.array([0, 2, 0]), np.array([2, 0]), np.array([1, 0]), 0.1)
    >>> b = CalibratorBatchStats(np.array([0, 1, 1]), np.array([0, 1]), np.array([0, 1]), 0.2)
    >>> ab = a.merge(b)
    >>> ab.size_counts.tolist(), ab.n_labelled, ab.n_covered, round(ab.alpha_level, 12)
    ([0, 3, 1], 3, 2, 0.15)
    >>> a.merge(CalibratorBatchStats.empty(2)) == a
    True
    """

    size_counts: npt.NDArray[np.int64]  # (K + 1,): rows whose set has each size
    class_labelled: npt.NDArray[np.int64]  # (K,): labelled rows by true class
    class_covered: npt.NDArray[np.int64]  # (K,): labelled rows whose set holds the label
    alpha_level: float | None = None  # the α at which the sets were taken (ACI moves it)

    #: Its columns in a snapshot's ``batches.parquet``.
    SNAPSHOT_COLUMNS: ClassVar[dict[str, Any]] = {
        "size_counts": pl.List(pl.Int64), "class_labelled": pl.List(pl.Int64),
        "class_covered": pl.List(pl.Int64), "alpha_level": pl.Float64,
    }  # fmt: skip

    @classmethod
    def empty(cls, n_classes: int) -> Self:
        """Statistics of no rows."""
        zeros = np.zeros(n_classes, dtype=np.int64)
        return cls(np.zeros(n_classes + 1, dtype=np.int64), zeros, zeros.copy(), None)

    def _merged_fields(self, other: CalibratorBatchStats) -> dict[str, Any]:
        wa = int(self.size_counts.sum()) if self.alpha_level is not None else 0
        wb = int(other.size_counts.sum()) if other.alpha_level is not None else 0
        if wa + wb:
            level: float | None = ((self.alpha_level or 0.0) * wa + (other.alpha_level or 0.0) * wb) / (
                wa + wb
            )
        else:
            level = other.alpha_level if other.alpha_level is not None else self.alpha_level
        return {
            "size_counts": self.size_counts + other.size_counts,
            "class_labelled": self.class_labelled + other.class_labelled,
            "class_covered": self.class_covered + other.class_covered,
            "alpha_level": level,
        }

    def merge(self, other: Self) -> Self:
        """Counts of the rows of both; ``alpha_level`` is their row-weighted mean."""
        return type(self)(**self._merged_fields(other))

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(_equal(getattr(self, f), getattr(other, f)) for f in self.__dataclass_fields__)

    @property
    def n_labelled(self) -> int:
        """Labelled rows."""
        return int(self.class_labelled.sum())

    @property
    def n_covered(self) -> int:
        """Labelled rows whose prediction set contains their label."""
        return int(self.class_covered.sum())

    def check(self, n_rows: int) -> list[str]:
        """Violations of these counts' invariants, for a batch of ``n_rows`` rows (empty when sound).

        ``size_counts`` (length ``K + 1``) are non-negative and sum to ``n_rows``;
        ``class_labelled`` and ``class_covered`` have length ``K``, are non-negative, and
        ``class_covered ≤ class_labelled`` per class; labelled rows are at most ``n_rows``;
        ``alpha_level`` is finite or None (ACI's level may leave (0, 1), so no range is asked).

        Parameters
        ----------
        n_rows : int
            Rows of the batch these counts describe.

        Returns
        -------
        list of str
            One readable sentence per violation, naming the field, e.g.
            ``"class_covered[2] (5) > class_labelled[2] (3)"``.

        Examples
        --------
        >>> stats = CalibratorBatchStats(np.array([0, 2, 0]), np.array([2, 0]), np.array([1, 0]), 0.1)
        >>> stats.check(2)
        []
        >>> stats.check(3)
        ['size_counts sum to 2, not n_rows (3)']
        """
        problems = count_problems("n_rows", n_rows)
        problems += counts_problems("size_counts", self.size_counts)
        K = self.size_counts.shape[0] - 1 if is_counts(self.size_counts) else None
        if K is not None and K < 1:
            problems.append(f"size_counts has length {K + 1}: a batch has at least one class")
            K = None
        problems += counts_problems("class_labelled", self.class_labelled, K)
        problems += counts_problems("class_covered", self.class_covered, K)
        problems += array_order_problems(
            "class_covered", self.class_covered, "class_labelled", self.class_labelled
        )
        if is_count(n_rows) and is_counts(self.size_counts) and int(self.size_counts.sum()) != n_rows:
            problems.append(f"size_counts sum to {int(self.size_counts.sum())}, not n_rows ({n_rows})")
        if is_counts(self.class_labelled):
            problems += order_problems([("n_labelled", int(self.class_labelled.sum())), ("n_rows", n_rows)])
        problems += number_problems("alpha_level", self.alpha_level, allow_none=True)
        return problems

    def to_row(self) -> dict[str, Any]:
        """One row of ``batches.parquet``."""
        return {
            "kind": "sets", "size_counts": self.size_counts.tolist(),
            "class_labelled": self.class_labelled.tolist(), "class_covered": self.class_covered.tolist(),
            "alpha_level": self.alpha_level,
        }  # fmt: skip

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Self:
        """Counts restored from one row of ``batches.parquet``."""
        return cls(
            size_counts=int_array(row["size_counts"]),
            class_labelled=int_array(row["class_labelled"]),
            class_covered=int_array(row["class_covered"]),
            alpha_level=row["alpha_level"],
        )


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(a, b))
    return bool(a == b)


#: Summary columns of set calibrators (coverage and its interval are derived from ``n_covered``).
SET_SUMMARY = {
    "n_covered": pl.Int64, "mean_set_size": pl.Float64, "singleton_share": pl.Float64,
    "full_share": pl.Float64, "alpha_level": pl.Float64,
}  # fmt: skip


class SetsKind(CalibratorKind[SetRows, CalibratorBatchStats]):
    """Split and Mondrian conformal classifiers, PAC confidence sets: anything with ``predict_sets``."""

    name = "sets"
    summary_kind = "sets"
    stats_type = CalibratorBatchStats
    summary_columns: ClassVar[dict[str, Any]] = SET_SUMMARY
    panels: ClassVar[tuple[str, ...]] = ("coverage", "class_coverage", "set_size", "set_shares", "set_sizes")
    has_sets = True
    rows_field = "packed_sets"

    def claims(self, calibrator: Any) -> bool:
        """Anything with ``predict_sets`` (the fallback kind)."""
        return callable(getattr(calibrator, "predict_sets", None))

    def level(self, calibrator: Any) -> float | None:
        """The level its sets are taken at now."""
        level = getattr(calibrator, "alpha", None)
        return None if level is None else float(level)

    def apply(self, key: str, calibrator: Any, outputs: ModelOutputs, categories: Any) -> SetRows:
        """Prediction sets of the batch (checked to be ``(m, K)`` booleans)."""
        inputs, kwargs = calibrator_inputs(calibrator, outputs, categories)
        matrix = np.asarray(calibrator.predict_sets(inputs, **kwargs))
        if matrix.shape != outputs.probs.shape or matrix.dtype != np.bool_:
            msg = f"calibrator {key!r} returned sets of shape {matrix.shape}, dtype {matrix.dtype}"
            raise TypeError(msg)
        return SetRows.from_sets(matrix, self.level(calibrator))

    def observed(self, results: SetRows, n_classes: int) -> CalibratorBatchStats:
        """Rows by set size; no labels yet."""
        stats = CalibratorBatchStats.empty(n_classes)
        stats.size_counts = np.bincount(results.sizes(), minlength=n_classes + 1).astype(np.int64)
        stats.alpha_level = results.level
        return stats

    def labelled(
        self, results: SetRows, probs: npt.NDArray[np.float64], labels: IntArray, sign: int = 1
    ) -> CalibratorBatchStats:
        """Labelled rows by true class, and those whose set holds the label."""
        K = results.n_classes
        stats = CalibratorBatchStats.empty(K)
        covered = results.contains(labels)
        stats.class_labelled = sign * np.bincount(labels, minlength=K).astype(np.int64)
        stats.class_covered = sign * np.bincount(labels[covered], minlength=K).astype(np.int64)
        return stats

    def covered(self, results: SetRows, labels: IntArray) -> BoolArray:
        """Whether each row's set holds its label."""
        return results.contains(labels)

    def set_sizes(self, results: SetRows) -> npt.NDArray[np.int64]:
        """Each row's set size (from the packed bits)."""
        return results.sizes()

    def keep(self, rows: BatchRows, key: str, results: SetRows) -> None:
        """The packed sets go to ``rows.packed_sets``."""
        rows.packed_sets[key] = results.packed

    def results_of(self, rows: BatchRows, key: str, calibrator: Any) -> SetRows:
        """The packed sets kept for the batch."""
        return SetRows(rows.packed_sets[key], int(rows.probs.shape[1]))

    def write_rows(self, rows: Sequence[BatchRows]) -> tuple[dict[str, pl.Series], dict[str, Any]]:
        """``set_<i>``: each row's packed set as bytes, for every calibrator with sets (Venn-ADMIT's too)."""
        keys = list(rows[0].packed_sets) if rows else []
        columns = {
            f"set_{i}": binary_series([r.packed_sets[key] for r in rows]) for i, key in enumerate(keys)
        }
        return columns, {"set_calibrators": keys}

    def read_rows(self, part: pl.DataFrame, mapping: Mapping[str, Any], rows: BatchRows) -> None:
        """The packed sets, ``⌈K/8⌉`` bytes a row."""
        n_bytes = (rows.probs.shape[1] + 7) // 8
        for i, key in enumerate(mapping["set_calibrators"]):
            rows.packed_sets[key] = packed_of(part[f"set_{i}"], n_bytes)

    def summary_row(self, stats: CalibratorBatchStats, n_rows: int) -> dict[str, Any]:
        """Covered rows, mean set size, shares of singleton and full sets, the level."""
        K = stats.class_labelled.shape[0]
        return {
            "n_covered": stats.n_covered,
            "mean_set_size": float(stats.size_counts @ np.arange(K + 1)) / n_rows,
            "singleton_share": float(stats.size_counts[1]) / n_rows,
            "full_share": float(stats.size_counts[K]) / n_rows,
            "alpha_level": stats.alpha_level,
        }

    def row_columns(
        self, key: str, results: SetRows, labels: IntArray, classes: npt.NDArray[Any]
    ) -> dict[str, Any]:
        """``set_<key>`` (list of classes), ``size_<key>``, ``covered_<key>`` (null until labelled)."""
        sets = results.sets
        has_label = labels >= 0
        covered = sets[np.arange(sets.shape[0]), np.where(has_label, labels, 0)]
        return {
            f"set_{key}": set_lists(sets, classes),
            f"size_{key}": sets.sum(axis=1),
            f"covered_{key}": null_where(pl.Series(covered.astype(bool)), ~has_label),
        }

    def levels(self, calibrator: Any) -> ConformalLevels | None:
        """The calibrator's sets at any level, when it has them (for ``what_if``)."""
        if (
            isinstance(calibrator, SplitConformalClassifier)
            and hasattr(calibrator, "_sorted_scores")
            and calibrator.mode_ != "category"
        ):
            return ConformalLevels(calibrator, calibrator._sorted_scores, allow_empty=calibrator.allow_empty)
        return None


class AdaptiveKind(SetsKind):
    """Adaptive conformal inference (``cw.Adaptive``): sets whose level moves as labels arrive.

    A row's first label moves ``α_t`` by ``γ (α − err)`` (:meth:`after_labels`); a replaced
    label moves it by ``γ (err_old − err_new)`` (:meth:`after_relabels`), ``err`` judged
    against the set the row was shown at observe time (kept with the row). So ``α_t`` follows
    the labels the dashboard shows: when the correction comes before the next observe it equals
    the level of a stream that only received the final labels. (The shift detectors, also
    sequential, keep the first label: a relabel is not a new observation for their tests, whose
    false-alarm bounds count each row once; ``Monitor.label``'s Notes.)
    """

    panels: ClassVar[tuple[str, ...]] = (*SetsKind.panels, "aci")
    learns_from_labels = True

    def claims(self, calibrator: Any) -> bool:
        """Calibrators with a moving level ``alpha_t_`` and ``update(sets, labels)``."""
        return hasattr(calibrator, "alpha_t_") and callable(getattr(calibrator, "update", None))

    def level(self, calibrator: Any) -> float | None:
        """``α_t``, the level in force."""
        return float(calibrator.alpha_t_)

    def after_labels(self, calibrator: Any, results: SetRows, labels: IntArray) -> None:
        """Move ``α_t`` with the sets the labelled rows were shown."""
        if labels.shape[0]:
            calibrator.update(results.sets, labels)

    def after_relabels(self, calibrator: Any, results: SetRows, old: IntArray, new: IntArray) -> None:
        """Move ``α_t`` by ``γ Σ (err_old − err_new)`` against the sets the rows were shown.

        A calibrator without ``correct(sets, y_old, y_new)`` (an ACI look-alike) is left as
        its first labels put it.
        """
        correct = getattr(calibrator, "correct", None)
        if old.shape[0] and callable(correct):
            correct(results.sets, old, new)

    def levels(self, calibrator: Any) -> ConformalLevels | None:
        """ACI's sets at any level."""
        levels = getattr(calibrator, "levels_", None)
        return levels if isinstance(levels, ConformalLevels) and isinstance(calibrator, Adaptive) else None


def set_lists(sets: npt.NDArray[np.bool_], classes: npt.NDArray[Any]) -> pl.Series:
    """Each row's set as the list of its classes, in class order: one list column.

    Built from the set matrix's nonzero entries and the rows' sizes as offsets (Arrow's list
    layout), not a list per row: ``rows(window=5000)`` of a K = 10 stream took seconds the
    per-row way (a polars Series made for every row), a few milliseconds this way. The values
    are the classes as ``classes.tolist()`` gives them, typed as polars types them.
    """
    _, columns = np.nonzero(sets)  # row-major: each row's classes in ascending order
    offsets = np.zeros(sets.shape[0] + 1, dtype=np.int64)
    np.cumsum(sets.sum(axis=1), out=offsets[1:])
    values = pl.Series(classes[columns].tolist()).to_arrow()
    lists = pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), values)
    out = pl.from_arrow(lists)
    assert isinstance(out, pl.Series)
    return out


__all__ = ["AdaptiveKind", "CalibratorBatchStats", "SetRows", "SetsKind"]
