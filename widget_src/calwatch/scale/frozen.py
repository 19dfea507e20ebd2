"""The fitted calibrators, frozen as bytes that travel to wherever the kernel runs.

The bytes are the snapshot codec's (:mod:`calwatch.core.codec`): a JSON tree and numeric arrays
(``numpy.savez`` without pickle), never pickle. Decoding rebuilds only ``calwatch`` classes, so an
executor that receives them runs no code but calwatch's own — the same promise a snapshot makes.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from calwatch.core.classes import ClassEncoder
from calwatch.core.codec import SnapshotError, StateDecoder, StateEncoder
from calwatch.kinds import kind_of
from calwatch.kinds.base import CalibratorKind
from calwatch.stream.slice_counts import SliceStore

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor

#: Kinds whose per-row results depend on the row alone (and the frozen calibrator), so any split
#: of a table gives the same rows' statistics. Venn-ADMIT needs embeddings and ACI learns from
#: labels in order: they stay on the in-memory path for now.
TABLE_KINDS = frozenset({"sets", "risk"})

_STATE = "state.json"


@dataclass(frozen=True)
class FrozenMonitor:
    """What the kernel needs of a calibrated monitor.

    Attributes
    ----------
    calibrators : dict of str to calibrator
        The fitted calibrators, by name, in the monitor's order.
    classes : ndarray of shape (K,)
        The class label of each probability column.
    tolerance : float
        How far a row of probabilities may sum from 1.
    reference_confidence : ndarray, optional
        The calibration rows' confidence scores ``1 − max p``, sorted: each bucket's rank-sum
        against them feeds the label-free bucket test (None for monitors calibrated before it).
    slices : SliceStore, optional
        The monitor's slice encoding and the set calibrators it counts, without their counts (an
        empty :class:`~calwatch.stream.slice_counts.SliceStore`): the kernel encodes a table's
        ``meta`` columns with it. None for a monitor that does not slice.
    """

    calibrators: dict[str, Any]
    classes: npt.NDArray[Any]
    tolerance: float
    reference_confidence: npt.NDArray[np.float64] | None = None
    slices: SliceStore | None = None

    @property
    def n_classes(self) -> int:
        """Number of classes ``K``."""
        return int(self.classes.shape[0])

    @property
    def encoder(self) -> ClassEncoder:
        """Class labels to column indices."""
        return ClassEncoder(self.classes)

    def kinds(self) -> dict[str, CalibratorKind[Any, Any]]:
        """Each calibrator's kind."""
        return {key: kind_of(cal) for key, cal in self.calibrators.items()}

    def to_bytes(self) -> bytes:
        """The frozen state as bytes: a zip of ``state.json`` and one ``.npy`` per array (no pickle)."""
        encoder = StateEncoder()
        state = {
            "calibrators": self.calibrators, "classes": self.classes, "tolerance": self.tolerance,
            "reference_confidence": self.reference_confidence, "slices": self.slices,
        }  # fmt: skip
        tree = encoder.encode(state, "frozen")
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
            archive.writestr(_STATE, json.dumps(tree, allow_nan=False))
            for key, array in encoder.arrays.items():
                with archive.open(f"{key}.npy", "w") as handle:
                    np.save(handle, array, allow_pickle=False)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> FrozenMonitor:
        """The state :meth:`to_bytes` wrote; only ``calwatch`` classes are rebuilt.

        Raises
        ------
        SnapshotError
            If the bytes are not a frozen monitor.
        """
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                tree = json.loads(archive.read(_STATE))
                arrays = {
                    name.removesuffix(".npy"): np.load(io.BytesIO(archive.read(name)), allow_pickle=False)
                    for name in archive.namelist()
                    if name.endswith(".npy")
                }
        except (zipfile.BadZipFile, KeyError, ValueError) as err:
            msg = f"not a frozen calwatch monitor: {err}"
            raise SnapshotError(msg) from err
        state = StateDecoder(arrays).decode(tree)
        reference = state.get("reference_confidence")
        slices = state.get("slices")
        if slices is not None and not isinstance(slices, SliceStore):
            msg = f"not a frozen calwatch monitor: its slices are a {type(slices).__name__}"
            raise SnapshotError(msg)
        return cls(
            dict(state["calibrators"]), np.asarray(state["classes"]), float(state["tolerance"]),
            None if reference is None else np.asarray(reference, dtype=np.float64), slices,
        )  # fmt: skip


def freeze(monitor: Monitor) -> FrozenMonitor:
    """The calibrated monitor's calibrators and classes, checked to be computable row by row.

    Raises
    ------
    NotFittedError
        If the monitor is not calibrated.
    TypeError
        If a calibrator's kind cannot run on a table (Venn-ADMIT, ACI, selective), or it
        randomises its sets from one sequential stream (a calibrator fitted before draws were
        keyed by row id: a split of the table would draw other values than the monitor). A
        randomised calibrator fitted now draws each row's ``u`` from its id
        (:func:`~calwatch.engine.conformal.row_draws.row_uniforms`), so every path draws the
        same. The message names the calibrator. (A calibrator that takes its groups from the
        slice columns, ``groups_from``, gets them from the table's ``meta`` columns in the kernel.)

    Notes
    -----
    A monitor that slices freezes its slice encoding and the set calibrators it counts (not
    their counts, nor the calibration rows): what the kernel needs to encode a table's ``meta``.
    """
    classes = monitor.classes_  # raises NotFittedError before calibrate()
    for key, cal in monitor.calibrators.items():
        kind = kind_of(cal)
        if kind.name not in TABLE_KINDS or kind.learns_from_labels:
            msg = (
                f"calibrator {key!r} ({kind.name}{', adaptive' if kind.learns_from_labels else ''}) cannot "
                f"run on a table yet: table sources take {sorted(TABLE_KINDS)} calibrators; observe its "
                "rows in memory with observe()"
            )
            raise TypeError(msg)
        if getattr(cal, "randomized", False) and not getattr(cal, "draws_by_row_id", False):
            msg = (
                f"calibrator {key!r} randomises its sets from one sequential random stream (it was "
                "fitted by an older calwatch), which a split table cannot reproduce: calibrate it again, "
                "so that each row's draw is keyed by its id, or use randomized=False"
            )
            raise TypeError(msg)
    reference = monitor.__dict__.get("_reference_confidence")
    store = monitor._slices
    slices = None if store is None else SliceStore(store.encoding, store.calibrators)  # no counts travel
    tolerance = float(monitor._tolerance)
    return FrozenMonitor(monitor.calibrators, np.asarray(classes), tolerance, reference, slices)


__all__ = ["TABLE_KINDS", "FrozenMonitor", "SnapshotError", "freeze"]
