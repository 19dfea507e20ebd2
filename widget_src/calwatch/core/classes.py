"""Mapping between user-facing class labels and the class indices the engine works with."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.intp]


def as_1d_array(values: Any, name: str) -> npt.NDArray[Any]:
    """A 1-D numpy array from a list, numpy array, polars/pandas Series."""
    if hasattr(values, "to_numpy"):
        values = values.to_numpy()
    arr = np.asarray(values)
    if arr.ndim != 1:
        msg = f"{name} must be 1-D (one value per row); got shape {arr.shape}"
        raise ValueError(msg)
    return arr


class ClassEncoder:
    """Encode class labels (any sortable values) as indices ``0..K-1`` in the model's column order.

    Parameters
    ----------
    classes : array-like of shape (K,)
        The class label of each probability column.
    """

    def __init__(self, classes: Any) -> None:
        arr = as_1d_array(classes, "classes")
        if len(np.unique(arr)) != arr.shape[0]:
            msg = f"classes must be distinct; got {arr.tolist()}"
            raise ValueError(msg)
        self.classes = arr
        self._order = np.argsort(arr, kind="stable")
        self._sorted = arr[self._order]

    def __len__(self) -> int:
        return int(self.classes.shape[0])

    def encode(
        self, y: Any, name: str = "y", *, n_rows: int | None = None, option: str | None = None
    ) -> IntArray:
        """Column index of each label; raise ``ValueError`` naming ``name`` for unknown labels.

        ``option`` names the caller's way to skip such labels instead (said in the message).
        """
        values = self._values(y, name, n_rows)
        if values.shape[0] == 0:
            return np.zeros(0, dtype=np.intp)
        if np.issubdtype(values.dtype, np.floating) and not np.isfinite(values).all():
            msg = f"{name} contains NaN or inf; expected one of the classes {self.classes.tolist()}"
            raise ValueError(msg)
        found = self._lookup(values)
        classes = self.classes.tolist()
        advice = self._hint(values) + (f" ({option} skips such labels and counts them)" if option else "")
        if found is None:
            msg = f"{name} holds values of another type than the classes {classes}{advice}"
            raise TypeError(msg)
        clipped, known = found
        if not known.all():
            unknown = np.unique(values[~known])[:5].tolist()
            msg = f"{name} holds labels outside the known classes {classes}: {unknown}{advice}"
            raise ValueError(msg)
        return self._order[clipped].astype(np.intp)

    def known(
        self, y: Any, name: str = "y", *, n_rows: int | None = None
    ) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        """The labels as an array, and whether each is one of the classes (one of another type is not)."""
        values = self._values(y, name, n_rows)
        found = self._lookup(values) if values.shape[0] else None
        return values, (np.zeros(values.shape[0], dtype=bool) if found is None else found[1])

    def _values(self, y: Any, name: str, n_rows: int | None) -> npt.NDArray[Any]:
        """``y`` as a 1-D array, refused naming ``name`` unless it has ``n_rows`` labels."""
        values = as_1d_array(y, name)
        if n_rows is not None and values.shape[0] != n_rows:
            msg = f"{name} has {values.shape[0]} labels but there are {n_rows} rows"
            raise ValueError(msg)
        return values

    def _lookup(self, values: npt.NDArray[Any]) -> tuple[IntArray, npt.NDArray[np.bool_]] | None:
        """Each value's position among the sorted classes and whether it is that class; None across types."""
        try:
            position = np.searchsorted(self._sorted, values)
        except TypeError:
            return None
        clipped = np.minimum(position, len(self) - 1)
        return clipped, np.asarray(self._sorted[clipped] == values, dtype=bool)

    def _hint(self, values: npt.NDArray[Any]) -> str:
        """How to name the classes, when labels are names and the classes are column indices."""
        indices = np.issubdtype(self.classes.dtype, np.integer) and self.classes.tolist() == list(
            range(len(self))
        )
        if not indices or np.issubdtype(values.dtype, np.number):
            return ""
        return (
            ". With probs= (or a model trained on integer codes) the classes are the column indices "
            "0..K-1: give their names in column order with Monitor(classes=[...])"
        )

    def decode(self, index: IntArray) -> npt.NDArray[Any]:
        """Class label of each column index."""
        return self.classes[index]
