"""The one kernel: logged rows in, partial batch statistics out (Arrow to Arrow, engine-agnostic).

:func:`partial_statistics` takes an Arrow ``RecordBatch`` of a prediction log and the frozen
calibrators, runs each calibrator's kind on the rows exactly as the in-memory monitor does, and
returns the statistics of the rows of each bucket in a long table:

========== ======== ============================================================
column     type     meaning
========== ======== ============================================================
bucket     (log's)  the bucket value
calibrator string   the calibrator's name; ``""`` for the bucket's own counts
field      string   the statistic (a field of the kind's ``to_row()``)
index      int32    the position in a per-class or per-size field, 0 for scalars
count      int64    integer statistics (summed)
total      float64  float statistics (summed)
constant   float64  per-calibrator constants (α, top-k, threshold): the same in every part
========== ======== ============================================================

Every statistic of a bucket is the sum of the statistics of any split of its rows — each kind's
statistics are a monoid whose merge adds counts and sums (``tests/monitor/test_mergeable_stats``)
— so partial tables from any partitioning reduce exactly with a group-by over (bucket,
calibrator, field, index) taking ``sum(count)``, ``sum(total)`` and ``max(constant)``: Spark's
and Dask's own aggregations do it. Zero counts and sums are left out (the table is sparse).

In *observe* mode every row counts as observed (and, where its label column has a value, as
labelled). In *label* mode (``observed=False``) only the labels' contribution is emitted: the
label's statistics, minus those of the row's previous label where it had one (a relabel
replaces the first label), as :meth:`Monitor.label <calwatch.monitor.monitor.Monitor.label>` does.

A monitor that slices (``calibrate(meta=)``) and a log whose :class:`LogColumns` name its slice
columns (``meta``) add each bucket's slice counts (rows, labelled, covered and set-size sums per
cell and set calibrator) under calibrator ``""``, field
:data:`~calwatch.scale.slice_partials.SLICE_COUNTS`: integers that reduce with the same sum
(:mod:`calwatch.scale.slice_partials`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from calwatch.core.models import ModelOutputs
from calwatch.engine._validation import validated_probabilities
from calwatch.engine.shift.bucket_tests import confidence_rank_sums
from calwatch.scale.columns import LogColumns, label_mask, probabilities, values
from calwatch.scale.duplicates import key_hashes, repeated_id
from calwatch.scale.frozen import FrozenMonitor
from calwatch.scale.slice_partials import SLICE_COUNTS, bucket_counts, chunk_codes
from calwatch.stream.slice_counts import SliceStore
from calwatch.stream.slice_groups import groups_for
from calwatch.stream.slices import CodeArray

#: Fields that are a calibrator's constant rather than a sum (restored with ``max``).
CONSTANT_FIELDS = frozenset({"alpha_level", "top_k", "threshold"})
#: The bucket-level counts, under calibrator ``""``.
BUCKET = ""
N_ROWS, N_NEW_LABELS, N_RELABELLED = "n_rows", "n_new_labels", "n_relabelled"
#: The bucket's rank-sum of confidence scores against the calibration rows' (a float ``total``).
CONFIDENCE_RANK_SUM = "confidence_rank_sum"

IntArray = npt.NDArray[np.intp]


def partial_schema(bucket_type: pa.DataType) -> pa.Schema:
    """The schema of the kernel's output for a log whose bucket column has ``bucket_type``."""
    return pa.schema(
        [
            ("bucket", bucket_type),
            ("calibrator", pa.string()),
            ("field", pa.string()),
            ("index", pa.int32()),
            ("count", pa.int64()),
            ("total", pa.float64()),
            ("constant", pa.float64()),
        ]
    )


class _Parts:
    """Columns of the output, gathered as arrays and concatenated once."""

    def __init__(self) -> None:
        self.bucket: list[IntArray] = []
        self.calibrator: list[str] = []
        self.field: list[str] = []
        self.sizes: list[int] = []
        self.index: list[npt.NDArray[np.int32]] = []
        self.count: list[npt.NDArray[np.int64]] = []
        self.total: list[npt.NDArray[np.float64]] = []
        self.constant: list[npt.NDArray[np.float64]] = []

    def add(
        self, code: int, calibrator: str, field: str, index: Any, *, count: Any = None, total: Any = None,
        constant: Any = None,
    ) -> None:  # fmt: skip
        idx = np.atleast_1d(np.asarray(index, dtype=np.int32))
        n = idx.shape[0]
        if n == 0:
            return
        self.bucket.append(np.full(n, code, dtype=np.intp))
        self.calibrator.append(calibrator)
        self.field.append(field)
        self.sizes.append(n)
        self.index.append(idx)
        nan = np.full(n, np.nan)
        self.count.append(
            np.zeros(n, dtype=np.int64) if count is None else np.atleast_1d(count).astype(np.int64)
        )
        self.total.append(nan if total is None else np.atleast_1d(total).astype(np.float64))
        self.constant.append(nan if constant is None else np.atleast_1d(constant).astype(np.float64))

    def add_stats(self, code: int, calibrator: str, row: dict[str, Any]) -> None:
        """The fields of one statistics object's ``to_row()``, zeros left out."""
        for field, value in row.items():
            if field == "kind" or value is None:
                continue
            if field in CONSTANT_FIELDS:
                number = float(value)
                if not np.isnan(number):
                    self.add(code, calibrator, field, 0, constant=number)
                continue
            arr = np.asarray(value)
            where = np.flatnonzero(arr)
            if arr.dtype.kind in "iub":
                self.add(code, calibrator, field, where, count=arr.reshape(-1)[where])
            else:
                self.add(code, calibrator, field, where, total=arr.reshape(-1)[where])

    def table(self, buckets: pa.Array, schema: pa.Schema) -> pa.RecordBatch:
        if not self.sizes:
            return pa.RecordBatch.from_pylist([], schema=schema)
        codes = np.concatenate(self.bucket)
        count = np.concatenate(self.count)
        total = np.concatenate(self.total)
        constant = np.concatenate(self.constant)
        arrays = [
            buckets.take(pa.array(codes)),
            pa.array(np.repeat(np.array(self.calibrator, dtype=object), self.sizes), pa.string()),
            pa.array(np.repeat(np.array(self.field, dtype=object), self.sizes), pa.string()),
            pa.array(np.concatenate(self.index), pa.int32()),
            pa.array(count, pa.int64()),
            pa.array(total, pa.float64(), from_pandas=True),
            pa.array(constant, pa.float64(), from_pandas=True),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def partial_statistics(
    batch: pa.RecordBatch,
    frozen: FrozenMonitor,
    columns: LogColumns,
    *,
    observed: bool = True,
    check_ids: bool = True,
) -> pa.RecordBatch:
    """The statistics of a batch of logged rows, per bucket and calibrator (see the module doc).

    Parameters
    ----------
    batch : pyarrow.RecordBatch
        Logged rows holding at least the columns ``columns`` names.
    frozen : FrozenMonitor
        The fitted calibrators and classes (:func:`calwatch.scale.frozen.freeze`).
    columns : LogColumns
        Which columns hold what.
    observed : bool
        ``True``: the rows are observed (and labelled where ``columns.label`` has a value).
        ``False``: the rows are being labelled (``columns.label`` required; rows whose
        ``columns.previous_label`` has a value are relabels).
    check_ids : bool
        Refuse ids repeated in this batch (in one bucket or across). A caller that checks the whole
        table at once (``observe_table`` does, across chunks) turns this off.

    Returns
    -------
    pyarrow.RecordBatch
        The long table of partial statistics, :func:`partial_schema` of the bucket's type.

    Raises
    ------
    ValueError
        Bad rows, before anything is computed: a missing or mistyped column, null buckets or
        probabilities, probabilities that are not finite, outside [0, 1] or do not sum to 1,
        labels outside the monitor's classes, ids repeated in the batch. The message names
        the column.
    SliceTypeError, SliceError
        A slice column (``columns.meta``) that the monitor's encoding cannot take (another type
        than at calibration, nested values), naming the column.
    """
    K = frozen.n_classes
    columns.check_schema(batch.schema, K)
    schema = partial_schema(batch.schema.field(columns.bucket).type)
    parts = _Parts()
    if len(batch) == 0:
        return parts.table(pa.array([], schema.field("bucket").type), schema)
    if not observed and columns.label is None:
        msg = "labelling rows needs a label column"
        raise ValueError(msg)
    bucket_column = batch.column(columns.bucket)
    check_keys(bucket_column, f"bucket column {columns.bucket!r}")
    encoded = bucket_column.dictionary_encode()
    codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.intp)
    check_keys(batch.column(columns.id), f"id column {columns.id!r}")
    if check_ids:
        _check_distinct_ids(batch, columns)
    name = f"probs column {columns.probs!r}" if isinstance(columns.probs, str) else "probs columns"
    # The matrix was just gathered from the batch's columns: validated in place, not copied.
    P = validated_probabilities(
        probabilities(batch, columns, K), name, n_classes=K, tolerance=frozen.tolerance, copy=False
    )
    outputs = ModelOutputs(P, ids=values(batch, columns.id))
    cats = None
    if columns.category is not None:
        if batch.column(columns.category).null_count:
            msg = f"category column {columns.category!r} has null rows"
            raise ValueError(msg)
        cats = values(batch, columns.category)
    store = frozen.slices if columns.meta else None
    slice_codes = None if store is None else chunk_codes(batch, store, columns)
    encoder = frozen.encoder
    labelled, labels = _labels(batch, columns.label, encoder)
    relabel, previous = _labels(batch, columns.previous_label, encoder)
    if not observed:
        relabel &= labelled
    if len(encoded.dictionary) == 1:  # a log sorted by bucket: most chunks hold one
        groups = [np.arange(codes.shape[0])]
    else:
        order = np.argsort(codes, kind="stable")
        groups = np.split(order, np.flatnonzero(np.diff(codes[order])) + 1)
    kinds = frozen.kinds()
    results = {
        key: kinds[key].apply(key, cal, outputs, _groups(key, cal, cats, store, slice_codes))
        for key, cal in frozen.calibrators.items()
    }
    rank_sums = None
    if observed and frozen.reference_confidence is not None:  # every bucket's in one pass
        rank_sums = confidence_rank_sums(
            frozen.reference_confidence, outputs.probs, codes, len(encoded.dictionary)
        )
    # Masks and gathers only where they select something: a chunk of one bucket (a log sorted
    # by bucket) without labels takes its calibrators' results whole, with no pass per row.
    none = np.zeros(0, dtype=np.intp)
    any_label, any_relabel, whole = bool(labelled.any()), bool(relabel.any()), len(groups) == 1
    for rows in groups:
        code = int(codes[rows[0]])
        new_rows = rows[labelled[rows] & ~relabel[rows]] if any_label else none
        again = rows[relabel[rows]] if any_relabel else none
        if observed:
            parts.add(code, BUCKET, N_ROWS, 0, count=rows.shape[0])
            if rank_sums is not None:
                parts.add(code, BUCKET, CONFIDENCE_RANK_SUM, 0, total=rank_sums[code])
        if new_rows.shape[0]:
            parts.add(code, BUCKET, N_NEW_LABELS, 0, count=new_rows.shape[0])
        if again.shape[0]:
            parts.add(code, BUCKET, N_RELABELLED, 0, count=again.shape[0])
        label_rows = rows[labelled[rows]] if any_label else none
        for key, kind in kinds.items():
            result = results[key]
            if observed:
                stats = kind.observed(result if whole else result.take(rows), K)
            else:
                stats = kind.stats_type.empty(K)
            if label_rows.shape[0]:
                stats = stats.merge(
                    kind.labelled(result.take(label_rows), outputs.probs[label_rows], labels[label_rows])
                )
            if again.shape[0]:
                stats = stats.merge(
                    kind.labelled(result.take(again), outputs.probs[again], previous[again], sign=-1)
                )
            parts.add_stats(code, key, stats.to_row())
    if store is not None:
        assert slice_codes is not None
        _add_slice_counts(parts, store, slice_codes, codes, len(encoded.dictionary), kinds, results,
                          observed=observed, labelled=labelled, labels=labels, relabel=relabel,
                          previous=previous)  # fmt: skip
    return parts.table(encoded.dictionary, schema)


def _groups(key: str, cal: Any, cats: Any, store: SliceStore | None, slice_codes: CodeArray | None) -> Any:
    """A calibrator's groups for the chunk's rows: from its slice columns (``groups_from``), else ``cats``."""
    if getattr(cal, "groups_from", None) is None:
        return cats
    if store is None or slice_codes is None:
        msg = (
            f"calibrator {key!r} takes its rows' groups from the slice columns {list(cal.groups_from)}: "
            "name them in meta="
        )
        raise ValueError(msg)
    return groups_for(cal, store.encoding, slice_codes)


def _add_slice_counts(
    parts: _Parts, store: SliceStore, slice_codes: CodeArray, buckets: IntArray, n_buckets: int,
    kinds: dict[str, Any], results: dict[str, Any], *, observed: bool, labelled: npt.NDArray[np.bool_],
    labels: IntArray, relabel: npt.NDArray[np.bool_], previous: IntArray,
) -> None:  # fmt: skip
    """Each bucket's slice counts (:mod:`calwatch.scale.slice_partials`), from the calibrators' results.

    As in memory: observed rows add their rows and set sizes per cell
    (:meth:`~calwatch.stream.slice_counts.SliceStore.observed`), labelled rows their labelled and
    covered counts, and a relabelled row takes its previous label's away
    (:meth:`~calwatch.stream.slice_counts.SliceStore.labelled` with ``sign=-1``).
    """
    missing = [key for key in store.calibrators if key not in results]
    if missing:
        msg = f"the slice counts name calibrator {missing[0]!r}, which the frozen monitor does not have"
        raise ValueError(msg)
    label_rows, again = np.flatnonzero(labelled), np.flatnonzero(relabel)
    sizes: dict[str, Any] | None = None
    covered: dict[str, Any] = {}
    before: dict[str, Any] = {}
    if observed:
        sizes = {key: kinds[key].set_sizes(results[key]) for key in store.calibrators}
    for key in store.calibrators:
        kind, result = kinds[key], results[key]
        if label_rows.shape[0]:
            covered[key] = kind.covered(result.take(label_rows), labels[label_rows])
        if again.shape[0]:
            before[key] = kind.covered(result.take(again), previous[again])
    for code, index, count in bucket_counts(store, slice_codes, buckets, n_buckets, sizes=sizes,
                                            labelled=label_rows, covered=covered, relabelled=again,
                                            covered_before=before):  # fmt: skip
        parts.add(code, BUCKET, SLICE_COUNTS, index, count=count)


def _labels(batch: pa.RecordBatch, name: str | None, encoder: Any) -> tuple[npt.NDArray[np.bool_], IntArray]:
    """Which rows have a value in column ``name``, and its class index (0 where none)."""
    m = len(batch)
    if name is None:
        return np.zeros(m, dtype=bool), np.zeros(m, dtype=np.intp)
    mask = label_mask(batch, name)
    index = np.zeros(m, dtype=np.intp)
    if mask.any():
        index[mask] = encoder.encode(values(batch, name)[mask], f"label column {name!r}")
    return mask, index


def check_keys(column: pa.Array, name: str) -> None:
    """Refuse null or NaN buckets or ids, naming the column (a NaN bucket would become a batch "nan").

    Raises
    ------
    ValueError
        ``name`` and how many rows are null or NaN.
    """
    if column.null_count:
        msg = f"{name} has {column.null_count} null rows: every row needs one"
        raise ValueError(msg)
    if pa.types.is_floating(column.type):
        nan = int(pc.sum(pc.is_nan(column)).as_py() or 0)
        if nan:
            msg = f"{name} has {nan} NaN rows: every row needs one"
            raise ValueError(msg)


def _check_distinct_ids(batch: pa.RecordBatch, columns: LogColumns) -> None:
    """Raise if an id repeats in this batch of rows, within a bucket or across buckets.

    The rows' id hashes are sorted first (:func:`calwatch.scale.duplicates.key_hashes`,
    compiled for integer-like ids): distinct hashes prove distinct ids, so the exact Arrow
    group-by, ~5x dearer, runs only when two hashes are equal.
    """
    hashes = np.sort(key_hashes(batch, columns.id))
    if not (hashes[1:] == hashes[:-1]).any():
        return
    table = pa.table({"b": batch.column(columns.bucket), "i": batch.column(columns.id)})
    counts = table.group_by(["i"]).aggregate([("b", "list")])
    sizes = pc.list_value_length(counts.column("b_list"))
    repeated = pc.greater(sizes, 1)
    if pc.any(repeated).as_py():
        first = counts.filter(repeated).slice(0, 1).to_pylist()[0]
        raise repeated_id(columns.id, first["i"], len(first["b_list"]), first["b_list"])


__all__ = [
    "BUCKET",
    "CONFIDENCE_RANK_SUM",
    "CONSTANT_FIELDS",
    "N_NEW_LABELS",
    "N_RELABELLED",
    "N_ROWS",
    "partial_schema",
    "partial_statistics",
]
