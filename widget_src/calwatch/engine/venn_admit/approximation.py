"""KNN approximation of a model over its embeddings and the KNN localizer (paper 000 §4.1, App. B-C).

- :func:`approximation_logits` evaluates ``f_tr^KNN`` (Eq. 2-3) for rows whose ``K`` nearest
  reference rows are known: ``a_c = β_c + Σ_k w_k (tanh f_c(x_k) + γ_c ỹ_k^c)`` with
  ``w = softmax_k(−‖r_t − r_k‖₂ / η)`` and ``ỹ_k^c = ±1`` (one-vs-rest true label), ``2C + 1``
  parameters.
- The localizer ``f_ca^KNN`` (Eq. 8, one parameter ``η'``) lives in
  :mod:`calwatch.engine.venn_admit.localizer`.
- :func:`fit_approximation` (and the localizer's ``fit_localizer``) train as App. C says, through
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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

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
#: Rows evaluated per block by the numpy forward passes (bounds the (rows, K, C) temporaries).
BLOCK_ELEMENTS = 1 << 22


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
    step = max(1, BLOCK_ELEMENTS // (K * C))
    classes = np.arange(C)
    for start in range(0, m, step):
        rows = slice(start, start + step)
        w = softmax_of_negative(dist[rows], params.eta)
        mean_tanh = np.einsum("mk,mkc->mc", w, tanh_ref[idx[rows]], dtype=np.float64)
        # Σ_k w_k ỹ_k^c = 2 Σ_k w_k [y_k = c] − 1 (the weights sum to 1)
        label_mass = np.einsum("mk,mkc->mc", w, y_ref[idx[rows]][:, :, None] == classes)
        out[rows] = params.beta + mean_tanh + params.gamma * (2.0 * label_mass - 1.0)
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
    torch = import_torch()
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


def import_torch() -> Any:
    """torch, imported on use, or an ImportError that says how to get it."""
    try:
        import torch
    except ImportError as err:  # pragma: no cover - torch is installed in the test environment
        msg = "training the KNN approximation and localizer needs torch (CPU): pip install 'calwatch[torch]'"
        raise ImportError(msg) from err
    return torch


def mean_scale(dist: FloatArray) -> float:
    """The temperature scale ``s₀``: the mean distance (1 when it is 0 or not finite)."""
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
    torch = import_torch()

    C = tanh_ref.shape[1]
    scale = mean_scale(dist[fit_rows])
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

    start_on_grid(forward, eta_scaled, targets, fit_rows)
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


def start_on_grid(
    forward: Callable[[Any], Any], eta_scaled: Any, targets: FloatArray, fit_rows: IntArray
) -> float:
    """Set the scaled temperature to the grid point with the lowest loss on the fit rows."""
    torch = import_torch()

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
