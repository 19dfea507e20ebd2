"""Table batches' shift warnings: at most δ + δ_cal false alarms on exchangeable logs, and real shifts found.

Monte Carlo over four real tasks' model probabilities (``classification_pool``: diamonds cut,
Chem97 scores, late flights, CCES 2016 votes; gradient boosting), each pool shuffled so that
calibration and logged rows are exchangeable: the whole log (10 buckets, every label known) goes
through ``observe_table``, and any warning is a false alarm. The bound over every look of both
tests is δ + δ_cal = 0.02 per monitor. And the flights in date order (calibrated on April,
monthly buckets May–December, when the late share moves from 13% to 33%) must raise warnings.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import calwatch as cw
from calwatch.datasets import classification_pool, flights_task

TASKS = ("diamonds-cut", "chem97-score", "flights-late", "tv16-trump")
SEEDS = 25


def _log(P: np.ndarray, y: np.ndarray, buckets: np.ndarray) -> pl.DataFrame:
    columns = {"id": np.arange(P.shape[0]), "bucket": buckets, "y": y.astype(np.int64)}
    columns |= {f"p{k}": P[:, k] for k in range(P.shape[1])}
    return pl.DataFrame(columns)


def _monitor(K: int) -> cw.Monitor:
    return cw.Monitor(
        calibrators={
            "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
            "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1),
        },
        classes=np.arange(K), row_log=False,
    )  # fmt: skip


def test_exchangeable_logs_raise_at_most_the_promised_false_alarms() -> None:
    alarmed = runs = looks = 0
    for task in TASKS:
        pool = classification_pool(task, "gradient-boosting", seed=0)
        K = pool.probs.shape[1]
        for seed in range(SEEDS):
            order = np.random.default_rng(seed).permutation(pool.probs.shape[0])
            cal, logged = order[:2_000], order[2_000:12_000]
            mon = _monitor(K)
            mon.calibrate(probs=pool.probs[cal], y=pool.labels[cal])
            log = _log(pool.probs[logged], pool.labels[logged], np.repeat(np.arange(10), 1_000))
            mon.observe_table(log, id="id", probs=[f"p{k}" for k in range(K)], bucket="bucket", label="y")
            assert mon.shift_watch is not None
            looks += len(
                [
                    1
                    for look in mon.shift_watch.look_rows()
                    if look["detector"].startswith(("bucket", "lac:", "aps:"))
                ]
            )
            runs += 1
            alarmed += mon.warnings().height > 0
    assert looks == runs * 30  # every bucket looked at three times: confidence, lac, aps
    # δ + δ_cal = 0.02 per monitor: over 100 monitors P(more than 6 alarmed) < 0.005 even at the bound
    assert alarmed <= 6, f"{alarmed} of {runs} exchangeable logs raised a warning"


@pytest.fixture(scope="module")
def flights_in_date_order() -> tuple[cw.Monitor, pl.DataFrame]:
    task = flights_task(seed=0)
    mon = cw.Monitor(task.model, calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)})
    mon.calibrate(task.X_cal, task.y_cal)
    frames = []
    for month, batch in enumerate(task.stream, start=5):
        P = task.model.predict_proba(batch.X)
        frames.append(pl.DataFrame({
            "id": batch.ids, "month": np.full(len(batch.ids), month), "late": P[:, 0], "on_time": P[:, 1],
            "y": batch.y,
        }))  # fmt: skip
    return mon, pl.concat(frames)


def test_the_flights_shift_is_found_in_date_order(
    flights_in_date_order: tuple[cw.Monitor, pl.DataFrame],
) -> None:
    mon, log = flights_in_date_order
    mon.observe_table(log.drop("y"), id="id", probs=["late", "on_time"], bucket="month")
    label_free = mon.warnings()
    mon.label_table(log.select("id", "y"), id="id", label="y")
    warnings = mon.warnings()
    names = set(warnings["name"].to_list())
    assert "lac: bucket coverage" in names, warnings.select("name", "explanation")
    assert label_free.height >= 1 and label_free["name"].to_list()[0] == "bucket confidence vs calibration"
    coverage = mon.summary().select("name", "n_covered", "n_labelled")
    assert coverage.height == 8
