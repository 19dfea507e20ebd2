"""What a monitor's task decides about its labels: how they are checked, stored and told missing.

A classification monitor's label is a class, stored as its integer code (:data:`NO_LABEL` while
missing); a regression monitor's label is a real value, stored as a float (NaN while missing).
Everything else about a late label (finding its row in the window or the row log, each
calibrator kind's statistics of the labelled rows, a relabel taken back with the sign reversed,
all or nothing) is the same, so :class:`~calwatch.monitor.labels.LabelJoin` runs one path for both
and asks the monitor's task (a :class:`LabelValues`) only these questions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from calwatch.stream.records import NO_LABEL, BatchRows

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor

BoolArray = npt.NDArray[np.bool_]


class LabelValues(Protocol):
    """The task's side of a late label (one instance per task, no state)."""

    #: The task's name ("classification", "regression").
    task: str

    def checked(
        self, monitor: Monitor, y: Any, n: int, *, skip_outside: bool
    ) -> tuple[Any, BoolArray | None]:
        """``y`` as stored values, and which labels are kept (None: all), or raise naming ``y``."""

    def stored(self, rows: BatchRows) -> Any:
        """The rows' stored labels (an array aligned with the rows; read, never written through)."""

    def missing(self, values: Any) -> BoolArray:
        """Which stored values mean "no label yet"."""

    def write(self, rows: BatchRows, index: npt.NDArray[np.intp], values: Any) -> None:
        """Store ``values`` as the labels of rows ``index``."""


class ClassLabels:
    """Labels of a classification monitor: classes, stored as their codes in ``rows.labels``."""

    task = "classification"

    def checked(
        self, monitor: Monitor, y: Any, n: int, *, skip_outside: bool
    ) -> tuple[Any, BoolArray | None]:
        """Codes of ``y`` (every label one of the monitor's classes, unless ``skip_outside``)."""
        encoder = monitor._require_encoder()
        if skip_outside:
            values, known = encoder.known(y, "y", n_rows=n)
            return encoder.encode(values[known], "y", n_rows=int(known.sum())), known
        return encoder.encode(y, "y", n_rows=n, option="label(..., outside_classes='skip')"), None

    def stored(self, rows: BatchRows) -> Any:
        """The codes in ``rows.labels``."""
        return rows.labels

    def missing(self, values: Any) -> BoolArray:
        """:data:`~calwatch.stream.records.NO_LABEL` codes."""
        return np.asarray(values == NO_LABEL)

    def write(self, rows: BatchRows, index: npt.NDArray[np.intp], values: Any) -> None:
        """Codes into ``rows.labels``."""
        rows.labels[index] = values


class ValueLabels:
    """Labels of a regression monitor: true values, stored as floats in ``rows.regression["y"]``."""

    task = "regression"

    def checked(
        self, monitor: Monitor, y: Any, n: int, *, skip_outside: bool
    ) -> tuple[Any, BoolArray | None]:
        """``y`` as finite floats, one per id (a regression has no classes to skip labels outside)."""
        if skip_outside:
            msg = (
                "outside_classes is for classification monitors; a regression monitor takes values "
                "(got 'skip')"
            )
            raise ValueError(msg)
        return true_values(y, n, per="id"), None

    def stored(self, rows: BatchRows) -> Any:
        """The true values in ``rows.regression["y"]`` (NaN while missing)."""
        return rows.regression["y"]

    def missing(self, values: Any) -> BoolArray:
        """NaN values."""
        return np.asarray(np.isnan(values), dtype=np.bool_)

    def write(self, rows: BatchRows, index: npt.NDArray[np.intp], values: Any) -> None:
        """Values into ``rows.regression["y"]``; ``rows.labels`` marks them labelled for the counters."""
        rows.regression["y"][index] = values
        rows.labels[index] = 0


def true_values(y: Any, n: int, per: str = "row") -> npt.NDArray[np.float64]:
    """``y`` as finite float64 values, one per row (or id), else a ValueError naming it."""
    values = np.asarray(y, dtype=np.float64)
    if values.ndim != 1 or values.shape[0] != n:
        msg = f"y must hold one true value per {per} ({n}); got shape {values.shape}"
        raise ValueError(msg)
    if not np.isfinite(values).all():
        msg = "y contains NaN or inf: true values must be finite numbers"
        raise ValueError(msg)
    return values


CLASS_LABELS = ClassLabels()
VALUE_LABELS = ValueLabels()

__all__ = ["CLASS_LABELS", "VALUE_LABELS", "ClassLabels", "LabelValues", "ValueLabels", "true_values"]
