"""Paper 002's comparison on real shifted tasks: S-MMCE selectors against the baselines.

Tasks (:func:`calwatch.datasets.shift.shift_task`, cached; a one-hidden-layer network of 64 ReLU
units gives probabilities and embeddings):

- ``adult-sex``: UCI Adult, income > 50K; the network was trained on men; selectors are fitted
  on other men and judged on women (10.9% positive instead of 30.4%);
- ``flights-month``: NYC flights 2013, arrival > 15 min late; trained on January-March; judged
  on June-July.

Protocol (002 §5.2), subsampled to keep the run at a few minutes on 2 cores: every selector is
fitted on the same 4,000 source rows (seeded subsample), with 5 training seeds (S-MMCE:
initialisation, perturbations, dev split; the outlier baselines: their subsamples and the
isolation forest); the target is resampled with replacement 5 times (5,000 rows each). For each
of the 25 (seed, resample) trials and each method, thresholds are tuned on the resampled rows
themselves (labels unused) at ξ = 0.05, 0.10, …, 1, and we report the AUC over ξ of the ℓ2
and ℓ∞ selective calibration error (S-BCE₂, S-BCE∞) and of the selective Brier score, as mean ±
sd over the 25 trials (lower is better). The full model's curve is flat: its AUC is 0.95 × its
calibration error.

S-MMCE: :class:`calwatch.engine.selective.calibrator.SelectiveCalibrator` with its defaults (κ = 4 of 16
perturbed sets of 512 rows per step, 5 epochs of 50 steps, early stopping on a 20% dev split;
perturbations: class-prior shift, resampling by group (occupation / carrier), and feature noise
and dropout pushed through the network's output layer), ``rank_by="auc"`` (002's footnote 4:
the selector is judged at every coverage). Baselines (002 §5.3): full, confidence, isolation
forest, one-class SVM, kNN distance, all fitted on the network's training embeddings.

Outputs under ``benchmarks/results/``: ``selective_table.csv`` (one row per task and method),
``selective_curves.csv`` (mean and sd per coverage) and ``selective_curves.json`` (the Altair
chart of the error-vs-coverage curves, a Vega-Lite spec with its data; ``--html`` also writes
``selective_curves.html``, offline, ~1 MB).

``--ablation`` adds two S-MMCE variants: without perturbations (bootstrap samples of the clean
rows, 002 App. C's "without T") and ranking the κ-worst at ξ = 0.8 as Alg. 1 is written.

Run: ``python benchmarks/selective_table.py [--seeds 5] [--resamples 5] [--n-fit 4000]
[--n-test 5000] [--tasks adult-sex flights-month] [--html] [--ablation]`` (about 7 minutes
on a shared 2-core machine, 15 with ``--ablation``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from _common import machine_line
from calwatch.datasets.shift import SHIFT_TASKS, shift_task
from calwatch.engine.metrics.calibration import DEFAULT_COVERAGES, selective_auc, selective_curve
from calwatch.engine.selective.calibrator import BaselineSelector, SelectiveCalibrator

RESULTS = Path(__file__).resolve().parent / "results"
METHODS = ("S-MMCE", "full", "confidence", "isolation_forest", "one_class_svm", "knn")
#: ``--ablation``: S-MMCE without perturbations, and ranking datasets at ξ = 0.8 as Alg. 1 does.
ABLATIONS = ("S-MMCE no perturbations", "S-MMCE rank at ξ=0.8")
METRICS = {"S-BCE2": ("calibration", "l2"), "S-BCEinf": ("calibration", "linf"), "S-Brier": ("brier", "l2")}


def make_selector(method: str, seed: int, head: Any) -> Any:
    if method == "S-MMCE":
        return SelectiveCalibrator(coverage=0.8, rank_by="auc", head=head, progress=False, seed=seed)
    if method == "S-MMCE no perturbations":
        return SelectiveCalibrator(coverage=0.8, rank_by="auc", perturbations=[], progress=False, seed=seed)
    if method == "S-MMCE rank at ξ=0.8":
        return SelectiveCalibrator(coverage=0.8, rank_by="coverage", head=head, progress=False, seed=seed)
    return BaselineSelector(method, coverage=0.8, seed=seed)  # type: ignore[arg-type]


def run_task(
    name: str, methods: Sequence[str], seeds: int, resamples: int, n_fit: int, n_test: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    task = shift_task(name)
    fit = task.source.subsample(n_fit, 0)
    tests = [task.target.subsample(n_test, 1000 + r, replace_rows=True) for r in range(resamples)]
    aucs: dict[tuple[str, str], list[float]] = {}
    curves: dict[tuple[str, str], list[np.ndarray]] = {}
    timings: dict[str, list[float]] = {m: [] for m in methods}
    score_times: dict[str, list[float]] = {m: [] for m in methods}
    for method in methods:
        for seed in range(seeds):
            start = time.perf_counter()
            selector = make_selector(method, seed, task.head).fit(
                fit.probs, fit.labels, embeddings=fit.embeddings, groups=fit.groups, reference=task.reference
            )
            timings[method].append(time.perf_counter() - start)
            for test in tests:
                start = time.perf_counter()
                scores = selector.scores(test.probs, embeddings=test.embeddings)
                score_times[method].append(time.perf_counter() - start)
                for metric, (kind, norm) in METRICS.items():
                    xi, values = selective_curve(test.probs, test.labels, scores, metric=kind, norm=norm)
                    aucs.setdefault((method, metric), []).append(selective_auc(xi, values))
                    curves.setdefault((method, metric), []).append(values)
        print(
            f"  {name:<14} {method:<24} fit {np.median(timings[method]):6.2f} s (median of {seeds}), "
            f"score {n_test} rows {1000 * np.median(score_times[method]):7.1f} ms",
            flush=True,
        )
    rows, curve_rows = [], []
    for method in methods:
        row: dict[str, Any] = {"task": name, "method": method}
        for metric in METRICS:
            values = np.asarray(aucs[(method, metric)])
            row[f"{metric}_auc_mean"] = float(values.mean())
            row[f"{metric}_auc_sd"] = float(values.std(ddof=1))
            stacked = np.stack(curves[(method, metric)])
            for i, xi in enumerate(DEFAULT_COVERAGES.tolist()):
                curve_rows.append(
                    {
                        "task": name,
                        "method": method,
                        "metric": metric,
                        "coverage": xi,
                        "mean": float(stacked[:, i].mean()),
                        "sd": float(stacked[:, i].std(ddof=1)),
                    }
                )
        row["fit_seconds_median"] = float(np.median(timings[method]))
        row["score_ms_median"] = float(1000 * np.median(score_times[method]))
        row["trials"] = seeds * resamples
        row["n_fit"] = len(fit)
        row["n_test"] = n_test
        rows.append(row)
    return rows, curve_rows


def print_table(table: pl.DataFrame) -> None:
    print("\nAUC over coverage 0.05-1 (mean ± sd over trials; lower is better; best per column *)")
    header = (
        f"{'task':<14} {'method':<24} " + " ".join(f"{m + ' AUC':>19}" for m in METRICS) + f" {'fit s':>7}"
    )
    print(header)
    print("-" * len(header))
    for task in table["task"].unique(maintain_order=True).to_list():
        part = table.filter(pl.col("task") == task)
        best = {m: float(part[f"{m}_auc_mean"].min()) for m in METRICS}
        for row in part.iter_rows(named=True):
            cells = []
            for m in METRICS:
                mark = "*" if row[f"{m}_auc_mean"] == best[m] else " "
                cells.append(f"{row[f'{m}_auc_mean']:.4f} ± {row[f'{m}_auc_sd']:.4f}{mark}")
            print(
                f"{task:<14} {row['method']:<24} "
                + " ".join(f"{c:>19}" for c in cells)
                + f" {row['fit_seconds_median']:7.2f}"
            )
        smmce = part.filter(pl.col("method") == "S-MMCE").row(0, named=True)
        ratios = []
        for row in part.filter(pl.col("method") != "S-MMCE").iter_rows(named=True):
            r = smmce["S-BCE2_auc_mean"] / row["S-BCE2_auc_mean"]
            ratios.append(f"{row['method']} {r:.2f}")
        print(f"{'':<14} S-MMCE / method, S-BCE2 AUC: " + ", ".join(ratios))


def save_chart(curves: pl.DataFrame, out_dir: Path, *, html: bool) -> list[Path]:
    """The error-vs-coverage curves (mean ± sd band per method): Vega-Lite JSON, optionally HTML."""
    import altair as alt

    data = curves.with_columns(lo=pl.col("mean") - pl.col("sd"), hi=pl.col("mean") + pl.col("sd")).to_pandas()
    base = alt.Chart(data).encode(
        x=alt.X("coverage:Q", title="coverage ξ", scale=alt.Scale(domain=[0.05, 1])),
        color=alt.Color("method:N", sort=list(METHODS + ABLATIONS)),
    )
    band = base.mark_area(opacity=0.12).encode(y="lo:Q", y2="hi:Q")
    line = base.mark_line(point=True).encode(
        y=alt.Y("mean:Q", title=None),
        tooltip=["task", "method", "metric", "coverage", alt.Tooltip("mean:Q", format=".4f")],
    )
    chart = (
        alt.layer(band, line, data=data)
        .properties(width=260, height=180)
        .facet(row=alt.Row("task:N"), column=alt.Column("metric:N", sort=list(METRICS)))
        .resolve_scale(y="independent")
        .properties(title="Selective calibration error and Brier score vs coverage (mean ± sd over trials)")
    )
    json_path = out_dir / "selective_curves.json"
    json_path.write_text(chart.to_json())
    if not html:
        return [json_path]
    html_path = out_dir / "selective_curves.html"
    chart.save(str(html_path), inline=True)  # offline: the Vega scripts inlined (vl-convert), ~1 MB
    return [json_path, html_path]


def main(argv: Sequence[str] | None = None) -> int:
    """Build, print and save the table and the curves; 0 on success."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", nargs="+", default=list(SHIFT_TASKS), choices=SHIFT_TASKS)
    parser.add_argument("--seeds", type=int, default=5, help="training seeds (default 5)")
    parser.add_argument("--resamples", type=int, default=5, help="test resamples (default 5)")
    parser.add_argument("--n-fit", type=int, default=4_000, help="source rows to fit on (default 4000)")
    parser.add_argument("--n-test", type=int, default=5_000, help="rows per test resample (default 5000)")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"output folder (default {RESULTS})")
    parser.add_argument("--html", action="store_true", help="also write the chart as offline HTML (~1 MB)")
    parser.add_argument(
        "--ablation", action="store_true", help="add S-MMCE without perturbations / ranked at ξ"
    )
    args = parser.parse_args(argv)
    if args.seeds < 2 or args.resamples < 1:
        parser.error("--seeds must be ≥ 2 and --resamples ≥ 1")
    start = time.perf_counter()
    loadavg = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(
        f"selective table: {args.seeds} seeds × {args.resamples} test resamples, "
        f"{args.n_fit} fit rows, {args.n_test} test rows per resample"
    )
    print(machine_line(loadavg))
    rows: list[dict[str, Any]] = []
    curve_rows: list[dict[str, Any]] = []
    for name in args.tasks:
        methods = METHODS + (ABLATIONS if args.ablation else ())
        r, c = run_task(name, methods, args.seeds, args.resamples, args.n_fit, args.n_test)
        rows += r
        curve_rows += c
    table, curves = pl.DataFrame(rows), pl.DataFrame(curve_rows)
    print_table(table)
    args.out.mkdir(parents=True, exist_ok=True)
    table.write_csv(args.out / "selective_table.csv", float_precision=6)
    curves.write_csv(args.out / "selective_curves.csv", float_precision=6)
    charts = save_chart(curves, args.out, html=args.html)
    written = ", ".join(
        str(p) for p in [args.out / "selective_table.csv", args.out / "selective_curves.csv", *charts]
    )
    print(f"\nwrote {written} in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
