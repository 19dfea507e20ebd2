"""Calibrator kinds: each kind of calibrator in one module, behind one protocol (:mod:`.base`).

:data:`KINDS` lists them in the order they claim calibrators (the first kind whose
:meth:`~calwatch.kinds.base.CalibratorKind.claims` says yes is the calibrator's kind):

* :mod:`.sets` — :class:`~.sets.AdaptiveKind` (ACI: sets whose level moves as labels arrive),
  then, as the fallback, :class:`~.sets.SetsKind` (split and Mondrian conformal, PAC sets);
* :mod:`.admit` — Venn-ADMIT admission;
* :mod:`.risk` — label-free risk estimates;
* :mod:`.selective` — selective keep/abstain;
* :mod:`.regression` — calibrated CDFs of a regression monitor (MCC, paper 001).

Adding a kind is one module implementing :class:`~calwatch.kinds.base.CalibratorKind`, registered
with :func:`register` (docs/architecture.md walks through it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from calwatch.kinds.admit import AdmitKind
from calwatch.kinds.base import CalibratorKind, RowResults
from calwatch.kinds.regression import RegressionKind
from calwatch.kinds.risk import RiskKind
from calwatch.kinds.selective import SelectiveKind
from calwatch.kinds.sets import AdaptiveKind, SetsKind
from calwatch.stream.records import NO_LABEL, BatchRows, BatchStats

#: Every kind, in the order they claim calibrators (the fallback, plain sets, last).
KINDS: list[CalibratorKind[Any, Any]] = [
    AdaptiveKind(), AdmitKind(), RiskKind(), SelectiveKind(), RegressionKind(), SetsKind(),
]  # fmt: skip


def register(kind: CalibratorKind[Any, Any]) -> None:
    """Add a kind of calibrator: it claims calibrators before the built-in plain sets do.

    Register it before building a monitor with such calibrators, and before loading a snapshot
    of one (the snapshot names the kind of each calibrator's statistics). Registering a kind
    with a name already taken replaces that kind.

    Raises
    ------
    TypeError
        If ``kind`` is not a :class:`~calwatch.kinds.base.CalibratorKind`.
    """
    candidate: Any = kind
    if not isinstance(candidate, CalibratorKind):
        msg = f"kind must be a CalibratorKind; got {type(candidate).__name__}"
        raise TypeError(msg)
    KINDS[:] = [k for k in KINDS if k.name != kind.name or isinstance(k, SetsKind | AdaptiveKind)]
    KINDS.insert(len(KINDS) - 1, kind)


def kind_of(calibrator: Any) -> CalibratorKind[Any, Any]:
    """The kind of a calibrator.

    Raises
    ------
    TypeError
        When no kind claims it (it has neither ``predict_sets``, ``row_risk``,
        ``predict_arrays`` nor ``select_scores``).
    """
    for kind in KINDS:
        if kind.claims(calibrator):
            return kind
    msg = (
        f"{type(calibrator).__name__} is not a calibrator calwatch can watch: it needs predict_sets "
        "(prediction sets), row_risk (risk estimates), predict_arrays (Venn-ADMIT) or select_scores "
        "(selective classification)"
    )
    raise TypeError(msg)


def find_kind(calibrator: Any) -> CalibratorKind[Any, Any] | None:
    """The kind of a calibrator, or None (a regression monitor's calibrators have none yet)."""
    return next((kind for kind in KINDS if kind.claims(calibrator)), None)


def stored_hits(
    rows: BatchRows, key: str, calibrator: Any
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
    """A set calibrator's kept results on a batch's rows: labelled rows, sets holding the label, sizes.

    Returns ``(labelled, covered, sizes)``, each of length ``m``: ``covered`` is False where a row
    has no label yet. Read from the results the monitor kept with the rows (nothing is
    recomputed), as the slice views and previews count them.

    Raises
    ------
    TypeError
        If the calibrator predicts no sets.
    """
    kind = kind_of(calibrator)
    results = kind.results_of(rows, key, calibrator)
    sizes = kind.set_sizes(results)
    if sizes is None:
        msg = f"calibrator {key!r} predicts no sets"
        raise TypeError(msg)
    labelled = rows.labels != NO_LABEL
    covered = np.zeros(labelled.shape, dtype=np.bool_)
    where = np.flatnonzero(labelled)
    if where.size:
        covered[where] = kind.covered(results.take(where), rows.labels[where])
    return labelled, covered, np.asarray(sizes, dtype=np.int64)


def kind_named(name: str) -> CalibratorKind[Any, Any]:
    """The kind whose statistics are saved as ``name`` in ``batches.parquet``.

    Raises
    ------
    KeyError
        For a name no kind has.
    """
    named = [kind for kind in KINDS if kind.name == name]
    if not named:
        raise KeyError(name)
    found: CalibratorKind[Any, Any] = named[-1]  # plain sets rather than ACI, which saves the same statistics
    return found


__all__ = [
    "KINDS",
    "BatchStats",
    "CalibratorKind",
    "RowResults",
    "find_kind",
    "kind_named",
    "kind_of",
    "register",
    "stored_hits",
]
