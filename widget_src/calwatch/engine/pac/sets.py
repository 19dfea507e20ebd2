"""PAC confidence sets (ALGORITHMS.md §4; paper 003, Park et al., ICLR 2020).

A confidence set predictor ``C_T(x) = {y : f(y | x) ≥ e^{−T}}`` is fitted on ``n`` calibration
rows so that, over the draw of those rows, ``P[L(C) > ε] < δ`` with ``L(C) = P(y ∉ C(x))``
(paper 003 Eq. 2). ``f`` is the model's (optionally temperature-scaled) probability or density.

- :func:`binomial_k_star`: the largest number ``k*`` of calibration rows that may fall outside
  their sets (Theorem 1 / Eq. 8); :func:`vc_k_star` the looser VC alternative (Eq. 7).
- :class:`PACConfidenceSets`: classification from logits (Algorithm 1, ties as §3.5).
- :class:`PACGaussianRegression`: Gaussian forecasts ``N(μ(x), Σ(x))``; intervals in 1-D,
  ellipsoids (:class:`Ellipsoids`) in d-D (Appendix C).
- :func:`accumulate_variance` and :func:`trajectory_gaussian`: horizon forecasts with
  accumulated variance ``Σ̃_t = Σ_{s<t} Σ(x̄_s)`` (§3.6, Appendix C).

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
from fractions import Fraction
from typing import Any, ClassVar, Literal, Self

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import check_labels
from calwatch.engine.calibration.maps import TemperatureScaling, check_logits
from calwatch.engine.errors import NotFittedError

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]
BoundName = Literal["binomial", "vc"]
SizeMeasure = Literal["volume", "frobenius"]

#: The bounds :class:`PACConfidenceSets` and :class:`PACGaussianRegression` accept.
BOUND_NAMES: tuple[BoundName, ...] = ("binomial", "vc")
#: Share of the calibration rows split off to fit the temperature when no
#: ``temperature_data`` is given (paper 003's ``Z'_train``).
TEMPERATURE_FRACTION = 0.2
#: Up to this ``n``, a binomial CDF within :data:`_BORDERLINE_RTOL` of ``δ`` is re-decided in
#: exact integer arithmetic (scipy's CDF is accurate to ~1e-13 relative).
EXACT_CHECK_MAX_N = 2_000
_BORDERLINE_RTOL = 1e-9
_LOG_2PI = math.log(2.0 * math.pi)
_TINY = float(np.finfo(np.float64).tiny)


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


def _check_flag(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        msg = f"{name} must be True or False; got {value!r}"
        raise TypeError(msg)
    return bool(value)


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


def _check_matrix(a: Any, name: str, shape: tuple[int, ...]) -> FloatArray:
    arr = np.asarray(a, dtype=np.float64)
    if arr.shape != shape:
        msg = f"{name} must have shape {shape}; got {arr.shape}"
        raise ValueError(msg)
    if not np.isfinite(arr).all():
        msg = f"{name} contains NaN or inf"
        raise ValueError(msg)
    return arr


def _mahalanobis(diff: FloatArray, cov: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``(r², log det Σ)`` per row for ``diff`` (m, d) and ``cov`` (m, d, d) or (d, d).

    Raises ``ValueError`` naming the first row whose covariance is not positive definite.
    """
    try:
        L = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        covs = cov if cov.ndim == 3 else cov[None]
        bad = np.flatnonzero(np.linalg.eigvalsh(covs).min(axis=1) <= 0)
        row = int(bad[0]) if bad.size else 0
        msg = f"covariance must be symmetric positive definite; row {row} is not"
        raise ValueError(msg) from None
    logdet = 2.0 * np.log(np.diagonal(L, axis1=-2, axis2=-1)).sum(axis=-1)
    if cov.ndim == 2:
        solved = np.linalg.solve(L, diff.T).T
        logdet = np.full(diff.shape[0], float(logdet))
    else:
        solved = np.linalg.solve(L, diff[:, :, None])[:, :, 0]
    r2: FloatArray = np.einsum("ij,ij->i", solved, solved)
    return r2, np.asarray(logdet, dtype=np.float64)


@dataclass(frozen=True)
class _GaussianBatch:
    """Validated Gaussian forecasts: mean (m, d); scale: sd (m,) in 1-D, cov (m|·, d, d) in d-D."""

    mean: FloatArray
    scale: FloatArray
    one_d: bool

    @property
    def m(self) -> int:
        return int(self.mean.shape[0])

    @property
    def d(self) -> int:
        return 1 if self.one_d else int(self.mean.shape[1])

    def terms(self, y: FloatArray) -> tuple[FloatArray, FloatArray]:
        """``(r², log det Σ)`` of each row's ``y``."""
        if self.one_d:
            r = (y - self.mean) / self.scale
            return r * r, 2.0 * np.log(self.scale)
        return _mahalanobis(y - self.mean, self.scale)

    def logdet(self) -> FloatArray:
        if self.one_d:
            out: FloatArray = 2.0 * np.log(self.scale)
            return out
        sign, logdet = np.linalg.slogdet(self.scale)
        if (sign <= 0).any():
            row = int(np.flatnonzero(np.atleast_1d(sign) <= 0)[0])
            msg = f"covariance must be symmetric positive definite; row {row} is not"
            raise ValueError(msg)
        return np.broadcast_to(np.asarray(logdet, dtype=np.float64), (self.m,))


def _check_gaussian(mean: Any, scale: Any, *, name: str, d: int | None) -> _GaussianBatch:
    """Validate ``(mean, sd)`` in 1-D or ``(mean, cov)`` in d-D; ``d`` is the fitted dimension."""
    mu = np.asarray(mean, dtype=np.float64)
    sc = np.asarray(scale, dtype=np.float64)
    if mu.ndim not in (1, 2) or mu.shape[0] == 0:
        msg = f"{name} means must have shape (m,) for 1-D or (m, d) for d-D forecasts; got {mu.shape}"
        raise ValueError(msg)
    if not (np.isfinite(mu).all() and np.isfinite(sc).all()):
        msg = f"{name} means or scales contain NaN or inf"
        raise ValueError(msg)
    m = mu.shape[0]
    if mu.ndim == 1:
        if d not in (None, 0):
            msg = f"{name}: fitted on {d}-D forecasts (means of shape (m, {d})); got 1-D means {mu.shape}"
            raise ValueError(msg)
        if sc.shape != (m,):
            msg = f"{name}: 1-D forecasts need one standard deviation per row, shape ({m},); got {sc.shape}"
            raise ValueError(msg)
        if (sc <= 0).any():
            msg = f"{name} standard deviations must be > 0; found {float(sc.min()):.6g}"
            raise ValueError(msg)
        return _GaussianBatch(mu, sc, one_d=True)
    dim = mu.shape[1]
    if d is not None and dim != d:
        what = "1-D forecasts (means of shape (m,))" if d == 0 else f"{d}-D forecasts"
        msg = f"{name}: fitted on {what}; got means of shape {mu.shape}"
        raise ValueError(msg)
    if sc.shape not in ((m, dim, dim), (dim, dim)):
        msg = (
            f"{name}: d-D forecasts need covariance matrices of shape ({m}, {dim}, {dim}) or a "
            f"shared ({dim}, {dim}); got {sc.shape}"
        )
        raise ValueError(msg)
    asym = np.abs(sc - np.swapaxes(sc, -1, -2)).max()
    if asym > 1e-10 * max(1.0, float(np.abs(sc).max())):
        msg = f"{name} covariance matrices must be symmetric (largest |Σ − Σᵀ| = {asym:.3g})"
        raise ValueError(msg)
    return _GaussianBatch(mu, sc, one_d=False)


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


def _take(batch: _GaussianBatch, rows: IntArray) -> _GaussianBatch:
    scale = batch.scale if (not batch.one_d and batch.scale.ndim == 2) else batch.scale[rows]
    return _GaussianBatch(batch.mean[rows], scale, batch.one_d)


def _gaussian_temperature(batch: _GaussianBatch, y: FloatArray) -> float:
    """MLE of ``T`` in ``N(μ, T Σ)``: ``mean(r²) / d``."""
    r2, _ = batch.terms(y)
    T = float(np.mean(r2)) / batch.d
    if not T > 0.0:
        msg = "cannot fit a temperature: every outcome equals its forecast mean (r² = 0)"
        raise ValueError(msg)
    return T


# -------------------------------------------------------------------------------- horizons
def accumulate_variance(step_covariances: Any, *, axis: int = 1) -> FloatArray:
    """Accumulated variances ``Σ̃_t = Σ(x̄_0) + … + Σ(x̄_{t−1})`` (paper 003 §3.6).

    Parameters
    ----------
    step_covariances : array-like
        One-step forecast (co)variances ``Σ(x̄_s)`` for ``s = 0..H−1`` along ``axis``: shape
        ``(m, H)`` of variances for a scalar state, or ``(m, H, d, d)`` of covariances.
    axis : int
        The horizon axis.

    Returns
    -------
    ndarray
        Same shape; entry ``t − 1`` along ``axis`` is ``Σ̃_t``, the variance of ``x_t``.

    Examples
    --------
    >>> accumulate_variance(np.array([[1.0, 2.0, 3.0]]))
    array([[1., 3., 6.]])
    """
    arr = np.asarray(step_covariances, dtype=np.float64)
    if arr.ndim < 2:
        msg = f"step_covariances must have a row axis and a horizon axis; got shape {arr.shape}"
        raise ValueError(msg)
    if not np.isfinite(arr).all():
        msg = "step_covariances contains NaN or inf"
        raise ValueError(msg)
    if arr.ndim == 2 and (arr < 0).any():
        msg = "step variances must be ≥ 0"
        raise ValueError(msg)
    out: FloatArray = np.cumsum(arr, axis=axis)
    return out


def trajectory_gaussian(
    step_means: Any, step_covariances: Any, *, accumulate: bool = True
) -> tuple[FloatArray, FloatArray]:
    """The trajectory forecast ``N(x̄_{1:H}, blockdiag(Σ̃_1, …, Σ̃_H))`` of paper 003 App. C.

    Parameters
    ----------
    step_means : array-like of shape (m, H) or (m, H, d)
        The mean trajectory ``x̄_1..x̄_H`` (``x̄_{t+1} = μ(x̄_t)``).
    step_covariances : array-like of shape (m, H) or (m, H, d, d)
        One-step (co)variances ``Σ(x̄_0)..Σ(x̄_{H−1})`` (variances, not sds, for a scalar state).
    accumulate : bool
        Use ``Σ̃_t`` (:func:`accumulate_variance`, the paper's "A"); ``False`` uses ``Σ(x̄_{t−1})``.

    Returns
    -------
    mean : ndarray of shape (m, H·d)
        Time-major flattening (step 1's ``d`` coordinates first).
    cov : ndarray of shape (m, H·d, H·d)
        Block-diagonal covariance.

    Examples
    --------
    Fit :class:`PACGaussianRegression` on ``(mean, cov)`` and the flattened observed
    trajectories; ``predict_sets(...).marginal(range((t − 1) * d, t * d))`` is the set for
    ``x_t`` (the projection of the trajectory set: same radius, shape ``T·Σ̃_t``).

    >>> mean, cov = trajectory_gaussian(np.zeros((1, 3)), np.array([[1.0, 1.0, 2.0]]))
    >>> np.diagonal(cov[0]).tolist()
    [1.0, 2.0, 4.0]
    """
    mu = np.asarray(step_means, dtype=np.float64)
    cov = np.asarray(step_covariances, dtype=np.float64)
    if mu.ndim == 2:
        m, H = mu.shape
        d = 1
        if cov.shape != (m, H):
            msg = (
                f"step_covariances must have shape {(m, H)} (variances) for means {mu.shape}; got {cov.shape}"
            )
            raise ValueError(msg)
        cov = cov[:, :, None, None]
        mu = mu[:, :, None]
    elif mu.ndim == 3:
        m, H, d = mu.shape
        if cov.shape != (m, H, d, d):
            msg = f"step_covariances must have shape {(m, H, d, d)} for means {mu.shape}; got {cov.shape}"
            raise ValueError(msg)
    else:
        msg = f"step_means must have shape (m, H) or (m, H, d); got {mu.shape}"
        raise ValueError(msg)
    blocks = accumulate_variance(cov, axis=1) if accumulate else cov
    if not np.isfinite(mu).all():
        msg = "step_means contains NaN or inf"
        raise ValueError(msg)
    full = np.zeros((m, H * d, H * d), dtype=np.float64)
    for t in range(H):
        full[:, t * d : (t + 1) * d, t * d : (t + 1) * d] = blocks[:, t]
    return mu.reshape(m, H * d), full


__all__ = [
    "BOUND_NAMES",
    "TEMPERATURE_FRACTION",
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
