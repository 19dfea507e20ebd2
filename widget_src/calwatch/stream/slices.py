"""Slices of the data: each row's slice columns as fixed codes, and mergeable counts per slice.

A user passes the columns to slice by beside the model outputs (``calibrate(..., meta=frame)``,
``observe(..., meta=frame)``: polars, pandas or pyarrow; numbers, text, categories, booleans,
dates). Their encoding is fixed once, from the calibration rows (:meth:`SliceEncoding.fit`):

* a number with more than :data:`DISCRETE_VALUES` distinct calibration values is cut into
  :data:`BINS` quantile bins of the calibration rows (or at the user's own cut points), read
  as ``hour < 9``, ``9 ≤ hour < 13``, ``hour ≥ 18``; one with fewer keeps each value
  (``weekday = 3``), and so do booleans;
* text and categories keep their :data:`TOP_VALUES` most frequent calibration values
  (``carrier = B6``); any other value is ``carrier: other``;
* dates and times are numbers (days, microseconds) shown as dates;
* every column has a ``missing`` code (null, NaN).

Each row then gets one integer code per column (:meth:`SliceEncoding.codes`), kept with the row
(:class:`~calwatch.stream.records.BatchRows` ``slice_codes``, the row codec, the row log), so a
label that comes late finds its row's slices however old the row is.

**Cells and the memory budget.** A *cell* is one value of one column (a single slice), or one
pair of values of two columns (``carrier = B6 & hour ≥ 18``). Every single column is counted;
a pair of columns is counted when the product of their code counts is at most
:data:`PAIR_CELLS` (400) and the pairs taken so far, in column order, hold at most
:data:`PAIR_BUDGET` (4,096) cells. So a monitor counts at most ``Σ_j c_j + 4,096`` cells (``c_j``
codes of column ``j``: 22 for text, 6 for a binned number, up to :data:`MAX_CODES` with one's own
cut points); ten numeric columns give 60 single cells and all 45 pairs, 1,620 more, while two
text columns of 20 kept values (484 cells) are not paired.

The counts per cell, and their history over batches, are :mod:`calwatch.stream.slice_counts`'s.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

IntArray = npt.NDArray[np.intp]
CodeArray = npt.NDArray[np.int16]

#: Quantile bins of a numeric column (cut at the calibration rows' 20%, 40%, 60%, 80% quantiles).
BINS = 5
#: Text and category columns keep their most frequent calibration values, the rest is "other".
TOP_VALUES = 20
#: A number with at most this many distinct calibration values keeps each value instead of bins.
DISCRETE_VALUES = 10
#: At most this many codes in one column (user cut points included).
MAX_CODES = 256
#: A pair of columns is counted when the product of their code counts is at most this.
PAIR_CELLS = 400
#: Cells of all the counted pairs together, at most (pairs are taken in column order).
PAIR_BUDGET = 4096
#: What a slice column holds, as the encoding remembers it (a batch must hold the same).
FAMILIES = ("number", "bool", "text", "date", "datetime")
_UNITS = {"date": "D", "datetime": "us"}
_EPOCH = dt.datetime(1970, 1, 1)


class SliceError(ValueError):
    """Slice columns that cannot be encoded (the message names the column)."""


class SliceTypeError(TypeError):
    """A slice column of the wrong type: nested values, objects, or a type that changed (names it)."""


# --------------------------------------------------------------------------- one column
@dataclass(frozen=True)
class ColumnCode:
    """How one slice column's values become integer codes (fixed by the calibration rows).

    Codes of a *binned* column: ``0 … len(edges)`` for the bins (``searchsorted(edges, x,
    side="right")``: bin ``i`` is ``edges[i−1] ≤ x < edges[i]``), then ``missing``. Codes of a
    column of *values*: ``0 … len(values) − 1``, then ``other`` (a value not kept), then
    ``missing``.

    Attributes
    ----------
    name : str
        The column's name.
    family : str
        One of :data:`FAMILIES`: what the column held at calibration.
    binned : bool
        Cut at ``edges`` (numbers, dates) rather than kept as ``values``.
    edges : tuple of float
        Cut points, increasing, in the column's numeric units (days or µs for dates).
    values : tuple
        Kept values, sorted: strings for text, floats for numbers and booleans (0.0, 1.0).
    labels : tuple of str
        Each code in words (``"hour ≥ 18"``, ``"carrier = B6"``, ``"carrier: other"``).
    """

    name: str
    family: str
    binned: bool
    edges: tuple[float, ...]
    values: tuple[Any, ...]
    labels: tuple[str, ...]

    @property
    def n_codes(self) -> int:
        """Codes of the column (bins or values, other, missing)."""
        return len(self.labels)

    @property
    def missing(self) -> int:
        """The code of a missing value (null, NaN)."""
        return len(self.labels) - 1

    @property
    def other(self) -> int | None:
        """The code of a value that was not kept (None for a binned column)."""
        return None if self.binned else len(self.values)

    def encode(self, series: pl.Series) -> CodeArray:
        """Codes of a batch's column (its family checked first).

        Raises
        ------
        SliceTypeError
            If the column holds another family of values than at calibration, or nested values.
        """
        family = family_of(series)
        if series.null_count() == series.len():
            family = "null"  # no value at all: whatever its dtype, every row is missing
        if {family, self.family} == {"date", "datetime"}:  # a date read as a time (pandas), or back
            series = series.cast(pl.Date if self.family == "date" else pl.Datetime("us"))
            family = self.family
        if family not in (self.family, "null"):
            msg = (
                f"meta column {self.name!r} holds {family} values, but {self.family} values when the "
                "monitor was calibrated: a slice column keeps its type"
            )
            raise SliceTypeError(msg)
        codes = np.full(series.len(), self.missing, dtype=np.int16)
        if family == "null":
            return codes
        if self.family == "text":
            # pyarrow's hash lookup, one thread: polars' replace_strict took milliseconds on a busy machine
            text = (series if series.dtype == pl.String else series.cast(pl.String)).to_arrow()
            if text.type != pa.large_string():
                text = text.cast(pa.large_string())
            other = self.other
            assert other is not None
            found = pc.index_in(text, value_set=_value_set(self.values))
            if found.null_count:  # values not kept, and missing ones (told apart below)
                found = pc.fill_null(found, other)
            codes[:] = found.to_numpy(zero_copy_only=False)
            if text.null_count:
                codes[np.asarray(pc.is_null(text).to_numpy(zero_copy_only=False), dtype=bool)] = self.missing
            return codes
        x = numbers_of(series, self.family)
        present = ~np.isnan(x)
        if self.binned:
            codes[present] = np.searchsorted(np.asarray(self.edges), x[present], side="right")
            return codes
        kept = np.asarray(self.values, dtype=np.float64)
        where = np.minimum(np.searchsorted(kept, x[present]), kept.shape[0] - 1)
        other = self.other
        assert other is not None
        codes[present] = np.where(kept[where] == x[present], where, other)
        return codes


@functools.lru_cache(maxsize=1024)
def _value_set(values: tuple[str, ...]) -> pa.Array:
    """The kept values of a text column as an Arrow array (made once per encoding, not per batch)."""
    return pa.array(values, type=pa.large_string())


def family_of(series: pl.Series) -> str:
    """What a column holds: one of :data:`FAMILIES`, or ``"null"`` (no value at all).

    Raises
    ------
    SliceTypeError
        For nested values (lists, arrays, structs), Python objects and other types, naming the column.
    """
    dtype = series.dtype
    if dtype == pl.Null:
        return "null"
    if dtype == pl.Boolean:
        return "bool"
    if dtype.is_numeric():
        return "number"
    if dtype == pl.String or isinstance(dtype, (pl.Categorical, pl.Enum)):
        return "text"
    if dtype == pl.Date:
        return "date"
    if isinstance(dtype, pl.Datetime):
        return "datetime"
    if dtype.is_nested():
        msg = (
            f"meta column {series.name!r} holds nested values ({dtype}): a slice column holds one "
            "scalar per row (number, text, category, boolean or date)"
        )
        raise SliceTypeError(msg)
    msg = (
        f"meta column {series.name!r} holds values of type {dtype} that cannot be sliced by (unhashable "
        "objects?): use numbers, text, categories, booleans or dates"
    )
    raise SliceTypeError(msg)


def numbers_of(series: pl.Series, family: str) -> npt.NDArray[np.float64]:
    """A numeric, boolean or date column as float64 (dates in days, times in µs; NaN where missing)."""
    if family == "datetime":
        series = series.dt.cast_time_unit("us")
    if family in _UNITS:
        series = series.to_physical()
    elif not (series.dtype.is_integer() or series.dtype.is_float()):  # booleans, decimals
        series = series.cast(pl.Float64)
    return np.asarray(series.to_numpy(), dtype=np.float64)  # nulls read as NaN


def fit_column(series: pl.Series, cuts: Sequence[Any] | None = None) -> ColumnCode:
    """The encoding of one column, from its calibration values (and the user's cut points, if any).

    Raises
    ------
    SliceError
        If the column has no value, or cut points are given for a text column or are not numbers
        (dates for a date column).
    SliceTypeError
        For nested values or objects.
    """
    name = series.name
    family = family_of(series)
    if family == "null" or series.null_count() == series.len():
        msg = f"meta column {name!r} has no values in the calibration rows: nothing to slice by"
        raise SliceError(msg)
    if family == "text":
        if cuts is not None:
            msg = f"slice_bins[{name!r}]: cut points are for numbers and dates; {name!r} holds text"
            raise SliceError(msg)
        text = pl.DataFrame({"value": series.cast(pl.String).drop_nulls()})
        counts = text.group_by("value").len().sort(["len", "value"], descending=[True, False])
        values = tuple(sorted(str(v) for v in counts["value"].head(TOP_VALUES).to_list()))
        labels = (*(f"{name} = {v}" for v in values), f"{name}: other", f"{name}: missing")
        return ColumnCode(name, family, False, (), values, labels)
    x = numbers_of(series, family)
    x = x[~np.isnan(x)]
    if x.shape[0] == 0:
        msg = f"meta column {name!r} has no values in the calibration rows: nothing to slice by"
        raise SliceError(msg)
    if cuts is not None:
        edges = _user_edges(name, family, cuts)
        return ColumnCode(name, family, True, edges, (), _bin_labels(name, family, edges))
    distinct = np.unique(x)
    if family == "bool" or distinct.shape[0] <= DISCRETE_VALUES:
        kept = (0.0, 1.0) if family == "bool" else tuple(float(v) for v in distinct)
        words = [_value_words(family, v) for v in kept]
        labels = (*(f"{name} = {w}" for w in words), f"{name}: other", f"{name}: missing")
        return ColumnCode(name, family, False, (), kept, labels)
    quantiles = np.quantile(x, np.arange(1, BINS) / BINS, method="higher")
    edges = tuple(float(e) for e in np.unique(quantiles) if e > distinct[0])
    return ColumnCode(name, family, True, edges, (), _bin_labels(name, family, edges))


def _user_edges(name: str, family: str, cuts: Sequence[Any]) -> tuple[float, ...]:
    """The user's cut points as sorted distinct numbers in the column's units."""
    try:
        values = [_cut_number(c, family) for c in cuts]
    except (TypeError, ValueError) as err:
        msg = f"slice_bins[{name!r}] must be numbers (dates for a date column); got {list(cuts)!r}"
        raise SliceError(msg) from err
    edges = tuple(sorted(set(values)))
    if not edges or not all(math.isfinite(e) for e in edges) or len(edges) > MAX_CODES - 2:
        msg = f"slice_bins[{name!r}] must hold 1 to {MAX_CODES - 2} finite cut points; got {list(cuts)!r}"
        raise SliceError(msg)
    return edges


def _cut_number(cut: Any, family: str) -> float:
    if family in _UNITS:
        if not isinstance(cut, (dt.date, np.datetime64, str)):
            raise TypeError(cut)
        return float(np.asarray(cut, dtype=f"datetime64[{_UNITS[family]}]").astype(np.int64))
    if isinstance(cut, (bool, str)) or not isinstance(cut, (int, float, np.integer, np.floating)):
        raise TypeError(cut)
    return float(cut)


def _value_words(family: str, value: float) -> str:
    """A kept value in words: ``True``, ``3``, ``2.5``, ``2013-05-01``."""
    if family == "bool":
        return str(bool(value))
    if family == "date":
        return (_EPOCH + dt.timedelta(days=int(value))).date().isoformat()
    if family == "datetime":
        moment = _EPOCH + dt.timedelta(microseconds=int(value))
        if moment.time() == dt.time():
            return moment.date().isoformat()
        return moment.isoformat(sep=" ", timespec="seconds" if moment.microsecond == 0 else "microseconds")
    return _number_words(value)


def _number_words(value: float) -> str:
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def _bin_labels(name: str, family: str, edges: tuple[float, ...]) -> tuple[str, ...]:
    """Bins in words: ``x < a``, ``a ≤ x < b``, …, ``x ≥ z``, then ``x: missing``."""
    if not edges:
        return (f"{name}: any", f"{name}: missing")
    words = [_value_words(family, e) for e in edges]
    labels = [f"{name} < {words[0]}"]
    labels += [f"{lo} ≤ {name} < {hi}" for lo, hi in itertools.pairwise(words)]
    labels.append(f"{name} ≥ {words[-1]}")
    return (*labels, f"{name}: missing")


# --------------------------------------------------------------------------- a table of columns
def meta_columns(meta: Any) -> dict[str, pl.Series]:
    """The columns of a polars, pandas or pyarrow table (or a dict of arrays) as polars series.

    Each column is converted on its own, so a column that cannot be is named.

    Raises
    ------
    SliceTypeError
        If ``meta`` is not a table, a column name is not a string, or a column cannot be read
        (mixed or unhashable Python objects).
    """
    if isinstance(meta, pl.DataFrame):
        return {name: meta[name] for name in meta.columns}
    module = type(meta).__module__.split(".")[0]
    if module == "pandas" and hasattr(meta, "columns"):
        names = list(meta.columns)
        _check_names(names)
        return {name: _converted(name, lambda n=name: pl.from_pandas(meta[[n]])[n]) for name in names}
    if module == "pyarrow" and hasattr(meta, "column_names"):
        names = list(meta.column_names)
        _check_names(names)
        return {name: _converted(name, lambda n=name: _arrow_column(meta, n)) for name in names}
    if isinstance(meta, Mapping):
        names = list(meta)
        _check_names(names)
        return {name: _converted(name, lambda n=name: _plain_column(n, meta[n])) for name in names}
    msg = (
        "meta must be a table of slice columns (a polars, pandas or pyarrow table, or a dict of "
        f"columns); got {type(meta).__name__}"
    )
    raise SliceTypeError(msg)


def _check_names(names: list[Any]) -> None:
    bad = [n for n in names if not isinstance(n, str) or not n]
    if bad:
        msg = f"meta column names must be non-empty strings; got {bad[0]!r}"
        raise SliceTypeError(msg)
    if len(set(names)) != len(names):
        msg = "meta has a column name twice"
        raise SliceTypeError(msg)


def _arrow_column(table: Any, name: str) -> pl.Series:
    frame = pl.from_arrow(table.select([name]))
    assert isinstance(frame, pl.DataFrame)
    return frame[name]


def _plain_column(name: str, values: Any) -> pl.Series:
    if isinstance(values, pl.Series):
        return values.alias(name)
    if isinstance(values, np.ndarray) and values.ndim != 1:
        msg = f"meta column {name!r} must be one-dimensional; got shape {values.shape}"
        raise SliceTypeError(msg)
    if isinstance(values, np.ndarray) and values.dtype.kind == "M":
        unit = np.datetime_data(values.dtype)[0]
        if unit not in ("D", "ms", "us", "ns"):  # the resolutions polars reads
            values = values.astype("datetime64[us]")
    return pl.Series(name, values)


def _converted(name: str, convert: Any) -> pl.Series:
    try:
        series = convert()
    except SliceTypeError:
        raise
    except Exception as err:  # polars' own words about a column it cannot take
        msg = (
            f"meta column {name!r} cannot be read as one scalar per row (numbers, text, categories, "
            f"booleans or dates): {type(err).__name__}: {err}"
        )
        raise SliceTypeError(msg) from err
    assert isinstance(series, pl.Series)
    family_of(series)  # nested values and objects are refused here, naming the column
    return series


# --------------------------------------------------------------------------- the encoding
@dataclass(frozen=True)
class SliceEncoding:
    """The slice columns' codes and the cells they are counted in (fixed at calibration).

    Cells are laid out table by table: each single column, then each counted pair ``(i, j)``
    (its cell ``a·c_j + b`` for codes ``a`` of column ``i`` and ``b`` of column ``j``), each
    table starting at its ``offsets`` entry.

    Attributes
    ----------
    columns : tuple of ColumnCode
    pairs : tuple of (int, int)
        The pairs of columns counted (indices into ``columns``, ``i < j``).
    offsets : tuple of int
        First cell of each table (singles, then pairs), and the number of cells last.
    """

    columns: tuple[ColumnCode, ...]
    pairs: tuple[tuple[int, int], ...]
    offsets: tuple[int, ...]

    @classmethod
    def fit(cls, meta: Any, n_rows: int, bins: Mapping[str, Sequence[Any]] | None = None) -> SliceEncoding:
        """The encoding of a calibration table of slice columns.

        Parameters
        ----------
        meta : polars, pandas or pyarrow table, or dict of str to array
            One row per calibration row.
        n_rows : int
            Calibration rows.
        bins : dict of str to sequence, optional
            Cut points of numeric (or date) columns, instead of quantile bins.

        Raises
        ------
        SliceError, SliceTypeError
            Naming the column: a wrong length, no values, nested or unhashable values; or no
            column at all, or ``bins`` naming a column ``meta`` lacks.
        """
        series = meta_columns(meta)
        if not series:
            msg = "meta has no columns: pass the columns to slice by"
            raise SliceError(msg)
        cuts = dict(bins or {})
        unknown = [name for name in cuts if name not in series]
        if unknown:
            msg = f"slice_bins names {unknown[0]!r}, which is not a column of meta"
            raise SliceError(msg)
        for name, column in series.items():
            _check_length(name, column, n_rows)
        columns = tuple(fit_column(column, cuts.get(name)) for name, column in series.items())
        return cls.of(columns)

    @classmethod
    def of(cls, columns: tuple[ColumnCode, ...]) -> SliceEncoding:
        """The encoding of these columns, with the pairs the budget allows (module docstring)."""
        pairs: list[tuple[int, int]] = []
        used = 0
        for i in range(len(columns)):
            for j in range(i + 1, len(columns)):
                size = columns[i].n_codes * columns[j].n_codes
                if size <= PAIR_CELLS and used + size <= PAIR_BUDGET:
                    pairs.append((i, j))
                    used += size
        sizes = [c.n_codes for c in columns] + [columns[i].n_codes * columns[j].n_codes for i, j in pairs]
        offsets = tuple(int(v) for v in np.concatenate([[0], np.cumsum(sizes)]))
        return cls(columns, tuple(pairs), offsets)

    @property
    def names(self) -> tuple[str, ...]:
        """The slice columns' names."""
        return tuple(c.name for c in self.columns)

    @property
    def n_cells(self) -> int:
        """Cells counted (single values and pairs of values)."""
        return self.offsets[-1]

    @property
    def tables(self) -> tuple[tuple[int, ...], ...]:
        """The columns of each table: ``(i,)`` for each single column, then each pair ``(i, j)``."""
        return (*((i,) for i in range(len(self.columns))), *self.pairs)

    def codes(self, meta: Any, n_rows: int) -> CodeArray:
        """Each row's code in each slice column, ``(n_rows, n_columns)`` int16.

        Raises
        ------
        SliceError, SliceTypeError
            Naming the column: a missing or unknown column, a wrong length, nested or unhashable
            values, or values of another type than at calibration.
        """
        series = meta_columns(meta)
        missing = [name for name in self.names if name not in series]
        if missing:
            msg = f"meta lacks the slice column {missing[0]!r} (meta's columns are fixed at calibrate())"
            raise SliceError(msg)
        extra = [name for name in series if name not in self.names]
        if extra:
            msg = (
                f"meta column {extra[0]!r} was not a slice column at calibrate(): the slice columns are "
                f"{list(self.names)}"
            )
            raise SliceError(msg)
        out = np.empty((n_rows, len(self.columns)), dtype=np.int16)
        for j, column in enumerate(self.columns):
            values = series[column.name]
            _check_length(column.name, values, n_rows)
            out[:, j] = column.encode(values)
        return out

    def cells(self, codes: CodeArray) -> npt.NDArray[np.int32]:
        """Each row's cell in every table, ``(rows, tables)``: singles first, then pairs."""
        c = np.asarray([col.n_codes for col in self.columns], dtype=np.int32)
        n = len(self.columns)
        wide = codes.astype(np.int32)
        singles = wide + np.asarray(self.offsets[:n], dtype=np.int32)
        if not self.pairs:
            return singles
        i, j = (np.asarray(side, dtype=np.intp) for side in zip(*self.pairs, strict=True))
        pairs = wide[:, i] * c[j] + wide[:, j] + np.asarray(self.offsets[n:-1], dtype=np.int32)
        return np.concatenate([singles, pairs], axis=1)

    def cell_tables(self) -> IntArray:
        """The table of each cell (index into :attr:`tables`)."""
        sizes = np.diff(np.asarray(self.offsets))
        return np.repeat(np.arange(sizes.shape[0]), sizes)

    def words(self, cell: int) -> str:
        """A cell in words: ``"carrier = B6"``, ``"carrier = B6 & hour ≥ 18"``."""
        table = int(np.searchsorted(np.asarray(self.offsets), cell, side="right")) - 1
        local = cell - self.offsets[table]
        columns = self.tables[table]
        if len(columns) == 1:
            return self.columns[columns[0]].labels[local]
        i, j = columns
        a, b = divmod(local, self.columns[j].n_codes)
        return f"{self.columns[i].labels[a]} & {self.columns[j].labels[b]}"


def _check_length(name: str, column: pl.Series, n_rows: int) -> None:
    if column.len() != n_rows:
        msg = f"meta column {name!r} has {column.len()} values but the batch has {n_rows} rows"
        raise SliceError(msg)


__all__ = [
    "BINS",
    "DISCRETE_VALUES",
    "FAMILIES",
    "MAX_CODES",
    "PAIR_BUDGET",
    "PAIR_CELLS",
    "TOP_VALUES",
    "CodeArray",
    "ColumnCode",
    "SliceEncoding",
    "SliceError",
    "SliceTypeError",
    "family_of",
    "fit_column",
    "meta_columns",
    "numbers_of",
]
