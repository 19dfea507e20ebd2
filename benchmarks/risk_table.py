"""Paper 004's comparison on real data: how far each label-free risk estimate is from the truth.

For every task × model in :func:`calwatch.datasets.classification_pool` (four real tasks that
load offline: diamonds cut K=5, Chem97 A-level score K=6, NYC flights late arrival K=2, CCES
2016 Trump vote K=2; three models: logistic regression, random forest, gradient boosting;
each pool is the model's probabilities on 18,000 rows it never saw, cached as Parquet), and
for the top-1 output and the top-3 set where K ≥ 4:

- split the pool 100 times at random into 20% calibration and 80% test rows (004 §IV);
- per split and method, ``δ = α̂ − α_emp``: the estimate ``RiskEstimator(method, top_k)
  .fit(cal).estimate(test)`` minus the share of test rows whose label is outside the output;
- report the mean of δ over the splits (004's metric, Figs. 1-3) and the share of splits with
  ``δ ≥ 0`` ("conservative").

Methods: SMX (raw softmax), TEMP (temperature scaling, 004's "PLATT" for multi-class),
PLATT (Platt scaling of the output's confidence), HIST (histogram binning, 15 equal-mass
bins), ISO (isotonic regression), InvCP (004 Alg. 1). The table is printed and written to
``benchmarks/results/risk_table.csv`` (one row per task, model, k and method).

Run: ``python benchmarks/risk_table.py [--splits R] [--max-rows N] [--out PATH]``
(a few minutes on 2 cores the first time, when the pools are built; under a minute after).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from calwatch.datasets import POOL_MODELS, POOL_TASKS, classification_pool
from calwatch.engine.calibration.binning import top_k_correct
from calwatch.engine.risk.estimator import RiskEstimator, RiskMethod

METHODS: dict[str, RiskMethod] = {
    "SMX": "softmax",
    "TEMP": "temperature",
    "PLATT": "platt",
    "HIST": "histogram",
    "ISO": "isotonic",
    "InvCP": "invcp",
}
CAL_FRACTION = 0.2
RESULTS = Path(__file__).resolve().parent / "results" / "risk_table.csv"


def evaluate(
    P: np.ndarray, y: np.ndarray, k: int, splits: int, seed: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per method: (δ per split, α̂ per split) over ``splits`` random 20/80 splits."""
    rng = np.random.default_rng(seed)
    m = P.shape[0]
    n = round(CAL_FRACTION * m)
    deltas: dict[str, list[float]] = {name: [] for name in METHODS}
    estimates: dict[str, list[float]] = {name: [] for name in METHODS}
    for _ in range(splits):
        order = rng.permutation(m)
        cal, test = order[:n], order[n:]
        observed = 1.0 - float(np.mean(top_k_correct(P[test], y[test], k)))
        for name, method in METHODS.items():
            estimate = RiskEstimator(method=method, top_k=k).fit(P[cal], y[cal]).estimate(P[test])
            deltas[name].append(estimate - observed)
            estimates[name].append(estimate)
    return {name: (np.asarray(deltas[name]), np.asarray(estimates[name])) for name in METHODS}


def build_table(splits: int, max_rows: int, seed: int) -> pl.DataFrame:
    records: list[dict[str, object]] = []
    for task in POOL_TASKS:
        for model in POOL_MODELS:
            start = time.perf_counter()
            pool = classification_pool(task, model, seed=seed, max_rows=max_rows)
            P, y = pool.probs, pool.labels
            K = P.shape[1]
            for k in (1, 3) if K >= 4 else (1,):
                observed = 1.0 - float(np.mean(top_k_correct(P, y, k)))
                results = evaluate(P, y, k, splits, seed=seed + 1000 * k)
                for name, (delta, estimate) in results.items():
                    records.append(
                        {
                            "task": task,
                            "model": model,
                            "K": K,
                            "top_k": k,
                            "accuracy": pool.accuracy,
                            "alpha_emp": observed,
                            "method": name,
                            "mean_alpha_hat": float(estimate.mean()),
                            "mean_delta": float(delta.mean()),
                            "sd_delta": float(delta.std(ddof=1)),
                            "share_conservative": float(np.mean(delta >= 0)),
                            "n_pool": int(P.shape[0]),
                            "n_cal": round(CAL_FRACTION * P.shape[0]),
                            "splits": splits,
                        }
                    )
            print(f"  {task:<13} {model:<18} {time.perf_counter() - start:5.1f} s", flush=True)
    return pl.DataFrame(records)


def print_table(table: pl.DataFrame) -> None:
    names = list(METHODS)
    header = f"{'task':<13} {'model':<18} {'k':>2} {'acc':>6} {'α_emp':>6} " + " ".join(
        f"{n:>15}" for n in names
    )
    print("\nmean δ = α̂ − α_emp over the splits (share of splits with δ ≥ 0); closest to 0 marked *")
    print(header)
    print("-" * len(header))
    keys = table.select("task", "model", "top_k").unique(maintain_order=True).iter_rows()
    for task, model, k in keys:
        part = table.filter((pl.col("task") == task) & (pl.col("model") == model) & (pl.col("top_k") == k))
        by_method = {row["method"]: row for row in part.iter_rows(named=True)}
        best = min(names, key=lambda n: abs(float(by_method[n]["mean_delta"])))
        first = part.row(0, named=True)
        cells = []
        for n in names:
            row = by_method[n]
            mark = "*" if n == best else " "
            cells.append(f"{row['mean_delta']:+.4f}({row['share_conservative']:.2f}){mark}")
        print(
            f"{task:<13} {model:<18} {k:>2} {first['accuracy']:>6.3f} {first['alpha_emp']:>6.3f} "
            + " ".join(f"{c:>15}" for c in cells)
        )
    summary = table.group_by("method", maintain_order=True).agg(
        pl.col("mean_delta").abs().mean().alias("mean |δ|"),
        (pl.col("mean_delta") >= 0).mean().alias("share of rows with mean δ ≥ 0"),
        pl.col("share_conservative").mean().alias("mean share of conservative splits"),
    )
    print("\nover all task × model × k rows:")
    for row in summary.iter_rows(named=True):
        print(
            f"  {row['method']:<6} mean |δ| {row['mean |δ|']:.4f}   rows with mean δ ≥ 0: "
            f"{row['share of rows with mean δ ≥ 0']:.2f}   conservative splits: "
            f"{row['mean share of conservative splits']:.2f}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Build, print and save the table; 0 on success."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--splits", type=int, default=100, help="calibration/test splits (default 100)")
    parser.add_argument("--max-rows", type=int, default=30_000, help="subsample tasks to this many rows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"CSV path (default {RESULTS})")
    args = parser.parse_args(argv)
    if args.splits < 2:
        parser.error("--splits must be at least 2")
    start = time.perf_counter()
    print(f"risk table: {args.splits} splits of each pool, {CAL_FRACTION:.0%} calibration")
    table = build_table(args.splits, args.max_rows, args.seed)
    print_table(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.write_csv(args.out, float_precision=6)
    print(f"\nwrote {args.out} ({table.height} rows) in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
