"""The tests of one window for the label-free monitors: alpha spending, Welch z, chi-square.

This module computes what one look of :class:`~calwatch.engine.shift.monitors.RiskJump` or
:class:`~calwatch.engine.shift.monitors.PredictionMix` reports, from the window's values and
the calibration summary the monitor keeps: the level of look ``k`` under alpha spending
(``6δ/(π²k²)``, summing to ``δ`` over all looks), the one-sided Welch z-test of a jump in mean
risk (:func:`risk_jump_look`), Pearson's two-sample chi-square of predicted-class counts
(:func:`chi_square_two_sample`, :func:`prediction_mix_look`), and the check every monitor
applies to a window's values. The monitors, which keep the state between looks, live in
:mod:`calwatch.engine.shift.monitors`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def _spent_level(delta: float, look: int) -> float:
    """Alpha spending over looks: look ``k`` (1-based) gets ``6δ / (π² k²)``; the levels sum to δ."""
    return 6.0 * delta / (math.pi**2 * look**2)


def _as_1d(values: Any, name: str, *, dtype: Any = np.float64) -> npt.NDArray[Any]:
    arr = np.asarray(values.to_numpy() if hasattr(values, "to_numpy") else values)
    if arr.ndim != 1 or arr.shape[0] == 0:
        msg = f"{name} must be a non-empty 1-D array; got shape {arr.shape}"
        raise ValueError(msg)
    out = arr.astype(dtype)
    if np.issubdtype(out.dtype, np.floating) and not np.isfinite(out).all():
        msg = f"{name} contains NaN or inf"
        raise ValueError(msg)
    return out


def chi_square_two_sample(counts_a: Any, counts_b: Any) -> tuple[float, int]:
    """Pearson's chi-square of a ``2 × K`` table of counts; returns (statistic, degrees of freedom).

    Columns empty in both rows are dropped; ``df = K' − 1``.

    Examples
    --------
    >>> chi_square_two_sample([50, 50, 0], [30, 10, 0])  # 175/24; the empty third class dropped
    (7.291666666666668, 1)
    """
    table = np.vstack([np.asarray(counts_a, dtype=np.float64), np.asarray(counts_b, dtype=np.float64)])
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2 or (table.sum(axis=1) == 0).any():
        return 0.0, max(table.shape[1] - 1, 0)
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    return float(((table - expected) ** 2 / expected).sum()), int(table.shape[1] - 1)


def risk_jump_look(
    risk: FloatArray,
    *,
    calibration_mean: float,
    calibration_var: float,
    n_calibration: int,
    min_jump: float,
    delta: float,
    look: int,
) -> dict[str, Any]:
    """Look ``look`` (1-based) of the risk-jump test on a window's per-row risks.

    The jump ``Δ = mean_w − mean_cal``, its standard error ``sqrt(v_w/m + v_cal/n)`` and the
    interval ``Δ ± z·se`` with ``z = Φ⁻¹(1 − δ_k)``, ``δ_k = 6δ/(π²k²)``; the look alarms when
    ``Δ`` exceeds ``min_jump + z·se``.

    Returns
    -------
    dict
        The fields of the look's :class:`~calwatch.engine.shift.monitors.MonitorResult` but
        its ``name`` and ``rows_seen``.

    Examples
    --------
    >>> out = risk_jump_look(np.array([0.4, 0.5, 0.4, 0.5]), calibration_mean=0.15,
    ...                      calibration_var=1 / 300, n_calibration=4, min_jump=0.0, delta=0.01, look=1)
    >>> round(out["statistic"], 12), out["alarm"]
    (0.3, True)
    """
    from scipy.stats import norm  # on first use: `import calwatch` stays fast

    level = _spent_level(delta, look)
    z = float(norm.isf(level))
    m = risk.shape[0]
    var_w = float(risk.var(ddof=1)) if m > 1 else 0.0
    se = math.sqrt(var_w / m + calibration_var / n_calibration)
    jump = float(risk.mean()) - calibration_mean
    threshold = min_jump + z * se
    return {
        "statistic": jump,
        "threshold": threshold,
        "alarm": jump > threshold,
        "guarantee": (
            f"one-sided Welch z-test, look {look} at level {level:.3g} (alpha spending "
            f"6δ/(π²k²)): P(any false alarm over all looks) ≤ δ = {delta:g} "
            "(normal approximation; null: window rows i.i.d. like the calibration rows)"
        ),
        "threatens": "the risk estimate and the coverage it predicts (estimated error is rising)",
        "explanation": (
            f"the estimated error of the new rows is {risk.mean():.1%} against {calibration_mean:.1%} "
            "on the calibration rows"
        ),
        "action": "collect labels to confirm the error rate; recalibrate or retrain if it holds",
        "estimate": jump,
        "interval": (jump - z * se, jump + z * se),
    }


def prediction_mix_look(
    calibration_counts: FloatArray, window: FloatArray, *, delta: float, look: int
) -> dict[str, Any]:
    """Look ``look`` (1-based) of the prediction-mix test on a window's predicted-class counts.

    Pearson's chi-square of the ``2 × K`` table (:func:`chi_square_two_sample`) against its
    ``1 − δ_k`` quantile, ``δ_k = 6δ/(π²k²)``; the estimate is the total variation distance of
    the two class mixes.

    Returns
    -------
    dict
        The fields of the look's :class:`~calwatch.engine.shift.monitors.MonitorResult` but
        its ``name`` and ``rows_seen``.

    Examples
    --------
    >>> out = prediction_mix_look(np.array([50.0, 50.0]), np.array([30.0, 10.0]), delta=0.01, look=1)
    >>> round(out["statistic"], 4), out["estimate"]
    (7.2917, 0.25)
    """
    from scipy.stats import chi2  # on first use: `import calwatch` stays fast

    statistic, df = chi_square_two_sample(calibration_counts, window)
    level = _spent_level(delta, look)
    threshold = float(chi2.isf(level, df)) if df > 0 else math.inf
    shares = window / window.sum()
    expected = calibration_counts / calibration_counts.sum()
    worst = int(np.argmax(np.abs(shares - expected)))
    return {
        "statistic": statistic,
        "threshold": threshold,
        "alarm": statistic > threshold,
        "guarantee": (
            f"chi-square two-sample test, look {look} at level {level:.3g} (alpha spending "
            f"6δ/(π²k²)): P(any false alarm over all looks) ≤ δ = {delta:g} "
            "(chi-square approximation; null: window rows i.i.d. like the calibration rows)"
        ),
        "threatens": "exchangeability with the calibration data (the predicted-class mix has moved)",
        "explanation": (
            f"class {worst} is predicted for {shares[worst]:.1%} of the new rows against "
            f"{expected[worst]:.1%} of the calibration rows"
        ),
        "action": "check whether the population changed; collect labels and recalibrate (by class)",
        "estimate": float(np.abs(shares - expected).sum() / 2.0),  # total variation distance
    }


__all__ = ["chi_square_two_sample", "prediction_mix_look", "risk_jump_look"]
