"""Split conformal classification at K = 1,000 classes: calwatch vs a full-sort numpy reference.

For LAC, APS and RAPS, times ``fit`` on ``n_cal`` calibration rows plus ``predict_sets`` on
``n_test`` rows (defaults 10,000 / 50,000) at K = 1,000, and again at K = 10 for comparison:

1. calwatch's :class:`calwatch.engine.conformal.classifier.SplitConformalClassifier`. At
   K > 64 its APS/RAPS sets and calibration scores come from each row's top block of classes
   (``np.argpartition`` and a sort of the block), not a sort of the whole row, and equal the
   full sort's bit for bit (``calwatch.engine.conformal.scores``);
2. the textbook vectorised numpy code (``bench_conformal.numpy_reference``: a stable
   ``argsort`` of every row, ``cumsum``, scatter back); calwatch's sets must equal it exactly;
3. MAPIE 1.6 and TorchCP (CPU tensors, float64, probabilities fed as ``score_type="identity"``)
   when they import; otherwise the table says why they are absent.

Probabilities are Dirichlet rows with total concentration 5 (``α_k = 5/K``): a few classes
carry most of each row, as for an ImageNet-scale classifier, so a 90% APS set holds about ten
classes; labels are drawn from the rows (a calibrated model). ``--data softmax`` uses the
softmax of N(0, 2²) logits instead (diffuse at K = 1,000: sets of hundreds of classes, where
no partial order can help). Each repeat runs the implementations back to back; the table
reports medians.

Targets: at K = 1,000, calwatch ≥ 5× faster than the numpy reference for APS and RAPS; at
K = 10, calwatch ≤ 1.2× the numpy reference for every score (the partial path is not taken
there). A missed target prints FAIL and leaves the exit code 0; the exit code is 1 only when
calwatch's sets differ from the reference's.

Run: ``python benchmarks/bench_k1000.py [--repeats R] [--n-cal N] [--n-test M] [--no-mapie]``.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from _common import fmt_ms, machine_line, median, parse_size_args, size_parser, timed
from bench_conformal import ALPHA, RAPS_K_REG, RAPS_LAMBDA, calwatch_run, mapie_run, numpy_reference

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]

SCORES = ("lac", "aps", "raps")
DIRICHLET_TOTAL = 5.0  # Σ α_k: the effective number of competing classes per row
LOGIT_SCALE = 2.0
TARGET_SPEEDUP_LARGE_K = 5.0  # numpy time / calwatch time for APS, RAPS at K = 1,000
TARGET_VS_NUMPY_SMALL_K = 1.2  # calwatch time / numpy time at K = 10
SMALL_K = 10
IMPLEMENTATIONS = ("calwatch", "numpy", "mapie", "torchcp")


# --------------------------------------------------------------------------- data
def make_data(
    n_cal: int, n_test: int, n_classes: int, kind: str = "dirichlet", seed: int = 0
) -> tuple[FloatArray, IntArray, FloatArray, IntArray]:
    """Calibration and test probabilities with labels sampled from them (a calibrated model)."""
    rng = np.random.default_rng(seed)
    n = n_cal + n_test
    if kind == "dirichlet":
        P = rng.dirichlet(np.full(n_classes, DIRICHLET_TOTAL / n_classes), size=n)
    else:
        logits = rng.normal(scale=LOGIT_SCALE, size=(n, n_classes))
        P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    cdf = np.cumsum(P, axis=1)
    u = rng.uniform(size=(n, 1)) * cdf[:, -1:]
    y = np.minimum((cdf < u).sum(axis=1), n_classes - 1).astype(np.intp)
    return P[:n_cal], y[:n_cal], P[n_cal:], y[n_cal:]


# -------------------------------------------------------------------- TorchCP
def torchcp_missing() -> str | None:
    """Why TorchCP cannot run here (None when it imports)."""
    try:
        import torchcp  # noqa: F401
    except ImportError as err:
        return (
            f"torchcp is not installed ({err}): torchcp 1.2.1 requires torchvision, transformers, "
            "torch_geometric and torchsort, and pip resolves it to torch 2.14.1 with CUDA wheels, "
            "which would replace the venv's pinned CPU torch 2.13.0; so it is not in the bench extra"
        )
    return None


def torchcp_run(P_cal: FloatArray, y_cal: IntArray, P_test: FloatArray, score: str) -> BoolArray:
    """TorchCP's SplitPredictor on float64 CPU tensors of the probabilities (deterministic scores).

    Written against torchcp 1.2.1 (``SplitPredictor.calculate_threshold`` /
    ``predict_with_logits``; ``score_type="identity"`` takes probabilities as they are).
    """
    import torch
    from torchcp.classification.predictor import SplitPredictor
    from torchcp.classification.score import APS, LAC, RAPS

    functions: dict[str, Any] = {
        "lac": lambda: LAC(score_type="identity"),
        "aps": lambda: APS(score_type="identity", randomized=False),
        "raps": lambda: RAPS(score_type="identity", randomized=False, penalty=RAPS_LAMBDA, kreg=RAPS_K_REG),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        predictor = SplitPredictor(score_function=functions[score](), model=None)
        predictor.calculate_threshold(torch.from_numpy(P_cal), torch.from_numpy(y_cal), alpha=ALPHA)
        sets = predictor.predict_with_logits(torch.from_numpy(P_test))
    return np.asarray(sets.numpy(), dtype=bool)


# -------------------------------------------------------------------- timing
@dataclass
class Row:
    """Timings (seconds, one per repeat) and checks for one score at one K."""

    name: str
    n_classes: int
    times: dict[str, list[float]] = field(default_factory=dict)
    mismatches: int = 0  # calwatch vs numpy cells that differ
    agree: dict[str, float] = field(default_factory=dict)  # share of rows whose set equals calwatch's
    coverage: dict[str, float] = field(default_factory=dict)
    mean_size: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # competitor -> why it could not run


def run_benchmark(
    n_cal: int, n_test: int, n_classes: int, repeats: int, data: str, seed: int, others: Sequence[str]
) -> list[Row]:
    """Time every implementation ``repeats`` times (plus one untimed warm-up) per score."""
    P_cal, y_cal, P_test, y_test = make_data(n_cal, n_test, n_classes, data, seed)
    test_rows = np.arange(n_test)
    rows: list[Row] = []
    for score in SCORES:
        row = Row(score, n_classes)
        impls: dict[str, Callable[[], BoolArray]] = {
            "calwatch": partial(calwatch_run, P_cal, y_cal, P_test, score),
            "numpy": partial(numpy_reference, P_cal, y_cal, P_test, score),
        }
        if "mapie" in others:
            impls["mapie"] = partial(mapie_run, P_cal, y_cal, P_test, score)
        if "torchcp" in others:
            impls["torchcp"] = partial(torchcp_run, P_cal, y_cal, P_test, score)
        for key, fn in list(impls.items()):  # warm-up, and the sets to check, one at a time (memory)
            try:
                sets = fn()
            except Exception as err:  # a competitor that cannot do this task: say why, time the rest
                if key in ("calwatch", "numpy"):
                    raise
                row.failed[key] = f"{type(err).__name__}: {str(err)[:120]}"
                del impls[key]
                continue
            if key == "calwatch":
                reference = sets
            elif key == "numpy":
                row.mismatches = int(np.count_nonzero(sets != reference))
            else:
                row.agree[key] = float(np.mean(np.all(sets == reference, axis=1)))
            row.coverage[key] = float(sets[test_rows, y_test].mean())
            row.mean_size[key] = float(sets.sum(axis=1).mean())
            del sets
        del reference
        row.times = {key: [] for key in impls}
        for _ in range(repeats):
            for key, fn in impls.items():
                seconds, _sets = timed(fn)
                row.times[key].append(seconds)
                del _sets
        rows.append(row)
    return rows


def _ratio(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:6.2f}×"


def print_report(rows: list[Row], args: argparse.Namespace, absent: dict[str, str]) -> bool:
    """Print one table per K; return True when calwatch's sets equal the numpy reference's."""
    all_equal = True
    for K in sorted({row.n_classes for row in rows}, reverse=True):
        print(
            f"\nSplit conformal at K={K:,}: fit on n_cal={args.n_cal:,} + predict_sets on "
            f"n_test={args.n_test:,}, α={ALPHA}, {args.data} probabilities; median of "
            f"{args.repeats} repeats (ms)"
        )
        print(machine_line(args.loadavg))
        large = K > SMALL_K
        target = f"np/cw≥{TARGET_SPEEDUP_LARGE_K:g}" if large else f"cw≤{TARGET_VS_NUMPY_SMALL_K:g}×np"
        header = (
            f"{'score':<6} {'calwatch':>9} {'numpy':>9} {'mapie':>9} {'torchcp':>9} {'np/cw':>8} "
            f"{'mapie/cw':>9} {'tcp/cw':>8} {'sets==np':>9} {target:>12}"
        )
        print(header)
        print("-" * len(header))
        for row in (r for r in rows if r.n_classes == K):
            t = {key: median(row.times.get(key, [])) for key in IMPLEMENTATIONS}
            cw = t["calwatch"]
            speedup = t["numpy"] / cw
            equal = "yes" if row.mismatches == 0 else f"NO:{row.mismatches}"
            all_equal &= row.mismatches == 0
            if large:
                verdict = "(info)" if row.name == "lac" else ""
                if not verdict:
                    verdict = "PASS" if speedup >= TARGET_SPEEDUP_LARGE_K else "FAIL"
            else:
                verdict = "PASS" if cw / t["numpy"] <= TARGET_VS_NUMPY_SMALL_K else "FAIL"
            print(
                f"{row.name:<6} {fmt_ms(cw):>9} {fmt_ms(t['numpy']):>9} {fmt_ms(t['mapie']):>9} "
                f"{fmt_ms(t['torchcp']):>9} {_ratio(speedup):>8} {_ratio(t['mapie'] / cw):>9} "
                f"{_ratio(t['torchcp'] / cw):>8} {equal:>9} {verdict:>12}"
            )
        print("sets: coverage / mean size on the test rows; rows whose set equals calwatch's")
        for row in (r for r in rows if r.n_classes == K):
            parts = [f"{key} {row.coverage[key]:.4f}/{row.mean_size[key]:.2f}" for key in row.coverage]
            agree = "".join(f"  {key}≡calwatch {share:.1%}" for key, share in row.agree.items())
            print(f"  {row.name:<6} " + "  ".join(parts) + agree)
            for key, why in row.failed.items():
                print(f"  {row.name:<6} {key} did not run: {why}")
    for name, why in absent.items():
        print(f"\n{name}: absent: {why}")
    if any("mapie" in row.times or "torchcp" in row.times for row in rows):
        print(
            "\nMAPIE and TorchCP sets differ from calwatch's by design (bench_conformal.py's notes: "
            "MAPIE randomises APS calibration scores and tunes RAPS; TorchCP omits the forced top "
            "class); the timings compare the same task."
        )
    for row in rows:
        if row.mismatches:
            print(f"MISMATCH: {row.name} at K={row.n_classes}: {row.mismatches} cells differ from numpy")
    return all_equal


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark at K = 1,000 and K = 10; 0 unless calwatch's sets disagree with numpy."""
    parser = size_parser(__doc__.splitlines()[0] if __doc__ else None)
    parser.set_defaults(repeats=3, n_cal=10_000, n_test=50_000, n_classes=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", choices=("dirichlet", "softmax"), default="dirichlet")
    parser.add_argument("--no-mapie", action="store_true", help="skip MAPIE")
    parser.add_argument("--no-torchcp", action="store_true", help="skip TorchCP")
    parser.add_argument("--no-small", action="store_true", help=f"skip the K={SMALL_K} comparison")
    args = parse_size_args(parser, argv)
    absent: dict[str, str] = {}
    others: list[str] = []
    if not args.no_mapie:
        try:
            import mapie  # noqa: F401

            others.append("mapie")
        except ImportError:
            absent["MAPIE"] = "mapie is not installed (pip install mapie==1.6.0, the bench extra)"
    if not args.no_torchcp:
        why = torchcp_missing()
        if why is None:
            others.append("torchcp")
        else:
            absent["TorchCP"] = why
    sizes = [args.n_classes] + ([] if args.no_small or args.n_classes == SMALL_K else [SMALL_K])
    rows: list[Row] = []
    for K in sizes:
        rows += run_benchmark(args.n_cal, args.n_test, K, args.repeats, args.data, args.seed, others)
    return 0 if print_report(rows, args, absent) else 1


if __name__ == "__main__":
    sys.exit(main())
