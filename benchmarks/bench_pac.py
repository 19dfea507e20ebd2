"""PAC confidence sets speed: calwatch ``fit`` + ``predict_sets`` vs a plain numpy reference.

Times :class:`calwatch.engine.pac.sets.PACConfidenceSets` fitted on ``n_cal`` calibration rows and
predicting ``n_test`` rows (defaults 20,000 / 200,000, K = 10, ε = 0.01, δ = 1e-5) against the
textbook vectorised numpy/scipy code written below, which is handed the same temperature and
computes the same ``k*`` (by its own scipy search), so both produce the same sets; they must
match cell for cell. Three cases:

1. ``T = 1`` (``temperature=False``): no temperature at all.
2. ``temperature_data``: calwatch fits ``T`` on 4,000 separate rows (Brent on ``log T``); the
   reference is given that ``T``. calwatch's time includes the temperature fit.
3. default split: calwatch splits a seeded 20% off the calibration rows for ``T`` and uses the
   other 16,000 for the bound; the reference gets the same rows and ``T``.

Each case also shows, for information, a reference that fits ``T`` itself with scipy's
``minimize_scalar`` (case 2 and 3). Logits are Gaussian (scale 2) and labels drawn from their
softmax. Repeats run calwatch and numpy back to back (interleaved); the table reports medians.
Target: calwatch ≤ 2× numpy. A missed target prints FAIL but leaves the exit code 0; the exit
code is 1 only when the run is broken (calwatch's sets differ from the numpy reference).

Run: ``python benchmarks/bench_pac.py [--repeats R] [--n-cal N] [--n-test M]``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize_scalar
from scipy.special import logsumexp
from scipy.stats import binom

from _common import fmt_ms, machine_line, median, parse_size_args, size_parser, timed
from calwatch.engine.pac.sets import TEMPERATURE_FRACTION, PACConfidenceSets, binomial_k_star

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]

EPSILON = 0.01
DELTA = 1e-5
LOGIT_SCALE = 2.0
N_TEMPERATURE_DATA = 4_000
TARGET_VS_NUMPY = 2.0  # calwatch time / numpy time must be at most this
SEED = 0


# --------------------------------------------------------------------------- data
def make_data(n: int, n_classes: int, seed: int) -> tuple[FloatArray, IntArray]:
    """N(0, LOGIT_SCALE²) logits and labels drawn from their softmax (a calibrated model)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=LOGIT_SCALE, size=(n, n_classes))
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    u = rng.uniform(size=(n, 1))
    y = np.minimum((P.cumsum(axis=1) < u).sum(axis=1), n_classes - 1).astype(np.intp)
    return logits, y


# ------------------------------------------------------------- numpy reference
def reference_k_star(n: int, epsilon: float, delta: float) -> int:
    """Largest k with P[Bin(n, ε) ≤ k] < δ: the CDF at every k, then a sorted search."""
    cdf = binom.cdf(np.arange(n + 1), n, epsilon)
    k = int(np.searchsorted(cdf, delta, side="left")) - 1  # cdf[k] < δ ≤ cdf[k+1]
    if k < 0:
        msg = "infeasible"
        raise ValueError(msg)
    return k


def reference_log_softmax(z: FloatArray, T: float) -> FloatArray:
    s = z / T if T != 1.0 else z.copy()
    s -= s.max(axis=1, keepdims=True)
    s -= np.log(np.exp(s).sum(axis=1))[:, None]
    return s


def numpy_reference(z_cal: FloatArray, y_cal: IntArray, z_test: FloatArray, T: float) -> BoolArray:
    """Alg. 1 in plain numpy given T: k*, the (k*+1)-th smallest f(y|x), sets ∪ {argmax}."""
    n = z_cal.shape[0]
    k = reference_k_star(n, EPSILON, DELTA)
    log_f_cal = reference_log_softmax(z_cal, T)[np.arange(n), y_cal]
    threshold = np.sort(log_f_cal)[k]
    log_f = reference_log_softmax(z_test, T)
    sets: BoolArray = log_f >= threshold
    sets[np.arange(z_test.shape[0]), log_f.argmax(axis=1)] = True
    return sets


def scipy_temperature(z: FloatArray, y: IntArray) -> float:
    """The textbook temperature fit: bounded Brent on log T of the mean NLL."""
    rows = np.arange(z.shape[0])

    def nll(log_t: float) -> float:
        s = z / math.exp(log_t)
        return float(np.mean(logsumexp(s, axis=1) - s[rows, y]))

    result = minimize_scalar(nll, bounds=(math.log(0.01), math.log(100.0)), method="bounded")
    return float(math.exp(result.x))


# ------------------------------------------------------------------- timing
@dataclass
class Case:
    """Timings (seconds per repeat) and checks for one case."""

    name: str
    calwatch: list[float] = field(default_factory=list)
    numpy: list[float] = field(default_factory=list)
    numpy_fit_t: list[float] = field(default_factory=list)  # reference that also fits T
    mismatches: int = 0
    k_star: int = 0
    temperature: float = 1.0
    coverage: float = math.nan
    mean_size: float = math.nan


def run_benchmark(n_cal: int, n_test: int, n_classes: int, repeats: int) -> list[Case]:
    z, y = make_data(n_cal + n_test + N_TEMPERATURE_DATA, n_classes, SEED)
    z_cal, y_cal = z[:n_cal], y[:n_cal]
    z_test, y_test = z[n_cal : n_cal + n_test], y[n_cal : n_cal + n_test]
    z_t, y_t = z[n_cal + n_test :], y[n_cal + n_test :]
    n_split = min(max(1, round(TEMPERATURE_FRACTION * n_cal)), n_cal - 1)
    perm = np.random.default_rng(SEED).permutation(n_cal)
    split_t, keep = np.sort(perm[:n_split]), np.sort(perm[n_split:])

    def cw(temperature: bool, tdata: tuple[FloatArray, IntArray] | None) -> BoolArray:
        pac = PACConfidenceSets(epsilon=EPSILON, delta=DELTA, temperature=temperature, seed=SEED)
        return pac.fit(z_cal, y_cal, temperature_data=tdata).predict_sets(z_test)

    def ref_fit_t(z_fit: FloatArray, y_fit: IntArray, z_bound: FloatArray, y_bound: IntArray) -> BoolArray:
        return numpy_reference(z_bound, y_bound, z_test, scipy_temperature(z_fit, y_fit))

    specs: list[tuple[str, Callable[[], BoolArray], bool, tuple[FloatArray, IntArray] | None]] = [
        ("T = 1", partial(cw, False, None), False, None),
        ("temperature_data", partial(cw, True, (z_t, y_t)), True, (z_t, y_t)),
        ("20% split", partial(cw, True, None), True, None),
    ]
    cases: list[Case] = []
    for name, calwatch_fn, temperature, tdata in specs:
        case = Case(name)
        pac = PACConfidenceSets(epsilon=EPSILON, delta=DELTA, temperature=temperature, seed=SEED)
        pac.fit(z_cal, y_cal, temperature_data=tdata)
        T = pac.temperature_
        split = temperature and tdata is None
        z_bound, y_bound = (z_cal[keep], y_cal[keep]) if split else (z_cal, y_cal)
        impls: dict[str, Callable[[], BoolArray]] = {
            "calwatch": calwatch_fn,
            "numpy": partial(numpy_reference, z_bound, y_bound, z_test, T),
        }
        if temperature:
            z_fit, y_fit = (z_cal[split_t], y_cal[split_t]) if split else (z_t, y_t)
            impls["numpy_fit_t"] = partial(ref_fit_t, z_fit, y_fit, z_bound, y_bound)
        warm = {key: fn() for key, fn in impls.items()}
        case.mismatches = int(np.count_nonzero(warm["calwatch"] != warm["numpy"]))
        case.k_star, case.temperature = pac.k_star_, T
        if pac.k_star_ != reference_k_star(pac.n_calibration_, EPSILON, DELTA):
            case.mismatches = max(case.mismatches, 1)
        sets = warm["calwatch"]
        case.coverage = float(sets[np.arange(n_test), y_test].mean())
        case.mean_size = float(sets.sum(axis=1).mean())
        del warm
        for _ in range(repeats):
            for key, fn in impls.items():
                seconds, _sets = timed(fn)
                getattr(case, key).append(seconds)
        cases.append(case)
    return cases


def print_report(cases: list[Case], args: argparse.Namespace) -> bool:
    """Print the table; return True when every calwatch/numpy comparison matched."""
    print(
        f"\nPAC confidence sets: fit on n_cal={args.n_cal:,} + predict_sets on n_test={args.n_test:,}, "
        f"K={args.n_classes}, ε={EPSILON}, δ={DELTA:g}; median of {args.repeats} repeats (ms)"
    )
    print(machine_line(args.loadavg))
    header = (
        f"{'case':<17} {'k*':>5} {'T':>7} {'calwatch':>9} {'numpy':>9} {'cw/np':>7} "
        f"{'np+fitT':>9} {'cw/(np+fitT)':>13} {'sets==np':>9} {'cw≤2×np':>8}"
    )
    print(header)
    print("-" * len(header))
    all_equal = True
    for case in cases:
        cw, npy, npt_ = median(case.calwatch), median(case.numpy), median(case.numpy_fit_t)
        ratio = cw / npy
        ratio_t = cw / npt_ if case.numpy_fit_t else math.nan
        equal = "yes" if case.mismatches == 0 else f"NO:{case.mismatches}"
        all_equal &= case.mismatches == 0
        verdict = "PASS" if ratio <= TARGET_VS_NUMPY else "FAIL"
        ratio_t_text = "—" if math.isnan(ratio_t) else f"{ratio_t:5.2f}×"
        print(
            f"{case.name:<17} {case.k_star:>5} {case.temperature:>7.4f} {fmt_ms(cw):>9} "
            f"{fmt_ms(npy):>9} {ratio:6.2f}× {fmt_ms(npt_):>9} {ratio_t_text:>13} {equal:>9} "
            f"{verdict:>8}"
        )
    print("\nsets: coverage / mean size on the test rows (target coverage ≥ 1 − ε = 0.99)")
    for case in cases:
        print(f"  {case.name:<17} {case.coverage:.4f} / {case.mean_size:.3f}")
    start = time.perf_counter()
    k = binomial_k_star(10**7, EPSILON, DELTA)
    ms = 1000 * (time.perf_counter() - start)
    print(f"\nbinomial_k_star(10^7, {EPSILON}, {DELTA:g}) = {k:,} in {ms:.1f} ms")
    return all_equal


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the table; 0 unless calwatch's sets disagree with numpy."""
    parser = size_parser(__doc__.splitlines()[0] if __doc__ else None)
    args = parse_size_args(parser, argv)
    cases = run_benchmark(args.n_cal, args.n_test, args.n_classes, args.repeats)
    return 0 if print_report(cases, args) else 1


if __name__ == "__main__":
    sys.exit(main())
