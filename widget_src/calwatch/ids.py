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
