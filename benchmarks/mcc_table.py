"""Modular conformal calibration on real data: paper 001's Tables 2-3 layout, and conformal intervals.

Data (offline, ``calwatch.datasets.regression.regression_pool``): diamonds (log price), hotel_rates
(price per room), gss_wages (log real income) and NYC flights (arrival delay, minutes). Large
tables are subsampled to 20,000 rows (diamonds from 53,940, gss_wages from 37,230, flights from
327,346; hotel_rates keeps its 15,402) to keep the run to a few minutes; each is split 60/20/20:
the base predictors are trained on 60% (cached on disk after the first run), the other 40% is
split in halves (seeded) into calibration and test rows.

Base predictors (paper 001 §6; one torch network architecture and budget for all, only outputs
and loss differ): point, interval (0.05/0.95 quantiles), quantile-2/4/7/10, Gaussian distribution,
and a 5-network deep ensemble of Gaussians. Each is recalibrated with linear, random and NAF
interpolation (NAF: 100 logistic units, ``--naf-epochs`` Adam steps); the distribution predictor
with both the ``z`` and the ``cdf`` score (Table 2), the others with their one score (the ensemble
sums its members' ``z`` scores; Table 3).

Columns: STD (mean predicted sd; N/A for random interpolation, whose CDF puts mass ``1/(n+1)`` at
±∞), 95% CI width, NLL (mean over test rows inside the support; ``inf%`` is the share outside it,
where linear interpolation's bounded support gives density 0; N/A for random), CRPS (``K``-level
quantile form, ``--crps-levels``), and the debiased PIT calibration error ×10⁴ (M = 100 levels),
whose expected value under exact calibration E0 is printed with each table. ``raw`` rows are the
uncalibrated Gaussian. The last table compares split conformal intervals at 90% (absolute
residual on the point predictor, normalised residual on the Gaussian, CQR on the interval) with
MCC's central 90% credible intervals of the same base predictors (paper 001 §5.1, Fig. 2).
Average ranks across datasets (values rounded to 3 significant digits, ties share a rank)
summarise Tables 2 and 3 as the paper does. About 1-5 minutes on 2 busy cores once the base
predictions are cached (the first run trains 12 networks per dataset, about a minute each).

Output: printed, and saved under ``benchmarks/results/``: ``mcc_table.csv`` (one row per
dataset, split and recalibrator) and ``mcc_table.txt`` (the printed tables).

Run: ``python benchmarks/mcc_table.py [--datasets ...] [--splits S] [--naf-epochs E] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import ndtr
from scipy.stats import rankdata

from calwatch.datasets.regression import REGRESSION_DATASETS, regression_pool
from calwatch.engine.conformal.regression import SplitConformalRegressor
from calwatch.engine.regression.calibrator import ModularConformalCalibrator
from calwatch.engine.regression.metrics import (
    evaluate_cdf,
    expected_pit_calibration_error,
    pit_calibration_error,
)

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "mcc_table.csv"
SEED = 20240612
INTERPOLATIONS = ("linear", "random", "naf")
TABLE3 = (
    "point",
    "interval",
    "quantile-2",
    "quantile-4",
    "quantile-7",
    "quantile-10",
    "ensemble",
    "distribution",
)
METRICS = ("std", "ci_width", "nll_finite", "crps", "ece_debiased")
LABELS = {"std": "STD", "ci_width": "95% CI", "nll_finite": "NLL", "crps": "CRPS", "ece_debiased": "ECE×1e4"}


@dataclass
class Row:
    dataset: str
    split: int
    predictor: str
    score: str
    interpolation: str
    std: float
    ci_width: float
    nll_finite: float
    nll_inf_share: float
    crps: float
    ece_debiased: float
    coverage90: float
    width90: float
    naf_epsilon: float
    seconds: float


def raw_gaussian(dataset: str, split: int, pred: np.ndarray, y: np.ndarray) -> Row:
    mu, sd = pred[:, 0], pred[:, 1]
    z = (y - mu) / sd
    nll = 0.5 * np.log(2 * np.pi) + np.log(sd) + 0.5 * z * z
    pdf = np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)
    crps = sd * (z * (2 * ndtr(z) - 1) + 2 * pdf - 1 / np.sqrt(np.pi))
    return Row(
        dataset, split, "distribution", "z", "raw", float(sd.mean()), float((2 * 1.959964 * sd).mean()),
        float(nll.mean()), 0.0, float(crps.mean()), pit_calibration_error(ndtr(z), debiased=True),
        float(np.mean(np.abs(z) <= 1.644854)), float((2 * 1.644854 * sd).mean()), math.nan, 0.0,
    )  # fmt: skip


def evaluate(
    dataset: str, split: int, pool: Any, predictor: str, score: str | None, interpolation: str,
    cal: np.ndarray, test: np.ndarray, args: argparse.Namespace,
) -> Row:  # fmt: skip
    start = time.perf_counter()
    mcc = ModularConformalCalibrator(
        score=score, interpolation=interpolation, naf_epochs=args.naf_epochs, progress=False, seed=split,
        **pool.calibrator_options(predictor),
    )  # fmt: skip
    F = mcc.fit(pool.take(predictor, cal), pool.y[cal]).predict(pool.take(predictor, test))
    m = evaluate_cdf(F, pool.y[test], crps_levels=args.crps_levels)
    return Row(
        dataset, split, predictor, score or "-", interpolation, m["std"], m["ci_width"], m["nll_finite"],
        m["nll_inf_share"], m["crps"], m["ece_debiased"], m["coverage"], m["width"],
        float(getattr(mcc.interpolation_, "epsilon_", math.nan)), time.perf_counter() - start,
    )  # fmt: skip


def fmt(value: float, key: str) -> str:
    if key == "ece_debiased":
        return f"{1e4 * value:8.2f}"
    if not math.isfinite(value):
        return f"{'N/A':>8}"
    return f"{value:8.4f}" if abs(value) < 100 else f"{value:8.1f}"


def mean_rows(rows: list[Row]) -> dict[str, float]:
    out = {}
    for key in (*METRICS, "nll_inf_share", "coverage90", "width90", "naf_epsilon", "seconds"):
        values = np.array([getattr(r, key) for r in rows], dtype=float)
        out[key] = (
            float(values.mean())
            if np.all(np.isfinite(values))
            else (math.inf if np.any(values == math.inf) else math.nan)
        )
    return out


def print_table(title: str, groups: dict[str, list[Row]], e0: float) -> None:
    print(f"\n{title}   (E0 = {1e4 * e0:.2f}e-4: the debiased error's mean under exact calibration)")
    header = (
        f"{'':<26}" + "".join(f"{LABELS[k]:>9}" for k in METRICS) + f"{'inf%':>7}{'cov90':>7}{'ε NAF':>8}"
    )
    print(header)
    print("-" * len(header))
    for label, rows in groups.items():
        m = mean_rows(rows)
        cells = "".join(" " + fmt(m[k], k) for k in METRICS)
        inf = f"{100 * m['nll_inf_share']:6.2f}" if math.isfinite(m["nll_inf_share"]) else f"{'N/A':>6}"
        eps = f"{m['naf_epsilon']:8.4f}" if math.isfinite(m["naf_epsilon"]) else f"{'':>8}"
        print(f"{label:<26}{cells} {inf}{m['coverage90']:7.3f}{eps}")


def ranks(table: dict[str, dict[str, dict[str, float]]], keys: list[str]) -> dict[str, dict[str, float]]:
    """Average rank (1 = best, lower value) of each row key per metric across datasets; N/A excluded."""
    out: dict[str, dict[str, list[float]]] = {k: {m: [] for m in METRICS} for k in keys}
    for per_key in table.values():
        for metric in METRICS:
            values = {k: per_key[k][metric] for k in keys if math.isfinite(per_key[k][metric])}
            if metric == "ece_debiased":
                values = {k: abs(v) for k, v in values.items()}
            # 3 significant digits: near-ties (random vs linear CRPS differ in the 5th) share a rank
            names = list(values)
            rounded = [float(f"{values[k]:.3g}") for k in names]
            for k, rank in zip(names, rankdata(rounded, method="average"), strict=True):
                out[k][metric].append(float(rank))
    return {k: {m: float(np.mean(v)) if v else math.nan for m, v in d.items()} for k, d in out.items()}


def print_ranks(title: str, avg: dict[str, dict[str, float]]) -> None:
    print(f"\n{title}")
    header = f"{'':<26}" + "".join(f"{LABELS[k]:>9}" for k in METRICS)
    print(header)
    print("-" * len(header))
    for label, d in avg.items():
        print(
            f"{label:<26}"
            + "".join(f"{d[k]:9.2f}" if math.isfinite(d[k]) else f"{'N/A':>9}" for k in METRICS)
        )


class Tee:
    """Write to the console and keep a copy (saved next to the CSV)."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.parts = stream, []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def main(argv: Sequence[str] | None = None) -> int:
    tee = Tee(sys.stdout)
    sys.stdout = tee
    try:
        return run(argv, tee)
    finally:
        sys.stdout = tee.stream


def run(argv: Sequence[str] | None, tee: Tee) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--datasets", nargs="+", default=list(REGRESSION_DATASETS), choices=REGRESSION_DATASETS
    )
    parser.add_argument(
        "--splits", type=int, default=1, help="calibration/test splits per dataset (default 1)"
    )
    parser.add_argument("--naf-epochs", type=int, default=1_000)
    parser.add_argument("--crps-levels", type=int, default=400)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    start_all = time.perf_counter()
    rows: list[Row] = []
    conformal: dict[str, dict[str, list[tuple[float, float]]]] = {}
    table2: dict[str, dict[str, dict[str, float]]] = {}
    table3: dict[str, dict[str, dict[str, float]]] = {}
    for dataset in args.datasets:
        t0 = time.perf_counter()
        pool = regression_pool(dataset, seed=0, max_rows=20_000, progress=False)
        load_seconds = time.perf_counter() - t0
        P = pool.y.shape[0]
        n_cal = P // 2
        rng = np.random.default_rng([SEED, REGRESSION_DATASETS.index(dataset)])
        ds_rows: list[Row] = []
        conformal[dataset] = {}
        for split in range(args.splits):
            order = rng.permutation(P)
            cal, test = np.sort(order[:n_cal]), np.sort(order[n_cal:])
            ds_rows.append(raw_gaussian(dataset, split, pool.take("distribution", test), pool.y[test]))
            for interpolation in INTERPOLATIONS:
                ds_rows.append(
                    evaluate(dataset, split, pool, "distribution", "cdf", interpolation, cal, test, args)
                )
                for predictor in TABLE3:
                    score = "z" if predictor in ("distribution", "ensemble") else None
                    ds_rows.append(
                        evaluate(dataset, split, pool, predictor, score, interpolation, cal, test, args)
                    )
            for name, predictor in (
                ("absolute", "point"),
                ("normalized", "distribution"),
                ("cqr", "interval"),
            ):
                c = SplitConformalRegressor(score=name, alpha=0.1).fit(pool.take(predictor, cal), pool.y[cal])
                lo, hi = c.predict_interval(pool.take(predictor, test)).T
                y = pool.y[test]
                conformal[dataset].setdefault(name, []).append(
                    (float(np.mean((lo <= y) & (y <= hi))), float(np.mean(hi - lo)))
                )
        rows += ds_rows
        e0 = expected_pit_calibration_error(n_cal, P - n_cal)

        def pick(predictor: str, score: str, interpolation: str, rows_: list[Row] = ds_rows) -> list[Row]:
            return [
                r
                for r in rows_
                if (r.predictor, r.score, r.interpolation) == (predictor, score, interpolation)
            ]

        print(
            f"\n{'=' * 30} {dataset}: {P:,} held-out rows → {n_cal:,} calibration / {P - n_cal:,} test, "
            f"{args.splits} split(s); base predictions {'trained' if load_seconds > 5 else 'from cache'} "
            f"({load_seconds:.0f} s) {'=' * 10}"
        )
        t2 = {}
        for score, name in (("z", "zscore"), ("cdf", "cdf")):
            for interpolation, iname in (("naf", "NAF"), ("linear", "linear"), ("random", "random")):
                t2[f"{name}-{iname}"] = pick("distribution", score, interpolation)
        t2["raw Gaussian (uncalibrated)"] = pick("distribution", "z", "raw")
        print_table("Table 2 (distribution predictor: score × interpolation)", t2, e0)
        table2[dataset] = {k: mean_rows(v) for k, v in t2.items() if not k.startswith("raw")}
        t3 = {}
        for predictor in TABLE3:
            score = "z" if predictor in ("distribution", "ensemble") else "-"
            for interpolation in INTERPOLATIONS:
                t3[f"{predictor} / {interpolation}"] = pick(predictor, score, interpolation)
        print_table("Table 3 (base predictor / interpolation)", t3, e0)
        table3[dataset] = {k: mean_rows(v) for k, v in t3.items()}
        print("\nConformal intervals vs MCC central credible intervals, 90% (coverage, mean width)")
        for name, predictor, score in (
            ("absolute", "point", "-"),
            ("normalized", "distribution", "z"),
            ("cqr", "interval", "-"),
        ):
            cov, width = np.mean(conformal[dataset][name], axis=0)
            mcc = {i: mean_rows(pick(predictor, score, i)) for i in INTERPOLATIONS}
            parts = "  ".join(
                f"MCC-{i} {mcc[i]['coverage90']:.3f} / {mcc[i]['width90']:.4g}" for i in INTERPOLATIONS
            )
            print(f"  {name + ' conformal':<22} {cov:.3f} / {width:.4g}   vs {predictor:<12} {parts}")
        print(f"  ({sum(r.seconds for r in ds_rows):.0f} s of recalibration and metrics for {dataset})")

    keys2 = list(next(iter(table2.values())))
    print_ranks(
        f"Average rank across {len(table2)} datasets, Table 2 (1 = best; |ECE|)", ranks(table2, keys2)
    )
    keys3 = list(next(iter(table3.values())))
    avg3 = ranks(table3, keys3)
    by_predictor = {
        p: {m: float(np.nanmean([avg3[f"{p} / {i}"][m] for i in INTERPOLATIONS])) for m in METRICS}
        for p in TABLE3
    }
    print_ranks(
        f"Average rank across {len(table3)} datasets and the 3 interpolations, Table 3 (1 = best)",
        by_predictor,
    )

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(asdict(rows[0])))
        writer.writeheader()
        for r in rows:
            writer.writerow(asdict(r))
    print(f"\nwrote {len(rows)} rows to {args.out}; total {time.perf_counter() - start_all:.0f} s")
    args.out.with_suffix(".txt").write_text("".join(tee.parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
