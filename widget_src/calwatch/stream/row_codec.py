"""One codec for batches' raw rows as a table: a snapshot's ``rows.parquet`` and the row log's parts.

:func:`encode_rows` writes the rows of a sequence of batch records (their
:class:`~calwatch.stream.records.BatchRows`) as one polars frame and a JSON-able *mapping* that
says how its columns read back; :func:`decode_rows` turns the part of such a frame that holds
one batch back into its :class:`~calwatch.stream.records.BatchRows`. Both the snapshot store
and the row log use them, so a batch's rows have one layout on disk wherever they are written.

The columns:

* ``batch`` (the batch's index) and ``id`` (int64, string, or the JSON text of
  :mod:`calwatch.core.codec` for tuples and the like: ``mapping["id_kind"]``);
* rows with classes: ``probs`` (a fixed-size array column), ``label`` (``-1`` until
  labelled) and, with Mondrian categories, ``category``;
* rows of a monitor calibrated with slice columns (:mod:`calwatch.stream.slices`):
  ``slice_codes``, each row's code per slice column (a fixed-size int16 array column;
  ``mapping["slice_columns"]`` says how many);
* the calibrators' per-row results, which each kind of calibrator writes and reads itself
  (:meth:`~calwatch.kinds.base.CalibratorKind.write_rows` and ``read_rows``): ``set_<i>``
  (packed sets), ``risk_<i>``, ``selective_<i>_<field>``, ``admit_<i>_<field>``, a regression
  monitor's ``y``, ``pred_<g>`` and ``reg_<i>_<field>``, and any other kind's
  ``extra_<i>_<field>``. The mapping names the calibrator behind each ``<i>``.

A kind writes one field of :class:`~calwatch.stream.records.BatchRows` (its ``rows_field``),
for every calibrator whose results are kept there. This module sits below the kinds' layer and
never imports them: ``calwatch/__init__.py`` hands it the list of kinds explicitly
(:func:`use_kinds`), as the kinds registered later join that same list.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from calwatch.core.codec import SnapshotError, StateDecoder, StateEncoder
from calwatch.stream.records import NO_LABEL, BatchRecord, BatchRows

#: The fields of :class:`~calwatch.stream.records.BatchRows` that hold calibrators' per-row
#: results, in the order their columns are written.
RESULT_FIELDS = ("packed_sets", "risks", "selective", "admit", "regression", "extra")


class RowColumns(Protocol):
    """What the codec asks of a calibrator kind (:class:`~calwatch.kinds.base.CalibratorKind`)."""

    @property
    def task(self) -> str:
        """The monitors whose rows it writes: ``"classification"`` or ``"regression"``."""
        ...

    @property
    def rows_field(self) -> str:
        """The field of :class:`~calwatch.stream.records.BatchRows` it writes (in :data:`RESULT_FIELDS`)."""
        ...

    def write_rows(self, rows: Sequence[BatchRows]) -> tuple[dict[str, pl.Series], dict[str, Any]]:
        """Its field's columns for the rows of these batches, and the mapping entries that read them."""
        ...

    def read_rows(self, part: pl.DataFrame, mapping: Mapping[str, Any], rows: BatchRows) -> None:
        """Read its field of one batch's ``rows`` back from ``part``, as :meth:`write_rows` wrote it."""
        ...


#: The kinds that write and read rows' results (:func:`use_kinds`; given by ``calwatch/__init__.py``).
_kinds: Sequence[RowColumns] = ()


def use_kinds(kinds: Sequence[RowColumns]) -> None:
    """Write and read rows with these kinds (:data:`calwatch.kinds.KINDS`: in the order they claim).

    The sequence is kept, not copied, so kinds registered into it later are used too.
    """
    global _kinds
    _kinds = kinds


def _writers(task: str) -> list[RowColumns]:
    """The kind that writes each result field of a task's rows: the first of that field, in column order."""
    first: dict[str, RowColumns] = {}
    for kind in _kinds:
        if kind.task == task:
            first.setdefault(kind.rows_field, kind)
    return [first[name] for name in RESULT_FIELDS if name in first]


# ---------------------------------------------------------------------------- frames
def encode_rows(
    records: Sequence[BatchRecord], task: str = "classification"
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The raw rows of these batches as one frame, and the mapping that reads its columns back.

    Records without rows are skipped. ``task`` (the monitor's) says which kinds write columns:
    each writes its own mapping entries even for no rows, so an empty window's mapping is its task's.

    Raises
    ------
    SnapshotError
        If the rows hold what cannot be written without pickle (ids that are not numbers,
        strings or tuples of them; categories that are not), or per-row results no kind writes.
    """
    with_rows = [r for r in records if r.rows is not None]
    present = [r.rows for r in with_rows if r.rows is not None]
    id_kind, id_column = encode_ids([i for rows in present for i in rows.ids])
    batches = np.repeat(
        np.array([r.index for r in with_rows], dtype=np.int64), [len(rows.ids) for rows in present]
    )
    columns: dict[str, pl.Series] = {"batch": pl.Series(batches, dtype=pl.Int64), "id": id_column}
    if present and present[0].probs.shape[1]:
        columns["probs"] = pl.Series(np.concatenate([rows.probs for rows in present]))
        columns["label"] = pl.Series(np.concatenate([rows.labels for rows in present]).astype(np.int64))
        categories = [rows.categories for rows in present]
        if any(c is not None for c in categories):
            if any(c is None for c in categories):
                msg = "some batches have Mondrian categories and others do not"
                raise SnapshotError(msg)
            columns["category"] = _category_series(np.concatenate(categories))  # type: ignore[arg-type]
    mapping: dict[str, Any] = {"id_kind": id_kind}
    codes = [rows.slice_codes for rows in present]
    if any(c is not None for c in codes):
        if any(c is None for c in codes) or len({c.shape[1] for c in codes if c is not None}) != 1:
            msg = "some batches have slice codes and others do not (or other slice columns)"
            raise SnapshotError(msg)
        stacked = np.concatenate(codes).astype(np.int16, copy=False)  # type: ignore[arg-type]
        columns["slice_codes"] = pl.Series(stacked)
        mapping["slice_columns"] = int(stacked.shape[1])
    writers = _writers(task)
    for kind in writers:
        kind_columns, kind_mapping = kind.write_rows(present)
        columns |= kind_columns
        mapping |= kind_mapping
    written = {kind.rows_field for kind in writers}
    unwritten = [
        name for name in RESULT_FIELDS if name not in written and present and getattr(present[0], name)
    ]
    if unwritten:
        msg = f"rows keep per-row results in {unwritten} that no registered calibrator kind writes"
        raise SnapshotError(msg)
    return pl.DataFrame(columns), mapping


def decode_rows(part: pl.DataFrame, mapping: Mapping[str, Any], task: str = "classification") -> BatchRows:
    """The raw rows of one batch from its rows of a frame :func:`encode_rows` wrote.

    ``task`` is the one the frame was encoded for. The labels and the calibrators' per-row
    results are arrays of their own, which late labels may change in place.

    Raises
    ------
    SnapshotError
        If a label lies outside the classes.
    """
    ids = decode_ids(part["id"].to_list(), str(mapping["id_kind"]))
    m = len(ids)
    probs = (
        np.asarray(part["probs"].to_numpy(), dtype=np.float64)
        if "probs" in part.columns
        else np.zeros((m, 0))
    )
    labels = np.full(m, NO_LABEL, np.intp)  # a regression's kind marks its labelled rows
    if "label" in part.columns:
        labels = part["label"].to_numpy().astype(np.intp)
    if labels.size and probs.shape[1] and (labels.min() < NO_LABEL or labels.max() >= probs.shape[1]):
        msg = "the rows hold labels outside the classes"
        raise SnapshotError(msg)
    categories = part["category"].to_numpy() if "category" in part.columns else None
    rows = BatchRows(ids=ids, probs=probs, packed_sets={}, labels=labels, categories=categories)
    if "slice_columns" in mapping:
        rows.slice_codes = slice_codes_of(part, int(mapping["slice_columns"]))
    for kind in _writers(task):
        kind.read_rows(part, mapping, rows)
    return rows


def slice_codes_of(part: pl.DataFrame, n_columns: int) -> npt.NDArray[np.int16]:
    """The ``(m, n_columns)`` slice codes of one batch's rows (:mod:`calwatch.stream.slices`), a copy.

    Raises
    ------
    SnapshotError
        If the column is missing, of another width, or holds negative codes.
    """
    if "slice_codes" not in part.columns:
        msg = "the rows lack their slice codes (column 'slice_codes')"
        raise SnapshotError(msg)
    codes = np.array(part["slice_codes"].to_numpy(), dtype=np.int16).reshape(part.height, -1)
    if codes.shape[1] != n_columns or (codes.size and codes.min() < 0):
        msg = f"the rows' slice codes are malformed (shape {codes.shape}, {n_columns} columns expected)"
        raise SnapshotError(msg)
    return codes


# ---------------------------------------------------------------------------- ids
def encode_ids(ids: list[Hashable]) -> tuple[str, pl.Series]:
    """Ids as a column, and how they were written: ``"int"`` (int64), ``"str"``, or ``"json"``.

    JSON is :mod:`calwatch.core.codec`'s form (tuples stay tuples), never pickle. The label logs
    key their rows by this column too.

    Examples
    --------
    >>> encode_ids([("a", 1)])[1].to_list()
    ['{"$": "tuple", "items": ["a", 1]}']
    """
    kinds = {type(i) for i in ids}
    if kinds <= {int}:
        return "int", pl.Series(ids, dtype=pl.Int64)
    if kinds <= {str}:
        return "str", pl.Series(ids, dtype=pl.String)
    encoder = StateEncoder()
    encoded = []
    for i in ids:
        tree = encoder.encode(i, "ids")
        if encoder.arrays:
            msg = f"ids: {i!r} cannot be saved (ids must be numbers, strings or tuples of them)"
            raise SnapshotError(msg)
        encoded.append(json.dumps(tree, allow_nan=False))
    return "json", pl.Series(encoded, dtype=pl.String)


def decode_ids(values: list[Any], kind: str) -> list[Hashable]:
    """Ids read back from a column :func:`encode_ids` wrote as ``kind``."""
    if kind == "json":
        decoder = StateDecoder({})
        return [decoder.decode(json.loads(text)) for text in values]
    return values


# ---------------------------------------------------------------------------- columns, for the kinds
def series_of(parts: Sequence[npt.NDArray[Any]]) -> pl.Series:
    """Per-batch arrays (one value, or one row of values, per row) as one column."""
    return pl.Series(np.concatenate(parts))


def float_series(parts: Sequence[Any]) -> pl.Series:
    """Per-batch numeric arrays of shape ``(m,)`` or ``(m, k)`` as one float64 column.

    Raises
    ------
    SnapshotError
        For anything else (a regression's ``CDFPrediction`` holds callables).
    """
    for part in parts:
        if not (isinstance(part, np.ndarray) and part.dtype.kind in "fiu"):
            msg = (
                f"base predictions of type {type(part).__name__} cannot be saved in a snapshot (only "
                "numeric arrays: a CDFPrediction holds callables)"
            )
            raise SnapshotError(msg)
    return pl.Series(np.concatenate(parts).astype(np.float64, copy=False))


def binary_series(parts: Sequence[npt.NDArray[np.uint8]]) -> pl.Series:
    """Per-batch packed bits of shape ``(m, n_bytes)`` as one binary column, a row's bytes per value.

    Built from the bytes and their offsets (Arrow's binary layout), not a ``bytes`` per row.

    Examples
    --------
    >>> [value.hex() for value in binary_series([np.array([[1, 0], [2, 255]], dtype=np.uint8)])]
    ['0100', '02ff']
    """
    packed = np.ascontiguousarray(np.concatenate(parts), dtype=np.uint8)
    m, n_bytes = packed.shape
    offsets = np.arange(m + 1, dtype=np.int64) * n_bytes
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(packed)]
    column = pl.from_arrow(pa.LargeBinaryArray.from_buffers(pa.large_binary(), m, buffers))
    assert isinstance(column, pl.Series)
    return column


def packed_of(column: pl.Series, n_bytes: int) -> npt.NDArray[np.uint8]:
    """The ``(m, n_bytes)`` packed bits of a column :func:`binary_series` wrote."""
    return np.frombuffer(b"".join(column.to_list()), dtype=np.uint8).reshape(-1, n_bytes).copy()


def array_of(part: pl.DataFrame, name: str) -> npt.NDArray[Any]:
    """Column ``name`` of ``part`` as a numpy array of its own (a copy, writable)."""
    return np.array(part[name].to_numpy())


def nested_series(
    prefix: str, names: Mapping[str, Sequence[str]], parts: Sequence[Mapping[str, Mapping[str, Any]]]
) -> dict[str, pl.Series]:
    """Columns ``<prefix>_<i>_<name>`` of per-calibrator fields (``rows.admit``, ``rows.selective``, ...).

    ``names`` maps each calibrator (the ``i``-th key) to its fields; ``parts`` holds, per batch,
    calibrator -> field -> one value per row.
    """
    return {
        f"{prefix}_{i}_{name}": series_of([part[key][name] for part in parts])
        for i, (key, fields) in enumerate(names.items())
        for name in fields
    }


def nested_arrays(
    part: pl.DataFrame, prefix: str, names: Mapping[str, Sequence[str]]
) -> dict[str, dict[str, npt.NDArray[Any]]]:
    """The per-calibrator fields :func:`nested_series` wrote, read back from one batch's ``part``."""
    return {
        key: {name: array_of(part, f"{prefix}_{i}_{name}") for name in fields}
        for i, (key, fields) in enumerate(names.items())
    }


def _category_series(values: npt.NDArray[Any]) -> pl.Series:
    """Mondrian categories as a column: numbers and strings only (objects would need pickle)."""
    if values.dtype.kind == "O":
        items = values.tolist()
        if not all(isinstance(v, (str, int, float, bool)) for v in items):
            msg = "categories: only numbers and strings can be saved in a snapshot"
            raise SnapshotError(msg)
        return pl.Series(items)
    return pl.Series(values)


__all__ = [
    "RESULT_FIELDS",
    "RowColumns",
    "array_of",
    "binary_series",
    "decode_ids",
    "decode_rows",
    "encode_ids",
    "encode_rows",
    "float_series",
    "nested_arrays",
    "nested_series",
    "packed_of",
    "series_of",
    "slice_codes_of",
    "use_kinds",
]
