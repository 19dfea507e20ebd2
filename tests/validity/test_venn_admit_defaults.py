"""Monte Carlo check of Venn-ADMIT's defaults on four real tasks (issue 17; docs/venn-admit.md).

The defaults: ``kappa="auto"`` (what ``D_ca^mc`` supports, :func:`auto_kappa`), admission on a
Clopper-Pearson lower bound of the Venn category's frequency of ``ŷ`` at level ``δ/m``
(``bound="clopper-pearson"``, ``δ = 0.1``), weighted (Alg. 3). Four tasks, four embeddings
(``calwatch.datasets``; the first two are new to the Venn-ADMIT tests):

- ``digits``: the MNIST CNN's 256-d penultimate layer, 10 classes; per seed the 3,000 pooled
  calibration and in-domain test digits re-dealt 2,000 / 1,000 (seeds 0-5).
- ``text-svd``: Rotten Tomatoes with TF-IDF + logistic regression and a 128-d SVD (LSA) of the
  TF-IDF as the embedding (KNN agreement with the model ≈ 0.79: the weak-embedding case),
  re-dealt 4,000 / 2,115 (seeds 0-2).
- ``text-mlp``: Rotten Tomatoes, the TF-IDF torch MLP's 64-d hidden layer, re-dealt 4,000 /
  2,115 (seeds 0-3).
- ``flights``: NYC flights, the torch MLP's 64-d last hidden layer, 20,000 reference flights,
  re-dealt 10,000 / 10,000 (seeds 0-1).

Each seed fits Venn-ADMIT once (``seed=seed``, 10 epochs); the old default (κ = 1,000, the
paper's raw ``p̲ ≥ 1 − α``) and the issue author's κ = 100 run (raw ``p̲``, unweighted) are
the same fit rebuilt by ``from_state`` with those options (no retraining).

Checked:

- Per predicted class, pooled over seeds, for the default weighted and unweighted rules: the
  admitted accuracy is not significantly below ``1 − α``: with ``k`` right of ``n`` admitted,
  the one-sided 99.9% Clopper-Pearson upper bound of the accuracy is ``≥ 1 − α`` (a
  tolerance that shrinks with the admitted count: about ``3.1·sqrt(α(1−α)/n)`` for large
  ``n``). The rule promises more (each admitted category's frequency ``≥ 1 − α``, jointly
  with probability ``≥ 1 − δ``), so pooled accuracy is expected well above ``1 − α``.
- Power where the data support it: on ``digits`` and ``flights`` the old default admits
  nothing and the new one admits ≥ 5% of rows.
- Where the data do not (``text-svd``), the default admits < 1% and its diagnostics say why.

The report (``pytest -s``) gives per task: admitted share, accuracy per predicted class with
its 95% interval, the worst admitted category (seed, q, ŷ) and the old/κ = 100 rules.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from calwatch.engine.metrics.intervals import clopper_pearson
from calwatch.engine.venn_admit.admit import VennAdmit

pytestmark = pytest.mark.slow

ALPHA = 0.1
EPOCHS = 10
#: One-sided level of the "not significantly below 1 − α" check.
CHECK_LEVEL = 0.001
RULES = ("default", "default-w", "kappa1000-venn", "kappa100-venn-w")


def _tasks() -> dict[str, tuple[Any, range, dict[str, int]]]:
    from calwatch.datasets.digits import digits_task
    from calwatch.datasets.embeddings import flights_mlp_task, rotten_tomatoes_task

    return {
        "digits": (digits_task(), range(6), {}),
        "text-svd": (
            rotten_tomatoes_task(model="logistic", progress=False), range(3),
            {"n_calibration": 4_000, "n_test": 2_115},
        ),
        "text-mlp": (
            rotten_tomatoes_task(progress=False), range(4), {"n_calibration": 4_000, "n_test": 2_115},
        ),
        "flights": (
            flights_mlp_task(progress=False), range(2),
            {"n_calibration": 10_000, "n_test": 10_000, "n_reference": 20_000},
        ),
    }  # fmt: skip


@dataclass
class Pool:
    """Admitted rows pooled over seeds for one rule: per predicted class, and per category."""

    C: int
    n_rows: int = 0
    admitted: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    correct: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    categories: dict[tuple[int, int, int], list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.admitted = np.zeros(self.C, dtype=np.int64)
        self.correct = np.zeros(self.C, dtype=np.int64)

    def add(self, seed: int, res: Any, y: np.ndarray) -> None:
        a = res.admitted
        right = res.y_hat == y
        self.n_rows += int(a.shape[0])
        self.admitted += np.bincount(res.y_hat[a], minlength=self.C)
        self.correct += np.bincount(res.y_hat[a & right], minlength=self.C)
        for q, c, ok in zip(res.q[a].tolist(), res.y_hat[a].tolist(), right[a].tolist(), strict=True):
            cell = self.categories.setdefault((seed, q, c), [0, 0])
            cell[0] += 1
            cell[1] += int(ok)

    def share(self) -> float:
        return float(self.admitted.sum()) / max(self.n_rows, 1)

    def worst(self) -> str:
        if not self.categories:
            return "-"
        (seed, q, c), (n, k) = min(self.categories.items(), key=lambda kv: (kv[1][1] / kv[1][0], -kv[1][0]))
        return f"seed {seed} q={q} ŷ={c}: {k}/{n} = {k / n:.3f}"


@dataclass
class TaskRun:
    name: str
    classes: tuple[str, ...]
    pools: dict[str, Pool]
    kappa: list[int] = field(default_factory=list)
    agreement: list[float] = field(default_factory=list)
    explanation: str = ""
    seconds: float = 0.0


def _run(name: str, base: Any, seeds: range, sizes: dict[str, int]) -> TaskRun:
    start = time.perf_counter()
    C = len(base.classes)
    run = TaskRun(name, tuple(base.classes), {rule: Pool(C) for rule in RULES})
    for seed in seeds:
        task = base.resplit(seed, **sizes)
        test = task.tests["in-distribution"]
        va = VennAdmit(alpha=ALPHA, seed=seed, epochs=EPOCHS, progress=False)
        va.fit(train=task.train, calibration=task.calibration)
        run.kappa.append(va.kappa_)
        run.agreement.append(va.agreement_)
        new = va.predict_variants(test.E, test.logits)
        run.pools["default"].add(seed, new[(True, False)], test.y)
        run.pools["default-w"].add(seed, new[(False, False)], test.y)
        state = va.state()
        for rule, options in (
            ("kappa1000-venn", {"kappa": 1000, "bound": "venn"}),
            ("kappa100-venn-w", {"kappa": 100, "bound": "venn", "weighted": False}),
        ):
            old = VennAdmit.from_state({**state, "options": {**va.options(), **options}})
            run.pools[rule].add(seed, old.predict_arrays(test.E, test.logits), test.y)
        run.explanation = va.explain_rejections()
    run.seconds = time.perf_counter() - start
    return run


def _report(run: TaskRun) -> str:
    lines = [
        f"{run.name}: κ = {sorted(set(run.kappa))}, KNN agreement {np.mean(run.agreement):.3f}, "
        f"{run.seconds:.0f} s"
    ]
    for rule, pool in run.pools.items():
        lo, hi = clopper_pearson(pool.correct, pool.admitted)
        cells = ", ".join(
            f"{c}: {k / n:.3f} [{lo[i]:.3f}, {hi[i]:.3f}] n={n}" if n else f"{c}: - n=0"
            for i, (c, n, k) in enumerate(
                zip(run.classes, pool.admitted.tolist(), pool.correct.tolist(), strict=True)
            )
        )
        lines.append(
            f"  {rule:<16} admitted {pool.share():.2%}; by ŷ: {cells}; worst category {pool.worst()}"
        )
    lines.append(f"  why: {run.explanation}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def runs() -> dict[str, TaskRun]:
    out = {name: _run(name, base, seeds, sizes) for name, (base, seeds, sizes) in _tasks().items()}
    for run in out.values():
        print(_report(run))  # shown with pytest -s
    return out


@pytest.mark.parametrize("rule", ["default", "default-w"])
@pytest.mark.parametrize("name", ["digits", "text-svd", "text-mlp", "flights"])
def test_admitted_accuracy_per_predicted_class(runs: dict[str, TaskRun], name: str, rule: str) -> None:
    run = runs[name]
    pool = run.pools[rule]
    # one-sided upper Clopper-Pearson bound at 1 − CHECK_LEVEL (two-sided interval of 1 − 2·level)
    _, upper = clopper_pearson(pool.correct, pool.admitted, confidence=1 - 2 * CHECK_LEVEL)
    for c, n, k, up in zip(
        run.classes, pool.admitted.tolist(), pool.correct.tolist(), upper.tolist(), strict=True
    ):
        if n == 0:
            continue
        assert up >= 1 - ALPHA, (
            f"{name} {rule} ŷ={c}: {k}/{n} right, upper bound {up:.4f} < {1 - ALPHA}\n" + _report(run)
        )


@pytest.mark.parametrize("name", ["digits", "flights"])
def test_the_default_admits_where_the_old_one_admitted_nothing(runs: dict[str, TaskRun], name: str) -> None:
    run = runs[name]
    assert run.pools["kappa1000-venn"].share() == 0.0, _report(run)
    assert run.pools["default"].share() >= 0.05, _report(run)


def test_a_weak_embedding_admits_nothing_and_says_why(runs: dict[str, TaskRun]) -> None:
    run = runs["text-svd"]
    assert run.pools["default"].share() < 0.01, _report(run)
    assert "KNN agreement with the model 0.7" in run.explanation and "Try an embedding" in run.explanation


def test_the_check_has_power(runs: dict[str, TaskRun]) -> None:
    # The same check on the κ = 100 raw-p̲ rule over the pooled small categories is not
    # guaranteed to fail, so power is shown on ŷ^KNN without selection instead: on text-mlp its
    # precision per predicted class (≈ 0.72-0.79 over ~8,000 rows) fails the check.
    run = runs["text-mlp"]
    assert math.isfinite(run.seconds)
    unselected = _unselected_precision(run)
    _, upper = clopper_pearson(unselected[1], unselected[0], confidence=1 - 2 * CHECK_LEVEL)
    assert (upper < 1 - ALPHA).any(), unselected


def _unselected_precision(run: TaskRun) -> tuple[np.ndarray, np.ndarray]:
    from calwatch.datasets.embeddings import rotten_tomatoes_task

    base = rotten_tomatoes_task(progress=False)
    n = np.zeros(2, dtype=np.int64)
    k = np.zeros(2, dtype=np.int64)
    for seed in range(4):
        test = base.resplit(seed, n_calibration=4_000, n_test=2_115).tests["in-distribution"]
        y_hat = np.argmax(test.logits, axis=1)
        n += np.bincount(y_hat, minlength=2)
        k += np.bincount(y_hat[y_hat == test.y], minlength=2)
    return n, k
