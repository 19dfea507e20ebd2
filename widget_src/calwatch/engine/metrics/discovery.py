"""Finding the slices where coverage falls short: exact one-sided binomial tests and FDR control.

Numerics only (arrays in, arrays out). :mod:`calwatch.monitor.slicing` asks these for every
slice of the data a user looks at; what the slices are and how they are counted lives in
:mod:`calwatch.stream.slices`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: The multiplicity controls :func:`step_up` knows: Benjamini–Hochberg (valid under positive
#: regression dependence, PRDS) and Benjamini–Yekutieli (valid under any dependence).
METHODS = ("bh", "by")
#: The shortfalls ``δ = t − q`` the e-values of :func:`shortfall_e_values` bet on, equally weighted.
SHORTFALLS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.4)
#: The e-values are capped at ``exp(690) ≈ 1e300`` (finite, and rejected at any level anyway).
LOG_E_MAX = 690.0


def _checked_counts(
    covered: npt.ArrayLike, labelled: npt.ArrayLike, target: npt.ArrayLike
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], FloatArray]:
    """``k``, ``n`` and ``t`` as arrays of one shape, checked (``0 ≤ k ≤ n``, ``0 < t < 1``)."""
    k = np.atleast_1d(np.asarray(covered, dtype=np.int64))
    n = np.atleast_1d(np.asarray(labelled, dtype=np.int64))
    t = np.broadcast_to(np.asarray(target, dtype=np.float64), n.shape)
    if k.shape != n.shape or np.any(k < 0) or np.any(k > n):
        msg = "covered and labelled must have one shape and 0 ≤ covered ≤ labelled"
        raise ValueError(msg)
    if np.any(~((t > 0.0) & (t < 1.0))):
        msg = "target must lie in (0, 1)"
        raise ValueError(msg)
    return k, n, t


def shortfall_p_values(covered: npt.ArrayLike, labelled: npt.ArrayLike, target: npt.ArrayLike) -> FloatArray:
    """Exact one-sided p-values against "coverage ≥ target": ``P(Bin(n, target) ≤ k)``.

    A slice whose ``n`` labelled rows are covered independently with probability ``c`` has
    ``k ~ Bin(n, c)`` covered rows. Under the null ``c ≥ t`` the chance of ``k`` or fewer is at
    most ``P(Bin(n, t) ≤ k)`` (the binomial's distribution function falls as ``c`` grows), so
    this p-value is valid (``P(p ≤ u) ≤ u`` for every ``u``), exactly, at every ``n``: no normal
    approximation. It is computed as the regularised incomplete beta function
    ``I_{1−t}(n − k, k + 1)`` (``scipy.special.bdtr``), accurate in the far tail where slices
    that truly fail land.

    When the rows of a slice are not identically covered (rows of several finer groups, each
    with its own rate), ``k`` is a sum of independent Bernoulli draws of mean rate ``c``; its
    lower tail below the mean is lighter than the binomial's (Hoeffding 1956), so the p-value
    stays valid, if conservative.

    Parameters
    ----------
    covered, labelled : array-like of int
        ``k`` and ``n`` per slice (``0 ≤ k ≤ n``).
    target : float or array-like of float
        The promised coverage ``t`` per slice, in (0, 1).

    Returns
    -------
    ndarray of float64
        One p-value per slice; 1.0 where ``n == 0`` (no evidence).

    Examples
    --------
    >>> p = shortfall_p_values([8, 10], [10, 10], 0.9)
    >>> round(float(p[0]), 6), float(p[1])  # P(Bin(10, 0.9) ≤ 8) = 1 − 0.9^10 − 10·0.9^9·0.1
    (0.263901, 1.0)
    """
    from scipy.special import bdtr  # on first use: `import calwatch` stays fast

    k, n, t = _checked_counts(covered, labelled, target)
    p = np.ones(n.shape, dtype=np.float64)
    tested = (n > 0) & (k < n)
    p[tested] = bdtr(k[tested], n[tested], t[tested])
    return np.clip(p, 0.0, 1.0)


def shortfall_e_values(
    covered: npt.ArrayLike,
    labelled: npt.ArrayLike,
    target: npt.ArrayLike,
    shortfalls: tuple[float, ...] = SHORTFALLS,
) -> FloatArray:
    """Anytime-valid e-values against "coverage ≥ target": a mixture of likelihood ratios.

    For a coverage ``q < t`` the likelihood ratio of ``k`` covered rows out of ``n``,

        L_q(n, k) = (q/t)^k · ((1 − q)/(1 − t))^(n − k),

    grows by the factor ``q/t`` for a covered row and ``(1 − q)/(1 − t)`` for a missed one. If
    each new labelled row is covered with probability ``c ≥ t`` given the rows before it, that
    factor has expectation ``c·q/t + (1 − c)(1 − q)/(1 − t) ≤ 1`` (equal at ``c = t``, falling
    in ``c`` since ``q < t``): ``L_q`` is a nonnegative supermartingale starting at 1, a *test
    supermartingale*, whatever order the labels come in. So is the average over
    ``q = t − δ`` for the shortfalls ``δ`` (those with ``q > 0``), the e-value returned, and by
    Ville's inequality ``P(sup_n E_n ≥ 1/u) ≤ u``: it may be read after every batch, and acted
    on at whatever moment it crosses, without inflating the error (Ramdas et al. 2023, "Game-
    theoretic statistics and safe anytime-valid inference"). It depends on ``(n, k)`` only, so
    pooled batches and late labels give it exactly.

    The price of reading it at any time is power at a fixed one: the exact binomial p-value of
    :func:`shortfall_p_values` is sharper for one planned look.

    Parameters
    ----------
    covered, labelled : array-like of int
        ``k`` and ``n`` per slice (``0 ≤ k ≤ n``).
    target : float or array-like of float
        The promised coverage ``t`` per slice, in (0, 1).
    shortfalls : tuple of float
        The shortfalls ``δ > 0`` mixed, equally weighted (default :data:`SHORTFALLS`).

    Returns
    -------
    ndarray of float64
        One e-value per slice; 1.0 where ``n == 0``; at most ``exp(LOG_E_MAX)``.

    Examples
    --------
    One missed row at ``t = 0.9``: each ``q = 0.9 − δ`` gives ``(1 − q)/0.1``, i.e. 1.1, 1.2,
    1.5, 2, 3 and 5 (mean 2.3); a covered row gives ``q/0.9`` (mean ≈ 0.86: evidence for the null).

    >>> [round(float(e), 4) for e in shortfall_e_values([0, 1], [1, 1], 0.9)]
    [2.3, 0.8556]
    """
    k, n, t = _checked_counts(covered, labelled, target)
    if not shortfalls or any(not 0.0 < d < 1.0 for d in shortfalls):
        msg = f"shortfalls must be numbers in (0, 1); got {shortfalls!r}"
        raise ValueError(msg)
    delta = np.asarray(shortfalls, dtype=np.float64)[:, None]
    q = t[None, :] - delta
    usable = q > 0.0  # a shortfall larger than the target has no coverage to bet on
    safe_q = np.where(usable, q, 0.5)
    log_l = k * np.log(safe_q / t) + (n - k) * np.log((1.0 - safe_q) / (1.0 - t))
    log_l = np.where(usable, log_l, -np.inf)
    top = log_l.max(axis=0)
    weights = usable.sum(axis=0)
    log_e = top + np.log(np.exp(log_l - top).sum(axis=0) / weights)
    e = np.exp(np.minimum(log_e, LOG_E_MAX))  # beyond ~1e300 all evidence is overwhelming alike
    e[n == 0] = 1.0
    return np.asarray(e, dtype=np.float64)


def e_bh(e_values: npt.ArrayLike, level: float) -> tuple[BoolArray, FloatArray]:
    """Which hypotheses the e-Benjamini–Hochberg procedure rejects at ``level``, and their adjusted values.

    With the ``m`` e-values sorted in decreasing order, ``e_(1) ≥ … ≥ e_(m)``, e-BH rejects the
    ``r`` largest, ``r`` the largest ``i`` with ``e_(i) ≥ m/(i·q)``. It controls the false
    discovery rate at ``q·m₀/m ≤ q`` under *any* dependence among the e-values (Wang & Ramdas
    2022, "False discovery rate control with e-values", JRSS-B 84(3)), and with e-values of
    test supermartingales read at a stopping time (each is an e-value there), at whatever
    moment the family is read and acted on.

    The adjusted value of a hypothesis, the smallest level that rejects it, is
    ``min_{j ≥ i} min(1, m/(j·e_(j)))``: rejected at ``q`` exactly when it is ``≤ q``. That is
    BH's step-up on ``p_j = min(1, 1/e_j)`` (an e-value's reciprocal is a valid p-value, and BH
    on these is e-BH), so :func:`step_up` computes it; only the validity argument differs.

    Examples
    --------
    >>> rejected, adjusted = e_bh([40.0, 5.0, 12.0, 0.5], 0.1)  # m/(i·q): 40, 20, 13.3, 10
    >>> rejected.tolist(), [round(float(a), 4) for a in adjusted]
    ([True, False, False, False], [0.1, 0.2667, 0.1667, 1.0])
    """
    e = np.atleast_1d(np.asarray(e_values, dtype=np.float64))
    if np.any(np.isnan(e)) or np.any(e < 0):
        msg = "e-values must be numbers ≥ 0"
        raise ValueError(msg)
    with np.errstate(divide="ignore"):
        return step_up(np.minimum(1.0, 1.0 / e), level, "bh")


def step_up(p_values: npt.ArrayLike, level: float, method: str = "bh") -> tuple[BoolArray, FloatArray]:
    """Which hypotheses a Benjamini–Hochberg (or –Yekutieli) step-up procedure rejects at ``level``.

    With the ``m`` p-values sorted, ``p_(1) ≤ … ≤ p_(m)``, BH rejects the ``r`` smallest, ``r``
    the largest ``i`` with ``p_(i) ≤ i·q/m``. When the p-values of true nulls are valid and
    positively regression dependent on each other (PRDS), the false discovery rate, the
    expected share of rejections that are true nulls, is at most ``q·m₀/m ≤ q`` (Benjamini &
    Yekutieli 2001, Theorem 1.2). BY divides ``q`` by ``Σ_{i≤m} 1/i`` (about ``ln m + 0.58``)
    and controls the FDR under any dependence, at that cost in power.

    The adjusted p-value ("q-value") of a hypothesis is the smallest level at which it would be
    rejected: ``min_{j ≥ i} min(1, c·m·p_(j)/j)``, ``c = 1`` (BH) or ``Σ 1/i`` (BY); a hypothesis
    is rejected at ``q`` exactly when its adjusted p-value is ``≤ q``.

    Parameters
    ----------
    p_values : array-like of float
        One valid p-value per hypothesis of the family.
    level : float
        The FDR level ``q``, in (0, 1).
    method : {"bh", "by"}
        Benjamini–Hochberg or Benjamini–Yekutieli.

    Returns
    -------
    rejected : ndarray of bool
    adjusted : ndarray of float64
        In the order of ``p_values``.

    Examples
    --------
    >>> rejected, adjusted = step_up([0.01, 0.04, 0.03, 0.5], 0.1)
    >>> rejected.tolist(), [round(float(a), 4) for a in adjusted]
    ([True, True, True, False], [0.04, 0.0533, 0.0533, 0.5])
    """
    if method not in METHODS:
        msg = f"method must be one of {METHODS}; got {method!r}"
        raise ValueError(msg)
    if not (isinstance(level, int | float) and 0.0 < float(level) < 1.0):
        msg = f"level must be a number in (0, 1); got {level!r}"
        raise ValueError(msg)
    p = np.atleast_1d(np.asarray(p_values, dtype=np.float64))
    m = p.shape[0]
    if m == 0:
        return np.zeros(0, dtype=bool), np.zeros(0, dtype=np.float64)
    if np.any(np.isnan(p)) or np.any((p < 0) | (p > 1)):
        msg = "p-values must lie in [0, 1]"
        raise ValueError(msg)
    c = float(np.sum(1.0 / np.arange(1, m + 1))) if method == "by" else 1.0
    order = np.argsort(p, kind="stable")
    ranked = c * m * p[order] / np.arange(1, m + 1)
    adjusted_sorted = np.minimum(np.minimum.accumulate(ranked[::-1])[::-1], 1.0)
    adjusted = np.empty(m, dtype=np.float64)
    adjusted[order] = adjusted_sorted
    return adjusted <= float(level), adjusted


__all__ = ["METHODS", "SHORTFALLS", "e_bh", "shortfall_e_values", "shortfall_p_values", "step_up"]
