"""Per-batch statistics of settled batches, kept as columns instead of one object per batch.

A monitor keeps every batch's statistics for the whole stream: per calibrator a small dataclass
of counts (``CalibratorBatchStats`` and the other kinds' types), three or four numpy arrays and a
float or two. As objects they cost ~640 bytes per calibrator and batch (a numpy array's header
is ~110 bytes before its data), so over 10⁵ batches and three calibrators ~190 MiB of kernel
memory. :class:`StatsColumns` keeps the same values as growing numpy columns, one per calibrator
and dataclass field (a 2-d column for an array field, a float64 or int64 column for a Python
float or int, a mask for None; int64 counts stored as int16 while they fit), at the cost of the
values themselves (~75 bytes per calibrator and batch at K = 10), and gives them back as new
objects equal field by field to the ones put in (same types, same dtypes, same bits). A field
whose values do not fit one column (arrays of changing shape, tuples, numpy scalars) falls back
to a list of the values as they were.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from calwatch.core.paged import adopted, grown

_FIRST_CAPACITY = 64


class _Field:
    """One field of one calibrator's statistics over batches ``0 .. n - 1`` (unset rows unused).

    ``kind`` is ``"array"`` (rows of a 2-d ``data`` of one dtype and row shape; int64 counts
    are stored as int16 or int32 while they fit, a batch's counts being small), ``"float"``
    (float64, ``none`` marks a None), ``"int"`` (int64 for Python ints) or ``"object"`` (a list
    of the values themselves: what does not fit a column).
    """

    __slots__ = ("data", "dtype", "kind", "none", "values")

    def __init__(self, value: Any) -> None:
        self.values: list[Any] = []
        self.none: npt.NDArray[np.bool_] = np.zeros(0, dtype=bool)
        self.dtype: np.dtype[Any] = np.dtype(np.float64)
        if type(value) is np.ndarray and value.ndim >= 1:
            self.kind = "array"
            self.dtype = value.dtype
            stored = np.int16 if value.dtype == np.int64 else value.dtype  # widened as values need
            self.data: npt.NDArray[Any] = np.empty((0, *value.shape), dtype=stored)
        elif value is None or type(value) is float:
            self.kind = "float"
            self.data = np.empty(0, dtype=np.float64)
        elif type(value) is int and -(2**63) <= value < 2**63:
            self.kind = "int"
            self.data = np.empty(0, dtype=np.int64)
        else:
            self.kind = "object"
            self.data = np.empty(0)

    def _fits(self, value: Any) -> bool:
        if self.kind == "array":
            return (
                type(value) is np.ndarray
                and value.dtype == self.dtype  # the dtype put in (the stored one may be narrower)
                and value.shape == self.data.shape[1:]
            )
        if self.kind == "float":
            return value is None or type(value) is float
        if self.kind == "int":
            return type(value) is int and -(2**63) <= value < 2**63
        return True

    def put(self, i: int, value: Any, n: int) -> None:
        """Set row ``i`` (the store holds ``n`` rows once this is written)."""
        if not self._fits(value):
            self.values = [self.get(j) if j < len(self.data) else None for j in range(n)]
            self.kind, self.data = "object", np.empty(0)
        if self.kind == "object":
            self.values.extend([None] * (n - len(self.values)))
            self.values[i] = value
            return
        if self.kind == "array" and self.data.dtype != self.dtype and value.size:
            self._widen(value)
        self.data = grown(self.data, n)
        if self.kind == "float":
            self.none = grown(self.none, n)
            self.none[i] = value is None
            self.data[i] = np.nan if value is None else value
        else:
            self.data[i] = value

    def _widen(self, value: npt.NDArray[np.int64]) -> None:
        """Store int64 counts in the narrowest of int16, int32, int64 that holds every value seen."""
        lo, hi = int(value.min()), int(value.max())
        for stored in (np.int16, np.int32, np.int64):
            info = np.iinfo(stored)
            if info.min <= lo and hi <= info.max:
                break
        if np.dtype(stored).itemsize > self.data.dtype.itemsize:
            self.data = adopted(self.data, stored)

    def get(self, i: int) -> Any:
        """Row ``i`` as it was put (an array is a new array, writable, like a merge's result)."""
        if self.kind == "array":
            return self.data[i].astype(self.dtype)  # a copy, in the dtype put in
        if self.kind == "float":
            return None if self.none[i] else float(self.data[i])
        if self.kind == "int":
            return int(self.data[i])
        return self.values[i]

    def nbytes(self) -> int:
        return int(self.data.nbytes + self.none.nbytes) + 8 * len(self.values)


class _Calibrator:
    """One calibrator's statistics: their type per batch (None where it has none) and fields."""

    __slots__ = ("codes", "fields", "n", "types")

    def __init__(self) -> None:
        self.types: list[type | None] = [None]  # the types seen; code 0: no statistics
        self.codes: npt.NDArray[Any] = np.zeros(0, dtype=np.uint8)  # each batch's type, as a code
        self.n = 0  # batches with a code (0 .. n - 1)
        self.fields: dict[str, _Field] = {}

    def put(self, i: int, stats: Any, n: int) -> None:
        cls = type(stats)
        code = next((c for c, known in enumerate(self.types) if known is cls), None)
        if code is None:
            code = len(self.types)
            if code > np.iinfo(self.codes.dtype).max:  # more types than the codes hold: wider codes
                self.codes = adopted(self.codes, np.uint32)
            self.types.append(cls)
        self.codes = grown(self.codes, n)
        self.codes[self.n : n] = 0
        self.n = max(self.n, n)
        self.codes[i] = code
        for name in _layout(type(stats))[0]:
            value = getattr(stats, name)
            column = self.fields.get(name)
            if column is None:
                column = self.fields[name] = _Field(value)
            column.put(i, value, n)

    def get(self, i: int) -> Any:
        cls = self.types[int(self.codes[i])] if i < self.n else None
        if cls is None:
            return None
        names, plain = _layout(cls)
        fields = self.fields
        if plain:  # a plain dataclass: its fields are its whole state, set as they were
            out: Any = object.__new__(cls)
            out.__dict__.update({name: fields[name].get(i) for name in names})
            return out
        init = (f.name for f in dataclasses.fields(cls) if f.init)
        return cls(**{name: fields[name].get(i) for name in init})


def _layout(cls: type) -> tuple[tuple[str, ...], bool]:
    """A statistics dataclass's field names, and whether it is plain.

    Plain: no ``__post_init__`` and no ``__slots__``, so an instance is its ``__dict__`` of
    fields, rebuilt faster than by ``__init__`` (a settled stream's reads rebuild one per batch
    and calibrator).
    """
    known = _LAYOUTS.get(cls)
    if known is None:
        names = tuple(f.name for f in dataclasses.fields(cls))
        plain = not hasattr(cls, "__post_init__") and all("__slots__" not in vars(k) for k in cls.__mro__)
        known = _LAYOUTS[cls] = (names, plain)
    return known


_LAYOUTS: dict[type, tuple[tuple[str, ...], bool]] = {}


class StatsColumns:
    """Per-batch dicts ``{calibrator: statistics dataclass}`` kept as columns.

    Each dict is given back as a new dict with the same keys in the same order and statistics
    equal to those put in, field by field (:class:`_Field` says how each is kept).

    Examples
    --------
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Counts:
    ...     hits: np.ndarray
    ...     level: float | None = None
    >>> store = StatsColumns()
    >>> store.put(0, {"a": Counts(np.array([1, 2]), 0.1), "b": Counts(np.array([3, 4]))})
    >>> store.put(1, {"b": Counts(np.array([5, 6]), 0.2)})
    >>> len(store), store.get(0)["a"].hits.tolist(), store.get(0)["b"].level, list(store.get(1))
    (2, [1, 2], None, ['b'])
    """

    def __init__(self) -> None:
        self.n = 0
        self._calibrators: dict[str, _Calibrator] = {}
        self._key_orders: list[tuple[str, ...]] = []  # the distinct key orders, each kept once
        self._order_of: dict[tuple[str, ...], int] = {}
        self._order = np.empty(_FIRST_CAPACITY, dtype=np.int32)  # per batch: its key order

    def __len__(self) -> int:
        return self.n

    def put(self, i: int, stats: Mapping[str, Any]) -> None:
        """Set batch ``i``'s statistics (``i ≤ len(self)``: an update or the next batch)."""
        if not 0 <= i <= self.n:
            raise IndexError(f"batch {i} is past the {self.n} batches kept")
        n = max(self.n, i + 1)
        keys = tuple(stats)
        order = self._order_of.get(keys)
        if order is None:
            order = self._order_of[keys] = len(self._key_orders)
            self._key_orders.append(keys)
        for key, value in stats.items():
            calibrator = self._calibrators.get(key)
            if calibrator is None:
                calibrator = self._calibrators[key] = _Calibrator()
            calibrator.put(i, value, n)
        self._order = grown(self._order, n)
        self._order[i] = order
        self.n = n

    def get(self, i: int) -> dict[str, Any]:
        """Batch ``i``'s statistics: a new dict of new objects."""
        keys = self._key_orders[int(self._order[i])]
        return {key: self._calibrators[key].get(i) for key in keys}

    def nbytes(self) -> int:
        """Bytes held by the columns (not counting the shared type objects)."""
        fields = sum(f.nbytes() for c in self._calibrators.values() for f in c.fields.values())
        types = sum(int(c.codes.nbytes) for c in self._calibrators.values())
        return fields + types + int(self._order.nbytes)
