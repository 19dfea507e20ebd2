"""The KNN localizer of paper 000 (App. B, Eq. 8-9): ``ψ = softmax_j(−‖r_t − r_j‖₂ / η')``.

- :class:`LocalizerSupport`: the rows the softmax runs over, all of them (dense blocks, exact)
  or each query's ``k`` nearest (faiss, truncated).
- :func:`localizer_logits`: the localizer's output ``Σ_j ψ_j a_j`` (``a_j`` the ``f_tr^KNN``
  logits of the support rows).
- :func:`fit_localizer`: trains ``η'`` as App. C trains the approximation
  (:func:`calwatch.engine.venn_admit.approximation.train_to_agree`).
- :func:`category_mass`: ``ψ' = Σ_{j∈T} ψ_j`` over a Venn category (Eq. 9), the test-point
  weight ``1/ψ'`` of the weighted Venn-ADMIT predictor (Alg. 3).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from calwatch.engine.knn import IndexKind, KNNIndex
from calwatch.engine.venn_admit.approximation import (
    BLOCK_ELEMENTS,
    DEFAULT_BATCH_SIZE,
    DEFAULT_EPOCHS,
    MIN_SCALED_TEMPERATURE,
    TrainingResult,
    import_torch,
    mean_scale,
    softmax_of_negative,
    start_on_grid,
    train_to_agree,
)
from calwatch.engine.venn_admit.bands import GroupedWindows

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.intp]
Int64Array = npt.NDArray[np.int64]
AnyFloatArray = npt.NDArray[np.float32] | npt.NDArray[np.float64]

#: A dense localizer's training distances are kept (float32) up to this many rows × support rows.
DENSE_PRECOMPUTE = 1 << 26


class LocalizerSupport:
    """The rows a localizer sums over (``ψ`` of Eq. 8): the ``k`` nearest by faiss, or all of them.

    Parameters
    ----------
    embeddings : ndarray of shape (n, dim), float32
        The support rows (``D_ca^vp`` for Venn-ADMIT's weights).
    k : int or None
        ``None`` (or ``k ≥ n``): every support row, distances by dense blocks (exact softmax).
        Otherwise the ``k`` nearest rows, the rest left out of the softmax (truncation).
    kind : {"flat", "hnsw", "ivf"}
        faiss index for the top-k search.
    seed : int
        Seed of the index (IVF).
    """

    def __init__(
        self, embeddings: Float32Array, *, k: int | None, kind: IndexKind = "flat", seed: int = 0
    ) -> None:
        self.embeddings = embeddings
        self.n = int(embeddings.shape[0])
        self.k = None if k is None or k >= self.n else int(k)
        if self.k is None:
            self._sq = np.einsum("nd,nd->n", embeddings, embeddings)
        else:
            self._index = KNNIndex(kind=kind, seed=seed).fit(embeddings)

    @property
    def width(self) -> int:
        """Support rows per query: ``k``, or ``n`` when dense."""
        return self.n if self.k is None else self.k

    def blocks(self, E: Float32Array) -> Iterator[tuple[slice, AnyFloatArray, Int64Array | None]]:
        """``(rows, distances, indices)`` per block of query rows; ``indices`` is None when dense.

        Top-k distances are exact float64 (:class:`KNNIndex`). Dense distances are float32,
        ``sqrt(‖x‖² + ‖r‖² − 2x·r)`` from a float32 matrix product, with an absolute error of
        about ``1e-7·(‖x‖² + ‖r‖²)/‖x − r‖``: enough for softmax weights, at half the memory
        traffic of float64 (the dense pass is the weighted predict's main cost after faiss).
        """
        step = max(1, BLOCK_ELEMENTS // self.width)
        for start in range(0, E.shape[0], step):
            rows = slice(start, start + step)
            block = E[rows]
            if self.k is None:
                sq = block @ self.embeddings.T
                sq *= -2.0
                sq += self._sq[None, :]
                sq += np.einsum("md,md->m", block, block)[:, None]
                np.maximum(sq, 0.0, out=sq)
                yield rows, np.sqrt(sq, out=sq), None
            else:
                dist, idx = self._index.search(block, self.k)
                yield rows, dist, idx

    def neighbours(self, E: Float32Array) -> tuple[FloatArray, Int64Array]:
        """All blocks at once: distances and indices, shape (m, width) (for training)."""
        dist = np.empty((E.shape[0], self.width), dtype=np.float64)
        idx = np.empty((E.shape[0], self.width), dtype=np.int64)
        for rows, d, i in self.blocks(E):
            dist[rows] = d
            idx[rows] = np.arange(self.n) if i is None else i
        return dist, idx


def category_mass(
    support: LocalizerSupport,
    eta: float,
    E: Float32Array,
    key: Int64Array,
    lo: FloatArray,
    hi: FloatArray,
    support_key: Int64Array,
    support_d: FloatArray,
) -> FloatArray:
    """``ψ' = Σ_{j∈T} ψ_j`` (Eq. 9) of each query row.

    ``ψ`` is the localizer's softmax over the support; ``T`` the support rows with
    ``support_key == key`` and ``lo ≤ support_d ≤ hi`` (the Venn category in the band).
    """
    out = np.empty(E.shape[0], dtype=np.float64)
    valid = np.flatnonzero(support_key >= 0)
    windows = GroupedWindows(support_key[valid], support_d[valid])
    columns = valid[windows.order]  # the category rows of a query are a range of these columns
    first, last = windows.window(key, lo, hi)
    for rows, dist, idx in support.blocks(E):
        if idx is None:
            # ψ' = (Σ over the query's range of columns) / (Σ over all columns), via cumulative sums
            kernel = dist - dist.min(axis=1, keepdims=True)
            kernel *= -1.0 / eta
            np.exp(kernel, out=kernel)
            total = kernel.sum(axis=1, dtype=np.float64)
            cumulative = np.zeros((kernel.shape[0], columns.size + 1))
            np.cumsum(kernel[:, columns], axis=1, dtype=np.float64, out=cumulative[:, 1:])
            r = np.arange(kernel.shape[0])
            out[rows] = (cumulative[r, last[rows]] - cumulative[r, first[rows]]) / total
        else:
            psi = softmax_of_negative(dist, eta)
            member = (support_key[idx] == key[rows, None]) & (support_d[idx] >= lo[rows, None])
            member &= support_d[idx] <= hi[rows, None]
            out[rows] = np.einsum("mk,mk->m", psi, member)
    return out


def localizer_logits(
    support: LocalizerSupport, eta: float, E: Float32Array, support_logits: FloatArray
) -> FloatArray:
    """Localizer output ``Σ_j ψ_j a_j`` (Eq. 8) of the rows ``E`` over ``support``.

    ``support_logits`` (n_support, C) are the ``f_tr^KNN`` logits of the support rows; with a
    top-k support the softmax runs over each row's ``k`` nearest support rows only.
    """
    out = np.empty((E.shape[0], support_logits.shape[1]), dtype=np.float64)
    for rows, dist, idx in support.blocks(E):
        psi = softmax_of_negative(dist, eta)
        out[rows] = psi @ support_logits if idx is None else np.einsum("mk,mkc->mc", psi, support_logits[idx])
    return out


def fit_localizer(
    support: LocalizerSupport,
    E: Float32Array,
    support_logits: FloatArray,
    targets: FloatArray,
    fit_rows: IntArray,
    dev_rows: IntArray,
    *,
    epochs: int = DEFAULT_EPOCHS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    seed: int = 0,
    progress: bool = True,
) -> tuple[float, TrainingResult]:
    """Train the localizer temperature ``η'`` so that ``Σ_j ψ_j a_j`` agrees with ``targets`` (App. B).

    ``E`` are the ``D_knn`` rows' embeddings, ``support_logits`` the ``f_tr^KNN`` logits of the
    support rows, ``targets`` the ``f_tr^KNN`` logits of the ``D_knn`` rows. A top-k support's
    neighbours are searched once; a dense support's distances too (float32), up to 2²⁶ rows ×
    support rows (256 MB), else per mini-batch.
    """
    torch = import_torch()

    values_t = torch.as_tensor(support_logits, dtype=torch.float64)
    if support.k is None and E.shape[0] * support.n <= DENSE_PRECOMPUTE:
        dense = torch.as_tensor(np.concatenate([d.astype(np.float32) for _, d, _ in support.blocks(E)]))

        def distances(rows: Any) -> tuple[Any, Any]:
            return dense[rows].to(torch.float64), None

    elif support.k is None:
        E_t = torch.as_tensor(E)
        support_emb = torch.as_tensor(support.embeddings)

        def distances(rows: Any) -> tuple[Any, Any]:
            return torch.cdist(E_t[rows], support_emb).to(torch.float64), None

    else:
        dist_np, idx_np = support.neighbours(E)
        dist_all, idx_all = torch.as_tensor(dist_np), torch.as_tensor(idx_np, dtype=torch.long)

        def distances(rows: Any) -> tuple[Any, Any]:
            return dist_all[rows], idx_all[rows]

    fit_t = torch.as_tensor(fit_rows, dtype=torch.long)
    with torch.no_grad():
        scale = mean_scale(distances(fit_t)[0].numpy())
    eta_scaled = torch.ones((), dtype=torch.float64, requires_grad=True)

    def forward(rows: Any) -> Any:
        d, idx = distances(rows)
        psi = torch.softmax(-(d - d.min(dim=1, keepdim=True).values) / (scale * eta_scaled), dim=1)
        if idx is None:
            return psi @ values_t
        return torch.einsum("mk,mkc->mc", psi, values_t[idx])  # gathered per batch

    def project() -> None:
        eta_scaled.clamp_(min=MIN_SCALED_TEMPERATURE)

    start_on_grid(forward, eta_scaled, targets, fit_rows)
    result, (e,) = train_to_agree(
        forward=forward,
        params=[eta_scaled],
        targets=targets,
        fit_rows=fit_rows,
        dev_rows=dev_rows,
        epochs=epochs,
        batch_size=batch_size,
        seed=seed,
        project=project,
        progress=progress,
        desc="KNN localizer",
    )
    return float(e) * scale, result
