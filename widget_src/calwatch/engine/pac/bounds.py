"""The PAC bounds: how many calibration rows may fall outside their sets (paper 003 §3.3).

This module computes ``k*``, the largest number of the ``n`` calibration rows that may lie
outside their confidence sets for ``P[L(C) > ε] < δ``, and the smallest ``n`` for which a
``k*`` exists; nothing else.

- :func:`binomial_k_star`: the direct bound of Theorem 1 (Eq. 8), :func:`binomial_min_n`.
- :func:`vc_k_star`: the looser VC alternative (Eq. 7), with :func:`vc_alpha` and :func:`vc_min_n`.
- :func:`pac_k_star`, :func:`pac_min_n`: either, by name (:data:`BOUND_NAMES`).
- :class:`PACInfeasibleError`: no ``k*`` exists for these ``ε``, ``δ`` and ``n``.

The calibrators that use these bounds live in :mod:`calwatch.engine.pac.sets`.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Literal

import numpy as np

BoundName = Literal["binomial", "vc"]

#: The bounds :class:`~calwatch.engine.pac.sets.PACConfidenceSets` and
#: :class:`~calwatch.engine.pac.sets.PACGaussianRegression` accept.
BOUND_NAMES: tuple[BoundName, ...] = ("binomial", "vc")
#: Up to this ``n``, a binomial CDF within :data:`_BORDERLINE_RTOL` of ``δ`` is re-decided in
#: exact integer arithmetic (scipy's CDF is accurate to ~1e-13 relative).
EXACT_CHECK_MAX_N = 2_000
_BORDERLINE_RTOL = 1e-9


class PACInfeasibleError(ValueError):
    """No PAC set exists for these ``ε``, ``δ`` and ``n``: even ``k* = 0`` violates the bound.

    Attributes
    ----------
    n : int
        The number of calibration rows the bound was asked for.
    n_required : int
        The smallest number of rows for which the bound is feasible (``k* = 0`` works).
    """

    def __init__(self, message: str, *, n: int, n_required: int) -> None:
        super().__init__(message)
        self.n = n
        self.n_required = n_required


# ----------------------------------------------------------------------------- validation
def _check_level(value: Any, name: str) -> float:
    """``ε`` or ``δ``: a real number in the open interval (0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        msg = f"{name} must be a number in (0, 1); got {value!r}"
        raise TypeError(msg)
    out = float(value)
    if not 0.0 < out < 1.0:
        msg = f"{name} must be in (0, 1); got {value!r}"
        raise ValueError(msg)
    return out


def _check_n(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        msg = f"n must be a positive integer (number of calibration rows); got {n!r}"
        raise TypeError(msg)
    if n < 1:
        msg = f"n must be a positive integer (number of calibration rows); got {n!r}"
        raise ValueError(msg)
    return int(n)


def _check_bound(bound: Any) -> BoundName:
    if bound not in BOUND_NAMES:
        msg = f"bound must be one of {BOUND_NAMES}; got {bound!r}"
        raise ValueError(msg)
    out: BoundName = bound
    return out


# --------------------------------------------------------------------------------- bounds
def _exact_cdf_below(k: int, n: int, epsilon: float, delta: float) -> bool:
    """``Σ_{i≤k} C(n,i) ε^i (1−ε)^{n−i} < δ`` in exact integer arithmetic (the floats as given)."""
    eps, dlt = Fraction(epsilon), Fraction(delta)
    a, b = eps.numerator, eps.denominator  # ε = a / b
    c = b - a
    # Σ C(n,i) a^i c^(n−i) over b^n, accumulated term by term from i = 0.
    term = c**n
    total = term
    for i in range(1, k + 1):
        term = term * (n - i + 1) * a // (i * c) if c else 0
        total += term
    return bool(total * dlt.denominator < dlt.numerator * b**n)


def _binomial_feasible(k: int, n: int, epsilon: float, delta: float) -> bool:
    """Whether ``P[Binomial(n, ε) ≤ k] < δ``."""
    from scipy.stats import binom  # on first use: `import calwatch` stays fast

    cdf = float(binom.cdf(k, n, epsilon))
    if n <= EXACT_CHECK_MAX_N and abs(cdf - delta) <= _BORDERLINE_RTOL * delta:
        return _exact_cdf_below(k, n, epsilon, delta)
    return cdf < delta


def binomial_min_n(epsilon: float, delta: float) -> int:
    """Smallest ``n`` for which the binomial bound is feasible: ``(1 − ε)^n < δ``.

    That is ``n > log δ / log(1 − ε)`` (``k* = 0``; paper 003 App. A.2 gives the simpler
    sufficient ``n ≥ log(1/δ)/ε``).

    Examples
    --------
    >>> binomial_min_n(0.01, 1e-5)  # log(1e-5) / log(0.99) = 1145.5
    1146
    """
    eps, dlt = _check_level(epsilon, "epsilon"), _check_level(delta, "delta")
    n = max(1, math.floor(math.log(dlt) / math.log1p(-eps)) + 1)
    # Settle the floating-point edge with the same CDF the bound uses.
    while n > 1 and _binomial_feasible(0, n - 1, eps, dlt):
        n -= 1
    while not _binomial_feasible(0, n, eps, dlt):
        n += 1
    return n


def binomial_k_star(n: int, epsilon: float, delta: float) -> int:
    """``k* = max{k ∈ {0..n} : Σ_{i=0}^{k} C(n,i) ε^i (1−ε)^{n−i} < δ}`` (paper 003 Eq. 8).

    With ``T̂`` chosen so that at most ``k*`` of ``n`` calibration rows fall outside their sets,
    ``P[L(C) > ε] < δ`` (Theorem 1). The binomial CDF is scipy's (Boost's incomplete beta,
    relative error ~1e-13 even for ``n = 10^7``); it is monotone in ``k``, so ``k*`` is found by
    binary search in ``O(log n)`` CDF evaluations. For ``n ≤ 2,000`` a CDF within 1e-9 of ``δ``
    is re-decided exactly (integer arithmetic on the given floats).

    Parameters
    ----------
    n : int
        Number of calibration rows, ``≥ 1``.
    epsilon, delta : float
        Error level ``ε`` and failure probability ``δ``, each in (0, 1).

    Returns
    -------
    int
        ``k*`` in ``0..n−1``.

    Raises
    ------
    PACInfeasibleError
        Even ``k = 0`` fails (``(1 − ε)^n ≥ δ``); the message and ``n_required`` give the
        smallest ``n`` that works.

    Examples
    --------
    >>> binomial_k_star(20_000, 0.01, 1e-5)  # P[Bin ≤ 142] = 8.7e-6 < 1e-5 ≤ P[Bin ≤ 143] = 1.2e-5
    142
    """
    n = _check_n(n)
    eps, dlt = _check_level(epsilon, "epsilon"), _check_level(delta, "delta")
    if not _binomial_feasible(0, n, eps, dlt):
        needed = binomial_min_n(eps, dlt)
        msg = (
            f"infeasible: no PAC confidence set for ε={eps:g}, δ={dlt:g} with n={n:,} calibration "
            f"rows (even k*=0 needs (1−ε)^n < δ); the binomial bound needs n ≥ {needed:,}"
        )
        raise PACInfeasibleError(msg, n=n, n_required=needed)
    lo, hi = 0, n  # invariant: lo feasible, hi infeasible (the CDF at k = n is 1 ≥ δ)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _binomial_feasible(mid, n, eps, dlt):
            lo = mid
        else:
            hi = mid
    return lo


def vc_alpha(n: int, epsilon: float, delta: float) -> float:
    """``α = ε − sqrt((log 2n + 1 − log(δ/4)) / n)`` (paper 003 §3.3 after Eq. 7; natural log).

    Examples
    --------
    >>> round(vc_alpha(2_000, 0.1, 0.1), 6)
    0.01943
    """
    n = _check_n(n)
    eps, dlt = _check_level(epsilon, "epsilon"), _check_level(delta, "delta")
    return eps - math.sqrt((math.log(2 * n) + 1.0 - math.log(dlt / 4.0)) / n)


def vc_min_n(epsilon: float, delta: float) -> int:
    """Smallest ``n`` with ``vc_alpha(n, ε, δ) ≥ 0``, i.e. ``n ε² ≥ log 2n + 1 + log(4/δ)``.

    Examples
    --------
    >>> vc_min_n(0.1, 0.1)  # 12.52 ≥ log 2504 + 1 + log 40 = 12.515; n = 1251 misses
    1252
    """
    eps, dlt = _check_level(epsilon, "epsilon"), _check_level(delta, "delta")

    def ok(n: int) -> bool:
        return vc_alpha(n, eps, dlt) >= 0.0

    # g(n) = n ε² − log 2n − 1 − log(4/δ) is negative for n ≤ 1/ε² and increasing after it.
    lo = max(1, math.floor(1.0 / eps**2))
    hi = lo
    while not ok(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi if not ok(lo) else lo


def vc_k_star(n: int, epsilon: float, delta: float) -> int:
    """``k* = ⌊α n⌋`` with :func:`vc_alpha`'s ``α`` (the VC alternative, paper 003 Eq. 7).

    The constraint of problem (3), ``L̂(C_T) ≤ α``, allows at most ``⌊α n⌋`` calibration rows
    outside their sets; the VC bound (VC dimension 1) then gives ``P[L(C) > ε] < δ``.

    Raises
    ------
    PACInfeasibleError
        ``α < 0``; the message and ``n_required`` give the smallest ``n`` with ``α ≥ 0``.

    Examples
    --------
    >>> vc_k_star(2_000, 0.1, 0.1)  # α n = 0.019430 · 2000 = 38.86
    38
    """
    n = _check_n(n)
    alpha = vc_alpha(n, epsilon, delta)
    if alpha < 0.0:
        needed = vc_min_n(epsilon, delta)
        msg = (
            f"infeasible: the VC bound gives α = {alpha:.4g} < 0 for ε={float(epsilon):g}, "
            f"δ={float(delta):g} and n={n:,} calibration rows; it needs n ≥ {needed:,} "
            f"(the binomial bound needs only n ≥ {binomial_min_n(epsilon, delta):,})"
        )
        raise PACInfeasibleError(msg, n=n, n_required=needed)
    return min(math.floor(alpha * n), n - 1)


def pac_k_star(n: int, epsilon: float, delta: float, bound: BoundName = "binomial") -> int:
    """``k*`` from the chosen bound: :func:`binomial_k_star` or :func:`vc_k_star`."""
    if _check_bound(bound) == "vc":
        return vc_k_star(n, epsilon, delta)
    return binomial_k_star(n, epsilon, delta)


def pac_min_n(epsilon: float, delta: float, bound: BoundName = "binomial") -> int:
    """Smallest number of calibration rows for which ``bound`` is feasible."""
    if _check_bound(bound) == "vc":
        return vc_min_n(epsilon, delta)
    return binomial_min_n(epsilon, delta)


__all__ = [
    "BOUND_NAMES",
    "EXACT_CHECK_MAX_N",
    "BoundName",
    "PACInfeasibleError",
    "binomial_k_star",
    "binomial_min_n",
    "pac_k_star",
    "pac_min_n",
    "vc_alpha",
    "vc_k_star",
    "vc_min_n",
]
