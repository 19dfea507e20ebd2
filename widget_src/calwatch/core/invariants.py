"""Invariants of counted statistics: small checks that each statistics type runs on its own fields.

A statistics type (per-batch counts of a calibrator kind) states what its numbers must satisfy in a
``check(n_rows) -> list[str]`` method built from these helpers: counts are non-negative integers,
nested counts are ordered (covered ≤ labelled ≤ rows), float sums are finite and in range. Each
returns human-readable violations (empty when the values are sound); the caller decides what a
violation means (the snapshot reader raises ``SnapshotError`` naming the file and field).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np

#: Problems named in one error message (the rest are counted).
MAX_SHOWN = 5


def is_count(value: Any) -> bool:
    """Whether ``value`` is a non-negative integer (``bool`` is not a count).

    Examples
    --------
    >>> is_count(3), is_count(np.int64(0)), is_count(-1), is_count(2.0), is_count(None)
    (True, True, False, False, False)
    """
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and bool(value >= 0)


def is_counts(values: Any, length: int | None = None) -> bool:
    """Whether ``values`` is a 1-D integer array of non-negative counts (of ``length``, if given)."""
    return not counts_problems("values", values, length)


def count_problems(name: str, value: Any) -> list[str]:
    """Why ``value`` is not a non-negative integer count (empty when it is).

    Examples
    --------
    >>> count_problems("n_labelled", -3)
    ['n_labelled (-3) is negative']
    >>> count_problems("n_labelled", None)
    ['n_labelled (None) is not an integer']
    """
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        return [f"{name} ({value!r}) is not an integer"]
    if value < 0:
        return [f"{name} ({int(value)}) is negative"]
    return []


def counts_problems(name: str, values: Any, length: int | None = None, length_name: str = "K") -> list[str]:
    """Why ``values`` is not a 1-D array of non-negative integer counts of ``length`` (empty when it is).

    Examples
    --------
    >>> counts_problems("class_labelled", np.array([3, -1, 2]), 3)
    ['class_labelled[1] (-1) is negative']
    >>> counts_problems("class_labelled", np.array([3, 1]), 3)
    ['class_labelled has length 2, not K (3)']
    """
    if not isinstance(values, np.ndarray) or values.dtype.kind not in "iu":
        what = f"dtype {values.dtype}" if isinstance(values, np.ndarray) else type(values).__name__
        return [f"{name} is not an array of integers ({what})"]
    if values.ndim != 1:
        return [f"{name} is not one-dimensional (shape {values.shape})"]
    if length is not None and values.shape[0] != length:
        return [f"{name} has length {values.shape[0]}, not {length_name} ({length})"]
    negative = np.flatnonzero(values < 0)
    if negative.size:
        i = int(negative[0])
        return [f"{name}[{i}] ({int(values[i])}) is negative"]
    return []


def order_problems(chain: Sequence[tuple[str, Any]]) -> list[str]:
    """Where a chain of counts ``a ≤ b ≤ c ...`` breaks; entries that are not counts are skipped.

    Entries that are not counts are reported by :func:`count_problems`, not here.

    Examples
    --------
    >>> order_problems([("n_missed", 12), ("n_labelled", 10), ("n_rows", 400)])
    ['n_missed (12) > n_labelled (10)']
    """
    problems = []
    valid = [(name, int(value)) for name, value in chain if is_count(value)]
    for (small_name, small), (big_name, big) in pairwise(valid):
        if small > big:
            problems.append(f"{small_name} ({small}) > {big_name} ({big})")
    return problems


def array_order_problems(small_name: str, small: Any, big_name: str, big: Any) -> list[str]:
    """Where ``small[i] ≤ big[i]`` fails, for two count arrays of one length (else nothing is said).

    Examples
    --------
    >>> array_order_problems("class_covered", np.array([1, 5]), "class_labelled", np.array([2, 3]))
    ['class_covered[1] (5) > class_labelled[1] (3)']
    """
    if not (is_counts(small) and is_counts(big) and small.shape == big.shape):
        return []
    above = np.flatnonzero(small > big)
    if not above.size:
        return []
    i = int(above[0])
    more = f" (and {above.size - 1} more)" if above.size > 1 else ""
    return [f"{small_name}[{i}] ({int(small[i])}) > {big_name}[{i}] ({int(big[i])}){more}"]


def number_problems(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    tolerance: float = 0.0,
    allow_inf: bool = False,
    allow_none: bool = False,
) -> list[str]:
    """Why ``value`` is not a real number in ``[low − tolerance, high + tolerance]`` (empty when it is).

    NaN is never allowed; ``±inf`` only with ``allow_inf`` (and then only where the bounds allow).

    Examples
    --------
    >>> number_problems("risk_sum", 401.0, low=0.0, high=400.0)
    ['risk_sum (401.0) is not within [0.0, 400.0]']
    >>> number_problems("threshold", math.nan, allow_inf=True)
    ['threshold (nan) is NaN']
    """
    if value is None and allow_none:
        return []
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
        return [f"{name} ({value!r}) is not a number"]
    number = float(value)
    if math.isnan(number):
        return [f"{name} ({number!r}) is NaN"]
    if math.isinf(number) and not allow_inf:
        return [f"{name} ({number!r}) is not finite"]
    if (low is not None and number < low - tolerance) or (high is not None and number > high + tolerance):
        return [f"{name} ({number!r}) is not within [{_bound(low, '-inf')}, {_bound(high, 'inf')}]"]
    return []


def floats_problems(
    name: str, values: Any, *, allow_inf: bool = False, low: float | None = None
) -> list[str]:
    """Why ``values`` is not a float array free of NaN (and of ``±inf``, and above ``low``, if asked).

    Examples
    --------
    >>> floats_problems("width_sum", np.array([1.0, np.nan]))
    ['width_sum[1] (nan) is NaN']
    """
    if not isinstance(values, np.ndarray) or values.dtype.kind not in "fiu":
        what = f"dtype {values.dtype}" if isinstance(values, np.ndarray) else type(values).__name__
        return [f"{name} is not an array of numbers ({what})"]
    numbers = values.astype(np.float64, copy=False).ravel()
    checks = [(np.isnan(numbers), "is NaN")]
    if not allow_inf:
        checks.append((np.isinf(numbers), "is not finite"))
    if low is not None:
        checks.append((numbers < low, f"is below {low!r}"))
    for bad, what in checks:
        where = np.flatnonzero(bad)
        if where.size:
            i = int(where[0])
            return [f"{name}[{i}] ({float(numbers[i])!r}) {what}"]
    return []


def same_rows_problems(own: Any, n_rows: Any) -> list[str]:
    """Why a statistic's own row count ``own`` is not the batch's ``n_rows`` (empty when it is).

    Examples
    --------
    >>> same_rows_problems(401, 400)
    ["n_rows (401) is not the batch's row count (400)"]
    """
    if is_count(own) and is_count(n_rows) and own != n_rows:
        return [f"n_rows ({own}) is not the batch's row count ({n_rows})"]
    return count_problems("n_rows", own) if is_count(n_rows) else []


def relative_tolerance(scale: Any) -> float:
    """The float tolerance of a sum over ``scale`` rows (float sums move by rounding on relabels)."""
    return 1e-9 * max(1.0, float(scale)) if is_count(scale) else 1e-9


def problem_message(where: str, problems: Sequence[str]) -> str:
    """One error message: ``where`` and the first :data:`MAX_SHOWN` problems, the rest counted.

    Examples
    --------
    >>> problem_message("batches.parquet: batch 3, calibrator 'lac'", ["n_missed (12) > n_labelled (10)"])
    "batches.parquet: batch 3, calibrator 'lac': n_missed (12) > n_labelled (10)"
    """
    shown = "; ".join(problems[:MAX_SHOWN])
    more = f" (and {len(problems) - MAX_SHOWN} more)" if len(problems) > MAX_SHOWN else ""
    return f"{where}: {shown}{more}"


def _bound(value: float | None, default: str) -> str:
    return default if value is None else repr(value)
