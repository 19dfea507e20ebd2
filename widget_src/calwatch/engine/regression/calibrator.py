"""Modular conformal calibration for regression (ALGORITHMS.md §3; paper 001).

:class:`ModularConformalCalibrator` turns any regression model's output (a point prediction,
an interval, quantiles, a distribution, or an ensemble of these) into a calibrated predictive
distribution, in three modular steps: a calibration score ``φ(h(x), y)`` strictly increasing in
``y`` (:mod:`calwatch.engine.regression.scores`), the sorted scores of a held-out calibration
set, and an interpolation ``q`` of them (:mod:`calwatch.engine.regression.interpolation`). For a
test row the calibrated CDF is ``F(y | x) = q(φ(h(x), y))``: :class:`CalibratedCDF`, vectorised
over rows. Theorem 1 of paper 001: with an ε-accurate ``q`` (0 for linear and random, ``epsilon_``
for NAF) and continuous scores, ``F`` is ε-calibrated; random interpolation is exactly calibrated.

Cost. Fitting sorts ``n`` scores. A test row's CDF at a label is one score and one binary
search (``O(log n)``); quantiles invert ``q`` once per level for all rows (except random
interpolation, whose ``u`` differs per row: one binary search per row and level) and then ``φ``
in closed form (bisection for ensembles and callable CDFs). No ``n_test × n_cal`` array is ever
formed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.special import ndtr

from calwatch.engine.errors import NotFittedError
from calwatch.engine.regression.interpolation import (
    INTERPOLATIONS,
    Interpolation,
    InterpolationName,
    NAFInterpolation,
    make_interpolation,
)
from calwatch.engine.regression.scores import (
    MEMBER_TYPES,
    PREDICTION_TYPES,
    SCORE_NAMES,
    CDFPrediction,
    MemberName,
    PredictionName,
    ScoreMap,
    ScoreName,
    as_float_array,
    build_score_map,
    check_levels,
    rearrange_quantiles,
)

FloatArray = npt.NDArray[np.float64]

#: Version of :meth:`ModularConformalCalibrator.state`'s layout.
STATE_VERSION = 1
#: Nodes of the mean and variance by quadrature (ensembles, callable CDFs): the trapezoid rule
#: for ``E[Y^k] = ∫ F⁻¹(Φ(t))^k φ(t) dt`` on a uniform grid of ``t ∈ [−7, 7]`` (the mass beyond is
#: 2.6e-12). The substitution ``p = Φ(t)`` reaches far into both tails, where a grid in ``p`` stops
#: short; a dense uniform grid (not Gauss-Legendre) because a linear interpolation's ``F⁻¹`` has a
#: kink at every calibration score.
MOMENT_NODES = 513
_MOMENT_T = np.linspace(-7.0, 7.0, MOMENT_NODES)
_MOMENT_P = np.asarray(ndtr(_MOMENT_T), dtype=np.float64)
_MOMENT_W = np.exp(-0.5 * _MOMENT_T**2)
_MOMENT_W[[0, -1]] *= 0.5
_MOMENT_W /= _MOMENT_W.sum()


def _check_probability_levels(p: FloatArray, name: str) -> None:
    if p.size and (float(p.min()) < 0.0 or float(p.max()) > 1.0):
        msg = f"{name} must hold probabilities in [0, 1]; found values in [{p.min():.6g}, {p.max():.6g}]"
        raise ValueError(msg)


class CalibratedCDF:
    """The calibrated predictive distributions of ``m`` rows: ``F(y | x_i) = q(φ(h(x_i), y))``.

    Made by :meth:`ModularConformalCalibrator.predict`. Arguments that hold label values or
    probabilities are row-aligned: a scalar (the same value for every row) or an array of shape
    ``(m,)`` give one value per row, shape ``(m,)``; a 2-D array of shape ``(m, k)`` (or ``(1, k)``,
    the same ``k`` values for every row) gives ``k`` values per row, shape ``(m, k)``.

    Examples
    --------
    >>> mcc = ModularConformalCalibrator(prediction="point").fit(np.zeros(4), np.array([1.0, 2.0, 4.0, 7.0]))
    >>> F = mcc.predict(np.array([0.0, 10.0]))
    >>> F.cdf(np.array([3.0, 13.0])).tolist()
    [0.5, 0.5]
    >>> F.ppf(0.5).tolist(), (np.round(F.interval(0.8), 12) + 0.0).tolist()
    ([3.0, 13.0], [[0.0, 8.0], [10.0, 18.0]])
    """

    def __init__(self, scores: ScoreMap, interpolation: Interpolation, u: FloatArray | None = None) -> None:
        self._map = scores
        self._q = interpolation
        self._u = None if u is None else u.reshape(-1, 1)
        self.n_rows = scores.n_rows

    def __len__(self) -> int:
        return self.n_rows

    def __repr__(self) -> str:
        return f"CalibratedCDF(rows={self.n_rows}, interpolation={self._q.kind!r})"

    def __getitem__(self, rows: Any) -> CalibratedCDF:
        """The distributions of a subset of rows (index array, boolean mask or slice)."""
        if isinstance(rows, (int, np.integer)):
            rows = slice(int(rows), int(rows) + 1 if int(rows) != -1 else None)
        u = None if self._u is None else self._u[rows, 0]
        return CalibratedCDF(self._map.take(rows), self._q, u)

    # ------------------------------------------------------------------ properties
    @property
    def interpolation(self) -> Interpolation:
        """The fitted interpolation ``q`` (shared by every row)."""
        return self._q

    @property
    def continuous(self) -> bool:
        """Whether the CDF is continuous with a density (linear and NAF interpolation)."""
        return self._q.continuous

    @property
    def proper(self) -> bool:
        """Whether ``F(−∞) = 0`` and ``F(+∞) = 1`` (not so for naive and random interpolation)."""
        return self._q.proper

    @property
    def u(self) -> FloatArray | None:
        """The per-row uniform draws of random interpolation (``None`` otherwise)."""
        return None if self._u is None else self._u[:, 0].copy()

    # ------------------------------------------------------------------ shapes
    def _rows2d(self, value: Any, name: str, *, probabilities: bool = False) -> tuple[FloatArray, bool]:
        arr = as_float_array(value, name, ndim=(0, 1, 2), allow_inf=not probabilities)
        if probabilities:
            _check_probability_levels(arr, name)
        m = self.n_rows
        if arr.ndim == 0:
            return arr.reshape(1, 1), True
        if arr.ndim == 1:
            if arr.shape[0] != m:
                msg = (
                    f"{name} must be a scalar, shape ({m},) (one value per row), or 2-D ({m}, k) or (1, k);"
                    f" got shape {arr.shape}"
                )
                raise ValueError(msg)
            return arr.reshape(m, 1), True
        if arr.shape[0] not in (1, m):
            msg = f"a 2-D {name} must have {m} rows (or 1, shared by all rows); got shape {arr.shape}"
            raise ValueError(msg)
        return arr, False

    def _out(self, values: FloatArray, squeeze: bool) -> FloatArray:
        full = np.broadcast_to(values, (self.n_rows, values.shape[1]))
        out: FloatArray = np.ascontiguousarray(full[:, 0] if squeeze else full)
        return out

    # ------------------------------------------------------------------ distribution
    def cdf(self, y: Any) -> FloatArray:
        """``F(y | x)``; at the observed labels, the probability integral transform (PIT)."""
        y2, squeeze = self._rows2d(y, "y")
        return self._out(self._q.cdf(self._map.score(y2), self._u), squeeze)

    def ppf(self, q: Any) -> FloatArray:
        """The quantile function ``inf{y : F(y | x) ≥ q}`` (``±inf`` if an improper CDF never reaches q)."""
        p2, squeeze = self._rows2d(q, "q", probabilities=True)
        s = self._q.ppf(p2, self._u)
        return self._out(self._map.inverse(s), squeeze)

    def pdf(self, y: Any) -> FloatArray:
        """The calibrated density ``q'(φ(y))·φ'(y)`` (linear and NAF interpolation only).

        Raises
        ------
        ValueError
            For naive and random interpolation (step CDFs) or a callable CDF without ``pdf``.
        """
        if not self._q.continuous:
            msg = f"interpolation={self._q.kind!r} gives a step CDF without a density; use 'linear' or 'naf'"
            raise ValueError(msg)
        if not self._map.has_derivative:
            msg = "the calibrated density needs the prediction's pdf: pass pdf= to CDFPrediction"
            raise ValueError(msg)
        y2, squeeze = self._rows2d(y, "y")
        dens = self._q.density(self._map.score(y2)) * self._map.derivative(y2)
        return self._out(np.where(np.isfinite(dens), dens, 0.0), squeeze)

    def logpdf(self, y: Any) -> FloatArray:
        """``log pdf(y)``; ``-inf`` outside the support (linear interpolation's is bounded)."""
        with np.errstate(divide="ignore"):
            out: FloatArray = np.log(self.pdf(y))
        return out

    def interval(self, level: float = 0.9) -> FloatArray:
        """The central credible interval ``[F⁻¹((1−level)/2), F⁻¹((1+level)/2)]``, shape ``(m, 2)``."""
        lvl = float(level)
        if not 0.0 < lvl < 1.0:
            msg = f"level must be in (0, 1); got {level!r}"
            raise ValueError(msg)
        return self.ppf(np.array([[0.5 - 0.5 * lvl, 0.5 + 0.5 * lvl]]))

    def median(self) -> FloatArray:
        """``F⁻¹(0.5)`` per row."""
        return self.ppf(0.5)

    def support(self) -> FloatArray:
        """Labels ``(lo, hi)`` per row between which the finite part of the distribution lies, ``(m, 2)``.

        Linear: the end knots; naive and random: the extreme calibration scores strictly inside
        the score's range (their improper tails put mass ``≤ 1/(n+1)`` at ``±∞``); NAF: the
        score's range (``±inf`` labels).
        """
        lo, hi = self._q.support()
        return self._out(self._map.inverse(np.array([[lo, hi]])), False)

    def _improper(self) -> tuple[FloatArray, FloatArray]:
        lower, upper = self._q.improper_mass(self._u)
        shape = (self.n_rows,)
        return (
            np.broadcast_to(np.asarray(lower, dtype=np.float64).ravel(), shape).copy(),
            np.broadcast_to(np.asarray(upper, dtype=np.float64).ravel(), shape).copy(),
        )

    def _moments(self) -> tuple[FloatArray, FloatArray]:
        segments = self._map.segments()
        if segments is not None:
            P, M1, M2 = self._q.partial_moments(segments.breaks, segments.transform)
            alpha, beta = segments.alpha, segments.beta
            mean = alpha @ P + beta @ M1
            d = alpha - mean[:, None]
            var = (d * d) @ P + 2.0 * (d * beta) @ M1 + (beta * beta) @ M2
            return mean, np.maximum(var, 0.0)
        # quadrature over probability levels: E[Y^k] = ∫ F⁻¹(p)^k dp, a few levels at a time
        y = np.empty((self.n_rows, MOMENT_NODES))
        block = max(1, 500_000 // self.n_rows)
        for start in range(0, MOMENT_NODES, block):
            y[:, start : start + block] = self.ppf(_MOMENT_P[None, start : start + block])
        mean = y @ _MOMENT_W
        d = y - mean[:, None]
        return mean, (d * d) @ _MOMENT_W

    def mean(self) -> FloatArray:
        """The mean per row.

        Exact for point, interval, quantile and Gaussian predictions (from the interpolated score
        law's partial moments, computed once for all rows); by the trapezoid rule over
        ``F⁻¹(Φ(t))``, 513 points of ``|t| ≤ 7``, for ensembles and callable CDFs. Improper CDFs
        (naive, random): ``+inf`` with mass only at ``+∞``, ``nan`` with mass at both ends.
        """
        lower, upper = self._improper()
        if self._q.proper:
            return self._moments()[0]
        out = np.where(upper > 0, math.inf, np.where(lower > 0, -math.inf, 0.0))
        return np.where((upper > 0) & (lower > 0), math.nan, out)

    def var(self) -> FloatArray:
        """The variance per row (``inf`` for improper CDFs); see :meth:`mean`."""
        if not self._q.proper:
            return np.full(self.n_rows, math.inf)
        return self._moments()[1]

    def std(self) -> FloatArray:
        """The standard deviation per row (``inf`` for improper CDFs); see :meth:`mean`."""
        return np.sqrt(self.var())

    def sample(self, n: int, seed: int | np.random.Generator | None = 0) -> FloatArray:
        """``n`` draws per row by inverse transform, shape ``(m, n)`` (improper CDFs can draw ``±inf``)."""
        if int(n) != n or n < 1:
            msg = f"n must be a positive integer; got {n!r}"
            raise ValueError(msg)
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        return self.ppf(rng.uniform(size=(self.n_rows, int(n))))


class ModularConformalCalibrator:
    """Modular conformal calibration (MCC, paper 001): any regression output → a calibrated CDF.

    Parameters
    ----------
    prediction : {"point", "interval", "quantile", "distribution", "ensemble"}
        The base prediction type and its layout per batch of ``m`` rows: point ``(m,)``; interval
        ``(m, 2)`` as (lower, upper); quantile ``(m, L)`` at ``quantile_levels``; distribution
        ``(m, 2)`` as Gaussian (mean, sd), or a :class:`CDFPrediction` (any callable CDF); ensemble
        a list of member predictions, whose score is the (weighted) sum of the members' scores.
    score : {"cdf", "z", None}
        Score of distribution predictions (and distribution members of an ensemble): ``"cdf"``,
        ``F̂(y)`` (isotonic/conformal calibration), or ``"z"``, ``(y − μ)/σ``. ``None`` is ``"z"``
        (numerically stable: ``Φ`` rounds to 0 or 1 beyond ~8 sd). Other types have one score.
    interpolation : {"linear", "naive", "random", "naf"}
        How the sorted calibration scores become the CDF of the score (see
        :mod:`calwatch.engine.regression.interpolation`). ``"random"`` draws one ``u`` per test row
        from a generator seeded by ``seed`` (or takes ``u=`` in :meth:`predict`).
    quantile_levels : array-like, optional
        Levels ``τ_1 < … < τ_L`` in (0, 1) of quantile predictions (and quantile members).
    members : sequence of str, optional
        Ensemble only: each member's type; by default inferred from its shape ((m,) point, (m, 2)
        Gaussian, (m, L) quantiles at ``quantile_levels``).
    weights : array-like, optional
        Ensemble only: positive weights of the members' scores (default all 1).
    naf_units, naf_epochs, naf_learning_rate : int, int, float
        NAF interpolation's network size and training budget.
    progress : bool
        Show a progress bar while training NAF.
    seed : int
        Seeds the random interpolation's draws and NAF's training.

    Attributes
    ----------
    scores_ : ndarray of shape (n,)
        The sorted calibration scores.
    n_calibration_ : int
        ``n``.
    interpolation_ : Interpolation
        The fitted interpolation ``q`` (``interpolation_.epsilon_`` is NAF's accuracy ε).
    score_ : str or None
        The score used for distribution predictions (``None`` for other types).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> mu = rng.normal(size=2_000); y = mu + rng.normal(scale=2.0, size=2_000)
    >>> mcc = ModularConformalCalibrator(prediction="point").fit(mu[:1_000], y[:1_000])
    >>> F = mcc.predict(mu[1_000:])
    >>> lo, hi = F.interval(0.9).T
    >>> round(float(np.mean((lo <= y[1_000:]) & (y[1_000:] <= hi))), 2)  # 0.90 ± 0.013 (binomial sd)
    0.89
    """

    def __init__(
        self,
        *,
        prediction: PredictionName = "point",
        score: ScoreName | None = None,
        interpolation: InterpolationName = "linear",
        quantile_levels: Any = None,
        members: Sequence[MemberName] | None = None,
        weights: Any = None,
        naf_units: int = 100,
        naf_epochs: int = 1_000,
        naf_learning_rate: float = 0.02,
        progress: bool = True,
        seed: int = 0,
    ) -> None:
        if prediction not in PREDICTION_TYPES:
            msg = f"prediction must be one of {PREDICTION_TYPES}; got {prediction!r}"
            raise ValueError(msg)
        if score is not None and score not in SCORE_NAMES:
            msg = f"score must be one of {SCORE_NAMES} or None; got {score!r}"
            raise ValueError(msg)
        if score is not None and prediction not in ("distribution", "ensemble"):
            msg = (
                f"score={score!r} applies to distribution predictions (and ensemble members); "
                f"prediction={prediction!r} has one score: leave score=None"
            )
            raise ValueError(msg)
        if interpolation not in INTERPOLATIONS:
            msg = f"interpolation must be one of {INTERPOLATIONS}; got {interpolation!r}"
            raise ValueError(msg)
        levels = None
        if quantile_levels is not None:
            if prediction not in ("quantile", "ensemble"):
                msg = f"quantile_levels applies to quantile predictions; got prediction={prediction!r}"
                raise ValueError(msg)
            levels = check_levels(quantile_levels)
        elif prediction == "quantile":
            msg = "prediction='quantile' needs quantile_levels (the level of each column)"
            raise ValueError(msg)
        if members is not None:
            if prediction != "ensemble":
                msg = f"members applies to prediction='ensemble'; got prediction={prediction!r}"
                raise ValueError(msg)
            bad = [m for m in members if m not in MEMBER_TYPES]
            if bad or isinstance(members, str) or len(members) == 0:
                msg = f"members must be a non-empty sequence of {MEMBER_TYPES}; got {members!r}"
                raise ValueError(msg)
        w = None
        if weights is not None:
            if prediction != "ensemble":
                msg = f"weights applies to prediction='ensemble'; got prediction={prediction!r}"
                raise ValueError(msg)
            w = as_float_array(weights, "weights", ndim=1)
            if w.shape[0] == 0 or np.any(w <= 0):
                msg = f"weights must be positive; got {w.tolist()}"
                raise ValueError(msg)
        for name, value in (("naf_units", naf_units), ("naf_epochs", naf_epochs)):
            if int(value) != value or value < 1:
                msg = f"{name} must be a positive integer; got {value!r}"
                raise ValueError(msg)
        if not (math.isfinite(naf_learning_rate) and naf_learning_rate > 0):
            msg = f"naf_learning_rate must be a positive number; got {naf_learning_rate!r}"
            raise ValueError(msg)
        if int(seed) != seed:
            msg = f"seed must be an integer; got {seed!r}"
            raise TypeError(msg)
        self.prediction: PredictionName = prediction
        self.score: ScoreName | None = score
        self.interpolation: InterpolationName = interpolation
        self.quantile_levels = levels
        self.members: tuple[MemberName, ...] | None = None if members is None else tuple(members)
        self.weights = w
        self.naf_units = int(naf_units)
        self.naf_epochs = int(naf_epochs)
        self.naf_learning_rate = float(naf_learning_rate)
        self.progress = bool(progress)
        self.seed = int(seed)

    def __repr__(self) -> str:
        options = [f"prediction={self.prediction!r}", f"interpolation={self.interpolation!r}"]
        if self.score is not None:
            options.append(f"score={self.score!r}")
        if self.quantile_levels is not None:
            options.append(f"quantile_levels={self.quantile_levels.tolist()!r}")
        if self.members is not None:
            options.append(f"members={list(self.members)!r}")
        if self.weights is not None:
            options.append(f"weights={self.weights.tolist()!r}")
        if self.seed:
            options.append(f"seed={self.seed!r}")
        return f"ModularConformalCalibrator({', '.join(options)})"

    @property
    def _score_name(self) -> ScoreName:
        return self.score if self.score is not None else "z"

    def _score_map(self, pred: Any, name: str, n_rows: int | None = None) -> ScoreMap:
        return build_score_map(
            self.prediction,
            pred,
            name,
            score=self._score_name,
            levels=self.quantile_levels,
            members=self.members,
            weights=self.weights,
            n_rows=n_rows,
        )

    def _check_fitted(self) -> None:
        if not hasattr(self, "scores_"):
            msg = "this ModularConformalCalibrator is not fitted yet: call fit(pred_cal, y_cal) first"
            raise NotFittedError(msg)

    # ------------------------------------------------------------------ fitting
    def fit(self, pred_cal: Any, y_cal: Any) -> ModularConformalCalibrator:
        """Score the calibration rows, sort the scores and fit the interpolation.

        Parameters
        ----------
        pred_cal
            Base predictions of the ``n`` calibration rows, in the layout of ``prediction``. The
            base model must not have been trained on these rows.
        y_cal : array-like of shape (n,)
            Their observed labels.

        Returns
        -------
        ModularConformalCalibrator
            ``self``, fitted.
        """
        y = as_float_array(y_cal, "y_cal", ndim=1)
        if y.shape[0] == 0:
            msg = "y_cal is empty: expected at least one calibration row"
            raise ValueError(msg)
        scores_map = self._score_map(pred_cal, "pred_cal", n_rows=y.shape[0])
        scores = np.sort(scores_map.score(y.reshape(-1, 1))[:, 0])
        if not np.isfinite(scores).all():  # pragma: no cover - finite inputs give finite scores
            msg = "the calibration scores are not all finite; check pred_cal and y_cal"
            raise ValueError(msg)
        options = {
            "units": self.naf_units,
            "epochs": self.naf_epochs,
            "learning_rate": self.naf_learning_rate,
            "seed": self.seed,
            "progress": self.progress,
        }
        self.interpolation_ = make_interpolation(
            self.interpolation, scores, scores_map.score_range, naf_options=options
        )
        self.score_range_ = scores_map.score_range
        self.scores_ = scores
        self.n_calibration_ = int(scores.shape[0])
        self.score_: ScoreName | None = (
            self._score_name if self.prediction in ("distribution", "ensemble") else None
        )
        self._rng = np.random.default_rng([self.seed, 1])
        return self

    # ------------------------------------------------------------------ predicting
    def predict(self, pred: Any, *, u: Any = None) -> CalibratedCDF:
        """The calibrated CDFs of a batch of base predictions.

        Parameters
        ----------
        pred
            Base predictions of ``m`` rows, in the layout of ``prediction``.
        u : array-like of shape (m,), optional
            Random interpolation only: the per-row uniform draws (default: the next ``m`` draws of
            the calibrator's generator, seeded by ``seed``; successive batches get fresh draws).

        Returns
        -------
        CalibratedCDF
        """
        self._check_fitted()
        scores_map = self._score_map(pred, "pred")
        draws = None
        if self.interpolation == "random":
            if u is None:
                draws = self._rng.uniform(size=scores_map.n_rows)
            else:
                draws = as_float_array(u, "u", ndim=1)
                if draws.shape[0] != scores_map.n_rows or draws.min() < 0.0 or draws.max() > 1.0:
                    msg = f"u must hold {scores_map.n_rows} values in [0, 1]; got shape {draws.shape}"
                    raise ValueError(msg)
        elif u is not None:
            msg = f"u applies to interpolation='random'; this calibrator uses {self.interpolation!r}"
            raise ValueError(msg)
        return CalibratedCDF(scores_map, self.interpolation_, draws)

    def predict_rows(
        self, pred: Any, y: Any = None, *, levels: Sequence[float] = (0.5, 0.9), u: Any = None
    ) -> dict[str, FloatArray]:
        """Per-row results of a batch as named columns (for a monitor's frame).

        Columns: ``median``; ``lower_<pct>`` and ``upper_<pct>`` for each central credible level
        (``lower_90`` for 0.9); ``mean`` and ``std`` (proper CDFs only). With labels ``y`` also
        ``pit`` (``F(y | x)``), ``covered_<pct>`` (1.0 or 0.0), ``crps``, and ``nll`` (continuous
        CDFs only; ``inf`` outside a bounded support).

        Returns
        -------
        dict of str to ndarray of shape (m,), float64
        """
        from calwatch.engine.regression.metrics import crps as crps_values

        F = self.predict(pred, u=u)
        out: dict[str, FloatArray] = {"median": F.median()}
        labels = None if y is None else as_float_array(y, "y", ndim=1)
        if labels is not None and labels.shape[0] != F.n_rows:
            msg = f"y has {labels.shape[0]} labels but pred has {F.n_rows} rows"
            raise ValueError(msg)
        for level in levels:
            pct = f"{100 * float(level):g}".replace(".", "_")
            bounds = F.interval(level)
            out[f"lower_{pct}"], out[f"upper_{pct}"] = bounds[:, 0], bounds[:, 1]
            if labels is not None:
                covered = (bounds[:, 0] <= labels) & (labels <= bounds[:, 1])
                out[f"covered_{pct}"] = covered.astype(np.float64)
        if F.proper:
            mean, var = F._moments()
            out["mean"], out["std"] = mean, np.sqrt(var)
        if labels is not None:
            out["pit"] = F.cdf(labels)
            out["crps"] = crps_values(F, labels)
            if F.continuous:
                out["nll"] = -F.logpdf(labels)
        return out

    # ------------------------------------------------------------------ snapshots
    def state(self) -> tuple[dict[str, FloatArray], dict[str, Any]]:
        """The fitted calibrator as plain arrays and a JSON-able dict (for snapshots; no pickle).

        Returns
        -------
        arrays : dict of str to ndarray
            ``scores`` (sorted calibration scores), ``quantile_levels`` and ``weights`` when set,
            and NAF's weights (``naf_c``, ``naf_log_a``, ``naf_omega``).
        info : dict
            Options, the score range, NAF's standardisation and the random generator's state;
            ``json.dumps`` accepts it.
        """
        self._check_fitted()
        arrays: dict[str, FloatArray] = {"scores": self.scores_.copy()}
        if self.quantile_levels is not None:
            arrays["quantile_levels"] = self.quantile_levels.copy()
        if self.weights is not None:
            arrays["weights"] = self.weights.copy()
        naf_arrays, naf_info = self.interpolation_.state()
        arrays.update(naf_arrays)
        lo, hi = self.score_range_
        info: dict[str, Any] = {
            "kind": "ModularConformalCalibrator",
            "version": STATE_VERSION,
            "params": {
                "prediction": self.prediction,
                "score": self.score,
                "interpolation": self.interpolation,
                "members": None if self.members is None else list(self.members),
                "naf_units": self.naf_units,
                "naf_epochs": self.naf_epochs,
                "naf_learning_rate": self.naf_learning_rate,
                "progress": self.progress,
                "seed": self.seed,
            },
            "score_range": [None if math.isinf(lo) else lo, None if math.isinf(hi) else hi],
            "rng": self._rng.bit_generator.state,
            **naf_info,
        }
        return arrays, info

    @classmethod
    def from_state(cls, arrays: dict[str, Any], info: dict[str, Any]) -> ModularConformalCalibrator:
        """Rebuild a fitted calibrator from :meth:`state`'s output (NAF is not retrained).

        Raises
        ------
        ValueError
            ``info`` is not a state of this class and version, or ``arrays`` lack what it needs.
        """
        if info.get("kind") != "ModularConformalCalibrator" or info.get("version") != STATE_VERSION:
            msg = (
                f"not a ModularConformalCalibrator state of version {STATE_VERSION}: "
                f"kind={info.get('kind')!r}, version={info.get('version')!r}"
            )
            raise ValueError(msg)
        params = dict(info["params"])
        if "scores" not in arrays:
            msg = "state arrays are missing 'scores'"
            raise ValueError(msg)
        obj = cls(
            quantile_levels=arrays.get("quantile_levels"),
            weights=arrays.get("weights"),
            **params,
        )
        scores = np.asarray(arrays["scores"], dtype=np.float64)
        if scores.ndim != 1 or scores.shape[0] == 0 or np.any(np.diff(scores) < 0):
            msg = "state array 'scores' must be a non-empty sorted 1-D array"
            raise ValueError(msg)
        lo, hi = info["score_range"]
        score_range = (-math.inf if lo is None else float(lo), math.inf if hi is None else float(hi))
        naf_params = None
        if obj.interpolation == "naf":
            missing = {"naf_c", "naf_log_a", "naf_omega"} - set(arrays)
            if missing:
                msg = f"state arrays are missing {sorted(missing)}"
                raise ValueError(msg)
            naf_params = {
                "center": info["naf_center"],
                "scale": info["naf_scale"],
                "loss": info["naf_loss"],
                "c": arrays["naf_c"],
                "log_a": arrays["naf_log_a"],
                "omega": arrays["naf_omega"],
            }
        obj.interpolation_ = make_interpolation(obj.interpolation, scores, score_range, naf_params=naf_params)
        obj.score_range_ = score_range
        obj.scores_ = scores
        obj.n_calibration_ = int(scores.shape[0])
        obj.score_ = obj._score_name if obj.prediction in ("distribution", "ensemble") else None
        obj._rng = np.random.default_rng()
        obj._rng.bit_generator.state = info["rng"]
        return obj


__all__ = [
    "CDFPrediction",
    "CalibratedCDF",
    "ModularConformalCalibrator",
    "NAFInterpolation",
    "NotFittedError",
    "rearrange_quantiles",
]
