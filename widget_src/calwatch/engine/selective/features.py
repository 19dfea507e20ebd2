"""Meta features ``φ_meta`` of the selective calibrator's selector (paper 002 §4.5; ALGORITHMS.md §6).

:class:`MetaFeatures` turns a model's probabilities and (optionally) embeddings into a small
fixed feature vector per row:

- from the probabilities: ``confidence`` (``max p``), ``predicted_class`` (one-hot ``ŷ``),
  ``entropy`` (``−Σ p log p``) and ``distribution`` (``p`` itself); the one-hot class and the
  distribution are dropped automatically when ``K > max_classes`` (002: "to avoid
  over-fitting" on ImageNet);
- from the embeddings, compared with *reference* embeddings (the model's training rows):
  ``kde`` (Gaussian kernel density, log), ``isolation_forest``, ``one_class_svm`` and ``lof``
  (scikit-learn's ``score_samples``: higher is more normal) and ``knn`` (mean Euclidean
  distance to the ``n_neighbors`` nearest reference rows, exact:
  :class:`calwatch.engine.knn.KNNIndex`, faiss ``IndexFlatL2``).

Embeddings are first standardised with the reference's mean and standard deviation and, when
they have more than ``max_dims`` dimensions, projected on the reference's first ``max_dims``
principal components and whitened (002 projects ImageNet's 2048-d features to 128 by SVD). All
outlier models work in that space, stored as float32.

Cost (n reference rows, q queries, d ≤ ``max_dims``): the kNN distance uses up to
``max_reference`` rows (a seeded subsample beyond), O(q·n·d); the isolation forest is fitted on
the same rows (100 trees of 256 samples, linear). The *super-linear* scorers use a seeded
subsample of ``subsample`` reference rows: the KDE (O(q·s·d) to score), the one-class SVM
(O(s²)-O(s³) to fit) and LOF (O(s²) to fit).

Everything the features need is plain arrays: :meth:`MetaFeatures.state` returns them and
:meth:`MetaFeatures.from_state` refits the scikit-learn models on the stored float32 reference
rows with the stored seed. scikit-learn's fits are deterministic given data and seed, so the
rebuilt features are identical under the same scikit-learn version (the version is recorded).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.intp]
FeatureName = Literal[
    "confidence",
    "predicted_class",
    "entropy",
    "distribution",
    "kde",
    "isolation_forest",
    "one_class_svm",
    "lof",
    "knn",
]

#: Every meta feature, in the order of the feature matrix.
FEATURE_NAMES: tuple[FeatureName, ...] = (
    "confidence",
    "predicted_class",
    "entropy",
    "distribution",
    "kde",
    "isolation_forest",
    "one_class_svm",
    "lof",
    "knn",
)
#: Features computed from the probabilities alone.
PROBABILITY_FEATURES: tuple[FeatureName, ...] = ("confidence", "predicted_class", "entropy", "distribution")
#: Features computed from the embeddings against the reference.
EMBEDDING_FEATURES: tuple[FeatureName, ...] = ("kde", "isolation_forest", "one_class_svm", "lof", "knn")
#: Features dropped when the number of classes exceeds ``max_classes``.
PER_CLASS_FEATURES: tuple[FeatureName, ...] = ("predicted_class", "distribution")
STATE_VERSION = 1
_KDE_CHUNK = 4096


def check_embeddings(
    E: Any, name: str, *, n_rows: int | None = None, dims: int | None = None
) -> Float32Array:
    """:func:`calwatch.engine.knn.check_embeddings` (float32, finite, 2-D), plus the row count."""
    from calwatch.engine.knn import check_embeddings as check_2d

    out = check_2d(E, name, dim=dims)
    if n_rows is not None and out.shape[0] != n_rows:
        msg = f"{name} has {out.shape[0]} rows but P has {n_rows}"
        raise ValueError(msg)
    return out


def _check_int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        msg = f"{name} must be an integer ≥ {minimum}; got {value!r}"
        raise ValueError(msg)
    return int(value)


@contextmanager
def limit_threads(n_threads: int | None) -> Iterator[None]:
    """Run the block with at most ``n_threads`` threads in BLAS, OpenMP (faiss) and torch.

    ``None`` changes nothing. torch is limited only when it is already imported (import it
    before entering the block when the block uses it). The previous settings are restored on
    exit. The selector's matrices are small: on a shared 2-core machine one thread was 7×
    faster than two for a training step (56 vs 403 ms, load average 8).
    """
    if n_threads is None:
        yield
        return
    import sys

    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

    torch: Any = sys.modules.get("torch")  # only if already imported: importing it costs seconds
    previous = None if torch is None else torch.get_num_threads()
    if torch is not None:
        torch.set_num_threads(n_threads)
    try:
        with threadpool_limits(limits=n_threads):
            yield
    finally:
        if torch is not None and previous is not None:
            torch.set_num_threads(previous)


def gaussian_kde_log_density(queries: FloatArray, sample: FloatArray, bandwidth: float) -> FloatArray:
    """Log of the Gaussian kernel density of ``sample`` at each query (exact, chunked).

    ``log (1/s) Σ_j N(x; r_j, h² I)`` by a log-sum-exp over every sample row, in O(q·s·d)
    with a bounded memory of 4096 × s. scikit-learn's
    ``KernelDensity(kernel="gaussian", bandwidth=h).score_samples`` gives the same numbers
    (to ~3e-7 relative) where the density is not tiny, but its tree bounds lose accuracy far
    from the sample (−74 instead of −92 measured), and its tree search gains nothing in
    these dimensions; hence this exact version.

    Examples
    --------
    >>> float(gaussian_kde_log_density(np.zeros((1, 1)), np.zeros((1, 1)), 1.0)[0])  # log N(0; 0, 1)
    -0.9189385332046727
    """
    s, d = sample.shape
    norm = math.log(s) + 0.5 * d * math.log(2.0 * math.pi * bandwidth * bandwidth)
    sample_sq = np.einsum("ij,ij->i", sample, sample)
    out = np.empty(queries.shape[0], dtype=np.float64)
    for start in range(0, queries.shape[0], _KDE_CHUNK):
        block = queries[start : start + _KDE_CHUNK]
        d2 = np.einsum("ij,ij->i", block, block)[:, None] + sample_sq[None, :] - 2.0 * (block @ sample.T)
        np.maximum(d2, 0.0, out=d2)
        d2 *= -1.0 / (2.0 * bandwidth * bandwidth)  # the exponent; logsumexp by hand (one pass less)
        top = d2.max(axis=1)
        d2 -= top[:, None]
        np.exp(d2, out=d2)
        out[start : start + block.shape[0]] = np.log(d2.sum(axis=1)) + top - norm
    return out


class MetaFeatures:
    """The selector's input features ``φ_meta`` (002 §4.5), fitted on reference embeddings.

    Parameters
    ----------
    features : sequence of str
        Which of :data:`FEATURE_NAMES` to compute (default: all). Embedding features are
        skipped when no reference embeddings are given to :meth:`fit`.
    max_classes : int
        Drop ``predicted_class`` and ``distribution`` when the model has more classes.
    n_neighbors : int
        Neighbours of the kNN distance (LOF uses ``min(20, s − 1)``).
    subsample : int
        Reference rows for the super-linear scorers (KDE, one-class SVM, LOF).
    max_reference : int
        Reference rows kept for the kNN distance and the isolation forest.
    max_dims : int
        Project embeddings with more dimensions on this many principal components.
    seed : int
        Seed of the subsamples and of the isolation forest.

    Attributes
    ----------
    names_ : list of str
        One name per column of :meth:`transform`'s output (``"distribution[2]"`` etc.).
    n_classes_ : int
        Classes of the model.
    dims_ : int or None
        Embedding dimension seen at fit time (``None``: no embeddings).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> meta = MetaFeatures(features=["confidence", "entropy", "knn"], n_neighbors=2)
    >>> meta = meta.fit(rng.normal(size=(50, 3)).astype(np.float32), n_classes=2)
    >>> meta.names_
    ['confidence', 'entropy', 'knn']
    >>> meta.transform(np.array([[0.9, 0.1]]), np.zeros((1, 3), np.float32)).shape
    (1, 3)
    """

    def __init__(
        self,
        *,
        features: Any = FEATURE_NAMES,
        max_classes: int = 10,
        n_neighbors: int = 10,
        subsample: int = 1000,
        max_reference: int = 10_000,
        max_dims: int = 32,
        seed: int = 0,
    ) -> None:
        chosen = tuple(features)
        unknown = [f for f in chosen if f not in FEATURE_NAMES]
        if unknown or not chosen:
            msg = f"features must be a non-empty subset of {FEATURE_NAMES}; got {list(chosen)!r}"
            raise ValueError(msg)
        self.features: tuple[FeatureName, ...] = tuple(f for f in FEATURE_NAMES if f in chosen)
        self.max_classes = _check_int(max_classes, "max_classes", 2)
        self.n_neighbors = _check_int(n_neighbors, "n_neighbors", 1)
        self.subsample = _check_int(subsample, "subsample", 10)
        self.max_reference = _check_int(max_reference, "max_reference", 10)
        self.max_dims = _check_int(max_dims, "max_dims", 1)
        self.seed = _check_int(seed, "seed", 0)

    def __repr__(self) -> str:
        return (
            f"MetaFeatures(features={list(self.features)!r}, max_classes={self.max_classes}, "
            f"n_neighbors={self.n_neighbors}, subsample={self.subsample}, "
            f"max_reference={self.max_reference}, max_dims={self.max_dims}, seed={self.seed})"
        )

    # ------------------------------------------------------------------ fit
    def fit(self, reference: Any, n_classes: int) -> MetaFeatures:
        """Fit the outlier scorers on the reference embeddings (``None``: probabilities only).

        Parameters
        ----------
        reference : array-like of shape (n_ref, d), or None
            Embeddings of the model's training rows.
        n_classes : int
            Number of classes of the model.

        Returns
        -------
        MetaFeatures
            ``self``, fitted.
        """
        K = _check_int(n_classes, "n_classes", 2)
        rng = np.random.default_rng(self.seed)
        arrays: dict[str, npt.NDArray[Any]] = {}
        if reference is not None and any(f in EMBEDDING_FEATURES for f in self.features):
            ref = check_embeddings(reference, "reference")
            if ref.shape[0] < 2:
                msg = f"reference needs at least 2 rows; got {ref.shape[0]}"
                raise ValueError(msg)
            if ref.shape[0] > self.max_reference:
                ref = ref[np.sort(rng.choice(ref.shape[0], size=self.max_reference, replace=False))]
            arrays.update(_projection(ref.astype(np.float64), self.max_dims))
            X = _project(ref, arrays)
            arrays["reference"] = X
            s = min(self.subsample, X.shape[0])
            arrays["subsample"] = np.sort(rng.choice(X.shape[0], size=s, replace=False)).astype(np.int64)
        self._setup(arrays, K)
        return self

    def _setup(self, arrays: dict[str, npt.NDArray[Any]], n_classes: int) -> None:
        """Build the scorers from the arrays (shared by :meth:`fit` and :meth:`from_state`)."""
        from sklearn.ensemble import IsolationForest
        from sklearn.neighbors import LocalOutlierFactor
        from sklearn.svm import OneClassSVM

        active = [f for f in self.features if not (f in PER_CLASS_FEATURES and n_classes > self.max_classes)]
        models: dict[str, Any] = {}
        if "reference" in arrays:
            X = np.asarray(arrays["reference"], dtype=np.float32)
            sub = X[np.asarray(arrays["subsample"], dtype=np.intp)].astype(np.float64)
            for name in EMBEDDING_FEATURES:
                if name not in active:
                    continue
                if name == "kde":  # Scott's rule on whitened (unit-variance) coordinates
                    models[name] = sub.shape[0] ** (-1.0 / (sub.shape[1] + 4))
                elif name == "isolation_forest":
                    models[name] = IsolationForest(n_estimators=100, random_state=self.seed).fit(
                        X.astype(np.float64)
                    )
                elif name == "one_class_svm":
                    models[name] = OneClassSVM(kernel="rbf", gamma="scale").fit(sub)
                elif name == "lof":
                    models[name] = LocalOutlierFactor(
                        n_neighbors=min(20, sub.shape[0] - 1), novelty=True
                    ).fit(sub)
                else:
                    models[name] = _flat_index(X)
        else:
            active = [f for f in active if f not in EMBEDDING_FEATURES]
        names: list[str] = []
        for f in active:
            if f in PER_CLASS_FEATURES:
                names.extend(f"{f}[{k}]" for k in range(n_classes))
            else:
                names.append(f)
        self._arrays = arrays
        self._models = models
        self._active: list[FeatureName] = active
        self._subsample_rows = (
            np.asarray(arrays["reference"], dtype=np.float32)[np.asarray(arrays["subsample"], dtype=np.intp)]
            if "reference" in arrays
            else None
        )
        self.n_classes_ = int(n_classes)
        self.dims_ = int(arrays["mean"].shape[0]) if "mean" in arrays else None
        self.names_ = names

    def _check_fitted(self) -> None:
        if not hasattr(self, "names_"):
            from calwatch.engine.errors import NotFittedError

            msg = "this MetaFeatures is not fitted yet: call fit(reference, n_classes) first"
            raise NotFittedError(msg)

    @property
    def uses_embeddings(self) -> bool:
        """Whether any feature is computed from embeddings."""
        self._check_fitted()
        return any(f in EMBEDDING_FEATURES for f in self._active)

    # ------------------------------------------------------------------ transform
    def transform(self, P: FloatArray, E: Float32Array | None = None) -> FloatArray:
        """The feature matrix ``(n, len(names_))`` of validated probabilities and embeddings.

        ``P`` must already be a valid float64 probability matrix of ``n_classes_`` columns and
        ``E`` a float32 matrix of ``dims_`` columns (the selector validates its inputs once).
        """
        self._check_fitted()
        columns: list[FloatArray] = []
        X = None
        if self.uses_embeddings:
            if E is None:
                msg = "embeddings are required: the features were fitted with reference embeddings"
                raise ValueError(msg)
            X = _project(E, self._arrays)
        for f in self._active:
            if f in EMBEDDING_FEATURES and X is not None:  # X is set whenever one is active
                columns.append(self._outlier(f, X)[:, None])
            else:
                columns.append(_probability_feature(f, P))
        return np.ascontiguousarray(np.hstack(columns), dtype=np.float64)

    def outlier_score(self, name: FeatureName, E: Float32Array) -> FloatArray:
        """One embedding feature of already validated embeddings (the baselines' scores)."""
        self._check_fitted()
        if name not in self._models:
            msg = f"{name!r} is not among the fitted embedding features {sorted(self._models)}"
            raise ValueError(msg)
        return self._outlier(name, _project(E, self._arrays))

    def _outlier(self, name: FeatureName, X: Float32Array) -> FloatArray:
        model = self._models[name]
        if name == "kde":  # the model is the bandwidth; the sample is the subsample
            sample = np.asarray(self._subsample_rows, dtype=np.float64)
            return gaussian_kde_log_density(X.astype(np.float64), sample, float(model))
        if name == "knn":
            distances, _ = model.search(X, min(self.n_neighbors, int(model.n_rows_)))
            mean_distance: FloatArray = distances.mean(axis=1)
            return mean_distance
        return np.asarray(model.score_samples(X.astype(np.float64)), dtype=np.float64)

    # ------------------------------------------------------------------ state
    def state(self) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
        """Plain arrays (projection, float32 reference rows, subsample) and a JSON-able dict."""
        import sklearn

        self._check_fitted()
        info: dict[str, Any] = {
            "kind": "MetaFeatures",
            "version": STATE_VERSION,
            "params": {
                "features": list(self.features),
                "max_classes": self.max_classes,
                "n_neighbors": self.n_neighbors,
                "subsample": self.subsample,
                "max_reference": self.max_reference,
                "max_dims": self.max_dims,
                "seed": self.seed,
            },
            "n_classes": self.n_classes_,
            "sklearn_version": sklearn.__version__,
        }
        return {k: v.copy() for k, v in self._arrays.items()}, info

    @classmethod
    def from_state(cls, arrays: dict[str, Any], info: dict[str, Any]) -> MetaFeatures:
        """Rebuild from :meth:`state`: the scikit-learn scorers are refitted on the stored rows."""
        if info.get("kind") != "MetaFeatures" or info.get("version") != STATE_VERSION:
            msg = (
                f"not a MetaFeatures state of version {STATE_VERSION}: "
                f"kind={info.get('kind')!r}, version={info.get('version')!r}"
            )
            raise ValueError(msg)
        out = cls(**info["params"])
        expected = {"mean", "scale", "components", "reference", "subsample"}
        present = expected & set(arrays)
        if present and present != expected:
            msg = f"state arrays are missing {sorted(expected - present)}"
            raise ValueError(msg)
        out._setup({k: np.asarray(arrays[k]) for k in present}, int(info["n_classes"]))
        return out


def _flat_index(X: Float32Array) -> Any:
    from calwatch.engine.knn import KNNIndex

    return KNNIndex(kind="flat").fit(X)


def _projection(ref: FloatArray, max_dims: int) -> dict[str, npt.NDArray[Any]]:
    """Standardisation and (if ``d > max_dims``) whitened PCA, as arrays."""
    mean = ref.mean(axis=0)
    scale = ref.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)  # constant (e.g. dead ReLU) units stay at 0
    Z = (ref - mean) / scale
    d = Z.shape[1]
    if d <= max_dims:
        components = np.eye(d)
    else:
        _, singular, vt = np.linalg.svd(Z, full_matrices=False)
        k = max_dims
        sd = singular[:k] / math.sqrt(max(Z.shape[0] - 1, 1))
        sd = np.where(sd > 1e-12, sd, 1.0)
        components = vt[:k].T / sd[None, :]
    return {"mean": mean, "scale": scale, "components": components}


def _project(E: Float32Array, arrays: dict[str, npt.NDArray[Any]]) -> Float32Array:
    Z = (np.asarray(E, dtype=np.float64) - arrays["mean"]) / arrays["scale"]
    out: Float32Array = np.ascontiguousarray(Z @ arrays["components"], dtype=np.float32)
    return out


def _probability_feature(name: FeatureName, P: FloatArray) -> FloatArray:
    if name == "distribution":
        return P
    predicted = P.argmax(axis=1)
    if name == "predicted_class":
        onehot = np.zeros_like(P)
        onehot[np.arange(P.shape[0]), predicted] = 1.0
        return onehot
    if name == "confidence":
        out: FloatArray = P[np.arange(P.shape[0]), predicted][:, None]
        return out
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(P > 0.0, P * np.log(P), 0.0)
    entropy: FloatArray = -plogp.sum(axis=1)[:, None]
    return entropy


__all__ = [
    "EMBEDDING_FEATURES",
    "FEATURE_NAMES",
    "PROBABILITY_FEATURES",
    "MetaFeatures",
    "check_embeddings",
    "gaussian_kde_log_density",
    "limit_threads",
]
