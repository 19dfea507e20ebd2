"""Venn-ADMIT: calibrated selective classification from a KNN approximation (paper 000; ALGORITHMS.md §2).

:class:`VennAdmit` takes a reference ("training") set ``D_tr`` (embeddings, model logits,
labels) and one labelled calibration set, which it splits 10% / 45% / 45% (seeded) into
``D_knn`` (fits the KNN approximation and the localizer; itself halved into fit/dev),
``D_ca^mc`` (calibrates ADMIT) and ``D_ca^vp`` (the Venn predictor). Every step of §2:

1. ``f_tr^KNN`` (Eq. 2-3) over the ``K`` nearest reference rows (faiss), trained as App. C
   (:mod:`calwatch.engine.venn_admit.approximation`); ``π^KNN = softmax(a)``, ``ŷ^KNN = argmax a``.
2. ``q`` (Eq. 4): leading neighbours, nearest first, whose model prediction equals both
   ``ŷ^KNN`` and their true label; ``d`` (Eq. 5): distance to the nearest reference row.
3. Band radius ``ω = δ·ŝ``, ``ŝ`` the sample standard deviation (ddof 1) of ``d`` over the
   calibration rows (``D_ca^mc ∪ D_ca^vp``) with ``q > 0`` and ``ŷ^KNN = y``; band
   ``B(t) = {j : q_j = q_t, |d_j − d_t| ≤ ω}`` (Eq. 6).
4. ADMIT sets (Alg. 2): ``{ŷ^KNN} ∪ {c : 1 − π_c ≤ l̂_c}`` with ``l̂_c`` the conformal
   order statistic ``⌈(n_c+1)(1−α)⌉`` of ``1 − π_y^KNN`` over the ``D_ca^mc`` rows of the band
   with label ``c``; the full set when any class has fewer than ``κ`` band rows. (The test
   ``π_c ≥ τ̂_c = 1 − l̂_c`` is evaluated as ``1 − π_c ≤ l̂_c``: both sides are then the same
   float64 expression of the same softmax, bit for bit.)
5. Venn-ADMIT (Alg. 1, 3, 4) for singleton sets ``{ŷ}``: the category ``T`` is the ``D_ca^vp``
   rows of the band with the same ``ŷ^KNN`` and the same (singleton) ADMIT set; with ``n_ŷ``
   of its ``|T|`` rows labelled ``ŷ`` and test-point weight ``w``, the lower and upper Venn
   probabilities of ``ŷ`` are ``n_ŷ/(|T| + w)`` and ``(n_ŷ + w)/(|T| + w)``. ``w = 1``
   (unweighted, Alg. 4) or ``w = 1/ψ'`` (weighted, Alg. 3, Eq. 9), ``ψ' = Σ_{j∈T} ψ_j`` from
   the localizer. The paper admits iff ``p̲ ≥ 1 − α`` (``bound="venn"``). Our default
   (``bound="clopper-pearson"``, issue 17; ``docs/venn-admit.md``) admits iff a one-sided
   Clopper-Pearson lower bound on the category's frequency of ``ŷ``, with the test point
   counted as a miss of weight ``w`` (:func:`~calwatch.engine.venn_admit.bands.venn_cp_lower`),
   is ``≥ 1 − α`` at level ``δ/m``, ``m`` the candidate categories (Bonferroni): the raw
   ``p̲`` of a small category is a noisy frequency, and selecting the categories where it looks
   ``≥ 1 − α`` is a winner's curse (admitted accuracy 0.77 on 44-54-row categories). The bound
   is at most ``p̲``, so this only removes admitted rows; it sets the minimum category size by
   itself (:attr:`VennAdmit.diagnostics_`). Admitted also needs ``q = K`` with ``q_k_only``
   (§4.4.1). Rows whose ADMIT set is not a singleton are rejected and get ``p̲ = p̄ = NaN``.
6. Localizer (App. B, Eq. 8-9): ``ψ = softmax_j(−‖r_t − r_j‖₂/η')`` over ``D_ca^vp`` (our
   reading: the calibration set of the Venn predictor, so that ``ψ' = 1`` when all the
   localizer's mass lies in the category, the paper's "standard Venn predictor" case);
   ``η'`` trained on ``D_knn`` to make ``Σ_j ψ_j f_tr^KNN(x_j)`` agree with ``f_tr^KNN(x_t)``.
   ``localizer_k=None`` (default): exact, the softmax over every ``D_ca^vp`` row, distances by
   dense float32 matrix products in blocks; ``ψ'`` sums the softmax over the category rows
   (same key, ``d`` in the band) of that row. This costs one product with ``D_ca^vp`` per
   singleton test row, less than a faiss top-1,000 search over the same rows (which keeps a
   1,000-entry heap per query): in ``benchmarks/bench_venn_admit.py`` (100k reference rows,
   d = 256, 9,000 ``D_ca^vp`` rows, 100k test rows) 0.20× vs 0.80× the main ``K = 25`` search
   when every row needs it, and ``predict`` took 1.18× vs 1.62× the bare search. ``localizer_k=1000``
   (ALGORITHMS.md's choice for large ``D_ca``, useful with ``index="hnsw"``): the 1,000 nearest
   ``D_ca^vp`` rows by faiss, the rest taken as 0, in training and prediction alike; the mass
   left out is at most ``(n − k)·exp(−(d_(k) − d_(1))/η')`` times the nearest row's weight.

Vectorised: no Python loop over rows (only over classes and blocks); the band quantiles are
exact rank queries (:mod:`calwatch.engine.venn_admit.bands`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import check_alpha, check_labels
from calwatch.engine.calibration.maps import check_logits
from calwatch.engine.errors import NotFittedError
from calwatch.engine.knn import INDEX_KINDS, IndexKind, KNNIndex, check_embeddings
from calwatch.engine.venn_admit.approximation import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_EPOCHS,
    ApproximationParams,
    approximation_logits,
    argmax_lowest,
    fit_approximation,
)
from calwatch.engine.venn_admit.bands import (
    AdmitCalibration,
    VennCategories,
    band_radius,
    reliability_features,
    venn_bounds,
    venn_cp_lower,
)
from calwatch.engine.venn_admit.localizer import (
    LocalizerSupport,
    category_mass,
    fit_localizer,
    localizer_logits,
)
from calwatch.engine.venn_admit.results import (
    VennAdmitResult,
    VennBatch,
    decode_state,
    result_frame,
    training_from_json,
    training_to_json,
)

if TYPE_CHECKING:
    import polars as pl

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]
Int64Array = npt.NDArray[np.int64]

#: Slack on ``p̲ ≥ 1 − α`` against float rounding (as in quantiles.py).
_SLACK = 1e-9
#: Calibration split D_knn / D_ca^mc / D_ca^vp (paper 000 §5).
DEFAULT_SPLIT = (0.1, 0.45, 0.45)
#: Split codes in ``calibration_split_``.
SPLIT_KNN, SPLIT_MC, SPLIT_VP = 0, 1, 2
#: ``format`` tag of :meth:`VennAdmit.state`.
STATE_FORMAT = "calwatch.VennAdmit/1"
#: Admission rules: the Clopper-Pearson bound on the category (default) or paper 000's raw ``p̲``.
BOUNDS = ("clopper-pearson", "venn")
#: The paper's κ (App. D): ±0.02 coverage variation within a band at α = 0.1.
PAPER_KAPPA = 1000


def auto_kappa(n_mc: int, n_classes: int, k: int, alpha: float) -> int:
    """``κ`` the ``D_ca^mc`` rows can support (``kappa="auto"``; ``docs/venn-admit.md``).

    ``κ = min(1000, max(⌈(1 − α)/α⌉, ⌊n_mc / (C·(K + 1))⌋))``: the average size of a
    label-specific band if the rows spread evenly over the ``C`` labels and the ``K + 1`` values
    of ``q``, capped at paper 000's 1,000 (App. D: ±0.02 coverage variation at α = 0.1, reached
    from ``n_mc = 1000·C·(K + 1)``, 52,000 rows for a binary task at K = 25) and floored at the
    smallest band with a finite conformal threshold (9 rows at α = 0.1; fewer always give the
    label, so a lower guard would change nothing). κ only controls how noisy an ADMIT set may
    be; the admitted predictions' promise is carried by the Venn step on ``D_ca^vp``, which is
    disjoint from the rows that shape the sets.

    Examples
    --------
    >>> auto_kappa(1800, 2, 25, 0.1), auto_kappa(4500, 2, 25, 0.1), auto_kappa(900, 10, 25, 0.1)
    (34, 86, 9)
    >>> auto_kappa(100_000, 2, 25, 0.1)
    1000
    """
    floor = math.ceil((1.0 - alpha) / alpha - 1e-9)
    return int(min(PAPER_KAPPA, max(floor, n_mc // (n_classes * (k + 1)))))


def _softmax(a: FloatArray) -> FloatArray:
    z: FloatArray = a - a.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


def _check_int(name: str, value: Any, minimum: int) -> int:
    integral = isinstance(value, int | np.integer) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not integral or value < minimum:
        msg = f"{name} must be an integer ≥ {minimum}; got {value!r}"
        raise ValueError(msg)
    return int(value)


def _unpack(triple: Any, name: str) -> tuple[Any, Any, Any]:
    if not isinstance(triple, tuple | list) or len(triple) != 3:
        msg = f"{name} must be a tuple (embeddings, logits, labels); got {type(triple).__name__}"
        raise TypeError(msg)
    return triple[0], triple[1], triple[2]


class VennAdmit:
    """Venn-ADMIT selective classifier over a model's embeddings and logits (paper 000).

    Parameters
    ----------
    alpha : float
        Target: admitted predictions are right with probability ``≥ 1 − alpha`` per class.
    k : int
        Neighbours ``K`` of the KNN approximation.
    kappa : int or "auto"
        Guard: ADMIT returns the full set when a class has fewer band rows (App. D).
        ``"auto"`` (default): what ``D_ca^mc`` supports (:func:`auto_kappa`; the fitted value
        is ``kappa_``), paper 000's 1,000 from 52,000 ``D_ca^mc`` rows (binary, K = 25).
    band_delta : float
        ``δ`` of the band radius ``ω = δ·ŝ``.
    weighted : bool
        Up-weight the test point by the localizer (Alg. 3) instead of weight 1 (Alg. 4).
    bound : {"clopper-pearson", "venn"}
        Admit on a Clopper-Pearson lower bound of the category's frequency of ``ŷ`` at level
        ``delta/m`` (default), or on paper 000's raw lower Venn probability ``p̲``.
    delta : float
        With ``bound="clopper-pearson"``: the chance that any of the ``m`` candidate categories
        (distinct ``(q, ŷ)`` keys of the ``D_ca^vp`` singleton rows large enough to pass,
        ``n_candidates_``) has a true frequency below its bound.
    q_k_only : bool
        Admit only rows with ``q = K`` (Venn-ADMIT_qK, §4.4.1).
    seed : int
        Seed of the calibration split, the fit/dev halves and training.
    split : tuple of 3 floats
        Shares of the calibration rows for ``D_knn``, ``D_ca^mc``, ``D_ca^vp``.
    epochs, batch_size : int
        Training loop of the approximation and the localizer (App. C).
    localizer_k : int or None
        ``None``: the localizer sums over every ``D_ca^vp`` row (exact); an integer: over each
        row's ``localizer_k`` nearest ``D_ca^vp`` rows (faiss, truncated softmax).
    index : {"flat", "hnsw", "ivf"}
        faiss index of the reference set (:class:`calwatch.engine.knn.KNNIndex`).
    progress : bool
        Show tqdm progress bars while training.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> centres = rng.normal(size=(3, 8)) * 4
    >>> def draw(n):
    ...     y = rng.integers(0, 3, n)
    ...     E = (centres[y] + rng.normal(size=(n, 8))).astype(np.float32)
    ...     return E, E @ centres.T / 8, y
    >>> va = VennAdmit(alpha=0.1, kappa=5, progress=False, epochs=5)
    >>> va = va.fit(train=draw(300), calibration=draw(400))
    >>> out = va.predict(*draw(20)[:2])
    >>> out.columns
    ['y_hat', 'q', 'd', 'admit_set', 'admitted', 'p_lower', 'p_upper', 'category_size']
    """

    def __init__(
        self,
        *,
        alpha: float = 0.1,
        k: int = 25,
        kappa: int | str = "auto",
        band_delta: float = 1.0,
        weighted: bool = True,
        bound: str = "clopper-pearson",
        delta: float = 0.1,
        q_k_only: bool = False,
        seed: int = 0,
        split: tuple[float, float, float] = DEFAULT_SPLIT,
        epochs: int = DEFAULT_EPOCHS,
        batch_size: int = DEFAULT_BATCH_SIZE,
        localizer_k: int | None = None,
        index: IndexKind = "flat",
        progress: bool = True,
    ) -> None:
        self.alpha = check_alpha(alpha)
        self.k = _check_int("k", k, 1)
        self.kappa: int | str = "auto" if kappa == "auto" else _check_int("kappa", kappa, 0)
        if bound not in BOUNDS:
            msg = f"bound must be one of {BOUNDS}; got {bound!r}"
            raise ValueError(msg)
        self.bound = str(bound)
        if not (isinstance(delta, int | float) and 0 < delta < 1):
            msg = f"delta must be a number in (0, 1); got {delta!r}"
            raise ValueError(msg)
        self.delta = float(delta)
        if not (isinstance(band_delta, int | float) and math.isfinite(band_delta) and band_delta > 0):
            msg = f"band_delta must be a finite number > 0; got {band_delta!r}"
            raise ValueError(msg)
        self.band_delta = float(band_delta)
        self.weighted = bool(weighted)
        self.q_k_only = bool(q_k_only)
        self.seed = _check_int("seed", seed, 0)
        shares = tuple(float(s) for s in split)
        if len(shares) != 3 or min(shares) <= 0 or abs(sum(shares) - 1.0) > 1e-9:
            msg = f"split must be three positive shares (knn, mc, vp) summing to 1; got {split!r}"
            raise ValueError(msg)
        self.split: tuple[float, float, float] = (shares[0], shares[1], shares[2])
        self.epochs = _check_int("epochs", epochs, 1)
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.localizer_k = None if localizer_k is None else _check_int("localizer_k", localizer_k, 1)
        if index not in INDEX_KINDS:
            msg = f"index must be one of {INDEX_KINDS}; got {index!r}"
            raise ValueError(msg)
        self.index: IndexKind = index
        self.progress = bool(progress)

    def __repr__(self) -> str:
        return (
            f"VennAdmit(alpha={self.alpha!r}, k={self.k!r}, kappa={self.kappa!r}, "
            f"band_delta={self.band_delta!r}, weighted={self.weighted!r}, bound={self.bound!r}, "
            f"delta={self.delta!r}, q_k_only={self.q_k_only!r})"
        )

    def options(self) -> dict[str, Any]:
        """The constructor options, JSON-able."""
        return {
            "alpha": self.alpha,
            "k": self.k,
            "kappa": self.kappa,
            "band_delta": self.band_delta,
            "weighted": self.weighted,
            "bound": self.bound,
            "delta": self.delta,
            "q_k_only": self.q_k_only,
            "seed": self.seed,
            "split": list(self.split),
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "localizer_k": self.localizer_k,
            "index": self.index,
            "progress": self.progress,
        }

    # ------------------------------------------------------------------------------ fit
    def fit(self, train: Any, calibration: Any) -> VennAdmit:
        """Index the reference set, split the calibration set, train and calibrate.

        Parameters
        ----------
        train : tuple (E_tr, logits_tr, y_tr)
            Reference embeddings (n, dim), the model's logits (n, C) and true labels (n,).
        calibration : tuple (E_ca, logits_ca, y_ca)
            Labelled calibration rows, same layout; split 10/45/45 (``split``).

        Returns
        -------
        VennAdmit
            ``self``, fitted.
        """
        E_tr, L_tr, y_tr = self._check_triple(train, "train")
        E_ca, L_ca, y_ca = self._check_triple(calibration, "calibration", dim=E_tr.shape[1], C=L_tr.shape[1])
        if self.k > E_tr.shape[0]:
            msg = f"k={self.k} exceeds the {E_tr.shape[0]} reference (train) rows"
            raise ValueError(msg)
        n = E_ca.shape[0]
        rng = np.random.default_rng(self.seed)
        perm = rng.permutation(n)
        n_knn = round(self.split[0] * n)
        n_mc = round(self.split[1] * n)
        if n_knn < 2 or n_mc < 1 or n - n_knn - n_mc < 1:
            msg = f"calibration has {n} rows: too few to split {self.split} into D_knn (≥ 2), D_mc, D_vp"
            raise ValueError(msg)
        split = np.full(n, SPLIT_VP, dtype=np.int8)
        split[perm[:n_knn]] = SPLIT_KNN
        split[perm[n_knn : n_knn + n_mc]] = SPLIT_MC
        reference = KNNIndex(kind=self.index, seed=self.seed).fit(E_tr)
        dist, idx = reference.search(E_ca, self.k)
        knn_rows = perm[:n_knn]
        half = n_knn // 2
        fit_local, dev_local = np.arange(half), np.arange(half, n_knn)
        tanh_ref = np.tanh(L_tr).astype(np.float32)
        params, training = fit_approximation(
            dist[knn_rows],
            idx[knn_rows],
            tanh_ref,
            y_tr,
            L_ca[knn_rows],
            fit_local,
            dev_local,
            epochs=self.epochs,
            batch_size=self.batch_size,
            seed=self.seed,
            progress=self.progress,
        )
        a_ca = approximation_logits(params, dist, idx, tanh_ref, y_tr)
        self._set_reference(reference, L_tr, y_tr, params)
        q_ca, d_ca = reliability_features(dist, idx, argmax_lowest(a_ca), self._pred_ref, y_tr)
        self.training_ = training
        dev_rows = knn_rows[dev_local]
        self.agreement_ = float(np.mean(argmax_lowest(a_ca[dev_rows]) == argmax_lowest(L_ca[dev_rows])))
        self._set_calibration(E_ca, L_ca, y_ca, split, a_ca, q_ca, d_ca)
        # localizer: support D_ca^vp, trained on D_knn (fit/dev halves) against f_tr^KNN
        support_logits = a_ca[self._vp_rows]
        eta, loc_training = fit_localizer(
            self._support,
            E_ca[knn_rows],
            support_logits,
            a_ca[knn_rows],
            fit_local,
            dev_local,
            epochs=self.epochs,
            batch_size=self.batch_size,
            seed=self.seed,
            progress=self.progress,
        )
        self.localizer_eta_ = eta
        self.localizer_training_ = loc_training
        loc_out = localizer_logits(self._support, eta, E_ca[dev_rows], support_logits)
        self.localizer_agreement_ = float(np.mean(argmax_lowest(loc_out) == argmax_lowest(a_ca[dev_rows])))
        return self

    def _check_triple(
        self, triple: Any, name: str, *, dim: int | None = None, C: int | None = None
    ) -> tuple[Float32Array, FloatArray, IntArray]:
        E_raw, L_raw, y_raw = _unpack(triple, name)
        E = check_embeddings(E_raw, f"{name}[0] (embeddings)", dim=dim)
        L = check_logits(L_raw, f"{name}[1] (logits)", n_classes=C)
        if L.shape[0] != E.shape[0]:
            msg = f"{name}: embeddings have {E.shape[0]} rows but logits have {L.shape[0]}"
            raise ValueError(msg)
        y = check_labels(y_raw, L.shape[1], f"{name}[2] (labels)", n_rows=E.shape[0])
        return E, L, y

    def _set_reference(
        self, reference: KNNIndex, L_tr: FloatArray, y_tr: IntArray, params: ApproximationParams
    ) -> None:
        self._reference = reference
        self._logits_ref, self._y_ref = L_tr, y_tr
        self._tanh_ref = np.tanh(L_tr).astype(np.float32)
        self._pred_ref = argmax_lowest(L_tr)
        self.approximation_ = params
        self.n_classes_ = int(L_tr.shape[1])
        self.dim_ = int(reference.dim_)
        self.n_reference_ = int(reference.n_rows_)

    def _set_calibration(
        self,
        E_ca: Float32Array,
        L_ca: FloatArray,
        y_ca: IntArray,
        split: npt.NDArray[np.int8],
        a_ca: FloatArray,
        q_ca: IntArray,
        d_ca: FloatArray,
    ) -> None:
        """Everything derived from the calibration rows; deterministic (``from_state`` reruns it)."""
        C = self.n_classes_
        self.calibration_embeddings_, self.calibration_logits_, self.calibration_labels_ = E_ca, L_ca, y_ca
        self.calibration_split_ = split
        self.calibration_logits_knn_ = a_ca
        self.calibration_q_, self.calibration_d_ = q_ca, d_ca
        probs = _softmax(a_ca.copy())
        self.calibration_probs_knn_ = probs
        yhat = argmax_lowest(a_ca)
        used = split != SPLIT_KNN
        self.s_hat_, self.omega_ = band_radius(
            d_ca[used], q_ca[used], yhat[used], y_ca[used], self.band_delta
        )
        mc = np.flatnonzero(split == SPLIT_MC)
        self.kappa_ = auto_kappa(mc.size, C, self.k, self.alpha) if self.kappa == "auto" else int(self.kappa)
        self._admit = AdmitCalibration(
            q_ca[mc],
            d_ca[mc],
            y_ca[mc],
            1.0 - probs[mc, y_ca[mc]],
            n_classes=C,
            alpha=self.alpha,
            omega=self.omega_,
            kappa=self.kappa_,
        )
        vp = np.flatnonzero(split == SPLIT_VP)
        self._vp_rows = vp
        sets_vp, _ = self._admit.sets(probs[vp], yhat[vp], q_ca[vp], d_ca[vp])
        key = np.where(sets_vp.sum(axis=1) == 1, q_ca[vp] * C + yhat[vp], -1).astype(np.int64)
        self._categories = VennCategories(key, d_ca[vp], y_ca[vp], n_classes=C)
        self._support = LocalizerSupport(E_ca[vp], k=self.localizer_k, kind=self.index, seed=self.seed)
        self._refresh_diagnostics()

    def _refresh_diagnostics(self) -> None:
        """``n_candidates_`` and ``diagnostics_`` from the fitted calibration structures."""
        vp = self._vp_rows
        key = self._categories.key
        self.n_candidates_ = self._candidates(np.unique(key[key >= 0], return_counts=True)[1])
        yhat = argmax_lowest(self.calibration_logits_knn_[vp])
        q, d = self.calibration_q_[vp], self.calibration_d_[vp]
        sets, _ = self._admit.sets(self.calibration_probs_knn_[vp], yhat, q, d)
        self.diagnostics_ = self._diagnostics(key, d, yhat, np.asarray(sets.all(axis=1)))

    def _after_decode(self) -> None:
        """A monitor snapshot from before issue 17: the paper's rule and κ, as it was fitted."""
        if "bound" in self.__dict__:
            return
        self.bound, self.delta = "venn", 0.1
        if hasattr(self, "_categories"):
            self.kappa_ = int(self._admit.kappa)
            self._refresh_diagnostics()

    def _candidates(self, sizes: Int64Array) -> int:
        """``m``: the fewest candidate categories that cover every key able to pass at ``δ/m``.

        A ``(q, ŷ)`` key whose ``D_ca^vp`` singleton rows are too few to pass the bound at
        level ``δ/m`` even if all are right (``w = 1``, the least a test point weighs) cannot be
        admitted, whatever its labels; the key sizes do not depend on the ``D_ca^vp`` labels, so
        leaving such keys out of the Bonferroni count keeps it valid. ``m`` is the smallest
        count with ``#{keys that could pass at δ/m} ≤ m`` (at most the number of keys).
        """
        sizes = np.asarray(sizes, dtype=np.int64)
        for m in range(1, max(int(sizes.size), 1) + 1):
            full = venn_cp_lower(sizes, sizes, np.ones(sizes.size), self.delta / m)
            if int(np.sum(full >= (1.0 - self.alpha) - _SLACK)) <= m:
                return m
        return max(int(sizes.size), 1)

    def _bound_level(self) -> float:
        """Per-category level ``δ/m`` of the Clopper-Pearson bound (Bonferroni over candidates)."""
        return self.delta / self.n_candidates_

    def _lower(self, n_t: IntArray, n_y: IntArray, w: FloatArray) -> FloatArray:
        """What admission compares with ``1 − α``: the CP bound, or the Venn ``p̲`` (``bound="venn"``)."""
        if self.bound == "venn":
            return venn_bounds(n_t, n_y, w)[0]
        return venn_cp_lower(n_t, n_y, w, self._bound_level())

    def min_category_size(self) -> int | None:
        """Fewest ``D_ca^vp`` rows a category needs to admit at all (every row right, ``w = 1``).

        ``None`` when no size up to 100,000 is enough.
        """
        sizes = np.arange(1, 100_001)
        ok = self._lower(sizes, sizes, np.ones(sizes.size)) >= (1.0 - self.alpha) - _SLACK
        return int(sizes[np.argmax(ok)]) if ok.any() else None

    def _diagnostics(
        self, key: Int64Array, d_vp: FloatArray, yhat_vp: IntArray, full_vp: BoolArray
    ) -> dict[str, Any]:
        """What the calibration rows say about how much Venn-ADMIT can admit (``diagnostics_``)."""
        single = key >= 0
        n_t, n_y = self._categories.counts(
            key[single], d_vp[single] - self.omega_, d_vp[single] + self.omega_, yhat_vp[single]
        )
        # each D_ca^vp singleton row against its own category, itself included, w = 1
        passes = self._lower(n_t, n_y, np.ones(n_t.size)) >= (1.0 - self.alpha) - _SLACK
        n_vp = max(int(key.size), 1)
        return {
            "kappa": self.kappa_,
            "bound": self.bound,
            "candidates": self.n_candidates_,
            "n_mc": int(np.sum(self.calibration_split_ == SPLIT_MC)),
            "n_vp": int(key.size),
            "full_share": float(np.sum(full_vp)) / n_vp,
            "singleton_share": float(np.sum(single)) / n_vp,
            "median_category_size": float(np.median(n_t)) if n_t.size else 0.0,
            "largest_category_size": int(n_t.max()) if n_t.size else 0,
            "min_category_size": self.min_category_size(),
            "calibration_admit_share": float(np.sum(passes)) / n_vp,
        }

    def explain_rejections(self) -> str:
        """Why this Venn-ADMIT admits (almost) nothing, and what to try, in one paragraph."""
        self._check_fitted()
        g = self.diagnostics_
        need = g["min_category_size"]
        parts = [
            f"KNN agreement with the model {self.agreement_:.2f}",
            f"κ = {g['kappa']} (D_ca^mc {g['n_mc']} rows): "
            f"{g['full_share']:.0%} of D_ca^vp rows get the full set",
            f"{g['singleton_share']:.0%} get a singleton",
            f"Venn categories median {g['median_category_size']:.0f}, "
            f"largest {g['largest_category_size']} rows "
            f"(a category needs ≥ {need if need is not None else '∞'} rows, all right, to be admitted at "
            f"α = {self.alpha:g})",
        ]
        tips = []
        if self.agreement_ < 0.95:
            tips.append(
                "an embedding whose neighbours share the model's prediction "
                "(e.g. the model's penultimate layer)"
            )
        if g["full_share"] > 0.5 and g["kappa"] > math.ceil((1.0 - self.alpha) / self.alpha - 1e-9):
            tips.append("a smaller kappa")
        if need is None or g["largest_category_size"] < need:
            tips.append("more calibration rows (the categories are smaller than the bound needs)")
        else:
            tips.append(
                "a larger alpha or more calibration rows (categories are large enough, but their "
                "share of right predictions is too close to 1 − α to certify)"
            )
        tips += ["weighted=False"] * self.weighted + ["q_k_only=False"] * self.q_k_only
        return "; ".join(parts) + ". Try " + ", ".join(tips) + "."

    def _check_fitted(self) -> None:
        if not hasattr(self, "localizer_eta_"):
            msg = (
                "this VennAdmit is not fitted yet: call fit(train=(E, logits, y), calibration=(E, logits, y))"
            )
            raise NotFittedError(msg)

    # ------------------------------------------------------------------------- features
    # -------------------------------------------------------------------------- predict
    def check_inputs(self, E: Any, logits: Any) -> tuple[Float32Array, FloatArray]:
        """Validate a batch as ``predict`` does: embeddings as float32, logits as float64.

        Raises
        ------
        NotFittedError
            Before ``fit``.
        ValueError, TypeError
            Wrong shapes (width, classes, row counts), NaN or inf, non-numeric input.
        """
        self._check_fitted()
        Ev = check_embeddings(E, "E", dim=self.dim_)
        Lv = check_logits(logits, "logits", n_classes=self.n_classes_)
        if Lv.shape[0] != Ev.shape[0]:
            msg = f"E has {Ev.shape[0]} rows but logits has {Lv.shape[0]} (logits of the same rows)"
            raise ValueError(msg)
        return Ev, Lv

    def knn_logits(self, E: Any) -> FloatArray:
        """``f_tr^KNN`` logits ``a`` of embeddings ``E`` (m, dim) → (m, C), float64."""
        self._check_fitted()
        Ev = check_embeddings(E, "E", dim=self.dim_)
        dist, idx = self._reference.search(Ev, self.k)
        return approximation_logits(self.approximation_, dist, idx, self._tanh_ref, self._y_ref)

    def agreement(self, E: Any, logits: Any) -> float:
        """Share of rows where ``ŷ^KNN`` equals the model's argmax (the comparison of paper Table 2)."""
        Ev, Lv = self.check_inputs(E, logits)
        return float(np.mean(argmax_lowest(self.knn_logits(Ev)) == argmax_lowest(Lv)))

    def _parts(self, Ev: Float32Array, Lv: FloatArray) -> VennBatch:
        dist, idx = self._reference.search(Ev, self.k)
        a = approximation_logits(self.approximation_, dist, idx, self._tanh_ref, self._y_ref)
        yhat = argmax_lowest(a)
        q, d = reliability_features(dist, idx, yhat, self._pred_ref, self._y_ref)
        probs = _softmax(a.copy())
        sets, guarded = self._admit.sets(probs, yhat, q, d)
        single = np.flatnonzero(sets.sum(axis=1) == 1)
        key = (q[single] * self.n_classes_ + yhat[single]).astype(np.int64)
        lo, hi = d[single] - self.omega_, d[single] + self.omega_
        n_t, n_y = self._categories.counts(key, lo, hi, yhat[single])
        return VennBatch(
            E=Ev, a=a, probs=probs, yhat=yhat, q=q, d=d, sets=sets, guarded=guarded,
            y_model=argmax_lowest(Lv), single=single, key=key, lo=lo, hi=hi,
            n_t=n_t, n_y=n_y,
        )  # fmt: skip

    def _test_point_weights(self, parts: VennBatch) -> FloatArray:
        """``1/ψ'`` for the singleton rows (Alg. 3, Eq. 9); ``inf`` where ``ψ' = 0``."""
        psi = category_mass(
            self._support,
            self.localizer_eta_,
            parts.E[parts.single],
            parts.key,
            parts.lo,
            parts.hi,
            self._categories.key,
            self._categories.d,
        )
        with np.errstate(divide="ignore"):
            weight: FloatArray = np.maximum(1.0 / psi, 1.0)  # ψ' ≤ 1 up to rounding: w ∈ [1, ∞)
        return weight

    def _result(self, parts: VennBatch, weight: FloatArray | None, *, q_k_only: bool) -> VennAdmitResult:
        """Venn-ADMIT (Alg. 1, 3, 4) on the singleton rows; ``weight=None`` is ``w = 1``."""
        m = parts.sets.shape[0]
        w = np.ones(parts.single.size) if weight is None else weight
        low, up = venn_bounds(parts.n_t, parts.n_y, w)
        ok = self._lower(parts.n_t, parts.n_y, w) >= (1.0 - self.alpha) - _SLACK
        if q_k_only:
            ok &= parts.q[parts.single] == self.k
        p_lower, p_upper, weights = np.full(m, np.nan), np.full(m, np.nan), np.full(m, np.nan)
        size = np.zeros(m, dtype=np.intp)
        admitted = np.zeros(m, dtype=bool)
        p_lower[parts.single], p_upper[parts.single], weights[parts.single] = low, up, w
        size[parts.single] = parts.n_t
        admitted[parts.single] = ok
        return VennAdmitResult(
            y_hat=parts.yhat, q=parts.q, d=parts.d, sets=parts.sets, guarded=parts.guarded,
            admitted=admitted, p_lower=p_lower, p_upper=p_upper, category_size=size, weight=weights,
            probs=parts.probs, logits_knn=parts.a, y_model=parts.y_model,
        )  # fmt: skip

    def predict_arrays(
        self, E: Any, logits: Any, *, weighted: bool | None = None, q_k_only: bool | None = None
    ) -> VennAdmitResult:
        """Per-row ADMIT sets and Venn-ADMIT decisions as arrays (see :class:`VennAdmitResult`).

        Parameters
        ----------
        E : array-like of shape (m, dim)
            Embeddings of the rows.
        logits : array-like of shape (m, C)
            The model's own logits of the same rows (validated; reported as ``y_model``).
        weighted, q_k_only : bool, optional
            Override the constructor's choices for this call.
        """
        Ev, Lv = self.check_inputs(E, logits)
        parts = self._parts(Ev, Lv)
        use_weights = self.weighted if weighted is None else bool(weighted)
        weight = self._test_point_weights(parts) if use_weights else None
        return self._result(parts, weight, q_k_only=self.q_k_only if q_k_only is None else bool(q_k_only))

    def predict_variants(self, E: Any, logits: Any) -> dict[tuple[bool, bool], VennAdmitResult]:
        """All four selective classifiers of paper 000 §5.1 from one neighbour search.

        Keys are ``(weighted, q_k_only)``: ``(True, False)`` Venn-ADMIT, ``(True, True)``
        Venn-ADMIT_qK, ``(False, False)`` Venn-ADMIT-w, ``(False, True)`` Venn-ADMIT_qK-w (the
        paper's "-w" marks the variants without test-point weighting).
        """
        Ev, Lv = self.check_inputs(E, logits)
        parts = self._parts(Ev, Lv)
        weight = self._test_point_weights(parts)
        return {
            (weighted, only_qk): self._result(parts, weight if weighted else None, q_k_only=only_qk)
            for weighted in (True, False)
            for only_qk in (False, True)
        }

    def predict(self, E: Any, logits: Any) -> pl.DataFrame:
        """Per-row results as a polars DataFrame, one row per input.

        Columns: ``y_hat`` (ŷ^KNN), ``q``, ``d``, ``admit_set`` (list of class indices),
        ``admitted``, ``p_lower``, ``p_upper`` (NaN unless the ADMIT set is a singleton),
        ``category_size``.
        """
        return result_frame(self.predict_arrays(E, logits))

    # ---------------------------------------------------------------------------- state
    def state(self) -> dict[str, Any]:
        """The fitted calibrator as plain arrays and JSON-able values (no pickle).

        ``from_state(state())`` rebuilds the faiss indexes and the band structures from these
        arrays and predicts exactly as this object does.
        """
        self._check_fitted()
        p = self.approximation_
        return {
            "format": STATE_FORMAT,
            "options": self.options(),
            "scalars": {
                "eta": p.eta,
                "localizer_eta": self.localizer_eta_,
                "agreement": self.agreement_,
                "localizer_agreement": self.localizer_agreement_,
                "training": training_to_json(self.training_),
                "localizer_training": training_to_json(self.localizer_training_),
            },
            "arrays": {
                "beta": p.beta,
                "gamma": p.gamma,
                "reference_embeddings": self._reference.reference.copy(),
                "reference_logits": self._logits_ref,
                "reference_labels": self._y_ref.astype(np.int64),
                "calibration_embeddings": self.calibration_embeddings_,
                "calibration_logits": self.calibration_logits_,
                "calibration_labels": self.calibration_labels_.astype(np.int64),
                "calibration_split": self.calibration_split_,
                "calibration_logits_knn": self.calibration_logits_knn_,
                "calibration_q": self.calibration_q_.astype(np.int64),
                "calibration_d": self.calibration_d_,
            },
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> VennAdmit:
        """Rebuild a fitted :class:`VennAdmit` from :meth:`state` (no training, no pickle).

        Raises
        ------
        ValueError
            Not a VennAdmit state, or arrays of the wrong shape or content.
        """
        decoded = decode_state(state, STATE_FORMAT)
        va = cls(**decoded.options)
        E_tr, L_tr, y_tr = decoded.reference
        va._set_reference(KNNIndex(kind=va.index, seed=va.seed).fit(E_tr), L_tr, y_tr, decoded.params)
        va._set_calibration(*decoded.calibration)
        scalars = decoded.scalars
        va.agreement_ = float(scalars["agreement"])
        va.localizer_agreement_ = float(scalars["localizer_agreement"])
        va.training_ = training_from_json(scalars["training"])
        va.localizer_training_ = training_from_json(scalars["localizer_training"])
        va.localizer_eta_ = float(scalars["localizer_eta"])
        return va
