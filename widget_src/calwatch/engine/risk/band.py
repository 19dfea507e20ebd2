"""A finite-sample band for a batch's realised error around a calibrated estimate.

The ``"guarded"`` :class:`~calwatch.engine.risk.estimator.RiskEstimator` splits its labelled
calibration rows (seeded) into a fitting part ``A`` and a held-out part ``H`` of ``n_H`` rows.
The calibration map ``r`` (isotonic regression of top-k correctness on top-k confidence) is
fitted on ``A`` only, so, conditionally on ``A``, ``r`` is a fixed function. For a row write
``Z = 1{Y ∉ I(X)}`` (the top-k output misses) and ``D = Z − r(X) ∈ [−1, 1]``, with mean
``μ = E D`` (the map's bias) and second moment ``E D² ≥ Var D``.

For a batch ``B`` of ``m`` unlabelled rows the point estimate is ``α̂_B = mean_{i∈B} r(X_i)``
and the realised (later observed) error is ``E_B = mean_{i∈B} Z_i``, so

    ``E_B − α̂_B − μ̂_H = (D̄_B − μ) − (D̄_H − μ)``,   ``μ̂_H = D̄_H = mean_{j∈H} (Z_j − r(X_j))``.

**Null** (what the band assumes): conditionally on ``A``, the held-out rows and the batch's
rows are independent draws from one distribution (e.g. all rows i.i.d., or ``H`` and the batch
drawn without replacement from one pool: Hoeffding (1963, Thm. 4) shows that every bound below,
a Chernoff bound, holds for sampling without replacement too).

**Promise**: ``P(E_B ∈ [α̂_B + μ̂_H − w, α̂_B + μ̂_H + w]) ≥ 1 − δ`` over the draw of ``H`` and
of the batch, with ``w = t(n_H) + t(m)``. The three events below each fail with probability at
most ``δ/3`` (a union bound, no independence needed between them):

1. ``E D² ≤ σ̄² = min(1, mean_H D² + sqrt(log(3/δ) / (2 n_H)))`` — Hoeffding's one-sided bound
   for ``D² ∈ [0, 1]``;
2. ``|D̄_H − μ| ≤ t_{n_H}(Var D)`` and 3. ``|D̄_B − μ| ≤ t_m(Var D)`` — Bernstein's inequality
   ``P(|X̄_n − μ| ≥ t) ≤ 2 exp(−n t² / (2σ² + 2bt/3))`` with ``|D − μ| ≤ b = 2``, solved for
   ``t`` at level ``δ/3``: ``t_n(σ²) = (bL/3 + sqrt((bL/3)² + 2nσ²L)) / n``, ``L = log(6/δ)``.

``t_n`` increases in ``σ²``, so on event 1 ``t_n(Var D) ≤ t_n(σ̄²)``, and on all three
``|E_B − α̂_B − μ̂_H| ≤ t_{n_H}(σ̄²) + t_m(σ̄²)``. Bernstein rather than Hoeffding because
``Var D`` is about the Brier score of ``r`` (≈ the error rate for a calibrated, confident model),
far below the range bound: at ``n_H = m = 1,000``, ``δ = .05`` and an error rate near .1
(``E D² ≈ .09``) the half-width is about .08 instead of Hoeffding's .20. The band widens as
``1/sqrt(m)``: a batch of 10 rows gets (correctly) a band of little use. The band says nothing
about a batch drawn from another distribution: that a realised error leaves it is evidence of a
shift (or a 1-in-1/δ event).
"""

from __future__ import annotations

import math

#: ``|D − μ| ≤ b`` for ``D = Z − r(X) ∈ [−1, 1]`` and its mean ``μ ∈ [−1, 1]``: the range term of
#: Bernstein's inequality. (``b = 1 + |μ|`` would do; ``2`` keeps the bound free of ``μ``.)
BERNSTEIN_RANGE = 2.0


def check_delta(delta: object) -> float:
    """Validate the band's miss probability ``δ``: a float in ``(0, 1)``."""
    if isinstance(delta, bool) or not isinstance(delta, int | float) or not 0.0 < float(delta) < 1.0:
        msg = f"delta must be a number in (0, 1); got {delta!r}"
        raise ValueError(msg)
    return float(delta)


def variance_bound(second_moment: float, n_holdout: int, delta: float) -> float:
    """``σ̄² = min(1, mean_H D² + sqrt(log(3/δ) / (2 n_H)))``: an upper bound on ``E D²`` (event 1).

    Examples
    --------
    ``mean D² = .1``, ``n_H = 1,000``, ``δ = .05``: ``sqrt(log 60 / 2000) = .0452``.

    >>> round(variance_bound(0.1, 1000, 0.05), 4)
    0.1452
    """
    if n_holdout < 1:
        msg = f"n_holdout must be ≥ 1; got {n_holdout!r}"
        raise ValueError(msg)
    return min(1.0, second_moment + math.sqrt(math.log(3.0 / delta) / (2.0 * n_holdout)))


def bernstein_halfwidth(n: int, variance: float, delta: float) -> float:
    """``t_n(σ²)``: the Bernstein deviation of a mean of ``n`` rows at level ``δ/3`` (events 2, 3).

    Solves ``2 exp(−n t² / (2σ² + 2bt/3)) = δ/3`` for ``t > 0`` with ``b = 2``:
    ``t = (bL/3 + sqrt((bL/3)² + 2nσ²L)) / n``, ``L = log(6/δ)``.

    Examples
    --------
    ``n = 1,000``, ``σ² = .1452``, ``δ = .05``: ``L = log 120 = 4.7875``, ``bL/3 = 3.1917``,
    ``t = (3.1917 + sqrt(10.187 + 1390.2)) / 1000 = .04061``.

    >>> round(bernstein_halfwidth(1000, 0.1452, 0.05), 5)
    0.04061
    """
    if n < 1:
        msg = f"n must be ≥ 1; got {n!r}"
        raise ValueError(msg)
    log_term = math.log(6.0 / delta)
    linear = BERNSTEIN_RANGE * log_term / 3.0
    return (linear + math.sqrt(linear * linear + 2.0 * n * variance * log_term)) / n


__all__ = ["BERNSTEIN_RANGE", "bernstein_halfwidth", "check_delta", "variance_bound"]
