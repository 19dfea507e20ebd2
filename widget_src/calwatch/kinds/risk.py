"""Label-free risk estimates (paper 004; ALGORITHMS.md §5): the chance the model's top-k output misses.

A calibrator of this kind (``kind == "risk"``, e.g. ``cw.RiskEstimator``) gives per row the
estimated probability that the label is not among the model's top-k classes, before any label
arrives. Its batch statistics sum the estimates, and once labels come, the observed misses and
the estimates of the labelled rows (so the estimate can be compared on the same rows).
"""

from __future__ import annotations

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
    relative_tolerance,
    same_rows_problems,
)
from calwatch.core.models import ModelOutputs
from calwatch.engine.conformal.scores import label_ranks
from calwatch.kinds.base import CalibratorKind, IntArray
from calwatch.stream.records import BatchRows
from calwatch.stream.row_codec import array_of, series_of


@dataclass(frozen=True)
class RiskRows:
    """Each row's estimated risk, for a model output that is its top-``top_k`` classes."""

    risk: npt.NDArray[np.float64]
    top_k: int

    def take(self, rows: IntArray) -> Self:
        """The estimates of the given rows."""
        return type(self)(self.risk[rows], self.top_k)


@dataclass
class RiskBatchStats:
    """Label-free risk estimate of one batch, and the observed misses once labels arrive.

    A monoid: counts and sums add; ``top_k`` is the same for every part of a calibrator's
    stream (``0`` in :meth:`empty`, which takes the other side's).

    Examples
    --------
    >>> a = RiskBatchStats(top_k=1, n_rows=3, risk_sum=0.5, n_labelled=2, n_missed=1, risk_sum_labelled=0.25)
    >>> b = RiskBatchStats(top_k=1, n_rows=1, risk_sum=0.25)
    >>> a.merge(b)
    RiskBatchStats(top_k=1, n_rows=4, risk_sum=0.75, n_labelled=2, n_missed=1, risk_sum_labelled=0.25)
    >>> RiskBatchStats.empty(3).merge(a) == a
    True
    """

    top_k: int  # the model output is its top-k classes
    n_rows: int
    risk_sum: float  # Σ estimated P(label ∉ top-k) over all rows of the batch
    n_labelled: int = 0
    n_missed: int = 0  # labelled rows whose label is not in the top-k classes
    risk_sum_labelled: float = 0.0  # the same estimate summed over the labelled rows only

    #: Its columns in a snapshot's ``batches.parquet`` (``n_rows`` is the batch's own).
    SNAPSHOT_COLUMNS: ClassVar[dict[str, Any]] = {
        "top_k": pl.Int64, "risk_sum": pl.Float64, "n_labelled": pl.Int64, "n_missed": pl.Int64,
        "risk_sum_labelled": pl.Float64,
    }  # fmt: skip

    @classmethod
    def empty(cls, n_classes: int = 0) -> Self:
        """Statistics of no rows."""
        return cls(top_k=0, n_rows=0, risk_sum=0.0)

    def merge(self, other: Self) -> Self:
        """Sums over the rows of both."""
        return type(self)(
            top_k=other.top_k or self.top_k,
            n_rows=self.n_rows + other.n_rows,
            risk_sum=self.risk_sum + other.risk_sum,
            n_labelled=self.n_labelled + other.n_labelled,
            n_missed=self.n_missed + other.n_missed,
            risk_sum_labelled=self.risk_sum_labelled + other.risk_sum_labelled,
        )

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

    def to_row(self) -> dict[str, Any]:
        """One row of ``batches.parquet``."""
        return {
            "kind": "risk", "top_k": self.top_k, "risk_sum": self.risk_sum, "n_labelled": self.n_labelled,
            "n_missed": self.n_missed, "risk_sum_labelled": self.risk_sum_labelled,
        }  # fmt: skip

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Self:
        """Statistics restored from one row of ``batches.parquet``."""
        return cls(
            top_k=row["top_k"], n_rows=row["n_rows"], risk_sum=row["risk_sum"], n_labelled=row["n_labelled"],
            n_missed=row["n_missed"], risk_sum_labelled=row["risk_sum_labelled"],
        )  # fmt: skip


class RiskKind(CalibratorKind[RiskRows, RiskBatchStats]):
    """Label-free risk estimators (``kind == "risk"``): ``row_risk(P)`` per row."""

    name = "risk"
    summary_kind = "risk"
    stats_type = RiskBatchStats
    summary_columns: ClassVar[dict[str, Any]] = {
        "estimated_error": pl.Float64, "observed_error": pl.Float64, "error_gap": pl.Float64,
        "estimated_error_labelled": pl.Float64, "error_band_lo": pl.Float64, "error_band_hi": pl.Float64,
        "estimate_promise": pl.String,
    }  # fmt: skip
    panels = ("risk", "risk_gap")
    rows_field = "risks"

    def calibrator_columns(self, calibrator: Any) -> dict[str, Any]:
        """``estimate_promise``: what the estimate promises (``RiskEstimator.promise``).

        ``"upper estimate (conservative)"`` for InvCP, ``"calibrated estimate"`` for the
        calibration maps, so no view calls an upper bound an estimate like the others.
        """
        return {"estimate_promise": getattr(calibrator, "promise", None)}

    def calibrated_columns(self, calibrator: Any, stats: RiskBatchStats, n_rows: int) -> dict[str, Any]:
        """``error_band_lo``, ``error_band_hi``: the guarded estimate's band for the batch's realised error.

        For ``RiskEstimator(method="guarded")`` (:mod:`calwatch.engine.risk.band`): with ``α̂`` the
        batch's estimated error over its ``m = n_rows`` rows, ``[α̂ + μ̂_H − w(m), α̂ + μ̂_H + w(m)] ∩
        [0, 1]`` holds the share of all ``m`` rows whose label misses the top-k output with
        probability ``≥ 1 − δ`` when the batch is drawn like the held-out calibration rows. A
        pooled record (consecutive batches drawn as one point) is one batch of its rows: its band
        is that of the pooled rows, narrower as ``m`` grows. Null for the other risk estimators
        (they state no band) and for a batch of no rows.
        """
        if getattr(calibrator, "method", None) != "guarded" or n_rows < 1:
            return {"error_band_lo": None, "error_band_hi": None}
        centre = stats.risk_sum / n_rows + float(calibrator.holdout_bias_)
        width = float(calibrator.band_halfwidth(int(n_rows)))
        return {"error_band_lo": max(0.0, centre - width), "error_band_hi": min(1.0, centre + width)}

    def claims(self, calibrator: Any) -> bool:
        """Calibrators whose ``kind`` is ``"risk"``."""
        return getattr(calibrator, "kind", None) == "risk"

    def apply(self, key: str, calibrator: Any, outputs: ModelOutputs, categories: Any) -> RiskRows:
        """Each row's estimated risk (checked to be one float per row)."""
        risk = np.asarray(calibrator.row_risk(outputs.probs), dtype=np.float64)
        m = len(outputs)
        if risk.shape != (m,):
            msg = f"calibrator {key!r} returned risks of shape {risk.shape}; expected ({m},)"
            raise TypeError(msg)
        return RiskRows(risk, int(getattr(calibrator, "top_k", 1)))

    def observed(self, results: RiskRows, n_classes: int) -> RiskBatchStats:
        """Rows and the sum of their estimates."""
        return RiskBatchStats(
            top_k=results.top_k, n_rows=int(results.risk.shape[0]), risk_sum=float(results.risk.sum())
        )

    def labelled(
        self, results: RiskRows, probs: npt.NDArray[np.float64], labels: IntArray, sign: int = 1
    ) -> RiskBatchStats:
        """Labelled rows, those whose label is outside the top-k, and their estimates' sum."""
        missed = label_ranks(probs, labels) > results.top_k
        return RiskBatchStats(
            top_k=results.top_k, n_rows=0, risk_sum=0.0, n_labelled=sign * int(labels.shape[0]),
            n_missed=sign * int(missed.sum()), risk_sum_labelled=sign * float(results.risk.sum()),
        )  # fmt: skip

    def keep(self, rows: BatchRows, key: str, results: RiskRows) -> None:
        """The estimates go to ``rows.risks``."""
        rows.risks[key] = results.risk

    def results_of(self, rows: BatchRows, key: str, calibrator: Any) -> RiskRows:
        """The estimates kept for the batch."""
        return RiskRows(rows.risks[key], int(getattr(calibrator, "top_k", 1)))

    def write_rows(self, rows: Sequence[BatchRows]) -> tuple[dict[str, pl.Series], dict[str, Any]]:
        """``risk_<i>``: each row's estimate."""
        keys = list(rows[0].risks) if rows else []
        columns = {f"risk_{i}": series_of([r.risks[key] for r in rows]) for i, key in enumerate(keys)}
        return columns, {"risk_calibrators": keys}

    def read_rows(self, part: pl.DataFrame, mapping: Mapping[str, Any], rows: BatchRows) -> None:
        """The estimates, as float64."""
        for i, key in enumerate(mapping["risk_calibrators"]):
            rows.risks[key] = array_of(part, f"risk_{i}").astype(np.float64, copy=False)

    def summary_row(self, stats: RiskBatchStats, n_rows: int) -> dict[str, Any]:
        """Estimated error of all rows; observed error and the estimate on the labelled rows."""
        n_lab = stats.n_labelled
        observed = stats.n_missed / n_lab if n_lab else None
        estimated_labelled = stats.risk_sum_labelled / n_lab if n_lab else None
        gap = None if observed is None or estimated_labelled is None else estimated_labelled - observed
        return {
            "estimated_error": stats.risk_sum / n_rows,
            "observed_error": observed,
            "error_gap": gap,
            "estimated_error_labelled": estimated_labelled,
        }

    def row_columns(
        self, key: str, results: RiskRows, labels: IntArray, classes: npt.NDArray[Any]
    ) -> dict[str, Any]:
        """``risk_<key>``."""
        return {f"risk_{key}": results.risk}

    def target(self, calibrator: Any) -> None:
        """Risk estimators promise no coverage."""
        return


__all__ = ["RiskBatchStats", "RiskKind", "RiskRows"]
