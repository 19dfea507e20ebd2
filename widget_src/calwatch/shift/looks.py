"""The shift detectors' looks, one per detector and batch, kept as columns.

Every batch gives each default detector a look (its log10 statistic, threshold and whether it
alarmed), and the monitor keeps every look for the whole stream (the shift chart reads them).
A dict per look cost ~430 bytes and six Python objects; over 10⁵ batches and five detectors
that is ~200 MiB of kernel memory and a ``state.json`` of a million entries. :class:`LookStore`
keeps the same looks as numpy columns, one set per detector, grown by doubling: ~26 bytes a look
and no Python object per look. It reads like the dict it replaces (``(detector, batch) -> look
dict``, items in the order the looks were first written), so the monitor, the views and
snapshots read it unchanged, and the numbers are bit-identical (float64 in, float64 out).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from calwatch.core import paged

Key = tuple[str, int]
Look = dict[str, Any]

_FIRST_CAPACITY = 64


class _Columns:
    """One detector's looks: batch (increasing), statistic, threshold, alarm, calibrator code, order.

    ``order`` is the look's place among every look of the store when first written, so the
    store iterates in the dict's insertion order. A missing statistic or threshold (None in the
    look) is NaN: the monitor writes non-finite statistics as None and never a NaN threshold.
    """

    __slots__ = ("alarm", "batch", "calibrator", "n", "order", "statistic", "threshold")

    def __init__(self, capacity: int = _FIRST_CAPACITY) -> None:
        self.n = 0
        self.batch = paged.empty(capacity, np.int64)
        self.statistic = paged.empty(capacity, np.float64)
        self.threshold = paged.empty(capacity, np.float64)
        self.alarm = paged.empty(capacity, np.bool_)
        self.calibrator = paged.empty(capacity, np.int32)  # index into LookStore.calibrators
        self.order = paged.empty(capacity, np.int64)

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The filled part of each column (views)."""
        return {name: getattr(self, name)[: self.n] for name in _COLUMNS}

    def find(self, batch: int) -> int:
        """The row of ``batch``, or -1."""
        n = self.n
        if n and self.batch[n - 1] == batch:  # the usual case: the latest batch
            return n - 1
        i = int(np.searchsorted(self.batch[:n], batch))
        return i if i < n and self.batch[i] == batch else -1

    def insert(self, batch: int, values: tuple[float, float, bool, int, int]) -> None:
        """Put a new row for ``batch`` at its place (the end, unless the batch is older)."""
        n = self.n
        if n == self.batch.shape[0]:
            for name in _COLUMNS:
                setattr(self, name, paged.grown(getattr(self, name), n + 1, factor=2.0))
        i = n if not n or self.batch[n - 1] < batch else int(np.searchsorted(self.batch[:n], batch))
        if i < n:  # an older batch (a comparison's merged looks): shift the later rows up
            for name in _COLUMNS:
                column = getattr(self, name)
                column[i + 1 : n + 1] = column[i:n]
        self.batch[i] = batch
        self.set(i, values)
        self.n = n + 1

    def set(self, i: int, values: tuple[float, float, bool, int, int]) -> None:
        """Write row ``i``'s statistic, threshold, alarm, calibrator code and order."""
        self.statistic[i], self.threshold[i], self.alarm[i], self.calibrator[i], self.order[i] = values

    def remove(self, i: int) -> None:
        """Drop row ``i`` (undoing a look a failed call wrote: usually the last one)."""
        n = self.n
        if i < n - 1:
            for name in _COLUMNS:
                column = getattr(self, name)
                column[i : n - 1] = column[i + 1 : n]
        self.n = n - 1

    def copy(self) -> _Columns:
        """An independent copy, trimmed to the rows filled (a checkpoint)."""
        out = _Columns.__new__(_Columns)
        out.n = self.n
        for name in _COLUMNS:
            setattr(out, name, getattr(self, name)[: max(self.n, 1)].copy())
        return out


_COLUMNS = ("batch", "statistic", "threshold", "alarm", "calibrator", "order")


def _number(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


class LookStore(Mapping[Key, Look]):
    """``(detector, batch) -> look`` for the whole stream, as columns per detector.

    A look is ``{"batch", "detector", "calibrator", "log10_statistic", "log10_threshold",
    "alarm"}``; reading one builds that dict afresh (callers may change it freely). Writing a key
    again overwrites its numbers in place and keeps its place in the order. Memory is O(1)
    Python objects per detector and per calibrator name, whatever the number of looks.

    Examples
    --------
    >>> store = LookStore()
    >>> store[("drift", 3)] = {"batch": 3, "detector": "drift", "calibrator": None,
    ...                        "log10_statistic": 0.5, "log10_threshold": 2.0, "alarm": False}
    >>> store[("drift", 3)]["log10_statistic"], len(store), ("drift", 4) in store
    (0.5, 1, False)
    """

    def __init__(self, looks: Mapping[Key, Look] | None = None) -> None:
        self._columns: dict[str, _Columns] = {}
        self.calibrators: list[str | None] = []
        self._calibrator_codes: dict[str | None, int] = {}
        self._written = 0  # looks ever written (the next look's order)
        self._len = 0
        for key, look in (looks or {}).items():
            self[key] = look

    # ------------------------------------------------------------------ the mapping
    def __len__(self) -> int:
        return self._len

    def __getitem__(self, key: Key) -> Look:
        found = self._locate(key)
        if found is None:
            raise KeyError(key)
        columns, i = found
        return self._look(key[0], columns, i)

    def get(self, key: Key, default: Any = None) -> Any:  # noqa: D102 (the Mapping's)
        found = self._locate(key)
        return default if found is None else self._look(key[0], *found)

    def __contains__(self, key: object) -> bool:
        return self._locate(key) is not None

    def __iter__(self) -> Iterator[Key]:
        for name, i in self._in_order():
            yield (name, int(self._columns[name].batch[i]))

    def items(self) -> Iterator[tuple[Key, Look]]:  # type: ignore[override]
        """Every ``(key, look)``, in the order the looks were first written (a dict's order)."""
        for name, i in self._in_order():
            columns = self._columns[name]
            yield (name, int(columns.batch[i])), self._look(name, columns, i)

    def values(self) -> Iterator[Look]:  # type: ignore[override]
        """Every look, in the order they were first written."""
        for _, look in self.items():
            yield look

    def latest(self, detector: str) -> Look | None:
        """The detector's look at its latest batch (None before its first look); O(1)."""
        columns = self._columns.get(detector)
        if columns is None or not columns.n:
            return None
        return self._look(detector, columns, columns.n - 1)

    def detectors(self) -> list[str]:
        """The detectors with at least one look, in the order of their first look."""
        names = [name for name, columns in self._columns.items() if columns.n]
        return sorted(names, key=lambda name: int(self._columns[name].order[: self._columns[name].n].min()))

    def __setitem__(self, key: Key, look: Look) -> None:
        name, batch = key
        code = self._calibrator_codes.get(look.get("calibrator"))
        if code is None:
            code = self._calibrator_codes[look.get("calibrator")] = len(self.calibrators)
            self.calibrators.append(look.get("calibrator"))
        statistic, threshold = look.get("log10_statistic"), look.get("log10_threshold")
        columns = self._columns.get(name)
        if columns is None:
            columns = self._columns[name] = _Columns()
        i = columns.find(int(batch))
        order = self._written if i < 0 else int(columns.order[i])
        values = (
            math.nan if statistic is None else float(statistic),
            math.nan if threshold is None else float(threshold),
            bool(look.get("alarm")),
            code,
            order,
        )
        if i < 0:
            columns.insert(int(batch), values)
            self._written += 1
            self._len += 1
        else:
            columns.set(i, values)

    def __delitem__(self, key: Key) -> None:
        found = self._locate(key)
        if found is None:
            raise KeyError(key)
        columns, i = found
        columns.remove(i)
        self._len -= 1

    def copy(self) -> LookStore:
        """An independent copy (what :meth:`ShiftWatch.checkpoint` keeps)."""
        out = LookStore.__new__(LookStore)
        out._columns = {name: columns.copy() for name, columns in self._columns.items()}
        out.calibrators = list(self.calibrators)
        out._calibrator_codes = dict(self._calibrator_codes)
        out._written, out._len = self._written, self._len
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and all(other.get(key) == look for key, look in self.items())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LookStore({self._len} looks of {len(self.detectors())} detectors)"

    # ------------------------------------------------------------------ columns
    def columns(self, detector: str) -> dict[str, npt.NDArray[Any]]:
        """One detector's looks as columns (views; batch increasing; NaN where a look has None)."""
        columns = self._columns.get(detector)
        return _Columns(1).arrays() if columns is None else columns.arrays()

    def python_objects(self) -> int:
        """Python objects the store holds (its containers, columns and names), for memory tests.

        It does not grow with the looks: per detector one column set, per calibrator one name.
        """
        per_detector = 2 + len(_COLUMNS)  # the key, the column set and its arrays
        return 4 + per_detector * len(self._columns) + 2 * len(self.calibrators)

    # ------------------------------------------------------------------ snapshots
    def __getstate__(self) -> dict[str, Any]:
        """Plain lists and trimmed arrays (``state_codec``: arrays go to the snapshot's array table)."""
        names = list(self._columns)
        filled = [self._columns[name].arrays() for name in names]
        return {
            "detectors": names,
            "calibrators": list(self.calibrators),
            "written": self._written,
            **{name: [c[name].copy() for c in filled] for name in _COLUMNS},
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._columns = {}
        for j, name in enumerate(state["detectors"]):
            columns = _Columns.__new__(_Columns)
            columns.n = int(np.asarray(state["batch"][j]).shape[0])
            for column, dtype in zip(_COLUMNS, _DTYPES, strict=True):
                values = paged.adopted(np.asarray(state[column][j]), dtype)  # cast as it is copied: owned
                setattr(columns, column, values if values.shape[0] else np.empty(1, dtype=dtype))
            self._columns[name] = columns
        self.calibrators = list(state["calibrators"])
        self._calibrator_codes = {cal: i for i, cal in enumerate(self.calibrators)}
        self._written = int(state["written"])
        self._len = sum(columns.n for columns in self._columns.values())

    # ------------------------------------------------------------------ helpers
    def _locate(self, key: object) -> tuple[_Columns, int] | None:
        if not (isinstance(key, tuple) and len(key) == 2):
            return None
        columns = self._columns.get(key[0])
        if columns is None or isinstance(key[1], bool) or not isinstance(key[1], (int, np.integer)):
            return None
        i = columns.find(int(key[1]))
        return None if i < 0 else (columns, i)

    def _look(self, name: str, columns: _Columns, i: int) -> Look:
        return {
            "batch": int(columns.batch[i]),
            "detector": name,
            "calibrator": self.calibrators[int(columns.calibrator[i])],
            "log10_statistic": _number(float(columns.statistic[i])),
            "log10_threshold": _number(float(columns.threshold[i])),
            "alarm": bool(columns.alarm[i]),
        }

    def _in_order(self) -> Iterator[tuple[str, int]]:
        """``(detector, row)`` of every look in the order they were first written."""
        names = [name for name, columns in self._columns.items() if columns.n]
        if not names:
            return
        if len(names) == 1:
            for i in range(self._columns[names[0]].n):
                yield names[0], i
            return
        orders = np.concatenate([self._columns[name].order[: self._columns[name].n] for name in names])
        which = np.repeat(np.arange(len(names)), [self._columns[name].n for name in names])
        rows = np.concatenate([np.arange(self._columns[name].n) for name in names])
        for k in np.argsort(orders, kind="stable"):
            yield names[int(which[k])], int(rows[k])


_DTYPES = (np.int64, np.float64, np.float64, np.bool_, np.int32, np.int64)
