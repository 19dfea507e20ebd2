"""Venn-ADMIT admission (paper 000; ALGORITHMS.md §2): ADMIT sets plus admitted KNN predictions.

A calibrator of this kind (``cw.VennAdmit``) reads embeddings and logits; per row it gives an
ADMIT prediction set, the KNN prediction ``ŷ``, the reliability features ``q`` and ``d``, the
Venn-ADMIT bounds and whether the prediction is admitted. Its batch statistics are the sets'
counts plus, once labelled, admitted rows and right ones by true and by predicted class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.core.invariants import (
    array_order_problems,
    count_problems,
    counts_problems,
    is_count,
    is_counts,
    order_problems,
)
from calwatch.core.models import ModelOutputs
from calwatch.engine.metrics.intervals import clopper_pearson
from calwatch.kinds.base import IntArray, int_array
from calwatch.kinds.sets import SET_SUMMARY, CalibratorBatchStats, SetRows, SetsKind
from calwatch.stream.records import BatchRecord, BatchRows
from calwatch.stream.row_codec import nested_arrays, nested_series

#: Per-row Venn-ADMIT results kept in the window (``rows()`` shows them as ``<field>_<name>``).
ADMIT_ROW_FIELDS = ("y_hat", "q", "d", "admitted", "p_lower", "p_upper")
#: Bins of the distance ``d`` histogram: the calibration set's deciles, then "beyond".
D_BINS = 10
#: Its per-class count arrays, as named in ``batches.parquet``.
ADMIT_COUNTS = ("class_admitted", "class_correct", "pred_admitted", "pred_correct")


@dataclass(frozen=True)
class AdmitRows(SetRows):
    """ADMIT sets and the per-row Venn-ADMIT results (:data:`ADMIT_ROW_FIELDS`)."""

    fields: dict[str, npt.NDArray[Any]] = field(default_factory=dict)

    def take(self, rows: IntArray) -> Self:
        """The results of the given rows."""
        return type(self)(
            self.packed[rows], self.n_classes, self.level, {k: v[rows] for k, v in self.fields.items()}
        )


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

    SNAPSHOT_COLUMNS: ClassVar[dict[str, Any]] = CalibratorBatchStats.SNAPSHOT_COLUMNS | {
        "n_admitted": pl.Int64, **dict.fromkeys(ADMIT_COUNTS, pl.List(pl.Int64)),
    }  # fmt: skip

    @classmethod
    def empty(cls, n_classes: int) -> Self:
        """Statistics of no rows."""
        base = CalibratorBatchStats.empty(n_classes)
        zeros = {name: np.zeros(n_classes, dtype=np.int64) for name in ADMIT_COUNTS}
        return cls(base.size_counts, base.class_labelled, base.class_covered, None, 0, **zeros)

    def merge(self, other: Self) -> Self:
        """Counts of the rows of both (see :meth:`CalibratorBatchStats.merge`)."""
        return type(self)(
            **self._merged_fields(other),
            n_admitted=self.n_admitted + other.n_admitted,
            **{name: getattr(self, name) + getattr(other, name) for name in ADMIT_COUNTS},
        )

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

    def to_row(self) -> dict[str, Any]:
        """One row of ``batches.parquet``."""
        row = super().to_row() | {"kind": "admit", "n_admitted": self.n_admitted}
        return row | {name: getattr(self, name).tolist() for name in ADMIT_COUNTS}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Self:
        """Counts restored from one row of ``batches.parquet``."""
        base = CalibratorBatchStats.from_row(row)
        return cls(
            base.size_counts, base.class_labelled, base.class_covered, base.alpha_level,
            n_admitted=row["n_admitted"], **{name: int_array(row[name]) for name in ADMIT_COUNTS},
        )  # fmt: skip


class AdmitKind(SetsKind):
    """Venn-ADMIT calibrators: fitted on a reference set, read embeddings and logits."""

    name = "admit"
    stats_type = AdmitBatchStats
    summary_columns: ClassVar[dict[str, Any]] = SET_SUMMARY | {
        "admitted_share": pl.Float64, "n_admitted_labelled": pl.Int64, "admitted_accuracy": pl.Float64,
    }  # fmt: skip
    panels: ClassVar[tuple[str, ...]] = (
        *SetsKind.panels,
        "admitted",
        "admitted_accuracy",
        "admit_q",
        "admit_d",
    )
    record_datasets: ClassVar[dict[str, tuple[dict[str, Any], tuple[str, ...]]]] = {
        "admit_class": (
            {"calibrator": pl.String, "class": pl.String, "n_admitted": pl.Int64, "n_correct": pl.Int64,
             "target": pl.Float64},
            ("calibrator", "class"),
        ),
    }  # fmt: skip
    window_datasets: ClassVar[dict[str, dict[str, Any]]] = {
        "admit_features": {
            "key": pl.String, "calibrator": pl.String, "feature": pl.String, "source": pl.String,
            "bin": pl.Int64, "bin_label": pl.String, "count": pl.Int64, "share": pl.Float64, "n": pl.Int64,
        },
    }  # fmt: skip
    reference = "full"
    rows_field = "admit"

    def claims(self, calibrator: Any) -> bool:
        """Venn-ADMIT-like: ``predict_arrays`` over embeddings and logits, and ``q_k_only``."""
        return callable(getattr(calibrator, "predict_arrays", None)) and hasattr(calibrator, "q_k_only")

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
        """Fit on the reference (training) set and the calibration rows' embeddings and logits."""
        E = require_embeddings(outputs, f"calibrators[{key!r}] (Venn-ADMIT)")
        calibrator.fit(train=reference, calibration=(E, outputs.logits_or_log_probs(), y))

    def apply(self, key: str, calibrator: Any, outputs: ModelOutputs, categories: Any) -> AdmitRows:
        """ADMIT sets and the per-row admission results."""
        E = require_embeddings(outputs, f"calibrators[{key!r}] (Venn-ADMIT)")
        result = calibrator.predict_arrays(E, outputs.logits_or_log_probs())
        sets = np.asarray(result.sets, dtype=bool)
        fields = {name: np.asarray(getattr(result, name)) for name in ADMIT_ROW_FIELDS}
        return AdmitRows(np.packbits(sets, axis=1), int(sets.shape[1]), float(calibrator.alpha), fields)

    def observed(self, results: SetRows, n_classes: int) -> AdmitBatchStats:
        """The sets' counts and the rows admitted."""
        assert isinstance(results, AdmitRows)
        sets = super().observed(results, n_classes)
        stats = AdmitBatchStats.empty(n_classes)
        stats.size_counts, stats.alpha_level = sets.size_counts, sets.alpha_level
        stats.n_admitted = int(results.fields["admitted"].sum())
        return stats

    def labelled(
        self, results: SetRows, probs: npt.NDArray[np.float64], labels: IntArray, sign: int = 1
    ) -> AdmitBatchStats:
        """Coverage counts, plus labelled admitted rows and right ones by true and predicted class."""
        assert isinstance(results, AdmitRows)
        K = results.n_classes
        sets = super().labelled(results, probs, labels, sign)
        stats = AdmitBatchStats.empty(K)
        stats.class_labelled, stats.class_covered = sets.class_labelled, sets.class_covered
        admitted = results.fields["admitted"].astype(bool)
        chosen, truth = results.fields["y_hat"][admitted], labels[admitted]
        right = chosen == truth
        stats.class_admitted = sign * np.bincount(truth, minlength=K).astype(np.int64)
        stats.class_correct = sign * np.bincount(truth[right], minlength=K).astype(np.int64)
        stats.pred_admitted = sign * np.bincount(chosen, minlength=K).astype(np.int64)
        stats.pred_correct = sign * np.bincount(chosen[right], minlength=K).astype(np.int64)
        return stats

    def keep(self, rows: BatchRows, key: str, results: SetRows) -> None:
        """Packed sets to ``rows.packed_sets``, the admission results to ``rows.admit``."""
        assert isinstance(results, AdmitRows)
        super().keep(rows, key, results)
        rows.admit[key] = dict(results.fields)

    def results_of(self, rows: BatchRows, key: str, calibrator: Any) -> AdmitRows:
        """The sets and admission results kept for the batch."""
        return AdmitRows(rows.packed_sets[key], int(rows.probs.shape[1]), None, rows.admit[key])

    def write_rows(self, rows: Sequence[BatchRows]) -> tuple[dict[str, pl.Series], dict[str, Any]]:
        """``admit_<i>_<field>``: the admission results (its packed sets are the sets kind's ``set_<j>``)."""
        keys = list(rows[0].admit) if rows else []
        fields = list(rows[0].admit[keys[0]]) if keys else []
        columns = nested_series("admit", dict.fromkeys(keys, fields), [r.admit for r in rows])
        return columns, {"admit_calibrators": keys, "admit_fields": fields}

    def read_rows(self, part: pl.DataFrame, mapping: Mapping[str, Any], rows: BatchRows) -> None:
        """The admission results (none in snapshots written before Venn-ADMIT)."""
        fields = mapping.get("admit_fields", [])
        rows.admit = nested_arrays(part, "admit", dict.fromkeys(mapping.get("admit_calibrators", []), fields))

    def summary_row(self, stats: CalibratorBatchStats, n_rows: int) -> dict[str, Any]:
        """The sets' columns plus the admitted share and the admitted rows' accuracy."""
        assert isinstance(stats, AdmitBatchStats)
        n_adm = int(stats.class_admitted.sum())
        return super().summary_row(stats, n_rows) | {
            "admitted_share": stats.n_admitted / n_rows,
            "n_admitted_labelled": n_adm,
            "admitted_accuracy": int(stats.class_correct.sum()) / n_adm if n_adm else None,
        }

    def row_columns(
        self, key: str, results: SetRows, labels: IntArray, classes: npt.NDArray[Any]
    ) -> dict[str, Any]:
        """``<field>_<key>`` for each admission result (``y_hat`` as class names), then the sets'."""
        assert isinstance(results, AdmitRows)
        columns: dict[str, Any] = {}
        for name in ADMIT_ROW_FIELDS:
            values = results.fields[name]
            columns[f"{name}_{key}"] = classes[values].tolist() if name == "y_hat" else values
        return columns | super().row_columns(key, results, labels, classes)

    def levels(self, calibrator: Any) -> None:
        """ADMIT sets cannot be recomputed at another level from the window."""
        return

    def record_rows(self, dataset: str, key: str, stats: Any, classes: Sequence[str]) -> list[dict[str, Any]]:
        """``admit_class``: per true class, labelled admitted rows and the right ones."""
        assert isinstance(stats, AdmitBatchStats)
        return [
            {"calibrator": key, "class": classes[c], "n_admitted": int(stats.class_admitted[c]),
             "n_correct": int(stats.class_correct[c])}
            for c in map(int, stats.class_admitted.nonzero()[0])
        ]  # fmt: skip

    def window_rows(
        self, dataset: str, key: str, calibrator: Any, windows: Sequence[BatchRows]
    ) -> list[dict[str, Any]]:
        """``admit_features``: shares of q and d per bin, in the calibration set and in the window.

        ``q`` has one bin per value ``0..K``; ``d`` has the calibration set's deciles as bins plus
        one for distances beyond every calibration row (new regions of the embedding space).
        """
        if not hasattr(calibrator, "calibration_q_"):
            return []
        q_cal, d_cal = np.asarray(calibrator.calibration_q_), np.asarray(calibrator.calibration_d_)
        parts = [w.admit[key] for w in windows if key in w.admit]
        q_win = np.concatenate([p["q"] for p in parts]) if parts else np.zeros(0)
        d_win = np.concatenate([p["d"] for p in parts]) if parts else np.zeros(0)
        k = int(calibrator.k)
        edges = np.quantile(d_cal, np.linspace(0, 1, D_BINS + 1)[1:])
        labels = [f"≤ {e:.3g}" for e in edges] + [f"> {edges[-1]:.3g}"]
        rows: list[dict[str, Any]] = []
        for source, q, d in (("calibration", q_cal, d_cal), ("window", q_win, d_win)):
            n = max(int(q.shape[0]), 1)
            q_counts = np.bincount(q.astype(np.int64), minlength=k + 1)[: k + 1]
            d_counts = np.bincount(np.searchsorted(edges, d, side="left"), minlength=D_BINS + 1)
            for feature, counts, bin_labels in (
                ("q", q_counts, [str(i) for i in range(k + 1)]),
                ("d", d_counts, labels),
            ):
                for b, count in enumerate(counts.tolist()):
                    rows.append(
                        {
                            "key": f"{key}|{feature}|{source}|{b}", "calibrator": key, "feature": feature,
                            "source": source, "bin": b, "bin_label": bin_labels[b], "count": count,
                            "share": count / n, "n": int(q.shape[0]),
                        }
                    )  # fmt: skip
        return rows


def require_embeddings(outputs: ModelOutputs, who: str) -> npt.NDArray[np.float32]:
    """The batch's embeddings, or an error saying how to provide them."""
    if outputs.embeddings is None:
        msg = (
            f"{who} needs embeddings: use a torch model with Monitor(model, embedding_layer=...), "
            "or pass embeddings= with precomputed outputs"
        )
        raise ValueError(msg)
    return outputs.embeddings


def admitted_accuracy(
    records: Sequence[BatchRecord], classes: Sequence[str], targets: dict[str, float], *, by: str
) -> pl.DataFrame:
    """Admitted predictions by class over some batch records (``Monitor.admitted_accuracy``)."""
    totals: dict[str, AdmitBatchStats] = {}
    for record in records:
        for key, stats in record.stats.items():
            if isinstance(stats, AdmitBatchStats):
                totals[key] = totals[key].merge(stats) if key in totals else stats
    out: dict[str, list[Any]] = {"calibrator": [], "class": [], "n_admitted": [], "n_correct": []}
    for key, stats in totals.items():
        admitted, correct = (
            (stats.class_admitted, stats.class_correct)
            if by == "true"
            else (stats.pred_admitted, stats.pred_correct)
        )
        present = np.flatnonzero(admitted)
        out["calibrator"] += [key] * len(present)
        out["class"] += [classes[int(i)] for i in present]
        out["n_admitted"] += admitted[present].tolist()
        out["n_correct"] += correct[present].tolist()
    schema: dict[str, Any] = {
        "calibrator": pl.String, "class": pl.String, "n_admitted": pl.Int64, "n_correct": pl.Int64,
    }  # fmt: skip
    frame = pl.DataFrame(out, schema=schema)
    lo, hi = clopper_pearson(frame["n_correct"].to_numpy(), frame["n_admitted"].to_numpy())
    return frame.with_columns(
        accuracy=pl.col("n_correct") / pl.col("n_admitted"),
        accuracy_lo=pl.Series(lo, dtype=pl.Float64),
        accuracy_hi=pl.Series(hi, dtype=pl.Float64),
        target=pl.col("calibrator").replace_strict(targets, return_dtype=pl.Float64),
    )


__all__ = ["ADMIT_ROW_FIELDS", "AdmitBatchStats", "AdmitKind", "AdmitRows", "admitted_accuracy"]
