"""A calibrator's groups from the rows' slice codes: Mondrian categories or a family of groups.

A calibrator built with ``groups_from=`` (a
:class:`~calwatch.engine.conformal.classifier.SplitConformalClassifier`, Mondrian by slice,
or a :class:`~calwatch.engine.conformal.group_conditional.GroupConditionalConformal`) names
slice columns of the monitor (:mod:`calwatch.stream.slices`); the monitor turns each row's
codes into what the calibrator takes, at calibration and for every batch, by the same rule:

* **Mondrian** (a partition): a row's category is the tuple of its codes in the named columns,
  one integer ``c_1·n_2·…·n_k + … + c_k`` (``n_j`` codes of column ``j``), so one column gives its
  values (``hour < 9``, ``9 ≤ hour < 13``…, ``hour: missing``) and two columns their pairs.
  Every row is in exactly one category, and split conformal within each keeps ``≥ 1 − α``
  there; a category never seen at calibration gets the full set (the Mondrian rule).
* **A family** (overlapping groups): one group per code of each named column, so a row is in
  exactly one group per column and the family's ``G = Σ_j n_j`` groups overlap across columns.
  Within each group the promise is ``≥ 1 − α`` (the max rule of
  :mod:`calwatch.engine.conformal.group_conditional`).

The codes are the fixed encoding's, so the groups mean the same rows at calibration and on
the stream, as both guarantees require (membership a fixed function of the row).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from calwatch.stream.slices import CodeArray, SliceEncoding, SliceError


def column_indices(encoding: SliceEncoding, columns: Sequence[str], what: str) -> list[int]:
    """The positions of ``columns`` in the encoding.

    Raises
    ------
    SliceError
        If a column is not a slice column of the monitor (names ``what`` and the columns it has).
    """
    names = list(encoding.names)
    missing = [c for c in columns if c not in names]
    if missing:
        are = "is not a slice column" if len(missing) == 1 else "are not slice columns"
        msg = f"{what}: {missing} {are} of this monitor (it slices by {names})"
        raise SliceError(msg)
    return [names.index(c) for c in columns]


def categories_of(encoding: SliceEncoding, codes: CodeArray, columns: Sequence[str]) -> npt.NDArray[np.int64]:
    """Each row's Mondrian category: its codes in ``columns`` as one integer (mixed radix).

    Examples
    --------
    >>> import polars as pl
    >>> enc = SliceEncoding.fit(pl.DataFrame({"a": ["x", "y"], "b": [True, False]}), 2)
    >>> [c.n_codes for c in enc.columns]
    [4, 4]
    >>> categories_of(enc, np.array([[0, 1], [1, 0], [3, 2]], dtype=np.int16), ["a", "b"]).tolist()
    [1, 4, 14]
    """
    out = np.zeros(codes.shape[0], dtype=np.int64)
    for j in column_indices(encoding, columns, "groups_from"):
        out = out * encoding.columns[j].n_codes + codes[:, j].astype(np.int64)
    return out


def category_words(encoding: SliceEncoding, columns: Sequence[str], category: int) -> str:
    """A Mondrian category in words (``"carrier = B6 & hour ≥ 18"``), the inverse of :func:`categories_of`."""
    parts: list[str] = []
    for j in reversed(column_indices(encoding, columns, "groups_from")):
        category, code = divmod(int(category), encoding.columns[j].n_codes)
        parts.append(encoding.columns[j].labels[code])
    return " & ".join(reversed(parts))


def family_of(encoding: SliceEncoding, codes: CodeArray, columns: Sequence[str]) -> npt.NDArray[np.bool_]:
    """Membership of each row in the family's groups: one group per code of each column, ``(m, G)``.

    Examples
    --------
    >>> import polars as pl
    >>> enc = SliceEncoding.fit(pl.DataFrame({"a": ["x", "y"], "b": [True, False]}), 2)
    >>> family_of(enc, np.array([[0, 1], [3, 2]], dtype=np.int16), ["a", "b"]).astype(int).tolist()
    [[1, 0, 0, 0, 0, 1, 0, 0], [0, 0, 0, 1, 0, 0, 1, 0]]
    """
    indices = column_indices(encoding, columns, "groups_from")
    widths = [encoding.columns[j].n_codes for j in indices]
    member = np.zeros((codes.shape[0], sum(widths)), dtype=np.bool_)
    offset = 0
    rows = np.arange(codes.shape[0])
    for j, width in zip(indices, widths, strict=True):
        member[rows, offset + codes[:, j].astype(np.intp)] = True
        offset += width
    return member


def family_words(encoding: SliceEncoding, columns: Sequence[str]) -> list[str]:
    """The family's groups in words, in :func:`family_of`'s column order."""
    return [
        label
        for j in column_indices(encoding, columns, "groups_from")
        for label in encoding.columns[j].labels
    ]


def groups_for(calibrator: Any, encoding: SliceEncoding, codes: CodeArray) -> Any:
    """What a ``groups_from`` calibrator takes as its rows' groups: categories, or a membership matrix."""
    columns = calibrator.groups_from
    if getattr(calibrator, "takes_groups", False):
        return family_of(encoding, codes, columns)
    return categories_of(encoding, codes, columns)


__all__ = ["categories_of", "category_words", "column_indices", "family_of", "family_words", "groups_for"]
