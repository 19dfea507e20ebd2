"""The comparison methods of paper 000 §5.1 on the inputs of a fitted :class:`VennAdmit`.

:func:`compare_methods` returns, for each method, prediction sets (a boolean ``(m, C)`` matrix),
the point prediction and the admitted mask (singleton sets; for the Venn-ADMIT selective
classifiers, the admitted predictions), so a table can report per-class admitted accuracy
(:func:`admitted_accuracy`, paper Tables 4-5). Every set contains its method's point
prediction (the papers' convention).

============================  ======================================================================
method                        what it is (calibration rows)
============================  ======================================================================
``conf_base``                 split conformal, LAC score ``1 − π_y`` on ``π^KNN`` (``D_ca^mc ∪ D_ca^vp``)
``aps``                       APS (randomised, seeded) on the model's softmax (all calibration rows)
``raps_size``/``raps_adapt``  RAPS on the temperature-scaled model softmax, ``k_reg`` and ``λ``
                              tuned for size / adaptiveness on a held-out 20% (all rows; the
                              temperature is fitted on the same rows, as in RAPS's own code)
``local_conf``                localized conformal (Guan 2022) on ``π^KNN``: kernel
                              ``exp(−‖r_t − r_j‖/η')`` of the trained localizer over
                              ``D_ca^mc ∪ D_ca^vp``, the test row's own weight ``exp(0) = 1`` at
                              ``+∞``; class ``c`` is in the set iff the kernel mass of scores
                              below ``1 − π_c`` is ``< (1 − α)(Σ_j K_j + 1)``. With a top-k
                              localizer the kernel is summed over the k nearest rows only
``local_conf_ess``            the same with the test row's atom ``Σ K_j²/Σ K_j`` (weighted like
                              an average calibration row; see :func:`local_conformal_sets`)
``admit``                     ADMIT sets (Alg. 2)
``venn_admit`` …              the Venn-ADMIT selective classifiers (weighted, ``_qk``, and the
                              paper's "-w" variants without test-point weighting, ``_unweighted``):
                              admitted rows get ``{ŷ^KNN}``, rejected rows the full set
============================  ======================================================================

The approximation's own point accuracy is reported by the table helper from ``y_hat``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from calwatch.engine.calibration.maps import TemperatureScaling
from calwatch.engine.conformal.classifier import SplitConformalClassifier, TuneName
from calwatch.engine.venn_admit.admit import SPLIT_KNN, VennAdmit
from calwatch.engine.venn_admit.approximation import argmax_lowest
from calwatch.engine.venn_admit.localizer import LocalizerSupport

if TYPE_CHECKING:
    import polars as pl

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]
TestWeight = Literal["kernel", "ess"]

#: Every method :func:`compare_methods` knows, in the paper's table order.
METHODS: tuple[str, ...] = (
    "conf_base",
    "raps_adapt",
    "raps_size",
    "aps",
    "local_conf",
    "local_conf_ess",
    "admit",
    "venn_admit_unweighted",
    "venn_admit_qk_unweighted",
    "venn_admit",
    "venn_admit_qk",
)
#: The paper's label of each method.
PAPER_NAMES: dict[str, str] = {
    "conf_base": "Conf-base",
    "raps_adapt": "RAPS-adapt",
    "raps_size": "RAPS-size",
    "aps": "APS",
    "local_conf": "Local-conf",
    "local_conf_ess": "Local-conf (ESS)",
    "admit": "ADMIT",
    "venn_admit_unweighted": "Venn-ADMIT-w",
    "venn_admit_qk_unweighted": "Venn-ADMIT_qK-w",
    "venn_admit": "Venn-ADMIT",
    "venn_admit_qk": "Venn-ADMIT_qK",
}
_VENN_VARIANTS: dict[str, tuple[bool, bool]] = {
    "venn_admit": (True, False),
    "venn_admit_qk": (True, True),
    "venn_admit_unweighted": (False, False),
    "venn_admit_qk_unweighted": (False, True),
}


@dataclass(frozen=True)
class MethodResult:
    """One method's output on ``m`` rows.

    Attributes
    ----------
    method : str
        Key in :data:`METHODS`.
    sets : bool array (m, C)
        Prediction sets (always contain ``prediction``).
    prediction : int array (m,)
        The method's point prediction (``ŷ^KNN`` or the model's argmax).
    admitted : bool array (m,)
        Singleton sets: the selective classifier's admitted rows.
    """

    method: str
    sets: BoolArray
    prediction: IntArray
    admitted: BoolArray

    @property
    def packed(self) -> npt.NDArray[np.uint8]:
        """``sets`` packed 8 classes a byte (``numpy.packbits`` along classes)."""
        return np.packbits(self.sets, axis=1)


def _softmax(z: FloatArray) -> FloatArray:
    e: FloatArray = np.exp(z - z.max(axis=1, keepdims=True))
    e /= e.sum(axis=1, keepdims=True)
    return e


def _result(method: str, sets: BoolArray, prediction: IntArray) -> MethodResult:
    sets[np.arange(sets.shape[0]), prediction] = True
    return MethodResult(method=method, sets=sets, prediction=prediction, admitted=sets.sum(axis=1) == 1)


def local_conformal_sets(
    support: LocalizerSupport,
    eta: float,
    support_scores: FloatArray,
    E: Any,
    probs: FloatArray,
    alpha: float,
    *,
    test_weight: TestWeight = "kernel",
) -> BoolArray:
    """Localized conformal sets (Guan 2022) with the kernel ``K_j = exp(−‖r_t − r_j‖/η')``.

    For each row, class ``c`` is in the set iff ``Σ_{j : s_j < 1 − π_c} K_j < (1 − α)(Σ_j K_j + a)``:
    the ``(1 − α)`` quantile of ``Σ_j K_j δ_{s_j} + a·δ_{+∞}`` (normalised) is then ``≥ 1 − π_c``.
    The test row's own atom ``a``:

    - ``"kernel"``: ``a = K(x, x) = exp(0) = 1``, Guan's LCP. With a narrow kernel (small
      ``η'`` relative to the distances) the calibration mass ``Σ_j K_j`` is far below 1 and
      every set is full: LCP's honest answer when there is no calibration data nearby.
    - ``"ess"``: ``a = Σ_j K_j² / Σ_j K_j``, the test row weighted like an average calibration
      row (``Σ K / a`` is Kish's effective sample size): split conformal for a flat kernel,
      a full set when one row carries all the mass. Invariant to rescaling the kernel, so the
      softmax ``ψ`` (shifted by the nearest distance) is used. Our choice: paper 000 does not
      say how its Local-conf treats the test row.

    Computed per block from the kernel sorted by score and its cumulative sums (dense
    support: one shared order; top-k support: each row's neighbours ranked by score).

    Examples
    --------
    Two support rows at distance 0 (kernel 1 each) with scores 0.1 and 0.3, α = 0.5: the
    target is 0.5·(2 + 1) = 1.5; mass below 0.2 is 1 (in), below 0.35 is 2 (out).

    >>> sup = LocalizerSupport(np.zeros((2, 1), np.float32), k=None)
    >>> local_conformal_sets(sup, 1.0, np.array([0.1, 0.3]), np.zeros((1, 1), np.float32),
    ...                      np.array([[0.8, 0.65]]), alpha=0.5).tolist()
    [[True, False]]
    """
    m, C = probs.shape
    sets = np.zeros((m, C), dtype=bool)
    order = np.argsort(support_scores, kind="stable")
    sorted_scores = support_scores[order]
    rank_of_row = np.searchsorted(sorted_scores, support_scores, side="left")
    for rows, block_dist, idx in support.blocks(E):
        dist = block_dist.astype(np.float64, copy=False)
        b = dist.shape[0]
        if test_weight == "kernel":
            kernel = np.exp(-dist / eta)
            total = kernel.sum(axis=1)
            atom = np.ones(b)
        else:
            kernel = np.exp(-(dist - dist.min(axis=1, keepdims=True)) / eta)
            total = kernel.sum(axis=1)
            atom = np.einsum("mk,mk->m", kernel, kernel) / total
        target = (1.0 - alpha) * (total + atom)
        x = 1.0 - probs[rows]  # (b, C) test scores
        below_rank = np.searchsorted(sorted_scores, x, side="left")  # scores < x have rank < this
        if idx is None:
            cumulative = np.zeros((b, kernel.shape[1] + 1))
            np.cumsum(kernel[:, order], axis=1, out=cumulative[:, 1:])
            mass = np.take_along_axis(cumulative, below_rank, axis=1)
        else:
            ranks = rank_of_row[idx]  # (b, k)
            by_rank = np.argsort(ranks, axis=1, kind="stable")
            ranks_sorted = np.take_along_axis(ranks, by_rank, axis=1)
            cumulative = np.zeros((b, kernel.shape[1] + 1))
            np.cumsum(np.take_along_axis(kernel, by_rank, axis=1), axis=1, out=cumulative[:, 1:])
            width = support.n + 1
            keys = (np.arange(b)[:, None] * width + ranks_sorted).ravel()
            counts = np.searchsorted(keys, (np.arange(b)[:, None] * width + below_rank).ravel())
            counts = counts.reshape(b, C) - np.arange(b)[:, None] * kernel.shape[1]
            mass = np.take_along_axis(cumulative, counts, axis=1)
        sets[rows] = mass < target[:, None]
    return sets


def compare_methods(
    va: VennAdmit,
    E: Any,
    logits: Any,
    *,
    methods: tuple[str, ...] = METHODS,
    seed: int | None = None,
) -> dict[str, MethodResult]:
    """Each method's sets, prediction and admitted mask on rows ``(E, logits)``.

    Parameters
    ----------
    va : VennAdmit
        Fitted; its calibration rows, split, approximation and localizer are reused.
    E, logits : array-like
        Embeddings and the model's logits of the test rows.
    methods : tuple of str
        A subset of :data:`METHODS`.
    seed : int, optional
        Seed of APS/RAPS randomisation and RAPS's tuning split; default ``va.seed``.
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        msg = f"unknown methods {unknown}; known: {METHODS}"
        raise ValueError(msg)
    Ev, Lv = va.check_inputs(E, logits)
    seed = va.seed if seed is None else int(seed)
    out: dict[str, MethodResult] = {}
    variants = va.predict_variants(Ev, Lv)
    base = variants[(True, False)]
    C = va.n_classes_
    cal = va.calibration_split_ != SPLIT_KNN
    y_ca = va.calibration_labels_
    for method in methods:
        if method in _VENN_VARIANTS:
            res = variants[_VENN_VARIANTS[method]]
            sets = np.ones((Ev.shape[0], C), dtype=bool)
            sets[res.admitted] = False
            sets[np.flatnonzero(res.admitted), res.y_hat[res.admitted]] = True
            out[method] = MethodResult(method=method, sets=sets, prediction=res.y_hat, admitted=res.admitted)
        elif method == "admit":
            out[method] = _result(method, base.sets.copy(), base.y_hat)
        elif method == "conf_base":
            clf = SplitConformalClassifier(score="lac", alpha=va.alpha, seed=seed)
            clf.fit(va.calibration_probs_knn_[cal], y_ca[cal])
            out[method] = _result(method, clf.predict_sets(base.probs), base.y_hat)
        elif method == "aps":
            P_ca = _softmax(va.calibration_logits_)
            # paper 000's baselines: the plain conformal set, the top class added afterwards
            clf = SplitConformalClassifier(
                score="aps", alpha=va.alpha, randomized=True, top_class="added", seed=seed
            )
            clf.fit(P_ca, y_ca)
            P = _softmax(Lv)
            out[method] = _result(method, clf.predict_sets(P), argmax_lowest(P))
        elif method in ("raps_size", "raps_adapt"):
            ts = TemperatureScaling().fit(va.calibration_logits_, y_ca)
            tune: TuneName = "size" if method == "raps_size" else "adapt"
            clf = SplitConformalClassifier(
                score="raps", alpha=va.alpha, randomized=True, tune=tune, top_class="added", seed=seed
            )
            clf.fit(ts.transform(va.calibration_logits_), y_ca)
            P = ts.transform(Lv)
            out[method] = _result(method, clf.predict_sets(P), argmax_lowest(P))
        else:  # local_conf, local_conf_ess
            rows = np.flatnonzero(cal)
            support = LocalizerSupport(
                va.calibration_embeddings_[rows], k=va.localizer_k, kind=va.index, seed=va.seed
            )
            scores = 1.0 - va.calibration_probs_knn_[rows, y_ca[rows]]
            weight: TestWeight = "kernel" if method == "local_conf" else "ess"
            sets = local_conformal_sets(
                support, va.localizer_eta_, scores, Ev, base.probs, va.alpha, test_weight=weight
            )
            out[method] = _result(method, sets, base.y_hat)
    return out


def admitted_accuracy(results: dict[str, MethodResult], y: Any, *, by: str = "label") -> pl.DataFrame:
    """Per-class admitted accuracy and share, one row per (method, class) (paper Tables 4-5).

    ``by="label"`` (the paper's tables): for true class ``c``, among admitted rows with
    ``y = c``, the share whose set contains ``y`` (``accuracy``), and ``n/N`` (``share``:
    those rows over all rows). ``by="prediction"``: the same grouped by the predicted class
    (what a user sees: precision). A class ``"all"`` row pools the classes. Accuracy is NaN
    where no row was admitted.

    Returns
    -------
    polars.DataFrame
        Columns ``method``, ``name`` (the paper's label), ``class``, ``accuracy``, ``share``,
        ``n_admitted``, ``n``.
    """
    import polars as pl

    if by not in ("label", "prediction"):
        msg = f"by must be 'label' or 'prediction'; got {by!r}"
        raise ValueError(msg)
    labels = np.asarray(y)
    records: list[dict[str, Any]] = []
    for method, res in results.items():
        correct = res.sets[np.arange(labels.shape[0]), labels]
        group = labels if by == "label" else res.prediction
        classes = [str(c) for c in range(res.sets.shape[1])] + ["all"]
        for name in classes:
            in_group = np.ones(labels.shape[0], dtype=bool) if name == "all" else group == int(name)
            chosen = res.admitted & in_group
            n_adm = int(chosen.sum())
            records.append(
                {
                    "method": method,
                    "name": PAPER_NAMES.get(method, method),
                    "class": name,
                    "accuracy": float(correct[chosen].mean()) if n_adm else math.nan,
                    "share": n_adm / labels.shape[0],
                    "n_admitted": n_adm,
                    "n": int(labels.shape[0]),
                }
            )
    return pl.DataFrame(records)
