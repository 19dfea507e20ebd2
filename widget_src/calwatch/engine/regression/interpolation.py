"""Interpolation of sorted calibration scores into a CDF of the score (ALGORITHMS.md §3; 001 §4.3).

Given sorted calibration scores ``s_(1) ≤ … ≤ s_(n)``, an interpolation is a non-decreasing map
``q: ℝ → [0, 1]`` with ``q(s_(i)) ≈ i/(n+1)``. The calibrated CDF of a test row is then
``F(y | x) = q(φ(h(x), y))``. Four interpolations:

- :class:`NaiveInterpolation`: ``q(s) = #{i : s_i ≤ s}/(n+1)`` (a step function);
- :class:`LinearInterpolation`: linear through ``(s_(i), i/(n+1))`` plus end knots ``(s_(0), 0)``
  and ``(s_(n+1), 1)`` one mean gap beyond the extremes (clamped to the score's range); tied
  scores become one knot at their mean level;
- :class:`RandomInterpolation`: Vovk et al. (2020),
  ``q(s) = (#{s_i < s} + u·(#{s_i = s} + 1))/(n+1)`` with one ``u ~ U(0, 1)`` per test row;
- :class:`NAFInterpolation`: a monotone network (a sigmoidal flow: a softmax-weighted sum of
  logistic units with positive slopes) fitted by torch to the knots of "linear"; smooth, with a
  density everywhere and logistic tails.

Each evaluates ``q`` (:meth:`~Interpolation.cdf`), its generalised inverse ``inf{s : q(s) ≥ p}``
(:meth:`~Interpolation.ppf`) and, where ``q`` is continuous, its derivative. Evaluating ``q`` or
its inverse costs ``O(log n)`` per point (a binary search in the sorted scores) for the first
three, and ``O(H)`` (the number of units, independent of ``n``) for NAF.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt
from scipy.special import expit, ndtri

from calwatch.engine.regression.scores import TransformName, solve_increasing

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
InterpolationName = Literal["naive", "linear", "random", "naf"]

#: Interpolation algorithms (paper 001 §4.3).
INTERPOLATIONS: tuple[InterpolationName, ...] = ("linear", "naive", "random", "naf")
# p(n+1) is often an integer in exact arithmetic but lands a few ulps above it in floating point
# (0.95·20 = 19.000000000000004): this slack keeps ⌈·⌉ from stepping one order statistic too far.
_ROUNDING_SLACK = 1e-9
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _order_statistic(sorted_scores: FloatArray, k: npt.NDArray[Any]) -> FloatArray:
    """``s_(k)`` (1-based) elementwise: ``-inf`` for ``k ≤ 0`` and ``+inf`` for ``k > n``."""
    n = sorted_scores.shape[0]
    idx = np.clip(k, 1, n).astype(np.intp) - 1
    out = sorted_scores[idx]
    out = np.where(k <= 0, -math.inf, out)
    result: FloatArray = np.where(k > n, math.inf, out)
    return result


class Interpolation(ABC):
    """A fitted interpolation ``q`` of sorted calibration scores.

    Attributes
    ----------
    kind : str
        ``"naive"``, ``"linear"``, ``"random"`` or ``"naf"``.
    continuous : bool
        ``q`` is continuous with a derivative almost everywhere (the calibrated density exists).
    row_independent : bool
        ``q`` is the same function for every test row (not so for ``"random"``, whose ``u`` is drawn
        per row); then ``ppf`` at shared levels is solved once for all rows.
    proper : bool
        ``q(−∞) = 0`` and ``q(+∞) = 1``. Naive and random put mass ``≤ 1/(n+1)`` at ``±∞``.
    """

    kind: ClassVar[InterpolationName]
    continuous: ClassVar[bool]
    row_independent: ClassVar[bool] = True
    proper: ClassVar[bool]

    def __init__(self, sorted_scores: FloatArray, score_range: tuple[float, float]) -> None:
        self.sorted_scores = sorted_scores
        self.score_range = score_range
        self.n = int(sorted_scores.shape[0])
        self._moment_cache: dict[
            tuple[tuple[float, ...], str], tuple[FloatArray, FloatArray, FloatArray]
        ] = {}

    @abstractmethod
    def cdf(self, s: FloatArray, u: FloatArray | None = None) -> FloatArray:
        """``q(s)`` elementwise (``u`` is broadcast against ``s``; only ``"random"`` uses it)."""

    @abstractmethod
    def ppf(self, p: FloatArray, u: FloatArray | None = None) -> FloatArray:
        """``inf{s : q(s) ≥ p}`` elementwise, for ``p`` in ``[0, 1]``."""

    def density(self, s: FloatArray) -> FloatArray:
        """``q'(s)`` (continuous interpolations only)."""
        msg = f"interpolation={self.kind!r} gives a step CDF without a density; use 'linear' or 'naf'"
        raise ValueError(msg)

    def improper_mass(self, u: FloatArray | None = None) -> tuple[FloatArray | float, FloatArray | float]:
        """Mass at ``−∞`` and at ``+∞`` (``q(−∞)`` and ``1 − q(+∞)``)."""
        return 0.0, 0.0

    def support(self) -> tuple[float, float]:
        """Smallest and largest score of the finite part of the distribution.

        For the step interpolations: the extreme calibration scores strictly inside the score's
        range (a ``cdf`` score that rounded to 0 or 1 maps to an infinite label).
        """
        s = self.sorted_scores
        inside = s[(s > self.score_range[0]) & (s < self.score_range[1])]
        if inside.shape[0] == 0:
            return self.score_range
        return float(inside[0]), float(inside[-1])

    def partial_moments(
        self, breaks: tuple[float, ...], transform: TransformName
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """``E[g(S)^k · 1{S ∈ segment j}]`` for ``k = 0, 1, 2`` under ``S ~ q``, segments cut at ``breaks``.

        Cached per ``(breaks, transform)``: it does not depend on the test row.
        """
        key = (breaks, transform)
        if key not in self._moment_cache:
            self._moment_cache[key] = self._partial_moments(np.asarray(breaks, dtype=np.float64), transform)
        return self._moment_cache[key]

    def _partial_moments(
        self, breaks: FloatArray, transform: TransformName
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        msg = f"interpolation={self.kind!r} is improper (mass at ±∞): it has no mean or variance"
        raise ValueError(msg)

    def state(self) -> tuple[dict[str, FloatArray], dict[str, Any]]:
        """Arrays and JSON-able values beyond the sorted scores (NAF weights)."""
        return {}, {}


# ------------------------------------------------------------------------- naive
class NaiveInterpolation(Interpolation):
    """``q(s) = #{i : s_i ≤ s}/(n+1)``: right-continuous steps, mass ``1/(n+1)`` at ``+∞``.

    Examples
    --------
    >>> q = NaiveInterpolation(np.array([1.0, 2.0, 4.0, 7.0]), (-np.inf, np.inf))
    >>> q.cdf(np.array([0.0, 1.0, 3.0, 7.0])).tolist()
    [0.0, 0.2, 0.4, 0.8]
    >>> q.ppf(np.array([0.0, 0.2, 0.5, 0.9])).tolist()  # 0.9·5 = 4.5 → s_(5) = +inf
    [-inf, 1.0, 4.0, inf]
    """

    kind = "naive"
    continuous = False
    proper = False

    def cdf(self, s: FloatArray, u: FloatArray | None = None) -> FloatArray:
        """See :meth:`Interpolation.cdf`."""
        out: FloatArray = np.searchsorted(self.sorted_scores, s, side="right") / (self.n + 1.0)
        return out

    def ppf(self, p: FloatArray, u: FloatArray | None = None) -> FloatArray:
        """See :meth:`Interpolation.ppf`."""
        k = np.ceil(p * (self.n + 1.0) - _ROUNDING_SLACK)
        return _order_statistic(self.sorted_scores, k)

    def improper_mass(self, u: FloatArray | None = None) -> tuple[FloatArray | float, FloatArray | float]:
        """See :meth:`Interpolation.improper_mass`."""
        return 0.0, 1.0 / (self.n + 1.0)


# ------------------------------------------------------------------------- random
class RandomInterpolation(Interpolation):
    """Vovk et al. (2020): ``q(s) = (#{s_i < s} + u·(#{s_i = s} + 1))/(n+1)``, one ``u`` per test row.

    For exchangeable continuous scores ``q(φ(y_test))`` is exactly uniform (0-calibrated).
    ``q(−∞) = u/(n+1)`` and ``q(+∞) = (n+u)/(n+1)``: the distribution is improper.

    Examples
    --------
    >>> q = RandomInterpolation(np.array([1.0, 2.0, 2.0, 7.0]), (-np.inf, np.inf))
    >>> # (0 + .5)/5, (1 + .5·3)/5, (3 + .5)/5
    >>> q.cdf(np.array([0.0, 2.0, 5.0]), u=np.array([0.5, 0.5, 0.5])).tolist()
    [0.1, 0.5, 0.7]
    """

    kind = "random"
    continuous = False
    row_independent = False
    proper = False

    def cdf(self, s: FloatArray, u: FloatArray | None = None) -> FloatArray:
        """See :meth:`Interpolation.cdf`."""
        if u is None:
            msg = "random interpolation needs u (one uniform draw per test row)"
            raise ValueError(msg)
        below = np.searchsorted(self.sorted_scores, s, side="left")
        not_above = np.searchsorted(self.sorted_scores, s, side="right")
        out: FloatArray = (below + u * (not_above - below + 1.0)) / (self.n + 1.0)
        return out

    def ppf(self, p: FloatArray, u: FloatArray | None = None) -> FloatArray:
        """See :meth:`Interpolation.ppf`."""
        if u is None:
            msg = "random interpolation needs u (one uniform draw per test row)"
            raise ValueError(msg)
        # q = (k + u)/(n+1) just above s_(k): the smallest such k with (k + u)/(n+1) ≥ p
        k = np.ceil(p * (self.n + 1.0) - u - _ROUNDING_SLACK)
        return _order_statistic(self.sorted_scores, k)

    def improper_mass(self, u: FloatArray | None = None) -> tuple[FloatArray | float, FloatArray | float]:
        """See :meth:`Interpolation.improper_mass`."""
        if u is None:
            return 0.5 / (self.n + 1.0), 0.5 / (self.n + 1.0)
        return u / (self.n + 1.0), (1.0 - u) / (self.n + 1.0)


# ------------------------------------------------------------------------- linear
def linear_knots(
    sorted_scores: FloatArray, score_range: tuple[float, float]
) -> tuple[FloatArray, FloatArray]:
    """Knots ``(x, level)`` of the linear interpolation, both strictly increasing.

    Interior knots ``(s_(i), i/(n+1))``; tied scores merge into one knot at their mean level. End
    knots ``(s_(1) − g, 0)`` and ``(s_(n) + g, 1)`` with ``g`` the mean gap ``(s_(n) − s_(1))/(n − 1)``,
    clamped to the score's range (an end knot that lands on an interior one merges with it).

    Examples
    --------
    >>> x, level = linear_knots(np.array([1.0, 2.0, 2.0, 7.0]), (-np.inf, np.inf))
    >>> x.tolist(), level.tolist()  # gap = 6/3 = 2; the tie at 2 sits at (2+3)/2 / 5
    ([-1.0, 1.0, 2.0, 7.0, 9.0], [0.0, 0.2, 0.5, 0.8, 1.0])
    """
    n = sorted_scores.shape[0]
    values, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    if values.shape[0] < 2:
        msg = (
            f"linear and NAF interpolation need at least 2 distinct calibration scores; got {n} scores"
            f" with {values.shape[0]} distinct value(s)"
        )
        raise ValueError(msg)
    levels = (first + (counts + 1) / 2.0) / (n + 1.0)
    gap = (values[-1] - values[0]) / (n - 1)
    lo = max(values[0] - gap, score_range[0])
    hi = min(values[-1] + gap, score_range[1])
    x = np.concatenate(([lo], values, [hi]))
    level = np.concatenate(([0.0], levels, [1.0]))
    if x[1] <= x[0]:  # clamped onto the lowest score: one knot, the jump from 0 at the range's end
        x, level = x[1:], np.concatenate(([0.0], level[2:]))
        x[0] = lo
    if x[-1] <= x[-2]:
        x, level = x[:-1], np.concatenate((level[:-2], [1.0]))
        x[-1] = hi
    return np.ascontiguousarray(x), np.ascontiguousarray(level)


def _uniform_moments(a: FloatArray, b: FloatArray, transform: TransformName) -> tuple[FloatArray, FloatArray]:
    """Mean of ``g(S)`` and of ``g(S)²`` for ``S`` uniform on ``[a, b]`` (closed form)."""
    if transform == "identity":
        return 0.5 * (a + b), (a * a + a * b + b * b) / 3.0
    # g = Φ⁻¹: ∫Φ⁻¹(s) ds = −φ(Φ⁻¹(s)), ∫Φ⁻¹(s)² ds = s − Φ⁻¹(s)·φ(Φ⁻¹(s))   (t = Φ⁻¹(s))
    ta, tb = ndtri(np.clip(a, 0.0, 1.0)), ndtri(np.clip(b, 0.0, 1.0))
    with np.errstate(invalid="ignore", over="ignore"):
        pa = np.where(np.isfinite(ta), _INV_SQRT_2PI * np.exp(-0.5 * ta * ta), 0.0)
        pb = np.where(np.isfinite(tb), _INV_SQRT_2PI * np.exp(-0.5 * tb * tb), 0.0)
        tpa = np.where(np.isfinite(ta), ta * pa, 0.0)
        tpb = np.where(np.isfinite(tb), tb * pb, 0.0)
    width = b - a
    narrow = width <= 1e-12
    safe = np.where(narrow, 1.0, width)
    mid = ndtri(np.clip(0.5 * (a + b), 0.0, 1.0))
    m1 = np.where(narrow, mid, (pa - pb) / safe)
    m2 = np.where(narrow, mid * mid, (width - (tpb - tpa)) / safe)
    return np.asarray(m1, dtype=np.float64), np.asarray(m2, dtype=np.float64)


class LinearInterpolation(Interpolation):
    """Piecewise linear through the knots of :func:`linear_knots`; 0 below and 1 above them.

    Examples
    --------
    >>> q = LinearInterpolation(np.array([1.0, 2.0, 4.0, 7.0]), (-np.inf, np.inf))
    >>> # knots (-1, 0) (1, .2) (2, .4) (4, .6) (7, .8) (9, 1)
    >>> np.round(q.cdf(np.array([-1.0, 1.5, 3.0, 8.0])), 12).tolist()
    [0.0, 0.3, 0.5, 0.9]
    >>> q.ppf(np.array([0.0, 0.5, 1.0])).tolist()
    [-1.0, 3.0, 9.0]
    """

    kind = "linear"
    continuous = True
    proper = True

    def __init__(self, sorted_scores: FloatArray, score_range: tuple[float, float]) -> None:
        super().__init__(sorted_scores, score_range)
        self.x, self.level = linear_knots(sorted_scores, score_range)
        self._slopes = np.diff(self.level) / np.diff(self.x)

    def cdf(self, s: FloatArray, u: FloatArray | None = None) -> FloatArray:
        """See :meth:`Interpolation.cdf`."""
        return np.interp(s, self.x, self.level, left=0.0, right=1.0)

    def ppf(self, p: FloatArray, u: FloatArray | None = None) -> FloatArray:
        """See :meth:`Interpolation.ppf`."""
        return np.interp(p, self.level, self.x)

    def density(self, s: FloatArray) -> FloatArray:
        """See :meth:`Interpolation.density`."""
        j = np.searchsorted(self.x, s, side="right") - 1
        inside = (j >= 0) & (j < self._slopes.shape[0])
        out: FloatArray = np.where(inside, self._slopes[np.clip(j, 0, self._slopes.shape[0] - 1)], 0.0)
        return out

    def support(self) -> tuple[float, float]:
        """See :meth:`Interpolation.support`."""
        return float(self.x[0]), float(self.x[-1])

    def _partial_moments(
        self, breaks: FloatArray, transform: TransformName
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        inner = breaks[(breaks > self.x[0]) & (breaks < self.x[-1])]
        x = np.union1d(self.x, inner)  # knots cut at the breaks: S is uniform on each piece
        level = np.interp(x, self.x, self.level)
        a, b, mass = x[:-1], x[1:], np.diff(level)
        m1, m2 = _uniform_moments(a, b, transform)
        seg = np.searchsorted(breaks, 0.5 * (a + b), side="left")  # segment j: (breaks[j-1], breaks[j]]
        J = breaks.shape[0] + 1
        P = np.bincount(seg, weights=mass, minlength=J).astype(np.float64)
        M1 = np.bincount(seg, weights=mass * m1, minlength=J).astype(np.float64)
        M2 = np.bincount(seg, weights=mass * m2, minlength=J).astype(np.float64)
        return P, M1, M2


# ------------------------------------------------------------------------- NAF
class NAFInterpolation(Interpolation):
    """A sigmoidal flow fitted to the linear knots: ``q(s) = Σ_j w_j σ(a_j (t − c_j))``.

    ``t = (g(s) − center)/scale`` with ``g`` the identity, or the logit for scores in ``(0, 1)``
    (the ``cdf`` score), so that ``q`` reaches 0 and 1 exactly at the ends of the score's range;
    ``w = softmax(ω)``, ``a_j = exp(ℓ_j) > 0``. This is the one-layer deep sigmoidal flow of
    Huang et al. (2018) before its final logit: a smooth, strictly increasing CDF. It is fitted by
    Adam on the squared error at the knots (at most ``max_knots``, evenly spaced in rank), starting
    from a logistic kernel estimate (centres at quantiles of the knots), in float64 on the CPU.

    Parameters
    ----------
    units : int
        ``H``, the number of logistic units (paper 001: 200 push the error below precision).
    epochs : int
        Full-batch Adam steps.
    learning_rate : float
        Adam's step size.
    max_knots : int
        Fit on at most this many knots (all knots are used to measure ``epsilon_``).
    seed : int
        Seeds torch (the subsample of knots is deterministic).
    progress : bool
        Show a tqdm progress bar.

    Attributes
    ----------
    epsilon_ : float
        ``max_i |q(s_(i)) − i/(n+1)|`` over all calibration knots: the ε of Theorem 1 (the
        calibrated CDF is ε-calibrated).
    loss_ : float
        Final mean squared error on the fitting knots.
    """

    kind = "naf"
    continuous = True
    proper = True

    def __init__(
        self,
        sorted_scores: FloatArray,
        score_range: tuple[float, float],
        *,
        units: int = 100,
        epochs: int = 1_000,
        learning_rate: float = 0.02,
        max_knots: int = 2_000,
        seed: int = 0,
        progress: bool = True,
        params: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(sorted_scores, score_range)
        self.logit = score_range == (0.0, 1.0)
        x, level = linear_knots(sorted_scores, score_range)
        self._knot_x, self._knot_level = x[1:-1], level[1:-1]  # interior knots: q(±range ends) = 0, 1
        if params is None:
            params = self._fit(units, epochs, learning_rate, max_knots, seed, progress)
        self.center = float(params["center"])
        self.scale = float(params["scale"])
        self.c = np.asarray(params["c"], dtype=np.float64)
        self.log_a = np.asarray(params["log_a"], dtype=np.float64)
        self.omega = np.asarray(params["omega"], dtype=np.float64)
        self.loss_ = float(params["loss"])
        self._a = np.exp(self.log_a)
        w = np.exp(self.omega - self.omega.max())
        self._w = w / w.sum()
        self.epsilon_ = float(np.max(np.abs(self._q_of_t(self._t_of_s(self._knot_x)) - self._knot_level)))
        self._build_table()

    # -- transforms
    def _t_of_s(self, s: FloatArray) -> FloatArray:
        if self.logit:
            with np.errstate(divide="ignore"):
                g = np.log(s) - np.log1p(-s)
        else:
            g = s
        out: FloatArray = (g - self.center) / self.scale
        return out

    def _s_of_t(self, t: FloatArray) -> FloatArray:
        g = self.center + self.scale * t
        if not self.logit:
            return g
        # expit rounds to 1.0 beyond g ≈ 37: keep finite t strictly inside (0, 1)
        s = np.asarray(expit(g), dtype=np.float64)
        inside = np.clip(s, np.finfo(np.float64).smallest_subnormal, 1.0 - np.finfo(np.float64).epsneg)
        out: FloatArray = np.where(np.isfinite(g), inside, s)
        return out

    def _dt_ds(self, s: FloatArray) -> FloatArray:
        if self.logit:
            with np.errstate(divide="ignore"):
                out: FloatArray = 1.0 / (s * (1.0 - s) * self.scale)
            return out
        return np.full(np.shape(s), 1.0 / self.scale)

    # -- the flow, evaluated in blocks to bound memory at ~16 MB
    def _q_of_t(self, t: FloatArray, *, derivative: bool = False) -> FloatArray:
        flat = np.asarray(t, dtype=np.float64).ravel()
        out = np.empty_like(flat)
        block = max(1, 2_000_000 // max(self.c.shape[0], 1))
        for start in range(0, flat.shape[0], block):
            z = self._a * (flat[start : start + block, None] - self.c)
            sig = expit(z)
            if derivative:
                out[start : start + block] = (sig * (1.0 - sig)) @ (self._w * self._a)
            else:
                out[start : start + block] = sig @ self._w
        return out.reshape(np.shape(t))

    def _fit(
        self, units: int, epochs: int, learning_rate: float, max_knots: int, seed: int, progress: bool
    ) -> dict[str, Any]:
        import torch
        from tqdm.auto import tqdm

        x, level = self._knot_x, self._knot_level
        if x.shape[0] > max_knots:
            pick = np.unique(np.round(np.linspace(0, x.shape[0] - 1, max_knots)).astype(np.intp))
            x, level = x[pick], level[pick]
        if self.logit:
            with np.errstate(divide="ignore"):
                g = np.log(x) - np.log1p(-x)
            keep = np.isfinite(g)  # a cdf score of exactly 0 or 1 sits at the range's end
            g, level = g[keep], level[keep]
        else:
            g = x
        center = float(np.median(g))
        iqr = float(np.subtract(*np.percentile(g, [75, 25])))
        scale = iqr / 1.349 if iqr > 0 else float(np.std(g)) or 1.0
        t = (g - center) / scale
        # start: H logistic units centred at quantiles of the knots, widths from their spacing
        centres = np.interp((np.arange(units) + 0.5) / units, level, t)
        spacing = np.gradient(centres) if units > 1 else np.array([1.0])
        width = np.maximum(np.abs(spacing) * 1.5, 1e-3)  # t is standardised: an outlier must not set it
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny model: extra threads only contend (2-core machines slow 50×)
        try:
            gen = torch.Generator().manual_seed(seed)
            c = torch.tensor(centres, dtype=torch.float64) + 1e-6 * torch.randn(
                units, generator=gen, dtype=torch.float64
            )
            c.requires_grad_(True)
            log_a = torch.tensor(-np.log(width), dtype=torch.float64, requires_grad=True)
            omega = torch.zeros(units, dtype=torch.float64, requires_grad=True)
            tt = torch.tensor(t, dtype=torch.float64)[:, None]
            target = torch.tensor(level, dtype=torch.float64)
            opt = torch.optim.Adam([c, log_a, omega], lr=learning_rate, foreach=False)
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(epochs, 1))
            loss_value = math.nan
            bar = tqdm(range(epochs), desc="NAF interpolation", disable=not progress, leave=False)
            for _ in bar:
                opt.zero_grad()
                q = torch.sigmoid(torch.exp(log_a) * (tt - c)) @ torch.softmax(omega, 0)
                loss = torch.mean((q - target) ** 2)
                loss.backward()  # type: ignore[no-untyped-call]
                opt.step()
                sched.step()
                loss_value = float(loss.detach())
                bar.set_postfix(mse=f"{loss_value:.2e}", refresh=False)
            bar.close()
            with torch.no_grad():
                q = torch.sigmoid(torch.exp(log_a) * (tt - c)) @ torch.softmax(omega, 0)
                loss_value = float(torch.mean((q - target) ** 2))
        finally:
            torch.set_num_threads(threads)
        return {
            "center": center,
            "scale": scale,
            "c": c.detach().numpy().copy(),
            "log_a": log_a.detach().numpy().copy(),
            "omega": omega.detach().numpy().copy(),
            "loss": loss_value,
        }

    def _build_table(self) -> None:
        """A monotone table ``t ↦ q(t)`` from ``q ≈ 1e-15`` to ``1 − 1e-15``: brackets for inversion."""
        lo = float(np.min(self.c - 40.0 / self._a))
        hi = float(np.max(self.c + 40.0 / self._a))
        t = np.linspace(lo, hi, 4_097)
        self._table_t, self._table_q = t, self._q_of_t(t)

    # -- the interface
    def cdf(self, s: FloatArray, u: FloatArray | None = None) -> FloatArray:
        """See :meth:`Interpolation.cdf`."""
        return self._q_of_t(self._t_of_s(s))

    def density(self, s: FloatArray) -> FloatArray:
        """See :meth:`Interpolation.density`."""
        with np.errstate(invalid="ignore"):
            out = self._q_of_t(self._t_of_s(s), derivative=True) * self._dt_ds(s)
        result: FloatArray = np.where(np.isfinite(out), out, 0.0)
        return result

    def ppf(self, p: FloatArray, u: FloatArray | None = None) -> FloatArray:
        """See :meth:`Interpolation.ppf`."""
        p = np.asarray(p, dtype=np.float64)
        flat = p.ravel()
        j = np.clip(np.searchsorted(self._table_q, flat, side="left"), 1, self._table_t.shape[0] - 1)
        guess = np.interp(flat, self._table_q, self._table_t)  # Newton from the table's estimate
        t = solve_increasing(
            self._q_of_t,
            flat,
            self._table_t[j - 1],
            self._table_t[j],
            fprime=lambda x: self._q_of_t(x, derivative=True),
            start=guess,
        )
        t = np.where(flat <= 0.0, -math.inf, np.where(flat >= 1.0, math.inf, t))
        return self._s_of_t(t).reshape(p.shape)

    def support(self) -> tuple[float, float]:
        """See :meth:`Interpolation.support`."""
        return self.score_range

    def _partial_moments(
        self, breaks: FloatArray, transform: TransformName
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        # ∫ g(s(t))^k 1{s(t) ∈ segment} q'(t) dt by the trapezoid rule on a grid that resolves every
        # unit: 201 points across ±40 widths of each (q' decays like e^{-a|t|} beyond them)
        around = (self.c[:, None] + np.linspace(-40.0, 40.0, 201)[None, :] / self._a[:, None]).ravel()
        t = np.union1d(around, self._t_of_s(breaks))
        t = t[np.isfinite(t)]
        s = self._s_of_t(t)
        g = np.asarray(ndtri(np.clip(s, 0.0, 1.0)), dtype=np.float64) if transform == "probit" else s
        dens = self._q_of_t(t, derivative=True)
        mid_seg = np.searchsorted(breaks, 0.5 * (s[:-1] + s[1:]), side="left")
        dt = np.diff(t)
        J = breaks.shape[0] + 1
        out = []
        for power in (0, 1, 2):
            with np.errstate(invalid="ignore"):  # 0·inf at the range's ends of a probit score
                f = dens * g**power
                piece = 0.5 * (f[:-1] + f[1:]) * dt
            piece = np.where(np.isfinite(piece), piece, 0.0)
            out.append(np.bincount(mid_seg, weights=piece, minlength=J))
        total = out[0].sum()
        return out[0] / total, out[1] / total, out[2] / total

    def state(self) -> tuple[dict[str, FloatArray], dict[str, Any]]:
        """See :meth:`Interpolation.state`."""
        arrays = {"naf_c": self.c.copy(), "naf_log_a": self.log_a.copy(), "naf_omega": self.omega.copy()}
        return arrays, {"naf_center": self.center, "naf_scale": self.scale, "naf_loss": self.loss_}


def make_interpolation(
    kind: InterpolationName,
    sorted_scores: FloatArray,
    score_range: tuple[float, float],
    *,
    naf_options: dict[str, Any] | None = None,
    naf_params: dict[str, Any] | None = None,
) -> Interpolation:
    """Fit interpolation ``kind`` on sorted calibration scores."""
    if kind == "linear":
        return LinearInterpolation(sorted_scores, score_range)
    if kind == "naive":
        return NaiveInterpolation(sorted_scores, score_range)
    if kind == "random":
        return RandomInterpolation(sorted_scores, score_range)
    if str(kind) != "naf":
        msg = f"interpolation must be one of {INTERPOLATIONS}; got {kind!r}"
        raise ValueError(msg)
    return NAFInterpolation(sorted_scores, score_range, params=naf_params, **(naf_options or {}))


__all__ = [
    "INTERPOLATIONS",
    "Interpolation",
    "LinearInterpolation",
    "NAFInterpolation",
    "NaiveInterpolation",
    "RandomInterpolation",
    "linear_knots",
    "make_interpolation",
]
