"""Venn-ADMIT: calibrated selective classification from a KNN approximation (paper 000; ALGORITHMS.md §2).

:class:`VennAdmit` takes a reference ("training") set ``D_tr`` (embeddings, model logits,
labels) and one labelled calibration set, which it splits 10% / 45% / 45% (seeded) into
``D_knn`` (fits the KNN approximation and the localizer; itself halved into fit/dev),
``D_ca^mc`` (calibrates ADMIT) and ``D_ca^vp`` (the Venn predictor). Every step of §2:

1. ``f_tr^KNN`` (Eq. 2-3) over the ``K`` nearest reference rows (faiss), trained as App. C
   (:mod:`calwatch.engine.knn_approx`); ``π^KNN = softmax(a)``, ``ŷ^KNN = argmax a``.
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
   the localizer. Admitted iff ``p̲ ≥ 1 − α`` (and ``q = K`` with ``q_k_only``, §4.4.1).
   Rows whose ADMIT set is not a singleton are rejected and get ``p̲ = p̄ = NaN``.
6. Localizer (App. B, Eq. 8-9): ``ψ = softmax_j(−‖r_t − r_j‖₂/η')`` over ``D_ca^vp`` (our
   reading: the calibration set of the Venn predictor, so that ``ψ' = 1`` when all the
   localizer's mass lies in the category, the paper's "standard Venn predictor" case);
   ``η'`` trained on ``D_knn`` to make ``Σ_j ψ_j f_tr^KNN(x_j)`` agree with ``f_tr^KNN(x_t)``.
   ``localizer_k=1000`` (default, ALGORITHMS.md): the softmax runs over the 1,000 nearest
   ``D_ca^vp`` rows (faiss), the rest taken as 0, in training and at prediction alike; the
   mass left out is at most ``(n − k)·exp(−(d_(k) − d_(1))/η')`` relative to the nearest
   row's weight. ``localizer_k=None``: exact, over every ``D_ca^vp`` row (dense blocks).

Vectorised: no Python loop over rows (only over classes and blocks); the band quantiles are
exact rank queries (:mod:`calwatch.engine.venn_bands`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import check_alpha, check_labels
from calwatch.engine.calibration import check_logits
from calwatch.engine.conformal import NotFittedError
from calwatch.engine.knn import INDEX_KINDS, IndexKind, KNNIndex, check_embeddings
from calwatch.engine.knn_approx import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_EPOCHS,
    ApproximationParams,
    approximation_logits,
    argmax_lowest,
    fit_approximation,
    fit_localizer,
    localizer_logits,
    softmax_of_negative,
)
from calwatch.engine.venn_bands import GroupedWindows, PrefixCounts, RankTree

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]
Int64Array = npt.NDArray[np.int64]

#: Slack on ``⌈(n+1)(1−α)⌉`` and on ``p̲ ≥ 1 − α`` against float rounding (as in quantiles.py).
_SLACK = 1e-9
#: Calibration split D_knn / D_ca^mc / D_ca^vp (paper 000 §5).
DEFAULT_SPLIT = (0.1, 0.45, 0.45)
#: Split codes in ``calibration_split_``.
SPLIT_KNN, SPLIT_MC, SPLIT_VP = 0, 1, 2
#: Elements of one dense localizer block (rows × support rows).
_DENSE_BLOCK = 1 << 22


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


def _softmax(a: FloatArray) -> FloatArray:
    z: FloatArray = a - a.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or int(value) != value or value < minimum:
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
    kappa : int
        Guard: ADMIT returns the full set when a class has fewer band rows (App. D).
    band_delta : float
        ``δ`` of the band radius ``ω = δ·ŝ``.
    weighted : bool
        Up-weight the test point by the localizer (Alg. 3) instead of weight 1 (Alg. 4).
    q_k_only : bool
        Admit only rows with ``q = K`` (Venn-ADMIT_qK, §4.4.1).
    seed : int
        Seed of the calibration split, the fit/dev halves and training.
    split : tuple of 3 floats
        Shares of the calibration rows for ``D_knn``, ``D_ca^mc``, ``D_ca^vp``.
    epochs, batch_size : int
        Training loop of the approximation and the localizer (App. C).
    localizer_k : int or None
        Localizer support rows per query (top-k by faiss); ``None`` for all of ``D_ca^vp``.
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
        kappa: int = 1000,
        band_delta: float = 1.0,
        weighted: bool = True,
        q_k_only: bool = False,
        seed: int = 0,
        split: tuple[float, float, float] = DEFAULT_SPLIT,
        epochs: int = DEFAULT_EPOCHS,
        batch_size: int = DEFAULT_BATCH_SIZE,
        localizer_k: int | None = 1000,
        index: IndexKind = "flat",
        progress: bool = True,
    ) -> None:
        self.alpha = check_alpha(alpha)
        self.k = _check_int("k", k, 1)
        self.kappa = _check_int("kappa", kappa, 0)
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
            f"band_delta={self.band_delta!r}, weighted={self.weighted!r}, q_k_only={self.q_k_only!r})"
        )

    def options(self) -> dict[str, Any]:
        """The constructor options, JSON-able."""
        return {
            "alpha": self.alpha,
            "k": self.k,
            "kappa": self.kappa,
            "band_delta": self.band_delta,
            "weighted": self.weighted,
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
        self._set_reference(reference, L_tr, y_tr, tanh_ref, params)
        q_ca, d_ca = self._q_and_d(dist, idx, argmax_lowest(a_ca))
        self.training_ = training
        dev_rows = knn_rows[dev_local]
        self.agreement_ = float(np.mean(argmax_lowest(a_ca[dev_rows]) == argmax_lowest(L_ca[dev_rows])))
        self._set_calibration(E_ca, L_ca, y_ca, split, a_ca, q_ca, d_ca)
        # localizer: support D_ca^vp, trained on D_knn (fit/dev halves) against f_tr^KNN
        loc_dist, loc_idx = self._localizer_neighbours(E_ca[knn_rows])
        eta, loc_training = fit_localizer(
            loc_dist,
            loc_idx,
            a_ca[self._vp_rows],
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
        loc_out = self._localizer_output(loc_dist[dev_local], loc_idx[dev_local])
        self.localizer_agreement_ = float(
            np.mean(argmax_lowest(loc_out) == argmax_lowest(a_ca[knn_rows[dev_local]]))
        )
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
        self,
        reference: KNNIndex,
        L_tr: FloatArray,
        y_tr: IntArray,
        tanh_ref: Float32Array,
        params: ApproximationParams,
    ) -> None:
        self._reference = reference
        self._logits_ref = L_tr
        self._y_ref = y_tr
        self._tanh_ref = tanh_ref
        pred = argmax_lowest(L_tr)
        self._pred_ref = pred
        self._correct_ref = pred == y_tr
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
        """Everything derived from the calibration rows; deterministic (also used by from_state)."""
        C = self.n_classes_
        self._E_ca, self._logits_ca, self._y_ca = E_ca, L_ca, y_ca
        self.calibration_split_ = split
        self.calibration_logits_knn_ = a_ca
        self.calibration_q_, self.calibration_d_ = q_ca, d_ca
        probs = _softmax(a_ca.copy())
        self._probs_ca = probs
        yhat = argmax_lowest(a_ca)
        used = split != SPLIT_KNN
        band_rows = used & (q_ca > 0) & (yhat == y_ca)
        if int(band_rows.sum()) < 2:
            msg = (
                "the band radius needs ≥ 2 calibration rows with q > 0 and a correct KNN prediction; "
                f"found {int(band_rows.sum())}"
            )
            raise ValueError(msg)
        self.s_hat_ = float(np.std(d_ca[band_rows], ddof=1))
        self.omega_ = self.band_delta * self.s_hat_
        mc = np.flatnonzero(split == SPLIT_MC)
        scores = 1.0 - probs[mc, y_ca[mc]]
        self._mc_windows = GroupedWindows(q_ca[mc] * C + y_ca[mc], d_ca[mc])
        self._mc_tree = RankTree(scores[self._mc_windows.order])
        vp = np.flatnonzero(split == SPLIT_VP)
        self._vp_rows = vp
        sets_vp, _ = self._admit_sets(probs[vp], yhat[vp], q_ca[vp], d_ca[vp])
        single = sets_vp.sum(axis=1) == 1
        self._vp_key = np.where(single, q_ca[vp] * C + yhat[vp], -1).astype(np.int64)
        self._vp_d = d_ca[vp]
        members = np.flatnonzero(single)
        self._vp_windows = GroupedWindows(self._vp_key[members], d_ca[vp][members])
        self._vp_counts = PrefixCounts(y_ca[vp][members][self._vp_windows.order], C)
        self._vp_index = KNNIndex(kind=self.index, seed=self.seed).fit(E_ca[vp])

    # ------------------------------------------------------------------------ features
    def _q_and_d(self, dist: FloatArray, idx: Int64Array, yhat: IntArray) -> tuple[IntArray, FloatArray]:
        """Eq. 4-5 from each row's neighbours (nearest first)."""
        match = (self._pred_ref[idx] == yhat[:, None]) & self._correct_ref[idx]
        q = np.where(match.all(axis=1), idx.shape[1], np.argmin(match, axis=1)).astype(np.intp)
        return q, dist[:, 0].copy()

    def _admit_sets(
        self, probs: FloatArray, yhat: IntArray, q: IntArray, d: FloatArray
    ) -> tuple[BoolArray, BoolArray]:
        """ADMIT sets (Alg. 2) and the κ-guard mask, from ``D_ca^mc``."""
        m, C = probs.shape
        lo, hi = d - self.omega_, d + self.omega_
        windows = [self._mc_windows.window(q * C + c, lo, hi) for c in range(C)]
        sizes = np.stack([stop - start for start, stop in windows], axis=1)
        guarded: BoolArray = np.asarray((sizes < self.kappa).any(axis=1))
        sets: BoolArray = np.zeros((m, C), dtype=bool)
        sets[guarded] = True
        open_rows = np.flatnonzero(~guarded)
        for c, (start, stop) in enumerate(windows):
            rows = open_rows[yhat[open_rows] != c]
            if rows.size == 0:
                continue
            n_c = sizes[rows, c]
            rank = np.ceil((n_c + 1) * (1.0 - self.alpha) - _SLACK).astype(np.int64)
            below = self._mc_tree.count_less(start[rows], stop[rows], 1.0 - probs[rows, c])
            sets[rows, c] = below <= rank - 1  # 1 − π_c ≤ s_(rank) ⇔ fewer than rank scores below it
        sets[np.arange(m), yhat] = True
        return sets, guarded

    def _localizer_neighbours(self, E: Float32Array) -> tuple[FloatArray, Int64Array]:
        """Distances to and indices of each row's localizer support rows (top-k, or all)."""
        n_vp = self._vp_rows.shape[0]
        if self.localizer_k is not None and self.localizer_k < n_vp:
            return self._vp_index.search(E, self.localizer_k)
        return self._vp_index.search(E, n_vp)

    def _localizer_output(self, dist: FloatArray, idx: Int64Array) -> FloatArray:
        return localizer_logits(self.localizer_eta_, dist, idx, self.calibration_logits_knn_[self._vp_rows])

    def _check_fitted(self) -> None:
        if not hasattr(self, "localizer_eta_"):
            msg = (
                "this VennAdmit is not fitted yet: call fit(train=(E, logits, y), calibration=(E, logits, y))"
            )
            raise NotFittedError(msg)

    # ---------------------------------------------------------------------------- predict
    def _check_inputs(self, E: Any, logits: Any) -> tuple[Float32Array, FloatArray]:
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
        """Share of rows where ``ŷ^KNN`` equals the model's argmax (paper Table 2's comparison)."""
        Ev, Lv = self._check_inputs(E, logits)
        return float(np.mean(argmax_lowest(self.knn_logits(Ev)) == argmax_lowest(Lv)))

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
        Ev, Lv = self._check_inputs(E, logits)
        use_weights = self.weighted if weighted is None else bool(weighted)
        only_qk = self.q_k_only if q_k_only is None else bool(q_k_only)
        dist, idx = self._reference.search(Ev, self.k)
        a = approximation_logits(self.approximation_, dist, idx, self._tanh_ref, self._y_ref)
        yhat = argmax_lowest(a)
        q, d = self._q_and_d(dist, idx, yhat)
        probs = _softmax(a.copy())
        sets, guarded = self._admit_sets(probs, yhat, q, d)
        venn = self._venn(Ev, sets, yhat, q, d, weighted=use_weights, q_k_only=only_qk)
        return VennAdmitResult(
            y_hat=yhat,
            q=q,
            d=d,
            sets=sets,
            guarded=guarded,
            admitted=venn[0],
            p_lower=venn[1],
            p_upper=venn[2],
            category_size=venn[3],
            weight=venn[4],
            probs=probs,
            logits_knn=a,
            y_model=argmax_lowest(Lv),
        )

    def _venn(
        self,
        E: Float32Array,
        sets: BoolArray,
        yhat: IntArray,
        q: IntArray,
        d: FloatArray,
        *,
        weighted: bool,
        q_k_only: bool,
    ) -> tuple[BoolArray, FloatArray, FloatArray, IntArray, FloatArray]:
        """Venn-ADMIT (Alg. 1, 3, 4) for the singleton rows: admitted, p̲, p̄, |T|, w."""
        m = sets.shape[0]
        C = self.n_classes_
        single = np.flatnonzero(sets.sum(axis=1) == 1)
        p_lower = np.full(m, np.nan)
        p_upper = np.full(m, np.nan)
        weight = np.full(m, np.nan)
        size = np.zeros(m, dtype=np.intp)
        admitted = np.zeros(m, dtype=bool)
        if single.size == 0:
            return admitted, p_lower, p_upper, size, weight
        key = q[single] * C + yhat[single]
        lo, hi = d[single] - self.omega_, d[single] + self.omega_
        start, stop = self._vp_windows.window(key, lo, hi)
        n_t = (stop - start).astype(np.float64)
        n_y = self._vp_counts.counts(start, stop)[np.arange(single.size), yhat[single]].astype(np.float64)
        w = self._test_point_weights(E[single], key, lo, hi) if weighted else np.ones(single.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            low = n_y / (n_t + w)
            up = np.where(np.isinf(w), 1.0, (n_y + w) / (n_t + w))
        ok = low >= (1.0 - self.alpha) - _SLACK
        if q_k_only:
            ok &= q[single] == self.k
        p_lower[single], p_upper[single], weight[single] = low, up, w
        size[single] = (stop - start).astype(np.intp)
        admitted[single] = ok
        return admitted, p_lower, p_upper, size, weight

    def _test_point_weights(
        self, E: Float32Array, key: Int64Array, lo: FloatArray, hi: FloatArray
    ) -> FloatArray:
        """``1/ψ'`` with ``ψ' = Σ_{j∈T} ψ_j`` (Eq. 9): ψ over the localizer support ``D_ca^vp``."""
        n_vp = self._vp_rows.shape[0]
        psi_sum = np.empty(E.shape[0], dtype=np.float64)
        if self.localizer_k is not None and self.localizer_k < n_vp:
            step = max(1, _DENSE_BLOCK // self.localizer_k)
            for begin in range(0, E.shape[0], step):
                rows = slice(begin, begin + step)
                dist, idx = self._vp_index.search(E[rows], self.localizer_k)
                member = (
                    (self._vp_key[idx] == key[rows, None])
                    & (self._vp_d[idx] >= lo[rows, None])
                    & (self._vp_d[idx] <= hi[rows, None])
                )
                psi = softmax_of_negative(dist, self.localizer_eta_)
                psi_sum[rows] = np.einsum("mk,mk->m", psi, member)
        else:
            support = self._E_ca[self._vp_rows]
            norms = np.einsum("nd,nd->n", support, support, dtype=np.float64)
            step = max(1, _DENSE_BLOCK // n_vp)
            for begin in range(0, E.shape[0], step):
                rows = slice(begin, begin + step)
                block = E[rows]
                sq = norms[None, :] + np.einsum("md,md->m", block, block, dtype=np.float64)[:, None]
                sq -= 2.0 * (block @ support.T)
                dist = np.sqrt(np.maximum(sq, 0.0))
                member = (self._vp_key[None, :] == key[rows, None]) & (self._vp_d >= lo[rows, None])
                member &= self._vp_d <= hi[rows, None]
                psi = softmax_of_negative(dist, self.localizer_eta_)
                psi_sum[rows] = np.einsum("mk,mk->m", psi, member)
        with np.errstate(divide="ignore"):
            out: FloatArray = 1.0 / psi_sum
        return np.maximum(out, 1.0)  # ψ' ≤ 1 up to rounding: the weight is in [1, ∞)

    def predict(self, E: Any, logits: Any) -> Any:
        """Per-row results as a polars DataFrame, one row per input.

        Columns: ``y_hat`` (ŷ^KNN), ``q``, ``d``, ``admit_set`` (list of class indices),
        ``admitted``, ``p_lower``, ``p_upper`` (NaN unless the ADMIT set is a singleton),
        ``category_size``.
        """
        import polars as pl
        import pyarrow as pa  # type: ignore[import-untyped]

        res = self.predict_arrays(E, logits)
        rows, cols = np.nonzero(res.sets)
        offsets = np.zeros(res.sets.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=res.sets.shape[0]), out=offsets[1:])
        sets = pl.from_arrow(
            pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(cols.astype(np.int64)))
        )
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
