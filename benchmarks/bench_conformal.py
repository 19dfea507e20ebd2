"""Split conformal classification speed: calwatch vs a plain numpy reference vs MAPIE 1.6.

For LAC, APS and RAPS, times ``fit`` on ``n_cal`` calibration rows plus ``predict_sets`` on
``n_test`` rows (defaults 20,000 / 200,000, K = 10), three ways in the same process:

1. calwatch's :class:`calwatch.engine.conformal.classifier.SplitConformalClassifier`;
2. the textbook vectorised numpy code, written below (its sets must equal calwatch's exactly);
3. MAPIE 1.6's ``mapie.classification.SplitConformalClassifier`` on a prefit identity model.

Probabilities are a softmax of Gaussian logits and labels are drawn from them, so the model
is calibrated. Each repeat runs the three implementations back to back (interleaved, so drift
hits them alike); the table reports medians. Targets: calwatch ≤ 1.2× numpy, and MAPIE ≥ 2×
slower than calwatch. A missed target prints FAIL but leaves the exit code 0; the exit code is
1 only when the run is broken (calwatch's sets differ from the numpy reference).

Run: ``python benchmarks/bench_conformal.py [--repeats R] [--n-cal N] [--n-test M]``.
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
from sklearn.base import BaseEstimator, ClassifierMixin

from _common import fmt_ms, machine_line, median, parse_size_args, size_parser, timed
from calwatch.engine._validation import validated_probabilities
from calwatch.engine.conformal.classifier import SplitConformalClassifier

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]

ALPHA = 0.1
RAPS_LAMBDA = 0.01
RAPS_K_REG = 1
LOGIT_SCALE = 2.0
TARGET_VS_NUMPY = 1.2  # calwatch time / numpy time must be at most this
TARGET_MAPIE_SLOWDOWN = 2.0  # MAPIE time / calwatch time must be at least this
SCORES = ("lac", "aps", "raps")


# --------------------------------------------------------------------------- data
def make_data(
    n_cal: int, n_test: int, n_classes: int, seed: int = 0
) -> tuple[FloatArray, IntArray, FloatArray, IntArray]:
    """Softmax of N(0, LOGIT_SCALE²) logits; labels sampled from the rows (calibrated model)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=LOGIT_SCALE, size=(n_cal + n_test, n_classes))
    logits -= logits.max(axis=1, keepdims=True)
    P = np.exp(logits)
    P /= P.sum(axis=1, keepdims=True)
    cdf = np.cumsum(P, axis=1)
    u = rng.uniform(size=(n_cal + n_test, 1)) * cdf[:, -1:]
    y = np.minimum((cdf < u).sum(axis=1), n_classes - 1).astype(np.intp)
    return P[:n_cal], y[:n_cal], P[n_cal:], y[n_cal:]


# ------------------------------------------------------------- numpy reference
def conformal_order_statistic(scores: FloatArray, alpha: float) -> float:
    """The ⌈(n+1)(1−α)⌉-th smallest score (the split-conformal quantile), +inf if out of range.

    Equivalent to ``np.quantile(scores, ⌈(n+1)(1−α)⌉/n, method="inverted_cdf")``. The often
    quoted ``method="higher"`` is *not* used: it indexes ``ceil(level·(n−1))`` and lands one
    order statistic too high for most n (n=20,000, α=0.1: the 18,002nd instead of the 18,001st).
    """
    n = scores.shape[0]
    k = math.ceil((n + 1) * (1 - alpha))
    if k > n:
        return math.inf
    return float(np.partition(scores, k - 1)[k - 1])


def numpy_reference(
    P_cal: FloatArray,
    y_cal: IntArray,
    P_test: FloatArray,
    score: str,
    alpha: float = ALPHA,
    raps_lambda: float = RAPS_LAMBDA,
    raps_k_reg: int = RAPS_K_REG,
) -> BoolArray:
    """Textbook vectorised split conformal (deterministic scores, ties by lower class index)."""
    n, K = P_cal.shape
    rows = np.arange(n)
    if score == "lac":
        q = conformal_order_statistic(1.0 - P_cal[rows, y_cal], alpha)
        sets = (1.0 - P_test) <= q
    else:
        reg = 0.0
        if score == "raps":
            reg = raps_lambda * np.maximum(0.0, np.arange(1, K + 1, dtype=np.float64) - raps_k_reg)
        # calibration: cumulative mass down to (and including) the true label
        order = np.argsort(-P_cal, axis=1, kind="stable")
        cum = np.cumsum(np.take_along_axis(P_cal, order, axis=1), axis=1) + reg
        rank_of_y = np.argmax(order == y_cal[:, None], axis=1)
        q = conformal_order_statistic(cum[rows, rank_of_y], alpha)
        # prediction: threshold in sorted space, scatter back to class order
        order = np.argsort(-P_test, axis=1, kind="stable")
        cum = np.cumsum(np.take_along_axis(P_test, order, axis=1), axis=1) + reg
        sets = np.empty(P_test.shape, dtype=bool)
        np.put_along_axis(sets, order, cum <= q, axis=1)
    sets[np.arange(P_test.shape[0]), P_test.argmax(axis=1)] = True
    return sets


# ------------------------------------------------------------------- calwatch
def calwatch_run(
    P_cal: FloatArray, y_cal: IntArray, P_test: FloatArray, score: str, tune: str | None = None
) -> BoolArray:
    """Fit calwatch on the calibration rows and predict the test sets."""
    clf = SplitConformalClassifier(
        score=score,  # type: ignore[arg-type]
        alpha=ALPHA,
        raps_lambda=RAPS_LAMBDA,
        raps_k_reg=RAPS_K_REG,
        tune=tune,  # type: ignore[arg-type]
        seed=0,
    )
    return clf.fit(P_cal, y_cal).predict_sets(P_test)


# ---------------------------------------------------------------------- MAPIE
class IdentityProbaClassifier(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
    """A prefit sklearn classifier whose ``predict_proba(X)`` is ``X`` itself."""

    def __init__(self, n_classes: int = 2) -> None:
        self.n_classes = n_classes

    def fit(self, X: Any = None, y: Any = None) -> IdentityProbaClassifier:
        self.classes_ = np.arange(self.n_classes)
        self.n_features_in_ = self.n_classes
        self.fitted_ = True
        return self

    def predict_proba(self, X: Any) -> FloatArray:
        return np.asarray(X, dtype=np.float64)

    def predict(self, X: Any) -> IntArray:
        return np.asarray(self.classes_[np.argmax(np.asarray(X), axis=1)])


MAPIE_NOTE = """\
MAPIE 1.6 notes (what differs from calwatch's deterministic sets; timings still compare the
same task: fit on the calibration rows, sets for every test row):
  * all: MAPIE gets X = the probability matrix through a prefit identity classifier and returns
    sets of shape (m, K, 1); it also computes point predictions via a LabelEncoder.
  * LAC: same order statistic; MAPIE compares with a 1e-8 tolerance and does not force the top
    class into the set (empty sets are possible).
  * APS: MAPIE always randomises the calibration scores (s − u·p_y, u ~ U(0,1), seeded by
    random_state=0) and has no option to turn that off; prediction uses
    include_last_label=False, the deterministic rule closest to calwatch's u = 1 scores
    (labels whose cumulative mass ≤ q̂, at least the top one). So its q̂ is lower and its
    sets smaller than calwatch's.
  * RAPS: as APS, plus MAPIE always tunes: it holds out a stratified share of the calibration
    rows (size_raps is reset to None inside fit, i.e. sklearn's default 10%), sets k_reg from
    the true-label ranks and grid-searches λ ∈ {0.001, 0.01, 0.1, 0.2, 0.5} for the smallest
    sets. calwatch's RAPS row uses fixed λ=0.01, k_reg=1; the 'raps+tune' row times
    calwatch's own tuning (tune='size': 20% held out, 6-value λ grid) against the same MAPIE
    run, an apples-to-apples comparison (info only, no numpy reference)."""


def mapie_run(P_cal: FloatArray, y_cal: IntArray, P_test: FloatArray, score: str) -> BoolArray:
    """MAPIE 1.6 split conformal on the identity model; returns the (m, K) boolean sets."""
    from mapie.classification import SplitConformalClassifier as MapieSplit

    params = {} if score == "lac" else {"include_last_label": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mapie = MapieSplit(
            estimator=IdentityProbaClassifier(P_cal.shape[1]).fit(),
            confidence_level=1.0 - ALPHA,
            conformity_score=score,
            prefit=True,
            random_state=0,
        )
        mapie.conformalize(P_cal, y_cal)
        _, sets = mapie.predict_set(P_test, conformity_score_params=params)
    return np.asarray(sets[:, :, 0], dtype=bool)


# -------------------------------------------------------------------- timing
@dataclass
class Row:
    """Timings (seconds, one per repeat) and checks for one score."""

    name: str
    calwatch: list[float] = field(default_factory=list)
    numpy: list[float] = field(default_factory=list)
    mapie: list[float] = field(default_factory=list)
    mismatches: int | None = None  # calwatch vs numpy cells that differ (None: not checked)
    mapie_agree: float = math.nan  # share of test rows where MAPIE's set equals calwatch's
    coverage: dict[str, float] = field(default_factory=dict)
    mean_size: dict[str, float] = field(default_factory=dict)


def _fmt_ratio(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:5.2f}×"


def run_benchmark(
    n_cal: int, n_test: int, n_classes: int, repeats: int, seed: int, with_mapie: bool
) -> list[Row]:
    """Time every implementation ``repeats`` times (plus one untimed warm-up) per score."""
    P_cal, y_cal, P_test, y_test = make_data(n_cal, n_test, n_classes, seed)
    test_rows = np.arange(n_test)
    # The monitor's path: each batch validated once at its boundary (untimed here), handed to the
    # calibrators as ValidatedProbs, which they take without checking again.
    V_cal, V_test = validated_probabilities(P_cal), validated_probabilities(P_test)
    cases: list[tuple[str, str, str | None, bool]] = [(s, s, None, False) for s in SCORES]
    cases += [("lac+vp", "lac", None, True), ("raps+tune", "raps", "size", False)]
    rows: list[Row] = []
    for name, score, tune, validated in cases:
        row = Row(name)
        cal, test = (V_cal, V_test) if validated else (P_cal, P_test)
        impls: dict[str, Callable[[], BoolArray]] = {
            "calwatch": partial(calwatch_run, cal, y_cal, test, score, tune),
        }
        if tune is None:
            impls["numpy"] = partial(numpy_reference, P_cal, y_cal, P_test, score)
        if with_mapie and not validated:
            impls["mapie"] = partial(mapie_run, P_cal, y_cal, P_test, score)
        warm = {key: fn() for key, fn in impls.items()}  # warm-up, and the sets to check
        if "numpy" in warm:
            row.mismatches = int(np.count_nonzero(warm["calwatch"] != warm["numpy"]))
        if "mapie" in warm:
            row.mapie_agree = float(np.mean(np.all(warm["mapie"] == warm["calwatch"], axis=1)))
        for key, sets in warm.items():
            row.coverage[key] = float(sets[test_rows, y_test].mean())
            row.mean_size[key] = float(sets.sum(axis=1).mean())
        del warm
        for _ in range(repeats):
            for key, fn in impls.items():
                seconds, _sets = timed(fn)
                getattr(row, key).append(seconds)
        rows.append(row)
    return rows


def print_report(rows: list[Row], args: argparse.Namespace) -> bool:
    """Print the tables; return True when every calwatch/numpy set comparison matched."""
    print(
        f"\nSplit conformal classification: fit on n_cal={args.n_cal:,} + predict_sets on "
        f"n_test={args.n_test:,}, K={args.n_classes}, α={ALPHA}; median of {args.repeats} "
        f"repeats (ms)"
    )
    print(machine_line(args.loadavg))
    header = (
        f"{'score':<10} {'calwatch':>9} {'numpy':>9} {'mapie':>9} {'cw/np':>7} "
        f"{'mapie/cw':>9} {'sets==np':>9}  {f'cw≤{TARGET_VS_NUMPY:g}×np':>10} {'mapie≥2×cw':>11}"
    )
    print(header)
    print("-" * len(header))
    all_equal = True
    for row in rows:
        cw, npy, mp = median(row.calwatch), median(row.numpy), median(row.mapie)
        cw_np = cw / npy if row.numpy else math.nan
        mp_cw = mp / cw if row.mapie else math.nan
        info_only = row.name.endswith("+tune")
        if row.mismatches is None:
            equal = "—"
        elif row.mismatches == 0:
            equal = "yes"
        else:
            equal = f"NO:{row.mismatches}"
            all_equal = False
        t1 = "—" if math.isnan(cw_np) else ("PASS" if cw_np <= TARGET_VS_NUMPY else "FAIL")
        t2 = "—" if math.isnan(mp_cw) else ("PASS" if mp_cw >= TARGET_MAPIE_SLOWDOWN else "FAIL")
        if info_only and t2 != "—":
            t2 = f"({t2})"
        print(
            f"{row.name:<10} {fmt_ms(cw):>9} {fmt_ms(npy):>9} {fmt_ms(mp):>9} "
            f"{_fmt_ratio(cw_np):>7} {_fmt_ratio(mp_cw):>9} {equal:>9}  {t1:>10} {t2:>11}"
        )
    print(
        "lac+vp: the probabilities handed over as ValidatedProbs (validated once, as the monitor "
        "does; the check is not timed), so calwatch does not check them again"
    )
    print("\nsets: coverage / mean size on the test rows (target coverage ≥ 0.90)")
    for row in rows:
        parts = [f"{key} {row.coverage[key]:.4f}/{row.mean_size[key]:.3f}" for key in row.coverage]
        agree = "" if math.isnan(row.mapie_agree) else f"  mapie≡calwatch rows {row.mapie_agree:.1%}"
        print(f"  {row.name:<10} " + "  ".join(parts) + agree)
    for row in rows:
        if row.mismatches:
            print(f"MISMATCH: {row.name}: {row.mismatches} cells differ between calwatch and numpy")
    if any(row.mapie for row in rows):
        print("\n" + MAPIE_NOTE)
    return all_equal


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the table; 0 unless calwatch's sets disagree with numpy."""
    parser = size_parser(__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-mapie", action="store_true", help="skip MAPIE")
    args = parse_size_args(parser, argv)
    with_mapie = not args.no_mapie
    if with_mapie:
        try:
            import mapie  # noqa: F401
        except ImportError:
            print("mapie is not installed (pip install mapie==1.6.0): skipping MAPIE")
            with_mapie = False
    rows = run_benchmark(args.n_cal, args.n_test, args.n_classes, args.repeats, args.seed, with_mapie)
    return 0 if print_report(rows, args) else 1


if __name__ == "__main__":
    sys.exit(main())
