"""Exact (or approximate) nearest neighbours over a reference set of embeddings, by faiss.

:class:`KNNIndex` wraps a faiss index for the reference ("training") embeddings of
ALGORITHMS.md §2: ``IndexFlatL2`` (exact, the default), ``IndexHNSWFlat`` or ``IndexIVFFlat``
(approximate, for reference sets past ~1e6 rows). Embeddings are float32; ``search`` returns
true L2 distances (not squared) as float64 and row indices as int64, nearest first.

Exact distances. faiss computes squared distances of batches of queries as
``‖x‖² + ‖r‖² − 2 x·r`` in float32 (a BLAS product); the cancellation in that form costs up
to ~1e-3 absolute on vectors of norm ~10, and faiss switches to a different (SIMD) code path
below 20 queries, so the same query could get a slightly different distance depending on
the batch it came in. With ``exact_distances=True`` (default) the distances of the ``k``
returned neighbours are recomputed from the differences ``x − r`` in float64 and the
neighbours re-sorted by (distance, index): the distances are then those of numpy brute force,
and a row's result does not depend on its batch.
The cost is one gather of ``m·k`` reference rows, about 1% of a flat search.

Determinism. Flat search is deterministic for any number of threads (each query's result is
computed independently). IVF training uses faiss's k-means with the given ``seed``. HNSW
graph construction is parallel and depends on thread timing, so ``fit`` builds the HNSW
graph with one OpenMP thread (then restores the previous count); searching is deterministic.
We never change faiss's thread count otherwise.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from calwatch.engine.errors import NotFittedError

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
Int64Array = npt.NDArray[np.int64]
IndexKind = Literal["flat", "hnsw", "ivf"]
INDEX_KINDS: tuple[IndexKind, ...] = ("flat", "hnsw", "ivf")

#: Queries handled per faiss call (bounds the temporaries of the exact-distance recomputation).
DEFAULT_BATCH_SIZE = 8192
#: Differences held at once by the exact-distance recomputation (float64: 32 MB).
_EXACT_CHUNK_FLOATS = 1 << 22


def check_embeddings(E: Any, name: str = "E", *, dim: int | None = None) -> Float32Array:
    """Validate an embedding matrix and return it as a C-contiguous float32 array.

    Raises
    ------
    TypeError
        A non-numeric dtype.
    ValueError
        Not 2-D, empty, the wrong width, NaN or inf, or values too large for float32.
    """
    arr = np.asarray(E)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        msg = f"{name} must be a numeric array of embeddings; got dtype {arr.dtype}"
        raise TypeError(msg)
    if arr.ndim != 2:
        msg = f"{name} must be a 2-D array of shape (rows, dimensions); got shape {arr.shape}"
        raise ValueError(msg)
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        msg = f"{name} is empty: expected at least one row and one dimension; got shape {arr.shape}"
        raise ValueError(msg)
    if dim is not None and arr.shape[1] != dim:
        msg = f"{name} has {arr.shape[1]} dimensions but the reference embeddings have {dim}"
        raise ValueError(msg)
    with np.errstate(over="ignore"):  # overflow to inf is reported just below
        out = np.ascontiguousarray(arr, dtype=np.float32)
    lo, hi = float(out.min()), float(out.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        row = int(np.argwhere(~np.isfinite(out))[0, 0])
        msg = f"{name} contains NaN or inf (first in row {row}, after conversion to float32)"
        raise ValueError(msg)
    return out


class KNNIndex:
    """Nearest neighbours of query embeddings among reference embeddings (faiss, L2).

    Parameters
    ----------
    kind : {"flat", "hnsw", "ivf"}
        ``"flat"``: exact search (``IndexFlatL2``), O(n·d) per query. ``"hnsw"``: a graph
        index (``IndexHNSWFlat``), approximate, fast past ~1e6 rows. ``"ivf"``: inverted lists
        over a k-means coarse quantiser (``IndexIVFFlat``), approximate.
    hnsw_m, hnsw_ef_construction, hnsw_ef_search : int
        HNSW graph degree and beam widths (construction, search).
    ivf_nlist : int, optional
        IVF lists; default ``round(4·sqrt(n))`` clipped to ``[1, n // 39]``.
    ivf_nprobe : int
        IVF lists visited per query.
    exact_distances : bool
        Recompute the returned neighbours' distances from the differences (see the module
        docstring); ``False`` returns ``sqrt`` of faiss's float32 squared distances.
    batch_size : int
        Queries per faiss call.
    seed : int
        Seed of IVF's k-means.

    Attributes
    ----------
    n_rows_, dim_ : int
        Size and width of the reference set.

    Examples
    --------
    >>> ref = np.array([[0.0, 0.0], [3.0, 4.0], [1.0, 0.0]], dtype=np.float32)
    >>> dist, idx = KNNIndex().fit(ref).search(np.array([[0.0, 0.0]]), k=2)
    >>> dist.tolist(), idx.tolist()
    ([[0.0, 1.0]], [[0, 2]])
    """

    def __init__(
        self,
        *,
        kind: IndexKind = "flat",
        hnsw_m: int = 32,
        hnsw_ef_construction: int = 200,
        hnsw_ef_search: int = 128,
        ivf_nlist: int | None = None,
        ivf_nprobe: int = 16,
        exact_distances: bool = True,
        batch_size: int = DEFAULT_BATCH_SIZE,
        seed: int = 0,
    ) -> None:
        if kind not in INDEX_KINDS:
            msg = f"kind must be one of {INDEX_KINDS}; got {kind!r}"
            raise ValueError(msg)
        for name, value in (
            ("hnsw_m", hnsw_m),
            ("hnsw_ef_construction", hnsw_ef_construction),
            ("hnsw_ef_search", hnsw_ef_search),
            ("ivf_nprobe", ivf_nprobe),
            ("batch_size", batch_size),
        ):
            if int(value) != value or value < 1:
                msg = f"{name} must be an integer ≥ 1; got {value!r}"
                raise ValueError(msg)
        if ivf_nlist is not None and (int(ivf_nlist) != ivf_nlist or ivf_nlist < 1):
            msg = f"ivf_nlist must be None or an integer ≥ 1; got {ivf_nlist!r}"
            raise ValueError(msg)
        self.kind: IndexKind = kind
        self.hnsw_m = int(hnsw_m)
        self.hnsw_ef_construction = int(hnsw_ef_construction)
        self.hnsw_ef_search = int(hnsw_ef_search)
        self.ivf_nlist = None if ivf_nlist is None else int(ivf_nlist)
        self.ivf_nprobe = int(ivf_nprobe)
        self.exact_distances = bool(exact_distances)
        self.batch_size = int(batch_size)
        self.seed = int(seed)

    def __repr__(self) -> str:
        return f"KNNIndex(kind={self.kind!r}, exact_distances={self.exact_distances!r})"

    def options(self) -> dict[str, Any]:
        """The constructor options, JSON-able (for snapshots)."""
        return {
            "kind": self.kind,
            "hnsw_m": self.hnsw_m,
            "hnsw_ef_construction": self.hnsw_ef_construction,
            "hnsw_ef_search": self.hnsw_ef_search,
            "ivf_nlist": self.ivf_nlist,
            "ivf_nprobe": self.ivf_nprobe,
            "exact_distances": self.exact_distances,
            "batch_size": self.batch_size,
            "seed": self.seed,
        }

    def fit(self, X: Any) -> KNNIndex:
        """Index the reference embeddings ``X`` of shape ``(n, d)`` (converted to float32)."""
        import faiss  # imported on use: heavy

        ref = check_embeddings(X, "X")
        n, dim = ref.shape
        index: Any
        if self.kind == "flat":
            index = faiss.IndexFlatL2(dim)
            index.add(ref)
        elif self.kind == "hnsw":
            index = faiss.IndexHNSWFlat(dim, self.hnsw_m)
            index.hnsw.efConstruction = self.hnsw_ef_construction
            index.hnsw.efSearch = self.hnsw_ef_search
            threads = faiss.omp_get_max_threads()
            faiss.omp_set_num_threads(1)  # parallel insertion would make the graph depend on timing
            try:
                index.add(ref)
            finally:
                faiss.omp_set_num_threads(threads)
        else:
            nlist = self.ivf_nlist or round(4 * math.sqrt(n))
            nlist = max(1, min(nlist, n // 39 if n >= 39 else 1))
            quantizer = faiss.IndexFlatL2(dim)
            index = faiss.IndexIVFFlat(quantizer, dim, nlist)
            index.cp.seed = self.seed
            index.train(ref)
            index.add(ref)
            index.nprobe = min(self.ivf_nprobe, nlist)
        self._index = index
        self._ref = ref
        self.n_rows_ = int(n)
        self.dim_ = int(dim)
        return self

    def __getstate__(self) -> dict[str, Any]:
        """Options and reference embeddings only: the faiss index is rebuilt on restore (snapshots)."""
        return {k: v for k, v in vars(self).items() if k != "_index"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore options and, when fitted, rebuild the same index from the reference embeddings."""
        self.__dict__.update(state)
        if "_ref" in state:
            self.fit(state["_ref"])

    def _check_fitted(self) -> None:
        if not hasattr(self, "_index"):
            msg = "this KNNIndex is not fitted yet: call fit(X) with the reference embeddings first"
            raise NotFittedError(msg)

    @property
    def reference(self) -> Float32Array:
        """The indexed reference embeddings (float32, read-only view)."""
        self._check_fitted()
        view = self._ref.view()
        view.flags.writeable = False
        return view

    def search(self, Q: Any, k: int) -> tuple[FloatArray, Int64Array]:
        """The ``k`` nearest reference rows of each query row, nearest first.

        Parameters
        ----------
        Q : array-like of shape (m, d)
            Query embeddings (converted to float32).
        k : int
            Neighbours per query, ``1 ≤ k ≤ n_rows_``.

        Returns
        -------
        distances : ndarray of shape (m, k), float64
            L2 distances (not squared), non-decreasing along each row.
        indices : ndarray of shape (m, k), int64
            Row indices into the reference set; ties in distance by lower index.
        """
        self._check_fitted()
        if int(k) != k or not 1 <= k <= self.n_rows_:
            msg = f"k must be an integer in [1, {self.n_rows_}] (the reference rows); got {k!r}"
            raise ValueError(msg)
        queries = check_embeddings(Q, "Q", dim=self.dim_)
        m = queries.shape[0]
        distances = np.empty((m, k), dtype=np.float64)
        indices = np.empty((m, k), dtype=np.int64)
        for start in range(0, m, self.batch_size):
            block = queries[start : start + self.batch_size]
            squared, found = self._index.search(block, k)
            if (found < 0).any():  # approximate indexes can come back short
                msg = (
                    f"the {self.kind} index returned fewer than k={k} neighbours for some queries; "
                    "raise hnsw_ef_search / ivf_nprobe or use kind='flat'"
                )
                raise RuntimeError(msg)
            if self.exact_distances:
                dist, found = self._exact(block, found)
            else:
                dist = np.sqrt(np.maximum(squared.astype(np.float64), 0.0))
            distances[start : start + block.shape[0]] = dist
            indices[start : start + block.shape[0]] = found
        return distances, indices

    def _exact(self, block: Float32Array, found: Int64Array) -> tuple[FloatArray, Int64Array]:
        """Distances recomputed from differences; rows re-sorted by (distance, index)."""
        dist = np.empty(found.shape, dtype=np.float64)
        step = max(1, _EXACT_CHUNK_FLOATS // max(1, found.shape[1] * block.shape[1]))
        for start in range(0, block.shape[0], step):
            rows = slice(start, start + step)
            diff = self._ref[found[rows]].astype(np.float64) - block[rows, None, :]
            dist[rows] = np.sqrt(np.einsum("mkd,mkd->mk", diff, diff))
        order = np.lexsort((found, dist), axis=-1)
        return np.take_along_axis(dist, order, axis=1), np.take_along_axis(found, order, axis=1)
