"""The monitor's read API: summaries, coverage by class, set sizes, rows, what-if and warnings.

:class:`Reads` is a collaborator of :class:`~calwatch.monitor.Monitor`, which delegates to it:
every table a user or a view reads, each computed under the monitor's lock from its batch records and its
calibrators' kinds. The ``*_of(records)`` forms take any batch records, e.g. buckets pooled by
:func:`calwatch.stream.records.merge_records`; the statistics are counts, so a pooled record's table is
exactly that of all its rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.core.frame_cache import frame_cache_of
from calwatch.core.ids import uniform_scalar_ids
from calwatch.engine._validation import check_alpha
from calwatch.engine.metrics.intervals import clopper_pearson
from calwatch.kinds import KINDS, kind_of
from calwatch.kinds.admit import admitted_accuracy
from calwatch.kinds.base import null_where
from calwatch.shift.base import first_names
from calwatch.shift.on_labels import CORRELATED_ROWS
from calwatch.shift.watch import ShiftWatch
from calwatch.stream.records import NO_LABEL, BatchRecord

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor

IntArray = npt.NDArray[np.intp]
#: A Venn-ADMIT calibrator admitting less than this share of rows gets a row in ``notices()``.
ADMIT_NOTICE_SHARE = 0.01

#: Columns of :meth:`Monitor.summary`, in order. Kinds fill the middle ones
#: (:attr:`calwatch.kinds.base.CalibratorKind.summary_columns`); a new kind's columns that are not
#: listed here come after them, before ``in_window``.
SUMMARY_ORDER = (
    "batch", "name", "calibrator", "kind", "target", "n_rows", "n_labelled", "n_pending",
    "n_covered", "coverage", "coverage_lo", "coverage_hi", "mean_set_size", "singleton_share",
    "full_share", "estimated_error", "observed_error", "error_gap", "estimated_error_labelled",
    "error_band_lo", "error_band_hi", "estimate_promise", "alpha_level", "admitted_share",
    "n_admitted_labelled", "admitted_accuracy",
    "kept_share", "threshold", "n_kept_labelled", "kept_accuracy", "accuracy", "in_window", "observed_at",
)  # fmt: skip
_BASE_SUMMARY: dict[str, Any] = {
    "batch": pl.Int64, "name": pl.String, "calibrator": pl.String, "kind": pl.String,
    "target": pl.Float64, "n_rows": pl.Int64, "n_labelled": pl.Int64, "in_window": pl.Boolean,
    "observed_at": pl.Datetime("us", "UTC"),
}  # fmt: skip


class Reads:
    """Tables of a monitor's stream (a collaborator of :class:`~calwatch.monitor.monitor.Monitor`).

    Stateless: it reads and changes the monitor it is given.
    """

    def __init__(self, monitor: Monitor) -> None:
        self.m: Monitor = monitor

    def admitted_accuracy(self, *, by: str = "true", batches: tuple[int, ...] | None = None) -> pl.DataFrame:
        """See :meth:`Monitor.admitted_accuracy`."""
        if by not in ("true", "predicted"):
            msg = f"by must be 'true' or 'predicted'; got {by!r}"
            raise ValueError(msg)
        classes = [str(c) for c in self.m.classes_.tolist()]
        return admitted_accuracy(self.records(batches), classes, self.m.targets(), by=by)

    def warnings(self) -> pl.DataFrame:
        """See :meth:`Monitor.warnings`."""
        if self.m._shift is None:
            return ShiftWatch([]).warnings()
        return self.m._shift.warnings()

    def what_if_calibrators(self) -> list[str]:
        """See :meth:`Monitor.what_if_calibrators`."""
        return [key for key, cal in self.m._calibrators.items() if _levels_of(cal) is not None]

    def what_if(
        self, alpha: float, calibrators: list[str] | None = None, *, batches: Iterable[int] | None = None
    ) -> pl.DataFrame:
        """See :meth:`Monitor.what_if`."""
        alpha = check_alpha(alpha)
        wanted = None if batches is None else _batch_indices(batches)
        eligible = self.m.what_if_calibrators()
        keys = eligible if calibrators is None else list(calibrators)
        for key in keys:
            if key not in eligible:
                msg = (
                    f"calibrators: {key!r} cannot be recomputed at another level (choose from "
                    f"{eligible}: split conformal calibrators without user categories)"
                )
                raise ValueError(msg)
        out: dict[str, list[Any]] = {
            "batch": [], "calibrator": [], "n_rows": [], "n_labelled": [], "n_covered": [],
            "mean_set_size": [], "singleton_share": [],
        }  # fmt: skip
        for key in keys:
            levels = _levels_of(self.m._calibrators[key])
            assert levels is not None
            for record in self.m._stream.window_batches():
                if wanted is not None and record.index not in wanted:
                    continue
                rows = record.rows
                assert rows is not None
                sets = levels.sets_at_alpha(rows.probs, alpha, ids=rows.ids)
                labelled = np.flatnonzero(rows.labels != NO_LABEL)
                sizes = sets.sum(axis=1)
                out["batch"].append(record.index)
                out["calibrator"].append(key)
                out["n_rows"].append(record.n_rows)
                out["n_labelled"].append(int(labelled.shape[0]))
                out["n_covered"].append(int(sets[labelled, rows.labels[labelled]].sum()))
                out["mean_set_size"].append(float(sizes.mean()))
                out["singleton_share"].append(float((sizes == 1).mean()))
        schema: dict[str, Any] = {
            "batch": pl.Int64, "calibrator": pl.String, "n_rows": pl.Int64, "n_labelled": pl.Int64,
            "n_covered": pl.Int64, "mean_set_size": pl.Float64, "singleton_share": pl.Float64,
        }  # fmt: skip
        frame = pl.DataFrame(out, schema=schema)
        lo, hi = clopper_pearson(frame["n_covered"].to_numpy(), frame["n_labelled"].to_numpy())
        return frame.with_columns(
            alpha=pl.lit(alpha, dtype=pl.Float64),
            target=pl.lit(1.0 - alpha, dtype=pl.Float64),
            coverage=pl.when(pl.col("n_labelled") > 0).then(pl.col("n_covered") / pl.col("n_labelled")),
            coverage_lo=pl.Series(lo).fill_nan(None),
            coverage_hi=pl.Series(hi).fill_nan(None),
        ).select(
            "batch", "calibrator", "alpha", "target", "n_rows", "n_labelled", "n_covered", "coverage",
            "coverage_lo", "coverage_hi", "mean_set_size", "singleton_share",
        )  # fmt: skip

    def status(self) -> dict[str, int]:
        """See :meth:`Monitor.status`."""
        s = self.m._stream
        detector_notices = [] if self.m._shift is None else self.m._shift.notices()
        from_tables, pending_in_tables = self._table_rows()
        row_log = self.m.__dict__.get("_row_log")
        pending_in_log = 0 if row_log is None else int(row_log.rows_unlabelled)
        return {
            "rows_seen": s.rows_seen,
            "rows_labelled": s.rows_labelled,
            "rows_pending": s.rows_pending + pending_in_tables + pending_in_log,
            "batches": len(s.batches),
            "labels_unmatched": s.labels_unmatched,
            "labels_outside_classes": s.labels_outside_classes,
            "rows_in_window": s.rows_in_window,
            "classes_untested": sum(int(n["classes"]) for n in detector_notices),
            "detectors_on_correlated_rows": sum(n["examples"] == CORRELATED_ROWS for n in detector_notices),
            "admitting_nothing": len(self._admit_notices()),
            "rows_from_tables": from_tables,
            **self._row_log_counts(),
            **self._autosave_counts(),
        }

    def _autosave_counts(self) -> dict[str, int]:
        """Snapshots the autosaver wrote and saves that failed (``Monitor.autosave``), when it ran."""
        saver = self.m.__dict__.get("_autosave")
        if saver is None:
            return {}
        return {"autosaves": int(saver.saves), "autosave_errors": int(saver.errors)}

    def _row_log_counts(self) -> dict[str, int]:
        """Rows kept in the row log, labels applied from it, and spills that failed (a full disk)."""
        row_log = self.m.__dict__.get("_row_log")
        if row_log is None:
            return {}
        return {
            "rows_logged": int(row_log.rows_logged) + sum(r.n_rows for r in row_log.buffer),
            "labels_from_log": int(row_log.labels_applied),
            "row_log_errors": len(self.m._stream.spill_errors),
        }

    def sources(self) -> str:
        """See :meth:`Monitor.sources`."""
        registry = self.m.__dict__.get("_tables")
        return "" if registry is None else str(registry.describe())

    def _table_rows(self) -> tuple[int, int]:
        """Rows observed from tables (``observe_table``, Spark, Dask), and those still without a label.

        Table batches keep no rows in the window (their table is their row log), so their pending
        rows are counted from their statistics.
        """
        registry = self.m.__dict__.get("_tables")
        if registry is None:
            return 0, 0
        batches = self.m._stream.batches
        indices = [i for source in registry.sources for i in source.batches.values()]
        pending = sum(batches[i].n_rows - batches[i].n_labelled for i in indices)
        return int(registry.rows), int(pending)

    def notices(self) -> pl.DataFrame:
        """See :meth:`Monitor.notices`."""
        rows: list[dict[str, Any]] = []
        names = self.m._encoder.classes.tolist() if self.m._encoder is not None else []
        for key, cal in self.m._calibrators.items():
            quantiles = getattr(cal, "quantiles_", None)
            if getattr(cal, "mode_", None) != "label" or not isinstance(quantiles, dict):
                continue
            full = [c for c, q in quantiles.items() if q == float("inf")]
            if full:
                shown = [str(names[c]) if c < len(names) else str(c) for c in full]
                rows.append({
                    "calibrator": key, "detector": None, "classes": len(full),
                    "examples": first_names(shown),
                    "message": (
                        f"{len(full)} classes have too few calibration rows for their own threshold at "
                        f"α = {float(cal.alpha):g}: they are in every set (their coverage holds; sets "
                        "are larger by up to that many classes)"
                    ),
                })  # fmt: skip
        rows.extend(self._admit_notices())
        if self.m._shift is not None:
            rows.extend(self.m._shift.notices())
        schema: dict[str, Any] = {
            "calibrator": pl.String, "detector": pl.String, "classes": pl.Int64,
            "examples": pl.String, "message": pl.String,
        }  # fmt: skip
        return pl.DataFrame(rows, schema=schema)

    def _admit_notices(self) -> list[dict[str, Any]]:
        """A row per Venn-ADMIT calibrator that admits (almost) nothing: why, and what to try.

        "Almost nothing" is under :data:`ADMIT_NOTICE_SHARE` of the observed rows (of its own
        calibration rows, :attr:`VennAdmit.diagnostics_`, before any batch); the message is the
        calibrator's :meth:`~calwatch.engine.venn_admit.admit.VennAdmit.explain_rejections`.
        """
        rows: list[dict[str, Any]] = []
        for key, cal in self.m._calibrators.items():
            explain = getattr(cal, "explain_rejections", None)
            diagnostics = getattr(cal, "diagnostics_", None)
            if not callable(explain) or not isinstance(diagnostics, dict):
                continue
            seen = [(r.stats[key], r.n_rows) for r in self.m._stream.batches if key in r.stats]
            n_rows = sum(n for _, n in seen)
            admitted = sum(int(getattr(stats, "n_admitted", 0)) for stats, _ in seen)
            share = admitted / n_rows if n_rows else float(diagnostics["calibration_admit_share"])
            if share >= ADMIT_NOTICE_SHARE:
                continue
            where = f"of {n_rows} observed rows" if n_rows else "of its calibration rows (D_ca^vp)"
            rows.append({
                "calibrator": key, "detector": None, "classes": 0,
                "examples": f"κ = {diagnostics['kappa']}, KNN agreement {float(cal.agreement_):.2f}",
                "message": f"Venn-ADMIT admits {share:.1%} {where}: {explain()}",
            })  # fmt: skip
        return rows

    def targets(self) -> dict[str, float]:
        """See :meth:`Monitor.targets`."""
        out = {key: kind_of(cal).target(cal) for key, cal in self.m._calibrators.items()}
        return {key: value for key, value in out.items() if value is not None}

    def records(self, batches: tuple[int, ...] | None) -> Sequence[BatchRecord]:
        """The records of ``batches`` (all by default), refused unless batch numbers of this stream."""
        records = self.m._stream.batches
        if batches is None:
            return records
        picked = list(batches) if isinstance(batches, (tuple, list, range)) else None
        if picked is None or not all(
            isinstance(i, (int, np.integer)) and not isinstance(i, bool) and 0 <= i < len(records)
            for i in picked
        ):
            last = len(records) - 1
            msg = f"batches must be a tuple of batch numbers in 0..{last} (or None); got {batches!r}"
            raise ValueError(msg)
        return [records[i] for i in picked]

    def summary(self, batches: tuple[int, ...] | None = None) -> pl.DataFrame:
        """See :meth:`Monitor.summary`."""
        if batches is not None:
            return self.m.summary_of(self.records(batches))
        records = self.m._stream.batches
        return frame_cache_of(self.m, "summary").frame(
            self._read_context(),
            self._batch_tokens(),
            lambda picked: self.m.summary_of([records[i] for i in picked]),
        )

    def _batch_tokens(self) -> list[object]:
        """A token per batch, changed whenever its reads can (:mod:`calwatch.core.frame_cache`)."""
        return self.m._stream.batches.tokens()

    def _read_context(self) -> tuple[object, ...]:
        """What every batch's summary rows depend on besides the batch: the store and the calibrators."""
        context: list[object] = [self.m._stream.batches]
        for key, cal in self.m._calibrators.items():
            kind = kind_of(cal)
            context += [key, cal, repr(kind.target(cal)), repr(kind.calibrator_columns(cal))]
        return tuple(context)

    def summary_of(self, records: Sequence[BatchRecord]) -> pl.DataFrame:
        """See :meth:`Monitor.summary_of`."""
        targets = self.m.targets()
        kinds = {key: kind_of(cal) for key, cal in self.m._calibrators.items()}
        described = {key: kinds[key].calibrator_columns(cal) for key, cal in self.m._calibrators.items()}
        rows: list[dict[str, Any]] = []
        for record in records:
            for key, stats in record.stats.items():
                kind = kinds[key]
                rows.append(
                    {
                        "batch": record.index,
                        "name": record.name,
                        "calibrator": key,
                        "kind": kind.summary_kind,
                        "target": targets.get(key),
                        "n_rows": record.n_rows,
                        "n_labelled": stats.n_labelled,
                        "in_window": record.rows is not None,
                        "observed_at": record.observed_at,
                    }
                    | kind.summary_row(stats, record.n_rows)
                    | kind.calibrated_columns(self.m._calibrators[key], stats, record.n_rows)
                    | described[key]
                )
        schema = dict(_BASE_SUMMARY)
        for present in kinds.values():
            schema |= present.summary_columns
        frame = pl.DataFrame(rows, schema=schema)
        if "n_covered" not in frame.columns:
            frame = frame.with_columns(n_covered=pl.lit(None, dtype=pl.Int64))
        # Coverage and its exact interval, for the kinds that count covered rows.
        has_coverage = pl.col("n_covered").is_not_null() & (pl.col("n_labelled") > 0)
        covered = frame["n_covered"].fill_null(0).to_numpy()
        trials = np.where(frame["n_covered"].is_not_null().to_numpy(), frame["n_labelled"].to_numpy(), 0)
        lo, hi = clopper_pearson(covered, trials)
        frame = frame.with_columns(
            n_pending=pl.col("n_rows") - pl.col("n_labelled"),
            coverage=pl.when(has_coverage).then(pl.col("n_covered") / pl.col("n_labelled")),
            coverage_lo=pl.Series(lo).fill_nan(None),
            coverage_hi=pl.Series(hi).fill_nan(None),
        )
        missing = {name: dtype for kind in KINDS for name, dtype in kind.summary_columns.items()}
        frame = frame.with_columns(
            pl.lit(None, dtype=dtype).alias(name)
            for name, dtype in missing.items()
            if name not in frame.columns
        )
        known = [name for name in SUMMARY_ORDER if name in frame.columns]
        extra = [name for name in frame.columns if name not in SUMMARY_ORDER]
        return frame.select(*known[:-2], *extra, *known[-2:])

    def set_size_counts(self, batches: tuple[int, ...] | None = None) -> pl.DataFrame:
        """See :meth:`Monitor.set_size_counts`."""
        return self.m.set_size_counts_of(self.records(batches))

    def set_size_counts_of(self, records: Sequence[BatchRecord]) -> pl.DataFrame:
        """See :meth:`Monitor.set_size_counts_of`."""
        out: dict[str, list[Any]] = {"batch": [], "calibrator": [], "size": [], "count": []}
        with_sets = self._keys_with_sets()
        for record in records:
            for key, stats in record.stats.items():
                if key not in with_sets:
                    continue
                counts: Any = stats  # a set kind's statistics (CalibratorBatchStats)
                sizes = np.flatnonzero(counts.size_counts)
                out["batch"] += [record.index] * len(sizes)
                out["calibrator"] += [key] * len(sizes)
                out["size"] += sizes.tolist()
                out["count"] += counts.size_counts[sizes].tolist()
        schema = {"batch": pl.Int64, "calibrator": pl.String, "size": pl.Int64, "count": pl.Int64}
        return pl.DataFrame(out, schema=schema)

    def _keys_with_sets(self) -> set[str]:
        """Calibrators whose kind predicts sets (their statistics count set sizes and coverage)."""
        return {key for key, cal in self.m._calibrators.items() if kind_of(cal).has_sets}

    def class_coverage(
        self, batches: tuple[int, ...] | None = None, *, by_batch: bool = True
    ) -> pl.DataFrame:
        """See :meth:`Monitor.class_coverage`."""
        if batches is not None:
            return self.m.class_coverage_of(self.records(batches), by_batch=by_batch)
        records = self.m._stream.batches
        per_batch = frame_cache_of(self.m, "class_coverage").frame(
            (*self._read_context(), getattr(self.m, "_encoder", None)),
            self._batch_tokens(),
            lambda picked: self.m.class_coverage_of([records[i] for i in picked]),
        )
        if by_batch:
            return per_batch
        counts = per_batch.select("batch", "calibrator", "class", "n_labelled", "n_covered")
        return self._with_class_coverage(counts, by_batch=False)

    def class_coverage_of(self, records: Sequence[BatchRecord], *, by_batch: bool = True) -> pl.DataFrame:
        """See :meth:`Monitor.class_coverage_of`."""
        return self._with_class_coverage(self._class_counts_of(records), by_batch=by_batch)

    def _class_counts_of(self, records: Sequence[BatchRecord]) -> pl.DataFrame:
        """Labelled and covered rows per batch, set calibrator and class (classes with labelled rows)."""
        classes = self.m.classes_
        with_sets = self._keys_with_sets()
        out: dict[str, list[Any]] = {
            "batch": [], "calibrator": [], "class": [], "n_labelled": [], "n_covered": [],
        }  # fmt: skip
        for record in records:
            for key, stats in record.stats.items():
                if key not in with_sets:
                    continue
                counts: Any = stats  # a set kind's statistics (CalibratorBatchStats)
                present = np.flatnonzero(counts.class_labelled)
                out["batch"] += [record.index] * len(present)
                out["calibrator"] += [key] * len(present)
                out["class"] += [str(c) for c in classes[present].tolist()]
                out["n_labelled"] += counts.class_labelled[present].tolist()
                out["n_covered"] += counts.class_covered[present].tolist()
        schema: dict[str, Any] = {
            "batch": pl.Int64, "calibrator": pl.String, "class": pl.String,
            "n_labelled": pl.Int64, "n_covered": pl.Int64,
        }  # fmt: skip
        return pl.DataFrame(out, schema=schema)

    def _with_class_coverage(self, frame: pl.DataFrame, *, by_batch: bool) -> pl.DataFrame:
        """Per-class counts (pooled over batches unless ``by_batch``) with coverage, interval and target."""
        if not by_batch:
            frame = (
                frame.group_by("calibrator", "class", maintain_order=True)
                .agg(pl.col("n_labelled").sum(), pl.col("n_covered").sum())
                .sort("calibrator", "class")
            )
        lo, hi = clopper_pearson(frame["n_covered"].to_numpy(), frame["n_labelled"].to_numpy())
        targets = self.m.targets()
        return frame.with_columns(
            coverage=pl.col("n_covered") / pl.col("n_labelled"),
            coverage_lo=pl.Series(lo, dtype=pl.Float64),
            coverage_hi=pl.Series(hi, dtype=pl.Float64),
            target=pl.col("calibrator").replace_strict(targets, return_dtype=pl.Float64),
        )

    def rows(self, window: int | None = None, *, batch: int | None = None) -> pl.DataFrame:
        """See :meth:`Monitor.rows`."""
        classes = self.m.classes_
        records = self.m._stream.window_batches()
        if batch is not None:
            records = [r for r in records if r.index == batch]
            if not records:
                msg = f"batch {batch} is not in the window (its raw rows were dropped or never existed)"
                raise ValueError(msg)
        if window is not None:  # only the newest batches that hold the last ``window`` rows
            records = _newest_holding(records, int(window))
        frames = []
        for record in records:
            rows = record.rows
            assert rows is not None
            y_hat = rows.probs.argmax(axis=1)
            has_label = rows.labels != NO_LABEL
            columns: dict[str, Any] = {
                "batch": np.full(record.n_rows, record.index),
                "id": pl.Series("id", rows.ids, dtype=pl.Object)
                if not uniform_scalar_ids(rows.ids)
                else rows.ids,
                "prediction": classes[y_hat].tolist(),
                "confidence": rows.probs.max(axis=1),
                "label": _labels_or_null(classes, rows.labels, has_label),
            }
            for key, cal in self.m._calibrators.items():
                kind = kind_of(cal)
                columns |= kind.row_columns(key, kind.results_of(rows, key, cal), rows.labels, classes)
            if self.m._slices is not None:  # each slice column's value in words, as slices() names it
                for j, column in enumerate(self.m._slices.encoding.columns):
                    words = pl.Series(column.labels, dtype=pl.String)
                    codes = rows.slice_codes
                    columns[f"slice_{column.name}"] = (
                        pl.Series([None] * record.n_rows, dtype=pl.String)
                        if codes is None
                        else words.gather(codes[:, j].astype(np.int64))
                    )
            frames.append(pl.DataFrame(columns))
        if not frames:
            return pl.DataFrame()
        out = pl.concat(frames, how="vertical_relaxed")
        if window is not None:
            out = out.tail(int(window))
        return out


def _newest_holding(records: list[BatchRecord], n_rows: int) -> list[BatchRecord]:
    """The newest ``records`` holding the last ``n_rows`` rows (all if fewer; one at least: the columns)."""
    held, start = 0, len(records)
    while start > 0 and (held < n_rows or start == len(records)):
        start -= 1
        held += records[start].n_rows
    return records[start:]


def _labels_or_null(classes: npt.NDArray[Any], labels: npt.NDArray[np.int64], has_label: Any) -> pl.Series:
    """Each row's label as its class, null where it has none (no label at all: a column of nulls)."""
    if not has_label.any():
        return pl.Series([None] * len(labels))
    return null_where(pl.Series(classes[labels].tolist()), ~has_label)


def _batch_indices(batches: Iterable[int]) -> set[int]:
    """``batches`` as a set of batch indices; a clear error for anything else."""
    if isinstance(batches, (str, bytes)) or not isinstance(batches, Iterable):
        msg = f"batches must be an iterable of batch indices (int); got {type(batches).__name__}"
        raise TypeError(msg)
    out: set[int] = set()
    for b in batches:
        if isinstance(b, (bool, np.bool_)) or not isinstance(b, (int, np.integer)):
            msg = f"batches must hold batch indices (int); got {b!r} ({type(b).__name__})"
            raise TypeError(msg)
        out.add(int(b))
    return out


def _levels_of(calibrator: Any) -> Any:
    """A fitted calibrator's sets at any level, when its kind has them (split conformal, or ACI's)."""
    return kind_of(calibrator).levels(calibrator)
