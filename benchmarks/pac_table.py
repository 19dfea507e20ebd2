"""PAC confidence sets on real data: paper 003 Fig. 1(a), (c), (d) as a table.

For ε ∈ {0.01, 0.05, 0.1} and δ ∈ {1e-5, 1e-3, 0.05}, four variants (paper 003's ablation
names): ``C+D`` temperature scaling and the direct binomial bound (the paper's method), ``D``
the direct bound without temperature, ``C`` temperature with the VC bound, ``-`` neither. Each
row gives ``k*``, the threshold ``T̂``, the temperature ``T``, the error on held-out test rows,
and the mean, median and max set size (sets always contain the top class, ALGORITHMS.md §0).

Data (offline, ``calwatch.datasets``), one seeded split each, the same rows for every variant:

- ``diamonds``: 5-class ``cut``, a gradient-boosting model's probabilities on the 32,364
  diamonds it did not see; 4,000 rows fit the temperature, n = 16,000 calibrate, 12,364 test.
- ``flights``: late arrival (2 classes), the ``flights_task`` model's probabilities for April
  2013 (27,564 flights): 4,000 / 16,000 / 7,564.

Logits are the log-probabilities. n = 16,000 is what the default 20% temperature split leaves
of 20,000 rows (paper 003 used n = 20,000 on ImageNet). Output: printed, and a CSV under
``benchmarks/results/pac_table.csv``.

Run: ``python benchmarks/pac_table.py [--out PATH] [--no-flights]``.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from calwatch.engine.pac.sets import PACConfidenceSets, PACInfeasibleError, probabilities_to_logits

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

EPSILONS = (0.01, 0.05, 0.1)
DELTAS = (1e-5, 1e-3, 0.05)
VARIANTS = {  # paper 003's ablation labels: C = calibrated (temperature), D = direct bound
    "C+D": {"temperature": True, "bound": "binomial"},
    "D": {"temperature": False, "bound": "binomial"},
    "C": {"temperature": True, "bound": "vc"},
    "-": {"temperature": False, "bound": "vc"},
}
N_TEMPERATURE = 4_000
N_CAL = 16_000
SEED = 20240607
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "pac_table.csv"


@dataclass
class Row:
    dataset: str
    variant: str
    epsilon: float
    delta: float
    n: int
    k_star: int | None
    threshold: float
    temperature: float
    test_error: float
    mean_size: float
    median_size: float
    max_size: int | None
    note: str


@dataclass
class Task:
    name: str
    logits: FloatArray
    labels: IntArray


def diamonds() -> Task:
    from calwatch.datasets import diamonds_cut_task

    task = diamonds_cut_task(seed=0)
    return Task("diamonds", probabilities_to_logits(task.probs), task.labels)


def flights() -> Task:
    from calwatch.datasets import LATE, flights_task

    task = flights_task(seed=0)
    P = np.asarray(task.model.predict_proba(task.X_cal), dtype=np.float64)
    classes = [str(c) for c in task.model.classes_]
    y = np.array([classes.index(str(v)) for v in task.y_cal], dtype=np.intp)
    assert classes[0] == LATE
    return Task("flights", probabilities_to_logits(P), y)


def run_task(task: Task) -> list[Row]:
    rng = np.random.default_rng(SEED)
    order = rng.permutation(task.labels.shape[0])
    temp, cal, test = (
        order[:N_TEMPERATURE],
        order[N_TEMPERATURE : N_TEMPERATURE + N_CAL],
        order[N_TEMPERATURE + N_CAL :],
    )
    z, y = task.logits, task.labels
    rows: list[Row] = []
    for eps in EPSILONS:
        for delta in DELTAS:
            for variant, options in VARIANTS.items():
                pac = PACConfidenceSets(epsilon=eps, delta=delta, **options)  # type: ignore[arg-type]
                tdata = (z[temp], y[temp]) if options["temperature"] else None
                try:
                    pac.fit(z[cal], y[cal], temperature_data=tdata)
                except PACInfeasibleError as err:
                    rows.append(
                        Row(task.name, variant, eps, delta, N_CAL, None, math.nan, math.nan, math.nan,
                            math.nan, math.nan, None, f"infeasible: needs n ≥ {err.n_required:,}")
                    )  # fmt: skip
                    continue
                sets = pac.predict_sets(z[test])
                sizes = sets.sum(axis=1)
                error = float(np.mean(~sets[np.arange(test.shape[0]), y[test]]))
                rows.append(
                    Row(task.name, variant, eps, delta, pac.n_calibration_, pac.k_star_, pac.threshold_,
                        pac.temperature_, error, float(sizes.mean()), float(np.median(sizes)),
                        int(sizes.max()), "")
                )  # fmt: skip
    return rows


def print_table(rows: list[Row], task: Task) -> None:
    n_test = task.labels.shape[0] - N_TEMPERATURE - N_CAL
    K = task.logits.shape[1]
    print(f"\n{task.name}: K = {K}, n = {N_CAL:,} calibration rows, {n_test:,} test rows")
    print("cells: k* | test error | mean / median / max set size")
    header = f"{'ε':>5} {'δ':>6}  " + "  ".join(f"{v:^34}" for v in VARIANTS)
    print(header)
    print("-" * len(header))
    by_key = {(r.epsilon, r.delta, r.variant): r for r in rows if r.dataset == task.name}
    for eps in EPSILONS:
        for delta in DELTAS:
            cells = []
            for variant in VARIANTS:
                r = by_key[(eps, delta, variant)]
                if r.k_star is None:
                    cells.append(f"{r.note:^34}")
                else:
                    cells.append(
                        f"{r.k_star:>4} | {r.test_error:.4f} | "
                        f"{r.mean_size:5.3f} / {r.median_size:3.0f} / {r.max_size:>2}".ljust(34)
                    )
            print(f"{eps:>5} {delta:>6g}  " + "  ".join(cells))
    temps = {r.temperature for r in rows if r.dataset == task.name and r.variant == "C+D"}
    print(f"fitted temperature T (divisor of the logits): {', '.join(f'{t:.4f}' for t in temps)}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"CSV path (default {DEFAULT_OUT})")
    parser.add_argument("--no-flights", action="store_true", help="skip flights (trains a model, ~8 s)")
    args = parser.parse_args(argv)
    loaders = [diamonds] if args.no_flights else [diamonds, flights]
    rows: list[Row] = []
    for load in loaders:
        task = load()
        task_rows = run_task(task)
        rows += task_rows
        print_table(task_rows, task)
    bad = [r for r in rows if r.k_star is not None and r.variant in ("C+D", "D") and r.test_error > r.epsilon]
    for r in bad:
        m = {"diamonds": 12_364, "flights": 7_564}.get(r.dataset, 0)
        sd = math.sqrt(r.epsilon * (1 - r.epsilon) / m) if m else math.nan
        print(
            f"note: {r.dataset} {r.variant} ε={r.epsilon} δ={r.delta:g}: test error {r.test_error:.4f} > ε; "
            f"the test share has sd {sd:.4f} around the true error (≤ ε with probability ≥ 1 − δ)"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(asdict(rows[0])))
        writer.writeheader()
        for r in rows:
            writer.writerow(asdict(r))
    print(f"\nwrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
