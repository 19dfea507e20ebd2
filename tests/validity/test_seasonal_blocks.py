"""Seasonal streams: the block martingale keeps its false-alarm promise where rows are correlated.

Data: NYC flights 2013, April-December, each row scored by the late-arrival model of
``calwatch.datasets.flights_task(seed=0)`` (trained on January-March). Rows are in time order
within each day; a day is a block. Flights of one day share its weather, so rows are not
exchangeable even when the days are.

The null, built from real data: the 274 days are shuffled *as whole days* (seeded); 30 of them
are the calibration blocks and the rest form the stream, each day's rows in their own time
order. The block null holds exactly (days are exchangeable by construction), the row null does
not. Claims checked:

* the block martingale (Ville, c = 100) alarms in at most the binomial share its bound allows:
  ``P(any alarm) ≤ 0.01`` per stream, so over 20 streams at most 2 (P(≥ 3) ≈ 0.001 at 0.01);
* the row-level confidence martingale, run on the same streams, alarms in most of them (the
  problem the block option solves);
* power on a real failure: from the 61st stream day on, the feed stops filling ``dep_delay``
  (zeros), and the block martingale alarms within 40 days in at least 15 of 20 streams;
* through a whole ``Monitor`` with ``blocks=`` (weekly batches, days spanning batch
  boundaries), the block detector sees exactly the statistics of the detector fed day by day.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import pytest

import calwatch as cw
from calwatch.datasets import flights_task
from calwatch.datasets.tabular import _flight_inputs, load_flights
from calwatch.shift import BlockConfidenceMartingale, CalibrationData, ConfidenceMartingale

N_STREAMS = 20
N_CALIBRATION_DAYS = 30
SHIFT_DAY = 60


@dataclass
class ScoredDays:
    scores: np.ndarray  # 1 - max p per row, days in date order, rows in time order
    broken: np.ndarray  # the same rows scored with dep_delay = 0 (a feed that stopped filling it)
    starts: np.ndarray  # each day's first row
    ends: np.ndarray
    keys: list[str]  # each day's key, "2013-04-01"…
    probs: np.ndarray
    frame: pl.DataFrame


@pytest.fixture(scope="module")
def days() -> ScoredDays:
    task = flights_task(seed=0)
    frame = load_flights().filter(pl.col("month") >= 4).sort(["month", "day", "sched_dep_time"])
    X = _flight_inputs(frame)
    probs = task.model.predict_proba(X)
    broken_probs = task.model.predict_proba(X.with_columns(pl.lit(0.0).alias("dep_delay")))
    day = (frame["month"] * 100 + frame["day"]).to_numpy()
    starts = np.flatnonzero(np.concatenate([[True], day[1:] != day[:-1]]))
    ends = np.append(starts[1:], len(day))
    keys = [f"2013-{d // 100:02d}-{d % 100:02d}" for d in day[starts]]
    return ScoredDays(
        1.0 - probs.max(axis=1), 1.0 - broken_probs.max(axis=1), starts, ends, keys, probs, frame
    )


def _rows(days: ScoredDays, order: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, list[str]]:
    parts = [scores[days.starts[d] : days.ends[d]] for d in order]
    keys = [days.keys[d] for d in order for _ in range(days.ends[d] - days.starts[d])]
    return np.concatenate(parts), keys


def _probs(scores: np.ndarray) -> np.ndarray:
    """Binary probabilities with ``1 − max p`` = the score (the detectors read only that)."""
    return np.column_stack([1.0 - scores, scores])


def _data(scores: np.ndarray, keys: list[str] | None) -> CalibrationData:
    return CalibrationData(_probs(scores), np.zeros(len(scores), dtype=np.intp), {}, blocks=keys)


def _stream(days: ScoredDays, seed: int, *, broken_from: int | None = None) -> dict[str, Any]:
    order = np.random.default_rng(seed).permutation(len(days.keys))
    calibration, stream = order[:N_CALIBRATION_DAYS], order[N_CALIBRATION_DAYS:]
    cal_scores, cal_keys = _rows(days, calibration, days.scores)
    parts = []
    for j, d in enumerate(stream):
        source = days.broken if broken_from is not None and j >= broken_from else days.scores
        parts.append(source[days.starts[d] : days.ends[d]])
    scores = np.concatenate(parts)
    keys = [days.keys[d] for d in stream for _ in range(days.ends[d] - days.starts[d])]
    return {"cal": (cal_scores, cal_keys), "stream": (scores, keys), "days": stream}


def _block_alarm_days(stream: dict[str, Any], seed: int) -> list[int]:
    """Stream days (0-based) at which the block martingale alarms, fed in weekly-ish chunks."""
    detector = BlockConfidenceMartingale(seed=seed)
    detector.calibrate(_data(*stream["cal"]))
    scores, keys = stream["stream"]
    for lo in range(0, len(scores), 7_000):  # batches cut through days
        detector.observe(_probs(scores[lo : lo + 7_000]), None, keys[lo : lo + 7_000])
    detector.observe(_probs(np.zeros(1)), None, ["end"])  # closes the last day
    assert detector.martingale_ is not None
    return list(detector.martingale_.alarm_indices_)


def test_block_martingale_keeps_its_promise_where_the_row_martingale_cannot(days: ScoredDays) -> None:
    block_alarmed, row_alarmed = 0, 0
    for seed in range(N_STREAMS):
        stream = _stream(days, seed)
        block_alarmed += bool(_block_alarm_days(stream, seed))
        rows = ConfidenceMartingale(seed=seed)
        rows.calibrate(_data(stream["cal"][0], None))
        result = rows.observe(_probs(stream["stream"][0]))
        assert result is not None
        row_alarmed += bool(rows.martingale_ is not None and rows.martingale_.alarm_indices_)
    # P(any alarm) ≤ 1/c = 0.01 per stream: 3 or more of 20 has probability ≈ 0.001.
    assert block_alarmed <= 2, f"block martingale alarmed on {block_alarmed} of {N_STREAMS} null streams"
    # The same streams break the row null (days' weather): the row martingale alarms in most.
    assert row_alarmed >= N_STREAMS // 2, f"row martingale alarmed on only {row_alarmed} of {N_STREAMS}"


def test_block_martingale_finds_a_feed_that_stops_filling_a_feature(days: ScoredDays) -> None:
    delays = []
    for seed in range(N_STREAMS):
        stream = _stream(days, 100 + seed, broken_from=SHIFT_DAY)
        alarms = [a for a in _block_alarm_days(stream, seed) if a >= SHIFT_DAY]
        delays.append(alarms[0] - SHIFT_DAY if alarms else None)
    found = [d for d in delays if d is not None and d <= 40]
    assert len(found) >= 15, f"alarm delays (days after the break): {delays}"


def test_monitor_with_blocks_feeds_the_detector_exactly(days: ScoredDays) -> None:
    frame, probs = days.frame, days.probs
    april = (frame["month"] == 4).to_numpy()
    y = (frame["arr_delay"] > 15).to_numpy().astype(int)
    dates = [f"2013-{m:02d}-{d:02d}" for m, d in zip(frame["month"], frame["day"], strict=True)]
    mon = cw.Monitor(
        calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)}, name="flights by day"
    )
    cal_dates = [d for d, a in zip(dates, april, strict=True) if a]
    mon.calibrate(probs=probs[april], y=y[april], blocks=cal_dates)
    watch = mon.shift_watch
    assert watch is not None
    block_detector = watch.detectors[0]
    assert isinstance(block_detector, BlockConfidenceMartingale)
    stream = np.flatnonzero(~april)[:60_000]
    twin = BlockConfidenceMartingale()
    twin.calibrate(_data(1.0 - probs[april].max(axis=1), cal_dates))
    for lo in range(0, len(stream), 7_000):
        part = stream[lo : lo + 7_000]
        mon.observe(probs=probs[part], blocks=[dates[i] for i in part])
    # The twin is fed one whole day at a time.
    stream_dates = [dates[i] for i in stream]
    bounds = np.flatnonzero(
        np.concatenate([[True], np.array(stream_dates[1:]) != np.array(stream_dates[:-1])])
    )
    for lo, hi in zip(bounds, np.append(bounds[1:], len(stream)), strict=True):
        twin.observe(probs[stream[lo:hi]], None, stream_dates[lo:hi])
    a, b = block_detector.martingale_, twin.martingale_
    assert a is not None and b is not None
    assert a.n_seen_ == b.n_seen_ == len(bounds) - 1  # every day but the last, still open
    assert a.log10_martingale_ == pytest.approx(b.log10_martingale_, rel=1e-12, abs=1e-12)
    assert a.alarm_indices_ == b.alarm_indices_
    looks = mon.shift_watch.look_rows() if mon.shift_watch is not None else []
    assert any(r["detector"] == "confidence martingale (blocks)" for r in looks)
