"""The live widget's datasets, kept current at a cost per update that does not grow with the stream.

:func:`calwatch.views.charts.datasets` builds the chart datasets of the whole stream (or of some
buckets) with polars: right for a static chart or a report, but each call costs milliseconds of
fixed overhead, and pooling a bucket of ``w`` batches (:mod:`calwatch.views.resolution`) costs ``w``
merges, ``w`` growing with the stream. A live widget instead asks :class:`LiveDatasets` for the
rows of the buckets an update touched:

- the pooled records of buckets come from :class:`PooledBuckets`, which keeps the running merges
  of each bucket's batches: a new batch costs one merge, labels on batch ``b`` re-merge the
  bucket from ``b`` on (labels arrive for recent batches: a merge or two), and the running merges
  of batches that left the window are dropped (only a late label from the row log, or labels for
  a table's batches, can change them: the widget then rebuilds its datasets once);
- rows are built in plain Python from the statistics, with the columns, types and values of
  :func:`calwatch.views.charts.datasets` (``tests/widget/test_widget_incremental.py`` checks that the
  rows a widget sends add up to a from-scratch rebuild after random streams with late labels,
  relabels, re-tuning, recalibration and brushing);
- exact intervals are remembered by (successes, trials): an update asks for one or two new ones;
- the shift chart's rows of a bucket fold the detectors' looks once per batch: a detector looks
  at the newest batch only (a batch's looks are final once the next batch arrives).

Regression monitors keep their own summary (their columns depend on their levels): their bucket
rows come from :func:`calwatch.views.charts.bucket_datasets` on the pooled records (polars, but still
one merge per update).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from calwatch.kinds import KINDS, kind_of
from calwatch.stream.records import BatchRecord
from calwatch.views import charts
from calwatch.views.cards import ExactIntervals
from calwatch.views.resolution import Resolution

if TYPE_CHECKING:
    from calwatch.kinds.base import CalibratorKind
    from calwatch.monitor.monitor import Monitor

Row = dict[str, Any]
Caster = Callable[[Any], Any]

#: Per-bucket datasets every monitor has (kinds add their ``record_datasets``).
BASE_BUCKETED = ("batches", "set_sizes", "class_coverage", "shift", "pit")
#: Columns of the summary (``batches``) rows every kind has, with their types.
_BASE_SUMMARY: dict[str, Any] = {
    "batch": pl.Int64, "name": pl.String, "calibrator": pl.String, "kind": pl.String,
    "target": pl.Float64, "n_rows": pl.Int64, "n_labelled": pl.Int64, "in_window": pl.Boolean,
}  # fmt: skip


def bucketed_names() -> tuple[str, ...]:
    """Datasets with one row per bucket of batches: the base ones and the kinds' record datasets."""
    extra = (name for kind in KINDS for name in kind.record_datasets if name not in BASE_BUCKETED)
    return (*BASE_BUCKETED, *dict.fromkeys(extra))


# --------------------------------------------------------------------------- JSON-safe values
def _float(value: Any) -> float | None:
    if value is None:
        return None
    out = float(value)
    return out if math.isfinite(out) else None


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _bool(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _json_value(value: Any) -> Any:
    """A value as JSON holds it: a numpy value as Python's, a non-finite float as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    return value


def caster(dtype: Any) -> Caster:
    """What a value of a polars column of ``dtype`` becomes in a JSON row (non-finite floats: None).

    Examples
    --------
    >>> caster(pl.Float64)(np.int64(3)), caster(pl.Float64)(float("nan")), caster(pl.Int64)(np.int64(2))
    (3.0, None, 2)
    """
    if dtype.is_float():
        return _float
    if dtype.is_integer():
        return _int
    if dtype == pl.Boolean:
        return _bool
    if dtype == pl.String:
        return _str
    return _json_value


def casters(schema: Mapping[str, Any]) -> dict[str, Caster]:
    """:func:`caster` of every column of a schema."""
    return {name: caster(dtype) for name, dtype in schema.items()}


def _key(*parts: Any) -> str | None:
    """A row key as polars' ``concat_str(..., separator="|")`` writes it (null if a part is)."""
    if any(p is None for p in parts):
        return None
    return "|".join(str(p) for p in parts)


def span(resolution: Resolution, start: int, end: int) -> Row:
    """The span columns of a bucket's rows (see :func:`calwatch.views.charts.datasets`)."""
    full = start + resolution.width - 1
    return {
        "batch_end": end,
        "batch_mid": (start + end) / 2,
        "span_end": full if resolution.hi is None else min(full, resolution.hi),
        "axis_end": resolution.axis_end(start),
        "n_batches": end - start + 1,
    }


# --------------------------------------------------------------------------- pooled buckets
def extend(pooled: BatchRecord, record: BatchRecord, first_name: str) -> BatchRecord:
    """``pooled`` (a run of batches from one named ``first_name``) with the next batch ``record``.

    Exactly :func:`calwatch.stream.records.merge_records` of the run and ``record``: statistics merged
    left to right per calibrator, keys in order of first appearance.
    """
    stats = dict(pooled.stats)
    for key, part in record.stats.items():
        before = stats.get(key)
        stats[key] = part if before is None else before.merge(part)
    return BatchRecord(
        index=pooled.index,
        name=f"{first_name}–{record.name}",
        observed_at=record.observed_at,
        n_rows=pooled.n_rows + record.n_rows,
        stats=stats,
    )


class _Prefix:
    """Running merges of one bucket: ``parts[j]`` pools batches ``start .. start + offset + j``."""

    __slots__ = ("offset", "parts", "start")

    def __init__(self, start: int) -> None:
        self.start = start
        self.offset = 0
        self.parts: list[BatchRecord] = []

    def forget_from(self, batch: int) -> None:
        """Drop the merges that pool ``batch`` (its statistics changed)."""
        del self.parts[max(0, batch - self.start - self.offset) :]

    def trim(self, first_kept: int) -> None:
        """Drop the merges ending before ``first_kept - 1`` (batches no call can change any more)."""
        drop = min(first_kept - 1 - self.start - self.offset, len(self.parts) - 1)
        if drop > 0:
            del self.parts[:drop]
            self.offset += drop

    def upto(self, records: Sequence[BatchRecord], end: int, first_kept: int = 0) -> BatchRecord:
        """The pooled record of batches ``start .. end``.

        The merges it builds are kept as :meth:`trim` would keep them for ``first_kept``: one
        ending before ``first_kept - 1`` is replaced by the next instead of kept beside it. A
        bucket pooled from scratch (a new resolution: every bucket of the stream) then holds one
        merge per batch that may still change, not one per batch of the bucket; kept, those
        were about 2.5 KB a batch (K = 10, three calibrators) until the trim after the call,
        161 MiB at once at 65,536 batches, which the C allocator kept as free space.
        """
        if end - self.start - self.offset < 0 or (not self.parts and self.offset):  # not kept
            self.offset, self.parts = 0, []  # (never the case for live updates)
        parts = self.parts
        if not parts:
            parts.append(records[self.start])
        first_name = records[self.start].name
        while self.start + self.offset + len(parts) <= end:
            pooled = extend(parts[-1], records[self.start + self.offset + len(parts)], first_name)
            if len(parts) == 1 and self.start + self.offset + 1 < first_kept:
                parts[0] = pooled  # the merge it extends ends before first_kept - 1: settled
                self.offset += 1
            else:
                parts.append(pooled)
        return parts[end - self.start - self.offset]


class PooledBuckets:
    """Pooled records of the buckets of one resolution, kept current as batches arrive and change.

    Parameters
    ----------
    resolution : Resolution
        How batches are bucketed.

    Examples
    --------
    >>> from datetime import UTC, datetime
    >>> from calwatch.kinds.sets import CalibratorBatchStats
    >>> def batch(i):
    ...     stats = CalibratorBatchStats(np.array([0, 2, 0]), np.array([2, 0]), np.array([1, 0]), 0.1)
    ...     return BatchRecord(i, str(i), datetime(2026, 1, 1, tzinfo=UTC), 2, {"lac": stats})
    >>> records = [batch(i) for i in range(6)]
    >>> pools = PooledBuckets(Resolution(4))
    >>> [(r.name, r.n_rows, end) for r, end in pools.buckets(records, None)]
    [('0–3', 8, 3), ('4–5', 4, 5)]
    >>> records.append(batch(6)); pools.changed([6])
    >>> [(r.name, r.stats["lac"].n_covered) for r, _ in pools.buckets(records, [6])]
    [('4–6', 3)]
    """

    def __init__(self, resolution: Resolution) -> None:
        self.resolution = resolution
        self._prefixes: dict[int, _Prefix] = {}

    def seed_from(self, finer: PooledBuckets) -> None:
        """Start each bucket from the longest merge ``finer`` holds of its first batches.

        ``finer`` is a resolution over the same range whose width divides this one's, so each
        bucket here starts where a bucket of ``finer`` starts, and that bucket's running merge
        is the left fold of the same first batches: extending it batch by batch gives the very
        record pooling from scratch gives (the same merges in the same order, floats included),
        at ``w / width`` of the merges. Call it on a new pool, after ``finer`` has been told
        every change (:meth:`changed`): a merge it holds is current.
        """
        res, fine = self.resolution, finer.resolution
        if (fine.lo, fine.hi) != (res.lo, res.hi) or res.width % fine.width or res.width <= fine.width:
            raise ValueError(f"cannot seed buckets of {res} from {fine}")
        for start, prefix in finer._prefixes.items():
            if (start - res.lo) % res.width or not prefix.parts or start in self._prefixes:
                continue
            mine = self._prefixes[start] = _Prefix(start)
            mine.parts = [prefix.parts[-1]]
            mine.offset = prefix.offset + len(prefix.parts) - 1

    def changed(self, batches: Iterable[int]) -> None:
        """Forget what pooled ``batches`` (observed or whose statistics changed)."""
        res = self.resolution
        for batch in batches:
            if res.contains(batch):
                prefix = self._prefixes.get(res.start_of(batch))
                if prefix is not None:
                    prefix.forget_from(batch)

    def trim(self, first_kept: int, before: int) -> None:
        """Drop merges of batches before ``first_kept`` in the buckets from the one holding ``before``."""
        res = self.resolution
        start = res.start_of(max(before, res.lo))
        last = first_kept if res.hi is None else min(first_kept, res.hi)
        while start <= last:
            prefix = self._prefixes.get(start)
            if prefix is not None:
                prefix.trim(first_kept)
            start += res.width

    def buckets(
        self, records: Sequence[BatchRecord], touched: Iterable[int] | None, first_kept: int = 0
    ) -> list[tuple[BatchRecord, int]]:
        """Pooled records of the buckets holding ``touched`` (None: all), with each bucket's last batch.

        What :func:`calwatch.views.resolution.bucket_records` returns, at one merge per new batch.
        Merges of batches before ``first_kept`` (which no call can change any more) are not kept
        (see :meth:`_Prefix.upto`).
        """
        res = self.resolution
        latest = len(records) - 1
        out = []
        for start in res.starts(touched, latest=latest):
            end = res.end_of(start, latest=latest)
            prefix = self._prefixes.get(start)
            if prefix is None:
                prefix = self._prefixes[start] = _Prefix(start)
            out.append((prefix.upto(records, end, first_kept), end))
        return out


# --------------------------------------------------------------------------- the datasets
class LiveDatasets:
    """Rows of a monitor's per-bucket datasets and timeline, for the buckets an update touched.

    Rows are JSON-safe dicts equal to those of :func:`calwatch.widget.view_datasets` and
    :func:`calwatch.views.dashboard.timeline` at the same resolution. Call :meth:`changed` with the
    batches of each notification before asking for rows. Build a new one after the monitor is
    (re)calibrated.

    Parameters
    ----------
    monitor : Monitor
        The monitor (read under its lock by the caller).
    """

    def __init__(self, monitor: Monitor) -> None:
        self._monitor = monitor
        self._pools: dict[Resolution, PooledBuckets] = {}
        self._intervals = ExactIntervals()
        self._window_start = self._first_window_batch()
        #: Detectors that looked at some batch (the current ones, and those of earlier calibrations).
        self._detectors: dict[str, None] = {}
        #: Per resolution and bucket: the looks folded over its batches before ``upto``.
        self._looks: dict[Resolution, dict[int, tuple[int, dict[str, Row]]]] = {}
        watch = monitor.shift_watch
        if watch is not None:
            self._detectors = dict.fromkeys(watch.looks.detectors())

    # ------------------------------------------------------------------ bookkeeping
    @property
    def window_start(self) -> int:
        """The first batch whose running merges are kept (earlier ones were dropped as settled)."""
        return self._window_start

    def _first_window_batch(self) -> int:
        window = self._monitor.window_records()
        return window[0].index if window else self._monitor.n_batches

    def changed(self, batches: Iterable[int]) -> list[int]:
        """Note a notification's batches; returns the batches that left the window since the last one."""
        touched = list(batches)
        for pool in self._pools.values():
            pool.changed(touched)
        first = self._first_window_batch()
        left = list(range(self._window_start, first))
        if left:
            for pool in self._pools.values():
                pool.trim(first, self._window_start)
        self._window_start = max(first, self._window_start)
        return left

    def keep(self, resolutions: Iterable[Resolution]) -> None:
        """Forget the pooled buckets of resolutions no longer shown."""
        wanted = set(resolutions)
        for res in list(self._pools):
            if res not in wanted:
                del self._pools[res]
                self._looks.pop(res, None)

    def _finer(self, resolution: Resolution) -> Resolution | None:
        """The widest held resolution over the same range whose width divides ``resolution``'s."""
        fits = [
            res
            for res in self._pools
            if (res.lo, res.hi) == (resolution.lo, resolution.hi)
            and res.width < resolution.width
            and resolution.width % res.width == 0
        ]
        return max(fits, key=lambda res: res.width, default=None)

    def _pooled(self, resolution: Resolution, touched: Iterable[int] | None) -> list[tuple[BatchRecord, int]]:
        pool = self._pools.get(resolution)
        if pool is None:
            pool = self._pools[resolution] = PooledBuckets(resolution)
            finer = self._finer(resolution)
            if finer is not None:  # the timeline's width doubled: start from the held buckets
                pool.seed_from(self._pools[finer])
                self._looks[resolution] = _combined_looks(self._looks.get(finer, {}), finer, resolution)
        buckets = pool.buckets(self._monitor.batch_records, touched, self._window_start)
        if touched is None:  # every bucket: keep only what the window's batches may change
            pool.trim(self._window_start, 0)
        return buckets

    # ------------------------------------------------------------------ rows
    def rows(self, resolution: Resolution, touched: Iterable[int] | None = None) -> dict[str, list[Row]]:
        """Rows of every per-bucket dataset, for the buckets holding ``touched`` (None: all)."""
        mon = self._monitor
        names = bucketed_names()
        if mon.calibration_ is None or mon.n_batches == 0:
            return {name: [] for name in names}
        touched = None if touched is None else list(touched)
        pooled = self._pooled(resolution, touched)
        if getattr(mon, "task", None) == "regression":
            frames = charts.bucket_datasets(mon, pooled, resolution)
            out: dict[str, list[Row]] = {name: [] for name in names}
            return out | {name: _json(frames[name]) for name in names if name in frames}
        kinds = {key: kind_of(cal) for key, cal in mon.calibrators.items()}
        targets = mon.targets()
        classes = [str(c) for c in mon.classes_.tolist()]
        out = {name: [] for name in names}
        out["batches"] = self._summary(pooled, resolution, kinds, targets)
        out |= self._sets(pooled, resolution, kinds, targets, classes)
        out |= self._kind_rows(pooled, resolution, kinds, targets, classes)
        out["shift"] = self._shift(resolution, touched)
        return out

    def summary(self, resolution: Resolution, touched: Iterable[int] | None = None) -> list[Row]:
        """The ``batches`` rows of the buckets holding ``touched`` (None: all)."""
        mon = self._monitor
        if mon.calibration_ is None or mon.n_batches == 0:
            return []
        if getattr(mon, "task", None) == "regression":
            return self.rows(resolution, touched)["batches"]
        pooled = self._pooled(resolution, touched)
        kinds = {key: kind_of(cal) for key, cal in mon.calibrators.items()}
        return self._summary(pooled, resolution, kinds, mon.targets())

    def card_rows(self, touched: Iterable[int] | None = None) -> dict[str, Row]:
        """``batches`` rows one batch each (what the overview cards sum), by key."""
        mon = self._monitor
        if mon.calibration_ is None or mon.n_batches == 0:
            return {}
        single = Resolution()
        if getattr(mon, "task", None) == "regression":
            return {r["key"]: r for r in self.rows(single, touched)["batches"]}
        records = mon.batch_records
        latest = len(records) - 1
        pooled = [(records[b], b) for b in single.starts(touched, latest=latest)]
        kinds = {key: kind_of(cal) for key, cal in mon.calibrators.items()}
        return {r["key"]: r for r in self._summary(pooled, single, kinds, mon.targets())}

    def timeline(self, width: int, touched: Iterable[int] | None = None) -> list[Row]:
        """Rows of :func:`~calwatch.views.dashboard.timeline` at bucket ``width`` (buckets of ``touched``)."""
        mon = self._monitor
        if mon.calibration_ is None:
            return []
        res = Resolution(width)
        out = []
        for record, end in self._pooled(res, touched):
            n = end - record.index + 1
            out.append(
                {
                    "key": str(record.index), "batch": record.index, "batch_end": end, "n_batches": n,
                    "name": record.name, "n_rows": record.n_rows, "n_labelled": record.n_labelled,
                    "rows": record.n_rows / n, "labelled": record.n_labelled / n,
                    "span_end": record.index + res.width - 1, "axis_end": res.axis_end(record.index),
                }
            )  # fmt: skip
        return out

    def _summary(
        self,
        pooled: Sequence[tuple[BatchRecord, int]],
        resolution: Resolution,
        kinds: Mapping[str, CalibratorKind[Any, Any]],
        targets: Mapping[str, float],
    ) -> list[Row]:
        """``batches`` rows: :meth:`Monitor.summary_of` with labels, spans and keys."""
        labels = charts.calibrator_labels(self._monitor)
        calibrators = self._monitor.calibrators
        described = {key: kinds[key].calibrator_columns(cal) for key, cal in calibrators.items()}
        schema = dict(_BASE_SUMMARY)
        for kind in kinds.values():
            schema |= kind.summary_columns
        cast = casters(schema)
        blank: Row = {name: None for kind in KINDS for name in kind.summary_columns} | {"n_covered": None}
        rows: list[Row] = []
        for record, end in pooled:
            where = span(resolution, record.index, end)
            for key, stats in record.stats.items():
                kind = kinds[key]
                values = {
                    "batch": record.index, "name": record.name, "calibrator": key, "kind": kind.summary_kind,
                    "target": targets.get(key), "n_rows": record.n_rows, "n_labelled": stats.n_labelled,
                    "in_window": record.rows is not None,
                } | kind.summary_row(stats, record.n_rows) | described[key]  # fmt: skip
                values |= kind.calibrated_columns(calibrators[key], stats, record.n_rows)
                row = blank | {name: c(values.get(name)) for name, c in cast.items()}
                row |= where
                row["key"] = _key(row["batch"], row["calibrator"])
                row["label"] = labels.get(key)
                rows.append(row)
        pairs = []
        for row in rows:
            n_rows, n_lab, n_cov = row["n_rows"], row["n_labelled"], row["n_covered"]
            row["n_pending"] = None if n_rows is None or n_lab is None else n_rows - n_lab
            row["coverage"] = n_cov / n_lab if n_cov is not None and n_lab else None
            pairs.append((n_cov or 0, n_lab if n_cov is not None else 0))
        if any(n > 0 for _, n in pairs):
            lows, highs = self._intervals.of(pairs)
        else:
            lows = highs = [None] * len(pairs)
        for row, lo, hi in zip(rows, lows, highs, strict=True):
            row["coverage_lo"], row["coverage_hi"] = lo, hi
        return rows

    def _sets(
        self,
        pooled: Sequence[tuple[BatchRecord, int]],
        resolution: Resolution,
        kinds: Mapping[str, CalibratorKind[Any, Any]],
        targets: Mapping[str, float],
        classes: Sequence[str],
    ) -> dict[str, list[Row]]:
        """``set_sizes`` and ``class_coverage`` rows of the calibrators whose kind predicts sets."""
        sizes: list[Row] = []
        by_class: list[Row] = []
        for record, end in pooled:
            where = span(resolution, record.index, end)
            batch = record.index
            for key, stats in record.stats.items():
                if not kinds[key].has_sets:
                    continue
                counts: Any = stats  # a set kind's statistics (CalibratorBatchStats)
                size_counts = counts.size_counts.tolist()
                for size, count in enumerate(size_counts):
                    if count:
                        row = {"batch": batch, "calibrator": key, "size": size, "count": count}
                        sizes.append(row | where | {"key": f"{batch}|{key}|{size}"})
                labelled, covered = counts.class_labelled.tolist(), counts.class_covered.tolist()
                target = targets.get(key)
                for c, n_lab in enumerate(labelled):
                    if n_lab:
                        row = {
                            "batch": batch, "calibrator": key, "class": classes[c], "n_labelled": n_lab,
                            "n_covered": covered[c], "target": None if target is None else float(target),
                        }  # fmt: skip
                        by_class.append(row | where | {"key": f"{batch}|{key}|{classes[c]}"})
        return {"set_sizes": sizes, "class_coverage": by_class}

    def _kind_rows(
        self,
        pooled: Sequence[tuple[BatchRecord, int]],
        resolution: Resolution,
        kinds: Mapping[str, CalibratorKind[Any, Any]],
        targets: Mapping[str, float],
        classes: Sequence[str],
    ) -> dict[str, list[Row]]:
        """Rows of the kinds' own per-bucket datasets (``admit_class``...)."""
        out: dict[str, list[Row]] = {}
        for kind in KINDS:
            mine = [key for key, k in kinds.items() if k is kind]
            for name, (row_schema, key_columns) in kind.record_datasets.items():
                cast = casters({"batch": pl.Int64, **row_schema})
                rows: list[Row] = []
                for record, end in pooled:
                    where = span(resolution, record.index, end)
                    for key, stats in record.stats.items():
                        if key not in mine:
                            continue
                        for part in kind.record_rows(name, key, stats, classes):
                            values = {"batch": record.index, "target": targets.get(key)} | part
                            row = {column: c(values.get(column)) for column, c in cast.items()} | where
                            row["key"] = _key(row["batch"], *(row[k] for k in key_columns))
                            rows.append(row)
                out[name] = rows
        return out

    def _shift(self, resolution: Resolution, touched: Sequence[int] | None) -> list[Row]:
        """``shift`` rows: per bucket and detector the highest statistic, the last threshold, any alarm.

        The latest bucket always comes along: label-based detectors look at the latest batch.
        """
        watch = self._monitor.shift_watch
        latest = self._monitor.n_batches - 1
        if watch is None or latest < 0:
            return []
        res = resolution
        starts = set(res.starts(touched, latest=latest))
        if res.contains(latest):
            starts.add(res.start_of(latest))
        looks = watch.looks
        if touched is None:  # a whole rebuild: every detector that ever looked
            self._detectors |= dict.fromkeys(looks.detectors())
        self._detectors |= dict.fromkeys(d.name for d in watch.detectors)
        names = list(self._detectors)
        folded = self._looks.setdefault(res, {})
        rows: list[Row] = []
        for start in sorted(starts):
            end = res.end_of(start, latest=latest)
            if res.width == 1:
                found = {name: look for name in names if (look := looks.get((name, start))) is not None}
            else:
                upto, done = folded.get(start, (start, {}))
                frozen = min(end + 1, latest)  # batches before the latest: their looks are final
                if upto < frozen:
                    done = _fold(done, looks, names, range(upto, frozen))
                    folded[start] = (frozen, done)
                elif upto > frozen:  # not what was asked before (a resolution re-used): fold again
                    done = _fold({}, looks, names, range(start, frozen))
                    folded[start] = (frozen, done)
                found = _fold(done, looks, names, range(max(frozen, start), end + 1))
            where = span(res, start, end)
            for name, look in found.items():
                row = {
                    "batch": start, "detector": name, "calibrator": _str(look.get("calibrator")),
                    "log10_statistic": _float(look.get("log10_statistic")),
                    "log10_threshold": _float(look.get("log10_threshold")), "alarm": _bool(look.get("alarm")),
                }  # fmt: skip
                rows.append(row | where | {"key": _key(name, start)})
        return rows


def _fold(
    done: Mapping[str, Row], looks: Mapping[tuple[str, int], Row], names: Sequence[str], batches: range
) -> dict[str, Row]:
    """Looks of ``batches`` folded into ``done``, per detector.

    The last calibrator and threshold, the highest statistic, any alarm: what the shift chart
    draws of a bucket.
    """
    out = dict(done)
    for batch in batches:
        for name in names:
            look = looks.get((name, batch))
            if look is not None:
                out[name] = _then(out.get(name), look)
    return out


def _then(before: Row | None, look: Row) -> Row:
    """A detector's folded look ``before`` followed by ``look`` (a batch's, or a later run's folded)."""
    if before is None:
        return dict(look)
    stat, prev = look.get("log10_statistic"), before.get("log10_statistic")
    return {
        "calibrator": look.get("calibrator"),
        "log10_statistic": prev if stat is None else (stat if prev is None else max(prev, stat)),
        "log10_threshold": look.get("log10_threshold"),
        "alarm": bool(before.get("alarm")) or bool(look.get("alarm")),
    }


def _combine(first: Mapping[str, Row], then: Mapping[str, Row]) -> dict[str, Row]:
    """Folded looks of two consecutive runs of batches as one: :func:`_fold` of both, exactly.

    The fold keeps per detector the highest statistic (max is exact in any grouping), the last
    calibrator and threshold, and whether any look alarmed, so folding the second run's folded
    look into the first's gives what folding its looks one by one gives.
    """
    out = dict(first)
    for name, look in then.items():
        out[name] = _then(out.get(name), look)
    return out


def _combined_looks(
    held: Mapping[int, tuple[int, dict[str, Row]]], finer: Resolution, resolution: Resolution
) -> dict[int, tuple[int, dict[str, Row]]]:
    """The folded looks of ``resolution``'s buckets, from those ``finer``'s buckets hold.

    A bucket's entry is ``(upto, folded)``: its looks before batch ``upto`` folded. Each bucket
    here chains the entries of the fine buckets it is made of while each one continues where
    the last stopped (a fine bucket folded to its end); :meth:`LiveDatasets._shift` folds the
    rest batch by batch, as from scratch.
    """
    out: dict[int, tuple[int, dict[str, Row]]] = {}
    for start in held:
        if (start - resolution.lo) % resolution.width:
            continue
        upto, folded = held[start]
        while upto - start < resolution.width and (upto - start) % finer.width == 0 and upto in held:
            nxt_upto, nxt = held[upto]
            if nxt_upto <= upto:
                break
            upto, folded = nxt_upto, _combine(folded, nxt)
        out[start] = (upto, folded)
    return out


def _json(frame: pl.DataFrame) -> list[Row]:
    """Frame rows as JSON-safe dicts (NaN and inf become null)."""
    rows = frame.to_dicts()
    for row in rows:
        for key, value in row.items():
            if isinstance(value, float) and not math.isfinite(value):
                row[key] = None
    return rows


__all__ = [
    "BASE_BUCKETED",
    "LiveDatasets",
    "PooledBuckets",
    "bucketed_names",
    "caster",
    "casters",
    "extend",
    "span",
]
