"""Risk estimation speed: temperature-scaling fit and every ``RiskEstimator.estimate`` (paper 004).

Two parts, each timed in the same process, implementations interleaved within each repeat
(so drift hits them alike), medians reported:

1. ``TemperatureScaling.fit`` on ``n_cal`` logits (default 20,000 × K = 10) against

   * two scipy references: ``scipy.optimize.minimize(method="L-BFGS-B")`` over ``T`` in
     ``[0.01, 100]`` from ``T = 1``, float64, the NLL written with numpy (row max shifted,
     ``log Σ exp``), once with the analytic gradient ``dNLL/dT`` and once with scipy's
     finite differences (the common way);
   * netcal 1.4's ``netcal.scaling.TemperatureScaling`` (``method="mle"``, fed the softmax
     probabilities, which it turns back into log-probabilities itself).

   Targets: calwatch ≤ 2× the faster scipy reference; calwatch faster than netcal. All fitted
   temperatures must agree (netcal reports ``1/T``) to 1e-3 relative, else the run is broken.
2. ``RiskEstimator(method, top_k).estimate(P_test)`` on ``n_test`` rows (default 200,000)
   for every method and ``top_k ∈ {1, 3}``, fitted beforehand on the calibration rows
   (fitting is not timed here), against a plain numpy reference that takes the fitted
   parameters (``T``, Platt's ``a, b``, the bin edges and values, the isotonic knots, the
   sorted InvCP scores) and computes ``α̂`` the textbook way (``P.max(axis=1)``,
   ``np.sort``, ``np.digitize``, ``np.interp``, ``np.searchsorted``); calwatch also validates
   its input (finite, in ``[0, 1]``, rows summing to 1), the reference does not.
   Target: calwatch ≤ 2× numpy. Estimates must agree to 1e-9, else the run is broken.

Data: softmax of N(0, 2²) logits with labels drawn from those probabilities (a calibrated
model); the model handed to the calibrators is made over-confident by multiplying its logits
by 1.5 (so ``T ≈ 1.5``). A missed target prints FAIL but leaves the exit code 0; the exit code
is 1 only when the run is broken (implementations disagree).

Run: ``python benchmarks/bench_risk.py [--repeats R] [--n-cal N] [--n-test M] [--no-netcal]``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize

from _common import fmt_ms, machine_line, median, parse_size_args, size_parser, timed
from calwatch.engine.calibration.maps import TemperatureScaling
from calwatch.engine.risk.estimator import LOGIT_EPSILON, RISK_METHODS, RiskEstimator

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

LOGIT_SCALE = 2.0
OVERCONFIDENCE = 1.5
T_BOUNDS = (0.01, 100.0)
TARGET_VS_SCIPY = 2.0  # calwatch fit time / scipy time must be at most this
TARGET_VS_NUMPY = 2.0  # calwatch estimate time / numpy time must be at most this
TOP_KS = (1, 3)


# --------------------------------------------------------------------------- data
def make_data(
    n_cal: int, n_test: int, n_classes: int, seed: int = 0
) -> tuple[FloatArray, IntArray, FloatArray, IntArray]:
    """Over-confident logits (``1.5 ×`` calibrated ones) and labels drawn from the calibrated model."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=LOGIT_SCALE, size=(n_cal + n_test, n_classes))
    logits -= logits.max(axis=1, keepdims=True)
    P = np.exp(logits)
    P /= P.sum(axis=1, keepdims=True)
    u = rng.uniform(size=(n_cal + n_test, 1))
    y = np.minimum((np.cumsum(P, axis=1) < u).sum(axis=1), n_classes - 1).astype(np.intp)
    shown = logits * OVERCONFIDENCE
    return shown[:n_cal], y[:n_cal], shown[n_cal:], y[n_cal:]


def softmax(z: FloatArray) -> FloatArray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    out: FloatArray = e / e.sum(axis=1, keepdims=True)
    return out


# ------------------------------------------------------------ temperature fit
def scipy_temperature(logits: FloatArray, y: IntArray, *, gradient: bool) -> float:
    """Reference: L-BFGS-B over T on the mean NLL of softmax(logits / T), float64."""
    z = logits - logits.max(axis=1, keepdims=True)
    z_true = z[np.arange(z.shape[0]), y]

    def nll(t: FloatArray) -> Any:
        scaled = z / t[0]
        e = np.exp(scaled)
        total = e.sum(axis=1)
        value = float(np.mean(np.log(total) - z_true / t[0]))
        if not gradient:
            return value
        # d/dT [log Σ exp(z/T) − z_y/T] = (−Σ p_c z_c + z_y) / T²
        expected = (e * z).sum(axis=1) / total
        grad = float(np.mean(z_true - expected)) / t[0] ** 2
        return value, np.array([grad])

    result = minimize(nll, x0=np.array([1.0]), jac=gradient, method="L-BFGS-B", bounds=[T_BOUNDS])
    return float(result.x[0])


def netcal_temperature(probs: FloatArray, y: IntArray) -> float:
    """netcal 1.4 TemperatureScaling (MLE); its ``temperature`` multiplies log-probabilities."""
    from netcal.scaling import TemperatureScaling as NetcalTemperature  # type: ignore[import-untyped]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = NetcalTemperature(method="mle")
        model.fit(probs, y)
    return 1.0 / float(np.asarray(model.temperature).ravel()[0])


def calwatch_temperature(logits: FloatArray, y: IntArray) -> float:
    return TemperatureScaling().fit(logits, y).temperature_


# ----------------------------------------------------------- numpy references
def top_k_mass(P: FloatArray, k: int) -> FloatArray:
    if k == 1:
        top: FloatArray = P.max(axis=1)
        return top
    total: FloatArray = np.sort(P, axis=1)[:, -k:].sum(axis=1)
    return total


def numpy_estimate(fitted: RiskEstimator, P: FloatArray) -> float:
    """α̂ from the fitted parameters, written the textbook way (no input checks)."""
    method, k = fitted.method, fitted.top_k
    if method == "temperature":
        assert isinstance(fitted.calibrator_, TemperatureScaling)
        q = softmax(np.log(P + LOGIT_EPSILON) / fitted.calibrator_.temperature_)
        return float(np.mean(1.0 - top_k_mass(q, k)))
    c = top_k_mass(P, k)
    if method == "softmax":
        return float(np.mean(1.0 - c))
    if method == "platt":
        logit = np.log(c) - np.log1p(-np.minimum(c, 1 - 1e-12))
        return float(np.mean(1.0 / (1.0 + np.exp(fitted.platt_coef_ * logit + fitted.platt_intercept_))))
    if method == "histogram":
        hb: Any = fitted.calibrator_
        return float(np.mean(1.0 - hb.values_[np.digitize(c, hb.edges_[1:-1])]))
    if method == "isotonic":
        iso: Any = fitted.calibrator_
        knots_x, knots_y = iso.isotonic_.X_thresholds_, iso.isotonic_.y_thresholds_
        return float(np.mean(1.0 - np.interp(c, knots_x, knots_y)))
    scores = fitted.calibration_scores_
    assert scores is not None
    gamma = np.searchsorted(scores, c, side="left") + 1
    return float(np.mean(1.0 - gamma / (scores.shape[0] + 1)))


# -------------------------------------------------------------------- timing
@dataclass
class Row:
    """Timings (seconds, one per repeat) of the implementations compared in one row."""

    name: str
    times: dict[str, list[float]] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)

    def median(self, key: str) -> float:
        return median(self.times.get(key, []))


def _run(row: Row, impls: dict[str, Callable[[], float]], repeats: int) -> None:
    for key, fn in impls.items():  # warm-up, and the values to compare
        row.values[key] = fn()
        row.times[key] = []
    for _ in range(repeats):
        for key, fn in impls.items():
            seconds, _ = timed(fn)
            row.times[key].append(seconds)


def bench_temperature(logits: FloatArray, y: IntArray, repeats: int, with_netcal: bool) -> Row:
    probs = softmax(logits)
    impls: dict[str, Callable[[], float]] = {
        "calwatch": lambda: calwatch_temperature(logits, y),
        "scipy+grad": lambda: scipy_temperature(logits, y, gradient=True),
        "scipy": lambda: scipy_temperature(logits, y, gradient=False),
    }
    if with_netcal:
        impls["netcal"] = lambda: netcal_temperature(probs, y)
    row = Row("temperature fit")
    _run(row, impls, repeats)
    return row


def bench_estimates(
    P_cal: FloatArray, y_cal: IntArray, P_test: FloatArray, repeats: int
) -> list[tuple[Row, float]]:
    rows: list[tuple[Row, float]] = []
    for k in TOP_KS:
        for method in RISK_METHODS:
            fitted = RiskEstimator(method=method, top_k=k).fit(P_cal, y_cal)
            row = Row(f"{method} top-{k}")
            _run(
                row,
                {
                    "calwatch": lambda f=fitted: f.estimate(P_test),  # type: ignore[misc]
                    "numpy": lambda f=fitted: numpy_estimate(f, P_test),  # type: ignore[misc]
                },
                repeats,
            )
            rows.append((row, row.values["calwatch"] - row.values["numpy"]))
    return rows


def print_report(temperature: Row, estimates: list[tuple[Row, float]], args: argparse.Namespace) -> bool:
    """Print both tables; return True when every implementation agreed."""
    print(
        f"\nRisk estimation: n_cal={args.n_cal:,}, n_test={args.n_test:,}, K={args.n_classes}; "
        f"median of {args.repeats} repeats (ms)"
    )
    print(machine_line(args.loadavg))
    ok = True
    cw = temperature.median("calwatch")
    best_scipy = min(temperature.median("scipy+grad"), temperature.median("scipy"))
    print("\n1. TemperatureScaling.fit (T = divisor of the logits)")
    header = f"{'implementation':<16} {'ms':>9} {'vs calwatch':>12} {'T':>10}"
    print(header)
    print("-" * len(header))
    for key in temperature.times:
        t = temperature.median(key)
        print(f"{key:<16} {fmt_ms(t, 2):>9} {t / cw:>11.2f}× {temperature.values[key]:>10.5f}")
        if abs(temperature.values[key] / temperature.values["calwatch"] - 1.0) > 1e-3:
            print(f"MISMATCH: {key} fitted T = {temperature.values[key]:.6f}")
            ok = False
    verdict = "PASS" if cw <= TARGET_VS_SCIPY * best_scipy else "FAIL"
    print(f"calwatch / best scipy = {cw / best_scipy:.2f}× (target ≤ {TARGET_VS_SCIPY}×): {verdict}")
    if "netcal" in temperature.times:
        netcal = temperature.median("netcal")
        verdict = "PASS" if cw < netcal else "FAIL"
        print(f"netcal / calwatch = {netcal / cw:.2f}× (target > 1×): {verdict}")
    print("\n2. RiskEstimator.estimate on the test rows (fitted beforehand)")
    header = f"{'method':<18} {'calwatch':>9} {'numpy':>9} {'cw/np':>7} {'α̂':>8} {'|Δ|':>9}  {'cw≤2×np':>8}"
    print(header)
    print("-" * len(header))
    for row, diff in estimates:
        c, n = row.median("calwatch"), row.median("numpy")
        verdict = "PASS" if c <= TARGET_VS_NUMPY * n else "FAIL"
        print(
            f"{row.name:<18} {fmt_ms(c, 2):>9} {fmt_ms(n, 2):>9} {c / n:>6.2f}× "
            f"{row.values['calwatch']:>8.4f} {abs(diff):>9.1e}  {verdict:>8}"
        )
        if abs(diff) > 1e-9:
            print(f"MISMATCH: {row.name}: calwatch and numpy estimates differ by {diff:.3g}")
            ok = False
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the tables; 0 unless the implementations disagree."""
    parser = size_parser(__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-netcal", action="store_true", help="skip netcal")
    args = parse_size_args(parser, argv)
    with_netcal = not args.no_netcal
    if with_netcal:
        try:
            import netcal  # type: ignore[import-untyped]  # noqa: F401
        except ImportError:
            print("netcal is not installed (pip install netcal==1.4.0): skipping netcal")
            with_netcal = False
    logits_cal, y_cal, logits_test, _ = make_data(args.n_cal, args.n_test, args.n_classes, args.seed)
    temperature = bench_temperature(logits_cal, y_cal, args.repeats, with_netcal)
    estimates = bench_estimates(softmax(logits_cal), y_cal, softmax(logits_test), args.repeats)
    return 0 if print_report(temperature, estimates, args) else 1


if __name__ == "__main__":
    sys.exit(main())
