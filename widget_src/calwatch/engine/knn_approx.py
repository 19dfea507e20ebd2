"""KNN approximation of a model over its embeddings and the KNN localizer (paper 000 §4.1, App. B-C).

- :func:`approximation_logits` evaluates ``f_tr^KNN`` (Eq. 2-3) for rows whose ``K`` nearest
  reference rows are known: ``a_c = β_c + Σ_k w_k (tanh f_c(x_k) + γ_c ỹ_k^c)`` with
  ``w = softmax_k(−‖r_t − r_k‖₂ / η)`` and ``ỹ_k^c = ±1`` (one-vs-rest true label), ``2C + 1``
  parameters.
- :func:`localizer_logits` evaluates the localizer ``f_ca^KNN`` (Eq. 8):
  ``Σ_j ψ_j a_j`` with ``ψ = softmax_j(−‖r_t − r_j‖₂ / η')`` over the localizer's support
  (calibration rows), one parameter ``η'``.
- :func:`fit_approximation` and :func:`fit_localizer` train them as App. C says, through
  :func:`train_to_agree`: per-row loss ``(1/C) Σ_c BCE(σ(o_c) → σ(a_c))`` against the logits
  ``o`` being approximated; Adadelta with learning rate 1.0 on shuffled mini-batches of the
  fit half; after each epoch, count the argmax disagreements on the dev half and keep the
  parameters of the epoch with the fewest (the first such epoch); after an epoch that sets no
  new minimum, compute the loss only on the rows that currently disagree (argmax of ``a`` ≠
  argmax of ``o``), until an epoch sets a new minimum (then all rows again) or the epoch
  limit. Torch, CPU, float64, a tqdm progress bar.

Our choices, where App. C is silent: mini-batches of 50 rows, 50 epochs, initial ``β = γ = 0``.
The temperatures are trained as ``η = s₀·η̃`` with ``s₀`` the mean neighbour distance of the
fit rows (the same model; Adadelta's steps are then relative to the embeddings' scale), and
``η̃`` is kept ≥ 1e-6 after each step. ``η̃`` starts at the point of the grid
``2⁻⁸, 2⁻⁷, …, 2²`` with the lowest loss on the fit half (β = γ = 0): Adadelta with learning
rate 1.0 starts with steps of about ``sqrt(ε) = 1e-3`` that grow slowly, and starting from
``η̃ = 1`` the localizer's single temperature moved by ~12% in 4,000 steps on clustered data
(agreement with ``f_tr^KNN`` stuck at 0.23 where ``η'`` a tenth as large reaches 1.0).
The neighbour features (distances, ``tanh`` of the neighbours' logits, their labels) are
gathered once, so an epoch is a few small tensor products.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from calwatch.engine.knn import IndexKind, KNNIndex
from calwatch.engine.venn_bands import GroupedWindows

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.intp]
Int64Array = npt.NDArray[np.int64]
AnyFloatArray = npt.NDArray[np.float32] | npt.NDArray[np.float64]

#: Defaults of the training loop (our choices; App. C gives none).
DEFAULT_EPOCHS = 50
DEFAULT_BATCH_SIZE = 50
#: Starting values of the scaled temperature η̃ tried before training (the lowest fit-half loss wins).
TEMPERATURE_GRID: tuple[float, ...] = tuple(2.0**e for e in range(-8, 3))
#: Lower bound on the scaled temperature η̃ (η = s₀·η̃) after each optimiser step.
MIN_SCALED_TEMPERATURE = 1e-6
#: A dense localizer's training distances are kept (float32) up to this many rows × support rows.
_DENSE_PRECOMPUTE = 1 << 26
#: Rows evaluated per block by the numpy forward passes (bounds the (rows, K, C) temporaries).
_BLOCK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class TrainingResult:
    """What one :func:`train_to_agree` run did.

    Attributes
    ----------
    best_epoch : int
        The epoch (1-based) whose parameters were kept.
    dev_disagreements : list of int
        Argmax disagreements on the dev half after each epoch.
    masked : list of bool
        Whether each epoch computed the loss on disagreeing rows only.
    seconds : float
        Wall time of the loop.
    """

    best_epoch: int
    dev_disagreements: list[int] = field(default_factory=list)
    masked: list[bool] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True)
class ApproximationParams:
    """The ``2C + 1`` parameters of ``f_tr^KNN``: ``β`` (C,), ``γ`` (C,) and the temperature ``η``."""

    beta: FloatArray
    gamma: FloatArray
    eta: float


def softmax_of_negative(dist: AnyFloatArray, eta: float) -> FloatArray:
    """Row-wise ``softmax(−dist / η)`` in float64 (rows shifted by their minimum)."""
    z: FloatArray = (dist.min(axis=1, keepdims=True) - dist).astype(np.float64, copy=False) / eta
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


def approximation_logits(
    params: ApproximationParams,
    dist: FloatArray,
    idx: Int64Array,
    tanh_ref: Float32Array,
    y_ref: IntArray,
) -> FloatArray:
    """``f_tr^KNN`` logits of rows with neighbour distances ``dist`` and indices ``idx`` (Eq. 2-3).

    Parameters
    ----------
    params : ApproximationParams
        ``β``, ``γ``, ``η``.
    dist, idx : ndarray of shape (m, K)
        Distances to, and indices of, each row's nearest reference rows.
    tanh_ref : ndarray of shape (n_ref, C)
        ``tanh`` of the reference rows' model logits.
    y_ref : ndarray of shape (n_ref,)
        The reference rows' true labels.

    Returns
    -------
    ndarray of shape (m, C), float64

    Examples
    --------
    >>> p = ApproximationParams(beta=np.zeros(2), gamma=np.array([0.5, 0.5]), eta=1.0)
    >>> a = approximation_logits(p, np.array([[1.0, 1.0]]), np.array([[0, 1]]),
    ...                          np.array([[0.5, -0.5], [0.1, 0.3]], np.float32), np.array([0, 1]))
    >>> a.round(3).tolist()  # equal weights: (0.5 + 0.1)/2 + 0.5·0, (−0.5 + 0.3)/2 + 0.5·0
    [[0.3, -0.1]]
    """
    m, K = dist.shape
    C = tanh_ref.shape[1]
    out = np.empty((m, C), dtype=np.float64)
    step = max(1, _BLOCK_ELEMENTS // (K * C))
    classes = np.arange(C)
    for start in range(0, m, step):
        rows = slice(start, start + step)
        w = softmax_of_negative(dist[rows], params.eta)
        mean_tanh = np.einsum("mk,mkc->mc", w, tanh_ref[idx[rows]], dtype=np.float64)
        # Σ_k w_k ỹ_k^c = 2 Σ_k w_k [y_k = c] − 1 (the weights sum to 1)
        label_mass = np.einsum("mk,mkc->mc", w, y_ref[idx[rows]][:, :, None] == classes)
        out[rows] = params.beta + mean_tanh + params.gamma * (2.0 * label_mass - 1.0)
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


def argmax_lowest(a: FloatArray) -> IntArray:
    """Row-wise argmax, ties to the lowest class index (ALGORITHMS.md §0)."""
    out: IntArray = np.argmax(a, axis=1).astype(np.intp)
    return out


# ------------------------------------------------------------------------------- training
def train_to_agree(
    *,
    forward: Callable[[Any], Any],
    params: list[Any],
    targets: FloatArray,
    fit_rows: IntArray,
    dev_rows: IntArray,
    epochs: int,
    batch_size: int,
    seed: int,
    project: Callable[[], None],
    progress: bool,
    desc: str,
) -> tuple[TrainingResult, list[FloatArray]]:
    """Train ``params`` so that ``forward(rows)`` agrees with ``targets[rows]`` (App. C).

    ``forward`` maps a LongTensor of row numbers to a (rows, C) float64 tensor of logits;
    ``params`` are the float64 leaf tensors it depends on; ``project`` is called after every
    optimiser step (to keep temperatures positive). Returns the run's record and the kept
    parameters as numpy arrays (in the order of ``params``), which are also copied back into
    the tensors.
    """
    torch = _torch()
    from tqdm.auto import tqdm

    start_time = time.perf_counter()
    tensors = list(params)
    target = torch.as_tensor(targets, dtype=torch.float64)
    soft = torch.sigmoid(target)
    target_class = torch.argmax(target, dim=1)
    fit_t = torch.as_tensor(fit_rows, dtype=torch.long)
    dev_t = torch.as_tensor(dev_rows, dtype=torch.long)
    optimiser = torch.optim.Adadelta(tensors, lr=1.0)
    generator = torch.Generator().manual_seed(int(seed))
    best = math.inf
    best_state = [t.detach().clone() for t in tensors]
    best_epoch = 0
    history: list[int] = []
    masked_history: list[bool] = []
    masked = False
    bar = tqdm(range(1, epochs + 1), desc=desc, disable=not progress, leave=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is several times faster than a pool
    try:
        for epoch in bar:
            masked_history.append(masked)
            order = fit_t[torch.randperm(fit_t.shape[0], generator=generator)]
            for begin in range(0, order.shape[0], batch_size):
                rows = order[begin : begin + batch_size]
                out = forward(rows)
                if masked:
                    keep = torch.argmax(out.detach(), dim=1) != target_class[rows]
                    if not bool(keep.any()):
                        continue
                    out, rows = out[keep], rows[keep]
                loss = torch.nn.functional.binary_cross_entropy_with_logits(out, soft[rows])
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                with torch.no_grad():
                    project()
            with torch.no_grad():
                dev_out = forward(dev_t)
                wrong = int((torch.argmax(dev_out, dim=1) != target_class[dev_t]).sum())
            history.append(wrong)
            bar.set_postfix(dev_disagreements=wrong)
            if wrong < best:
                best, best_epoch, masked = wrong, epoch, False
                best_state = [t.detach().clone() for t in tensors]
            else:
                masked = True
    finally:
        torch.set_num_threads(threads)
    with torch.no_grad():
        for tensor, kept in zip(tensors, best_state, strict=True):
            tensor.copy_(kept)
    result = TrainingResult(
        best_epoch=best_epoch,
        dev_disagreements=history,
        masked=masked_history,
        seconds=time.perf_counter() - start_time,
    )
    return result, [t.detach().numpy().astype(np.float64).copy() for t in best_state]


def _torch() -> Any:
    """torch, imported on use, or an ImportError that says how to get it."""
    try:
        import torch
    except ImportError as err:  # pragma: no cover - torch is installed in the test environment
        msg = "training the KNN approximation and localizer needs torch (CPU): pip install 'calwatch[torch]'"
        raise ImportError(msg) from err
    return torch


def _mean_scale(dist: FloatArray) -> float:
    scale = float(dist.mean()) if dist.size else 0.0
    return scale if math.isfinite(scale) and scale > 0 else 1.0


def fit_approximation(
    dist: FloatArray,
    idx: Int64Array,
    tanh_ref: Float32Array,
    y_ref: IntArray,
    targets: FloatArray,
    fit_rows: IntArray,
    dev_rows: IntArray,
    *,
    epochs: int = DEFAULT_EPOCHS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    seed: int = 0,
    progress: bool = True,
) -> tuple[ApproximationParams, TrainingResult]:
    """Train ``β, γ, η`` of ``f_tr^KNN`` to agree with the model logits ``targets`` (App. C).

    ``dist``/``idx`` (n, K) are the neighbours in the reference set of the ``n`` rows of
    ``D_knn``; ``fit_rows`` and ``dev_rows`` split those rows in two halves.
    """
    torch = _torch()

    C = tanh_ref.shape[1]
    scale = _mean_scale(dist[fit_rows])
    dist_t = torch.as_tensor(dist, dtype=torch.float64)
    tanh_t = torch.as_tensor(tanh_ref[idx], dtype=torch.float64)  # (n, K, C), gathered once
    sign_t = torch.as_tensor(np.where(y_ref[idx][:, :, None] == np.arange(C), 1.0, -1.0))
    beta = torch.zeros(C, dtype=torch.float64, requires_grad=True)
    gamma = torch.zeros(C, dtype=torch.float64, requires_grad=True)
    eta_scaled = torch.ones((), dtype=torch.float64, requires_grad=True)

    def forward(rows: Any) -> Any:
        d = dist_t[rows]
        w = torch.softmax(-(d - d.min(dim=1, keepdim=True).values) / (scale * eta_scaled), dim=1)
        mean_tanh = torch.einsum("mk,mkc->mc", w, tanh_t[rows])
        mean_sign = torch.einsum("mk,mkc->mc", w, sign_t[rows])
        return beta + mean_tanh + gamma * mean_sign

    def project() -> None:
        eta_scaled.clamp_(min=MIN_SCALED_TEMPERATURE)

    _start_on_grid(forward, eta_scaled, targets, fit_rows)
    result, (b, g, e) = train_to_agree(
        forward=forward,
        params=[beta, gamma, eta_scaled],
        targets=targets,
        fit_rows=fit_rows,
        dev_rows=dev_rows,
        epochs=epochs,
        batch_size=batch_size,
        seed=seed,
        project=project,
        progress=progress,
        desc="KNN approximation",
    )
    return ApproximationParams(beta=b, gamma=g, eta=float(e) * scale), result


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
    torch = _torch()

    values_t = torch.as_tensor(support_logits, dtype=torch.float64)
    if support.k is None and E.shape[0] * support.n <= _DENSE_PRECOMPUTE:
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
        scale = _mean_scale(distances(fit_t)[0].numpy())
    eta_scaled = torch.ones((), dtype=torch.float64, requires_grad=True)

    def forward(rows: Any) -> Any:
        d, idx = distances(rows)
        psi = torch.softmax(-(d - d.min(dim=1, keepdim=True).values) / (scale * eta_scaled), dim=1)
        if idx is None:
            return psi @ values_t
        return torch.einsum("mk,mkc->mc", psi, values_t[idx])  # gathered per batch

    def project() -> None:
        eta_scaled.clamp_(min=MIN_SCALED_TEMPERATURE)

    _start_on_grid(forward, eta_scaled, targets, fit_rows)
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


def _start_on_grid(
    forward: Callable[[Any], Any], eta_scaled: Any, targets: FloatArray, fit_rows: IntArray
) -> float:
    """Set the scaled temperature to the grid point with the lowest loss on the fit rows."""
    torch = _torch()

    rows = torch.as_tensor(fit_rows, dtype=torch.long)
    soft = torch.sigmoid(torch.as_tensor(targets, dtype=torch.float64)[rows])
    losses = []
    with torch.no_grad():
        for value in TEMPERATURE_GRID:
            eta_scaled.fill_(value)
            out = forward(rows)
            losses.append(float(torch.nn.functional.binary_cross_entropy_with_logits(out, soft)))
        best = TEMPERATURE_GRID[int(np.argmin(losses))]
        eta_scaled.fill_(best)
    return best


# ------------------------------------------------------------------------ localizer support
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
        step = max(1, _BLOCK_ELEMENTS // self.width)
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
