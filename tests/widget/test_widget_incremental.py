"""The widget's incremental updates add up to a from-scratch rebuild.

A live widget computes, per notification, only the rows of the buckets the call touched
(:mod:`calwatch.views.live`: running merges per bucket, rows built without data frames) and sends only
the rows that changed (tombstones for keys that went away). These tests drive a monitor through
random sequences of calls (batches with and without labels, late labels, relabels of earlier
batches, unknown ids, ties in confidence, notes, re-tuning, recalibration, brushing, the window
controls) while batches leave a small window and the display resolution doubles, and check after
every call that

- the rows a view holds (every upsert applied in order, as ``js/stream.ts`` does) equal a
  from-scratch rebuild with polars (:func:`calwatch.widget.view_datasets`,
  :func:`calwatch.views.dashboard.timeline`) at the widget's resolutions, value for value;
- a new view's replay holds the same rows;
- the window panels equal :func:`calwatch.views.dashboard.reliability` / ``set_by_class`` from scratch,
  and the overview cards equal :func:`calwatch.views.dashboard.overview` (running sums: to rounding).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import calwatch as cw
from calwatch.views import charts, dashboard, live, resolution
from calwatch.widget import json_rows, view_datasets

from ..synthetic import softmax_data

K = 4
Store = dict[str, dict[str, dict[str, Any]]]


def _apply(store: Store, data: dict[str, list[dict[str, Any]]]) -> None:
    """What a view's RowStore does with an upsert: rows by key, tombstones delete."""
    for name, rows in data.items():
        current = store.setdefault(name, {})
        for row in rows:
            if row.get("_deleted"):
                current.pop(row["key"], None)
            else:
                current[row["key"]] = row


def _rebuild(mon: Any, widget: Any) -> Store:
    """Every keyed dataset the kernel keeps row by row, from scratch at the widget's resolutions."""
    data = view_datasets(mon, resolution=widget._detail)
    data["timeline"] = json_rows(dashboard.timeline(mon, width=widget._timeline_width))
    names = [*live.bucketed_names(), "timeline", *charts.window_dataset_names(mon)]
    return {name: {r["key"]: r for r in data.get(name, [])} for name in names}


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return bool(a == b)


class Follower:
    """A view of the widget: applies every message, checks it against a rebuild after each call."""

    def __init__(self, mon: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.mon = mon
        self.widget = mon.widget()
        self.messages: list[dict[str, Any]] = []
        monkeypatch.setattr(self.widget, "send", lambda content, buffers=None: self.messages.append(content))
        self.store: Store = {}
        _apply(self.store, self.widget.replay_payload())
        self.seq = self.widget.seq
        self.current_checked = 0

    def check(self, what: str) -> None:
        self.widget.refresh()  # the window panels as they are now (a kernel refreshes them every 0.5 s)
        for message in self.messages:
            assert message["kind"] == "upsert" and message["seq"] == self.seq + 1, what
            assert all(rows for rows in message["data"].values()), f"{what}: an empty dataset was sent"
            self.seq = message["seq"]
            _apply(self.store, message["data"])
        self.messages.clear()
        expected = _rebuild(self.mon, self.widget)
        for name, rows in expected.items():
            held = self.store.get(name, {})
            assert held.keys() == rows.keys(), f"{what}: keys of {name}"
            for key, row in rows.items():
                assert held[key] == row, f"{what}: {name}[{key}]"
            assert self.widget.sent_rows.get(name, {}) == rows, f"{what}: sent rows of {name}"
        replay = self.widget.replay_payload()
        for name in expected:
            assert {r["key"]: r for r in replay[name]} == self.store.get(name, {}), f"{what}: replay {name}"
        self._check_panels(what)
        self._check_current_datasets(what)
        for name, rows in self.widget.sent_rows.items():  # the index of held keys keeps no dead buckets
            by_bucket: dict[Any, set[str]] = {}
            for key, row in rows.items():
                by_bucket.setdefault(row.get("batch"), set()).add(key)
            assert self.widget._held_by_bucket.get(name, {}) == by_bucket, f"{what}: held keys of {name}"

    def _check_current_datasets(self, what: str) -> None:
        """What a static copy or report takes from the views' rows equals a whole rebuild."""
        held = self.widget.current_datasets()
        brushed = self.widget.batch_range is not None
        if self.mon.calibration_ is None or self.mon.n_batches == 0 or brushed:
            assert held is None, f"{what}: the views' rows are not a whole rebuild's here"
            return
        assert held is not None, f"{what}: every change was delivered, nothing brushed"
        self.current_checked += 1
        fresh = view_datasets(self.mon, dashboard_data=True)
        assert held.keys() == fresh.keys(), what
        for name, rows in fresh.items():
            mine = {r["key"]: r for r in held[name]}
            assert len(mine) == len(held[name]) and mine.keys() == {r["key"] for r in rows}, f"{what}: {name}"
            for row in rows:
                for field, value in row.items():
                    assert _close(mine[row["key"]][field], value), f"{what}: {name}[{row['key']}].{field}"
                assert mine[row["key"]].keys() == row.keys(), f"{what}: {name}[{row['key']}]"

    def _check_panels(self, what: str) -> None:
        mon, widget = self.mon, self.widget
        if mon.calibration_ is None or mon.n_batches == 0:
            return
        n, brushed = int(widget._window_rows), widget.batch_range
        reliability = dashboard.reliability(
            mon, window_rows=n, batch_range=brushed, class_filter=widget.class_filter
        )
        assert self.store.get("reliability", {}) == {r["key"]: r for r in json_rows(reliability)}, what
        by_class = dashboard.set_by_class(mon, window_rows=n, batch_range=brushed)
        assert self.store.get("set_by_class", {}) == {r["key"]: r for r in json_rows(by_class)}, what
        cards = {r["key"]: r for r in json_rows(dashboard.overview(mon, batch_range=brushed))}
        held = self.store.get("overview", {})
        assert held.keys() == cards.keys(), what
        for key, card in cards.items():
            for field, value in card.items():
                assert _close(held[key][field], value), (
                    f"{what}: card {key}.{field}: {held[key][field]} != {value}"
                )


def _calibrators(selective: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
        "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1, randomized=True, seed=1),
        "by-class": cw.SplitConformalClassifier(score="lac", alpha=0.1, mondrian="label"),
        "aci": cw.Adaptive(cw.SplitConformalClassifier(score="lac", alpha=0.2), gamma=0.01),
        "risk": cw.RiskEstimator(),
    }
    if selective:
        from calwatch.engine.selective.calibrator import SelectiveCalibrator

        fast = {"epochs": 1, "steps_per_epoch": 2, "sample_size": 32, "progress": False, "n_threads": 1}
        out["sel"] = SelectiveCalibrator(coverage=0.7, seed=0, **fast)
    return out


def _batch(rng: np.random.Generator, seed: int) -> tuple[Any, Any]:
    n = int(rng.integers(5, 60))
    P, y = softmax_data(n, K=K, seed=seed, scale=float(rng.choice([0.5, 2.0])))
    if rng.random() < 0.3:  # ties in confidence
        P = np.round(P, 1) + 1e-3
        P /= P.sum(axis=1, keepdims=True)
    return P, y


@pytest.mark.parametrize(
    ("seed", "selective", "refresh_share"), [(0, False, 1.0), (1, False, 0.3), (2, True, 0.5)]
)
def test_updates_equal_a_rebuild_after_random_calls(seed, selective, refresh_share, monkeypatch):
    monkeypatch.setattr(resolution, "MAX_POINTS", 4)  # the resolution changes every few batches
    rng = np.random.default_rng(seed)
    mon = cw.Monitor(calibrators=_calibrators(selective), window=300, name="incremental")
    P, y = softmax_data(800, K=K, seed=seed)
    mon.calibrate(probs=P, y=y)
    view = Follower(mon, monkeypatch)
    # Between refreshes of the window panels, updates merge their batches into the panels' cache.
    monkeypatch.setattr(view.widget, "_window_due", lambda: bool(rng.random() < refresh_share))
    observed: list[tuple[list[str], Any]] = []
    for step in range(70):
        roll = rng.random()
        if roll < 0.45 or not observed:
            P, y = _batch(rng, seed * 1000 + step)
            ids = [f"{step}-{i}" for i in range(len(y))]
            at_once = rng.random() < 0.15
            mon.observe(probs=P, ids=ids, y=y if at_once else None)
            observed.append((ids, y))
            what = f"step {step}: observe {len(ids)} rows" + (" with labels" if at_once else "")
        elif roll < 0.8:  # late labels, some for earlier batches (relabels), some unknown
            picks = rng.choice(len(observed), size=min(len(observed), int(rng.integers(1, 3))), replace=False)
            chosen: dict[str, int] = {}
            for b in picks.tolist():
                ids, y = observed[-1 - b] if rng.random() < 0.7 else observed[b]
                for i, label in zip(ids, y.tolist(), strict=True):
                    if rng.random() < 0.7:  # one in ten labels differs from the first one given
                        chosen.setdefault(i, int(rng.integers(0, K)) if rng.random() < 0.1 else label)
            mon.label([*chosen, "no-such-id"], [*chosen.values(), 0])
            what = f"step {step}: label {len(chosen)} rows"
        elif roll < 0.85:
            lo = int(rng.integers(0, mon.n_batches))
            view.widget.batch_range = None if rng.random() < 0.4 else (lo, lo + int(rng.integers(0, 9)))
            what = f"step {step}: brush {view.widget.batch_range}"
        elif roll < 0.9:
            view.widget._window_rows = int(rng.choice([0, 100, 250]))
            view.widget._class_filter = str(rng.choice(["", "0", "2"]))
            what = f"step {step}: window {view.widget._window_rows} rows, class {view.widget._class_filter!r}"
        elif roll < 0.93:
            mon.note(f"note {step}", batch=int(rng.integers(0, mon.n_batches)))
            what = f"step {step}: note"
        elif roll < 0.96 and selective:
            mon.retune(float(rng.choice([0.5, 0.8])), "sel")
            what = f"step {step}: retune"
        else:
            P, y = softmax_data(600, K=K, seed=seed * 7 + step)
            mon.calibrate(probs=P, y=y)
            what = f"step {step}: recalibrate"
        view.check(what)
    assert mon.n_batches > 16  # several resolutions went by
    assert mon.window_records()[0].index > 0  # batches left the window
    assert view.current_checked >= 3  # the views held a whole rebuild's rows at times


def test_regression_monitor_updates_equal_a_rebuild(monkeypatch):
    from calwatch.engine.regression.calibrator import ModularConformalCalibrator

    monkeypatch.setattr(resolution, "MAX_POINTS", 4)
    rng = np.random.default_rng(5)
    mon = cw.Monitor(
        task="regression",
        calibrators={"linear": ModularConformalCalibrator(prediction="point")},
        window=200,
    )
    x = rng.normal(size=500)
    mon.calibrate(pred=2 * x, y=2 * x + rng.normal(size=500))
    view = Follower(mon, monkeypatch)
    pending = None
    for b in range(14):
        n = int(rng.integers(10, 60))
        x = rng.normal(size=n)
        ids = [f"{b}-{i}" for i in range(n)]
        mon.observe(pred=2 * x, ids=ids)
        view.check(f"observe {b}")
        if pending is not None:
            mon.label(*pending)
            view.check(f"label {b - 1}")
        pending = (ids, 2 * x + rng.normal(size=n))


def test_pooled_buckets_merge_each_batch_once(monkeypatch):
    """A new batch costs one merge, late labels on the newest batches one or two, whatever the width."""
    from calwatch.kinds.sets import CalibratorBatchStats
    from calwatch.stream import records as stream

    merges = 0
    original = CalibratorBatchStats.merge

    def counting(self: Any, other: Any) -> Any:
        nonlocal merges
        merges += 1
        return original(self, other)

    P, y = softmax_data(500, K=K, seed=9)
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier()}, shift=None, window=200)
    mon.calibrate(probs=P, y=y)
    data = live.LiveDatasets(mon)
    res = resolution.Resolution(64)
    previous = None
    for b in range(200):
        P, y = softmax_data(20, K=K, seed=b)
        ids = [f"{b}-{i}" for i in range(20)]
        mon.observe(probs=P, ids=ids)
        data.changed([b])
        monkeypatch.setattr(CalibratorBatchStats, "merge", counting)
        merges = 0
        (bucket,) = data.rows(res, [b])["batches"]
        assert merges <= 1 and bucket["n_batches"] == b % 64 + 1
        if previous is not None:
            mon.label(*previous)
            data.changed([b - 1])
            merges = 0
            (bucket,) = data.summary(res, [b - 1])
            assert merges <= 2
            start = b - 1 - (b - 1) % 64
            assert bucket["n_labelled"] == sum(r.n_labelled for r in mon.batch_records[start : b + 1])
        monkeypatch.setattr(CalibratorBatchStats, "merge", original)
        previous = (ids, y)
    expected = stream.merge_records(mon.batch_records[192:200])
    assert data.rows(res, [199])["batches"][0]["n_rows"] == expected.n_rows


def test_pooled_buckets_from_scratch_keep_only_merges_that_may_change():
    """Every bucket pooled at once (a new resolution) holds one merge per batch that may still change.

    Until the merges before the window were trimmed after the call, a bucket of ``w`` batches held
    ``w`` of them at once: memory in proportion to the whole stream at every doubling of the width.
    """
    from datetime import UTC, datetime

    from calwatch.kinds.sets import CalibratorBatchStats
    from calwatch.stream import records as stream

    rng = np.random.default_rng(3)

    def record(i: int) -> stream.BatchRecord:
        labelled = rng.integers(0, 5, size=2)
        covered = np.minimum(labelled, rng.integers(0, 3, size=2))
        stats = CalibratorBatchStats(rng.integers(0, 5, size=3), labelled, covered, 0.1)
        return stream.BatchRecord(i, str(i), datetime(2026, 1, 1, tzinfo=UTC), 4, {"lac": stats})

    records = [record(i) for i in range(1000)]
    pools = live.PooledBuckets(resolution.Resolution(256))
    first_kept = 900
    pooled = pools.buckets(records, None, first_kept)
    # three buckets wholly settled (one merge each), and the last (768-999) from batch 899 on
    held = {start: len(prefix.parts) for start, prefix in pools._prefixes.items()}
    assert held == {0: 1, 256: 1, 512: 1, 768: 999 - 899 + 1}
    for record_, end in pooled:
        expected = stream.merge_records(records[record_.index : end + 1])
        assert (record_.n_rows, record_.name) == (expected.n_rows, expected.name)
        for field in ("size_counts", "class_labelled", "class_covered"):
            np.testing.assert_array_equal(
                getattr(record_.stats["lac"], field), getattr(expected.stats["lac"], field)
            )
    # a batch that may change is re-merged from its own merge on, and the bucket still adds up
    records[950] = record(950)
    pools.changed([950])
    ((again, end),) = pools.buckets(records, [950], first_kept)
    expected = stream.merge_records(records[768:1000])
    assert end == 999 and again.n_rows == expected.n_rows
    np.testing.assert_array_equal(again.stats["lac"].class_covered, expected.stats["lac"].class_covered)
    # what the trim after a whole rebuild keeps is what was held
    for prefix in pools._prefixes.values():
        before = list(prefix.parts)
        prefix.trim(first_kept)
        assert prefix.parts == before


def test_a_doubled_width_starts_from_the_buckets_held(monkeypatch):
    """At each doubling of the width a bucket extends the running merge of its first half.

    Before, every bucket was pooled and its detectors' looks folded from scratch: one merge per
    batch of the stream and calibrator, seconds under the monitor's lock at 65,536 batches. The
    rows must be the very rows pooling from scratch gives (floats included: the same merges in
    the same order), at about half the merges and none of the folds of settled looks.
    """
    from calwatch.kinds.sets import CalibratorBatchStats

    rng = np.random.default_rng(11)
    calibrators = {
        "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
        "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1, randomized=True, seed=1),
        "risk": cw.RiskEstimator(),
    }
    mon = cw.Monitor(calibrators=calibrators, window=60)
    P, y = softmax_data(600, K=K, seed=3)
    mon.calibrate(probs=P, y=y)
    data = live.LiveDatasets(mon)
    pending = None
    for b in range(70):
        P, y = _batch(rng, 100 + b)
        ids = [f"{b}-{i}" for i in range(len(y))]
        mon.observe(probs=P, ids=ids)
        data.changed([b])
        if pending is not None and rng.random() < 0.8:  # some batches stay unlabelled
            mon.label(*pending)
            data.changed([b - 1])
        pending = (ids, y)
    fine = resolution.Resolution(8)
    data.rows(fine)

    merges, folded = 0, 0
    merge, fold = CalibratorBatchStats.merge, live._fold

    def counting_merge(self: Any, other: Any) -> Any:
        nonlocal merges
        merges += 1
        return merge(self, other)

    def counting_fold(done: Any, looks: Any, names: Any, batches: range) -> Any:
        nonlocal folded
        folded += len(batches)
        return fold(done, looks, names, batches)

    monkeypatch.setattr(CalibratorBatchStats, "merge", counting_merge)
    monkeypatch.setattr(live, "_fold", counting_fold)
    coarse = resolution.Resolution(16)
    rows = data.rows(coarse)
    seeded = (merges, folded)
    merges, folded = 0, 0
    assert rows == live.LiveDatasets(mon).rows(coarse)  # value for value, floats bit for bit
    from_scratch = (merges, folded)
    # 70 batches in 5 buckets: 65 merges per set calibrator from scratch; seeded, the second
    # halves of the four full buckets (the last, 64-69, is the fine bucket's merge as it is);
    # the looks are folded only for the latest batch (its looks are not final)
    assert from_scratch[0] == 2 * 65
    assert seeded[0] == 2 * 4 * 8
    assert from_scratch[1] >= 69 and seeded[1] <= 1
    assert rows["shift"]  # the detectors looked, and their rows came from the combined folds
