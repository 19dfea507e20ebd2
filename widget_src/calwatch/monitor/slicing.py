"""Where coverage fails: slice columns fixed at calibration, counted per batch, tested with FDR control.

:class:`Slicing` is a collaborator of :class:`~calwatch.monitor.Monitor`: it fixes the slice
columns' encoding at ``calibrate(meta=)``, encodes each batch's ``observe(meta=)``, turns a
batch's rows (and late labels, through the one label path of :mod:`calwatch.monitor.labels`) into
:class:`~calwatch.stream.slice_counts.SliceCounts`, and answers :meth:`Monitor.slices
<calwatch.monitor.monitor.Monitor.slices>` with exact binomial tests and a Benjamini–Hochberg
step-up over the slices looked at (:mod:`calwatch.engine.metrics.discovery`). What a slice is,
and what the counts cost, is :mod:`calwatch.stream.slices`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.engine.metrics.discovery import e_bh, shortfall_e_values, step_up
from calwatch.engine.metrics.discovery import shortfall_p_values as _p_values
from calwatch.engine.metrics.intervals import clopper_pearson
from calwatch.kinds import kind_of
from calwatch.shift.on_labels import CORRELATED_ROWS
from calwatch.stream.records import BatchRows
from calwatch.stream.slice_counts import SliceCounts, SliceStore
from calwatch.stream.slices import CodeArray, SliceEncoding, SliceError

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor

IntArray = npt.NDArray[np.intp]
#: Names of the multiplicity controls of :meth:`Slicing.slices`.
METHOD_NAMES = {
    "bh": "Benjamini-Hochberg",
    "by": "Benjamini-Yekutieli",
    "e-bh": "e-Benjamini-Hochberg on anytime-valid e-values",
}
#: Columns of :meth:`Monitor.slices`, with their types.
SLICES_SCHEMA: dict[str, Any] = {
    "calibrator": pl.String, "slice": pl.String, "by": pl.String, "n_rows": pl.Int64,
    "n_labelled": pl.Int64, "n_covered": pl.Int64, "coverage": pl.Float64, "coverage_lo": pl.Float64,
    "coverage_hi": pl.Float64, "target": pl.Float64, "mean_set_size": pl.Float64, "p_value": pl.Float64,
    "e_value": pl.Float64, "q_value": pl.Float64, "flagged": pl.Boolean, "fdr_method": pl.String,
    "fdr_level": pl.Float64, "n_tested": pl.Int64, "first_batch": pl.Int64, "last_batch": pl.Int64,
    "family": pl.String,
}  # fmt: skip
#: Confidence of the exact interval around each slice's coverage.
INTERVAL_CONFIDENCE = 0.95

By = str | tuple[str, str] | Sequence[str | tuple[str, str]] | None


class Slicing:
    """Slice columns and their counts (a collaborator of :class:`~calwatch.monitor.Monitor`).

    Stateless: it reads the monitor's ``_slices`` (a :class:`~calwatch.stream.slice_counts.SliceStore`,
    or None when the monitor was calibrated without ``meta=``); the monitor's public methods hold
    the lock and commit what it computes.
    """

    def __init__(self, monitor: Monitor) -> None:
        self.m: Monitor = monitor

    # ------------------------------------------------------------------ calibrate
    def fixed(self, meta: Any, bins: Mapping[str, Sequence[Any]] | None, n_rows: int) -> SliceStore | None:
        """The slice store ``calibrate`` commits: the monitor's own, a new one, or None (nothing changes).

        The encoding is fixed by the first ``calibrate`` given ``meta=``, before any batch: later
        calibrations keep it (their ``meta``, if given, must encode), so every batch of a stream
        is counted in the same cells.

        Raises
        ------
        ValueError, TypeError
            Naming the column or argument (see :meth:`Monitor.calibrate`).
        """
        store = self.m._slices
        if meta is None:
            if bins is not None:
                msg = "slice_bins needs meta=: the slice columns they cut"
                raise ValueError(msg)
            return store
        if store is not None:
            if bins is not None:
                msg = (
                    "slice_bins: the slice columns' encoding was fixed by the first calibrate(meta=) and "
                    "is kept, so every batch is counted alike (start a new Monitor to change it)"
                )
                raise ValueError(msg)
            store.encoding.codes(meta, n_rows)  # the same columns, of the same types
            return store
        if len(self.m._stream.batches):
            msg = (
                "meta: slice columns must be set up by calibrate() before the first batch (the batches "
                "observed so far have none); start a new Monitor to slice by them"
            )
            raise ValueError(msg)
        keys = tuple(key for key, cal in self.m._calibrators.items() if kind_of(cal).has_sets)
        if not keys:
            msg = "meta: no calibrator predicts sets, and slices count the coverage of prediction sets"
            raise ValueError(msg)
        return SliceStore(SliceEncoding.fit(meta, n_rows, bins), keys)

    # ------------------------------------------------------------------ observe
    def codes(self, meta: Any, n_rows: int) -> CodeArray | None:
        """A batch's slice codes (None for a monitor without slices), checked before anything changes.

        Raises
        ------
        ValueError, TypeError
            ``meta`` missing though the monitor slices, given though it does not, or a column that
            is missing, of the wrong length, nested or of another type than at calibration.
        """
        store = self.m._slices
        if store is None:
            if meta is not None:
                msg = (
                    "meta: this monitor was calibrated without slice columns; pass meta= to calibrate() "
                    "to fix their encoding, then to every observe()"
                )
                raise ValueError(msg)
            return None
        if meta is None:
            msg = (
                f"meta is required: calibrate() was given slice columns {list(store.encoding.names)}, "
                "so every batch needs them (meta=)"
            )
            raise ValueError(msg)
        if store.n_batches != len(self.m._stream.batches):  # a batch came in by another path
            msg = "the slice counts do not cover every batch of this monitor; slices cannot go on"
            raise SliceError(msg)
        return store.encoding.codes(meta, n_rows)

    def observed(self, codes: CodeArray, results: Mapping[str, Any]) -> SliceCounts:
        """A new batch's counts: its rows and each set calibrator's set sizes, per cell."""
        store = self._store()
        sizes = {}
        for key in store.calibrators:
            found = kind_of(self.m._calibrators[key]).set_sizes(results[key])
            assert found is not None  # set kinds only
            sizes[key] = found
        return store.observed(codes, sizes)

    def labelled(self, rows: BatchRows, index: IntArray, labels: Any) -> SliceCounts | None:
        """What labelling these rows adds to their batch's slice counts (a relabel takes the old away).

        None for a monitor without slices. Computed from the rows' kept slice codes and the sets
        they were shown (kept with the row, in the window or the row log), so a label 10⁶ rows
        late counts exactly as one that came at once.
        """
        store = self.m._slices
        if store is None or rows.slice_codes is None:
            return None
        task = self.m._task_labels
        old = task.stored(rows)[index]
        had = ~task.missing(old)
        codes = rows.slice_codes[index]
        delta = store.labelled(codes, self._covered(store, rows, index, labels))
        if had.any():
            before = self._covered(store, rows, index[had], old[had])
            delta = delta.merge(store.labelled(codes[had], before, sign=-1))
        return delta

    def _covered(
        self, store: SliceStore, rows: BatchRows, index: IntArray, labels: Any
    ) -> dict[str, npt.NDArray[np.bool_]]:
        out = {}
        for key in store.calibrators:
            cal = self.m._calibrators[key]
            kind = kind_of(cal)
            hits = kind.covered(kind.results_of(rows, key, cal).take(index), labels)
            assert hits is not None  # set kinds only
            out[key] = np.asarray(hits, dtype=bool)
        return out

    def _store(self) -> SliceStore:
        store = self.m._slices
        if store is None:
            msg = (
                "this monitor keeps no slices: pass the columns to slice by as meta= to calibrate() and "
                "to every observe()"
            )
            raise ValueError(msg)
        return store

    # ------------------------------------------------------------------ reads
    def slice_columns(self) -> pl.DataFrame:
        """See :meth:`Monitor.slice_columns`."""
        encoding = self._store().encoding
        partners: dict[int, list[str]] = {i: [] for i in range(len(encoding.columns))}
        for i, j in encoding.pairs:
            partners[i].append(encoding.columns[j].name)
            partners[j].append(encoding.columns[i].name)
        out: dict[str, list[Any]] = {"column": [], "family": [], "code": [], "slice": [], "paired_with": []}
        for i, column in enumerate(encoding.columns):
            for code, words in enumerate(column.labels):
                out["column"].append(column.name)
                out["family"].append(column.family)
                out["code"].append(code)
                out["slice"].append(words)
                out["paired_with"].append(partners[i])
        schema: dict[str, Any] = {"column": pl.String, "family": pl.String, "code": pl.Int64,
                                  "slice": pl.String, "paired_with": pl.List(pl.String)}  # fmt: skip
        return pl.DataFrame(out, schema=schema)

    def slices(
        self,
        calibrator: str | None = None,
        *,
        by: By = None,
        since: int | None = None,
        min_rows: int = 30,
        level: float = 0.1,
        method: str = "bh",
    ) -> pl.DataFrame:
        """See :meth:`Monitor.slices`."""
        store = self._store()
        keys = self._calibrator_keys(store, calibrator)
        tables = self._tables(store.encoding, by)
        if since is not None and (isinstance(since, bool) or not isinstance(since, int) or since < 0):
            msg = f"since must be a batch index (an integer ≥ 0) or None; got {since!r}"
            raise ValueError(msg)
        if isinstance(min_rows, bool) or not isinstance(min_rows, int) or min_rows < 1:
            msg = f"min_rows must be a positive integer; got {min_rows!r}"
            raise ValueError(msg)
        if method not in METHOD_NAMES:
            msg = f"method must be one of {sorted(METHOD_NAMES)}; got {method!r}"
            raise ValueError(msg)
        if isinstance(level, bool) or not isinstance(level, int | float) or not 0.0 < float(level) < 1.0:
            msg = f"level must be a number in (0, 1); got {level!r}"
            raise ValueError(msg)
        counts, first = store.pooled(since)
        last = store.n_batches - 1
        encoding = store.encoding
        cells = np.flatnonzero(np.isin(encoding.cell_tables(), tables))
        parts: list[dict[str, Any]] = []
        for key in keys:
            target = kind_of(self.m._calibrators[key]).target(self.m._calibrators[key])
            if target is None or not 0.0 < target < 1.0:
                continue  # a calibrator that promises no coverage has nothing to fall short of
            n = counts.n_labelled[cells]
            tested = cells[n >= min_rows]
            parts.append({
                "calibrator": [key] * tested.shape[0], "cell": tested,
                "n_rows": counts.n_rows[tested], "n_labelled": counts.n_labelled[tested],
                "n_covered": counts.n_covered(key)[tested], "size_sum": counts.set_size_sum(key)[tested],
                "target": np.full(tested.shape[0], float(target)),
            })  # fmt: skip
        joined = {name: np.concatenate([p[name] for p in parts]) if parts else np.zeros(0) for name in
                  ("cell", "n_rows", "n_labelled", "n_covered", "size_sum", "target")}  # fmt: skip
        names = [k for p in parts for k in p["calibrator"]]
        k_tested = len(names)
        p_values = _p_values(joined["n_covered"], joined["n_labelled"], joined["target"])
        e_values = shortfall_e_values(joined["n_covered"], joined["n_labelled"], joined["target"])
        if method == "e-bh":
            flagged, adjusted = e_bh(e_values, float(level))
        else:
            flagged, adjusted = step_up(p_values, float(level), method)
        lo, hi = clopper_pearson(joined["n_covered"], joined["n_labelled"], INTERVAL_CONFIDENCE)
        table_of = encoding.cell_tables()
        family = (
            f"FDR ≤ {float(level):g} ({METHOD_NAMES[method]}) over the {k_tested} (calibrator, slice) "
            f"tests with at least {min_rows} labelled rows, batches {first}–{last}: "
            f"{_tables_words(encoding, tables)}; calibrators {list(keys)}"
        )
        caution = self._caution()
        if caution:
            family = f"{family}; caution: {caution}"
        n_labelled = joined["n_labelled"].astype(np.int64)
        frame = pl.DataFrame(
            {
                "calibrator": names,
                "slice": [encoding.words(int(c)) for c in joined["cell"]],
                "by": [_table_words(encoding, int(table_of[int(c)])) for c in joined["cell"]],
                "n_rows": joined["n_rows"].astype(np.int64),
                "n_labelled": n_labelled,
                "n_covered": joined["n_covered"].astype(np.int64),
                "coverage": joined["n_covered"] / np.maximum(n_labelled, 1),
                "coverage_lo": lo,
                "coverage_hi": hi,
                "target": joined["target"].astype(np.float64),
                "mean_set_size": joined["size_sum"] / np.maximum(joined["n_rows"], 1),
                "p_value": p_values,
                "e_value": e_values,
                "q_value": adjusted,
                "flagged": flagged,
                "fdr_method": [METHOD_NAMES[method]] * k_tested,
                "fdr_level": np.full(k_tested, float(level)),
                "n_tested": np.full(k_tested, k_tested, dtype=np.int64),
                "first_batch": np.full(k_tested, first, dtype=np.int64),
                "last_batch": np.full(k_tested, last, dtype=np.int64),
                "family": [family] * k_tested,
            },
            schema=SLICES_SCHEMA,
        )
        evidence = pl.col("p_value") if method != "e-bh" else -pl.col("e_value")  # strongest first
        return frame.with_row_index("_order").sort([evidence, pl.col("_order")]).drop("_order")

    def _caution(self) -> str:
        """Why the rows may not be independent, as the binomial tests assume ("" when nothing says so).

        Each slice's test counts its labelled rows as independent draws. Rows that come in blocks
        (``calibrate(blocks=)``) or whose misses come in runs (the label detectors' runs check,
        :meth:`Monitor.notices`) are alike within a block, so a slice's rows carry less evidence
        than their number says, and a flag may be false.
        """
        watch = self.m._shift
        runs = [] if watch is None else [n for n in watch.notices() if n["examples"] == CORRELATED_ROWS]
        if self.m._rows_in_blocks:
            why = "rows come in blocks (blocks= was given)"
        elif runs:
            why = f"labelled rows look correlated ({runs[0]['detector']}: misses come in runs; see notices())"
        else:
            return ""
        return (
            f"{why}, and these tests count rows as independent: rows alike within a block carry less "
            "evidence than their number, so a flag may be false; read flags as leads"
        )

    def _calibrator_keys(self, store: SliceStore, calibrator: str | None) -> tuple[str, ...]:
        if calibrator is None:
            return store.calibrators
        if calibrator in store.calibrators:
            return (calibrator,)
        if calibrator in self.m._calibrators:
            msg = (
                f"calibrator {calibrator!r} predicts no sets: slices count set coverage (of "
                f"{list(store.calibrators)})"
            )
        else:
            msg = f"calibrator must be one of {list(store.calibrators)}; got {calibrator!r}"
        raise ValueError(msg)

    @staticmethod
    def _tables(encoding: SliceEncoding, by: By) -> list[int]:
        """The tables (single columns, counted pairs) ``by`` names; all of them for None."""
        tables = encoding.tables
        if by is None:
            return list(range(len(tables)))
        wanted = [by] if isinstance(by, str) or (isinstance(by, tuple) and len(by) == 2) else list(by)
        index = {name: i for i, name in enumerate(encoding.names)}
        out: list[int] = []
        for item in wanted:
            names = (item,) if isinstance(item, str) else tuple(item)
            unknown = [name for name in names if name not in index]
            if unknown or len(names) not in (1, 2) or len(set(names)) != len(names):
                msg = (
                    f"by: {item!r} is not a slice column or a pair of them (the slice columns are "
                    f"{list(encoding.names)})"
                )
                raise ValueError(msg)
            columns = tuple(sorted(index[name] for name in names))
            if columns not in tables:
                a, b = (encoding.columns[i] for i in columns)
                msg = (
                    f"by: the pair {names!r} is not counted ({a.n_codes} × {b.n_codes} cells; pairs are "
                    "counted up to 400 cells each and 4,096 in all, in column order)"
                )
                raise ValueError(msg)
            out.append(tables.index(columns))
        return sorted(set(out))


def _table_words(encoding: SliceEncoding, table: int) -> str:
    return " & ".join(encoding.columns[i].name for i in encoding.tables[table])


def _tables_words(encoding: SliceEncoding, tables: list[int]) -> str:
    singles = [_table_words(encoding, t) for t in tables if len(encoding.tables[t]) == 1]
    pairs = [_table_words(encoding, t) for t in tables if len(encoding.tables[t]) == 2]
    words = f"each value of {', '.join(singles)}" if singles else ""
    if pairs:
        words += ("; " if words else "") + f"each pair of values of {len(pairs)} column pairs"
    return words


__all__ = ["INTERVAL_CONFIDENCE", "METHOD_NAMES", "SLICES_SCHEMA", "Slicing"]
