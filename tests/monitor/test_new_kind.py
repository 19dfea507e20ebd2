"""Adding a kind of calibrator touches one module: this one (the worked example of docs/architecture.md).

``ReliabilityKind`` watches a post-hoc calibration map (temperature scaling here) by the
statistics of a reliability diagram: per confidence bin, the rows, the sum of their calibrated
top-label confidence and, once labelled, how many top-label predictions were right. They are
counts and sums, so they merge exactly, and the expected calibration error of any set of
batches comes from the merged bins. Nothing outside this file knows the kind: the monitor's
summary and ``rows()``, late labels, snapshots (``batches.parquet`` columns from
``SNAPSHOT_COLUMNS``, per-row results in the generic ``extra`` slot) and merging all go through
the protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression

import calwatch as cw
from calwatch.core.invariants import counts_problems, order_problems
from calwatch.engine.calibration.maps import TemperatureScaling
from calwatch.kinds import KINDS, register
from calwatch.kinds.base import CalibratorKind, IntArray
from calwatch.stream.records import BatchRows

BINS = 10


@dataclass(frozen=True)
class ConfidenceRows:
    """Each row's calibrated top-label confidence and top-label prediction."""

    confidence: npt.NDArray[np.float64]
    prediction: npt.NDArray[np.int64]

    def take(self, rows: IntArray) -> Self:
        return type(self)(self.confidence[rows], self.prediction[rows])


def _bin(confidence: npt.NDArray[np.float64]) -> npt.NDArray[np.intp]:
    return np.minimum((confidence * BINS).astype(np.intp), BINS - 1)


@dataclass
class ReliabilityStats:
    """A reliability diagram's counts per confidence bin.

    Rows and Σ confidence; labelled rows, Σ their confidence and the right predictions.
    """

    rows: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(BINS, dtype=np.int64))
    confidence_sum: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(BINS))
    labelled: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(BINS, dtype=np.int64))
    labelled_confidence_sum: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(BINS))
    correct: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(BINS, dtype=np.int64))

    SNAPSHOT_COLUMNS: ClassVar[dict[str, Any]] = {
        "bin_rows": pl.List(pl.Int64), "bin_confidence_sum": pl.List(pl.Float64),
        "bin_labelled": pl.List(pl.Int64), "bin_labelled_confidence_sum": pl.List(pl.Float64),
        "bin_correct": pl.List(pl.Int64),
    }  # fmt: skip
    FIELDS: ClassVar[tuple[str, ...]] = (
        "rows",
        "confidence_sum",
        "labelled",
        "labelled_confidence_sum",
        "correct",
    )

    @classmethod
    def empty(cls, n_classes: int = 0) -> Self:
        return cls()

    def merge(self, other: Self) -> Self:
        return type(self)(*(getattr(self, f) + getattr(other, f) for f in self.FIELDS))

    @property
    def n_labelled(self) -> int:
        return int(self.labelled.sum())

    def check(self, n_rows: int) -> list[str]:
        problems = counts_problems("bin_rows", self.rows, BINS) + counts_problems(
            "bin_correct", self.correct, BINS
        )
        return problems + order_problems([("n_labelled", self.n_labelled), ("n_rows", n_rows)])

    def to_row(self) -> dict[str, Any]:
        return {"kind": "reliability"} | {f"bin_{f}": getattr(self, f).tolist() for f in self.FIELDS}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Self:
        dtypes = (np.int64, np.float64, np.int64, np.float64, np.int64)
        return cls(*(np.asarray(row[f"bin_{f}"], dtype=d) for f, d in zip(cls.FIELDS, dtypes, strict=True)))


class ReliabilityKind(CalibratorKind[ConfidenceRows, ReliabilityStats]):
    """Post-hoc calibration maps (``transform(logits)``), watched by their reliability diagram."""

    name = "reliability"
    summary_kind = "reliability"
    stats_type = ReliabilityStats
    summary_columns: ClassVar[dict[str, Any]] = {"mean_confidence": pl.Float64, "ece": pl.Float64}
    panels = ()

    def claims(self, calibrator: Any) -> bool:
        return isinstance(calibrator, TemperatureScaling)

    def fit(
        self, key: str, calibrator: Any, outputs: Any, y: IntArray, *, categories: Any, reference: Any
    ) -> None:
        calibrator.fit(outputs.logits_or_log_probs(), y)  # a calibration map of the logits

    def apply(self, key: str, calibrator: Any, outputs: Any, categories: Any) -> ConfidenceRows:
        P = calibrator.transform(outputs.logits_or_log_probs())
        return ConfidenceRows(P.max(axis=1), P.argmax(axis=1))

    def observed(self, results: ConfidenceRows, n_classes: int) -> ReliabilityStats:
        b = _bin(results.confidence)
        stats = ReliabilityStats()
        stats.rows = np.bincount(b, minlength=BINS).astype(np.int64)
        stats.confidence_sum = np.bincount(b, weights=results.confidence, minlength=BINS)
        return stats

    def labelled(
        self, results: ConfidenceRows, probs: npt.NDArray[np.float64], labels: IntArray, sign: int = 1
    ) -> ReliabilityStats:
        b = _bin(results.confidence)
        stats = ReliabilityStats()
        stats.labelled = sign * np.bincount(b, minlength=BINS).astype(np.int64)
        stats.labelled_confidence_sum = sign * np.bincount(b, weights=results.confidence, minlength=BINS)
        stats.correct = sign * np.bincount(b[results.prediction == labels], minlength=BINS).astype(np.int64)
        return stats

    def keep(self, rows: BatchRows, key: str, results: ConfidenceRows) -> None:
        rows.extra[key] = {"confidence": results.confidence, "prediction": results.prediction}

    def results_of(self, rows: BatchRows, key: str, calibrator: Any) -> ConfidenceRows:
        saved = rows.extra[key]
        return ConfidenceRows(saved["confidence"], saved["prediction"].astype(np.int64))

    def summary_row(self, stats: ReliabilityStats, n_rows: int) -> dict[str, Any]:
        n_lab = stats.labelled.sum()
        gaps = np.abs(stats.labelled_confidence_sum - stats.correct)  # per bin: |Σ confidence − Σ right|
        return {
            "mean_confidence": float(stats.confidence_sum.sum()) / n_rows,
            "ece": float(gaps.sum() / n_lab) if n_lab else None,
        }

    def row_columns(
        self, key: str, results: ConfidenceRows, labels: IntArray, classes: Any
    ) -> dict[str, Any]:
        return {f"confidence_{key}": results.confidence}

    def target(self, calibrator: Any) -> None:
        return None


@pytest.fixture
def registered():
    before = list(KINDS)
    register(ReliabilityKind())
    yield
    KINDS[:] = before


@pytest.fixture
def digits():
    X, y = load_digits(return_X_y=True)
    order = np.random.default_rng(1).permutation(len(y))
    X, y = X[order] / 16.0, y[order]
    logits = LogisticRegression(max_iter=300).fit(X[:600], y[:600]).decision_function(X)
    return logits, y


def test_a_kind_defined_outside_the_package_is_watched_saved_and_merged(registered, digits, tmp_path):
    logits, y = digits
    mon = cw.Monitor(calibrators={"ts": TemperatureScaling(), "lac": cw.SplitConformalClassifier(alpha=0.1)})
    mon.calibrate(logits=logits[600:1100], y=y[600:1100])
    for b in range(3):
        rows = slice(1100 + 200 * b, 1300 + 200 * b)
        mon.observe(logits=logits[rows], ids=[f"{b}-{i}" for i in range(200)])
    mon.label([f"0-{i}" for i in range(200)], y[1100:1300])
    mon.label([f"1-{i}" for i in range(50)], (y[1300:1350] + 1) % 10)  # wrong, then corrected
    mon.label([f"1-{i}" for i in range(120)], y[1300:1420])

    summary = mon.summary().filter(calibrator="ts")
    assert summary["kind"].to_list() == ["reliability"] * 3
    assert summary["n_labelled"].to_list() == [200, 120, 0]
    # ECE by hand for batch 0: bins of the calibrated confidence, |Σ conf − Σ right| / n.
    P = TemperatureScaling().fit(logits[600:1100], y[600:1100]).transform(logits[1100:1300])
    conf, right = P.max(axis=1), P.argmax(axis=1) == y[1100:1300]
    b = _bin(conf)
    ece = sum(abs(conf[b == k].sum() - right[b == k].sum()) for k in range(BINS)) / 200
    assert summary["ece"][0] == pytest.approx(ece, rel=1e-12)
    assert summary["ece"][2] is None
    assert "confidence_ts" in mon.rows().columns

    # Snapshots keep its statistics and per-row results without knowing the kind.
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    assert_frame_equal(loaded.summary(), mon.summary())
    assert_frame_equal(loaded.rows(), mon.rows())
    loaded.label([f"2-{i}" for i in range(200)], y[1500:1700])
    mon.label([f"2-{i}" for i in range(200)], y[1500:1700])
    assert_frame_equal(loaded.summary(), mon.summary())

    # Pooled batches (as the dashboard draws long streams) give the ECE of all their rows.
    whole = mon.summary_of([cw.stream.records.merge_records(list(mon.batch_records))]).filter(calibrator="ts")
    stats = [r.stats["ts"] for r in mon.batch_records]
    pooled = stats[0].merge(stats[1]).merge(stats[2])
    assert whole["ece"][0] == pytest.approx(ReliabilityKind().summary_row(pooled, 600)["ece"], rel=1e-12)
