"""Invariants a snapshot's numbers must satisfy, checked when it is loaded.

A snapshot's checksums catch accidents (a truncated copy, a flipped bit), not impossible
numbers: files edited and re-hashed would still load, with ``alpha = 1e308`` in a calibrator or
more missed rows than labelled ones in a batch. :func:`calwatch.snapshot.store.load_monitor` therefore
checks what it decoded.

* Each per-batch statistics type checks itself (a ``check(n_rows)`` method next to its fields,
  e.g. :meth:`calwatch.stream.records.RiskBatchStats.check`), with the small helpers below: counts are
  non-negative integers, nested counts are ordered, float sums are in range.
* Each fitted calibrator is checked by attribute names only (:func:`calibrator_problems`), so
  these checks hold whichever engine class, in whichever module, the calibrator is:
  ``alpha``, ``epsilon`` and ``delta`` are levels in the open interval (0, 1); ``gamma`` (ACI's
  step size) is finite and positive; ``alpha_t_`` (ACI's moving level, which may leave (0, 1))
  is finite; counts named ``n_*_`` are non-negative integers; and fitted thresholds, quantiles
  and scores (attributes ending in ``_`` that hold floats, float arrays, or flat containers of
  them) are never NaN (``±inf`` is allowed: an empty class's quantile is ``inf``). Objects of
  calwatch classes that a calibrator holds (e.g. the calibrator inside
  :class:`~calwatch.Adaptive`) are checked the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from calwatch.core.codec import TRUSTED_PACKAGE, SnapshotError
from calwatch.core.invariants import problem_message

#: Attributes holding a miscoverage or confidence level: a number in the open interval (0, 1).
LEVEL_ATTRIBUTES = ("alpha", "epsilon", "delta")
#: Attributes holding a step size: a finite number > 0.
STEP_ATTRIBUTES = ("gamma",)
#: Fitted levels that may leave (0, 1) but are always finite (ACI's ``α_t``).
FINITE_ATTRIBUTES = ("alpha_t_",)
#: How deep the check walks into calwatch objects that a calibrator holds.
MAX_DEPTH = 4


# ---------------------------------------------------------------------------- calibrator state
def check_calibrators(calibrators: Any) -> None:
    """Raise if a decoded calibrator holds a value no fitted calibrator could hold.

    Parameters
    ----------
    calibrators : mapping of str to calibrator
        The monitor's calibrators, as decoded from a snapshot.

    Raises
    ------
    SnapshotError
        Naming the file the value came from (``state.json``, or ``arrays.parquet`` for arrays),
        the calibrator and the attribute, e.g. ``state.json: calibrator 'lac': alpha (1e+308)
        is not in (0, 1)``.
    """
    if not isinstance(calibrators, Mapping):
        msg = f"state.json: the monitor's calibrators are malformed ({type(calibrators).__name__})"
        raise SnapshotError(msg)
    for key, calibrator in calibrators.items():
        problems = calibrator_problems(calibrator)
        if problems:
            file = problems[0][0]
            msg = problem_message(
                f"{file}: calibrator {key!r}", [text for where, text in problems if where == file]
            )
            raise SnapshotError(msg)


def calibrator_problems(calibrator: Any) -> list[tuple[str, str]]:
    """Violations in a calibrator's attributes, as ``(file, text)`` pairs (empty when it is sound).

    Scalars come from ``state.json``, numpy arrays from ``arrays.parquet``. See the module
    docstring for the attribute rules.

    Examples
    --------
    >>> import calwatch as cw
    >>> cal = cw.SplitConformalClassifier(score="lac", alpha=0.1)
    >>> calibrator_problems(cal)
    []
    >>> cal.alpha, cal.quantiles_ = 1e308, math.nan
    >>> [text for _, text in calibrator_problems(cal)]
    ['alpha (1e+308) is not in (0, 1)', 'quantiles_ (nan) is NaN']
    """
    problems: list[tuple[str, str]] = []
    _object_problems(calibrator, "", problems, set(), 0)
    return problems


def _object_problems(
    obj: Any, prefix: str, problems: list[tuple[str, str]], seen: set[int], depth: int
) -> None:
    if id(obj) in seen or depth > MAX_DEPTH:
        return
    seen.add(id(obj))
    for name, value in _attributes(obj).items():
        path = f"{prefix}{name}"
        named = _scalar_rule_problems(name, path, value)
        problems.extend(("state.json", text) for text in named)
        if not named and name.endswith("_") and not name.startswith("__"):
            problems.extend(_fitted_problems(path, value))
        if _is_calwatch_object(value):
            _object_problems(value, f"{path}.", problems, seen, depth + 1)


def _scalar_rule_problems(name: str, path: str, value: Any) -> list[str]:
    """The rules that attribute names set: levels, step sizes, finite levels, counts."""
    if isinstance(value, (str, bool)) and name in LEVEL_ATTRIBUTES + STEP_ATTRIBUTES + FINITE_ATTRIBUTES:
        return [f"{path} ({value!r}) is not a number"]
    if not _is_real(value):
        return []
    number = float(value)
    if name in LEVEL_ATTRIBUTES and not 0.0 < number < 1.0:  # also false for NaN
        return [f"{path} ({number!r}) is not in (0, 1)"]
    if name in STEP_ATTRIBUTES and not (math.isfinite(number) and number > 0):
        return [f"{path} ({number!r}) is not a finite number > 0"]
    if name in FINITE_ATTRIBUTES and not math.isfinite(number):
        return [f"{path} ({number!r}) is not finite"]
    if name.startswith("n_") and name.endswith("_") and isinstance(value, (int, np.integer)) and value < 0:
        return [f"{path} ({int(value)}) is negative"]
    return []


def _fitted_problems(path: str, value: Any) -> list[tuple[str, str]]:
    """NaN in a fitted float attribute: a scalar, an array, or a flat tuple, list or dict of them."""
    if _is_real(value) and not isinstance(value, (int, np.integer)):
        return [("state.json", f"{path} ({float(value)!r}) is NaN")] if math.isnan(value) else []
    if isinstance(value, np.ndarray):
        if value.dtype.kind != "f":
            return []
        nan = np.flatnonzero(np.isnan(value))
        return [("arrays.parquet", f"{path}[{_index(value, int(nan[0]))}] is NaN")] if nan.size else []
    items: list[tuple[Any, Any]] = []
    if isinstance(value, (tuple, list)):
        items = list(enumerate(value))
    elif isinstance(value, dict):
        items = list(value.items())
    problems: list[tuple[str, str]] = []
    for key, item in items:
        if _is_real(item) or isinstance(item, np.ndarray):
            problems.extend(_fitted_problems(f"{path}[{key!r}]", item))
    return problems


def _index(array: np.ndarray[Any, Any], flat: int) -> str:
    return ", ".join(str(int(i)) for i in np.unravel_index(flat, array.shape))


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _is_calwatch_object(value: Any) -> bool:
    module = type(value).__module__ or ""
    return module.split(".")[0] == TRUSTED_PACKAGE and not isinstance(value, type)


def _attributes(obj: Any) -> dict[str, Any]:
    """An object's instance attributes: its ``__dict__`` and the ``__slots__`` that are set."""
    attrs = dict(vars(obj)) if hasattr(obj, "__dict__") else {}
    for base in type(obj).__mro__:
        slots = getattr(base, "__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                attrs[slot] = getattr(obj, slot)
    return attrs
