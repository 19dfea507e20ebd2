"""Selective calibration speed: the metrics against plain numpy, and the selector's scoring cost.

1. ``calibration_error`` (top-label, ℓ2, 15 equal-mass bins) on ``n_test`` rows of ``K``
   classes vs a textbook numpy reference (argsort, ``np.array_split`` into bins, a Python loop
   over the bins); both must agree to 1e-12.
2. ``selective_curve`` (20 coverages, thresholds of Eq. 16 on the same rows) on ``n_cal`` rows
   vs the reference above called once per coverage after a full sort of the scores.
3. Scoring ``n_cal`` rows (K = 2, 64-d embeddings of the UCI Adult network,
   :func:`calwatch.datasets.shift.shift_task`) with a fitted ``SelectiveCalibrator`` (every meta
   feature), and each meta feature on its own, against the confidence baseline: what a
   Monitor pays per batch.

Probabilities are softmax of N(0, 2²) logits with labels drawn from them. Medians of
``--repeats`` runs, interleaved. Target for 1-2: calwatch ≤ 2× numpy (FAIL is printed, exit
code 0); exit code 1 only when the numbers disagree.

Run: ``python benchmarks/bench_selective.py [--repeats R] [--n-cal N] [--n-test M] [--n-classes K]``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from _common import fmt_ms, machine_line, median, parse_size_args, size_parser, timed
from calwatch.engine.metrics.calibration import DEFAULT_COVERAGES, calibration_error, selective_curve
from calwatch.engine.selective.calibrator import BaselineSelector, SelectiveCalibrator
from calwatch.engine.selective.features import EMBEDDING_FEATURES, MetaFeatures, limit_threads

FloatArray = npt.NDArray[np.float64]
TARGET_VS_NUMPY = 2.0
SEED = 0


def make_data(n: int, K: int, seed: int) -> tuple[FloatArray, npt.NDArray[np.intp]]:
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=2.0, size=(n, K))
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = (P.cumsum(axis=1) > rng.uniform(size=(n, 1))).argmax(axis=1)
    return P, y


def reference_ece(r: FloatArray, o: FloatArray, bins: int) -> float:
    """ℓ2 equal-mass binned error, written the obvious way."""
    order = np.argsort(r, kind="stable")
    total = 0.0
    for part in np.array_split(order, bins):
        total += part.shape[0] * (o[part].mean() - r[part].mean()) ** 2
    return math.sqrt(total / r.shape[0])


def reference_curve(r: FloatArray, o: FloatArray, scores: FloatArray) -> FloatArray:
    descending = np.sort(scores)[::-1]
    out = []
    for xi in DEFAULT_COVERAGES:
        k = math.ceil(round(xi * scores.shape[0], 9))
        kept = scores >= descending[k - 1]
        out.append(reference_ece(r[kept], o[kept], max(1, min(15, int(kept.sum()) // 25))))
    return np.asarray(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the table; 0 unless calwatch disagrees with the reference."""
    parser = size_parser(__doc__.splitlines()[0] if __doc__ else None)
    args = parse_size_args(parser, argv)
    print(f"selective benchmark: n_test={args.n_test:,}, n_cal={args.n_cal:,}, K={args.n_classes}")
    print(machine_line(args.loadavg))
    ok = True
    P, y = make_data(args.n_test, args.n_classes, SEED)
    P /= P.sum(axis=1, keepdims=True)  # as the validation renormalises: the same bits
    r, o = P.max(axis=1), (P.argmax(axis=1) == y).astype(np.float64)
    Pc, yc = P[: args.n_cal], y[: args.n_cal]
    scores = np.random.default_rng(SEED + 1).uniform(size=args.n_cal)
    times: dict[str, list[float]] = {k: [] for k in ("ece", "ece_ref", "curve", "curve_ref")}
    for _ in range(args.repeats):
        t, ours = timed(lambda: calibration_error(P, y))
        times["ece"].append(t)
        t, ref = timed(lambda: reference_ece(r, o, 15))
        times["ece_ref"].append(t)
        ok &= abs(ours - ref) <= 1e-12
        t, (_, curve) = timed(lambda: selective_curve(Pc, yc, scores))
        times["curve"].append(t)
        t, curve_ref = timed(lambda: reference_curve(r[: args.n_cal], o[: args.n_cal], scores))
        times["curve_ref"].append(t)
        ok &= bool(np.allclose(curve, curve_ref, rtol=0, atol=1e-12))
    print(f"\n{'case':<44} {'calwatch ms':>12} {'numpy ms':>10} {'ratio':>7} {'target':>7}")
    for label, ours_key, ref_key in (
        (f"calibration_error, {args.n_test:,} rows", "ece", "ece_ref"),
        (f"selective_curve (20 ξ), {args.n_cal:,} rows", "curve", "curve_ref"),
    ):
        a, b = median(times[ours_key]), median(times[ref_key])
        verdict = "PASS" if a <= TARGET_VS_NUMPY * b else "FAIL"
        print(f"{label:<44} {fmt_ms(a):>12} {fmt_ms(b):>10} {a / b:7.2f} {verdict:>7}")

    from calwatch.datasets.shift import shift_task

    task = shift_task("adult-sex")
    fit = task.source.subsample(2_000, SEED)
    rows = task.target.subsample(args.n_cal, SEED, replace_rows=True)
    selector = SelectiveCalibrator(epochs=1, steps_per_epoch=5, progress=False, head=task.head)
    selector.fit(
        fit.probs, fit.labels, embeddings=fit.embeddings, groups=fit.groups, reference=task.reference
    )
    confidence = BaselineSelector("confidence").fit(fit.probs)
    score_times: dict[str, list[float]] = {"S-MMCE scores": [], "confidence scores": []}
    singles = {name: MetaFeatures(features=[name]).fit(task.reference, 2) for name in EMBEDDING_FEATURES}
    for name in singles:
        score_times[f"  meta feature {name}"] = []
    for _ in range(args.repeats):
        score_times["S-MMCE scores"].append(
            timed(lambda: selector.scores(rows.probs, embeddings=rows.embeddings))[0]
        )
        score_times["confidence scores"].append(timed(lambda: confidence.scores(rows.probs))[0])
        for name, meta in singles.items():
            with limit_threads(1):  # as the selector scores (its n_threads default)
                t = timed(lambda meta=meta: meta.transform(rows.probs, rows.embeddings))[0]
            score_times[f"  meta feature {name}"].append(t)
    print(
        f"\nscoring {args.n_cal:,} rows (Adult network, 64-d embeddings, "
        f"{len(task.reference):,} reference rows)"
    )
    for label, values in score_times.items():
        t = median(values)
        print(f"{label:<44} {fmt_ms(t):>12} ms   {args.n_cal / t:>12,.0f} rows/s")
    if not ok:
        print(f"\nBROKEN: calwatch's metrics differ from the numpy reference ({ours} vs {ref})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
