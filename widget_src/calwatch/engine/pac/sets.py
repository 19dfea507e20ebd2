"""PAC confidence sets: the calibrators (ALGORITHMS.md §4; paper 003, Park et al., ICLR 2020).

This module fits and applies the PAC calibrators. A confidence set predictor
``C_T(x) = {y : f(y | x) ≥ e^{−T}}`` is fitted on ``n`` calibration rows so that, over the
draw of those rows, ``P[L(C) > ε] < δ`` with ``L(C) = P(y ∉ C(x))`` (paper 003 Eq. 2). ``f`` is
the model's (optionally temperature-scaled) probability or density.

- :class:`PACConfidenceSets`: classification from logits (Algorithm 1, ties as §3.5).
- :class:`PACGaussianRegression`: Gaussian forecasts ``N(μ(x), Σ(x))``; intervals in 1-D,
  ellipsoids (:class:`Ellipsoids`) in d-D (Appendix C).

Their parts live next door, and their public names are importable from here too:

- :mod:`calwatch.engine.pac.bounds`: :func:`binomial_k_star`, the largest number ``k*`` of
  calibration rows that may fall outside their sets (Theorem 1 / Eq. 8), :func:`vc_k_star` the
  looser VC alternative (Eq. 7), and :class:`PACInfeasibleError`.
- :mod:`calwatch.engine.pac.gaussian`: the checks and Mahalanobis terms of Gaussian forecasts.
- :mod:`calwatch.engine.pac.horizons`: :func:`accumulate_variance` and
  :func:`trajectory_gaussian`, horizon forecasts with accumulated variance
  ``Σ̃_t = Σ_{s<t} Σ(x̄_s)`` (§3.6, Appendix C).

Why ties need no special threshold (our note on §3.5 and Appendix B.1). Write
``φ = −log f(y | x)`` and let ``T̂`` be the ``(k*+1)``-th largest calibration ``φ`` (Alg. 1). The
set ``{φ ≤ T̂}`` is closed (``f ≥ e^{−T̂}``), so with ``T* = inf{T : L(T) ≤ ε}`` the event
``L(T̂) > ε`` is ``T̂ < T*``, i.e. at most ``k*`` calibration rows have ``φ ≥ T*``; that count is
``Binomial(n, p)`` with ``p = P(φ ≥ T*) ≥ ε``, so its probability is at most
``Σ_{i≤k*} C(n,i) ε^i (1−ε)^{n−i} < δ``: the guarantee holds with ties (and with a discrete
``φ``), no continuity assumption needed. §3.5's rule "decrement ``k*`` while
``f_(k*+1) = f_(k*)``" leaves ``T̂`` unchanged (every decremented position holds the same value);
it only makes ``k*`` equal the number of calibration rows strictly outside their sets, which is
what ``k_effective_`` reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import check_labels
from calwatch.engine.calibration.maps import TemperatureScaling, check_logits
from calwatch.engine.errors import NotFittedError
from calwatch.engine.pac.bounds import (
    BOUND_NAMES,
    EXACT_CHECK_MAX_N,
    BoundName,
    PACInfeasibleError,
    _check_bound,
    _check_level,
    binomial_k_star,
    binomial_min_n,
    pac_k_star,
    pac_min_n,
    vc_alpha,
    vc_k_star,
    vc_min_n,
)
from calwatch.engine.pac.gaussian import (
    _check_gaussian,
    _check_matrix,
    _gaussian_temperature,
    _GaussianBatch,
    _mahalanobis,
    _take,
)
from calwatch.engine.pac.horizons import accumulate_variance, trajectory_gaussian

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]
SizeMeasure = Literal["volume", "frobenius"]

#: Share of the calibration rows split off to fit the temperature when no
#: ``temperature_data`` is given (paper 003's ``Z'_train``).
TEMPERATURE_FRACTION = 0.2
_LOG_2PI = math.log(2.0 * math.pi)
_TINY = float(np.finfo(np.float64).tiny)


# ----------------------------------------------------------------------------- validation
def _check_flag(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        msg = f"{name} must be True or False; got {value!r}"
        raise TypeError(msg)
    return bool(value)


# ------------------------------------------------------------------- k* and T̂ for fit
def _rows_before_split(n_bound: int) -> int:
    """Smallest total ``N`` whose rows left after the temperature split are at least ``n_bound``."""
    total = math.ceil(n_bound / (1.0 - TEMPERATURE_FRACTION))
    while total - _temperature_rows(total) < n_bound:
        total += 1
    while total > 2 and total - 1 - _temperature_rows(total - 1) >= n_bound:
        total -= 1
    return total


def _temperature_rows(n: int) -> int:
    """Rows split off for the temperature out of ``n`` (at least 1, leaving at least 1)."""
    return min(max(1, round(TEMPERATURE_FRACTION * n)), n - 1)


def _k_star_for_fit(
    n_bound: int, epsilon: float, delta: float, bound: BoundName, *, split_from: int | None
) -> int:
    """``k*`` for ``fit``; an infeasible bound's message says how many rows to pass."""
    try:
        return pac_k_star(n_bound, epsilon, delta, bound)
    except PACInfeasibleError as err:
        if split_from is None:
            raise
        total = _rows_before_split(err.n_required)
        msg = (
            f"{err} — {split_from:,} calibration rows were passed and a seeded "
            f"{TEMPERATURE_FRACTION:.0%} of them fit the temperature, leaving {n_bound:,} for the "
            f"bound: pass at least {total:,} rows, or pass temperature_data=(logits, y) so that "
            f"every calibration row counts"
        )
        raise PACInfeasibleError(msg, n=n_bound, n_required=total) from None


def _order_statistic_threshold(log_f: FloatArray, k: int) -> tuple[float, int]:
    """Alg. 1 with §3.5's ties: the ``(k+1)``-th smallest ``log f`` and the decremented ``k``.

    Returns ``(v, k_eff)``: ``v = log f_(k+1)`` in ascending order (``T̂ = −v``) and
    ``k_eff = #{j : log f_j < v}``, the ``k`` left after decrementing while
    ``f_(k+1) = f_(k)``. ``O(n)`` by partition.
    """
    v = float(np.partition(log_f, k)[k])
    return v, int(np.count_nonzero(log_f < v))


# -------------------------------------------------------------------------- classification
def probabilities_to_logits(P: Any) -> FloatArray:
    """Logits for a model that only gives probabilities: ``log P``, zeros clipped to ``log(tiny)``.

    ``softmax(log P) = P`` (rows summing to 1), so these are valid logits for
    :class:`PACConfidenceSets`. A zero probability becomes ``log(2.2e-308) ≈ −708`` (finite,
    so that temperature scaling and validation accept it); that class's softmax is ~1e-308.
    """
    arr = np.asarray(P, dtype=np.float64)
    out: FloatArray = np.log(np.maximum(arr, _TINY))
    return out


def _log_softmax(z: FloatArray, temperature: float) -> tuple[FloatArray, FloatArray]:
    """``(log f, lse)``: log-probabilities of ``softmax(z / T)`` and each row's log-sum-exp.

    ``lse`` is that of the max-shifted row, so the top class's ``log f`` is exactly ``−lse``.
    Fit and predict call this same function, so a calibration row scores bit-identically in
    both (its own threshold row is always inside its set).
    """
    s = z / temperature if temperature != 1.0 else z.copy()
    s -= s.max(axis=1, keepdims=True)
    lse: FloatArray = np.log(np.exp(s).sum(axis=1))
    s -= lse[:, None]
    return s, lse


class _PACOptions:
    """The options every PAC calibrator shares (validated here, once)."""

    def __init__(
        self,
        *,
        epsilon: float = 0.01,
        delta: float = 1e-5,
        bound: BoundName = "binomial",
        temperature: bool = True,
        seed: int = 0,
    ) -> None:
        self.epsilon = _check_level(epsilon, "epsilon")
        self.delta = _check_level(delta, "delta")
        self.bound: BoundName = _check_bound(bound)
        self.temperature = _check_flag(temperature, "temperature")
        self.seed = int(seed)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(epsilon={self.epsilon!r}, delta={self.delta!r}, "
            f"bound={self.bound!r}, temperature={self.temperature!r}, seed={self.seed!r})"
        )

    @property
    def target_coverage(self) -> float:
        """``1 − ε``: the coverage the sets promise (with probability ``1 − δ``)."""
        return 1.0 - self.epsilon

    def _temperature_split(self, n: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
        """Seeded rows to fit the temperature on, and the rows left for the bound (both sorted).

        The bound is checked on the rows that will remain before any time goes into the fit.
        """
        if n < 2:
            msg = "temperature=True without temperature_data needs at least 2 calibration rows"
            raise ValueError(msg)
        n_temp = _temperature_rows(n)
        _k_star_for_fit(n - n_temp, self.epsilon, self.delta, self.bound, split_from=n)
        perm = np.random.default_rng(self.seed).permutation(n)
        return np.sort(perm[:n_temp]), np.sort(perm[n_temp:])


class PACConfidenceSets(_PACOptions):
    """PAC confidence sets for classification from logits (paper 003 Algorithm 1).

    ``C(x) = {y : f(y | x) ≥ e^{−T̂}} ∪ {ŷ}`` where ``f = softmax(logits / T)`` and ``T̂`` is
    chosen on ``n`` calibration rows so that ``P[L(C) > ε] < δ`` over their draw.

    Always containing the top class ``ŷ = argmax f`` (ALGORITHMS.md §0; ties: lowest index)
    departs from the paper's sets, which can be empty; it only removes errors, so the PAC
    guarantee proved for the paper's set holds for these sets too. It changes a row only when
    every class has ``f < e^{−T̂}``.

    Parameters
    ----------
    epsilon : float
        Error level ``ε``: the sets miss the true label with probability at most ``ε`` …
    delta : float
        … except with probability ``δ`` over the calibration draw.
    bound : {"binomial", "vc"}
        ``"binomial"``: the direct bound of Theorem 1 (:func:`binomial_k_star`), the default;
        ``"vc"``: the VC bound of Eq. 7 (:func:`vc_k_star`), looser (the paper's ablation).
    temperature : bool
        Fit a temperature ``T`` first (paper 003 Eq. 5) on ``temperature_data`` or, if that
        is not given, on a seeded 20% of the calibration rows (the PAC bound then uses the
        other 80%). ``False``: ``f = softmax(logits)``.
    seed : int
        Seed of the temperature split.

    Attributes
    ----------
    input_kind : str
        ``"logits"`` (class attribute): ``fit`` and ``predict_sets`` take logits, not
        probabilities. A caller holding only probabilities passes
        :func:`probabilities_to_logits` of them (log-probabilities are valid logits).
    k_star_ : int
        ``k*`` of the bound for ``n_calibration_`` rows (Eq. 8, or ``⌊α n⌋`` for VC).
    k_effective_ : int
        ``k*`` after §3.5's tie rule: the number of calibration rows strictly below the
        threshold (outside their paper sets), ``≤ k_star_``; equal to it without ties.
    threshold_ : float
        ``T̂ = −log f(y_(k*+1) | x_(k*+1))``: a class is in the set when ``f ≥ e^{−T̂}``.
    temperature_ : float
        The divisor ``T`` of the logits: ``p ∝ exp(logits / T)`` (paper 003's ``τ = 1/T``
        multiplies the log-probabilities); 1.0 when ``temperature=False``.
    n_calibration_ : int
        Calibration rows the PAC bound used (after the temperature split, if any).
    n_temperature_ : int
        Rows the temperature was fitted on (0 when ``temperature=False``).
    n_classes_ : int
        Number of classes ``K``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> logits = rng.normal(size=(2_000, 3)) * 2
    >>> y = np.array([rng.choice(3, p=np.exp(r) / np.exp(r).sum()) for r in logits])
    >>> pac = PACConfidenceSets(epsilon=0.1, delta=0.05, temperature=False).fit(logits, y)
    >>> pac.k_star_, pac.n_calibration_
    (177, 2000)
    >>> pac.predict_sets(np.array([[3.0, 0.0, -1.0]])).tolist()
    [[True, False, False]]
    """

    input_kind: ClassVar[str] = "logits"

    def fit(self, logits_cal: Any, y_cal: Any, temperature_data: Any = None) -> Self:
        """Fit the temperature (optional), ``k*`` and the threshold ``T̂``.

        Parameters
        ----------
        logits_cal : array-like of shape (n, K)
            Calibration logits (finite).
        y_cal : array-like of shape (n,)
            Their true class indices in ``0..K-1``.
        temperature_data : tuple (logits, y), optional
            Separate labelled rows to fit the temperature on (paper 003's ``Z'_train``); then
            all ``n`` calibration rows serve the bound. Requires ``temperature=True``.

        Returns
        -------
        PACConfidenceSets
            ``self``, fitted.

        Raises
        ------
        PACInfeasibleError
            Too few rows for ``ε`` and ``δ``; the message says how many are needed.
        """
        z = check_logits(logits_cal, "logits_cal")
        n, K = z.shape
        y = check_labels(y_cal, K, "y_cal", n_rows=n)
        split_from: int | None = None
        if temperature_data is not None and not self.temperature:
            msg = "temperature_data was given but temperature=False: pass one or the other"
            raise ValueError(msg)
        if not self.temperature:
            T, n_temp = 1.0, 0
        elif temperature_data is not None:
            z_t, y_t = _unpack_pair(temperature_data, "temperature_data", "(logits, y)")
            z_t = check_logits(z_t, "temperature_data logits", n_classes=K)
            y_t = check_labels(y_t, K, "temperature_data labels", n_rows=z_t.shape[0])
            T, n_temp = TemperatureScaling().fit(z_t, y_t).temperature_, int(z_t.shape[0])
        else:
            split_from = n
            temp_rows, keep = self._temperature_split(n)
            n_temp = int(temp_rows.shape[0])
            T = TemperatureScaling().fit(z[temp_rows], y[temp_rows]).temperature_
            z, y = z[keep], y[keep]
        n_bound = int(z.shape[0])
        k = _k_star_for_fit(n_bound, self.epsilon, self.delta, self.bound, split_from=split_from)
        log_f, _ = _log_softmax(z, T)
        v, k_eff = _order_statistic_threshold(log_f[np.arange(n_bound), y], k)
        self.temperature_ = float(T)
        self.n_temperature_ = n_temp
        self.n_calibration_ = n_bound
        self.n_classes_ = int(K)
        self.k_star_ = int(k)
        self.k_effective_ = k_eff
        self._log_threshold = v  # log f of the (k*+1)-th row: the set is log f ≥ this
        self.threshold_ = -v
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "threshold_"):
            msg = "this PACConfidenceSets is not fitted yet: call fit(logits_cal, y_cal) first"
            raise NotFittedError(msg)

    def predict_log_proba(self, logits: Any) -> FloatArray:
        """Temperature-scaled log-probabilities ``log softmax(logits / T)``, shape ``(m, K)``."""
        self._check_fitted()
        z = check_logits(logits, "logits", n_classes=self.n_classes_)
        return _log_softmax(z, self.temperature_)[0]

    def predict_sets(self, logits: Any) -> BoolArray:
        """Confidence sets ``{y : f(y | x) ≥ e^{−T̂}} ∪ {ŷ}`` as an ``(m, K)`` boolean matrix.

        Parameters
        ----------
        logits : array-like of shape (m, K)
            Logits of the rows to predict (the same kind of logits as at ``fit``).
        """
        self._check_fitted()
        z = check_logits(logits, "logits", n_classes=self.n_classes_)
        log_f, lse = _log_softmax(z, self.temperature_)
        sets = log_f >= self._log_threshold
        # The top class has log f = −lse exactly: a row is empty iff −lse < threshold.
        empty = np.flatnonzero(-lse < self._log_threshold)
        if empty.size:
            sets[empty, log_f[empty].argmax(axis=1)] = True
        return sets


def _unpack_pair(data: Any, name: str, form: str) -> tuple[Any, Any]:
    try:
        first, second = data
    except (TypeError, ValueError):
        msg = f"{name} must be a pair {form}; got {type(data).__name__}"
        raise TypeError(msg) from None
    return first, second


# ------------------------------------------------------------------------------ regression
@dataclass(frozen=True)
class Ellipsoids:
    """Ellipsoidal confidence sets ``{y : (y − c)ᵀ S⁻¹ (y − c) ≤ r²}``, one per row.

    Attributes
    ----------
    center : ndarray of shape (m, d)
        The forecast means ``μ(x)``.
    shape : ndarray of shape (m, d, d)
        ``S``: the (temperature-scaled) forecast covariances ``T·Σ(x)``.
    radius : ndarray of shape (m,)
        ``r ≥ 0`` in Mahalanobis units; ``0`` means the set is the single point ``μ``.
    """

    center: FloatArray
    shape: FloatArray
    radius: FloatArray

    @property
    def n_dims(self) -> int:
        """Dimension ``d``."""
        return int(self.center.shape[1])

    def contains(self, y: Any) -> BoolArray:
        """Whether each ``y`` (shape ``(m, d)``) lies in its row's ellipsoid (boundary included)."""
        yv = _check_matrix(y, "y", self.center.shape)
        r2, _ = _mahalanobis(yv - self.center, self.shape)
        out: BoolArray = r2 <= self.radius**2
        return out

    def volume(self) -> FloatArray:
        """``π^{d/2}/Γ(d/2 + 1) · r^d · sqrt(det S)`` (the length ``2 r sqrt(S)`` in 1-D)."""
        from scipy.special import gammaln  # on first use: `import calwatch` stays fast

        d = self.n_dims
        _, logdet = np.linalg.slogdet(self.shape)
        log_unit = 0.5 * d * math.log(math.pi) - float(gammaln(0.5 * d + 1.0))
        with np.errstate(divide="ignore"):
            out: FloatArray = np.exp(log_unit + d * np.log(self.radius) + 0.5 * logdet)
        return out

    def frobenius(self) -> FloatArray:
        """Paper 003's size ``‖Λ‖_F = r · sqrt(trace S)``: the root-sum-square of the semi-axes."""
        out: FloatArray = self.radius * np.sqrt(np.trace(self.shape, axis1=1, axis2=2))
        return out

    def bounding_box(self) -> FloatArray:
        """The smallest axis-aligned box around each ellipsoid, shape ``(m, d, 2)`` (low, high).

        Half-widths ``r · sqrt(S_ii)`` (paper 003 Table 3 draws these boxes).
        """
        half = self.radius[:, None] * np.sqrt(np.diagonal(self.shape, axis1=1, axis2=2))
        out: FloatArray = np.stack([self.center - half, self.center + half], axis=-1)
        return out

    def marginal(self, dims: Any) -> Ellipsoids:
        """The projection onto coordinates ``dims``: same radius, the ``dims`` block of ``S``.

        The shadow of ``{(y − c)ᵀ S⁻¹ (y − c) ≤ r²}`` on a subset ``I`` of coordinates is
        ``{(y_I − c_I)ᵀ (S_II)⁻¹ (y_I − c_I) ≤ r²}``. With :func:`trajectory_gaussian` this gives
        the set for one time step of a horizon forecast.
        """
        index = np.asarray(dims, dtype=np.intp).reshape(-1)
        if index.size == 0 or index.min() < -self.n_dims or index.max() >= self.n_dims:
            msg = f"dims must be coordinates in 0..{self.n_dims - 1}; got {dims!r}"
            raise ValueError(msg)
        return Ellipsoids(
            center=self.center[:, index],
            shape=self.shape[:, index][:, :, index],
            radius=self.radius,
        )


class PACGaussianRegression(_PACOptions):
    """PAC confidence sets for Gaussian forecasts ``N(μ(x), Σ(x))`` (paper 003 §3.6, App. C).

    The set is the density superlevel set ``{y : N(y; μ, T·Σ) ≥ e^{−T̂}}``: with
    ``φ(x, y) = −log N(y; μ, TΣ) = ½(d log 2π + log det TΣ) + ½ r²`` and ``r²`` the
    Mahalanobis distance under ``TΣ``, it is ``{y : r² ≤ ρ²}`` with
    ``ρ² = 2T̂ − d log 2π − log det TΣ``. In 1-D, the interval ``μ ± ρ·sd·√T``
    (App. C: ``μ ± σ sqrt(2(T̂ − log(σ√(2π))))``); in d-D, an ellipsoid.

    Our choices: where ``ρ² < 0`` (a very wide forecast: its whole density is below
    ``e^{−T̂}``) the paper's set is empty; we return the single point ``μ`` (radius 0, size 0),
    the regression analogue of always including ``ŷ`` (ALGORITHMS.md §0). It has measure zero,
    so coverage and the guarantee are those of the paper's set. The temperature ``T`` is the
    closed-form MLE of a covariance multiplier: ``f ∝ exp(τ log N(y; μ, Σ)) = N(y; μ, Σ/τ)``
    (paper 003 Eq. 5 for a Gaussian), so ``T = 1/τ = mean(r²)/d`` on ``Z'_train``.

    Horizon forecasts (§3.6): build the trajectory forecast with :func:`trajectory_gaussian`
    (accumulated variances ``Σ̃_t``, block-diagonal over time), fit and predict in ``H·d``
    dimensions, and read one step's set with ``Ellipsoids.marginal``. One ``T`` is fitted for
    the whole trajectory (the paper fits one per step).

    Parameters
    ----------
    epsilon, delta, bound, seed
        As for :class:`PACConfidenceSets`.
    temperature : bool
        Fit the covariance multiplier ``T`` (on ``temperature_data`` or a seeded 20% of the
        calibration rows); ``False``: ``T = 1``.

    Attributes
    ----------
    k_star_, k_effective_, threshold_, n_calibration_, n_temperature_
        As for :class:`PACConfidenceSets`; ``threshold_`` is ``T̂`` (a bound on ``−log`` density).
    temperature_ : float
        Covariance multiplier ``T``: the forecast is ``N(μ, T·Σ)`` (``sd·√T`` in 1-D).
    n_dims_ : int
        ``0`` for 1-D forecasts given as ``(mean (m,), sd (m,))``; ``d`` for ``(mean (m, d),
        cov (m, d, d))``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> mu, sd = rng.normal(size=3_000), np.full(3_000, 2.0)
    >>> y = mu + sd * rng.normal(size=3_000)
    >>> reg = PACGaussianRegression(epsilon=0.1, delta=0.05, temperature=False).fit(mu, sd, y)
    >>> lo, hi = reg.predict_sets(np.array([0.0]), np.array([2.0]))[0]
    >>> round(float(hi) / 2.0, 2)  # ≈ z_{0.95} = 1.645, a little more for the PAC margin
    1.71
    """

    def _neg_log_density(self, batch: _GaussianBatch, y: FloatArray, T: float) -> FloatArray:
        r2, logdet = batch.terms(y)
        d = batch.d
        out: FloatArray = 0.5 * (d * _LOG_2PI + logdet + d * math.log(T)) + 0.5 * r2 / T
        return out

    def fit(self, mean_cal: Any, scale_cal: Any, y_cal: Any, temperature_data: Any = None) -> Self:
        """Fit the temperature (optional), ``k*`` and ``T̂`` on calibration forecasts.

        Parameters
        ----------
        mean_cal : array-like of shape (n,) or (n, d)
            Forecast means.
        scale_cal : array-like of shape (n,) or (n, d, d) or (d, d)
            1-D: standard deviations (not variances). d-D: covariance matrices.
        y_cal : array-like of shape (n,) or (n, d)
            Observed outcomes.
        temperature_data : tuple (mean, scale, y), optional
            Separate rows to fit ``T`` on; then all calibration rows serve the bound.

        Returns
        -------
        PACGaussianRegression
            ``self``, fitted.
        """
        batch = _check_gaussian(mean_cal, scale_cal, name="calibration", d=None)
        y = _check_matrix(y_cal, "y_cal", batch.mean.shape)
        n = batch.m
        if temperature_data is not None and not self.temperature:
            msg = "temperature_data was given but temperature=False: pass one or the other"
            raise ValueError(msg)
        split_from: int | None = None
        dim = 0 if batch.one_d else batch.d
        if not self.temperature:
            T, n_temp = 1.0, 0
        elif temperature_data is not None:
            try:
                m_t, s_t, y_t = temperature_data
            except (TypeError, ValueError):
                msg = "temperature_data must be a triple (mean, scale, y)"
                raise TypeError(msg) from None
            tb = _check_gaussian(m_t, s_t, name="temperature_data", d=dim)
            T, n_temp = (
                _gaussian_temperature(tb, _check_matrix(y_t, "temperature_data y", tb.mean.shape)),
                tb.m,
            )
        else:
            split_from = n
            temp_rows, keep = self._temperature_split(n)
            n_temp = int(temp_rows.shape[0])
            T = _gaussian_temperature(_take(batch, temp_rows), y[temp_rows])
            batch, y = _take(batch, keep), y[keep]
        n_bound = batch.m
        k = _k_star_for_fit(n_bound, self.epsilon, self.delta, self.bound, split_from=split_from)
        # Ascending f is descending φ: the (k+1)-th smallest log f = −φ.
        v, k_eff = _order_statistic_threshold(-self._neg_log_density(batch, y, T), k)
        self.temperature_ = float(T)
        self.n_temperature_ = int(n_temp)
        self.n_calibration_ = int(n_bound)
        self.n_dims_ = dim
        self.k_star_ = int(k)
        self.k_effective_ = k_eff
        self.threshold_ = -v
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "threshold_"):
            msg = "this PACGaussianRegression is not fitted yet: call fit(mean_cal, scale_cal, y_cal) first"
            raise NotFittedError(msg)

    def _radius(self, batch: _GaussianBatch) -> FloatArray:
        """``ρ = sqrt(max(0, 2T̂ − d log 2π − log det TΣ))`` per row."""
        d, T = batch.d, self.temperature_
        rho2 = 2.0 * self.threshold_ - d * _LOG_2PI - (batch.logdet() + d * math.log(T))
        out: FloatArray = np.sqrt(np.maximum(rho2, 0.0))
        return out

    def contains(self, mean: Any, scale: Any, y: Any) -> BoolArray:
        """Whether each ``y`` is in its confidence set (``φ(x, y) ≤ T̂``, as in ``fit``), ``(m,)``."""
        self._check_fitted()
        batch = _check_gaussian(mean, scale, name="forecasts", d=self.n_dims_)
        yv = _check_matrix(y, "y", batch.mean.shape)
        inside = self._neg_log_density(batch, yv, self.temperature_) <= self.threshold_
        # A point set {μ} (ρ² < 0) still contains y = μ exactly.
        out: BoolArray = inside | np.all((yv == batch.mean).reshape(batch.m, -1), axis=1)
        return out

    def predict_sets(self, mean: Any, scale: Any) -> FloatArray | Ellipsoids:
        """Confidence sets: an ``(m, 2)`` array of intervals (1-D) or :class:`Ellipsoids` (d-D).

        Parameters
        ----------
        mean : array-like of shape (m,) or (m, d)
            Forecast means (the shape used at ``fit``).
        scale : array-like of shape (m,) or (m, d, d) or (d, d)
            Standard deviations (1-D) or covariance matrices (d-D).
        """
        self._check_fitted()
        batch = _check_gaussian(mean, scale, name="forecasts", d=self.n_dims_)
        rho = self._radius(batch)
        T = self.temperature_
        if batch.one_d:
            half = rho * batch.scale * math.sqrt(T)
            out: FloatArray = np.stack([batch.mean - half, batch.mean + half], axis=1)
            return out
        shape = T * np.broadcast_to(batch.scale, (batch.m, batch.d, batch.d))
        return Ellipsoids(center=batch.mean, shape=shape, radius=rho)

    def set_sizes(self, mean: Any, scale: Any, *, measure: SizeMeasure = "volume") -> FloatArray:
        """Size of each set, shape ``(m,)``.

        ``measure="volume"``: length in 1-D, volume in d-D. ``"frobenius"``: paper 003's
        ``‖Λ‖_F = ρ · sqrt(trace TΣ)`` (half the length in 1-D).
        """
        if measure not in ("volume", "frobenius"):
            msg = f"measure must be 'volume' or 'frobenius'; got {measure!r}"
            raise ValueError(msg)
        sets = self.predict_sets(mean, scale)
        if isinstance(sets, Ellipsoids):
            return sets.volume() if measure == "volume" else sets.frobenius()
        length: FloatArray = sets[:, 1] - sets[:, 0]
        return length if measure == "volume" else 0.5 * length


__all__ = [
    "BOUND_NAMES",
    "EXACT_CHECK_MAX_N",
    "TEMPERATURE_FRACTION",
    "BoundName",
    "Ellipsoids",
    "PACConfidenceSets",
    "PACGaussianRegression",
    "PACInfeasibleError",
    "accumulate_variance",
    "binomial_k_star",
    "binomial_min_n",
    "pac_k_star",
    "pac_min_n",
    "probabilities_to_logits",
    "trajectory_gaussian",
    "vc_alpha",
    "vc_k_star",
    "vc_min_n",
]
