"""Compiled per-row scans of the conformal scores (numba, see :mod:`calwatch.engine._compiled`)."""

from __future__ import annotations

from typing import Any

from calwatch.engine._compiled import compiled


@compiled
def rank_sum_rows(P: Any, y: Any, u: Any, use_u: bool, raps_lambda: float, raps_k_reg: int, out: Any) -> None:
    """Each row's APS/RAPS label score by one scan of its classes (no sort, no temporaries).

    ``s = Σ_{c ranked before y} p_c [+ λ·max(0, rank − k_reg)] + u·p_y`` (``u = 1`` unless
    ``use_u``), a class ranking before ``y`` when its probability is larger, or equal with a
    lower index; written to ``out``.
    """
    m, K = P.shape
    for i in range(m):
        label = y[i]
        p_y = P[i, label]
        total = 0.0
        rank = 1
        for c in range(K):  # branch-free, so the compiler can vectorise the scan
            v = P[i, c]
            before = (v > p_y) | ((v == p_y) & (c < label))
            total += v * before
            rank += before
        if raps_lambda > 0.0:
            total += raps_lambda * max(0, rank - raps_k_reg)
        out[i] = total + (u[i] * p_y if use_u else p_y)
