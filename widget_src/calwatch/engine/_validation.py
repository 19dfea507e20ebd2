"""Input checks shared by the engine: each error names the argument and what was expected."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

#: Rows of a probability matrix must sum to 1 within this absolute tolerance.
PROBABILITY_SUM_TOLERANCE = 1e-6


def renormalise_tolerance(n_classes: int) -> float:
    """How far from 1 a row sum may be and still be left as it is: ``4·K·ε`` (``ε = 2⁻⁵²``).

    Dividing a row by its computed sum ``s`` leaves a row whose computed sum is within
    ``(2K − 1)·u`` of 1 (``u = ε/2``: the sum's error ``γ_{K−1}``, once for ``s`` and once for the
    new sum, plus half an ulp per quotient), for any summation order. A row already that close is
    therefore kept bit for bit, and :func:`check_probabilities` is idempotent: checking its own
    output returns the same bits, so skipping the re-check of a :class:`ValidatedProbs` changes
    nothing, and a monitor's stored probabilities re-checked after a save and load are the ones
    its calibrators saw.

    Examples
    --------
    >>> renormalise_tolerance(10) == 40 * 2.0**-52
    True
    """
    return 4.0 * n_classes * float(np.finfo(np.float64).eps)


class ValidatedProbs(np.ndarray[tuple[int, int], np.dtype[np.float64]]):
    """A probability matrix :func:`validated_probabilities` has checked: the engine trusts it as is.

    What :func:`check_probabilities` returns for it is its own values (a read-only plain view),
    without the O(m·K) passes over the data (range, row sums, the renormalising copy): the
    check is idempotent (:func:`renormalise_tolerance`), so skipping it gives the same bits as
    running it. The monitor validates each batch once at its boundary and hands this to every
    calibrator, which would otherwise each re-check it.

    The values are read-only, so they cannot drift from what was checked. Nothing derived from
    one keeps the mark: arithmetic, reductions and indexing give plain ``ndarray`` (as
    ``np.memmap`` does), and the few numpy calls that keep the subclass (``copy``, ``reshape``,
    ``astype``, ``concatenate``, unpickling) give an unvouched one, which is checked in full
    like any array.
    """

    _vouched: bool = False

    def __array_finalize__(self, obj: npt.NDArray[Any] | None, /) -> None:
        self._vouched = False  # every new array (view, copy, result) starts unvouched

    def __array_wrap__(
        self,
        array: npt.NDArray[Any],
        context: tuple[np.ufunc, tuple[Any, ...], int] | None = None,
        return_scalar: bool = False,
        /,
    ) -> Any:
        if array is self:
            return array
        plain = array.view(np.ndarray)
        return plain[()] if return_scalar else plain

    def __getitem__(self, key: Any, /) -> Any:
        item = super().__getitem__(key)
        return item.view(np.ndarray) if isinstance(item, ValidatedProbs) else item

    @property
    def vouched(self) -> bool:
        """Whether these are the very values :func:`validated_probabilities` checked."""
        return self._vouched


def validated_probabilities(
    P: Any,
    name: str = "P",
    *,
    n_classes: int | None = None,
    tolerance: float = PROBABILITY_SUM_TOLERANCE,
    copy: bool = True,
) -> ValidatedProbs:
    """:func:`check_probabilities`, returned as a read-only :class:`ValidatedProbs`.

    An already vouched ``ValidatedProbs`` with the right number of columns is returned as is.
    ``copy=False`` is for a caller that hands over a fresh array of its own (a softmax, columns
    just gathered from a log) and never writes to it again: when no row needs dividing the
    result is a read-only view of it, not a copy.

    Examples
    --------
    >>> V = validated_probabilities([[0.25, 0.75], [0.5, 0.5]])
    >>> type(V).__name__, V.vouched, V.flags.writeable
    ('ValidatedProbs', True, False)
    >>> validated_probabilities(V) is V
    True
    >>> type(V[0]).__name__, type(1.0 - V).__name__  # derived arrays are plain
    ('ndarray', 'ndarray')
    """
    if _is_vouched(P, n_classes, tolerance):
        assert isinstance(P, ValidatedProbs)
        return P
    checked = check_probabilities(P, name, n_classes=n_classes, tolerance=tolerance, copy=copy)
    checked.flags.writeable = False
    out = checked.view(ValidatedProbs)
    out._vouched = True
    return out


def stacked_rows(parts: list[tuple[Any, npt.NDArray[np.intp]]]) -> npt.NDArray[np.float64]:
    """The rows ``rows`` of each probability matrix ``P`` of ``parts``, stacked in order.

    Every row is checked on its own (its range, its sum, its renormalisation), so rows taken
    from vouched :class:`ValidatedProbs` are as checked as the matrices were: the result stays
    vouched when every part is (the one exception to "nothing derived keeps the mark"), and the
    calibrators that score it skip the O(m·K) re-check. One part whose rows are all of its rows,
    in order, is returned as it is (no copy).

    Examples
    --------
    >>> V = validated_probabilities([[0.25, 0.75], [0.5, 0.5], [1.0, 0.0]])
    >>> W = stacked_rows([(V, np.array([2, 0]))])
    >>> W.tolist(), W.vouched
    ([[1.0, 0.0], [0.25, 0.75]], True)
    >>> stacked_rows([(V, np.arange(3))]) is V
    True
    """
    if len(parts) == 1:
        P, rows = parts[0]
        if rows.shape[0] == P.shape[0] and np.array_equal(rows, np.arange(P.shape[0])):
            out: npt.NDArray[np.float64] = P
            return out
    stacked = np.concatenate([np.asarray(P)[rows] for P, rows in parts])
    if not (stacked.shape[0] and all(isinstance(P, ValidatedProbs) and P._vouched for P, _ in parts)):
        return stacked
    stacked.flags.writeable = False
    vouched = stacked.view(ValidatedProbs)
    vouched._vouched = True
    return vouched


def _is_vouched(P: Any, n_classes: int | None, tolerance: float) -> bool:
    """A vouched :class:`ValidatedProbs` that needs no re-check at these settings."""
    return (
        isinstance(P, ValidatedProbs)
        and P._vouched
        and P.ndim == 2
        and P.shape[0] > 0
        and P.shape[1] >= 2
        and (n_classes is None or P.shape[1] == n_classes)
        and tolerance >= renormalise_tolerance(P.shape[1])
    )


def check_probabilities(
    P: Any,
    name: str = "P",
    *,
    n_classes: int | None = None,
    tolerance: float = PROBABILITY_SUM_TOLERANCE,
    copy: bool = True,
) -> npt.NDArray[np.float64]:
    """Validate a probability matrix and return it as float64, rows renormalised to sum to 1.

    A row whose sum ``s`` is off by more than :func:`renormalise_tolerance` (``4·K·ε``) is
    divided by ``s``; a row already that close is kept as it is (dividing would move it by an
    ulp or so, and make the check not idempotent). The result is a fresh array, except for a
    vouched :class:`ValidatedProbs`, whose values come back as a read-only plain view with no
    pass over the data, and with ``copy=False``.

    Parameters
    ----------
    P : array-like of shape (m, K)
        One probability vector per row.
    name : str
        The argument's name, used in error messages.
    n_classes : int, optional
        The number of columns expected (the classes seen at calibration).
    tolerance : float
        How far a row sum may be from 1 (float32 model outputs drift by ~1e-7).
    copy : bool
        ``False``: when no row needs dividing and ``P`` is C-ordered float64 already, return a
        read-only view of ``P`` instead of a copy. For callers that only read the matrix while
        they run (the conformal classifier's fit and predictions): at K = 1,000 the copy costs
        as much as the rest of LAC's ``predict_sets``.

    Raises
    ------
    ValueError
        Wrong shape, NaN or inf, entries outside [0, 1], or rows not summing to 1.
    TypeError
        A non-numeric dtype.

    Examples
    --------
    >>> check_probabilities([[0.4, 0.4], [1, 0]], tolerance=0.25).tolist()  # row 0 divided by 0.8
    [[0.5, 0.5], [1.0, 0.0]]
    """
    if _is_vouched(P, n_classes, tolerance):
        values: npt.NDArray[np.float64] = P.view(np.ndarray)
        return values
    arr = np.asarray(P)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        msg = f"{name} must be a numeric array of probabilities; got dtype {arr.dtype}"
        raise TypeError(msg)
    if arr.ndim != 2:
        msg = f"{name} must be a 2-D array of shape (rows, classes); got shape {arr.shape}"
        raise ValueError(msg)
    if arr.shape[0] == 0:
        msg = f"{name} is empty: expected at least one row"
        raise ValueError(msg)
    if arr.shape[1] < 2:
        msg = f"{name} must have at least 2 columns (classes); got shape {arr.shape}"
        raise ValueError(msg)
    if n_classes is not None and arr.shape[1] != n_classes:
        msg = f"{name} has {arr.shape[1]} columns but the calibrator was fitted on {n_classes} classes"
        raise ValueError(msg)
    # C order (no copy for C-ordered float64 input): row sums, and so the result, then depend on
    # the values only, not on the layout.
    values = np.ascontiguousarray(arr, dtype=np.float64)
    # min/max propagate NaN and expose ±inf, so they double as the finiteness check; the
    # offending row is only searched for on the error path.
    lo, hi, sums = _range_and_row_sums(values)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        row = int(np.argwhere(~np.isfinite(values))[0, 0])
        msg = f"{name} contains NaN or inf (first in row {row})"
        raise ValueError(msg)
    if lo < 0.0 or hi > 1.0 + tolerance:
        msg = f"{name} must hold probabilities in [0, 1]; found values in [{lo:.6g}, {hi:.6g}]"
        raise ValueError(msg)
    off = np.abs(sums - 1.0)
    bad = off > tolerance
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        msg = (
            f"{name} rows must sum to 1 (within {tolerance:g}); row {row} sums to {sums[row]:.9g}"
            f" ({int(bad.sum())} rows in all). Pass probabilities, not logits or scores."
        )
        raise ValueError(msg)
    divide = np.flatnonzero(off > renormalise_tolerance(values.shape[1]))
    if divide.shape[0] == values.shape[0]:  # e.g. float32 outputs: every row, in one fused pass
        out: npt.NDArray[np.float64] = values / sums[:, None]
        return out
    if not copy and not divide.shape[0]:
        view = values.view()
        view.flags.writeable = False
        return view
    out = values.copy()  # C order, never the caller's array
    if divide.shape[0]:
        out[divide] /= sums[divide, None]
    return out


#: Matrices larger than this many entries are scanned in row chunks of ``_SCAN_CHUNK`` entries:
#: min, max and row sums then read each chunk from cache, not the whole matrix from memory 3 times.
_SCAN_CHUNKED_ABOVE = 1 << 22
_SCAN_CHUNK = 1 << 19


def _range_and_row_sums(values: npt.NDArray[np.float64]) -> tuple[float, float, npt.NDArray[np.float64]]:
    """Smallest and largest entry (NaN if any is) and the row sums of a C-ordered matrix.

    Row sums by ``einsum``: ~4x faster than ``values.sum(axis=1)`` on short rows, and any
    summation order will do (:func:`renormalise_tolerance` bounds every order's error). Each
    row is summed by the same code whatever rows are around it, so a row's sum, and so its
    renormalisation, depends on the row alone.
    """
    m, K = values.shape
    if K == 2:  # one addition a row, whatever the order: einsum's sums bit for bit, ~20x faster
        return float(values.min()), float(values.max()), values[:, 0] + values[:, 1]
    if m * K <= _SCAN_CHUNKED_ABOVE:
        return float(values.min()), float(values.max()), np.einsum("ij->i", values)
    sums = np.empty(m, dtype=np.float64)
    lo, hi = math.inf, -math.inf
    step = max(1, _SCAN_CHUNK // K)
    for start in range(0, m, step):
        chunk = values[start : start + step]
        chunk_lo, chunk_hi = float(chunk.min()), float(chunk.max())
        if math.isnan(chunk_lo) or math.isnan(chunk_hi):  # Python's min() would drop a NaN
            return math.nan, math.nan, sums
        lo, hi = min(lo, chunk_lo), max(hi, chunk_hi)
        np.einsum("ij->i", chunk, out=sums[start : start + step])
    return lo, hi, sums


def check_labels(
    y: Any, n_classes: int, name: str = "y", *, n_rows: int | None = None
) -> npt.NDArray[np.intp]:
    """Validate integer class labels in ``0..n_classes-1`` and return them as ``intp``.

    Raises
    ------
    ValueError
        Wrong length, non-integer values, or labels outside the known classes.
    """
    arr = np.asarray(y)
    if arr.ndim != 1:
        msg = f"{name} must be a 1-D array of class labels; got shape {arr.shape}"
        raise ValueError(msg)
    if n_rows is not None and arr.shape[0] != n_rows:
        msg = f"{name} has {arr.shape[0]} labels but there are {n_rows} rows"
        raise ValueError(msg)
    if np.issubdtype(arr.dtype, np.floating):
        if not np.isfinite(arr).all() or not np.all(arr == np.round(arr)):
            msg = f"{name} must hold integer class indices; found non-integer values"
            raise ValueError(msg)
        arr = arr.astype(np.intp)
    elif not np.issubdtype(arr.dtype, np.integer):
        msg = f"{name} must hold integer class indices 0..{n_classes - 1}; got dtype {arr.dtype}"
        raise TypeError(msg)
    out = arr.astype(np.intp, copy=False)
    if out.size and (out.min() < 0 or out.max() >= n_classes):
        bad = out[(out < 0) | (out >= n_classes)]
        msg = (
            f"{name} holds labels outside the known classes 0..{n_classes - 1}: "
            f"{sorted(set(bad.tolist()))[:5]}"
        )
        raise ValueError(msg)
    return out


def check_alpha(alpha: float, name: str = "alpha") -> float:
    """Validate a miscoverage level in the open interval (0, 1).

    Examples
    --------
    >>> check_alpha(0.1)
    0.1
    >>> check_alpha("0.1")
    Traceback (most recent call last):
    ...
    TypeError: alpha must be a number in (0, 1); got '0.1'
    """
    if isinstance(alpha, bool) or not isinstance(alpha, int | float | np.integer | np.floating):
        msg = f"{name} must be a number in (0, 1); got {alpha!r}"
        raise TypeError(msg)
    value = float(alpha)
    if not 0.0 < value < 1.0:
        msg = f"{name} must be in (0, 1); got {alpha!r}"
        raise ValueError(msg)
    return value


def as_float_array(
    value: Any, name: str, *, ndim: int | tuple[int, ...], allow_inf: bool = False
) -> npt.NDArray[np.float64]:
    """``value`` as a float64 array with the given number of dimensions, finite unless allowed.

    Raises
    ------
    TypeError
        A non-numeric dtype.
    ValueError
        A wrong number of dimensions, or NaN (or ±inf unless ``allow_inf``).
    """
    arr = np.asarray(value)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        msg = f"{name} must be a numeric array; got dtype {arr.dtype}"
        raise TypeError(msg)
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if arr.ndim not in dims:
        want = " or ".join(f"{d}-D" for d in dims)
        msg = f"{name} must be a {want} array; got shape {arr.shape}"
        raise ValueError(msg)
    out: npt.NDArray[np.float64] = np.asarray(arr, dtype=np.float64)
    if out.size:
        lo, hi = float(out.min()), float(out.max())  # min/max propagate NaN: one pass, no mask
        if (
            math.isnan(lo)
            or math.isnan(hi)
            or (not allow_inf and not (math.isfinite(lo) and math.isfinite(hi)))
        ):
            bad = np.isnan(out) if allow_inf else ~np.isfinite(out)
            where = np.argwhere(bad)
            msg = f"{name} contains {'NaN' if allow_inf else 'NaN or inf'} (first at index {tuple(where[0])})"
            raise ValueError(msg)
    return out


def check_groups_from(groups_from: Any, name: str = "groups_from") -> tuple[str, ...] | None:
    """``groups_from`` as a tuple of distinct, non-empty column names (None stays None).

    Examples
    --------
    >>> check_groups_from("hour"), check_groups_from(["carrier", "hour"]), check_groups_from(None)
    (('hour',), ('carrier', 'hour'), None)
    """
    if groups_from is None:
        return None
    names = (groups_from,) if isinstance(groups_from, str) else groups_from
    try:
        columns = tuple(names)
    except TypeError:
        columns = ()
    if not columns or not all(isinstance(c, str) and c for c in columns) or len(set(columns)) != len(columns):
        msg = f"{name} must be a column name or a list of distinct column names; got {groups_from!r}"
        raise ValueError(msg)
    return columns
