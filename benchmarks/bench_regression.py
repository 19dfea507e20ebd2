"""Modular conformal calibration speed: calwatch vs a plain numpy reference vs crepes 0.9.1.

Point predictions ``μ ~ N(0, 1)`` and labels ``y = μ + e`` with Student-t(5) noise; ``n_cal``
calibration and ``n_test`` test rows (defaults 20,000 / 200,000). Timed, each from the raw
arrays (so every implementation sorts its calibration scores):

1. ``pit``: the PIT ``F(y | x)`` of every test row with linear interpolation (calwatch
   ``ModularConformalCalibrator(prediction="point").fit(...).predict(μ).cdf(y)``) vs numpy
   (``np.sort`` and ``np.interp`` through the same knots, written below). Values must be equal.
2. ``interval``: the central 90% credible interval of every test row (``.interval(0.9)``) vs numpy
   (``np.interp`` of the two levels into the knots, added to ``μ``). Values must be equal.
3. ``pit-random``: the PIT with Vovk et al.'s randomised interpolation (calwatch
   ``interpolation="random"``) vs crepes' ``ConformalPredictiveSystem.predict_p(y_hat, y,
   smoothing=True, seed)``, the same conformal predictive system. Given crepes' uniform draws
   (``np.random.seed(seed); np.random.rand(m)``, passed to calwatch as ``u=``) the values must
   agree. crepes loops over test rows in Python and scans all ``n_cal`` residuals for each (an
   ``O(n_test · n_cal)`` computation), so by default it runs on the first ``--crepes-rows``
   (20,000) test rows and its time is scaled linearly to ``n_test`` (its per-row cost does not
   depend on the row; ``--crepes-rows 0`` runs all of them).

Each repeat runs the implementations back to back (interleaved, so drift hits them alike); the
table reports medians. Targets: calwatch ≤ 2× numpy (rows 1, 2) and crepes ≥ 10× slower than
calwatch (row 3). A missed target prints FAIL and leaves the exit code 0; the exit code is 1 only
when results disagree (a broken run).

Run: ``python benchmarks/bench_regression.py [--repeats R] [--n-cal N] [--n-test M] [--crepes-rows K]``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from _common import fmt_ms, machine_line, median, parse_size_args, size_parser, timed
from calwatch.engine.regression.calibrator import ModularConformalCalibrator

FloatArray = npt.NDArray[np.float64]

TARGET_VS_NUMPY = 2.0  # calwatch time / numpy time must be at most this
TARGET_CREPES_SLOWDOWN = 10.0  # crepes time / calwatch time must be at least this
LEVEL = 0.9
CREPES_SEED = 12345


def make_data(
    n_cal: int, n_test: int, seed: int = 0
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    rng = np.random.default_rng(seed)
    mu = rng.normal(size=n_cal + n_test)
    y = mu + rng.standard_t(5, size=n_cal + n_test)
    return mu[:n_cal], y[:n_cal], mu[n_cal:], y[n_cal:]


# ------------------------------------------------------------- numpy reference
def numpy_knots(mu_cal: FloatArray, y_cal: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Linear-interpolation knots of ALGORITHMS.md §3 for distinct scores: sorted residuals at
    levels i/(n+1), plus end knots one mean gap beyond the extremes at levels 0 and 1."""
    s = np.sort(y_cal - mu_cal)
    n = s.shape[0]
    gap = (s[-1] - s[0]) / (n - 1)
    x = np.concatenate(([s[0] - gap], s, [s[-1] + gap]))
    return x, np.arange(n + 2) / (n + 1.0)


def numpy_pit(mu_cal: FloatArray, y_cal: FloatArray, mu: FloatArray, y: FloatArray) -> FloatArray:
    x, level = numpy_knots(mu_cal, y_cal)
    return np.interp(y - mu, x, level)


def numpy_interval(mu_cal: FloatArray, y_cal: FloatArray, mu: FloatArray) -> FloatArray:
    x, level = numpy_knots(mu_cal, y_cal)
    lo, hi = np.interp([0.5 - LEVEL / 2, 0.5 + LEVEL / 2], level, x)
    return np.column_stack([mu + lo, mu + hi])


# ------------------------------------------------------------------- calwatch
def calwatch_pit(mu_cal: FloatArray, y_cal: FloatArray, mu: FloatArray, y: FloatArray) -> FloatArray:
    return ModularConformalCalibrator(prediction="point").fit(mu_cal, y_cal).predict(mu).cdf(y)


def calwatch_interval(mu_cal: FloatArray, y_cal: FloatArray, mu: FloatArray) -> FloatArray:
    return ModularConformalCalibrator(prediction="point").fit(mu_cal, y_cal).predict(mu).interval(LEVEL)


def calwatch_random_pit(
    mu_cal: FloatArray, y_cal: FloatArray, mu: FloatArray, y: FloatArray, u: FloatArray
) -> FloatArray:
    mcc = ModularConformalCalibrator(prediction="point", interpolation="random")
    return mcc.fit(mu_cal, y_cal).predict(mu, u=u).cdf(y)


# ---------------------------------------------------------------------- crepes
def crepes_gammas(m: int, seed: int = CREPES_SEED) -> FloatArray:
    """The uniform draws crepes makes in ``predict`` (``np.random.seed(seed)`` then ``rand(m)``)."""
    return np.random.RandomState(seed).rand(m)


def crepes_pit(mu_cal: FloatArray, y_cal: FloatArray, mu: FloatArray, y: FloatArray) -> FloatArray:
    from crepes import ConformalPredictiveSystem

    cps = ConformalPredictiveSystem().fit(y_cal - mu_cal)
    return np.asarray(cps.predict_p(mu, y, smoothing=True, seed=CREPES_SEED), dtype=np.float64)


# ------------------------------------------------------------------------ main
def main(argv: Sequence[str] | None = None) -> int:
    parser = size_parser(__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--crepes-rows", type=int, default=20_000, help="test rows given to crepes (0: all)")
    args = parse_size_args(parser, argv)
    mu_cal, y_cal, mu, y = make_data(args.n_cal, args.n_test)
    k = args.n_test if args.crepes_rows <= 0 else min(args.crepes_rows, args.n_test)
    u = crepes_gammas(k)

    times: dict[str, list[float]] = {name: [] for name in ("pit", "pit-np", "int", "int-np", "rnd", "crepes")}
    broken: list[str] = []
    for r in range(args.repeats):
        t, pit = timed(lambda: calwatch_pit(mu_cal, y_cal, mu, y))
        times["pit"].append(t)
        t, ref = timed(lambda: numpy_pit(mu_cal, y_cal, mu, y))
        times["pit-np"].append(t)
        t, iv = timed(lambda: calwatch_interval(mu_cal, y_cal, mu))
        times["int"].append(t)
        t, iv_ref = timed(lambda: numpy_interval(mu_cal, y_cal, mu))
        times["int-np"].append(t)
        t, rnd = timed(lambda: calwatch_random_pit(mu_cal, y_cal, mu[:k], y[:k], u))
        times["rnd"].append(t * args.n_test / k)  # the same per-row scaling as crepes (it is linear)
        if r == 0 or args.repeats <= 3:  # crepes is slow: time it on the first repeats only
            t, cr = timed(lambda: crepes_pit(mu_cal, y_cal, mu[:k], y[:k]))
            times["crepes"].append(t * args.n_test / k)
        if r == 0:
            if not np.array_equal(pit, ref):
                broken.append(f"pit differs from numpy (max |diff| {np.max(np.abs(pit - ref)):.3g})")
            if not np.array_equal(iv, iv_ref):
                broken.append(f"interval differs from numpy (max |diff| {np.max(np.abs(iv - iv_ref)):.3g})")
            diff = np.abs(rnd - cr)
            agree = diff <= 1e-12
            if agree.mean() < 0.9999:
                broken.append(f"random PIT differs from crepes on {int((~agree).sum())} of {k} rows")
            crepes_max_diff, crepes_disagree = float(diff.max()), int((~agree).sum())

    print(f"\nModular conformal calibration, point predictions: n_cal={args.n_cal:,}, n_test={args.n_test:,}")
    print(machine_line(args.loadavg))
    print(
        f"median of {args.repeats} repeats (crepes: {len(times['crepes'])}); milliseconds for all n_test rows"
    )
    header = f"{'task':<12} {'calwatch':>10} {'reference':>10} {'ratio':>8}  target"
    print(header)
    print("-" * len(header) + "-" * 24)
    ok = True
    for label, ours, theirs, ref_name in (
        ("pit", "pit", "pit-np", "numpy"),
        ("interval 90%", "int", "int-np", "numpy"),
    ):
        a, b = median(times[ours]), median(times[theirs])
        ratio = a / b
        passed = ratio <= TARGET_VS_NUMPY
        ok &= passed
        print(
            f"{label:<12} {fmt_ms(a):>10} {fmt_ms(b):>10} {ratio:7.2f}×  ≤ {TARGET_VS_NUMPY:g}× {ref_name}"
            f"  {'PASS' if passed else 'FAIL'}"
        )
    a, b = median(times["rnd"]), median(times["crepes"])
    slowdown = b / a
    passed = slowdown >= TARGET_CREPES_SLOWDOWN
    ok &= passed
    print(
        f"{'pit-random':<12} {fmt_ms(a):>10} {fmt_ms(b):>10} {slowdown:7.1f}×"
        f"  crepes ≥ {TARGET_CREPES_SLOWDOWN:g}× slower  {'PASS' if passed else 'FAIL'}"
    )
    scaled = "" if k == args.n_test else f" (both timed on {k:,} rows and scaled ×{args.n_test / k:g})"
    print(f"\npit-random{scaled}: the ratio is crepes time / calwatch time.")
    if not broken:
        print(
            f"checks: pit and 90% intervals equal numpy's exactly; random-interpolation PIT equals crepes'"
            f" smoothed p-values given crepes' draws (max |diff| {crepes_max_diff:.2g}, {crepes_disagree}"
            f" rows differ by > 1e-12)"
        )
    for problem in broken:
        print(f"BROKEN: {problem}")
    print(f"overall: {'all targets met' if ok else 'some targets missed'}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
