"""Monte Carlo validity of the fix in one step: ``Monitor.slice_calibrator`` on two real tasks.

What is checked is the path a user takes: a monitor calibrated with its slice columns
(``calibrate(meta=)``, the encoding fixed from the calibration rows: quantile bins for numbers,
kept values for text), then ``mon.slice_calibrator(column)`` (split conformal by slice, Mondrian
on the column's codes) and ``mon.slice_calibrator([a, b])`` (group-conditional over one group per
value of each column), both fitted on the monitor's kept calibration rows. On the test rows each
calibrator's groups come from the same encoding (:mod:`calwatch.stream.slice_groups`), as they
do when a monitor streams with it.

Tasks (real data, the family fixed before any split, no column is the label):

- *diamonds*: ggplot2 diamonds, a gradient-boosting model's probabilities of ``cut`` (5 classes)
  on the 32,364 diamonds it was not trained on (``diamonds_cut_task(seed=0)``); slices by
  ``color`` (7 values: the Mondrian fix) and ``clarity`` (8 values; with color, the family).
- *flights*: NYC flights 2013, May to August, scored by ``flights_task(seed=0)``'s late-arrival
  model (trained on January-March), 40,000 flights drawn once; slices by ``hour`` (scheduled
  departure hour, cut at 9, 13, 17 and 20 as the user's ``slice_bins``, so a bin is the same in
  every split: the Mondrian fix) and ``carrier`` (its values, "other" and "missing"; with hour,
  the family).

Repetitions: R random splits of the pool (``numpy.random.default_rng(SEED)``) into N_CAL
calibration rows and the rest as test rows, α = 0.1, LAC. The guarantee ``P(Y ∈ C(X) | X ∈ g) ≥ 1 − α``
is checked for every group ``g`` with at least MIN_CAL calibration rows on average: the mean over
splits of the coverage among the test rows of ``g`` must be ``≥ 1 − α − Z·se_g``, with
``se_g = sqrt(α(1−α)·(1/(n̄_g+2) + 1/m̄_g) / R)`` (the bound of
``test_group_conditional_validity.py``: the split conformal Beta law plus the binomial error of
the test rows). Z is Bonferroni over every check at a 1% family error. The marginal calibrator
must fail that same check for some group of each task (so the check can tell them apart), and
the fix's mean set size must stay within 15% of the marginal one's (no passing by full sets).

Groups are matched across splits by their words and checked when present in every split.
Measured with this file's settings (about 9 s on 2 shared CPUs), mean coverage over the splits:

- diamonds, Mondrian by color: lowest color H 0.898 (within its tolerance), where marginal LAC
  leaves color I at 0.882; mean set size 1.365 against 1.354. The family color + clarity (15
  groups): lowest clarity VVS1 0.903, sets 1.397.
- flights, Mondrian by hour: the evening bin ``17 ≤ hour < 20`` at 0.899, where marginal LAC
  gives it 0.864; sets 1.036 against 1.010. The family hour + carrier (20 groups): lowest
  ``17 ≤ hour < 20`` 0.901, sets 1.050.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt
import polars as pl
import pytest

import calwatch as cw
from calwatch.datasets import diamonds_cut_task, flights_task, load_flights
from calwatch.datasets.cache import rdataset
from calwatch.stream.slice_groups import family_of, family_words

pytestmark = pytest.mark.slow

SEED = 20261129
ALPHA = 0.1
R = 60
N_CAL = 5_000
MIN_CAL = 50
FLIGHTS_POOL = 40_000
MAX_SIZE_RATIO = 1.15


@dataclass(frozen=True)
class Pool:
    name: str
    probs: npt.NDArray[np.float64]
    labels: npt.NDArray[np.intp]
    meta: pl.DataFrame
    mondrian: str
    family: tuple[str, str]


@dataclass
class Result:
    names: list[str]
    coverage: npt.NDArray[np.float64]  # (R, G)
    n_cal: npt.NDArray[np.float64]
    n_test: npt.NDArray[np.float64]
    size: npt.NDArray[np.float64]  # (R,)

    def shortfall(self, z: float) -> tuple[float, str]:
        """The largest ``1 − α − Z·se_g − mean_g`` over groups with enough calibration rows, and its group."""
        n_bar, m_bar = self.n_cal.mean(axis=0), self.n_test.mean(axis=0)
        se = np.sqrt(ALPHA * (1 - ALPHA) * (1 / (n_bar + 2) + 1 / np.maximum(m_bar, 1)) / R)
        gap = (1 - ALPHA) - z * se - self.coverage.mean(axis=0)
        gap[n_bar < MIN_CAL] = -math.inf
        worst = int(np.argmax(gap))
        return float(gap[worst]), f"{self.names[worst]}: {self.coverage.mean(axis=0)[worst]:.4f}"


def _diamonds() -> Pool:
    task = diamonds_cut_task(seed=0)
    raw = rdataset("ggplot2", "diamonds")
    features = raw.iloc[task.rows - 1][["color", "clarity"]].reset_index(drop=True)
    meta = pl.from_pandas(features).with_columns(pl.col("color", "clarity").cast(pl.String))
    return Pool("diamonds", task.probs, task.labels, meta, "color", ("color", "clarity"))


def _flights() -> Pool:
    task = flights_task(seed=0)
    frame = load_flights().filter(pl.col("month").is_between(5, 8))
    frame = frame.sample(FLIGHTS_POOL, seed=SEED)
    probs = np.asarray(task.model.predict_proba(frame.select(task.features)), dtype=np.float64)
    labels = np.where(frame["late"].to_numpy(), 0, 1).astype(np.intp)  # classes ["late", "on time"]
    meta = frame.select(pl.col("hour").cast(pl.Float64), "carrier")
    return Pool("flights", probs, labels, meta, "hour", ("hour", "carrier"))


#: Fixed cut points (user bins), so a group means the same rows in every split.
BINS = {"hour": [9, 13, 17, 20]}


@pytest.fixture(scope="module", params=["diamonds", "flights"])
def results(request: pytest.FixtureRequest) -> tuple[Pool, dict[str, Result]]:
    pool = _diamonds() if request.param == "diamonds" else _flights()
    rng = np.random.default_rng(SEED)
    # method -> group name -> per-split (coverage, calibration rows, test rows); sizes per split
    per_group: dict[str, dict[str, list[tuple[float, float, float]]]] = {}
    sizes: dict[str, list[float]] = {}
    own: set[str] = set()
    for _ in range(R):
        order = rng.permutation(pool.labels.shape[0])
        cal, test = order[:N_CAL], order[N_CAL:]
        mon = cw.Monitor(
            calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=ALPHA)},
            shift=None,
            row_log=False,
        )
        bins = {k: v for k, v in BINS.items() if k in pool.meta.columns}
        mon.calibrate(probs=pool.probs[cal], y=pool.labels[cal], meta=pool.meta[cal], slice_bins=bins or None)
        encoding = mon._slices.encoding  # type: ignore[union-attr]
        by_value = mon.slice_calibrator(pool.mondrian)
        by_family = mon.slice_calibrator(list(pool.family))
        assert isinstance(by_value, cw.SplitConformalClassifier)
        assert isinstance(by_family, cw.GroupConditionalConformal)
        cal_codes = encoding.codes(pool.meta[cal], cal.shape[0])
        codes = encoding.codes(pool.meta[test], test.shape[0])
        # Every group of the family: each value of each column (the Mondrian's values among them).
        member = family_of(encoding, codes, pool.family)
        names = family_words(encoding, pool.family)
        own |= set(family_words(encoding, [pool.mondrian]))
        n_cal = family_of(encoding, cal_codes, pool.family).sum(axis=0)
        m_g = member.sum(axis=0)
        categories = codes[:, list(encoding.names).index(pool.mondrian)].astype(np.int64)
        sets = {
            "marginal": mon.calibrators["lac"].predict_sets(pool.probs[test]),  # type: ignore[union-attr]
            "mondrian": by_value.predict_sets(pool.probs[test], categories=categories),
            "family": by_family.predict_sets(pool.probs[test], member),
        }
        for method, s in sets.items():
            covered = s[np.arange(test.shape[0]), pool.labels[test]]
            hits = (covered[:, None] & member).sum(axis=0)
            groups = per_group.setdefault(method, {})
            for g, name in enumerate(names):
                if m_g[g]:
                    groups.setdefault(name, []).append((hits[g] / m_g[g], float(n_cal[g]), float(m_g[g])))
            sizes.setdefault(method, []).append(float(s.sum(axis=1).mean()))
    out: dict[str, Result] = {}
    for method, groups in per_group.items():
        kept = [name for name, runs in groups.items() if len(runs) == R]  # groups present in every split
        for suffix, chosen in (("", kept), ("-column", [n for n in kept if n in own])):
            values = np.asarray([groups[n] for n in chosen], dtype=np.float64)  # (G, R, 3)
            out[method + suffix] = Result(
                chosen, values[:, :, 0].T, values[:, :, 1].T, values[:, :, 2].T, np.asarray(sizes[method])
            )
    return pool, out


def _z(n_checks: int) -> float:
    return NormalDist().inv_cdf(1 - 0.01 / n_checks)


def test_each_value_keeps_the_promise_with_the_monitors_mondrian_fix(
    results: tuple[Pool, dict[str, Result]],
) -> None:
    pool, out = results
    run = out["mondrian-column"]
    gap, where = run.shortfall(_z(4 * run.coverage.shape[1]))
    assert gap <= 0, f"{pool.name}, Mondrian by {pool.mondrian}: {where} ({gap:.4f} past the tolerance)"


def test_each_group_keeps_the_promise_with_the_monitors_group_conditional_fix(
    results: tuple[Pool, dict[str, Result]],
) -> None:
    pool, out = results
    run = out["family"]
    gap, where = run.shortfall(_z(4 * run.coverage.shape[1]))
    assert gap <= 0, f"{pool.name}, groups of {pool.family}: {where} ({gap:.4f} past the tolerance)"


def test_the_marginal_calibrator_fails_the_same_check(results: tuple[Pool, dict[str, Result]]) -> None:
    pool, out = results
    run = out["marginal-column"]
    gap, where = run.shortfall(_z(4 * run.coverage.shape[1]))
    assert gap > 0, f"{pool.name}: marginal LAC passes within every value of {pool.mondrian} ({where})"


def test_the_fix_does_not_pass_by_full_sets(results: tuple[Pool, dict[str, Result]]) -> None:
    pool, out = results
    marginal = out["marginal"].size.mean()
    for method in ("mondrian", "family"):
        ratio = out[method].size.mean() / marginal
        assert ratio <= MAX_SIZE_RATIO, f"{pool.name}, {method}: sets {ratio:.3f}× the marginal ones"
