"""Venn-ADMIT on real data: paper 000's Tables 4-5 (selective classification) and Table 2 (KNN fit).

For each task and test set, one table per stratification:

- by true class ``y`` (the paper's layout): among the rows a method admits (a singleton set;
  for the Venn-ADMIT selective classifiers, an admitted prediction) with label ``y``, the share
  whose set contains ``y`` (``ȳ∈C``), and ``n/N``, those rows over all ``N`` test rows;
- by predicted class (what a user sees: the precision of what was admitted). This is the
  stratification Venn-ADMIT's calibration is conditional on (the Venn category fixes ``ŷ``).

Methods (paper 000 §5.1; ``calwatch.engine.venn_admit.baselines``): the KNN approximation's point
accuracy ``f_tr^KNN (Acc.)`` (every row "admitted", ``n/N`` = class share), Conf-base, RAPS-adapt,
RAPS-size, APS, Local-conf, ADMIT, Venn-ADMIT-w, Venn-ADMIT_qK-w, Venn-ADMIT, Venn-ADMIT_qK.
Table 2's analogue lists the model's and ``f_tr^KNN``'s accuracy on the calibration set and each
test set, and their agreement (share of rows with the same predicted class).

Data (``calwatch.datasets.embeddings``, cached on disk, seed 0):

- ``text``: Rotten Tomatoes snippets, a TF-IDF torch MLP (hidden layer = embedding, 64-d);
  reference 4,077 snippets, calibration 4,586, in-distribution test 1,529, shifted test = 102
  held-out movies (2,616 snippets). κ = 100: the 2,064-row ``D_ca^mc`` cannot give any band
  1,000 rows of one class (the paper allows κ = 100 for small sets, App. D).
- ``text-logistic``: the same snippets with TF-IDF + logistic regression and a 128-d SVD of the
  TF-IDF as the embedding (the weak-embedding contrast). κ = 100.
- ``flights``: NYC flights 2013, late arrival, a torch MLP (last hidden layer = embedding,
  64-d); reference 50,000 January-June flights, calibration 30,000, in-distribution test
  20,000, shifted test 20,000 October-December flights. κ = 1,000 (the paper's default) and
  κ = 100.

α = 0.1 (the paper's), K = 25, δ = 1, the calibration split 10% / 45% / 45%, the exact
localizer (``localizer_k=None``), 50 training epochs (the engine's default). Output: printed,
and written to ``benchmarks/results/venn_admit_table.txt`` (the same text) and ``.csv`` (one
row per task, test set, κ, stratification, method and class).

Run: ``python benchmarks/venn_admit_table.py [--quick] [--tasks text flights ...]``.
``--quick`` uses 10 training epochs and only κ = 100 for flights.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from _common import machine_line
from calwatch.datasets.embeddings import EmbeddingTask, flights_mlp_task, rotten_tomatoes_task
from calwatch.engine.venn_admit.admit import SPLIT_KNN, SPLIT_MC, SPLIT_VP, VennAdmit
from calwatch.engine.venn_admit.approximation import argmax_lowest
from calwatch.engine.venn_admit.baselines import METHODS, PAPER_NAMES, admitted_accuracy, compare_methods

ALPHA = 0.1
K = 25
SEED = 0
RESULTS = Path(__file__).resolve().parent / "results"
KNN_ROW = "f_tr^KNN (Acc.)"
TEST_LABELS = {"in-distribution": "in-distribution", "shifted": "shifted"}


@dataclass(frozen=True)
class TaskSpec:
    key: str
    title: str
    load: Callable[[], EmbeddingTask]
    kappas: tuple[int, ...]
    shift_name: str


def _specs(quick: bool) -> dict[str, TaskSpec]:
    return {
        "text": TaskSpec(
            "text", "Rotten Tomatoes, TF-IDF MLP", lambda: rotten_tomatoes_task(progress=False), (100,),
            "held-out movies",
        ),
        "text-logistic": TaskSpec(
            "text-logistic", "Rotten Tomatoes, TF-IDF logistic regression + SVD embedding",
            lambda: rotten_tomatoes_task(model="logistic"), (100,), "held-out movies",
        ),
        "flights": TaskSpec(
            "flights", "NYC flights 2013, MLP", lambda: flights_mlp_task(progress=False),
            (100,) if quick else (1000, 100), "October-December",
        ),
    }  # fmt: skip


def knn_accuracy_rows(y: np.ndarray, y_hat: np.ndarray, *, by: str, n_classes: int) -> list[dict[str, Any]]:
    """The ``f_tr^KNN (Acc.)`` row: every row counts as admitted with the singleton ``{ŷ^KNN}``."""
    group = y if by == "label" else y_hat
    rows = []
    for name in [*map(str, range(n_classes)), "all"]:
        chosen = np.ones(y.shape[0], dtype=bool) if name == "all" else group == int(name)
        n = int(chosen.sum())
        rows.append(
            {
                "method": "knn_accuracy",
                "name": KNN_ROW,
                "class": name,
                "accuracy": float(np.mean(y_hat[chosen] == y[chosen])) if n else math.nan,
                "share": n / y.shape[0],
                "n_admitted": n,
                "n": int(y.shape[0]),
            }
        )
    return rows


def format_block(frame: pl.DataFrame, classes: tuple[str, ...], *, by: str) -> str:
    """One table in the paper's layout: a row per method, ``ȳ∈C`` and ``n/N`` per class and pooled."""
    prefix = "y" if by == "label" else "ŷ"
    heads = [f"{prefix}={c}" for c in classes] + [f"{prefix}∈{{{', '.join(classes)}}}"]
    width = 17
    out = [f"{'':<18}" + "".join(f"{h:^{width}}" for h in heads)]
    out.append(f"{'Method':<18}" + "".join(f"{'ȳ∈C':>8} {'n/N':>7} " for _ in heads))
    for name in [KNN_ROW, *(PAPER_NAMES[m] for m in METHODS)]:
        part = frame.filter(pl.col("name") == name)
        cells = []
        for c in [*map(str, range(len(classes))), "all"]:
            row = part.filter(pl.col("class") == c).row(0, named=True)
            acc = "—" if math.isnan(row["accuracy"]) else f"{row['accuracy']:.2f}"
            cells.append(f"{acc:>8} {row['share']:>7.2f} ")
        out.append(f"{name:<18}" + "".join(cells))
    return "\n".join(out)


def run_task(spec: TaskSpec, *, epochs: int) -> tuple[str, list[dict[str, Any]]]:
    """Fit Venn-ADMIT per κ, compare every method on both test sets; the text and the CSV rows."""
    text = io.StringIO()
    records: list[dict[str, Any]] = []
    start = time.perf_counter()
    task = spec.load()
    load_s = time.perf_counter() - start
    with redirect_stdout(text):
        print(f"\n{'=' * 100}\n{spec.title} ({spec.key})\n{'=' * 100}")
        print(task.provenance)
        print(f"load (cached): {load_s:.1f} s; embedding dimension {task.dim}; classes {task.classes}")
        for kappa in spec.kappas:
            # the paper's admission rule (raw lower Venn probability), as its tables use; the
            # Clopper-Pearson default of issue 17 is docs/venn-admit.md
            va = VennAdmit(
                alpha=ALPHA, k=K, kappa=kappa, bound="venn", seed=SEED, epochs=epochs, progress=False
            )
            fit_s, _ = _timed(lambda va=va: va.fit(train=task.train, calibration=task.calibration))
            split = va.calibration_split_
            sizes = [int(np.sum(split == s)) for s in (SPLIT_KNN, SPLIT_MC, SPLIT_VP)]
            print(
                f"\n--- κ = {kappa}, α = {ALPHA}, K = {K}: |D_tr| = {task.train.n:,}, "
                f"D_knn / D_ca^mc / D_ca^vp = {sizes[0]:,} / {sizes[1]:,} / {sizes[2]:,}; "
                f"ω = {va.omega_:.4g}, η' = {va.localizer_eta_:.4g}; fit {fit_s:.1f} s"
            )
            print(_table2(task, va))
            for test_name, split_data in task.tests.items():
                label = test_name if test_name == "in-distribution" else f"shifted: {spec.shift_name}"
                predict_s, results = _timed(
                    lambda s=split_data, va=va: compare_methods(va, s.E, s.logits, seed=SEED)
                )
                y = split_data.y
                y_hat = results["admit"].prediction
                guarded = float(np.mean(results["admit"].sets.sum(axis=1) == len(task.classes)))
                for by in ("label", "prediction"):
                    frame = pl.concat(
                        [
                            pl.DataFrame(knn_accuracy_rows(y, y_hat, by=by, n_classes=len(task.classes))),
                            admitted_accuracy(results, y, by=by),
                        ],
                        how="vertical_relaxed",
                    )
                    heading = "by true class" if by == "label" else "by predicted class"
                    print(
                        f"\n{spec.key} {label} (N = {y.shape[0]:,}), κ = {kappa}: |C| = 1 {heading}"
                        + (
                            f"   [all methods {predict_s:.1f} s; ADMIT full sets {guarded:.2f}]"
                            if by == "label"
                            else ""
                        )
                    )
                    print(format_block(frame, task.classes, by=by))
                    records += [
                        {"task": spec.key, "test": test_name, "kappa": kappa, "by": by, **r}
                        for r in frame.iter_rows(named=True)
                    ]
                if not results["local_conf"].admitted.any():
                    print(_local_conf_note(va, split_data.E))
    return text.getvalue(), records


def _table2(task: EmbeddingTask, va: VennAdmit) -> str:
    """Paper Table 2: the model's and f_tr^KNN's accuracy, and their agreement, per split."""
    splits = {"D_ca": task.calibration, **task.tests}
    lines = [f"{'Table 2':<22}" + "".join(f"{name:>17}" for name in splits)]
    model, knn, agree = [], [], []
    for s in splits.values():
        y_knn = argmax_lowest(va.knn_logits(s.E))
        y_model = argmax_lowest(s.logits)
        model.append(float(np.mean(y_model == s.y)))
        knn.append(float(np.mean(y_knn == s.y)))
        agree.append(float(np.mean(y_knn == y_model)))
    for title, values in (("model accuracy", model), ("f_tr^KNN accuracy", knn), ("agreement", agree)):
        lines.append(f"{title:<22}" + "".join(f"{v:>17.3f}" for v in values))
    lines.append(
        f"(dev half of D_knn: agreement {va.agreement_:.3f}; "
        f"localizer agreement {va.localizer_agreement_:.3f}; D_ca includes the D_knn rows)"
    )
    return "\n".join(lines)


def _local_conf_note(va: VennAdmit, E: np.ndarray) -> str:
    """Why Local-conf admits nothing: the kernel mass of the calibration rows around a test row.

    Local-conf puts class ``c`` in the set unless the kernel mass of calibration scores below
    ``1 − π_c`` reaches ``(1 − α)(Σ_j K_j + 1)`` (the test row's own weight is ``K = 1``). With
    ``Σ_j K_j < (1 − α)/α`` that can never happen: every set is full.
    """
    rows = np.random.default_rng(SEED).choice(E.shape[0], size=min(1_000, E.shape[0]), replace=False)
    cal = va.calibration_embeddings_[va.calibration_split_ != SPLIT_KNN].astype(np.float64)
    Q = E[rows].astype(np.float64)
    sq = (Q**2).sum(axis=1)[:, None] + (cal**2).sum(axis=1)[None, :] - 2.0 * Q @ cal.T
    mass = np.exp(-np.sqrt(np.maximum(sq, 0.0)) / va.localizer_eta_).sum(axis=1)
    need = (1 - ALPHA) / ALPHA
    q10, q50, q90 = np.quantile(mass, [0.1, 0.5, 0.9])
    return (
        f"note: Local-conf admitted no row. Its kernel exp(-d/η') with η' = {va.localizer_eta_:.4g} puts a "
        f"mass Σ_j K_j of {q10:.3g} / {q50:.3g} / {q90:.3g} (10/50/90%, {rows.size} test rows) on the "
        f"calibration rows, against the test row's own weight 1; a singleton needs Σ_j K_j ≥ (1-α)/α = "
        f"{need:.0f} (reached by {np.mean(mass >= need):.1%} of rows)."
    )


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", nargs="+", default=["text", "text-logistic", "flights"])
    parser.add_argument("--quick", action="store_true", help="10 training epochs; flights only at κ = 100")
    parser.add_argument("--out", type=Path, default=RESULTS / "venn_admit_table.txt")
    args = parser.parse_args(argv)
    specs = _specs(args.quick)
    unknown = [t for t in args.tasks if t not in specs]
    if unknown:
        parser.error(f"unknown tasks {unknown}; known: {list(specs)}")
    header = (
        "Venn-ADMIT, paper 000 Tables 2, 4-5 on real data (α = 0.1, K = 25, δ = 1, seed 0)\n"
        + machine_line(os.getloadavg() if hasattr(os, "getloadavg") else None)
    )
    print(header, flush=True)
    chunks, records = [header], []
    for key in args.tasks:
        text, rows = run_task(specs[key], epochs=10 if args.quick else 50)
        print(text, flush=True)
        chunks.append(text)
        records += rows
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(chunks) + "\n")
    pl.DataFrame(records).write_csv(args.out.with_suffix(".csv"))
    print(f"\nwrote {args.out} and {args.out.with_suffix('.csv')} ({len(records)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
