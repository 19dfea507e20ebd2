"""Result types of :class:`calwatch.engine.venn_admit.admit.VennAdmit` and their plain-data forms.

- :class:`VennAdmitResult`: per-row arrays of ``predict_arrays``; :func:`result_frame` turns
  them into the polars frame of ``predict``.
- :class:`VennBatch`: what the Venn-ADMIT variants of one batch share (one neighbour search).
- :func:`training_to_json` / :func:`training_from_json`: a training record as JSON values
  (snapshots never pickle); :func:`decode_state` validates a ``VennAdmit.state()`` dict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import check_labels
from calwatch.engine.calibration.maps import check_logits
from calwatch.engine.knn import check_embeddings
from calwatch.engine.venn_admit.approximation import ApproximationParams, TrainingResult

if TYPE_CHECKING:
    import polars as pl

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]
Int64Array = npt.NDArray[np.int64]


@dataclass(frozen=True)
class VennAdmitResult:
    """Per-row results of :meth:`VennAdmit.predict_arrays` (m rows, C classes).

    Attributes
    ----------
    y_hat : int array (m,)
        ``ŷ^KNN``, the KNN approximation's prediction.
    q : int array (m,)
        Eq. 4, in ``[0, K]``.
    d : float array (m,)
        Eq. 5, L2 distance to the nearest reference row.
    sets : bool array (m, C)
        ADMIT prediction sets (always contain ``y_hat``).
    guarded : bool array (m,)
        The κ guard fired (some class had fewer than κ band rows): full set.
    admitted : bool array (m,)
        Venn-ADMIT admits ``y_hat`` (selective classification).
    p_lower, p_upper : float array (m,)
        Lower / upper Venn probability of ``y_hat``; NaN unless the ADMIT set is a singleton.
    category_size : int array (m,)
        ``|T|``, the ``D_ca^vp`` rows of the Venn category (0 for non-singleton sets).
    weight : float array (m,)
        Test-point weight ``w`` (1 unweighted, ``1/ψ'`` weighted, ``inf`` if ``ψ' = 0``); NaN
        for non-singleton sets.
    probs : float array (m, C)
        ``π^KNN``.
    logits_knn : float array (m, C)
        ``f_tr^KNN`` logits ``a``.
    y_model : int array (m,)
        The model's own prediction (argmax of the given logits).
    """

    y_hat: IntArray
    q: IntArray
    d: FloatArray
    sets: BoolArray
    guarded: BoolArray
    admitted: BoolArray
    p_lower: FloatArray
    p_upper: FloatArray
    category_size: IntArray
    weight: FloatArray
    probs: FloatArray
    logits_knn: FloatArray
    y_model: IntArray


@dataclass(frozen=True)
class VennBatch:
    """What every Venn-ADMIT variant shares for one batch (one neighbour search)."""

    E: Float32Array
    a: FloatArray
    probs: FloatArray
    yhat: IntArray
    q: IntArray
    d: FloatArray
    sets: BoolArray
    guarded: BoolArray
    y_model: IntArray
    single: IntArray
    key: Int64Array
    lo: FloatArray
    hi: FloatArray
    n_t: IntArray
    n_y: IntArray


def training_to_json(result: TrainingResult) -> dict[str, Any]:
    """A training record as JSON values."""
    return {
        "best_epoch": int(result.best_epoch),
        "dev_disagreements": [int(v) for v in result.dev_disagreements],
        "masked": [bool(v) for v in result.masked],
        "seconds": float(result.seconds),
    }


def result_frame(res: VennAdmitResult) -> pl.DataFrame:
    """The polars frame of ``VennAdmit.predict``: one row per input.

    Columns ``y_hat``, ``q``, ``category_size`` (Int64), ``d``, ``p_lower``, ``p_upper``
    (Float64), ``admit_set`` (List(Int64), the classes of the ADMIT set, ascending) and
    ``admitted`` (Boolean). The list column is built from offsets in one pass (Arrow).
    """
    import polars as pl
    import pyarrow as pa

    rows, cols = np.nonzero(res.sets)
    offsets = np.zeros(res.sets.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=res.sets.shape[0]), out=offsets[1:])
    sets = pl.from_arrow(pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(cols.astype(np.int64))))
    return pl.DataFrame(
        {
            "y_hat": res.y_hat.astype(np.int64),
            "q": res.q.astype(np.int64),
            "d": res.d,
            "admit_set": sets,
            "admitted": res.admitted,
            "p_lower": res.p_lower,
            "p_upper": res.p_upper,
            "category_size": res.category_size.astype(np.int64),
        }
    )


def training_from_json(value: dict[str, Any]) -> TrainingResult:
    """Inverse of :func:`training_to_json`."""
    return TrainingResult(
        best_epoch=int(value["best_epoch"]),
        dev_disagreements=[int(v) for v in value["dev_disagreements"]],
        masked=[bool(v) for v in value["masked"]],
        seconds=float(value["seconds"]),
    )


@dataclass(frozen=True)
class DecodedState:
    """A validated ``VennAdmit.state()``: constructor options, parameters and arrays."""

    options: dict[str, Any]
    params: ApproximationParams
    reference: tuple[Float32Array, FloatArray, IntArray]
    calibration: tuple[
        Float32Array, FloatArray, IntArray, npt.NDArray[np.int8], FloatArray, IntArray, FloatArray
    ]
    scalars: dict[str, Any]


def decode_state(state: Any, expected_format: str) -> DecodedState:
    """Check a state dict's format, shapes and values; return its parts as typed arrays."""
    if not isinstance(state, dict) or state.get("format") != expected_format:
        msg = f"state must be a dict from VennAdmit.state() with format {expected_format!r}"
        raise ValueError(msg)
    options = dict(state["options"])
    options["split"] = tuple(options["split"])
    # states written before the Clopper-Pearson rule (issue 17) admitted on the raw Venn p̲
    options.setdefault("bound", "venn")
    arrays, scalars = state["arrays"], state["scalars"]
    E_tr = check_embeddings(arrays["reference_embeddings"], "reference_embeddings")
    L_tr = check_logits(arrays["reference_logits"], "reference_logits")
    y_tr = check_labels(arrays["reference_labels"], L_tr.shape[1], "reference_labels", n_rows=E_tr.shape[0])
    C = L_tr.shape[1]
    E_ca = check_embeddings(arrays["calibration_embeddings"], "calibration_embeddings", dim=E_tr.shape[1])
    n = E_ca.shape[0]
    L_ca = check_logits(arrays["calibration_logits"], "calibration_logits", n_classes=C)
    y_ca = check_labels(arrays["calibration_labels"], C, "calibration_labels", n_rows=n)
    a_ca = check_logits(arrays["calibration_logits_knn"], "calibration_logits_knn", n_classes=C)
    split = np.asarray(arrays["calibration_split"], dtype=np.int8)
    q = np.asarray(arrays["calibration_q"], dtype=np.intp)
    d = np.asarray(arrays["calibration_d"], dtype=np.float64)
    per_row: dict[str, npt.NDArray[Any]] = {"calibration_logits": L_ca, "calibration_logits_knn": a_ca}
    per_row |= {"calibration_split": split}
    per_row |= {"calibration_q": q, "calibration_d": d}
    for name, arr in per_row.items():
        if arr.shape[0] != n:
            msg = f"state array {name} has {arr.shape[0]} rows but calibration_embeddings has {n}"
            raise ValueError(msg)
    if not np.isin(split, (0, 1, 2)).all() or not np.isfinite(d).all() or (q < 0).any():
        msg = "state arrays calibration_split (0/1/2), calibration_q (≥ 0) or calibration_d (finite) invalid"
        raise ValueError(msg)
    params = ApproximationParams(
        beta=np.asarray(arrays["beta"], dtype=np.float64),
        gamma=np.asarray(arrays["gamma"], dtype=np.float64),
        eta=float(scalars["eta"]),
    )
    if params.beta.shape != (C,) or params.gamma.shape != (C,) or not params.eta > 0:
        msg = f"state parameters must be beta, gamma of shape ({C},) and eta > 0"
        raise ValueError(msg)
    return DecodedState(
        options=options,
        params=params,
        reference=(E_tr, L_tr, y_tr),
        calibration=(E_ca, L_ca, y_ca, split, a_ca, q, d),
        scalars=dict(scalars),
    )
