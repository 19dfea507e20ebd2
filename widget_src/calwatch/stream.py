"""The monitor's stream state: per-batch statistics for the whole stream, raw rows for a window.

Statistics are counts (mergeable, O(K) per batch and calibrator); raw rows (ids, probabilities,
prediction sets as packed bits, labels) are kept only for the most recent ``window`` rows, so
memory stays flat however long the stream runs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import repeat
from typing import Any

import numpy as np
import numpy.typing as npt

from calwatch.invariants import (
    array_order_problems,
    count_problems,
    counts_problems,
    is_count,
    is_counts,
    number_problems,
    order_problems,
    relative_tolerance,
    same_rows_problems,
)

IntArray = npt.NDArray[np.intp]
NO_LABEL = -1


@dataclass
class CalibratorBatchStats:
    """Counts for one batch and one calibrator."""

    size_counts: npt.NDArray[np.int64]  # (K + 1,): rows whose set has each size
    class_labelled: npt.NDArray[np.int64]  # (K,): labelled rows by true class
    class_covered: npt.NDArray[np.int64]  # (K,): labelled rows whose set holds the label
    alpha_level: float | None = None  # the α at which the sets were taken (ACI moves it)

    @classmethod
    def from_sets(cls, sets: npt.NDArray[np.bool_], alpha_level: float | None = None) -> CalibratorBatchStats:
        """Statistics of a freshly observed batch (no labels yet)."""
        K = sets.shape[1]
        sizes = sets.sum(axis=1)
        return cls(
            size_counts=np.bincount(sizes, minlength=K + 1).astype(np.int64),
            class_labelled=np.zeros(K, dtype=np.int64),
            class_covered=np.zeros(K, dtype=np.int64),
            alpha_level=alpha_level,
        )

    @classmethod
    def merged(cls, parts: Sequence[CalibratorBatchStats], n_rows: Sequence[int]) -> CalibratorBatchStats:
        """Counts of consecutive batches pooled; ``alpha_level`` is their row-weighted mean."""
        return cls(**_pooled_sets(parts, n_rows))

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


@dataclass
class AdmitBatchStats(CalibratorBatchStats):
    """A Venn-ADMIT batch: its ADMIT sets' counts plus the admitted (selective) predictions.

    ``class_admitted`` / ``class_correct`` count labelled admitted rows by true class and those
    whose admitted prediction ``ŷ^KNN`` was right; ``pred_admitted`` / ``pred_correct`` the same
    by predicted class (what a user acting on admitted predictions sees: precision).
    """

    n_admitted: int = 0
    class_admitted: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    class_correct: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    pred_admitted: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    pred_correct: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @classmethod
    def from_admit(
        cls, sets: npt.NDArray[np.bool_], admitted: npt.NDArray[np.bool_], alpha_level: float | None
    ) -> AdmitBatchStats:
        """Statistics of a freshly observed batch (no labels yet)."""
        base = CalibratorBatchStats.from_sets(sets, alpha_level)
        K = sets.shape[1]
        zeros = [np.zeros(K, dtype=np.int64) for _ in range(4)]
        return cls(
            size_counts=base.size_counts,
            class_labelled=base.class_labelled,
            class_covered=base.class_covered,
            alpha_level=alpha_level,
            n_admitted=int(admitted.sum()),
            class_admitted=zeros[0],
            class_correct=zeros[1],
            pred_admitted=zeros[2],
            pred_correct=zeros[3],
        )

    @classmethod
    def merged(cls, parts: Sequence[CalibratorBatchStats], n_rows: Sequence[int]) -> AdmitBatchStats:
        """Counts of consecutive batches pooled (see :meth:`CalibratorBatchStats.merged`)."""
        admit = [p for p in parts if isinstance(p, AdmitBatchStats)]
        return cls(
            **_pooled_sets(parts, n_rows),
            n_admitted=sum(p.n_admitted for p in admit),
            class_admitted=_sum_arrays([p.class_admitted for p in admit]),
            class_correct=_sum_arrays([p.class_correct for p in admit]),
            pred_admitted=_sum_arrays([p.pred_admitted for p in admit]),
            pred_correct=_sum_arrays([p.pred_correct for p in admit]),
        )

    def add_labels(
        self, y_hat: IntArray, labels: IntArray, admitted: npt.NDArray[np.bool_], sign: int = 1
    ) -> None:
        """Count labelled admitted rows in (``sign=1``) or out (``sign=-1``, a relabel)."""
        K = self.class_admitted.shape[0]
        chosen, truth = y_hat[admitted], labels[admitted]
        right = chosen == truth
        self.class_admitted += sign * np.bincount(truth, minlength=K)
        self.class_correct += sign * np.bincount(truth[right], minlength=K)
        self.pred_admitted += sign * np.bincount(chosen, minlength=K)
        self.pred_correct += sign * np.bincount(chosen[right], minlength=K)

    def check(self, n_rows: int) -> list[str]:
        """Violations of these counts' invariants, for a batch of ``n_rows`` rows (empty when sound).

        Besides the set counts' (:meth:`CalibratorBatchStats.check`): ``n_admitted ≤ n_rows``;
        the four admitted arrays have length ``K`` and are non-negative; per class
        ``class_correct ≤ class_admitted ≤ class_labelled`` and ``pred_correct ≤ pred_admitted``;
        counted by true or by predicted class, the labelled admitted rows and the right ones are
        the same rows (``Σ class_admitted = Σ pred_admitted``, ``class_correct = pred_correct``);
        labelled admitted rows are at most ``n_admitted``, and unlabelled admitted rows at most
        the unlabelled rows.

        Parameters
        ----------
        n_rows : int
            Rows of the batch these counts describe.

        Returns
        -------
        list of str
            One readable sentence per violation, naming the field.
        """
        problems = super().check(n_rows)
        K = self.class_labelled.shape[0] if is_counts(self.class_labelled) else None
        problems += count_problems("n_admitted", self.n_admitted)
        problems += order_problems([("n_admitted", self.n_admitted), ("n_rows", n_rows)])
        arrays = ("class_admitted", "class_correct", "pred_admitted", "pred_correct")
        for name in arrays:
            problems += counts_problems(name, getattr(self, name), K)
        for small, big in (
            ("class_correct", "class_admitted"),
            ("class_admitted", "class_labelled"),
            ("pred_correct", "pred_admitted"),
        ):
            problems += array_order_problems(small, getattr(self, small), big, getattr(self, big))
        if not all(is_counts(getattr(self, name), K) for name in arrays):
            return problems
        labelled_admitted = int(self.class_admitted.sum())
        if labelled_admitted != int(self.pred_admitted.sum()):
            problems.append(
                f"class_admitted sum to {labelled_admitted} but pred_admitted to "
                f"{int(self.pred_admitted.sum())}: both count the labelled admitted rows"
            )
        differ = np.flatnonzero(self.class_correct != self.pred_correct)
        if differ.size:
            k = int(differ[0])
            problems.append(
                f"class_correct[{k}] ({int(self.class_correct[k])}) differs from pred_correct[{k}] "
                f"({int(self.pred_correct[k])}): a right prediction's true and predicted class agree"
            )
        problems += order_problems(
            [("labelled admitted rows", labelled_admitted), ("n_admitted", self.n_admitted)]
        )
        if is_count(self.n_admitted) and is_count(n_rows):
            problems += order_problems(
                [
                    ("unlabelled admitted rows", self.n_admitted - labelled_admitted),
                    ("unlabelled rows", n_rows - int(self.class_labelled.sum())),
                ]
            )
        return problems


@dataclass
class RiskBatchStats:
    """Label-free risk estimate of one batch, and the observed misses once labels arrive."""

    top_k: int  # the model output is its top-k classes
    n_rows: int
    risk_sum: float  # Σ estimated P(label ∉ top-k) over all rows of the batch
    n_labelled: int = 0
    n_missed: int = 0  # labelled rows whose label is not in the top-k classes
    risk_sum_labelled: float = 0.0  # the same estimate summed over the labelled rows only

    @classmethod
    def merged(cls, parts: Sequence[RiskBatchStats], n_rows: Sequence[int]) -> RiskBatchStats:
        """Sums over consecutive batches (``n_rows`` is unused: each part counts its own rows)."""
        return cls(
            top_k=parts[-1].top_k,
            n_rows=sum(p.n_rows for p in parts),
            risk_sum=sum(p.risk_sum for p in parts),
            n_labelled=sum(p.n_labelled for p in parts),
            n_missed=sum(p.n_missed for p in parts),
            risk_sum_labelled=sum(p.risk_sum_labelled for p in parts),
        )

    def add(self, missed: npt.NDArray[np.bool_], risks: npt.NDArray[np.float64], sign: int = 1) -> None:
        """Count labelled rows in (``sign=1``) or out (``sign=-1``, a relabel)."""
        self.n_labelled += sign * int(missed.shape[0])
        self.n_missed += sign * int(missed.sum())
        self.risk_sum_labelled += sign * float(risks.sum())

    def check(self, n_rows: int) -> list[str]:
        """Violations of these counts' invariants, for a batch of ``n_rows`` rows (empty when sound).

        ``top_k ≥ 1``; ``self.n_rows`` is the batch's ``n_rows``; ``n_missed ≤ n_labelled ≤
        n_rows``, all non-negative; the per-row risks are probabilities, so ``risk_sum`` is
        finite and within ``[0, n_rows]``, ``risk_sum_labelled`` within ``[0, n_labelled]`` and
        at most ``risk_sum`` (up to float rounding).

        Parameters
        ----------
        n_rows : int
            Rows of the batch these counts describe.

        Returns
        -------
        list of str
            One readable sentence per violation, naming the field, e.g.
            ``"n_missed (12) > n_labelled (10)"``.

        Examples
        --------
        >>> RiskBatchStats(top_k=1, n_rows=400, risk_sum=30.0, n_labelled=10, n_missed=12).check(400)
        ['n_missed (12) > n_labelled (10)']
        """
        problems = count_problems("n_rows", n_rows)
        if not isinstance(self.top_k, (int, np.integer)) or isinstance(self.top_k, bool) or self.top_k < 1:
            problems.append(f"top_k ({self.top_k!r}) is not a positive integer")
        problems += same_rows_problems(self.n_rows, n_rows)
        for name in ("n_labelled", "n_missed"):
            problems += count_problems(name, getattr(self, name))
        problems += order_problems(
            [("n_missed", self.n_missed), ("n_labelled", self.n_labelled), ("n_rows", n_rows)]
        )
        tolerance = relative_tolerance(n_rows)
        high = float(n_rows) if is_count(n_rows) else None
        problems += number_problems("risk_sum", self.risk_sum, low=0.0, high=high, tolerance=tolerance)
        labelled = float(self.n_labelled) if is_count(self.n_labelled) else None
        problems += number_problems(
            "risk_sum_labelled", self.risk_sum_labelled, low=0.0, high=labelled, tolerance=tolerance
        )
        if not problems and self.risk_sum_labelled > self.risk_sum + tolerance:
            problems.append(f"risk_sum_labelled ({self.risk_sum_labelled!r}) > risk_sum ({self.risk_sum!r})")
        return problems


@dataclass
class SelectiveBatchStats:
    """A selective calibrator's batch: rows kept (at the threshold in force) and their accuracy.

    ``n_kept`` counts rows kept; once labelled, ``n_kept_labelled`` / ``n_kept_correct`` and
    ``n_all_correct`` give the top-label accuracy of kept rows and of all labelled rows.
    """

    n_rows: int
    n_kept: int
    threshold: float
    n_labelled: int = 0
    n_kept_labelled: int = 0
    n_kept_correct: int = 0
    n_all_correct: int = 0

    @classmethod
    def merged(cls, parts: Sequence[SelectiveBatchStats], n_rows: Sequence[int]) -> SelectiveBatchStats:
        """Sums over consecutive batches; the threshold is the last batch's (the one in force)."""
        return cls(
            n_rows=sum(p.n_rows for p in parts),
            n_kept=sum(p.n_kept for p in parts),
            threshold=parts[-1].threshold,
            n_labelled=sum(p.n_labelled for p in parts),
            n_kept_labelled=sum(p.n_kept_labelled for p in parts),
            n_kept_correct=sum(p.n_kept_correct for p in parts),
            n_all_correct=sum(p.n_all_correct for p in parts),
        )

    def add(self, kept: npt.NDArray[np.bool_], correct: npt.NDArray[np.bool_], sign: int = 1) -> None:
        """Count labelled rows in (``sign=1``) or out (``sign=-1``, a relabel)."""
        self.n_labelled += sign * int(kept.shape[0])
        self.n_kept_labelled += sign * int(kept.sum())
        self.n_kept_correct += sign * int((kept & correct).sum())
        self.n_all_correct += sign * int(correct.sum())

    def check(self, n_rows: int) -> list[str]:
        """Violations of these counts' invariants, for a batch of ``n_rows`` rows (empty when sound).

        ``self.n_rows`` is the batch's ``n_rows``; all counts are non-negative and nested:
        ``n_kept_correct ≤ n_kept_labelled ≤ n_kept ≤ n_rows``, ``n_kept_labelled ≤ n_labelled
        ≤ n_rows``, ``n_kept_correct ≤ n_all_correct ≤ n_labelled``, and unlabelled kept rows
        are at most the unlabelled rows; ``threshold`` is a number, ``±inf`` allowed, not NaN.

        Parameters
        ----------
        n_rows : int
            Rows of the batch these counts describe.

        Returns
        -------
        list of str
            One readable sentence per violation, naming the field.

        Examples
        --------
        >>> SelectiveBatchStats(n_rows=10, n_kept=4, threshold=0.5, n_labelled=6, n_kept_labelled=5).check(10)
        ['n_kept_labelled (5) > n_kept (4)']
        """
        problems = count_problems("n_rows", n_rows)
        problems += same_rows_problems(self.n_rows, n_rows)
        for name in ("n_kept", "n_labelled", "n_kept_labelled", "n_kept_correct", "n_all_correct"):
            problems += count_problems(name, getattr(self, name))
        kept, labelled = ("n_kept", self.n_kept), ("n_labelled", self.n_labelled)
        kept_labelled = ("n_kept_labelled", self.n_kept_labelled)
        problems += order_problems(
            [("n_kept_correct", self.n_kept_correct), kept_labelled, kept, ("n_rows", n_rows)]
        )
        problems += order_problems([kept_labelled, labelled])
        problems += order_problems([labelled, ("n_rows", n_rows)])
        problems += order_problems(
            [("n_kept_correct", self.n_kept_correct), ("n_all_correct", self.n_all_correct), labelled]
        )
        if all(is_count(v) for v in (n_rows, self.n_kept, self.n_labelled, self.n_kept_labelled)):
            problems += order_problems(
                [
                    ("unlabelled kept rows", self.n_kept - self.n_kept_labelled),
                    ("unlabelled rows", n_rows - self.n_labelled),
                ]
            )
        problems += number_problems("threshold", self.threshold, allow_inf=True)
        return problems


BatchStats = CalibratorBatchStats | RiskBatchStats | SelectiveBatchStats


def _sum_arrays(arrays: Sequence[npt.NDArray[np.int64]]) -> npt.NDArray[np.int64]:
    out: npt.NDArray[np.int64] = np.sum(np.stack(arrays), axis=0, dtype=np.int64)
    return out


def _pooled_sets(parts: Sequence[CalibratorBatchStats], n_rows: Sequence[int]) -> dict[str, Any]:
    levels = [(p.alpha_level, n) for p, n in zip(parts, n_rows, strict=True) if p.alpha_level is not None]
    weight = sum(n for _, n in levels)
    alpha = None if not levels else sum(a * n for a, n in levels) / weight if weight else levels[-1][0]
    return {
        "size_counts": _sum_arrays([p.size_counts for p in parts]),
        "class_labelled": _sum_arrays([p.class_labelled for p in parts]),
        "class_covered": _sum_arrays([p.class_covered for p in parts]),
        "alpha_level": alpha,
    }


@dataclass
class BatchRecord:
    """One observed batch: its statistics (kept forever) and its raw rows (kept in the window)."""

    index: int
    name: str
    observed_at: datetime
    n_rows: int
    stats: dict[str, BatchStats]
    rows: BatchRows | None = None

    @property
    def n_labelled(self) -> int:
        """Labelled rows of this batch (the same for every calibrator)."""
        first = next(iter(self.stats.values()))
        return first.n_labelled


def merge_records(records: Sequence[BatchRecord]) -> BatchRecord:
    """Consecutive batches as one record: statistics pooled per calibrator, no raw rows.

    One record is returned as it is.

    Its ``index`` is the first batch's, its ``name`` spans the first and last names
    (``"512–515"``) and its ``observed_at`` is the last batch's. Statistics are counts, so the
    pooled record gives exactly the summaries of the rows of all its batches (rates are ratios of
    the summed counts). Used to draw long streams at a bounded number of points.

    Examples
    --------
    >>> from datetime import UTC, datetime
    >>> def batch(i, covered):
    ...     stats = CalibratorBatchStats(np.array([0, 2, 0]), np.array([2, 0]), np.array([covered, 0]), 0.1)
    ...     return BatchRecord(i, str(i), datetime(2026, 1, 1, tzinfo=UTC), 2, {"lac": stats})
    >>> pooled = merge_records([batch(4, 2), batch(5, 1)])
    >>> pooled.index, pooled.name, pooled.n_rows, pooled.stats["lac"].n_covered, pooled.n_labelled
    (4, '4–5', 4, 3, 4)
    """
    if not records:
        raise ValueError("records must hold at least one batch record")
    first, last = records[0], records[-1]
    if len(records) == 1:
        return first
    n_rows = [r.n_rows for r in records]
    stats: dict[str, Any] = {}
    keys = dict.fromkeys(key for r in records for key in r.stats)  # a calibrator may miss batches
    for key in keys:
        having = [r for r in records if key in r.stats]
        parts = [r.stats[key] for r in having]
        stats[key] = type(parts[-1]).merged(parts, [r.n_rows for r in having])  # type: ignore[arg-type]
    return BatchRecord(
        index=first.index,
        name=f"{first.name}–{last.name}",
        observed_at=last.observed_at,
        n_rows=sum(n_rows),
        stats=stats,
    )


@dataclass
class BatchRows:
    """Raw rows of a batch inside the window."""

    ids: list[Hashable]
    probs: npt.NDArray[np.float64]
    packed_sets: dict[str, npt.NDArray[np.uint8]]  # np.packbits of the (m, K) set matrix, axis 1
    labels: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.intp))
    categories: npt.NDArray[Any] | None = None
    risks: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)  # per-row risk estimates
    # per Venn-ADMIT calibrator: y_hat, q, d, admitted, p_lower, p_upper (one value per row)
    admit: dict[str, dict[str, npt.NDArray[Any]]] = field(default_factory=dict)
    # per selective calibrator: the selector's score and whether the row was kept
    selective: dict[str, dict[str, npt.NDArray[Any]]] = field(default_factory=dict)
    # regression monitors: true values ("y", NaN until labelled) and per-calibrator row results
    regression: dict[str, Any] = field(default_factory=dict)

    def contains(self, calibrator: str, rows: IntArray, labels: IntArray) -> npt.NDArray[np.bool_]:
        """Whether each row's prediction set holds the given label."""
        packed = self.packed_sets[calibrator]
        bits = packed[rows, labels // 8] >> (7 - labels % 8)
        return (bits & 1).astype(bool)

    def sets(self, calibrator: str) -> npt.NDArray[np.bool_]:
        """The (m, K) boolean set matrix of this batch for a calibrator."""
        K = self.probs.shape[1]
        return np.unpackbits(self.packed_sets[calibrator], axis=1, count=K).astype(bool)


class StreamState:
    """Batches of the whole stream, with an id index over the rows still in the window.

    Parameters
    ----------
    window : int
        Raw rows to keep. Whole batches are dropped, oldest first, once the window holds more
        than ``window`` rows; the newest batch is always kept.
    """

    def __init__(self, window: int) -> None:
        self.window = window
        self.batches: list[BatchRecord] = []
        self._in_window: deque[BatchRecord] = deque()
        self._rows_in_window = 0
        self.id_index: dict[Hashable, tuple[int, int]] = {}
        self.rows_seen = 0
        self.rows_labelled = 0
        self.labels_unmatched = 0
        self.rows_expired = 0

    def __iter__(self) -> Iterator[BatchRecord]:
        return iter(self.batches)

    @property
    def rows_in_window(self) -> int:
        """Raw rows currently kept."""
        return self._rows_in_window

    @property
    def rows_pending(self) -> int:
        """Rows in the window that are still waiting for a label."""
        return sum(b.n_rows - b.n_labelled for b in self._in_window)

    def window_batches(self) -> list[BatchRecord]:
        """Batches whose raw rows are kept, oldest first."""
        return list(self._in_window)

    def first_known_id(self, ids: list[Hashable]) -> Hashable | None:
        """One of ``ids`` that is already in the window, or None."""
        if self.id_index.keys().isdisjoint(ids):
            return None
        return next(i for i in ids if i in self.id_index)

    def append(self, record: BatchRecord) -> list[int]:
        """Add a batch (with rows) and drop old raw rows past the window; return dropped indices."""
        assert record.rows is not None
        self.batches.append(record)
        self._in_window.append(record)
        self._rows_in_window += record.n_rows
        self.rows_seen += record.n_rows
        positions = zip(repeat(record.index), range(record.n_rows))
        self.id_index.update(zip(record.rows.ids, positions, strict=True))
        dropped = []
        while self._rows_in_window > self.window and len(self._in_window) > 1:
            old = self._in_window.popleft()
            assert old.rows is not None
            for row_id in old.rows.ids:
                del self.id_index[row_id]
            self._rows_in_window -= old.n_rows
            self.rows_expired += old.n_rows
            old.rows = None
            dropped.append(old.index)
        return dropped
