"""Input checks shared by the engine: each error names the argument and what was expected."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

#: Rows of a probability matrix must sum to 1 within this absolute tolerance.
PROBABILITY_SUM_TOLERANCE = 1e-6


def check_probabilities(
    P: Any,
    name: str = "P",
    *,
    n_classes: int | None = None,
    tolerance: float = PROBABILITY_SUM_TOLERANCE,
) -> npt.NDArray[np.float64]:
    """Validate a probability matrix and return it as float64, rows renormalised to sum to 1.

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

    Raises
    ------
    ValueError
        Wrong shape, NaN or inf, entries outside [0, 1], or rows not summing to 1.
    TypeError
        A non-numeric dtype.
    """
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
    values = np.asarray(arr, dtype=np.float64)  # no copy for float64 input: the division below copies
    # min/max propagate NaN and expose ±inf, so they double as the finiteness check; the
    # offending row is only searched for on the error path.
    lo, hi = float(values.min()), float(values.max())
    if not (np.isfinite(lo) and np.isfinite(hi)):
        row = int(np.argwhere(~np.isfinite(values))[0, 0])
        msg = f"{name} contains NaN or inf (first in row {row})"
        raise ValueError(msg)
    if lo < 0.0 or hi > 1.0 + tolerance:
        msg = f"{name} must hold probabilities in [0, 1]; found values in [{lo:.6g}, {hi:.6g}]"
        raise ValueError(msg)
    sums = values.sum(axis=1)
    bad = np.abs(sums - 1.0) > tolerance
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        msg = (
            f"{name} rows must sum to 1 (within {tolerance:g}); row {row} sums to {sums[row]:.9g}"
            f" ({int(bad.sum())} rows in all). Pass probabilities, not logits or scores."
        )
        raise ValueError(msg)
    out: npt.NDArray[np.float64] = values / sums[:, None]  # one fused pass: the fresh, renormalised copy
    return out


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
