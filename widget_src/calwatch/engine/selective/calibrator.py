"""Calibrated selective classification (paper 002; ALGORITHMS.md §6).

A *selector* decides, per row, whether to keep the model's prediction and confidence; the goal
is that the kept rows are well calibrated (002 Def. 4.1), at a coverage ``ξ`` the user picks.

- :class:`SelectiveCalibrator`: 002's method. A soft selector ``g̃ = σ(MLP(φ_meta))`` over the
  meta features of :mod:`calwatch.engine.selective.features`, trained with the regularised
  S-MMCE loss (Eq. 15, :mod:`calwatch.engine.selective.loss`) by Alg. 1: every step draws
  ``n_perturbations`` perturbed copies of the training rows
  (:mod:`calwatch.engine.selective.perturb`), measures each one's selective calibration error
  at coverage ``ξ``, and steps on the loss of the ``kappa`` worst.
- :class:`BaselineSelector`: 002 §5.3's baselines with the same thresholding: ``"full"`` (keep
  everything), ``"confidence"`` (``max p``), ``"isolation_forest"``, ``"one_class_svm"`` and
  ``"knn"`` (minus the mean distance to the nearest reference embeddings).

Both share the threshold of Eq. 16, ``τ̂ = sup{τ : mean(g̃ ≥ τ) ≥ ξ}``
(:func:`~calwatch.engine.metrics.calibration.coverage_threshold`): tuned on the fit rows at fit
time, or on any unlabelled rows later, e.g. each window of a stream (:meth:`tune`,
:meth:`tune_scores`, or ``select(..., tune_on=...)``). On the rows it is tuned on, the share
kept is always ``≥ ξ``; on new rows from the same distribution it is ``≥ ξ − ε`` with
probability ``≥ 1 − exp(−2nε²)`` (002 Prop. 4.8).

Per batch, the Monitor calls ``scores(P, embeddings=E)`` once and then
``select_scores(scores)`` (fixed threshold) or ``tune_scores(scores)`` followed by
``select_scores`` (threshold re-tuned on the batch): no Python loop over rows.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import check_labels, check_probabilities
from calwatch.engine.errors import NotFittedError
from calwatch.engine.metrics.calibration import (
    DEFAULT_COVERAGES,
    _binned_error,
    _reduce,
    _threshold,
    check_coverage,
    coverage_threshold,
    default_bins,
)
from calwatch.engine.selective.features import (
    FEATURE_NAMES,
    FeatureName,
    MetaFeatures,
    check_embeddings,
    limit_threads,
)
from calwatch.engine.selective.loss import KERNEL_WIDTH, make_selector_network, smmce_loss
from calwatch.engine.selective.perturb import (
    ClassPriorShift,
    CustomPerturbation,
    FeatureDropout,
    FeatureNoise,
    GroupResample,
    Perturbation,
    Rows,
    apply_transforms,
    check_perturbations,
    from_json,
    sample_weights,
)

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]
RankBy = Literal["coverage", "auc"]
BaselineName = Literal["full", "confidence", "isolation_forest", "one_class_svm", "knn"]

BASELINES: tuple[BaselineName, ...] = ("full", "confidence", "isolation_forest", "one_class_svm", "knn")
STATE_VERSION = 1
_SCORE_CHUNK = 65_536


def _check_int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        msg = f"{name} must be an integer ≥ {minimum}; got {value!r}"
        raise ValueError(msg)
    return int(value)


def _check_float(value: Any, name: str, lo: float, hi: float, *, lo_open: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        msg = f"{name} must be a number; got {value!r}"
        raise TypeError(msg)
    v = float(value)
    ok = (lo < v if lo_open else lo <= v) and v <= hi
    if not ok:
        bracket = "(" if lo_open else "["
        msg = f"{name} must be in {bracket}{lo}, {hi}]; got {value!r}"
        raise ValueError(msg)
    return v


def _group_codes(groups: Any, n: int) -> IntArray:
    arr = np.asarray(groups)
    if arr.ndim != 1 or arr.shape[0] != n:
        msg = f"groups must be a 1-D array with one entry per row ({n}); got shape {arr.shape}"
        raise ValueError(msg)
    _, codes = np.unique(arr, return_inverse=True)
    out: IntArray = codes.astype(np.intp)
    return out


class _Selector:
    """Shared lifecycle: inputs, threshold (Eq. 16), selection."""

    coverage: float
    n_threads: int | None
    threshold_: float
    n_classes_: int
    dims_: int | None

    def _check_fitted(self) -> None:
        if not hasattr(self, "threshold_"):
            msg = f"this {type(self).__name__} is not fitted yet: call fit(P, y, ...) first"
            raise NotFittedError(msg)

    def _inputs(self, P: Any, embeddings: Any, name: str = "P") -> tuple[FloatArray, Float32Array | None]:
        self._check_fitted()
        probs = check_probabilities(P, name, n_classes=self.n_classes_)
        if self.dims_ is None:
            return probs, None
        if embeddings is None:
            msg = f"embeddings are required: this selector was fitted with {self.dims_}-d embeddings"
            raise ValueError(msg)
        E = check_embeddings(embeddings, "embeddings", n_rows=probs.shape[0], dims=self.dims_)
        return probs, E

    def _scores(self, probs: FloatArray, E: Float32Array | None) -> FloatArray:
        raise NotImplementedError

    def _prepare(self) -> None:
        """Import what scoring needs before threads are limited (torch for the MLP)."""

    def scores(self, P: Any, *, embeddings: Any = None) -> FloatArray:
        """The selector's score per row (higher = keep first), float64.

        Parameters
        ----------
        P : array-like of shape (n, K)
            Model probabilities.
        embeddings : array-like of shape (n, d), optional
            Model embeddings; required when the selector was fitted with embeddings.

        Returns
        -------
        ndarray of shape (n,)
        """
        probs, E = self._inputs(P, embeddings)
        self._prepare()
        with limit_threads(self.n_threads):
            return self._scores(probs, E)

    def tune_scores(self, scores: Any, *, coverage: float | None = None) -> float:
        """Set ``threshold_`` from scores of unlabelled rows (Eq. 16) and return it. Cheap.

        Parameters
        ----------
        scores : array-like of shape (n,)
            Output of :meth:`scores` on the rows to tune on (e.g. the current stream window).
        coverage : float, optional
            A new target coverage ``ξ`` (stored in ``coverage``); default: keep the current one.
        """
        self._check_fitted()
        xi = self.coverage if coverage is None else check_coverage(coverage)
        s = np.asarray(scores, dtype=np.float64)
        if s.ndim != 1 or s.shape[0] == 0 or not np.isfinite(s).all():
            msg = f"scores must be a non-empty 1-D finite array; got shape {s.shape}"
            raise ValueError(msg)
        self.threshold_ = _threshold(s, xi)
        self.coverage = xi
        return self.threshold_

    def tune(self, P: Any, *, embeddings: Any = None, coverage: float | None = None) -> float:
        """Set ``threshold_`` from unlabelled rows (Eq. 16), optionally at a new ``coverage``."""
        return self.tune_scores(self.scores(P, embeddings=embeddings), coverage=coverage)

    def select_scores(self, scores: Any) -> BoolArray:
        """``scores ≥ threshold_``: the rows to keep."""
        self._check_fitted()
        mask: BoolArray = np.asarray(scores, dtype=np.float64) >= self.threshold_
        return mask

    def select(self, P: Any, *, embeddings: Any = None, tune_on: Any = None) -> BoolArray:
        """Which rows to keep (``True``) at the target coverage.

        Parameters
        ----------
        P : array-like of shape (n, K)
            Model probabilities.
        embeddings : array-like of shape (n, d), optional
            Model embeddings (when fitted with them).
        tune_on : None, "batch", array-like or tuple, optional
            Where the threshold comes from. ``None``: ``threshold_`` (the fit rows, or the last
            :meth:`tune`). ``"batch"``: these rows themselves (002 §5.2; coverage on them is
            then ``≥ coverage``). An array ``P_tune`` or a tuple ``(P_tune, E_tune)``: other
            unlabelled rows. ``threshold_`` is not changed; use :meth:`tune` for that.

        Returns
        -------
        ndarray of bool, shape (n,)
        """
        probs, E = self._inputs(P, embeddings)
        self._prepare()
        with limit_threads(self.n_threads):
            s = self._scores(probs, E)
        if tune_on is None:
            tau = self.threshold_
        elif isinstance(tune_on, str):
            if tune_on != "batch":
                msg = f"tune_on must be None, 'batch', P_tune or (P_tune, E_tune); got {tune_on!r}"
                raise ValueError(msg)
            tau = _threshold(s, self.coverage)
        else:
            P_t, E_t = tune_on if isinstance(tune_on, tuple) else (tune_on, None)
            probs_t, E_t = self._inputs(P_t, E_t, name="tune_on")
            with limit_threads(self.n_threads):
                tau = _threshold(self._scores(probs_t, E_t), self.coverage)
        mask: BoolArray = s >= tau
        return mask


# ======================================================================== baselines
class BaselineSelector(_Selector):
    """002 §5.3's baseline selectors, thresholded like the S-MMCE selector (Eq. 16).

    Parameters
    ----------
    method : {"full", "confidence", "isolation_forest", "one_class_svm", "knn"}
        ``"full"``: keep every row (constant score); ``"confidence"``: ``max p``;
        ``"isolation_forest"``, ``"one_class_svm"``: scikit-learn's ``score_samples`` of
        models fitted on the reference embeddings (higher = more normal); ``"knn"``: minus
        the mean distance to the ``n_neighbors`` nearest reference embeddings.
    coverage : float
        Target coverage ``ξ`` in ``(0, 1]``.
    n_neighbors, subsample, max_reference, max_dims
        As in :class:`~calwatch.engine.selective.features.MetaFeatures`.
    reference_fraction : float
        When embeddings but no reference are given to ``fit``, this share of the fit rows
        (seeded) becomes the reference and the threshold is tuned on the rest.
    n_threads : int or None
        Threads for BLAS, OpenMP (faiss) and torch while fitting and scoring (``None``: the
        libraries' defaults). One is fastest for these small matrices on a shared machine.
    seed : int
        Seed of subsamples and the isolation forest.

    Examples
    --------
    >>> P = np.array([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.5, 0.5]])
    >>> sel = BaselineSelector("confidence", coverage=0.5).fit(P)
    >>> sel.select(P).tolist()
    [True, False, True, False]
    """

    def __init__(
        self,
        method: BaselineName = "confidence",
        *,
        coverage: float = 0.8,
        n_neighbors: int = 10,
        subsample: int = 1000,
        max_reference: int = 10_000,
        max_dims: int = 32,
        reference_fraction: float = 0.3,
        n_threads: int | None = 1,
        seed: int = 0,
    ) -> None:
        if method not in BASELINES:
            msg = f"method must be one of {BASELINES}; got {method!r}"
            raise ValueError(msg)
        self.method: BaselineName = method
        self.coverage = check_coverage(coverage)
        self.n_neighbors = _check_int(n_neighbors, "n_neighbors", 1)
        self.subsample = _check_int(subsample, "subsample", 10)
        self.max_reference = _check_int(max_reference, "max_reference", 10)
        self.max_dims = _check_int(max_dims, "max_dims", 1)
        self.reference_fraction = _check_float(reference_fraction, "reference_fraction", 0.0, 0.9)
        self.n_threads = None if n_threads is None else _check_int(n_threads, "n_threads", 1)
        self.seed = _check_int(seed, "seed", 0)

    def __repr__(self) -> str:
        return f"BaselineSelector({self.method!r}, coverage={self.coverage!r}, seed={self.seed!r})"

    @property
    def needs_embeddings(self) -> bool:
        """Whether the method scores embeddings."""
        return self.method in ("isolation_forest", "one_class_svm", "knn")

    def fit(
        self, P: Any, y: Any = None, *, embeddings: Any = None, groups: Any = None, reference: Any = None
    ) -> BaselineSelector:
        """Fit the outlier model (if any) and tune ``threshold_`` on the fit rows.

        Parameters
        ----------
        P : array-like of shape (n, K)
            Model probabilities of the fit rows.
        y : array-like, optional
            Unused (baselines need no labels); accepted for a uniform call.
        embeddings : array-like of shape (n, d), optional
            Required by the outlier methods.
        groups : array-like, optional
            Unused; accepted for a uniform call.
        reference : array-like of shape (n_ref, d), optional
            Embeddings of the model's training rows (see ``reference_fraction`` when absent).

        Returns
        -------
        BaselineSelector
        """
        del y, groups
        with limit_threads(self.n_threads):
            return self._fit(P, embeddings, reference)

    def _fit(self, P: Any, embeddings: Any, reference: Any) -> BaselineSelector:
        probs = check_probabilities(P, "P")
        n, K = probs.shape
        E: Float32Array | None = None
        if self.needs_embeddings:
            if embeddings is None:
                msg = f"method {self.method!r} needs embeddings= (and ideally reference=)"
                raise ValueError(msg)
            E = check_embeddings(embeddings, "embeddings", n_rows=n)
            rows, ref = _reference_split(
                E, reference, self.reference_fraction, np.random.default_rng(self.seed)
            )
            probs, E = probs[rows], E[rows]
            self._meta = MetaFeatures(
                features=[self.method],
                n_neighbors=self.n_neighbors,
                subsample=self.subsample,
                max_reference=self.max_reference,
                max_dims=self.max_dims,
                seed=self.seed,
            ).fit(ref, K)
        self.n_classes_ = int(K)
        self.dims_ = None if E is None else int(E.shape[1])
        self.threshold_ = _threshold(self._scores(probs, E), self.coverage)
        return self

    def state(self) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
        """Plain arrays (the outlier model's reference rows, if any) and a JSON-able dict."""
        self._check_fitted()
        arrays: dict[str, npt.NDArray[Any]] = {}
        meta_info = None
        if self.needs_embeddings:
            arrays, meta_info = self._meta.state()
        info: dict[str, Any] = {
            "kind": "BaselineSelector",
            "version": STATE_VERSION,
            "params": {
                "method": self.method,
                "coverage": self.coverage,
                "n_neighbors": self.n_neighbors,
                "subsample": self.subsample,
                "max_reference": self.max_reference,
                "max_dims": self.max_dims,
                "reference_fraction": self.reference_fraction,
                "n_threads": self.n_threads,
                "seed": self.seed,
            },
            "meta": meta_info,
            "threshold": self.threshold_,
            "n_classes": self.n_classes_,
            "dims": self.dims_,
        }
        return arrays, info

    @classmethod
    def from_state(cls, arrays: dict[str, Any], info: dict[str, Any]) -> BaselineSelector:
        """Rebuild from :meth:`state` (outlier models refitted on the stored rows: same scores)."""
        if info.get("kind") != "BaselineSelector" or info.get("version") != STATE_VERSION:
            msg = (
                f"not a BaselineSelector state of version {STATE_VERSION}: "
                f"kind={info.get('kind')!r}, version={info.get('version')!r}"
            )
            raise ValueError(msg)
        out = cls(**info["params"])
        if info["meta"] is not None:
            out._meta = MetaFeatures.from_state(arrays, info["meta"])
        out.n_classes_ = int(info["n_classes"])
        out.dims_ = None if info["dims"] is None else int(info["dims"])
        out.threshold_ = float(info["threshold"])
        return out

    def _scores(self, probs: FloatArray, E: Float32Array | None) -> FloatArray:
        if self.method == "full":
            return np.zeros(probs.shape[0], dtype=np.float64)
        if self.method == "confidence":
            out: FloatArray = probs.max(axis=1)
            return out
        if E is None:  # pragma: no cover - _inputs requires embeddings for these methods
            msg = "embeddings are required"
            raise ValueError(msg)
        score = self._meta.outlier_score(self.method, E)
        return -score if self.method == "knn" else score


def _reference_split(
    E: Float32Array, reference: Any, fraction: float, rng: np.random.Generator
) -> tuple[IntArray, Float32Array]:
    """The fit rows to train/tune on and the reference embeddings (split off when absent)."""
    n = E.shape[0]
    if reference is not None:
        ref = check_embeddings(reference, "reference", dims=E.shape[1])
        return np.arange(n, dtype=np.intp), ref
    n_ref = round(fraction * n)
    if n_ref < 2 or n - n_ref < 2:
        msg = (
            f"no reference embeddings given and reference_fraction={fraction} of {n} rows leaves "
            "too few rows: pass reference= (the model's training embeddings)"
        )
        raise ValueError(msg)
    order = rng.permutation(n)
    return np.sort(order[n_ref:]).astype(np.intp), E[np.sort(order[:n_ref])]


# ======================================================================== S-MMCE
class SelectiveCalibrator(_Selector):
    """002's selective calibrator: an MLP selector trained with robust S-MMCE (Alg. 1).

    Parameters
    ----------
    coverage : float
        Target coverage ``ξ`` in ``(0, 1]``: used to rank perturbed datasets during training
        (``rank_by="coverage"``) and for the threshold.
    perturbations : list of Perturbation, optional
        The family ``T`` (:mod:`calwatch.engine.selective.perturb`). Default ``None``:
        :class:`ClassPriorShift`, plus :class:`GroupResample` when ``groups`` are given, plus
        :class:`FeatureNoise` and :class:`FeatureDropout` when embeddings *and* ``head`` are
        (without a head, noisy embeddings leave the probabilities as they were and only blur
        the outlier features: on 002's toy example this taught the selector to ignore them).
        ``[]``: train on the unperturbed rows only (bootstrap samples).
    kappa : int
        Step on the ``kappa`` worst of the ``n_perturbations`` datasets (002: 4).
    n_perturbations : int
        Perturbed datasets per step, ``m`` (002: 32).
    sample_size : int
        Rows per perturbed dataset, ``|D|`` (002: 1024).
    epochs, steps_per_epoch : int
        Training length (002: 5 epochs of ~1,560 steps; our default is far shorter, for CPUs).
    learning_rate : float
        Adam's learning rate.
    q, kernel_width : float
        Eq. 15's power and Laplacian kernel width (002: 2 and 0.2).
    lambda1, lambda2 : float, optional
        Eq. 15's weights; default ``|D|^{-1/2}`` and ``10⁻²|D|^{-1}`` (App. B.2).
    n_variants : int
        Transformed copies of the training rows built at fit time when the family holds
        transforms (each a random chain of them); a perturbed dataset starts from the clean
        rows or one of these.
    dev_fraction : float
        Share of the fit rows held out (seeded) for early stopping; ``0`` disables it.
    patience : int
        Stop after this many epochs without a better dev criterion; the best epoch is kept.
    rank_by : {"coverage", "auc"}
        The selective calibration error that ranks datasets (κ-worst) and drives early
        stopping: ℓ2 at coverage ``ξ`` (Alg. 1) or its AUC over ``ξ ∈ [0.05, 1]`` (002's
        footnote 4, for a selector shared across coverages).
    head : callable, optional
        The model's map from embeddings to probabilities; when given, transformed embeddings
        get recomputed probabilities (see :mod:`~calwatch.engine.selective.perturb`).
    features : sequence of str
        Meta features (:data:`~calwatch.engine.selective.features.FEATURE_NAMES`).
    max_classes, n_neighbors, subsample, max_reference, max_dims
        As in :class:`~calwatch.engine.selective.features.MetaFeatures`.
    reference_fraction : float
        When embeddings but no reference are given to ``fit``, this share of the fit rows
        (seeded) becomes the reference and is not trained on.
    progress : bool
        Show a tqdm progress bar over the training steps.
    n_threads : int or None
        Threads for torch, BLAS and OpenMP (faiss) while fitting and scoring (``None``: the
        libraries' defaults). One is fastest for these small matrices on a shared machine.
    seed : int
        Seed of every random step (splits, perturbations, network initialisation).

    Attributes
    ----------
    threshold_ : float
        Current threshold ``τ̂`` (Eq. 16).
    feature_names_ : list of str
        Columns of ``φ_meta``.
    history_ : list of dict
        Per epoch: ``epoch``, ``train_loss`` (mean loss of the κ-worst), ``dev`` (criterion).
    best_epoch_ : int
        The epoch whose weights were kept.
    n_classes_ : int
        Classes of the model.
    dims_ : int or None
        Embedding dimension (``None``: fitted without embeddings).

    Notes
    -----
    Training cost per step: a forward and backward pass over ``n_perturbations ×
    sample_size`` rows and ``kappa`` kernels of ``sample_size²`` entries. Meta features are
    computed once per variant at fit time. Interrupting ``fit`` leaves the object as it was.

    What to expect (``benchmarks/selective_table.py``; 4,000 fit rows, 25 trials): on UCI
    Adult (network trained on men, judged on women) the ℓ2 selective calibration error AUC is
    .0136 against .0247 for keeping every row and .025-.031 for the outlier baselines, but
    ``max p`` (the confidence baseline) does better still (.0103); on NYC flights
    (January-March → June-July) .0258 against .0301 (full) and .0249 (confidence). S-MMCE_u
    bounds calibration by ``|y − r|^q``, noise included, so it too prefers confident rows.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> p1 = rng.uniform(size=400)
    >>> y = (rng.uniform(size=400) < p1).astype(int)
    >>> P = np.column_stack([1 - p1, p1])
    >>> s = SelectiveCalibrator(coverage=0.5, epochs=1, steps_per_epoch=3, sample_size=64,
    ...                         progress=False).fit(P, y)
    >>> float(s.select(P).mean()) >= 0.5
    True
    """

    def __init__(
        self,
        *,
        coverage: float = 0.8,
        perturbations: Any = None,
        kappa: int = 4,
        n_perturbations: int = 16,
        sample_size: int = 512,
        epochs: int = 5,
        steps_per_epoch: int = 50,
        learning_rate: float = 1e-3,
        q: float = 2.0,
        kernel_width: float = KERNEL_WIDTH,
        lambda1: float | None = None,
        lambda2: float | None = None,
        n_variants: int = 8,
        dev_fraction: float = 0.2,
        patience: int = 2,
        rank_by: RankBy = "coverage",
        head: Callable[[Float32Array], Any] | None = None,
        features: Any = FEATURE_NAMES,
        max_classes: int = 10,
        n_neighbors: int = 10,
        subsample: int = 1000,
        max_reference: int = 10_000,
        max_dims: int = 32,
        reference_fraction: float = 0.3,
        progress: bool = True,
        n_threads: int | None = 1,
        seed: int = 0,
    ) -> None:
        self.coverage = check_coverage(coverage)
        self.perturbations: tuple[Perturbation, ...] | None = (
            None if perturbations is None else check_perturbations(perturbations)
        )
        self.n_perturbations = _check_int(n_perturbations, "n_perturbations", 1)
        self.kappa = _check_int(kappa, "kappa", 1)
        if self.kappa > self.n_perturbations:
            msg = f"kappa ({kappa}) cannot exceed n_perturbations ({n_perturbations})"
            raise ValueError(msg)
        self.sample_size = _check_int(sample_size, "sample_size", 2)
        self.epochs = _check_int(epochs, "epochs", 1)
        self.steps_per_epoch = _check_int(steps_per_epoch, "steps_per_epoch", 1)
        self.learning_rate = _check_float(learning_rate, "learning_rate", 0.0, 10.0)
        self.q = _check_float(q, "q", 0.0, 100.0)
        self.kernel_width = _check_float(kernel_width, "kernel_width", 0.0, 1e6)
        self.lambda1 = None if lambda1 is None else _check_float(lambda1, "lambda1", 0.0, 1e12, lo_open=False)
        self.lambda2 = None if lambda2 is None else _check_float(lambda2, "lambda2", 0.0, 1e12, lo_open=False)
        self.n_variants = _check_int(n_variants, "n_variants", 1)
        self.dev_fraction = _check_float(dev_fraction, "dev_fraction", 0.0, 0.5, lo_open=False)
        self.patience = _check_int(patience, "patience", 1)
        if rank_by not in ("coverage", "auc"):
            msg = f"rank_by must be 'coverage' or 'auc'; got {rank_by!r}"
            raise ValueError(msg)
        self.rank_by: RankBy = rank_by
        unchecked: Any = head  # annotated callable, but user input: check at run time
        if unchecked is not None and not callable(unchecked):
            msg = f"head must be a callable mapping embeddings to probabilities; got {head!r}"
            raise TypeError(msg)
        self.head = head
        # validated by MetaFeatures itself
        self._meta_options: dict[str, Any] = {
            "features": tuple(features),
            "max_classes": max_classes,
            "n_neighbors": n_neighbors,
            "subsample": subsample,
            "max_reference": max_reference,
            "max_dims": max_dims,
            "seed": _check_int(seed, "seed", 0),
        }
        MetaFeatures(**self._meta_options)
        self.reference_fraction = _check_float(reference_fraction, "reference_fraction", 0.0, 0.9)
        self.progress = bool(progress)
        self.n_threads = None if n_threads is None else _check_int(n_threads, "n_threads", 1)
        self.seed = int(seed)

    def __repr__(self) -> str:
        return (
            f"SelectiveCalibrator(coverage={self.coverage!r}, kappa={self.kappa}, "
            f"n_perturbations={self.n_perturbations}, sample_size={self.sample_size}, "
            f"epochs={self.epochs}, steps_per_epoch={self.steps_per_epoch}, "
            f"rank_by={self.rank_by!r}, seed={self.seed})"
        )

    # ------------------------------------------------------------------ fit
    def _family(self, has_groups: bool, has_embeddings: bool) -> tuple[Perturbation, ...]:
        if self.perturbations is not None:
            return self.perturbations
        family: list[Perturbation] = [ClassPriorShift()]
        if has_groups:
            family.append(GroupResample())
        if has_embeddings and self.head is not None:
            family += [FeatureNoise(), FeatureDropout()]
        return tuple(family)

    def fit(
        self, P: Any, y: Any, *, embeddings: Any = None, groups: Any = None, reference: Any = None
    ) -> SelectiveCalibrator:
        """Train the selector on labelled rows (Alg. 1) and tune ``threshold_`` on them.

        Parameters
        ----------
        P : array-like of shape (n, K)
            Model probabilities of rows the model was not trained on.
        y : array-like of shape (n,)
            Their true classes.
        embeddings : array-like of shape (n, d), optional
            Their embeddings (e.g. the model's last hidden layer).
        groups : array-like of shape (n,), optional
            A group per row (any hashable values), for :class:`GroupResample`.
        reference : array-like of shape (n_ref, d), optional
            Embeddings of the model's training rows; the outlier features compare against
            them. When absent, ``reference_fraction`` of the fit rows is split off instead.

        Returns
        -------
        SelectiveCalibrator
            ``self``, fitted.
        """
        self._prepare()
        with limit_threads(self.n_threads):
            return self._fit(P, y, embeddings, groups, reference)

    def _fit(self, P: Any, y: Any, embeddings: Any, groups: Any, reference: Any) -> SelectiveCalibrator:
        import torch
        from tqdm.auto import tqdm

        probs = check_probabilities(P, "P")
        n, K = probs.shape
        labels = check_labels(y, K, "y", n_rows=n)
        E = None if embeddings is None else check_embeddings(embeddings, "embeddings", n_rows=n)
        codes = None if groups is None else _group_codes(groups, n)
        if reference is not None and E is None:
            msg = "reference= needs embeddings= too (the outlier features compare the two)"
            raise ValueError(msg)
        rng = np.random.default_rng(self.seed)
        family = self._family(codes is not None, E is not None)
        if codes is None and any(isinstance(p, GroupResample) for p in family):
            msg = "GroupResample is in perturbations but fit got no groups="
            raise ValueError(msg)
        if E is None and any(isinstance(p, FeatureNoise | FeatureDropout) for p in family):
            msg = "FeatureNoise/FeatureDropout are in perturbations but fit got no embeddings="
            raise ValueError(msg)

        meta = MetaFeatures(**self._meta_options)
        if E is not None:
            rows_idx, ref = _reference_split(E, reference, self.reference_fraction, rng)
            meta.fit(ref, K)
        else:
            rows_idx = np.arange(n, dtype=np.intp)
            meta.fit(None, K)
        clean = Rows(
            probs[rows_idx],
            labels[rows_idx],
            None if E is None else E[rows_idx],
            None if codes is None else np.unique(codes[rows_idx], return_inverse=True)[1].astype(np.intp),
        )
        n_fit = len(clean)
        if n_fit < 4:
            msg = f"fit needs at least 4 rows to train on; got {n_fit}"
            raise ValueError(msg)

        # variants: the clean rows and transformed copies, with their meta features
        transforms = [p for p in family if p.kind == "transform"]
        reweightings = [p for p in family if p.kind == "weights"]
        variant_rows = [clean]
        if transforms:
            variant_rows += [
                apply_transforms(clean, transforms, rng, self.head) for _ in range(self.n_variants)
            ]
        feats = [meta.transform(v.probs, v.embeddings) for v in variant_rows]
        reduced = [_reduce(v.probs, v.labels, "auto") for v in variant_rows]

        # train/dev split and standardisation on the clean training rows
        order = rng.permutation(n_fit)
        n_dev = round(self.dev_fraction * n_fit)
        dev_idx, train_idx = np.sort(order[:n_dev]), np.sort(order[n_dev:])
        mean = feats[0][train_idx].mean(axis=0)
        scale = feats[0][train_idx].std(axis=0)
        scale = np.where(scale > 1e-12, scale, 1.0)
        F = np.stack([(f - mean) / scale for f in feats]).astype(np.float32)  # (V+1, n_fit, d)
        R = np.stack([r for r, _ in reduced])
        Y = np.stack([o for _, o in reduced])

        def subset(idx: IntArray) -> Rows:
            return Rows(
                clean.probs[idx],
                clean.labels[idx],
                None if clean.embeddings is None else clean.embeddings[idx],
                None if clean.groups is None else clean.groups[idx],
            )

        def draw(idx: IntArray, sub: Rows, gen: np.random.Generator) -> tuple[int, IntArray]:
            variant = int(gen.integers(len(variant_rows)))
            w = sample_weights(sub, reweightings, gen)
            p = None if w is None else w / w.sum()
            return variant, idx[gen.choice(idx.shape[0], size=self.sample_size, replace=True, p=p)]

        train_rows = subset(train_idx)
        dev_draws: list[tuple[int, IntArray]] = []
        if n_dev >= 2:
            dev_rng = np.random.default_rng([self.seed, 1])
            dev_rows = subset(dev_idx)
            dev_draws = [draw(dev_idx, dev_rows, dev_rng) for _ in range(max(2 * self.n_perturbations, 32))]

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            net = make_selector_network(F.shape[2])
        optimiser = torch.optim.Adam(net.parameters(), lr=self.learning_rate)
        best_state = copy.deepcopy(net.state_dict())
        best_dev, best_epoch, waited = np.inf, 0, 0
        history: list[dict[str, float]] = []
        total = self.epochs * self.steps_per_epoch
        with tqdm(total=total, desc="S-MMCE selector", disable=not self.progress, leave=False) as bar:
            for epoch in range(1, self.epochs + 1):
                net.train()
                losses = []
                for _ in range(self.steps_per_epoch):
                    draws = [draw(train_idx, train_rows, rng) for _ in range(self.n_perturbations)]
                    x = torch.from_numpy(np.stack([F[v, i] for v, i in draws]))
                    r = np.stack([R[v, i] for v, i in draws])
                    o = np.stack([Y[v, i] for v, i in draws])
                    logits = net(x).squeeze(-1)
                    errors = self._criteria(r, o, logits.detach().numpy().astype(np.float64))
                    worst = np.argsort(errors, kind="stable")[-self.kappa :]
                    loss = smmce_loss(
                        torch.from_numpy(r[worst].astype(np.float32)),
                        torch.from_numpy(o[worst].astype(np.float32)),
                        logits[torch.from_numpy(worst)],
                        q=self.q,
                        width=self.kernel_width,
                        lambda1=self.lambda1,
                        lambda2=self.lambda2,
                    ).mean()
                    optimiser.zero_grad()
                    loss.backward()
                    optimiser.step()
                    losses.append(float(loss.detach()))
                    bar.update(1)
                dev = self._dev_criterion(net, F, R, Y, dev_draws) if dev_draws else float("nan")
                history.append({"epoch": epoch, "train_loss": float(np.mean(losses)), "dev": dev})
                bar.set_postfix(loss=f"{np.mean(losses):.4g}", dev=f"{dev:.4g}")
                if not dev_draws or dev < best_dev:
                    best_dev, best_epoch, waited = dev, epoch, 0
                    best_state = copy.deepcopy(net.state_dict())
                else:
                    waited += 1
                    if waited >= self.patience:
                        break
        net.load_state_dict(best_state)
        net.eval()

        # commit: nothing above touched self, so an interrupted fit leaves it as it was
        self._meta = meta
        self._net = net
        self.feature_mean_ = mean
        self.feature_scale_ = scale
        self.feature_names_ = list(meta.names_)
        self.history_ = history
        self.best_epoch_ = best_epoch
        self.n_classes_ = int(K)
        self.dims_ = None if E is None else int(E.shape[1])
        self.family_ = family
        self.threshold_ = _threshold(self._scores(clean.probs, clean.embeddings), self.coverage)
        return self

    def _criteria(self, r: FloatArray, o: FloatArray, g: FloatArray) -> FloatArray:
        """Selective ℓ2 calibration error of each dataset (rows of r, o, g) at ξ or as an AUC."""
        out = np.empty(r.shape[0])
        grid = [self.coverage] if self.rank_by == "coverage" else DEFAULT_COVERAGES.tolist()
        for b in range(r.shape[0]):
            values = []
            for xi in grid:
                kept = g[b] >= _threshold(g[b], xi)
                values.append(_binned_error(r[b][kept], o[b][kept], "l2", default_bins(int(kept.sum()))))
            if self.rank_by == "coverage":
                out[b] = values[0]
            else:
                x = np.asarray(grid)
                v = np.asarray(values)
                out[b] = float(np.sum(np.diff(x) * (v[1:] + v[:-1]) / 2.0))
        return out

    def _dev_criterion(
        self, net: Any, F: Float32Array, R: FloatArray, Y: FloatArray, draws: list[tuple[int, IntArray]]
    ) -> float:
        """Mean criterion of the worst ``kappa/n_perturbations`` share of the dev datasets."""
        import torch

        net.eval()
        with torch.no_grad():
            x = torch.from_numpy(np.stack([F[v, i] for v, i in draws]))
            g = net(x).squeeze(-1).numpy().astype(np.float64)
        errors = self._criteria(
            np.stack([R[v, i] for v, i in draws]), np.stack([Y[v, i] for v, i in draws]), g
        )
        k = max(1, round(len(draws) * self.kappa / self.n_perturbations))
        return float(np.sort(errors)[-k:].mean())

    # ------------------------------------------------------------------ scores
    def _prepare(self) -> None:
        import torch  # noqa: F401 - imported before limit_threads, so that its threads are limited

    def features(self, P: Any, *, embeddings: Any = None) -> FloatArray:
        """The standardised meta features ``φ_meta`` the network sees, ``(n, len(feature_names_))``."""
        probs, E = self._inputs(P, embeddings)
        return self._features(probs, E)

    def _features(self, probs: FloatArray, E: Float32Array | None) -> FloatArray:
        out: FloatArray = (self._meta.transform(probs, E) - self.feature_mean_) / self.feature_scale_
        return out

    def _scores(self, probs: FloatArray, E: Float32Array | None) -> FloatArray:
        import torch

        out = np.empty(probs.shape[0], dtype=np.float64)
        with torch.no_grad():
            for start in range(0, probs.shape[0], _SCORE_CHUNK):
                stop = start + _SCORE_CHUNK
                x = torch.from_numpy(
                    self._features(probs[start:stop], None if E is None else E[start:stop]).astype(np.float32)
                )
                out[start:stop] = torch.sigmoid(self._net(x).squeeze(-1)).numpy()
        return out

    # ------------------------------------------------------------------ state
    def state(self) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
        """The fitted selector as plain arrays and a JSON-able dict (no pickle).

        Returns
        -------
        arrays : dict of str to ndarray
            ``net/<parameter>`` (float32 weights), ``feature_mean``, ``feature_scale`` and
            ``meta/<name>`` (the meta features' projection and float32 reference rows).
        info : dict
            Options, threshold, history, the meta features' options and the built-in
            perturbations (user callables and ``head`` are recorded by ``repr`` only: they are
            needed for training, not for scoring).

        Notes
        -----
        Everything scoring needs is stored. The isolation forest, one-class SVM and LOF are
        refitted by :meth:`from_state` on the stored reference rows with the stored seed:
        identical scores under the same scikit-learn version (recorded in ``info``).
        """
        self._check_fitted()
        meta_arrays, meta_info = self._meta.state()
        arrays: dict[str, npt.NDArray[Any]] = {
            f"net/{k}": v.detach().numpy().copy() for k, v in self._net.state_dict().items()
        }
        arrays["feature_mean"] = self.feature_mean_.copy()
        arrays["feature_scale"] = self.feature_scale_.copy()
        arrays.update({f"meta/{k}": v for k, v in meta_arrays.items()})
        params = {
            "coverage": self.coverage,
            "kappa": self.kappa,
            "n_perturbations": self.n_perturbations,
            "sample_size": self.sample_size,
            "epochs": self.epochs,
            "steps_per_epoch": self.steps_per_epoch,
            "learning_rate": self.learning_rate,
            "q": self.q,
            "kernel_width": self.kernel_width,
            "lambda1": self.lambda1,
            "lambda2": self.lambda2,
            "n_variants": self.n_variants,
            "dev_fraction": self.dev_fraction,
            "patience": self.patience,
            "rank_by": self.rank_by,
            "reference_fraction": self.reference_fraction,
            "progress": self.progress,
            "n_threads": self.n_threads,
            "seed": self.seed,
        }
        info: dict[str, Any] = {
            "kind": "SelectiveCalibrator",
            "version": STATE_VERSION,
            "params": params,
            "meta": meta_info,
            "perturbations": [p.to_json() for p in self.family_],
            "head": None if self.head is None else repr(self.head),
            "threshold": self.threshold_,
            "n_classes": self.n_classes_,
            "dims": self.dims_,
            "feature_names": self.feature_names_,
            "history": self.history_,
            "best_epoch": self.best_epoch_,
        }
        return arrays, info

    @classmethod
    def from_state(cls, arrays: dict[str, Any], info: dict[str, Any]) -> SelectiveCalibrator:
        """Rebuild a fitted selector from :meth:`state`; it scores exactly as the original.

        Raises
        ------
        ValueError
            ``info`` is not a state of this class and version, or arrays are missing.
        """
        import torch

        if info.get("kind") != "SelectiveCalibrator" or info.get("version") != STATE_VERSION:
            msg = (
                f"not a SelectiveCalibrator state of version {STATE_VERSION}: "
                f"kind={info.get('kind')!r}, version={info.get('version')!r}"
            )
            raise ValueError(msg)
        missing = {"feature_mean", "feature_scale"} - set(arrays)
        if missing:
            msg = f"state arrays are missing {sorted(missing)}"
            raise ValueError(msg)
        family = [p for p in (from_json(d) for d in info["perturbations"]) if p is not None]
        meta_params = info["meta"]["params"]
        out = cls(
            perturbations=family, **info["params"], **{k: v for k, v in meta_params.items() if k != "seed"}
        )
        meta = MetaFeatures.from_state(
            {k.removeprefix("meta/"): v for k, v in arrays.items() if k.startswith("meta/")}, info["meta"]
        )
        mean = np.asarray(arrays["feature_mean"], dtype=np.float64)
        net = make_selector_network(mean.shape[0])
        weights = {
            k.removeprefix("net/"): torch.from_numpy(np.asarray(v))
            for k, v in arrays.items()
            if k.startswith("net/")
        }
        net.load_state_dict(weights)
        net.eval()
        out._meta = meta
        out._net = net
        out.feature_mean_ = mean
        out.feature_scale_ = np.asarray(arrays["feature_scale"], dtype=np.float64)
        out.feature_names_ = list(info["feature_names"])
        out.history_ = list(info["history"])
        out.best_epoch_ = int(info["best_epoch"])
        out.n_classes_ = int(info["n_classes"])
        out.dims_ = None if info["dims"] is None else int(info["dims"])
        out.family_ = tuple(family)
        out.threshold_ = float(info["threshold"])
        return out


__all__ = [
    "BASELINES",
    "FEATURE_NAMES",
    "BaselineSelector",
    "ClassPriorShift",
    "CustomPerturbation",
    "FeatureDropout",
    "FeatureName",
    "FeatureNoise",
    "GroupResample",
    "MetaFeatures",
    "Perturbation",
    "Rows",
    "SelectiveCalibrator",
    "coverage_threshold",
]
