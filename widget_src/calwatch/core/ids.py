"""Row ids: how a batch's ``ids`` argument becomes a list of hashable ids, and how they are shown."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np


def as_id_list(ids: Any) -> list[Hashable]:
    """``ids`` (a list, a 1-D array or a polars/pandas Series) as a list of ids.

    Examples
    --------
    >>> as_id_list(np.array([3, 1]))
    [3, 1]
    >>> as_id_list("abc")
    Traceback (most recent call last):
    ...
    TypeError: ids must be a sequence of ids (list, array or Series); got str
    """
    if hasattr(ids, "to_list"):
        return list(ids.to_list())
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1:
            msg = f"ids must be 1-D; got shape {ids.shape}"
            raise ValueError(msg)
        return list(ids.tolist())
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        msg = f"ids must be a sequence of ids (list, array or Series); got {type(ids).__name__}"
        raise TypeError(msg)
    return list(ids)


def uniform_scalar_ids(ids: list[Hashable]) -> bool:
    """Whether every id is an ``int``, every one a ``str`` or every one a ``float`` (a typed column)."""
    if not ids:
        return True
    first = type(ids[0])
    return first in (int, str, float) and all(type(i) is first for i in ids)


#: The words for the kinds of id a monitor can hold (one kind per monitor, fixed at its first row).
INTEGERS, STRINGS = "integers", "strings"


def _value_kind(value: Any) -> str:
    """The kind of one python id: ``"integers"``, ``"strings"``, ``"floats"``, ``"dates"``...."""
    import datetime as dt

    if isinstance(value, (bool, np.bool_)):
        return "booleans"
    if isinstance(value, (int, np.integer)):
        return INTEGERS
    if isinstance(value, str):
        return STRINGS
    if isinstance(value, (float, np.floating)):
        return "floats"
    if isinstance(value, dt.datetime):
        return "datetimes"
    if isinstance(value, dt.date):
        return "dates"
    if isinstance(value, tuple):
        return "tuples"
    return f"{type(value).__name__} values"


def id_kind(ids: list[Hashable], argument: str = "ids") -> str | None:
    """The one kind of a call's ids (``None`` for no ids), after refusing nulls, NaN and mixed kinds.

    A monitor joins labels to rows by id equality, and its row log stores each batch's ids as
    one typed column; ids of two kinds (``1000`` and ``"1000"``) would never meet, and a later
    label call could no longer be joined. So every id of a monitor has one kind: integers
    (python or numpy), strings, or any other one hashable type (dates, tuples...).

    Raises
    ------
    ValueError
        Naming ``argument``: a null id, a NaN id, or ids of two kinds.

    Examples
    --------
    >>> id_kind([3, np.int64(4)])
    'integers'
    >>> id_kind([1000, "1000"])
    Traceback (most recent call last):
    ...
    ValueError: ids mix integers and strings (e.g. 1000 and '1000'): give ids of one type
    """
    if not ids:
        return None
    types = set(map(type, ids))  # the usual batch (all str or all int) in one C-level pass
    if types == {str}:
        return STRINGS
    if types == {int}:
        return INTEGERS
    kinds: dict[str, Any] = {}
    for position, value in enumerate(ids):
        if value is None:
            msg = f"{argument} has a null id at position {position}: every row needs an id"
            raise ValueError(msg)
        kind = _value_kind(value)
        if kind == "floats" and value != value:
            msg = f"{argument} has a NaN id at position {position}: every row needs an id"
            raise ValueError(msg)
        kinds.setdefault(kind, value)
    if len(kinds) > 1:
        (a, x), (b, z) = list(kinds.items())[:2]
        msg = f"{argument} mix {a} and {b} (e.g. {x!r} and {z!r}): give ids of one type"
        raise ValueError(msg)
    return next(iter(kinds))


def arrow_id_kind(kind: Any) -> str:
    """The kind of ids an Arrow column type holds (the words :func:`id_kind` uses)."""
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        return arrow_id_kind(kind.value_type)
    if pa.types.is_integer(kind):
        return INTEGERS
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return STRINGS
    if pa.types.is_floating(kind):
        return "floats"
    if pa.types.is_timestamp(kind) or pa.types.is_date64(kind):
        return "datetimes"
    if pa.types.is_date32(kind):
        return "dates"
    if pa.types.is_boolean(kind):
        return "booleans"
    return f"{kind} values"


def check_id_kind(fixed: str | None, got: str | None, argument: str, *, auto_ids: bool = False) -> None:
    """Refuse ids of another kind than the monitor's (fixed by the first ids it was given).

    Rows observed without ids get consecutive integers: they neither fix nor break the rule (a
    default the user did not ask for never raises), and a label call with integer ids may reach
    them, so ``auto_ids`` (the monitor holds such rows) lets integer labels through.

    Raises
    ------
    ValueError
        Naming ``argument`` and both kinds.
    """
    if fixed is None or got is None or fixed == got or (auto_ids and got == INTEGERS):
        return
    msg = (
        f"{argument}: this monitor's ids are {fixed} (fixed by the first ids it was given), and these "
        f"are {got}: a monitor's ids have one type, so that every label can be joined to its row. "
        f"Give ids as {fixed}"
    )
    raise ValueError(msg)


def ids_with_kind(ids: Any, argument: str = "ids") -> tuple[list[Hashable], str | None]:
    """``ids`` as a list (:func:`as_id_list`) and their kind (:func:`id_kind`), typed arrays read fast.

    A numpy array or a polars/pandas Series of integers or strings gives its kind from its
    dtype and null count, without a look at each value (a 10^5-row batch's ids in microseconds).
    """
    dtype = getattr(ids, "dtype", None)
    if isinstance(ids, np.ndarray) and ids.dtype.kind in "iu" and ids.ndim == 1:
        return as_id_list(ids), (INTEGERS if ids.shape[0] else None)
    if dtype is not None and hasattr(ids, "null_count") and hasattr(ids, "to_list"):  # polars
        import polars as pl

        if ids.null_count() == 0 and (dtype.is_integer() or dtype in (pl.String, pl.Categorical)):
            values = as_id_list(ids)
            return values, ((INTEGERS if dtype.is_integer() else STRINGS) if values else None)
    values = as_id_list(ids)
    return values, id_kind(values, argument)
