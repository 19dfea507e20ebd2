"""Compiled per-row scans of the conformal scores (numba, see :mod:`calwatch.engine._compiled`)."""

from __future__ import annotations

from typing import Any

import numpy as np

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


@compiled
def aps_two_rows(
    P: Any, u: Any, use_u: bool, penalised: bool, penalty_first: float, penalty_second: float, out: Any
) -> None:
    """APS/RAPS scores of two classes, row by row, as :func:`~calwatch.engine.conformal.scores.aps_scores`.

    The top class (class 1 only when strictly more probable) scores ``fl(p_t − fl(fl(1 − u)·p_t))``
    (``p_t`` when not randomised), the other ``fl(fl(p_o + p_t) − fl(fl(1 − u)·p_o))``, each plus
    its rank's penalty when penalised (λ > 0): the sorted path's operations in its order (numba
    compiles without fast-math, so no fused multiply-add changes a bit).
    """
    for i in range(P.shape[0]):
        p0 = P[i, 0]
        p1 = P[i, 1]
        top = 1 if p1 > p0 else 0
        p_top = p1 if top else p0
        p_other = p0 if top else p1
        first = p_top
        second = p_other + p_top
        if use_u:
            keep = 1.0 - u[i]
            first = first - keep * p_top
            second = second - keep * p_other
        if penalised:
            first = first + penalty_first
            second = second + penalty_second
        out[i, top] = first
        out[i, 1 - top] = second


@compiled
def splitmix64(z: Any) -> Any:
    """SplitMix64's finaliser of one uint64 (Steele, Lea & Flood 2014).

    A bijection of uint64 with full avalanche, as ``row_draws._mix`` computes it array-wide. The
    id check's pair hashes (:mod:`calwatch.scale.id_hashes`) call this one too.
    """
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@compiled
def integer_uniforms(values: Any, key: Any, out: Any) -> None:
    """``out[i] = ⌊mix(mix(values[i] + key)) / 2¹¹⌋ · 2⁻⁵³``: ``row_uniforms``' integer draws in one pass.

    Integer arithmetic modulo 2⁶⁴ and an exact conversion (``< 2⁵³``) times a power of two:
    the same doubles as the numpy passes, without their six temporaries.
    """
    scale = 2.0**-53
    for i in range(values.shape[0]):
        out[i] = np.float64(splitmix64(splitmix64(values[i] + key)) >> np.uint64(11)) * scale
