"""Calibrated selective classification: the two selectors (paper 002; ALGORITHMS.md §6).

This module defines the selectors a monitor holds, their options, ``fit`` and saved state. A
*selector* decides, per row, whether to keep the model's prediction and confidence; the goal
is that the kept rows are well calibrated (002 Def. 4.1), at a coverage ``ξ`` the user picks.

- :class:`SelectiveCalibrator`: 002's method. A soft selector ``g̃ = σ(MLP(φ_meta))`` over the
  meta features of :mod:`calwatch.engine.selective.features`, trained with the regularised
  S-MMCE loss (Eq. 15, :mod:`calwatch.engine.selective.loss`) by Alg. 1
  (:mod:`calwatch.engine.selective.training`): every step draws ``n_perturbations`` perturbed
  copies of the training rows (:mod:`calwatch.engine.selective.perturb`), measures each one's
  selective calibration error at coverage ``ξ``, and steps on the loss of the ``kappa`` worst.
- :class:`BaselineSelector`: 002 §5.3's baselines with the same thresholding: ``"full"`` (keep
  everything), ``"confidence"`` (``max p``), ``"isolation_forest"``, ``"one_class_svm"`` and
  ``"knn"`` (minus the mean distance to the nearest reference embeddings).

Both share the threshold of Eq. 16, ``τ̂ = sup{τ : mean(g̃ ≥ τ) ≥ ξ}``
(:func:`~calwatch.engine.metrics.calibration.coverage_threshold`; their common lifecycle is in
:mod:`calwatch.engine.selective.selector`): tuned on the fit rows at fit time, or on any
unlabelled rows later, e.g. each window of a stream (:meth:`tune`, :meth:`tune_scores`, or
``select(..., tune_on=...)``). On the rows it is tuned on, the share kept is always ``≥ ξ``; on
new rows from the same distribution it is ``≥ ξ − ε`` with probability ``≥ 1 − exp(−2nε²)``
(002 Prop. 4.8).

Per batch, the Monitor calls ``scores(P, embeddings=E)`` once and then
``select_scores(scores)`` (fixed threshold) or ``tune_scores(scores)`` followed by
``select_scores`` (threshold re-tuned on the batch): no Python loop over rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import check_labels, check_probabilities
from calwatch.engine.metrics.calibration import _threshold, check_coverage, coverage_threshold
from calwatch.engine.selective.features import (
    FEATURE_NAMES,
    FeatureName,
    MetaFeatures,
    _check_int,
    check_embeddings,
    limit_threads,
)
from calwatch.engine.selective.loss import KERNEL_WIDTH, make_selector_network
from calwatch.engine.selective.perturb import (
    ClassPriorShift,
    CustomPerturbation,
    FeatureDropout,
    FeatureNoise,
    GroupResample,
    Perturbation,
    Rows,
    check_perturbations,
    from_json,
)
from calwatch.engine.selective.selector import _check_float, _reference_split, _Selector
from calwatch.engine.selective.training import RankBy, _group_codes, train_selector

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
BaselineName = Literal["full", "confidence", "isolation_forest", "one_class_svm", "knn"]

BASELINES: tuple[BaselineName, ...] = ("full", "confidence", "isolation_forest", "one_class_svm", "knn")
STATE_VERSION = 1
_SCORE_CHUNK = 65_536


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

        net, mean, scale, history, best_epoch = train_selector(self, clean, family, meta, rng)

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
