"""The regularised S-MMCE loss and the selector network (paper 002 Eq. 15, §4.5, App. B.2).

For a dataset ``D`` of rows with confidence ``r_i`` (binary: ``p_1``; multi-class: ``max p``),
outcome ``y_i`` (binary: the label; multi-class: ``1{y = ŷ}``) and soft selection
``g̃_i ∈ (0, 1)``:

``L = λ₁ (Σ_{i,j} |y_i − r_i|^q |y_j − r_j|^q g̃_i g̃_j k(r_i, r_j))^{1/q} − λ₂ Σ_i log g̃_i``

with the Laplacian kernel ``k(r, r') = exp(−|r − r'| / width)``, ``width = 0.2``, ``q = 2``,
``λ₁ = |D|^{-1/2}`` and ``λ₂ = 10⁻² |D|^{-1}`` (App. B.2). The double sum is ``eᵀ K e`` with
``e_i = |y_i − r_i|^q g̃_i``: O(|D|²) time and memory per dataset (|D| = 512 by default).

The selector ``g̃ = σ(FF(φ_meta))`` is a feed-forward network with three ReLU layers of 64
units and one output logit (§4.5), trained in float32 on the CPU.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

#: Laplacian kernel width of App. B.2.
KERNEL_WIDTH = 0.2
#: Hidden units and ReLU layers of the selector (§4.5).
HIDDEN_UNITS, HIDDEN_LAYERS = 64, 3
#: Added inside the 1/q power so its gradient stays finite when every error is zero.
_ROOT_EPS = 1e-12


def default_lambdas(n: int) -> tuple[float, float]:
    """``(λ₁, λ₂) = (|D|^{-1/2}, 10⁻²·|D|^{-1})`` of App. B.2.

    Examples
    --------
    >>> default_lambdas(1024)
    (0.03125, 9.765625e-06)
    """
    return 1.0 / math.sqrt(n), 1e-2 / n


def smmce_loss_numpy(
    r: Any,
    y: Any,
    g: Any,
    *,
    q: float = 2.0,
    width: float = KERNEL_WIDTH,
    lambda1: float | None = None,
    lambda2: float | None = None,
) -> float:
    """Eq. 15 by its double sum, O(n²) in float64: the reference the torch loss is tested against.

    Examples
    --------
    Two rows, r = (.2, .6), y = (0, 1), g̃ = (.5, 1): e = (.04·.5, .16·1) = (.02, .16),
    k₁₂ = exp(−2); Σ = .02² + .16² + 2·.02·.16·e⁻² = .026866…, √Σ = .163909…:

    >>> round(smmce_loss_numpy([0.2, 0.6], [0, 1], [0.5, 1.0], lambda1=1.0, lambda2=0.0), 6)
    0.163909
    """
    r_ = np.asarray(r, dtype=np.float64)
    y_ = np.asarray(y, dtype=np.float64)
    g_ = np.asarray(g, dtype=np.float64)
    n = r_.shape[0]
    l1, l2 = default_lambdas(n)
    l1 = l1 if lambda1 is None else lambda1
    l2 = l2 if lambda2 is None else lambda2
    total = 0.0
    for i in range(n):
        for j in range(n):
            total += (
                abs(y_[i] - r_[i]) ** q
                * abs(y_[j] - r_[j]) ** q
                * g_[i]
                * g_[j]
                * math.exp(-abs(r_[i] - r_[j]) / width)
            )
    return float(l1 * total ** (1.0 / q) - l2 * np.sum(np.log(g_)))


def smmce_loss(
    r: Any,
    y: Any,
    logits: Any,
    *,
    q: float = 2.0,
    width: float = KERNEL_WIDTH,
    lambda1: float | None = None,
    lambda2: float | None = None,
) -> Any:
    """Eq. 15 for a batch of datasets, in torch: one loss per dataset, shape ``(B,)``.

    Parameters
    ----------
    r, y : torch.Tensor of shape (B, n)
        Confidences and 0/1 outcomes of ``B`` datasets of ``n`` rows (no gradient).
    logits : torch.Tensor of shape (B, n)
        The selector's logits; ``g̃ = σ(logits)`` and ``log g̃ = −softplus(−logits)``.
    q, width : float
        Power and Laplacian kernel width.
    lambda1, lambda2 : float, optional
        Default :func:`default_lambdas` of ``n``.

    Returns
    -------
    torch.Tensor of shape (B,)
    """
    import torch
    from torch.nn import functional

    n = r.shape[-1]
    l1, l2 = default_lambdas(n)
    l1 = l1 if lambda1 is None else lambda1
    l2 = l2 if lambda2 is None else lambda2
    g = torch.sigmoid(logits)
    e = torch.abs(y - r) ** q * g
    kernel = torch.exp(-torch.abs(r[..., :, None] - r[..., None, :]) / width)
    total = torch.bmm(torch.bmm(e[:, None, :], kernel), e[:, :, None])[:, 0, 0]  # eᵀ K e per dataset
    log_g = -functional.softplus(-logits)
    return l1 * (total + _ROOT_EPS) ** (1.0 / q) - l2 * log_g.sum(dim=-1)


def make_selector_network(n_features: int) -> Any:
    """``Linear → ReLU`` three times (64 units), then ``Linear → 1`` logit (002 §4.5)."""
    from torch import nn

    layers: list[Any] = []
    width = n_features
    for _ in range(HIDDEN_LAYERS):
        layers += [nn.Linear(width, HIDDEN_UNITS), nn.ReLU()]
        width = HIDDEN_UNITS
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


__all__ = ["KERNEL_WIDTH", "default_lambdas", "make_selector_network", "smmce_loss", "smmce_loss_numpy"]
