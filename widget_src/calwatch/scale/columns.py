"""Which columns of a prediction log hold what, checked against the log's schema.

A log has one row per prediction: an id, a bucket (each distinct bucket value, in sorted order,
becomes one batch of the monitor: a day, an hour, a model version), the model's probabilities —
one column per class in class order, or one list column — and optionally the label, a Mondrian
category and the slice columns of a monitor that slices (``meta``). Bad columns are refused before
any statistic is computed, naming the column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class LogColumns:
    """Names of a prediction log's columns.

    Parameters
    ----------
    id : str
        Row ids (distinct across the table: one id, one row); late labels are joined on them.
    bucket : str
        Which batch a row belongs to (any sortable type: date, int, string).
    probs : str or sequence of str
        One column per class, in the monitor's class order, or one list column of ``K`` values.
    label : str, optional
        The true class label (null where not known yet).
    category : str, optional
        Mondrian category, for ``mondrian="category"`` calibrators.
    previous_label : str, optional
        The label a row carried before (for relabels; set by the label paths, not by users).
    meta : tuple of str
        The slice columns (``calibrate(meta=)``), encoded with the monitor's fixed encoding
        (:mod:`calwatch.stream.slices`); empty for a monitor that does not slice. Kept with the
        table, so a late label's row is encoded again from the same columns.
    """

    id: str
    bucket: str
    probs: str | tuple[str, ...]
    label: str | None = None
    category: str | None = None
    previous_label: str | None = None
    meta: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        *,
        id: str,
        bucket: str,
        probs: str | Sequence[str],
        label: str | None = None,
        category: str | None = None,
        meta: str | Sequence[str] | None = None,
    ) -> LogColumns:
        """The spec from user arguments, each checked to be a column name (or names, for ``probs``, ``meta``).

        Raises
        ------
        ValueError
            Naming the argument: a name that is not a non-empty string, a column named twice,
            or ``meta`` naming the label column (a label join replaces that column).
        """
        for argument, value in (("id", id), ("bucket", bucket)):
            _check_name(argument, value)
        for argument, optional in (("label", label), ("category", category)):
            if optional is not None:
                _check_name(argument, optional)
        if isinstance(probs, str):
            _check_name("probs", probs)
            names: str | tuple[str, ...] = probs
        else:
            names = tuple(probs)
            if len(names) < 2 or not all(isinstance(n, str) and n for n in names):
                msg = f"probs must name one list column or at least two class columns; got {probs!r}"
                raise ValueError(msg)
            if len(set(names)) != len(names):
                msg = f"probs names a column twice: {list(names)}"
                raise ValueError(msg)
        return cls(id=id, bucket=bucket, probs=names, label=label, category=category,
                   meta=_meta_names(meta, label))  # fmt: skip

    @property
    def prob_columns(self) -> tuple[str, ...]:
        """The probability column(s) as a tuple."""
        return (self.probs,) if isinstance(self.probs, str) else self.probs

    def needed(self) -> list[str]:
        """Every column the kernel reads, in a stable order."""
        names = [self.id, self.bucket, *self.prob_columns]
        names += [n for n in (self.label, self.category, self.previous_label) if n is not None]
        return list(dict.fromkeys([*names, *self.meta]))

    def check_schema(self, schema: pa.Schema, n_classes: int) -> None:
        """Raise ``ValueError`` naming the first column that is missing or of the wrong type."""
        present = set(schema.names)
        for name in self.needed():
            if name not in present:
                msg = f"column {name!r} is not in the table; it has {schema.names[:20]}"
                raise ValueError(msg)
        for role, name in (("bucket", self.bucket), ("id", self.id)):
            key_type = schema.field(name).type
            if not is_key_type(key_type):
                msg = (
                    f"{role} column {name!r} holds {key_type} values; a {role} must be one plain value "
                    "per row (an integer, a string, a date or timestamp, a number...), not a list, "
                    "struct, map or binary blob"
                )
                raise ValueError(msg)
        if isinstance(self.probs, str):
            field_type = schema.field(self.probs).type
            is_list = pa.types.is_list(field_type) or pa.types.is_large_list(field_type)
            is_list = is_list or pa.types.is_fixed_size_list(field_type)
            if not is_list or not _is_number(field_type.value_type):
                msg = f"probs column {self.probs!r} must be a list of numbers; got {field_type}"
                raise ValueError(msg)
            if pa.types.is_fixed_size_list(field_type) and field_type.list_size != n_classes:
                msg = (
                    f"probs column {self.probs!r} holds lists of {field_type.list_size} values but the "
                    f"monitor has {n_classes} classes"
                )
                raise ValueError(msg)
        else:
            if len(self.probs) != n_classes:
                msg = f"probs names {len(self.probs)} columns but the monitor has {n_classes} classes"
                raise ValueError(msg)
            for name in self.probs:
                if not _is_number(schema.field(name).type):
                    msg = f"probs column {name!r} must be numeric; got {schema.field(name).type}"
                    raise ValueError(msg)


def is_key_type(arrow_type: pa.DataType) -> bool:
    """Whether a column of this type can hold buckets or ids: one comparable plain value per row."""
    if pa.types.is_dictionary(arrow_type):
        return is_key_type(arrow_type.value_type)
    blob = pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type)
    blob = blob or pa.types.is_fixed_size_binary(arrow_type) or pa.types.is_binary_view(arrow_type)
    return not (pa.types.is_nested(arrow_type) or blob or pa.types.is_null(arrow_type))


def _check_name(argument: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        msg = f"{argument} must name a column (a non-empty string); got {value!r}"
        raise ValueError(msg)


def _meta_names(meta: str | Sequence[str] | None, label: str | None) -> tuple[str, ...]:
    """``meta=`` as a tuple of distinct column names (a single name is one column)."""
    if meta is None:
        return ()
    names = (meta,) if isinstance(meta, str) else tuple(meta)
    if not names or not all(isinstance(n, str) and n for n in names):
        msg = f"meta must name the slice columns (a list of non-empty strings); got {meta!r}"
        raise ValueError(msg)
    if len(set(names)) != len(names):
        msg = f"meta names a column twice: {list(names)}"
        raise ValueError(msg)
    if label is not None and label in names:
        msg = (
            f"meta names the label column {label!r}: a slice column describes the row, and a late label "
            "replaces the label column, so slice by another column"
        )
        raise ValueError(msg)
    return names


def _is_number(arrow_type: pa.DataType) -> bool:
    return bool(pa.types.is_floating(arrow_type) or pa.types.is_integer(arrow_type))


def probabilities(batch: pa.RecordBatch, columns: LogColumns, n_classes: int) -> npt.NDArray[np.float64]:
    """The ``(m, K)`` float64 probabilities of a batch of log rows (nulls refused, naming the column)."""
    if isinstance(columns.probs, str):
        column = batch.column(columns.probs)
        if column.null_count:
            msg = f"probs column {columns.probs!r} has {column.null_count} null rows"
            raise ValueError(msg)
        lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
        if lengths.shape[0] and not (lengths == n_classes).all():
            bad = int(np.flatnonzero(lengths != n_classes)[0])
            msg = (
                f"probs column {columns.probs!r}: row {bad} holds {int(lengths[bad])} values but the "
                f"monitor has {n_classes} classes"
            )
            raise ValueError(msg)
        values = pc.list_flatten(column)
        if values.null_count:
            msg = f"probs column {columns.probs!r} holds null values"
            raise ValueError(msg)
        flat: npt.NDArray[np.float64] = values.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        return flat.reshape(len(batch), n_classes)
    out = np.empty((len(batch), n_classes), dtype=np.float64)
    for j, name in enumerate(columns.probs):
        column = batch.column(name)
        if column.null_count:
            msg = f"probs column {name!r} has {column.null_count} null rows"
            raise ValueError(msg)
        out[:, j] = column.to_numpy(zero_copy_only=False)
    return out


def values(batch: pa.RecordBatch, name: str) -> npt.NDArray[Any]:
    """A column as a numpy array (strings and dates as objects or their numpy types)."""
    return np.asarray(batch.column(name).to_numpy(zero_copy_only=False))


def label_mask(batch: pa.RecordBatch, name: str) -> npt.NDArray[np.bool_]:
    """Which rows carry a value in column ``name`` (not null, and not NaN for float columns)."""
    column = batch.column(name)
    valid = pc.is_valid(column)
    if pa.types.is_floating(column.type):
        valid = pc.and_(valid, pc.invert(pc.is_nan(column)))
    return np.asarray(valid.to_numpy(zero_copy_only=False), dtype=bool)


__all__ = ["LogColumns", "label_mask", "probabilities", "values"]
