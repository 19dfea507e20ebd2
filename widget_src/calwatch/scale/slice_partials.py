"""Slice counts on the table paths: a table's ``meta`` columns encoded chunk by chunk, counted per bucket.

A monitor calibrated with ``meta=`` counts, per batch, per *cell* (one value of a slice column or
a pair of values of two) and per set calibrator, the rows, the labelled rows, the covered rows
and the sum of set sizes (:class:`~calwatch.stream.slice_counts.SliceCounts`). On a table the
slice columns are named (``observe_table(..., meta=["carrier", "hour"])``, and the same for
Spark and Dask); the kernel encodes each chunk's columns with the monitor's fixed encoding
(:meth:`~calwatch.stream.slices.SliceEncoding.codes`, the same call ``observe(meta=)`` makes)
and emits the chunk's counts per bucket as one more statistic of the kernel's long table:

========== ======================= ==========================================================
calibrator field                   index, count
========== ======================= ==========================================================
``""``     :data:`SLICE_COUNTS`    ``r·cells + cell`` of the ``(2 + 2c, cells)`` count matrix,
                                   its value (zeros left out)
========== ======================= ==========================================================

Why this is exact: every entry is a count of rows (or a sum of integer set sizes) over the
bucket's rows, so the counts of a bucket are the sum of the counts of any split of its rows
into chunks, partitions or tasks — the same group-by sum that reduces every other statistic
(:mod:`calwatch.scale.fold`, Spark's ``groupBy().sum()``, Dask's ``groupby().agg``) reduces them,
with integer arithmetic: no rounding at all. In label mode the entries are the labels'
contribution, ``+1`` for each labelled row in ``labelled`` and, where its set held the label,
``covered``; a relabel also adds ``−1`` for the previous label (its ``labelled`` entry cancels,
its ``covered`` entry moves by ``covered_new − covered_old``), as
:meth:`SliceStore.labelled <calwatch.stream.slice_counts.SliceStore.labelled>` counts a late
label in memory.

The driver checks ``meta`` against the monitor before a row is read (:func:`check_meta`,
:func:`check_meta_types`) and rebuilds each bucket's counts from the reduced table
(:func:`slice_counts_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from calwatch.scale.columns import LogColumns
from calwatch.stream.slice_counts import CountArray, SliceCounts, SliceStore
from calwatch.stream.slices import CodeArray, SliceTypeError, family_of

#: The kernel's field of the slice counts (under the bucket's own calibrator ``""``).
SLICE_COUNTS = "slice_counts"
#: Count-matrix entries held at once while a chunk is counted (buckets are counted in blocks).
BLOCK_ENTRIES = 1 << 22

IntArray = npt.NDArray[np.intp]


def check_meta(store: SliceStore | None, columns: LogColumns) -> None:
    """Refuse ``meta`` that does not fit the monitor, before a row is read.

    Raises
    ------
    ValueError
        ``meta`` missing (or missing slice columns) though the monitor slices, naming the slice
        columns and how to pass them; ``meta`` given to a monitor that does not slice; or a
        ``meta`` column that is not a slice column.
    """
    if store is None:
        if columns.meta:
            msg = (
                f"meta={list(columns.meta)}: this monitor keeps no slices; calibrate(meta=...) fixes the "
                "slice columns' encoding first (from the calibration rows), then tables can pass them"
            )
            raise ValueError(msg)
        return
    names = store.encoding.names
    missing = [name for name in names if name not in columns.meta]
    if missing:
        given = "no meta=" if not columns.meta else f"meta={list(columns.meta)}, which lacks {missing}"
        msg = (
            f"this monitor slices its batches by the columns {list(names)} (fixed by calibrate(meta=)), and "
            f"the table was given {given}: name the table's slice columns, meta={list(names)}, so that "
            "every batch is counted in its slices"
        )
        raise ValueError(msg)
    extra = [name for name in columns.meta if name not in names]
    if extra:
        msg = (
            f"meta column {extra[0]!r} was not a slice column at calibrate(): the slice columns are "
            f"{list(names)}"
        )
        raise ValueError(msg)


def check_meta_types(store: SliceStore | None, columns: LogColumns, schema: pa.Schema | pl.Schema) -> None:
    """Refuse a slice column whose type differs from the calibration rows', from the table's schema.

    The same rule as :meth:`ColumnCode.encode <calwatch.stream.slices.ColumnCode.encode>`, which
    checks each chunk again: the column holds the family of values it held at calibration
    (numbers, booleans, text, dates and times; a date and a time may stand for each other), or no
    value at all (a column of nulls: every row is missing).

    Raises
    ------
    SliceTypeError
        Naming the column and both families, or a column of nested values or objects.
    """
    if store is None:
        return
    dtypes = _polars_types(schema, columns.meta)
    for column in store.encoding.columns:
        dtype = dtypes.get(column.name)
        if dtype is None:  # a type polars cannot read from the schema: each chunk's encode decides
            continue
        family = family_of(pl.Series(column.name, [], dtype=dtype))
        if family in (column.family, "null") or {family, column.family} == {"date", "datetime"}:
            continue
        msg = (
            f"meta column {column.name!r} holds {family} values, but {column.family} values when the "
            "monitor was calibrated: a slice column keeps its type"
        )
        raise SliceTypeError(msg)


def _polars_types(schema: pa.Schema | pl.Schema, names: tuple[str, ...]) -> dict[str, pl.DataType]:
    """The polars types of columns ``names`` of a polars or Arrow schema (unreadable ones left out)."""
    if isinstance(schema, pl.Schema):
        return {name: schema[name] for name in names if name in schema}
    out: dict[str, pl.DataType] = {}
    for name in names:
        if name not in schema.names:
            continue
        try:
            series = pl.from_arrow(pa.array([], type=schema.field(name).type))
        except (pl.exceptions.PolarsError, pa.ArrowException, TypeError, ValueError):
            continue
        if isinstance(series, pl.Series):
            out[name] = series.dtype
    return out


def chunk_codes(batch: pa.RecordBatch, store: SliceStore, columns: LogColumns) -> CodeArray:
    """Each row's slice codes, ``(rows, slice columns)`` int16, from the chunk's ``meta`` columns.

    Raises
    ------
    SliceError, SliceTypeError
        Naming the column (a type other than at calibration, nested values...).
    """
    table = pa.Table.from_batches([batch]).select(list(columns.meta))
    return store.encoding.codes(table, len(batch))


def bucket_counts(
    store: SliceStore,
    codes: CodeArray,
    buckets: IntArray,
    n_buckets: int,
    *,
    sizes: Mapping[str, npt.NDArray[np.integer[Any]]] | None,
    labelled: IntArray,
    covered: Mapping[str, npt.NDArray[np.bool_]],
    relabelled: IntArray,
    covered_before: Mapping[str, npt.NDArray[np.bool_]],
) -> list[tuple[int, npt.NDArray[np.int32], CountArray]]:
    """A chunk's slice counts per bucket, as ``(bucket code, flat index, count)`` of the nonzero entries.

    Parameters
    ----------
    store : SliceStore
        The encoding and the set calibrators counted.
    codes : ndarray of shape (m, n_columns)
        The chunk's slice codes.
    buckets : ndarray of shape (m,)
        Each row's bucket code, ``0 … n_buckets − 1``.
    n_buckets : int
        Buckets in the chunk.
    sizes : dict of str to ndarray of shape (m,), optional
        Each set calibrator's set sizes: the rows are *observed* (rows and set-size sums are
        counted). None in label mode.
    labelled : ndarray of int
        Rows whose label counts now (``+1`` labelled; ``covered[key]`` says, per labelled row in
        this order, whether calibrator ``key``'s set held it).
    relabelled : ndarray of int
        Rows among ``labelled`` that had a label: its counts are taken away (``covered_before``).

    Returns
    -------
    list of (int, ndarray, ndarray)
        Per bucket with a nonzero entry: its code, the entries' flat indices into the
        ``(2 + 2c, cells)`` matrix (:class:`~calwatch.stream.slice_counts.SliceCounts` layout),
        and their values.
    """
    encoding = store.encoding
    n, c = encoding.n_cells, len(store.calibrators)
    cells = encoding.cells(codes)
    keys = buckets.astype(np.intp)[:, None] * n + cells
    block = max(1, BLOCK_ENTRIES // ((2 + 2 * c) * n))
    out: list[tuple[int, npt.NDArray[np.int32], CountArray]] = []
    for first in range(0, n_buckets, block):
        span = min(n_buckets, first + block) - first
        window = (first, span, n, span == n_buckets)
        counts = np.zeros((span, 2 + 2 * c, n), dtype=np.int64)
        if sizes is not None:
            counts[:, 0] = _counted(keys, None, window)
            for k, key in enumerate(store.calibrators):
                counts[:, 2 + c + k] = _counted(keys, None, window, sizes[key])
        if labelled.shape[0]:
            counts[:, 1] += _counted(keys, labelled, window)
            for k, key in enumerate(store.calibrators):
                counts[:, 2 + k] += _counted(keys, labelled[np.asarray(covered[key], dtype=bool)], window)
        if relabelled.shape[0]:
            counts[:, 1] -= _counted(keys, relabelled, window)
            for k, key in enumerate(store.calibrators):
                hit = np.asarray(covered_before[key], dtype=bool)
                counts[:, 2 + k] -= _counted(keys, relabelled[hit], window)
        flat = counts.reshape(span, -1)
        for b in range(span):
            where = np.flatnonzero(flat[b])
            if where.shape[0]:
                out.append((first + b, where.astype(np.int32), flat[b, where]))
    return out


def _counted(
    keys: IntArray, rows: IntArray | None, window: tuple[int, int, int, bool], weights: Any = None
) -> CountArray:
    """Rows (or their integer ``weights``) per cell of buckets ``first … first + span − 1``, ``(span, n)``.

    ``keys`` is ``bucket · n + cell`` per row and table, ``rows`` the rows counted (None: every
    row), ``window`` is ``(first, span, n, whole)`` (``whole``: the window holds every bucket, so
    no key falls outside it). As :meth:`SliceStore.observed
    <calwatch.stream.slice_counts.SliceStore.observed>` counts: a weighted count (set sizes) is
    summed in float64 and rounded, exact below 2⁵³.
    """
    first, span, n, whole = window
    flat = (keys if rows is None else keys[rows]).ravel()
    w = None
    if weights is not None:
        chosen = np.asarray(weights, dtype=np.float64)
        w = np.repeat(chosen if rows is None else chosen[rows], keys.shape[1])
    if not whole:
        flat = flat - first * n
        inside = (flat >= 0) & (flat < span * n)
        flat = flat[inside]
        w = None if w is None else w[inside]
    got = np.bincount(flat, weights=w, minlength=span * n)
    if w is not None:
        got = np.rint(got)
    found: CountArray = got.astype(np.int64).reshape(span, n)
    return found


def slice_counts_of(store: SliceStore, index: npt.NDArray[Any], count: npt.NDArray[Any]) -> SliceCounts:
    """One bucket's :class:`~calwatch.stream.slice_counts.SliceCounts` from its reduced entries.

    Raises
    ------
    ValueError
        If an entry lies outside the count matrix (partials of another encoding).
    """
    out = SliceCounts.empty(store.calibrators, store.encoding.n_cells)
    flat = out.counts.reshape(-1)
    index = np.asarray(index, dtype=np.intp)
    if index.shape[0] and (index.min() < 0 or index.max() >= flat.shape[0]):
        msg = "partial slice counts lie outside the monitor's slice cells (partials of another encoding?)"
        raise ValueError(msg)
    np.add.at(flat, index, np.asarray(count, dtype=np.int64))
    return out


def check_bucket_counts(counts: SliceCounts, store: SliceStore, n_rows: int) -> list[str]:
    """Violations of an observed bucket's slice counts: the counts' own, and every table must hold every row.

    Each row lies in exactly one cell of each table (each slice column, each counted pair), so
    every table's row counts sum to the bucket's rows.
    """
    problems = counts.check()
    offsets = np.asarray(store.encoding.offsets)
    totals = np.add.reduceat(counts.n_rows, offsets[:-1]) if counts.n_rows.shape[0] else np.zeros(0)
    if np.any(totals != n_rows):
        problems.append(f"a slice table counts {int(totals.min())} to {int(totals.max())} rows, not {n_rows}")
    return problems


__all__ = [
    "BLOCK_ENTRIES",
    "SLICE_COUNTS",
    "bucket_counts",
    "check_bucket_counts",
    "check_meta",
    "check_meta_types",
    "chunk_codes",
    "slice_counts_of",
]
