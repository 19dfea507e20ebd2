"""Venn-ADMIT speed: ``VennAdmit.predict`` against the bare faiss search it cannot avoid.

Every prediction needs the ``K = 25`` nearest reference rows of each test row, so the floor is
one faiss ``IndexFlatL2.search(E_test, 25)``. This benchmark times, in the same process and
interleaved over chunks of the test rows (each chunk runs every step in turn, so load drift
on a shared machine hits all alike; a step's time is its sum over the chunks):

1. ``bare``: faiss ``IndexFlatL2`` over the reference rows, ``search(E_test, 25)``, nothing else;
2. ``predict`` with ``weighted=False`` (Alg. 4): search, exact neighbour distances, the KNN
   approximation, ``q``/``d``, ADMIT sets by band rank queries, Venn counts, the polars frame;
3. ``predict`` with ``weighted=True`` (Alg. 3): the same plus the localizer's category mass
   ``ψ'`` for the rows with singleton ADMIT sets, with the exact dense localizer (default,
   ``localizer_k=None``) and with the top-1000 localizer (``localizer_k=1000``).

Target: ``predict ≤ 1.5 × bare`` at the default (full) size (printed as PASS/FAIL; a miss
does not change the exit code). ``--quick`` is a smoke run: with d = 64 and 20,000 reference
rows the faiss search is ~20× cheaper while the fixed per-row work is not, so its ratios are
higher (1.4× unweighted, 1.4-1.7× weighted on 2 shared cores). Also printed: the localizer
step alone for the singleton rows and, as a worst case, for every test row; and the training
time of the KNN approximation and the localizer (App. C) on ``D_knn`` of 2,000 rows (1,000 fit /
1,000 dev), target under a minute.

Data: synthetic clustered embeddings (``--n-clusters`` Gaussian clusters in ``--dim``
dimensions, each with a majority label; 2% of labels redrawn at random; the model's logits
favour the cluster's majority label). ``κ`` is 10 here so that a realistic share of rows gets a
singleton ADMIT set and the weighted path does real work (with ``κ = 1000`` and 9,000
``D_ca^mc`` rows over 10 classes every row would be guarded and the weighted step free).

Run: ``python benchmarks/bench_venn_admit.py [--quick] [--repeats R] [--n-ref N] ...``.
Defaults: 100,000 reference rows (d = 256), 20,000 calibration rows, 100,000 test rows, 10
classes, 1 repeat (the full run takes several minutes on 2 cores); ``--quick``: 20,000 /
5,000 / 10,000 rows, d = 64, 3 repeats.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from _common import machine_line, median, parse_size_args, size_parser, timed
from calwatch.engine.knn import KNNIndex
from calwatch.engine.venn_admit.admit import VennAdmit
from calwatch.engine.venn_admit.approximation import approximation_logits, fit_approximation
from calwatch.engine.venn_admit.localizer import LocalizerSupport, category_mass, fit_localizer

FloatArray = npt.NDArray[np.float64]
TARGET = 1.5  # predict time / bare faiss time must be at most this
TRAINING_TARGET_S = 60.0
BENCH_KAPPA = 10
K = 25


@dataclass
class World:
    """Reference, calibration and test rows of one synthetic clustered world."""

    ref: tuple[Any, Any, Any]
    cal: tuple[Any, Any, Any]
    test: tuple[Any, Any, Any]


def make_world(
    n_ref: int, n_cal: int, n_test: int, dim: int, n_classes: int, n_clusters: int, seed: int
) -> World:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_clusters, dim)).astype(np.float32) * 0.6
    major = rng.integers(0, n_classes, n_clusters)

    def draw(n: int) -> tuple[Any, Any, Any]:
        z = rng.integers(0, n_clusters, n)
        E = centres[z] + rng.normal(size=(n, dim)).astype(np.float32) * 0.5
        y = np.where(rng.uniform(size=n) < 0.98, major[z], rng.integers(0, n_classes, n))
        logits = 5.0 * np.eye(n_classes)[major[z]] + rng.normal(size=(n, n_classes))
        return E, logits, y

    return World(draw(n_ref), draw(n_cal), draw(n_test))


@dataclass
class Timings:
    """Seconds per repeat of each timed step."""

    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, key: str, seconds: float) -> None:
        self.values.setdefault(key, []).append(seconds)

    def median(self, key: str) -> float:
        return median(self.values.get(key, []))


def time_training(world: World, n_knn: int, seed: int) -> dict[str, float]:
    """Train the approximation and the localizer on ``n_knn`` rows, as ``VennAdmit.fit`` does."""
    E_tr, L_tr, y_tr = world.ref
    E_ca, L_ca, _ = world.cal
    rows = np.arange(min(n_knn, E_ca.shape[0]))
    dist, idx = KNNIndex().fit(E_tr).search(E_ca[rows], K)
    half = rows.size // 2
    fit_rows, dev_rows = np.arange(half), np.arange(half, rows.size)
    tanh_ref = np.tanh(L_tr).astype(np.float32)
    start = time.perf_counter()
    params, result = fit_approximation(
        dist, idx, tanh_ref, y_tr, L_ca[rows], fit_rows, dev_rows, seed=seed, progress=False
    )
    approx_s = time.perf_counter() - start
    start = time.perf_counter()
    a = approximation_logits(params, dist, idx, tanh_ref, y_tr)  # the localizer's targets
    support_E = E_ca[rows.size : rows.size + round(0.45 * 10 * rows.size)]  # D_ca^vp of a 10/45/45 split
    support_d, support_i = KNNIndex().fit(E_tr).search(support_E, K)
    support_logits = approximation_logits(params, support_d, support_i, tanh_ref, y_tr)
    features_s = time.perf_counter() - start
    start = time.perf_counter()
    fit_localizer(
        LocalizerSupport(support_E, k=None),
        E_ca[rows],
        support_logits,
        a,
        fit_rows,
        dev_rows,
        seed=seed,
        progress=False,
    )
    loc_s = time.perf_counter() - start
    return {
        "approximation": approx_s,
        "localizer": loc_s,
        "features": features_s,
        "epochs": float(len(result.dev_disagreements)),
        "support": float(support_E.shape[0]),
    }


def run(args: argparse.Namespace) -> int:
    world = make_world(
        args.n_ref, args.n_cal, args.n_test, args.dim, args.n_classes, args.n_clusters, args.seed
    )
    E_te, L_te, _ = world.test
    print(
        f"\nVenn-ADMIT predict vs bare faiss IndexFlatL2 k={K}: n_ref={args.n_ref:,} (d={args.dim}), "
        f"n_cal={args.n_cal:,}, n_test={args.n_test:,}, C={args.n_classes}, κ={BENCH_KAPPA}; "
        f"steps interleaved over {args.chunks} chunks of test rows; median of {args.repeats} repeat(s)"
    )
    print(machine_line(args.loadavg))
    seconds, va = timed(
        lambda: VennAdmit(k=K, kappa=BENCH_KAPPA, seed=args.seed, progress=False).fit(
            train=world.ref, calibration=world.cal
        )
    )
    print(f"fit: {seconds:.1f} s (includes the calibration rows' k={K} search and both trainings)")
    # The top-1000 variant for timing only: the same fitted state with localizer_k = 1000 (its
    # η' was trained over the dense support; the search it times does not depend on η').
    state = va.state()
    state["options"] = {**state["options"], "localizer_k": 1000}
    fitted = {"dense": va, "top1000": VennAdmit.from_state(state)}
    import faiss

    bare_index = faiss.IndexFlatL2(args.dim)
    bare_index.add(np.ascontiguousarray(world.ref[0], dtype=np.float32))
    E32 = np.ascontiguousarray(E_te, dtype=np.float32)

    def predict(va: VennAdmit, weighted: bool) -> Callable[[slice], Any]:
        def call(rows: slice) -> Any:
            va.weighted = weighted
            return va.predict(E_te[rows], L_te[rows])

        return call

    steps: dict[str, Callable[[slice], Any]] = {
        "bare": lambda rows: bare_index.search(E32[rows], K),
        "unweighted": predict(fitted["dense"], weighted=False),
        "weighted (dense)": predict(fitted["dense"], weighted=True),
        "weighted (top1000)": predict(fitted["top1000"], weighted=True),
    }
    # Interleave the steps chunk by chunk, so that load drift on a shared machine hits them alike;
    # a step's time is the sum over the chunks.
    bounds = np.linspace(0, args.n_test, args.chunks + 1).astype(int)
    chunks = [slice(int(a), int(b)) for a, b in itertools.pairwise(bounds)]
    timings = Timings()
    for _ in range(args.repeats):
        totals = dict.fromkeys(steps, 0.0)
        for rows in chunks:
            for key, fn in steps.items():
                totals[key] += timed(partial(fn, rows))[0]
        for key, seconds in totals.items():
            timings.add(key, seconds)
    res = fitted["dense"].predict_arrays(E_te, L_te, weighted=False)
    single = np.flatnonzero(res.sets.sum(axis=1) == 1)
    loc = _localizer_alone(fitted, E_te, res, single)
    bare = timings.median("bare")
    print(f"\n{'step':<28} {'seconds':>9} {'× bare':>8}  {'≤ 1.5× bare':>11}")
    print("-" * 61)
    for key in steps:
        t = timings.median(key)
        verdict = "" if key == "bare" else ("PASS" if t <= TARGET * bare else "FAIL")
        label = "bare faiss search" if key == "bare" else f"predict {key}"
        print(f"{label:<28} {t:9.2f} {t / bare:7.2f}×  {verdict:>11}")
    print(
        f"\nsingleton ADMIT sets: {single.size / args.n_test:.1%} of test rows (guarded: "
        f"{res.guarded.mean():.1%}); admitted (unweighted): {res.admitted.mean():.1%}"
    )
    for name, (t_single, t_all) in loc.items():
        print(
            f"localizer step alone ({name}): {t_single:.2f} s for the singleton rows "
            f"({t_single / bare:.2f}× bare); worst case, every row: {t_all:.2f} s ({t_all / bare:.2f}× bare)"
        )
    train = time_training(world, 2000, args.seed)
    verdict = "PASS" if train["approximation"] + train["localizer"] <= TRAINING_TARGET_S else "FAIL"
    print(
        f"\ntraining on D_knn = 2,000 rows (1,000 fit / 1,000 dev, {int(train['epochs'])} epochs, "
        "torch CPU): "
        f"approximation {train['approximation']:.1f} s, localizer (dense over {int(train['support']):,} "
        f"support rows) {train['localizer']:.1f} s; "
        f"total ≤ {TRAINING_TARGET_S:.0f} s: {verdict}"
    )
    va = fitted["dense"]
    print(
        f"agreement on the dev half of D_knn: approximation vs model {va.agreement_:.3f}, "
        f"localizer vs approximation {va.localizer_agreement_:.3f}"
    )
    return 0


def _localizer_alone(
    fitted: dict[str, VennAdmit], E: Any, res: Any, single: Any
) -> dict[str, tuple[float, float]]:
    """Time ``category_mass`` (the weighted step) for the singleton rows and for every row."""
    out: dict[str, tuple[float, float]] = {}
    E32 = np.ascontiguousarray(E, dtype=np.float32)
    everything = np.arange(E32.shape[0])
    for name, va in fitted.items():
        key = (res.q * va.n_classes_ + res.y_hat).astype(np.int64)
        lo, hi = res.d - va.omega_, res.d + va.omega_
        cats, support = va._categories, va._support
        times = []
        for rows in (single, everything):
            args = (support, va.localizer_eta_, E32[rows], key[rows], lo[rows], hi[rows], cats.key, cats.d)
            times.append(timed(partial(category_mass, *args))[0])
        out[name] = (times[0], times[1])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = size_parser(__doc__.splitlines()[0] if __doc__ else None)
    parser.set_defaults(repeats=1, n_cal=20_000, n_test=100_000, n_classes=10)
    parser.add_argument("--n-ref", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--n-clusters", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunks", type=int, default=10, help="test-row chunks the steps alternate over")
    parser.add_argument("--quick", action="store_true", help="20k/5k/10k rows, d=64, 3 repeats")
    args = parse_size_args(parser, argv)
    if args.quick:
        args.n_ref, args.n_cal, args.n_test, args.dim, args.repeats = 20_000, 5_000, 10_000, 64, 3
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
