"""Shift warnings for tables: each bucket tested whole against the calibration data.

Rows observed from a table have no order the monitor's sequential detectors could follow (an
executor sees a partition, not a stream), so table batches are tested as buckets, from the sums
the kernel already computes (:mod:`calwatch.engine.shift.bucket_tests`):

* when a bucket is observed, its confidence rank-sum against the calibration rows (label-free);
* when labels reach a bucket, its labelled rows' misses against each marginal set calibrator's
  promise.

Every look of both tests spends from one budget, ``α_k = 6δ/(π²k²)``, so the probability of any
false alarm over every look, however many buckets and label calls come, is at most ``δ`` (0.01;
plus ``δ_cal`` = 0.01 for the coverage test's null rate). Alarms become the monitor's warnings,
with the same episodes, acknowledgements and notes as the streaming detectors'.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from calwatch.engine.shift.betting import calibration_null_rate, has_finite_threshold
from calwatch.engine.shift.bucket_tests import (
    DEFAULT_DELTA,
    MIN_ROWS,
    look_level,
    miss_tail,
    rank_sum_z,
    two_sided_log10_p,
    two_sided_threshold,
)
from calwatch.engine.shift.monitors import DEFAULT_CALIBRATION_DELTA, MonitorResult
from calwatch.scale.reduce import BucketStatistics
from calwatch.stream.records import BatchRecord, BatchStats

CONFIDENCE_TEST = "bucket confidence vs calibration"


@dataclass(frozen=True)
class Look:
    """One test's look at one batch: the result, the batch, its rows, and which calibrator."""

    result: MonitorResult
    batch: int
    rows: tuple[int, int]
    calibrator: str | None = None


@dataclass
class BucketWatch:
    """The looks spent so far (``k``) and the bound ``δ`` they share; kept in the monitor's snapshot."""

    delta: float = DEFAULT_DELTA
    looks: int = 0

    def observed(
        self, monitor: Any, records: Sequence[BatchRecord], buckets: Sequence[BucketStatistics]
    ) -> list[Look]:
        """The label-free looks at newly observed table batches (``records`` not committed yet)."""
        reference = monitor.__dict__.get("_reference_confidence")
        out: list[Look] = []
        first_row = int(monitor._stream.rows_seen)
        first_rows: dict[int, int] = {}
        k = self.looks
        for record, bucket in zip(records, buckets, strict=True):
            rows = (first_row, first_row + record.n_rows - 1)
            first_rows[record.index] = first_row
            first_row += record.n_rows
            if reference is None or bucket.confidence_rank_sum is None or record.n_rows < MIN_ROWS:
                continue
            k += 1
            result = self._confidence(record, bucket.confidence_rank_sum, len(reference), k, first_row)
            out.append(Look(result, record.index, rows))
        labelled = [(r, r.stats) for r, b in zip(records, buckets, strict=True) if b.n_new_labels]
        return out + self.labelled(monitor, labelled, k_start=k, first_rows=first_rows)

    def _confidence(self, record: BatchRecord, u: float, n: int, k: int, rows_seen: int) -> MonitorResult:
        m = record.n_rows
        z = rank_sum_z(u, m, n)
        level = look_level(k, self.delta)
        threshold = two_sided_threshold(level)
        share = u / (m * n)  # P(a bucket row is less confident than a calibration row), ties halved
        direction = "less" if z > 0 else "more"
        return MonitorResult(
            name=CONFIDENCE_TEST,
            statistic=-two_sided_log10_p(z),  # on the warning log's scale: log10 of 1/p
            threshold=-math.log10(level),
            alarm=abs(z) > threshold,
            guarantee=(
                f"P(any false alarm over every bucket look, however many) ≤ δ = {self.delta:g} (rank-sum "
                "test of each bucket against the calibration rows, look k at level 6δ/(π²k²); null: the "
                "bucket's rows exchangeable with the calibration rows)"
            ),
            threatens="every calibrator's promise (the rows no longer look like the calibration data)",
            explanation=(
                f"batch {record.name}: the model is {direction} confident than on its calibration data "
                f"(a row is less confident than a calibration row {share:.1%} of the time, 50% expected; "
                f"z = {z:+.1f}, alarm past ±{threshold:.1f})"
            ),
            action="look at what changed in this bucket's inputs; recalibrate on recent labelled data",
            estimate=share,
            rows_seen=rows_seen,
        )

    def labelled(
        self,
        monitor: Any,
        updates: Sequence[tuple[BatchRecord, dict[str, BatchStats]]],
        *,
        k_start: int | None = None,
        first_rows: dict[int, int] | None = None,
    ) -> list[Look]:
        """The coverage looks at table batches whose labelled rows changed (``updates``: new statistics).

        ``k_start`` is the look count before these (default: the looks spent); ``first_rows`` the
        first row of batches not committed yet.
        """
        out: list[Look] = []
        k = self.looks if k_start is None else k_start
        promises = _promises(monitor)
        known = first_rows or {}
        for record, stats in updates:
            first = known[record.index] if record.index in known else _first_row(monitor, record.index)
            rows = (first, first + record.n_rows - 1)
            for key, (alpha, null_rate) in promises.items():
                counts = stats.get(key)
                n = int(getattr(counts, "n_labelled", 0))
                if counts is None or n < MIN_ROWS:
                    continue
                misses = n - int(counts.n_covered)  # type: ignore[attr-defined]
                k += 1
                level = look_level(k, self.delta)
                tail = miss_tail(misses, n, null_rate)
                out.append(Look(MonitorResult(
                    name=f"{key}: bucket coverage", statistic=-math.log10(max(tail, 1e-300)),
                    threshold=-math.log10(level), alarm=tail < level,
                    guarantee=(
                        f"P(any false alarm over every bucket look) ≤ δ + δ_cal = {self.delta:g} + "
                        f"{DEFAULT_CALIBRATION_DELTA:g} (exact binomial test of each bucket's misses "
                        f"against the null rate {null_rate:.4f} its calibration size allows, look k at "
                        "level 6δ/(π²k²))"
                    ),
                    threatens=f"{key}'s coverage of 1 − α = {1 - alpha:g}",
                    explanation=(
                        f"batch {record.name}: {key} missed {misses:,} of {n:,} labelled rows "
                        f"({misses / n:.1%}; at most {null_rate:.1%} expected); "
                        f"P(this many or more) = {tail:.2g}"
                    ),
                    action="recalibrate on recent labelled data, or widen α for this period",
                    estimate=1.0 - misses / n,
                    rows_seen=first + record.n_rows,
                ), record.index, rows, key))  # fmt: skip
        return out

    def spent(self, looks: Sequence[Look]) -> int:
        """The look count once ``looks`` are taken."""
        return self.looks + len(looks)


def _promises(monitor: Any) -> dict[str, tuple[float, float]]:
    """``key -> (α, null miss rate)`` of the marginal split conformal calibrators (the ones tested)."""
    out = {}
    for key, cal in monitor._calibrators.items():
        alpha = getattr(cal, "alpha", None)
        n_cal = getattr(cal, "n_calibration_", None)
        if getattr(cal, "mode_", None) != "marginal" or alpha is None or n_cal is None:
            continue
        if not has_finite_threshold(float(alpha), int(n_cal)):
            continue
        out[key] = (float(alpha), calibration_null_rate(float(alpha), int(n_cal), DEFAULT_CALIBRATION_DELTA))
    return out


def _first_row(monitor: Any, index: int) -> int:
    """The monitor's row count before batch ``index``."""
    return int(sum(r.n_rows for r in monitor._stream.batches[:index]))


def record_looks(monitor: Any, watch: BucketWatch, looks: Sequence[Look]) -> None:
    """Take the looks into the monitor's warning log (call once the batches are committed)."""
    shift = monitor._shift
    if shift is None or not looks:
        return
    for look in looks:
        shift._record(_Named(look.calibrator), look.result, look.batch, look.rows)
    watch.looks = watch.spent(looks)


@dataclass(frozen=True)
class _Named:
    """What the warning log reads of a detector: which calibrator it watches."""

    calibrator: str | None


def watch_of(monitor: Any) -> BucketWatch | None:
    """The monitor's bucket watch (created on first use), or None when it runs no shift detectors."""
    if monitor._shift is None:
        return None
    found: BucketWatch = monitor.__dict__.get("_bucket_watch") or monitor.__dict__.setdefault(
        "_bucket_watch", BucketWatch()
    )
    return found


__all__ = ["CONFIDENCE_TEST", "BucketWatch", "Look", "record_looks", "watch_of"]
