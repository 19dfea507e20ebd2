"""Calibration scores of modular conformal calibration (ALGORITHMS.md §3; paper 001 §4.2, App. A).

A *score map* holds the base predictions of ``m`` rows and, for each row, the calibration score
``φ(h(x), ·)`` as a function of the label: its value at ``y``, its inverse (score → label) and its
derivative in ``y``. Every score is strictly increasing in ``y``:

- point ``μ``: ``φ = y − μ``;
- interval ``[l, u]``: ``φ = (y − l)/(u − l)``;
- quantiles ``q_1 < … < q_L`` at levels ``τ_1 < … < τ_L``: piecewise linear through ``(q_j, τ_j)``,
  extended linearly with the end segments' slopes;
- distribution (Gaussian ``μ, σ`` or any CDF ``F̂``): ``φ_cdf = F̂(y)`` or ``φ_z = (y − μ)/σ``;
- ensemble: ``φ = Σ_k w_k φ_k``.

Shapes. Row-aligned arrays are 2-D inside the engine: parameters are ``(m, 1)`` columns and the
labels or scores they meet are ``(m, k)`` or ``(1, k)`` (the same ``k`` values for every row), so
numpy broadcasting evaluates a score at ``k`` points per row without a Python loop.

Inverses are closed form except for ensembles and callable CDFs without a ``ppf``, which use a
vectorised bisection (:func:`solve_increasing`) bracketed from the members' own inverses.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt
from scipy.special import ndtr, ndtri

from calwatch.engine._validation import as_float_array

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
PredictionName = Literal["point", "interval", "quantile", "distribution", "ensemble"]
MemberName = Literal["point", "interval", "quantile", "distribution"]
ScoreName = Literal["cdf", "z"]
TransformName = Literal["identity", "probit"]

#: Base prediction types (paper 001 Table 1).
PREDICTION_TYPES: tuple[PredictionName, ...] = ("point", "interval", "quantile", "distribution", "ensemble")
#: Prediction types an ensemble member may have.
MEMBER_TYPES: tuple[MemberName, ...] = ("point", "interval", "quantile", "distribution")
#: Calibration scores of distribution predictions.
SCORE_NAMES: tuple[ScoreName, ...] = ("cdf", "z")
#: Iterations of the vectorised bisection: enough to shrink any finite float64 bracket to 1 ulp.
BISECTION_ITERATIONS = 2_100
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


# ------------------------------------------------------------------------- validation
def check_levels(levels: Any, name: str = "quantile_levels") -> FloatArray:
    """Quantile levels: a 1-D array of at least 2 strictly increasing values in (0, 1)."""
    tau = as_float_array(levels, name, ndim=1)
    if tau.shape[0] < 2:
        msg = f"{name} must hold at least 2 levels; got {tau.tolist()}"
        raise ValueError(msg)
    if tau[0] <= 0.0 or tau[-1] >= 1.0 or np.any(np.diff(tau) <= 0.0):
        msg = f"{name} must be strictly increasing and inside (0, 1); got {tau.tolist()}"
        raise ValueError(msg)
    return tau


def rearrange_quantiles(Q: Any, min_gap: float = 0.0) -> FloatArray:
    """Sort each row of quantile predictions and open ties to at least ``min_gap``.

    Quantile regressors can cross (``q_j > q_{j+1}``); sorting each row (the monotone
    rearrangement of Chernozhukov et al. 2010) never increases the pinball loss. The calibration
    score needs *strictly* increasing quantiles: with ``min_gap > 0`` equal neighbours are pushed
    apart (a running maximum of ``q_j − j·min_gap``, then ``+ j·min_gap``).

    Examples
    --------
    >>> rearrange_quantiles(np.array([[3.0, 1.0, 2.0], [1.0, 1.0, 1.0]]), min_gap=0.5).tolist()
    [[1.0, 2.0, 3.0], [1.0, 1.5, 2.0]]
    """
    arr = as_float_array(Q, "Q", ndim=2)
    if not (math.isfinite(min_gap) and min_gap >= 0.0):
        msg = f"min_gap must be a finite number ≥ 0; got {min_gap!r}"
        raise ValueError(msg)
    out = np.sort(arr, axis=1)
    if min_gap > 0.0:
        steps = min_gap * np.arange(out.shape[1], dtype=np.float64)
        out = np.maximum.accumulate(out - steps, axis=1) + steps
    return out


def _col(a: FloatArray) -> FloatArray:
    return a.reshape(-1, 1)


# ------------------------------------------------------------------------- solving
def solve_increasing(
    f: Callable[[FloatArray], FloatArray],
    target: FloatArray,
    lo: FloatArray,
    hi: FloatArray,
    *,
    fprime: Callable[[FloatArray], FloatArray] | None = None,
    start: FloatArray | None = None,
    rtol: float = 4.0 * np.finfo(np.float64).eps,
) -> FloatArray:
    """Solve ``f(y) = target`` elementwise for a non-decreasing ``f``, vectorised.

    ``f`` maps an array of ``target``'s shape to one of the same shape. ``lo`` and ``hi``
    (broadcast to that shape; non-finite values are replaced) are first guesses; each is moved
    outwards, doubling its step, until ``f(lo) < target ≤ f(hi)``. Then bisection halves the
    bracket until it is narrower than ``rtol·max(|lo|, |hi|)`` or ``1e-13`` times its starting
    width (about 45-55 halvings), and returns its upper end: the smallest ``y`` found with
    ``f(y) ≥ target``. With the derivative ``fprime`` (for a continuous ``f``), Newton steps from
    ``start`` (default: the bracket's middle) replace the halvings wherever they stay inside the
    bracket, which usually converges in 3-8 steps. ``+inf`` where ``f`` never reaches the target.

    Examples
    --------
    >>> y = solve_increasing(lambda y: y**3, np.array([8.0, -1.0]), np.zeros(2), np.ones(2))
    >>> np.round(y, 12).tolist()
    [2.0, -1.0]
    >>> cube, slope = (lambda y: y**3), (lambda y: 3 * y**2)
    >>> y = solve_increasing(cube, np.array([8.0]), np.zeros(1), np.ones(1), fprime=slope)
    >>> np.round(y, 12).tolist()
    [2.0]
    """
    shape = target.shape
    lo = np.array(np.broadcast_to(lo, shape), dtype=np.float64)
    hi = np.array(np.broadcast_to(hi, shape), dtype=np.float64)
    lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
    lo = np.where(np.isfinite(lo), lo, np.where(np.isfinite(hi), hi - 1.0, -1.0))
    hi = np.where(np.isfinite(hi), hi, lo + 2.0)
    with np.errstate(over="ignore"):  # a step may overflow to inf: the end then is ±inf
        step = np.maximum(hi - lo, 1.0)
        todo = f(lo) >= target
        for _ in range(1_100):  # doubling steps pass the float64 range in < 1,100 rounds
            if not todo.any():
                break
            lo[todo] -= step[todo]
            step[todo] *= 2.0
            todo &= np.isfinite(lo)
            todo[todo] = f(lo)[todo] >= target[todo]
        step = np.maximum(hi - np.where(np.isfinite(lo), lo, hi), 1.0)
        todo = f(hi) < target
        for _ in range(1_100):
            if not todo.any():
                break
            hi[todo] += step[todo]
            step[todo] *= 2.0
            todo &= np.isfinite(hi)
            todo[todo] = f(hi)[todo] < target[todo]
    width0 = hi - lo
    active = np.isfinite(lo) & np.isfinite(hi)
    if fprime is None:
        for _ in range(200):
            active &= (hi - lo) > np.maximum(rtol * np.maximum(np.abs(lo), np.abs(hi)), 1e-13 * width0)
            if not active.any():
                break
            mid = lo + 0.5 * (hi - lo)
            up = f(mid) >= target
            hi = np.where(active & up, mid, hi)
            lo = np.where(active & ~up, mid, lo)
        return hi
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # inactive entries hold ±inf
        x = lo + 0.5 * (hi - lo)
        if start is not None:
            guess = np.broadcast_to(start, shape)
            x = np.where(np.isfinite(guess) & (guess > lo) & (guess < hi), guess, x)
        x = np.where(active, x, hi)
        for _ in range(200):
            if not active.any():
                break
            fx = f(x) - target
            up = fx >= 0
            hi = np.where(active & up, x, hi)
            lo = np.where(active & ~up, x, lo)
            newton = x - fx / fprime(x)
            tol = np.maximum(rtol * np.abs(x), 1e-13 * width0)
            converged = np.isfinite(newton) & (np.abs(newton - x) <= tol)  # Newton stays put
            # a step onto or past an end of the bracket bisects instead (it could cycle between them)
            inside = np.isfinite(newton) & (newton > lo) & (newton < hi)
            x_new = np.where(inside, newton, lo + 0.5 * (hi - lo))
            done = converged | ((hi - lo) <= tol) | (fx == 0)
            x = np.where(active & ~done, x_new, x)
            active &= ~done
    return x


# ------------------------------------------------------------------------- callable CDFs
def _check_callable(value: object, name: str, *, optional: bool) -> None:
    if (value is None and optional) or callable(value):
        return
    msg = f"{name} must be callable{' or None' if optional else ''}; got {type(value).__name__}"
    raise TypeError(msg)


class CDFPrediction:
    """Any predicted distribution for ``m`` rows, given by its CDF (paper 001 Table 1, "distribution").

    Parameters
    ----------
    cdf : callable
        ``cdf(y)`` with ``y`` of shape ``(m, k)`` (column ``j`` of row ``i`` is a label value for
        row ``i``) returns the predicted ``P(Y ≤ y)`` with the same shape. It must be strictly
        increasing in ``y`` where the calibration score ``"cdf"`` is used.
    n_rows : int
        ``m``, the number of rows.
    ppf, pdf : callable, optional
        The inverse CDF and the density with the same calling convention. Without ``ppf`` the
        inverse is found by bisection; without ``pdf`` the calibrated density is unavailable for
        the ``"cdf"`` score.
    mean, std : array-like of shape (m,), optional
        Needed for the ``"z"`` score ``(y − mean)/std``.

    Examples
    --------
    >>> from scipy import stats
    >>> d = CDFPrediction.from_scipy(stats.t(df=5, loc=np.array([0.0, 1.0]), scale=2.0))
    >>> d.n_rows, np.round(d.cdf(np.array([[0.0], [1.0]])).ravel(), 3).tolist()
    (2, [0.5, 0.5])
    """

    def __init__(
        self,
        cdf: Callable[[FloatArray], Any],
        *,
        n_rows: int,
        ppf: Callable[[FloatArray], Any] | None = None,
        pdf: Callable[[FloatArray], Any] | None = None,
        mean: Any = None,
        std: Any = None,
    ) -> None:
        _check_callable(cdf, "cdf", optional=False)
        _check_callable(ppf, "ppf", optional=True)
        _check_callable(pdf, "pdf", optional=True)
        if int(n_rows) != n_rows or n_rows < 1:
            msg = f"n_rows must be a positive integer; got {n_rows!r}"
            raise ValueError(msg)
        self.n_rows = int(n_rows)
        self._cdf, self._ppf, self._pdf = cdf, ppf, pdf
        self.mean: FloatArray | None = None
        self.std: FloatArray | None = None
        if mean is not None:
            self.mean = as_float_array(mean, "mean", ndim=1)
            if self.mean.shape[0] != self.n_rows:
                msg = f"mean has {self.mean.shape[0]} rows but n_rows is {self.n_rows}"
                raise ValueError(msg)
        if std is not None:
            self.std = as_float_array(std, "std", ndim=1)
            if self.std.shape[0] != self.n_rows or np.any(self.std <= 0):
                msg = f"std must hold {self.n_rows} positive values"
                raise ValueError(msg)

    @classmethod
    def from_scipy(cls, dist: Any) -> CDFPrediction:
        """Wrap a frozen ``scipy.stats`` distribution whose parameters are arrays of length ``m``."""
        if not hasattr(dist, "dist") or not hasattr(dist, "args"):
            msg = f"dist must be a frozen scipy.stats distribution; got {type(dist).__name__}"
            raise TypeError(msg)
        args = [np.asarray(a, dtype=np.float64) for a in dist.args]
        kwds = {k: np.asarray(v, dtype=np.float64) for k, v in dist.kwds.items()}
        shape = np.broadcast_shapes(*(a.shape for a in [*args, *kwds.values()]))
        if len(shape) != 1:
            msg = f"the distribution's parameters must be 1-D arrays (one value per row); got shape {shape}"
            raise ValueError(msg)
        m = shape[0]

        def column(a: FloatArray) -> FloatArray:
            return np.broadcast_to(a, (m,)).reshape(m, 1)

        frozen = dist.dist(*[column(a) for a in args], **{k: column(v) for k, v in kwds.items()})
        return cls(
            frozen.cdf,
            n_rows=m,
            ppf=frozen.ppf,
            pdf=frozen.pdf,
            mean=np.broadcast_to(np.asarray(dist.mean(), dtype=np.float64), (m,)),
            std=np.broadcast_to(np.asarray(dist.std(), dtype=np.float64), (m,)),
        )

    def _call(self, fn: Callable[[FloatArray], Any], y: FloatArray, name: str) -> FloatArray:
        y2 = np.broadcast_to(y, (self.n_rows, y.shape[1]))
        out = np.asarray(fn(np.ascontiguousarray(y2)), dtype=np.float64)
        if out.shape != y2.shape:
            msg = f"the prediction's {name} returned shape {out.shape} for labels of shape {y2.shape}"
            raise ValueError(msg)
        return out

    def cdf(self, y: FloatArray) -> FloatArray:
        """``F̂(y)`` for ``y`` of shape ``(m, k)`` or ``(1, k)``."""
        return self._call(self._cdf, y, "cdf")

    def ppf(self, p: FloatArray) -> FloatArray | None:
        """``F̂⁻¹(p)``, or ``None`` when no ``ppf`` was given."""
        return None if self._ppf is None else self._call(self._ppf, p, "ppf")

    def pdf(self, y: FloatArray) -> FloatArray | None:
        """The predicted density, or ``None`` when no ``pdf`` was given."""
        return None if self._pdf is None else self._call(self._pdf, y, "pdf")


# ------------------------------------------------------------------------- score maps
class Segments(NamedTuple):
    """``y = alpha[:, j] + beta[:, j] · g(s)`` on score segment ``j`` (breaks shared by every row).

    Segment ``j`` is ``(breaks[j-1], breaks[j]]`` with ``breaks[-1] = −∞`` and ``breaks[J-1] = +∞``
    implied; ``g`` is the identity or the probit ``Φ⁻¹``. The calibrated mean and variance then
    follow from the partial moments of ``g(S)`` under the interpolated score law, computed once.
    """

    breaks: tuple[float, ...]
    transform: TransformName
    alpha: FloatArray  # (m, J)
    beta: FloatArray  # (m, J)


class ScoreMap(ABC):
    """The calibration score of ``n_rows`` base predictions, as a function of the label."""

    n_rows: int
    #: Lowest and highest value the score can take (``(0, 1)`` for the ``cdf`` score).
    score_range: tuple[float, float] = (-math.inf, math.inf)

    @abstractmethod
    def score(self, y: FloatArray) -> FloatArray:
        """``φ(h(x_i), y_ij)`` for ``y`` of shape ``(m, k)`` or ``(1, k)``; returns ``(m, k)``."""

    @abstractmethod
    def inverse(self, s: FloatArray) -> FloatArray:
        """The label ``y`` with ``φ(h(x_i), y) = s_ij``; ``±inf`` at or beyond the score's range."""

    @abstractmethod
    def derivative(self, y: FloatArray) -> FloatArray:
        """``∂φ/∂y`` at ``y`` (shape ``(m, k)``)."""

    @property
    def has_derivative(self) -> bool:
        """Whether :meth:`derivative` is available."""
        return True

    def segments(self) -> Segments | None:
        """The piecewise-affine form of :meth:`inverse`, or ``None`` (moments then by quadrature)."""
        return None

    @abstractmethod
    def take(self, rows: Any) -> ScoreMap:
        """The score map of a subset of rows (an index array, a boolean mask or a slice)."""


class PointScores(ScoreMap):
    """``φ = y − μ``."""

    def __init__(self, mu: FloatArray) -> None:
        self.mu = _col(mu)
        self.n_rows = self.mu.shape[0]

    def score(self, y: FloatArray) -> FloatArray:
        """See :meth:`ScoreMap.score`."""
        out: FloatArray = y - self.mu
        return out

    def inverse(self, s: FloatArray) -> FloatArray:
        """See :meth:`ScoreMap.inverse`."""
        out: FloatArray = self.mu + s
        return out

    def derivative(self, y: FloatArray) -> FloatArray:
        """See :meth:`ScoreMap.derivative`."""
        return np.ones(np.broadcast_shapes(y.shape, self.mu.shape))

    def segments(self) -> Segments:
        """See :meth:`ScoreMap.segments`."""
        return Segments((), "identity", self.mu, np.ones_like(self.mu))

    def take(self, rows: Any) -> PointScores:
        """See :meth:`ScoreMap.take`."""
        return PointScores(self.mu[rows, 0])


class QuantileScores(ScoreMap):
    """Piecewise linear through ``(q_j, τ_j)``, extended with the end slopes (intervals: ``τ = (0, 1)``)."""

    def __init__(self, Q: FloatArray, levels: FloatArray) -> None:
        self.Q = Q
        self.levels = levels
        self.n_rows = Q.shape[0]
        dq = np.diff(Q, axis=1)
        self._dtau = np.diff(levels)
        self._slope_y = dq / self._dtau  # dy/ds on each segment, (m, L-1)
        self._slope_s = self._dtau / dq  # ds/dy

    def _segment_of_y(self, y: FloatArray) -> IntArray:
        inner = self.Q[:, 1:-1]
        m, k = self.n_rows, y.shape[1]
        if inner.shape[1] == 0:
            return np.zeros((m, k), dtype=np.intp)
        yb = np.broadcast_to(y, (m, k))
        j = np.zeros((m, k), dtype=np.intp)
        for col in range(inner.shape[1]):  # L is small: a loop over levels, not rows
            j += yb >= inner[:, col : col + 1]
        return j

    def score(self, y: FloatArray) -> FloatArray:
        """See :meth:`ScoreMap.score`."""
        j = self._segment_of_y(y)
        qj = np.take_along_axis(self.Q, j, axis=1)
        slope = np.take_along_axis(self._slope_s, j, axis=1)
        out: FloatArray = self.levels[j] + (y - qj) * slope
        return out

    def _segment_of_s(self, s: FloatArray) -> IntArray:
        j = np.searchsorted(self.levels[1:-1], s, side="right")
        return np.broadcast_to(j, np.broadcast_shapes(s.shape, (self.n_rows, 1))).astype(np.intp)

    def inverse(self, s: FloatArray) -> FloatArray:
        """See :meth:`ScoreMap.inverse`."""
        j = self._segment_of_s(s)
        qj = np.take_along_axis(self.Q, j, axis=1)
        slope = np.take_along_axis(self._slope_y, j, axis=1)
        out: FloatArray = qj + (s - self.levels[j]) * slope
        return out

    def derivative(self, y: FloatArray) -> FloatArray:
        """See :meth:`ScoreMap.derivative`."""
        j = self._segment_of_y(y)
        return np.take_along_axis(self._slope_s, j, axis=1)

    def segments(self) -> Segments:
        """See :meth:`ScoreMap.segments`."""
        alpha = self.Q[:, :-1] - self.levels[:-1] * self._slope_y
        return Segments(tuple(self.levels[1:-1].tolist()), "identity", alpha, self._slope_y)

    def take(self, rows: Any) -> QuantileScores:
        """See :meth:`ScoreMap.take`."""
        return QuantileScores(self.Q[rows], self.levels)


class GaussianScores(ScoreMap):
    """Gaussian ``N(μ, σ²)``: ``φ_cdf = Φ((y − μ)/σ)`` or ``φ_z = (y − μ)/σ``."""

    def __init__(self, mu: FloatArray, sd: FloatArray, kind: ScoreName) -> None:
        self.mu, self.sd, self.kind = _col(mu), _col(sd), kind
        self.n_rows = self.mu.shape[0]
        self.score_range = (0.0, 1.0) if kind == "cdf" else (-math.inf, math.inf)

    def score(self, y: FloatArray) -> FloatArray:
        """See :meth:`ScoreMap.score`."""
        z: FloatArray = (y - self.mu) / self.sd
        return np.asarray(ndtr(z), dtype=np.float64) if self.kind == "cdf" else z

    def inverse(self, s: FloatArray) -> FloatArray:
        """See :meth:`ScoreMap.inverse`."""
        z = np.asarray(ndtri(np.clip(s, 0.0, 1.0)), dtype=np.float64) if self.kind == "cdf" else s
        out: FloatArray = self.mu + self.sd * z
        return out

    def derivative(self, y: FloatArray) -> FloatArray:
        """See :meth:`ScoreMap.derivative`."""
        if self.kind == "z":
            return np.broadcast_to(1.0 / self.sd, np.broadcast_shapes(y.shape, self.sd.shape)).copy()
        z = (y - self.mu) / self.sd
        out: FloatArray = _INV_SQRT_2PI * np.exp(-0.5 * z * z) / self.sd
        return out

    def segments(self) -> Segments:
        """See :meth:`ScoreMap.segments`."""
        return Segments((), "probit" if self.kind == "cdf" else "identity", self.mu, self.sd)

    def take(self, rows: Any) -> GaussianScores:
        """See :meth:`ScoreMap.take`."""
        return GaussianScores(self.mu[rows, 0], self.sd[rows, 0], self.kind)


class CallableScores(ScoreMap):
    """A :class:`CDFPrediction`: ``φ_cdf = F̂(y)`` or ``φ_z = (y − mean)/std``."""

    def __init__(self, pred: CDFPrediction, kind: ScoreName) -> None:
        if kind == "z" and (pred.mean is None or pred.std is None):
            msg = "the 'z' score needs the prediction's mean and std: pass mean= and std= to CDFPrediction"
            raise ValueError(msg)
        self.pred, self.kind = pred, kind
        self.n_rows = pred.n_rows
        self.score_range = (0.0, 1.0) if kind == "cdf" else (-math.inf, math.inf)
        self._mu = _col(pred.mean) if pred.mean is not None else None
        self._sd = _col(pred.std) if pred.std is not None else None

    def score(self, y: FloatArray) -> FloatArray:
        """See :meth:`ScoreMap.score`."""
        if self.kind == "z":
            assert self._mu is not None
            assert self._sd is not None
            out: FloatArray = (y - self._mu) / self._sd
            return out
        return self.pred.cdf(y)

    def inverse(self, s: FloatArray) -> FloatArray:
        """See :meth:`ScoreMap.inverse`."""
        if self.kind == "z":
            assert self._mu is not None
            assert self._sd is not None
            out: FloatArray = self._mu + self._sd * s
            return out
        p = np.clip(np.broadcast_to(s, np.broadcast_shapes(s.shape, (self.n_rows, 1))), 0.0, 1.0)
        direct = self.pred.ppf(p)
        if direct is not None:
            return direct
        start = np.zeros_like(p) if self._mu is None else np.broadcast_to(self._mu, p.shape)
        width = 1.0 if self._sd is None else np.broadcast_to(self._sd, p.shape)
        y = solve_increasing(
            self.pred.cdf,
            p,
            start - width,
            start + width,
            fprime=self.derivative if self.has_derivative else None,
        )
        y[p <= 0.0] = -math.inf
        y[p >= 1.0] = math.inf
        return y

    def derivative(self, y: FloatArray) -> FloatArray:
        """See :meth:`ScoreMap.derivative`."""
        if self.kind == "z":
            assert self._sd is not None
            return np.broadcast_to(1.0 / self._sd, np.broadcast_shapes(y.shape, self._sd.shape)).copy()
        out = self.pred.pdf(y)
        if out is None:
            msg = "the calibrated density needs the prediction's pdf: pass pdf= to CDFPrediction"
            raise ValueError(msg)
        return out

    @property
    def has_derivative(self) -> bool:
        """See :meth:`ScoreMap.has_derivative`."""
        return self.kind == "z" or self.pred._pdf is not None

    def segments(self) -> Segments | None:
        """See :meth:`ScoreMap.segments`."""
        if self.kind == "z":
            assert self._mu is not None
            assert self._sd is not None
            return Segments((), "identity", self._mu, self._sd)
        return None

    def take(self, rows: Any) -> ScoreMap:
        """See :meth:`ScoreMap.take`."""
        msg = "a callable CDF prediction cannot be split into rows; predict each subset separately"
        raise TypeError(msg)


class EnsembleScores(ScoreMap):
    """``φ = Σ_k w_k φ_k`` (paper 001 App. A); the inverse by bisection."""

    def __init__(self, members: Sequence[ScoreMap], weights: FloatArray) -> None:
        self.members = list(members)
        self.weights = weights
        self.n_rows = self.members[0].n_rows
        lo = sum(w * m.score_range[0] for w, m in zip(weights, self.members, strict=True))
        hi = sum(w * m.score_range[1] for w, m in zip(weights, self.members, strict=True))
        self.score_range = (float(lo), float(hi))
        self._total = float(weights.sum())

    def score(self, y: FloatArray) -> FloatArray:
        """See :meth:`ScoreMap.score`."""
        total = np.zeros(np.broadcast_shapes(y.shape, (self.n_rows, 1)))
        for w, member in zip(self.weights, self.members, strict=True):
            total += w * member.score(y)
        return total

    def inverse(self, s: FloatArray) -> FloatArray:
        """See :meth:`ScoreMap.inverse`."""
        target = np.array(
            np.broadcast_to(s, np.broadcast_shapes(s.shape, (self.n_rows, 1))), dtype=np.float64
        )
        lo_r, hi_r = self.score_range
        below, above = target <= lo_r, target >= hi_r
        # φ_k(y) ≤ s/W for every k at y = min_k φ_k⁻¹(s/W), so φ(y) ≤ s there (and ≥ at the max)
        share = target / self._total
        guesses = []
        for member in self.members:
            m_lo, m_hi = member.score_range
            g = member.inverse(np.clip(share, m_lo, m_hi))
            guesses.append(np.where(np.isfinite(g), g, np.nan))
        stack = np.stack(guesses)
        start_lo = np.fmin.reduce(stack, axis=0)  # fmin/fmax skip NaN (a member's infinite guess)
        start_hi = np.fmax.reduce(stack, axis=0)
        start_lo = np.where(np.isnan(start_lo), 0.0, start_lo)
        start_hi = np.where(np.isnan(start_hi), start_lo, start_hi)
        safe = np.where(below | above, self.score(start_lo), target)  # solved trivially, overwritten
        fprime = self.derivative if self.has_derivative else None
        y = solve_increasing(self.score, safe, start_lo, start_hi, fprime=fprime)
        y[below] = -math.inf
        y[above] = math.inf
        return y

    def derivative(self, y: FloatArray) -> FloatArray:
        """See :meth:`ScoreMap.derivative`."""
        total = np.zeros(np.broadcast_shapes(y.shape, (self.n_rows, 1)))
        for w, member in zip(self.weights, self.members, strict=True):
            total += w * member.derivative(y)
        return total

    @property
    def has_derivative(self) -> bool:
        """See :meth:`ScoreMap.has_derivative`."""
        return all(m.has_derivative for m in self.members)

    def take(self, rows: Any) -> EnsembleScores:
        """See :meth:`ScoreMap.take`."""
        return EnsembleScores([m.take(rows) for m in self.members], self.weights)


# ------------------------------------------------------------------------- construction
def _n_rows_of(pred: Any) -> int:
    if isinstance(pred, CDFPrediction):
        return pred.n_rows
    return int(np.shape(pred)[0])


def member_score_map(
    kind: MemberName,
    pred: Any,
    name: str,
    *,
    score: ScoreName,
    levels: FloatArray | None,
    n_rows: int | None = None,
) -> ScoreMap:
    """Validate one prediction of type ``kind`` and return its score map.

    Raises
    ------
    TypeError, ValueError
        The prediction's type, shape or values do not fit ``kind``; each message names ``name``.
    """
    if kind == "distribution" and isinstance(pred, CDFPrediction):
        if n_rows is not None and pred.n_rows != n_rows:
            msg = f"{name} has {pred.n_rows} rows but {n_rows} were expected"
            raise ValueError(msg)
        return CallableScores(pred, score)
    if isinstance(pred, CDFPrediction):
        msg = f"{name} is a CDFPrediction, which only fits prediction type 'distribution' (got {kind!r})"
        raise TypeError(msg)
    if kind == "point":
        mu = as_float_array(pred, name, ndim=1)
        arr = mu
    else:
        arr = as_float_array(pred, name, ndim=2)
    if arr.shape[0] == 0:
        msg = f"{name} is empty: expected at least one row"
        raise ValueError(msg)
    if n_rows is not None and arr.shape[0] != n_rows:
        msg = f"{name} has {arr.shape[0]} rows but {n_rows} were expected"
        raise ValueError(msg)
    if kind == "point":
        return PointScores(arr)
    if kind == "interval":
        if arr.shape[1] != 2:
            msg = f"{name} must have shape (m, 2) with columns (lower, upper); got {arr.shape}"
            raise ValueError(msg)
        bad = arr[:, 1] <= arr[:, 0]
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            msg = (
                f"{name} must have lower < upper in every row; row {row} is {arr[row].tolist()}"
                f" ({int(bad.sum())} rows in all)"
            )
            raise ValueError(msg)
        return QuantileScores(arr, np.array([0.0, 1.0]))
    if kind == "quantile":
        if levels is None:
            msg = "quantile predictions need quantile_levels (one level per column)"
            raise ValueError(msg)
        if arr.shape[1] != levels.shape[0]:
            msg = f"{name} has {arr.shape[1]} columns but quantile_levels has {levels.shape[0]} levels"
            raise ValueError(msg)
        bad = np.any(np.diff(arr, axis=1) <= 0.0, axis=1)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            msg = (
                f"{name} must be strictly increasing along each row; row {row} is {arr[row].tolist()}"
                f" ({int(bad.sum())} rows in all). Crossing quantiles can be sorted with"
                " rearrange_quantiles(Q, min_gap)"
            )
            raise ValueError(msg)
        return QuantileScores(arr, levels)
    # kind == "distribution" (callers validate kind against MEMBER_TYPES)
    if arr.shape[1] != 2:
        msg = f"{name} must have shape (m, 2) with columns (mean, sd); got {arr.shape}"
        raise ValueError(msg)
    bad = arr[:, 1] <= 0.0
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        msg = f"{name}'s sd column must be positive; row {row} has sd {arr[row, 1]!r}"
        raise ValueError(msg)
    return GaussianScores(arr[:, 0], arr[:, 1], score)


def infer_member_type(pred: Any, name: str, levels: FloatArray | None) -> MemberName:
    """An ensemble member's type from its layout: ``(m,)`` point, ``(m, 2)`` Gaussian, ``(m, L)`` quantile."""
    if isinstance(pred, CDFPrediction):
        return "distribution"
    shape = np.shape(pred)
    if len(shape) == 1:
        return "point"
    if len(shape) == 2 and shape[1] == 2:
        return "distribution"
    if len(shape) == 2 and levels is not None and shape[1] == levels.shape[0]:
        return "quantile"
    msg = (
        f"cannot tell the type of {name} from its shape {shape}: (m,) is a point prediction, (m, 2) a"
        " Gaussian (mean, sd), (m, L) quantiles at quantile_levels; or pass members=[...]"
    )
    raise ValueError(msg)


def build_score_map(
    prediction: PredictionName,
    pred: Any,
    name: str,
    *,
    score: ScoreName,
    levels: FloatArray | None,
    members: Sequence[MemberName] | None,
    weights: FloatArray | None,
    n_rows: int | None = None,
) -> ScoreMap:
    """The score map of a batch of base predictions of type ``prediction``."""
    if prediction != "ensemble":
        return member_score_map(prediction, pred, name, score=score, levels=levels, n_rows=n_rows)
    if isinstance(pred, (np.ndarray, CDFPrediction)) or not isinstance(pred, (list, tuple)):
        msg = (
            f"{name} must be a list of member predictions (prediction='ensemble'); got {type(pred).__name__}"
        )
        raise TypeError(msg)
    if len(pred) == 0:
        msg = f"{name} is an empty list: an ensemble needs at least one member"
        raise ValueError(msg)
    if members is not None and len(members) != len(pred):
        msg = f"{name} has {len(pred)} members but members= names {len(members)} types"
        raise ValueError(msg)
    if weights is not None and weights.shape[0] != len(pred):
        msg = f"{name} has {len(pred)} members but weights has {weights.shape[0]} values"
        raise ValueError(msg)
    kinds = (
        list(members)
        if members is not None
        else [infer_member_type(p, f"{name}[{i}]", levels) for i, p in enumerate(pred)]
    )
    rows = n_rows if n_rows is not None else _n_rows_of(pred[0])
    maps = [
        member_score_map(kind, p, f"{name}[{i}]", score=score, levels=levels, n_rows=rows)
        for i, (kind, p) in enumerate(zip(kinds, pred, strict=True))
    ]
    w = np.ones(len(maps)) if weights is None else weights
    return EnsembleScores(maps, w)


__all__ = [
    "MEMBER_TYPES",
    "PREDICTION_TYPES",
    "SCORE_NAMES",
    "CDFPrediction",
    "CallableScores",
    "EnsembleScores",
    "GaussianScores",
    "PointScores",
    "QuantileScores",
    "ScoreMap",
    "Segments",
    "as_float_array",
    "build_score_map",
    "check_levels",
    "rearrange_quantiles",
    "solve_increasing",
]
