"""Monitor a prediction log held in a Dask DataFrame: the kernel per partition, a reduction, one commit.

The Dask twin of :mod:`calwatch.scale.spark`, with the same kernel and the same promise: a monitor fed
:func:`observe` holds the statistics of one that observed the same rows bucket by bucket with
:meth:`Monitor.observe <calwatch.monitor.monitor.Monitor.observe>` (counts exactly, float sums to rounding).

What runs where:

* client: the calibrators are frozen to bytes (:mod:`calwatch.scale.frozen`, never pickle) and
  put in the graph once, as one key every partition's task depends on; the schema (the meta) is
  checked before anything is computed;
* workers: ``ddf.map_partitions`` converts each pandas partition to Arrow and runs the kernel
  (the bytes decoded once per worker process), giving a small pandas frame of partial
  statistics; ``groupby(bucket, calibrator, field, index).agg(sum, sum, max)`` reduces them,
  and the check that no id repeats anywhere in the table (64-bit id hashes, sorted in 64 hash
  partitions, a repeat confirmed on the rows) runs in the same ``dask.compute``;
* client again: the reduced frame (buckets × calibrators × (3K + 2) rows at most) is merged
  into the monitor under its lock, all or nothing.

A monitor that slices (``calibrate(meta=)``) is given the slice columns (``meta=[...]``): each
partition's kernel encodes them with the monitor's fixed encoding (in the frozen bytes) and emits
each bucket's slice counts beside its other partials, reduced by the same ``groupby().agg``, exactly
(integers; :mod:`calwatch.scale.slice_partials`); :func:`label` encodes the labelled rows'
columns again from the observed DataFrame.

Whatever scheduler is active runs it: the synchronous or threaded one, or a
``distributed.Client``'s cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import polars as pl
import pyarrow as pa

from calwatch.monitor.labels import LabelReport
from calwatch.scale import remote
from calwatch.scale.collect import (
    LabelCall,
    Snapshot,
    check_ids_of,
    check_label_facts,
    check_names,
    commit_observed_partials,
    engine_sources,
    repeated_id,
    snapshot,
    unjoinable,
)
from calwatch.scale.columns import LogColumns
from calwatch.scale.duplicates import PARTITIONS, grouped_hashes, key_hashes, repeated
from calwatch.scale.kernel import partial_schema, partial_statistics
from calwatch.scale.pins import FilePin, check_pins, pin_files
from calwatch.scale.reduce import KEYS
from calwatch.scale.registry import BUCKET, ID, LABEL, TableSource
from calwatch.scale.slice_partials import check_meta, check_meta_types

if TYPE_CHECKING:
    from dask.dataframe import DataFrame

ENGINE = "dask"
#: The kernel workers run (signature of :func:`~calwatch.scale.kernel.partial_statistics`; a seam for tests).
KERNEL: remote.Kernel = partial_statistics
_AGGREGATIONS = {"count": "sum", "total": "sum", "constant": "max"}


def observe(
    mon: Any,
    ddf: DataFrame,
    *,
    id: str,
    probs: str | Sequence[str],
    bucket: str,
    label: str | None = None,
    category: str | None = None,
    meta: str | Sequence[str] | None = None,
) -> tuple[int, ...]:
    """Observe every row of a Dask DataFrame: one batch per bucket, in sorted bucket order.

    Parameters and errors as :func:`calwatch.scale.spark.observe`: ``probs`` names one numeric column
    per class (or one column of lists), ``bucket`` the column whose values make the batches,
    ``meta`` the slice columns of a monitor that slices; bad columns are refused before anything
    is computed, bad rows when their partition is, both naming the column (a ``ValueError``, or
    a ``TypeError`` for a slice column of another type than at calibration), and the monitor is
    then unchanged. A pandas ``object`` column is taken as text.

    Returns
    -------
    tuple of int
        The new batches' indices.

    Notes
    -----
    The monitor keeps the DataFrame's graph, not its rows: :func:`label` reads it again, so it
    must keep returning the same rows.
    """
    columns = LogColumns.of(id=id, bucket=bucket, probs=probs, label=label, category=category, meta=meta)
    snap = snapshot(mon)
    check_meta(snap.frozen.slices, columns)
    names = columns.needed()
    check_names(list(ddf.columns), names, "the DataFrame")
    schema = _arrow_schema(ddf._meta[names], columns)
    columns.check_schema(schema, snap.frozen.n_classes)
    check_meta_types(snap.frozen.slices, columns, schema)
    id_kind = check_ids_of(mon, schema, columns.id)
    pins = pinned_inputs(ddf)
    partials = _partials(ddf[names], snap, columns, observed=True)
    # One compute of delayed objects only (Dask warns when collections and expressions mix):
    # the reduced partials (one partition) and the repeated hashes of each hash partition.
    reduced_parts = partials.groupby(KEYS).agg(_AGGREGATIONS).to_delayed()
    computed = _compute(*reduced_parts, *_repeated_hashes(ddf, id))
    reduced = pd.concat(computed[: len(reduced_parts)])
    repeated = np.concatenate(computed[len(reduced_parts) :])
    if repeated.shape[0]:
        found = _confirmed_repeat(ddf[[bucket, id]], bucket, id, repeated)
        if found is not None:
            raise repeated_id(id, *found)
    check_pins(pins, "while it was read")
    source = TableSource(ENGINE, ddf, columns, pins=pins)
    return commit_observed_partials(mon, snap, _polars(reduced), source, id_kind)


def pinned_inputs(ddf: DataFrame) -> tuple[FilePin, ...]:
    """The local parquet files ``ddf`` reads (its ``read_parquet`` expressions), pinned; none otherwise.

    ``dd.read_parquet`` lists its files when the DataFrame is made and keeps the list, so a file
    landing later is not read; a file rewritten in place would be, so the pins are checked after
    the observe pass and before each label join (:mod:`calwatch.scale.pins`). Files on other
    file systems, or DataFrames not read from parquet, are not pinned: Dask reads them as they
    are then.
    """
    files: list[str] = []
    try:
        nodes = list(ddf.expr.walk())
        for node in nodes:
            if "ReadParquet" not in type(node).__name__:
                continue
            info = node._dataset_info
            protocol = getattr(info.get("fs"), "protocol", None)
            protocols = protocol if isinstance(protocol, tuple) else (protocol,)
            if "file" not in protocols and "local" not in protocols:
                return ()
            files.extend(str(f) for f in info["ds"].files)
    except Exception:  # another expression API: nothing to pin
        return ()
    return pin_files(sorted(set(files))) if files else ()


def _repeated_hashes(ddf: DataFrame, id: str) -> list[Any]:
    """Delayed arrays of the id hashes seen more than once, one per hash partition.

    Each Dask partition's keys are hashed and grouped by their top bits
    (:func:`calwatch.scale.duplicates.grouped_hashes`, as ``observe_table`` does); hash
    partition ``p`` then gathers group ``p`` of every Dask partition and sorts it. A grouped
    count (``groupby.size``) held every distinct pair in pandas objects: 2 GiB
    for 10⁷ rows; here the hashes take 8 bytes a row, and one sort ``n/64`` of them. Computed
    with the partials, so the log is read once.
    """
    import dask

    keyed = [dask.delayed(_grouped_keys, pure=True)(part, id) for part in ddf[[id]].to_delayed()]
    return [dask.delayed(_repeats_in_group, pure=True)(keyed, p) for p in range(PARTITIONS)]


def _grouped_keys(part: pd.DataFrame, id: str) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """One Dask partition's id hashes grouped by hash partition (runs on a worker)."""
    return grouped_hashes(pa.RecordBatch.from_pandas(part, preserve_index=False), id)


def _repeats_in_group(
    keyed: list[tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]], p: int
) -> npt.NDArray[np.uint64]:
    """The hashes of hash partition ``p`` seen more than once across all Dask partitions."""
    return repeated(np.concatenate([hashes[bounds[p] : bounds[p + 1]] for hashes, bounds in keyed]))


def _confirmed_repeat(
    keys: DataFrame, bucket: str, id: str, hashes: npt.NDArray[np.uint64]
) -> tuple[Any, int, list[Any]] | None:
    """The first ``(id, times, buckets)`` truly repeated among rows whose id hash is in ``hashes``.

    A hash collision (probability about ``n²/2⁶⁵``) must not refuse a good log: the rows decide.
    """
    meta = keys._meta
    rows = keys.map_partitions(_rows_hashed_in, id, hashes, meta=meta).compute()
    sizes = rows.groupby(id, sort=True).size()
    sizes = sizes[sizes > 1]
    if sizes.empty:
        return None
    first_id, times = sizes.index[0], sizes.iloc[0]
    buckets = rows.loc[rows[id] == first_id, bucket].tolist()
    return _plain(first_id), int(times), [_plain(b) for b in buckets]


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds (an error then reads ``71``, not ``np.int64(71)``)."""
    return value.item() if isinstance(value, np.generic) else value


def _rows_hashed_in(part: pd.DataFrame, id: str, hashes: npt.NDArray[np.uint64]) -> pd.DataFrame:
    """The rows of one partition whose key hash is one of ``hashes``."""
    if len(part) == 0:
        return part
    found = np.isin(key_hashes(pa.RecordBatch.from_pandas(part, preserve_index=False), id), hashes)
    return part[found]


def label(mon: Any, labels_ddf: DataFrame, *, id: str, label: str) -> LabelReport:
    """Join late labels by id to the DataFrames observed with :func:`observe`; update the batches they touch.

    As :func:`calwatch.scale.spark.label`: a relabel replaces the row's previous label in every count
    (the slice counts of a monitor that slices included), labels for unknown ids are counted as
    unmatched, and a rejected call changes nothing.

    Returns
    -------
    LabelReport
        Labels matched and unmatched, rows relabelled, batches changed.
    """
    check_names(list(labels_ddf.columns), [id, label], "the labels DataFrame")
    check_ids_of(mon, _id_schema(labels_ddf._meta, id), id)
    snap = snapshot(mon)
    sources = engine_sources(mon, ENGINE)
    labels = labels_ddf[[id, label]]
    n, null_labels, null_ids, distinct = _compute(
        labels[id].size, labels[label].isna().sum(), labels[id].isna().sum(), labels[id].nunique()
    )
    check_label_facts(n=int(n), null_labels=int(null_labels), null_ids=int(null_ids), distinct=int(distinct),
                      id=id, label=label)  # fmt: skip
    if int(n) == 0:
        return LabelReport(0, 0, 0, ())
    call = LabelCall.start(snap, int(n))
    try:
        for source in sources:
            _label_source(snap, call, source, labels, id, label)
    except BaseException:
        call.discard()
        raise
    return call.commit(mon)


def _label_source(snap: Snapshot, call: LabelCall, source: TableSource, labels: DataFrame, id: str,
                  label: str) -> None:  # fmt: skip
    """One observed DataFrame's share of a label call: join, look up previous labels, kernel, reduce."""
    columns = source.columns
    ddf: DataFrame = source.source
    check_pins(source.pins, "since it was observed")
    kept, theirs = ddf._meta[columns.id].dtype, labels._meta[id].dtype
    if not _joinable(kept, theirs):
        raise unjoinable(columns.id, str(theirs), str(kept))
    inputs = [n for n in columns.needed() if n != columns.label]
    rows = ddf[[*inputs, *([columns.label] if columns.label else [])]]
    if columns.label is not None:
        rows = rows.rename(columns={columns.label: remote.SOURCE_LABEL})
    rows = rows[rows[columns.bucket].isin(list(source.batches))]
    renamed = labels.rename(columns={id: columns.id, label: LABEL})
    joined = rows.merge(renamed, on=columns.id, how="inner").persist()
    (found,) = _compute(joined[[columns.id, columns.bucket, LABEL]])
    labelled = _polars(found).rename({columns.id: ID, columns.bucket: BUCKET})
    if labelled.height == 0:
        call.add(source, pl.DataFrame(), labelled)
        return
    joined = _with_logged(joined, source, labelled)
    partials = _partials(joined, snap, columns, observed=False)
    (reduced,) = _compute(partials.groupby(KEYS).agg(_AGGREGATIONS), renames={LABEL: label})
    check_pins(source.pins, "while labels were joined to it")
    call.add(source, _polars(reduced), labelled)


def _with_logged(joined: DataFrame, source: TableSource, labelled: pl.DataFrame) -> DataFrame:
    """``joined`` with column ``LOGGED``: each row's last label from earlier label calls (a small merge)."""
    previous = source.labels.previous(labelled.lazy().select(ID))
    if previous is None:
        return joined
    logged = previous.collect()
    if logged.height == 0:
        return joined
    columns = source.columns
    small = logged.to_arrow(compat_level=pl.CompatLevel.oldest()).to_pandas()
    small = small.rename(columns={ID: columns.id, BUCKET: columns.bucket, LABEL: remote.LOGGED})
    meta = joined._meta
    for name in (columns.id, columns.bucket):
        small[name] = small[name].astype(meta[name].dtype)
    return joined.merge(small, on=[columns.id, columns.bucket], how="left")


def _partials(ddf: DataFrame, snap: Snapshot, columns: LogColumns, *, observed: bool) -> DataFrame:
    """The kernel on every partition: a Dask DataFrame of partial statistics."""
    import dask

    data = snap.frozen.to_bytes()
    bucket_dtype = ddf._meta[columns.bucket].dtype
    meta = _as_pandas(None, bucket_dtype)
    return ddf.map_partitions(
        _partition_statistics, remote.digest(data), dask.delayed(data, pure=True), columns, observed,
        KERNEL, bucket_dtype, meta=meta, align_dataframes=False,
    )  # fmt: skip


def _partition_statistics(
    part: pd.DataFrame, key: str, data: bytes, columns: LogColumns, observed: bool, kernel: remote.Kernel,
    bucket_dtype: Any,
) -> pd.DataFrame:  # fmt: skip
    """One partition's partial statistics (runs on a worker)."""
    if len(part) == 0:
        return _as_pandas(None, bucket_dtype)
    frozen = remote.frozen_for(key, lambda: data)
    batch = pa.RecordBatch.from_pandas(part, preserve_index=False)
    out = remote.raising_marked(batch, frozen, columns, observed=observed, kernel=kernel)
    return _as_pandas([out], bucket_dtype)


def _as_pandas(batches: list[pa.RecordBatch] | None, bucket_dtype: Any) -> pd.DataFrame:
    """Partial statistics as pandas, with the same dtypes for every partition and the meta."""
    table = pa.Table.from_batches(batches) if batches else partial_schema(pa.null()).empty_table()
    frame = table.to_pandas()
    frame["bucket"] = frame["bucket"].astype(bucket_dtype)
    return frame.astype({"index": np.int32, "count": np.int64, "total": np.float64, "constant": np.float64})


def _compute(*collections: Any, renames: dict[str, str] | None = None) -> tuple[Any, ...]:
    """``dask.compute``, with a kernel error from a worker re-raised with its own message."""
    import dask

    try:
        return tuple(dask.compute(*collections))
    except (ValueError, TypeError) as err:
        found = remote.unmarked(err, renames)
        if found is None:
            raise
        raise found from None


def _polars(frame: pd.DataFrame) -> pl.DataFrame:
    """A computed pandas frame as polars (its index, e.g. the group-by keys, as columns)."""
    if not isinstance(frame.index, pd.RangeIndex):
        frame = frame.reset_index()
    return pl.from_pandas(frame)


def _id_schema(meta: pd.DataFrame, id: str) -> pa.Schema:
    """The Arrow schema of the meta's id column (an object column's ids taken as strings, as below)."""
    if pd.api.types.is_object_dtype(meta[id].dtype):
        return pa.schema([pa.field(id, pa.string())])
    return pa.Schema.from_pandas(meta[[id]], preserve_index=False)


def _arrow_schema(meta: pd.DataFrame, columns: LogColumns) -> pa.Schema:
    """The Arrow schema of the meta, for the checks made before anything is computed.

    An object column's values are not in the meta: one is refused as a class probability column,
    taken as a list of floats for a list column of probabilities, and as strings otherwise.
    """
    fields = []
    for name in meta.columns:
        dtype = meta[name].dtype
        if name == columns.probs and pd.api.types.is_string_dtype(dtype):
            msg = (
                f"probs column {name!r} must be a list of numbers; got {dtype} (Dask stores object columns "
                "as strings: give it a pyarrow list dtype, pd.ArrowDtype(pa.list_(pa.float64())))"
            )
            raise ValueError(msg)
        if pd.api.types.is_object_dtype(dtype):
            if name == columns.probs:
                fields.append(pa.field(name, pa.list_(pa.float64())))
                continue
            if name in columns.prob_columns:
                msg = f"probs column {name!r} must be numeric; got {dtype}"
                raise ValueError(msg)
            fields.append(pa.field(name, pa.string()))
            continue
        fields.append(pa.Schema.from_pandas(meta[[name]], preserve_index=False).field(name))
    return pa.schema(fields)


def _joinable(kept: Any, theirs: Any) -> bool:
    """Whether two id columns merge without a lossy cast: the same dtype, both integers or both strings."""
    kinds = {pd.api.types.is_integer_dtype(kept), pd.api.types.is_integer_dtype(theirs)}
    strings = pd.api.types.is_string_dtype(kept) and pd.api.types.is_string_dtype(theirs)
    return bool(kept == theirs or kinds == {True} or strings)


__all__ = ["KERNEL", "label", "observe"]
