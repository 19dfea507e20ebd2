"""Selective classification (paper 002; ALGORITHMS.md §6): keep a row or abstain.

A calibrator of this kind (``cw.SelectiveCalibrator``, ``cw.BaselineSelector``) scores each row
and keeps those whose score clears its threshold. Its batch statistics count rows kept (at the
threshold in force), and once labelled, the accuracy of kept rows and of all rows.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.core.invariants import (
    count_problems,
    is_count,
    number_problems,
    order_problems,
    same_rows_problems,
)
from calwatch.core.models import ModelOutputs
from calwatch.kinds.base import CalibratorKind, IntArray
from calwatch.stream.records import NO_LABEL, BatchRecord, BatchRows
from calwatch.stream.row_codec import nested_arrays, nested_series


@dataclass(frozen=True)
class SelectiveRows:
    """Each row's selector score and whether it was kept."""

    score: npt.NDArray[np.float64]
    kept: npt.NDArray[np.bool_]
    threshold: float = math.nan

    def take(self, rows: IntArray) -> Self:
        """The results of the given rows."""
        return type(self)(self.score[rows], self.kept[rows], self.threshold)


@dataclass
class SelectiveBatchStats:
    """A selective calibrator's batch: rows kept (at the threshold in force) and their accuracy.

    ``n_kept`` counts rows kept; once labelled, ``n_kept_labelled`` / ``n_kept_correct`` and
    ``n_all_correct`` give the top-label accuracy of kept rows and of all labelled rows. A
    monoid: counts add; ``threshold`` is the later side's (the one in force) unless that side
    has none (NaN: :meth:`empty` and label updates), an associative rule.

    Examples
    --------
    >>> a = SelectiveBatchStats(n_rows=4, n_kept=3, threshold=0.2)
    >>> b = SelectiveBatchStats(n_rows=2, n_kept=1, threshold=0.3, n_labelled=2, n_kept_labelled=1)
    >>> a.merge(b).n_kept, a.merge(b).threshold, b.merge(SelectiveBatchStats.empty()).threshold
    (4, 0.3, 0.3)
    """

    n_rows: int
    n_kept: int
    threshold: float
    n_labelled: int = 0
    n_kept_labelled: int = 0
    n_kept_correct: int = 0
    n_all_correct: int = 0

    #: Its columns in a snapshot's ``batches.parquet`` (``n_rows`` is the batch's own).
    SNAPSHOT_COLUMNS: ClassVar[dict[str, Any]] = {
        "n_labelled": pl.Int64, "n_kept": pl.Int64, "threshold": pl.Float64, "n_kept_labelled": pl.Int64,
        "n_kept_correct": pl.Int64, "n_all_correct": pl.Int64,
    }  # fmt: skip

    @classmethod
    def empty(cls, n_classes: int = 0) -> Self:
        """Statistics of no rows (no threshold)."""
        return cls(n_rows=0, n_kept=0, threshold=math.nan)

    def merge(self, other: Self) -> Self:
        """Counts of the rows of both; the threshold in force is the later one."""
        return type(self)(
            n_rows=self.n_rows + other.n_rows,
            n_kept=self.n_kept + other.n_kept,
            threshold=self.threshold if math.isnan(other.threshold) else other.threshold,
            n_labelled=self.n_labelled + other.n_labelled,
            n_kept_labelled=self.n_kept_labelled + other.n_kept_labelled,
            n_kept_correct=self.n_kept_correct + other.n_kept_correct,
            n_all_correct=self.n_all_correct + other.n_all_correct,
        )

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        same = all(
            getattr(self, f) == getattr(other, f) for f in self.__dataclass_fields__ if f != "threshold"
        )
        both_nan = math.isnan(self.threshold) and math.isnan(other.threshold)
        return same and (both_nan or self.threshold == other.threshold)

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

    def to_row(self) -> dict[str, Any]:
        """One row of ``batches.parquet``."""
        return {"kind": "selective", **{name: getattr(self, name) for name in SELECTIVE_FIELDS}}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Self:
        """Statistics restored from one row of ``batches.parquet``."""
        return cls(n_rows=row["n_rows"], **{name: row[name] for name in SELECTIVE_FIELDS})


#: Target coverages of the selective curve, the labelled rows it needs, and the confidence bins of
#: the kept-vs-all histogram.
CURVE_COVERAGES = tuple(round(0.1 * i, 1) for i in range(1, 11))
CURVE_MIN_LABELLED = 25
CONFIDENCE_BINS = 10
#: Fields saved in ``batches.parquet`` (``n_rows`` is the batch's own column).
SELECTIVE_FIELDS = (
    "n_labelled", "n_kept", "threshold", "n_kept_labelled", "n_kept_correct", "n_all_correct",
)  # fmt: skip
#: What a selective calibrator keeps of each row (``rows.selective[key]``).
_ROW_FIELDS = ("score", "kept")


class SelectiveKind(CalibratorKind[SelectiveRows, SelectiveBatchStats]):
    """Selectors: ``scores(P, embeddings=...)``, ``select_scores``, ``tune_scores``."""

    name = "selective"
    summary_kind = "selective"
    stats_type = SelectiveBatchStats
    summary_columns: ClassVar[dict[str, Any]] = {
        "kept_share": pl.Float64, "threshold": pl.Float64, "n_kept_labelled": pl.Int64,
        "kept_accuracy": pl.Float64, "accuracy": pl.Float64,
    }  # fmt: skip
    panels = ("kept_share", "selective_curve", "kept_confidence")
    retunable = True
    window_datasets: ClassVar[dict[str, dict[str, Any]]] = {
        "selective_curve": {
            "key": pl.String, "calibrator": pl.String, "selector": pl.String, "coverage": pl.Float64,
            "error": pl.Float64, "n": pl.Int64,
        },
        "selective_confidence": {
            "key": pl.String, "calibrator": pl.String, "group": pl.String, "bin": pl.String,
            "count": pl.Int64, "share": pl.Float64,
        },
    }  # fmt: skip
    reference = "embeddings"
    rows_field = "selective"

    def claims(self, calibrator: Any) -> bool:
        """Selectors (keep or abstain per row)."""
        return callable(getattr(calibrator, "select_scores", None)) and callable(
            getattr(calibrator, "tune_scores", None)
        )

    def fit(
        self,
        key: str,
        calibrator: Any,
        outputs: ModelOutputs,
        y: IntArray,
        *,
        categories: Any,
        reference: Any,
    ) -> None:
        """Fit on probabilities, labels and embeddings (the reference embeddings for outlier features)."""
        ref = None if reference is None else reference[0]
        calibrator.fit(outputs.probs, y, embeddings=outputs.embeddings, reference=ref)

    def apply(self, key: str, calibrator: Any, outputs: ModelOutputs, categories: Any) -> SelectiveRows:
        """Selector scores, and the rows kept at the threshold in force."""
        scores = np.asarray(calibrator.scores(outputs.probs, embeddings=outputs.embeddings), dtype=np.float64)
        kept = np.asarray(calibrator.select_scores(scores), dtype=bool)
        return SelectiveRows(scores, kept, float(calibrator.threshold_))

    def observed(self, results: SelectiveRows, n_classes: int) -> SelectiveBatchStats:
        """Rows and rows kept."""
        m = int(results.kept.shape[0])
        return SelectiveBatchStats(n_rows=m, n_kept=int(results.kept.sum()), threshold=results.threshold)

    def labelled(
        self, results: SelectiveRows, probs: npt.NDArray[np.float64], labels: IntArray, sign: int = 1
    ) -> SelectiveBatchStats:
        """Labelled rows, kept ones, and those whose top-label prediction is right."""
        correct = probs.argmax(axis=1) == labels
        kept = results.kept
        return SelectiveBatchStats(
            n_rows=0, n_kept=0, threshold=math.nan, n_labelled=sign * int(labels.shape[0]),
            n_kept_labelled=sign * int(kept.sum()), n_kept_correct=sign * int((kept & correct).sum()),
            n_all_correct=sign * int(correct.sum()),
        )  # fmt: skip

    def keep(self, rows: BatchRows, key: str, results: SelectiveRows) -> None:
        """Scores and kept flags go to ``rows.selective``."""
        rows.selective[key] = {"score": results.score, "kept": results.kept}

    def results_of(self, rows: BatchRows, key: str, calibrator: Any) -> SelectiveRows:
        """The scores and kept flags kept for the batch."""
        per_row = rows.selective[key]
        return SelectiveRows(per_row["score"], per_row["kept"])

    def write_rows(self, rows: Sequence[BatchRows]) -> tuple[dict[str, pl.Series], dict[str, Any]]:
        """``selective_<i>_score`` and ``selective_<i>_kept``."""
        keys = list(rows[0].selective) if rows else []
        columns = nested_series("selective", dict.fromkeys(keys, _ROW_FIELDS), [r.selective for r in rows])
        return columns, {"selective_calibrators": keys}

    def read_rows(self, part: pl.DataFrame, mapping: Mapping[str, Any], rows: BatchRows) -> None:
        """The scores and kept flags (none in snapshots written before selective calibrators)."""
        keys = mapping.get("selective_calibrators", [])
        rows.selective = nested_arrays(part, "selective", dict.fromkeys(keys, _ROW_FIELDS))

    def summary_row(self, stats: SelectiveBatchStats, n_rows: int) -> dict[str, Any]:
        """Kept share, threshold, and the accuracy of kept and of all labelled rows."""
        n_lab, n_kept = stats.n_labelled, stats.n_kept_labelled
        return {
            "kept_share": stats.n_kept / n_rows,
            "threshold": stats.threshold,
            "n_kept_labelled": n_kept,
            "kept_accuracy": stats.n_kept_correct / n_kept if n_kept else None,
            "accuracy": stats.n_all_correct / n_lab if n_lab else None,
        }

    def row_columns(
        self, key: str, results: SelectiveRows, labels: IntArray, classes: npt.NDArray[Any]
    ) -> dict[str, Any]:
        """``score_<key>`` and ``kept_<key>``."""
        return {f"score_{key}": results.score, f"kept_{key}": results.kept}

    def target(self, calibrator: Any) -> None:
        """Selectors promise no coverage of sets."""
        return

    def retune(
        self, calibrator: Any, coverage: float, key: str, records: Sequence[BatchRecord]
    ) -> tuple[Any, float]:
        """A copy of the selector re-tuned on the window's scores; the records' kept rows and counts follow.

        Returns the new selector and its threshold. Once everything is computed, the records
        (those still in the window) are updated: each row's kept flag at the new threshold, and
        the batch's statistics recounted from its rows and labels.
        """
        scores = np.concatenate([r.rows.selective[key]["score"] for r in records if r.rows is not None])
        candidate = copy.deepcopy(calibrator)
        candidate.coverage = float(coverage)
        threshold = float(candidate.tune_scores(scores))
        updates = []
        for record in records:
            assert record.rows is not None
            score = record.rows.selective[key]["score"]
            results = SelectiveRows(score, np.asarray(candidate.select_scores(score), dtype=bool), threshold)
            labelled = np.flatnonzero(record.rows.labels != NO_LABEL)
            stats = self.observed(results, 0).merge(
                self.labelled(
                    results.take(labelled), record.rows.probs[labelled], record.rows.labels[labelled]
                )
            )
            updates.append((record, results.kept, stats))
        for record, kept, stats in updates:
            assert record.rows is not None
            record.rows.selective[key]["kept"] = kept
            record.stats = record.stats | {key: stats}  # a window batch: never settled into columns
        return candidate, threshold

    def window_rows(
        self, dataset: str, key: str, calibrator: Any, windows: Sequence[BatchRows]
    ) -> list[dict[str, Any]]:
        """Its window datasets: the error-vs-coverage curves, or kept-vs-all confidence.

        ``selective_curve`` is 002 §5.2's on the window's labelled rows (at least 25): for each
        target coverage the rows whose selector score is highest are kept and the ℓ2 selective
        calibration error of the kept rows is computed, for the selector and for the confidence
        baseline (keep the most confident). ``selective_confidence`` bins the top-label
        confidence of all window rows and of the kept ones (002 Fig. 4).
        """
        from calwatch.engine.metrics.calibration import selective_curve

        parts = [w for w in windows if key in w.selective]
        if not parts:
            return []
        probs = np.concatenate([p.probs for p in parts])
        scores = np.concatenate([p.selective[key]["score"] for p in parts])
        kept = np.concatenate([p.selective[key]["kept"] for p in parts])
        conf = probs.max(axis=1)
        rows: list[dict[str, Any]] = []
        if dataset == "selective_curve":
            labels = np.concatenate([p.labels for p in parts])
            labelled = labels >= 0
            if labelled.sum() < CURVE_MIN_LABELLED:
                return []
            for selector, s in (("selector", scores[labelled]), ("confidence", conf[labelled])):
                xi, values = selective_curve(
                    probs[labelled], labels[labelled], s, coverages=list(CURVE_COVERAGES)
                )
                for c, v in zip(xi.tolist(), values.tolist(), strict=True):
                    rows.append(
                        {"key": f"{key}|{selector}|{c:g}", "calibrator": key, "selector": selector,
                         "coverage": c, "error": v, "n": int(labelled.sum())}
                    )  # fmt: skip
            return rows
        edges = np.linspace(0, 1, CONFIDENCE_BINS + 1)
        which = np.clip(np.searchsorted(edges, conf, side="right") - 1, 0, CONFIDENCE_BINS - 1)
        for group, mask in (("all rows", np.ones_like(kept)), ("kept", kept)):
            counts = np.bincount(which[mask], minlength=CONFIDENCE_BINS)
            total = max(int(mask.sum()), 1)
            for b, count in enumerate(counts.tolist()):
                rows.append(
                    {"key": f"{key}|{group}|{b}", "calibrator": key, "group": group,
                     "bin": f"{edges[b]:.1f}-{edges[b + 1]:.1f}", "count": count, "share": count / total}
                )  # fmt: skip
        return rows


__all__ = ["SelectiveBatchStats", "SelectiveKind", "SelectiveRows"]
