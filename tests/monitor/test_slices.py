"""Slices of the data (``calibrate/observe(meta=)``, ``Monitor.slices``): counts, tests, bad input, snapshots.

The hand-computed stream: two slice columns (``g``: text, ``x``: numeric cut at 5), a three-class
calibrator whose sets are known by construction (every class of probability ≥ 0.3, and the top
class), two batches of four rows in a four-row window, so the first batch's rows are labelled
from the row log (one parquet part per batch that leaves), a relabel in the log and one in the
window, and a row with ``x`` missing.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw
from calwatch.engine.metrics.discovery import e_bh, shortfall_e_values, shortfall_p_values, step_up
from calwatch.stream.slice_counts import EPOCHS_PER_LENGTH, SliceCounts, SliceStore
from calwatch.stream.slices import PAIR_BUDGET, PAIR_CELLS, SliceEncoding, SliceError, SliceTypeError

from .snapshot_files import resign


class Threshold:
    """Sets of every class with probability ≥ 0.3, and the top class: known sets for hand counts."""

    alpha = 0.1  # promises 0.9 (it does not keep it: the counts are what is checked)

    def fit(self, P: Any, y: Any) -> Threshold:
        return self

    def predict_sets(self, P: Any) -> npt.NDArray[np.bool_]:
        P = np.asarray(P)
        sets = P >= 0.3
        sets[np.arange(P.shape[0]), P.argmax(axis=1)] = True
        return sets


# Sets {0} {0,1} {2} {0,1,2} and {1} {0,2} {1} {2}: sizes 1 2 1 3 | 1 2 1 1.
BATCH_0 = np.array([[0.8, 0.1, 0.1], [0.5, 0.4, 0.1], [0.1, 0.2, 0.7], [0.35, 0.35, 0.3]])
BATCH_1 = np.array([[0.1, 0.8, 0.1], [0.6, 0.1, 0.3], [0.2, 0.7, 0.1], [0.1, 0.1, 0.8]])
META_0 = pl.DataFrame({"g": ["a", "a", "b", "b"], "x": [1.0, 7.0, 3.0, 9.0]})
META_1 = pl.DataFrame({"g": ["a", "b", "a", "b"], "x": [2.0, 6.0, 8.0, None]})


def _hand_monitor(tmp_path: Path | None = None) -> cw.Monitor:
    mon = cw.Monitor(calibrators={"t": Threshold()}, window=4, shift=None)
    mon.calibrate(
        probs=np.vstack([BATCH_0, BATCH_1]), y=[0, 1, 2, 0, 1, 2, 1, 2],
        meta=pl.concat([META_0, META_1]), slice_bins={"x": [5]},
    )  # fmt: skip
    mon._row_log.part_rows = 1  # type: ignore[attr-defined]  # a parquet part per batch that leaves
    mon.observe(probs=BATCH_0, ids=[0, 1, 2, 3], meta=META_0)
    mon.observe(probs=BATCH_1, ids=[4, 5, 6, 7], meta=META_1)  # batch 0 leaves the window
    return mon


def _counts(frame: pl.DataFrame) -> dict[str, tuple[int, int, int, float]]:
    rows = frame.select("slice", "n_rows", "n_labelled", "n_covered", "mean_set_size").iter_rows()
    return {s: (n, nl, nc, round(mean * n, 9)) for s, n, nl, nc, mean in rows}


def test_hand_computed_counts_with_the_row_log_and_relabels() -> None:
    mon = _hand_monitor()
    assert mon.window_records()[0].index == 1 and mon._row_log.parts  # type: ignore[attr-defined]
    mon.label([0, 2, 5, 6], [0, 1, 2, 1])  # 0 and 2 from the row log's part
    report = mon.label([0, 5], [1, 1])  # relabels: 0 in the log, 5 in the window; both now missed
    assert report.relabelled == 2
    mon.label([7], [2])
    counts = _counts(mon.slices(min_rows=1))
    # (rows, labelled, covered, Σ set size): final labels 0→1 (missed), 2→1 (missed), 5→1
    # (missed), 6→1 (covered), 7→2 (covered); sizes 1 2 1 3 | 1 2 1 1.
    assert counts == {
        "g = a": (4, 2, 1, 5),
        "g = b": (4, 3, 1, 7),
        "x < 5": (3, 2, 0, 3),
        "x ≥ 5": (4, 2, 1, 8),
        "x: missing": (1, 1, 1, 1),
        "g = a & x < 5": (2, 1, 0, 2),
        "g = a & x ≥ 5": (2, 1, 1, 3),
        "g = b & x < 5": (1, 1, 0, 1),
        "g = b & x ≥ 5": (2, 1, 0, 5),
        "g = b & x: missing": (1, 1, 1, 1),
    }
    assert mon.status()["rows_labelled"] == 5
    # since=1: only the second batch (each batch is still an epoch of its own)
    later = _counts(mon.slices(min_rows=1, since=1))
    assert later["g = a"] == (2, 1, 1, 2) and later["x ≥ 5"] == (2, 2, 1, 3)
    assert "x < 5" not in later  # its one row of batch 1 (id 4) has no label


def _binomial_cdf(k: int, n: int, t: float) -> float:
    return sum(math.comb(n, j) * t**j * (1 - t) ** (n - j) for j in range(k + 1))


def _hand_step_up(p: list[float], q: float, c: float = 1.0) -> list[bool]:
    order = sorted(range(len(p)), key=lambda i: p[i])
    m = len(p)
    last = max((r + 1 for r, i in enumerate(order) if p[i] <= (r + 1) * q / (m * c)), default=0)
    flagged = set(order[:last])
    return [i in flagged for i in range(m)]


@pytest.mark.parametrize(("level", "method", "n_flagged"), [(0.1, "bh", 1), (0.3, "bh", 7), (0.3, "by", 1)])
def test_p_values_and_flags_by_hand(level: float, method: str, n_flagged: int) -> None:
    mon = _hand_monitor()
    mon.label([0, 2, 5, 6], [0, 1, 2, 1])
    mon.label([0, 5], [1, 1])
    mon.label([7], [2])
    frame = mon.slices(min_rows=1, level=level, method=method)
    n, k = frame["n_labelled"].to_list(), frame["n_covered"].to_list()
    hand = [_binomial_cdf(kk, nn, 0.9) for kk, nn in zip(k, n, strict=True)]
    np.testing.assert_allclose(frame["p_value"].to_numpy(), hand, rtol=1e-12)
    # e.g. "g = b": 1 of 3 covered, P(Bin(3, 0.9) ≤ 1) = 0.1³ + 3·0.9·0.1² = 0.028
    assert frame.filter(pl.col("slice") == "g = b")["p_value"].item() == pytest.approx(0.028)
    c = sum(1 / i for i in range(1, len(hand) + 1)) if method == "by" else 1.0
    assert frame["flagged"].to_list() == _hand_step_up(hand, level, c)
    assert int(frame["flagged"].sum()) == n_flagged
    assert frame["p_value"].is_sorted()
    assert set(frame["n_tested"].to_list()) == {10} and set(frame["fdr_level"].to_list()) == {level}
    assert frame["family"][0].startswith(f"FDR ≤ {level:g} (Benjamini-")
    lo, hi = frame["coverage_lo"].to_numpy(), frame["coverage_hi"].to_numpy()
    assert np.all((lo <= frame["coverage"].to_numpy()) & (frame["coverage"].to_numpy() <= hi))
    # one column only: its family is smaller
    only_x = mon.slices(by="x", min_rows=1, level=level, method=method)
    assert set(only_x["slice"].to_list()) == {"x < 5", "x ≥ 5", "x: missing"}
    assert set(only_x["n_tested"].to_list()) == {3}
    pair = mon.slices(by=("x", "g"), min_rows=1)
    assert set(pair["by"].to_list()) == {"g & x"}


def test_step_up_and_p_values_in_the_engine() -> None:
    p = shortfall_p_values([0, 5, 10], [10, 10, 10], 0.9)
    assert p[0] == pytest.approx(0.1**10) and p[2] == 1.0
    assert p[1] == pytest.approx(_binomial_cdf(5, 10, 0.9))
    rejected, adjusted = step_up([0.001, 0.2, 0.019, 0.04], 0.05)
    assert rejected.tolist() == [True, False, True, False]
    assert adjusted.tolist() == pytest.approx([0.004, 0.2, 0.038, 0.05333333333])
    with pytest.raises(ValueError, match="method"):
        step_up([0.1], 0.1, "holm")
    with pytest.raises(ValueError, match="0 ≤ covered ≤ labelled"):
        shortfall_p_values([3], [2], 0.9)


# ------------------------------------------------------------------ exactness
def _random_stream(seed: int, n: int = 600) -> tuple[Any, ...]:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, 4)) * 1.5
    P = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    y = (P.cumsum(axis=1) > rng.uniform(size=(n, 1))).argmax(axis=1)
    meta = pl.DataFrame({
        "carrier": rng.choice(["AA", "B6", "DL", "UA", "WN"], n),
        "hour": rng.integers(5, 23, n),
        "flag": rng.uniform(size=n) < 0.3,
        "dist": np.where(rng.uniform(size=n) < 0.05, np.nan, rng.gamma(2.0, 300.0, n)),
    })  # fmt: skip
    return P, y, meta


def _calibrated(window: int = 100_000, **kwargs: Any) -> cw.Monitor:
    P, y, meta = _random_stream(1, 800)
    mon = cw.Monitor(
        calibrators={
            "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
            "aps": cw.SplitConformalClassifier(score="aps", alpha=0.2, randomized=True, seed=3),
        },
        window=window,
        shift=None,
        **kwargs,
    )
    return mon.calibrate(probs=P, y=y, meta=meta)


def _counts_only(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.select("calibrator", "slice", "n_rows", "n_labelled", "n_covered", "mean_set_size").sort(
        "calibrator", "slice"
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batches_merge_exactly_into_one_batch_of_all_their_rows(seed: int) -> None:
    P, y, meta = _random_stream(100 + seed)
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, len(y)), size=5, replace=False))
    labelled_now = rng.uniform(size=len(y)) < 0.3
    late = np.flatnonzero(~labelled_now & (rng.uniform(size=len(y)) < 0.6))
    wrong = rng.choice(late, size=40, replace=False)
    split = _calibrated(window=150)  # most batches leave the window: late labels from the row log
    for rows in np.split(np.arange(len(y)), cuts):
        split.observe(probs=P[rows], ids=rows.tolist(), meta=meta[rows], y=None)
    split.label(np.flatnonzero(labelled_now).tolist(), y[labelled_now])
    split.label(wrong.tolist(), (y[wrong] + 1) % 4)  # labels later corrected
    split.label(late.tolist(), y[late])
    whole = _calibrated()
    whole.observe(probs=P, ids=list(range(len(y))), meta=meta)
    labelled = np.flatnonzero(labelled_now | np.isin(np.arange(len(y)), late))
    whole.label(labelled.tolist(), y[labelled])
    assert_frame_equal(_counts_only(split.slices(min_rows=1)), _counts_only(whole.slices(min_rows=1)))
    assert split._slices is not None and len(split._slices.epochs) <= EPOCHS_PER_LENGTH * 3


def test_slice_counts_are_a_monoid_and_a_relabel_cancels() -> None:
    meta = _random_stream(5, 200)[2]
    mon = _calibrated()
    store = mon._slices
    assert store is not None
    codes = store.encoding.codes(meta, 200)
    sizes = {key: np.random.default_rng(1).integers(1, 4, 200) for key in store.calibrators}
    covered = {key: np.random.default_rng(2).uniform(size=200) < 0.9 for key in store.calibrators}
    parts = []
    for a, b in [(0, 50), (50, 51), (51, 200)]:
        observed = store.observed(codes[a:b], {k: v[a:b] for k, v in sizes.items()})
        parts.append(observed.merge(store.labelled(codes[a:b], {k: v[a:b] for k, v in covered.items()})))
    whole = store.observed(codes, sizes).merge(store.labelled(codes, covered))
    assert parts[0].merge(parts[1]).merge(parts[2]) == whole == parts[0].merge(parts[1].merge(parts[2]))
    empty = SliceCounts.empty(store.calibrators, store.encoding.n_cells)
    assert whole.merge(empty) == whole
    gone = store.labelled(codes, covered).merge(store.labelled(codes, covered, sign=-1))
    assert gone == empty
    assert whole.check() == []


def test_epochs_pool_batches_and_late_labels_reach_the_right_epoch() -> None:
    meta = _random_stream(7, 50)[2]
    mon = _calibrated()
    store = SliceStore(mon._slices.encoding, ("lac",))  # type: ignore[union-attr]
    rng = np.random.default_rng(0)
    per_batch = []
    for b in range(37):
        rows = rng.choice(50, size=int(rng.integers(1, 50)), replace=False)
        codes = store.encoding.codes(meta[rows], rows.shape[0])
        counts = store.observed(codes, {"lac": np.ones(rows.shape[0], dtype=np.int64)})
        store.append(b, counts)
        per_batch.append(counts)
        late = int(rng.integers(0, b + 1))  # a label for an older batch
        delta = store.labelled(codes[:1], {"lac": np.array([True])})
        store.add(late, delta)
        per_batch[late] = per_batch[late].merge(delta)
    assert store.problems() == []
    assert max(store.lengths.count(n) for n in set(store.lengths)) <= EPOCHS_PER_LENGTH
    assert store.lengths == sorted(store.lengths, reverse=True)
    for since in [None, *store.starts]:
        pooled, first = store.pooled(since)
        expected = per_batch[0] if since in (None, 0) else per_batch[since]
        for counts in per_batch[(first if since is not None else 0) + 1 :]:
            expected = expected.merge(counts)
        assert pooled == expected
    inside = store.starts[0] + 1  # inside the first (longest) epoch: counted from its start
    assert store.lengths[0] > 1 and store.pooled(inside)[1] == store.starts[0]
    with pytest.raises(ValueError, match="after batch 36"):
        store.append(40, per_batch[0])


def test_save_load_then_late_labels_equal_the_live_monitor(tmp_path: Path) -> None:
    P, y, meta = _random_stream(11, 1200)
    live = _calibrated(window=200)
    live._row_log.part_rows = 250  # type: ignore[attr-defined]  # parts on disk, and rows in the buffer
    for b in range(8):
        rows = np.arange(150 * b, 150 * (b + 1))
        live.observe(probs=P[rows], ids=rows.tolist(), meta=meta[rows], y=y[rows] if b == 2 else None)
    live.label(list(range(0, 300, 3)), y[0:300:3])
    live.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    assert loaded._slices is not None and loaded._slices.encoding == live._slices.encoding  # type: ignore[union-attr]
    assert_frame_equal(loaded.slices(), live.slices())
    late = np.arange(0, 1200, 2)  # rows in the log's parts, its buffer and the window
    for mon in (live, loaded):
        mon.label(late.tolist(), (y[late] + 1) % 4)
        mon.label(late[::3].tolist(), y[late[::3]])  # relabels
        mon.observe(probs=P[:50], ids=list(range(5000, 5050)), meta=meta[:50], y=y[:50])
    assert_frame_equal(loaded.slices(min_rows=5), live.slices(min_rows=5))
    assert_frame_equal(loaded.summary().drop("observed_at"), live.summary().drop("observed_at"))
    assert loaded.status() == live.status()


def test_snapshots_naming_the_slice_store_before_its_module_split_still_load(tmp_path: Path) -> None:
    """Snapshots saved before the counts moved to ``slice_counts`` name ``stream.slices:SliceStore``."""
    P, y, meta = _random_stream(5, 300)
    live = _calibrated(window=200)
    live.observe(probs=P, ids=list(range(300)), meta=meta, y=y)
    live.save(tmp_path / "snap")
    state = tmp_path / "snap" / "state.json"
    text = state.read_text()
    assert "calwatch.stream.slice_counts:SliceStore" in text
    state.write_text(text.replace("stream.slice_counts:SliceStore", "stream.slices:SliceStore"))
    resign(tmp_path / "snap", "state.json")
    loaded = cw.Monitor.load(tmp_path / "snap")
    assert_frame_equal(loaded.slices(min_rows=1), live.slices(min_rows=1))


def test_snapshots_without_slices_still_load(tmp_path: Path) -> None:
    P, y, _ = _random_stream(3, 200)
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac")}, shift=None)
    mon.calibrate(probs=P, y=y)
    mon.observe(probs=P[:20])
    mon.save(tmp_path / "plain")
    loaded = cw.Monitor.load(tmp_path / "plain")
    assert loaded._slices is None
    with pytest.raises(ValueError, match="keeps no slices"):
        loaded.slices()


# ------------------------------------------------------------------ encoding
def test_the_encoding_in_words() -> None:
    mon = _calibrated()
    columns = mon.slice_columns()
    words = dict(columns.group_by("column", maintain_order=True).agg("slice").iter_rows())
    assert words["carrier"] == [
        "carrier = AA", "carrier = B6", "carrier = DL", "carrier = UA", "carrier = WN", "carrier: other",
        "carrier: missing",
    ]  # fmt: skip
    assert words["flag"] == ["flag = False", "flag = True", "flag: other", "flag: missing"]
    assert len(words["hour"]) == 6 and words["hour"][-2].startswith("hour ≥ ")  # 18 values: 5 bins, missing
    assert words["dist"][0].startswith("dist < ") and words["dist"][-1] == "dist: missing"
    encoding = mon._slices.encoding  # type: ignore[union-attr]
    assert len(encoding.pairs) == 6  # 7, 6, 4 and 6 codes: every pair within 400 cells


def test_the_pair_budget() -> None:
    n = 500
    rng = np.random.default_rng(0)
    wide = {f"c{i}": rng.choice([f"v{j}" for j in range(30)], n) for i in range(3)}  # 22 codes each
    narrow = {f"n{i}": rng.normal(size=n) for i in range(12)}  # 6 codes each
    encoding = SliceEncoding.fit(pl.DataFrame(wide | narrow), n)
    sizes = [encoding.columns[i].n_codes * encoding.columns[j].n_codes for i, j in encoding.pairs]
    assert max(sizes) <= PAIR_CELLS and sum(sizes) <= PAIR_BUDGET
    names = {(encoding.columns[i].name, encoding.columns[j].name) for i, j in encoding.pairs}
    assert ("c0", "c1") not in names  # 22 × 22 = 484 cells
    assert ("c0", "n0") in names  # 22 × 6 = 132
    assert encoding.n_cells == 3 * 22 + 12 * 6 + sum(sizes)


def test_dates_and_tables_of_every_library() -> None:
    n = 300
    rng = np.random.default_rng(4)
    day = np.datetime64("2013-01-01") + rng.integers(0, 365, n).astype("timedelta64[D]")
    frame = pl.DataFrame({"day": day, "k": rng.integers(0, 3, n)}).with_columns(pl.col("day").cast(pl.Date))
    encoding = SliceEncoding.fit(frame, n, {"day": [np.datetime64("2013-07-01")]})
    assert encoding.columns[0].labels == ("day < 2013-07-01", "day ≥ 2013-07-01", "day: missing")
    assert encoding.columns[1].labels == ("k = 0", "k = 1", "k = 2", "k: other", "k: missing")
    codes = encoding.codes(frame, n)
    assert np.array_equal(codes, encoding.codes(frame.to_pandas(), n))
    assert np.array_equal(codes, encoding.codes(frame.to_arrow(), n))
    assert np.array_equal(codes, encoding.codes({"day": frame["day"], "k": frame["k"].to_numpy()}, n))
    assert np.array_equal(codes[:, 0], (day >= np.datetime64("2013-07-01")).astype(int))


# ------------------------------------------------------------------ bad input
def _state(mon: cw.Monitor) -> tuple[Any, ...]:
    store = mon._slices
    epochs = [] if store is None else [e.copy() for e in store.epochs]
    return mon.summary(), mon.status(), epochs, mon.n_batches


def _assert_unchanged(mon: cw.Monitor, before: tuple[Any, ...]) -> None:
    summary, status, epochs, n_batches = _state(mon)
    assert_frame_equal(summary, before[0])
    assert status == before[1]
    assert len(epochs) == len(before[2])
    assert all(np.array_equal(a, b) for a, b in zip(epochs, before[2], strict=True))
    assert n_batches == before[3]


BAD_META = {
    "wrong length": (lambda m: m.head(9), SliceError, "column 'carrier' has 9 values but the batch has 10"),
    "nested values": (
        lambda m: m.with_columns(carrier=pl.Series([["AA"]] * 10)), SliceTypeError, "'carrier' holds nested"
    ),
    "unhashable values": (
        lambda m: {**m.to_dict(), "flag": np.array([{"a"}] * 10, dtype=object)}, SliceTypeError, "'flag'"
    ),
    "dicts": (lambda m: m.to_pandas().assign(hour=[{"h": 1}] * 10), SliceTypeError, "'hour' holds nested"),
    "mixed objects": (lambda m: m.to_pandas().assign(carrier=["AA", 1] * 5), SliceTypeError, "'carrier'"),
    "a type that changed": (
        lambda m: m.with_columns(hour=pl.col("hour").cast(pl.String)), SliceTypeError,
        "meta column 'hour' holds text values, but number values",
    ),
    "a missing column": (lambda m: m.drop("dist"), SliceError, "lacks the slice column 'dist'"),
    "an unknown column": (lambda m: m.with_columns(z=1), SliceError, "column 'z' was not a slice column"),
    "no meta": (lambda m: None, ValueError, "meta is required"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_META))
def test_bad_meta_names_the_column_and_changes_nothing(case: str) -> None:
    P, y, meta = _random_stream(9, 40)
    mon = _calibrated(window=20)
    mon.observe(probs=P[:10], ids=list(range(10)), meta=meta[:10], y=y[:10])
    mon.observe(probs=P[10:20], ids=list(range(10, 20)), meta=meta[10:20])
    before = _state(mon)
    make, error, words = BAD_META[case]
    with pytest.raises(error, match=words):
        mon.observe(probs=P[20:30], ids=list(range(20, 30)), meta=make(meta[20:30]), y=y[20:30])
    _assert_unchanged(mon, before)
    mon.observe(probs=P[20:30], ids=list(range(20, 30)), meta=meta[20:30], y=y[20:30])  # the stream goes on
    assert mon.n_batches == 3 and mon._slices is not None and mon._slices.n_batches == 3


def test_a_column_may_be_all_missing_in_a_batch() -> None:
    P, _, meta = _random_stream(9, 10)
    mon = _calibrated()
    mon.observe(probs=P, meta=pd.DataFrame({c: [None] * 10 for c in meta.columns}))
    mon.observe(probs=P, meta=meta.to_arrow())
    assert mon._slices is not None and mon._slices.n_batches == 2


def test_calibrate_and_observe_refuse_meta_they_cannot_use() -> None:
    P, y, meta = _random_stream(2, 100)
    plain = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac")}, shift=None)
    plain.calibrate(probs=P, y=y)
    with pytest.raises(ValueError, match="calibrated without slice columns; pass meta= to calibrate"):
        plain.observe(probs=P[:5], meta=meta[:5])
    plain.observe(probs=P[:5])
    with pytest.raises(ValueError, match="before the first batch"):
        plain.calibrate(probs=P, y=y, meta=meta)
    assert plain._slices is None
    fresh = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac")}, shift=None)
    with pytest.raises(SliceError, match="meta column 'carrier' has 99 values but the batch has 100"):
        fresh.calibrate(probs=P, y=y, meta=meta.head(99))
    assert fresh.calibration_ is None and fresh._slices is None
    with pytest.raises(SliceError, match="slice_bins names 'nope'"):
        fresh.calibrate(probs=P, y=y, meta=meta, slice_bins={"nope": [1]})
    with pytest.raises(SliceError, match=r"slice_bins\['carrier'\]"):
        fresh.calibrate(probs=P, y=y, meta=meta, slice_bins={"carrier": [1]})
    with pytest.raises(ValueError, match="slice_bins needs meta="):
        fresh.calibrate(probs=P, y=y, slice_bins={"hour": [12]})
    risk_only = cw.Monitor(calibrators={"risk": cw.RiskEstimator()}, shift=None)
    with pytest.raises(ValueError, match="no calibrator predicts sets"):
        risk_only.calibrate(probs=P, y=y, meta=meta)
    fresh.calibrate(probs=P, y=y, meta=meta)
    encoding = fresh._slices.encoding  # type: ignore[union-attr]
    fresh.calibrate(probs=P, y=y)  # a later calibration keeps the encoding
    fresh.calibrate(probs=P, y=y, meta=meta.sample(fraction=1.0, shuffle=True, seed=1))
    assert fresh._slices is not None and fresh._slices.encoding is encoding


def test_slices_refuses_what_it_cannot_read() -> None:
    P, y, meta = _random_stream(2, 100)
    mon = cw.Monitor(
        calibrators={"lac": cw.SplitConformalClassifier(score="lac"), "risk": cw.RiskEstimator()}, shift=None
    )
    mon.calibrate(probs=P, y=y, meta=meta)
    mon.observe(probs=P, meta=meta, y=y)
    assert set(mon.slices()["calibrator"].to_list()) == {"lac"}
    for kwargs, words in [
        ({"calibrator": "risk"}, "predicts no sets"),
        ({"calibrator": "nope"}, "must be one of"),
        ({"by": "nope"}, "not a slice column"),
        ({"since": -1}, "since must be"),
        ({"min_rows": 0}, "min_rows"),
        ({"level": 1.5}, "level"),
        ({"method": "holm"}, "method"),
    ]:
        with pytest.raises(ValueError, match=words):
            mon.slices(**kwargs)
    assert mon.slices(since=5).height == 0  # past the last batch: nothing counted


def test_a_table_without_its_slice_columns_is_refused_by_a_monitor_that_slices(tmp_path: Path) -> None:
    """Tables count slices when named (``meta=``, tests/scale/test_table_slices.py), else are refused."""
    P, y, meta = _random_stream(2, 100)
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac")}, shift=None)
    mon.calibrate(probs=P, y=y, meta=meta)
    table = pl.DataFrame({"id": range(100), "p": P.tolist(), "day": [1] * 100})
    with pytest.raises(ValueError, match=r"slices its batches by the columns \['carrier'.*given no meta="):
        mon.observe_table(table, id="id", probs="p", bucket="day")
    assert mon.n_batches == 0


def test_a_corrupted_slice_store_is_refused_on_load(tmp_path: Path) -> None:
    P, y, meta = _random_stream(2, 100)
    mon = _calibrated()
    mon.observe(probs=P, meta=meta, y=y)
    assert mon._slices is not None
    mon._slices.epochs[0] = mon._slices.epochs[0].copy()
    mon._slices.epochs[0][1, 0] = mon._slices.epochs[0][0, 0] + 1  # more labelled rows than rows
    mon.save(tmp_path / "bad")
    with pytest.raises(cw.SnapshotError, match="more labelled rows than rows"):
        cw.Monitor.load(tmp_path / "bad")


def _clustered(blocks: bool) -> cw.Monitor:
    """Units of 10 rows that share their probabilities and label: misses come in runs of 10."""
    rng = np.random.default_rng(0)

    def units(n: int, start: int) -> tuple[Any, Any, Any, pl.DataFrame]:
        base = rng.dirichlet(np.ones(4) * 0.7, n)
        y = (base.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
        P = np.repeat(base, 10, axis=0)
        meta = pl.DataFrame({"g": np.repeat(rng.choice(["a", "b"], n), 10)})
        return P, np.repeat(y, 10), np.repeat(np.arange(start, start + n), 10), meta

    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)})
    P, y, b, meta = units(300, 0)
    mon.calibrate(probs=P, y=y, blocks=b if blocks else None, meta=meta)
    for batch in range(30):
        P, y, b, meta = units(10, 10_000 + 100 * batch)
        mon.observe(probs=P, y=y, blocks=b if blocks else None, meta=meta)
    return mon


def test_the_family_says_when_rows_are_not_independent() -> None:
    """The tests count rows as independent: a stream whose rows come in runs or blocks says so."""
    runs = _clustered(blocks=False)
    assert runs.status()["detectors_on_correlated_rows"] > 0
    family = runs.slices(min_rows=1)["family"][0]
    assert "caution: labelled rows look correlated (lac: " in family and "read flags as leads" in family
    blocked = _clustered(blocks=True)
    assert "caution: rows come in blocks (blocks= was given)" in blocked.slices(min_rows=1)["family"][0]
    P, y, meta = _random_stream(3, 600)
    independent = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac")})
    independent.calibrate(probs=P[:300], y=y[:300], meta=meta[:300])
    independent.observe(probs=P[300:], y=y[300:], meta=meta[300:])
    assert "caution" not in independent.slices(min_rows=1)["family"][0]


@pytest.mark.parametrize("n", [1, 7, 60, 400])
def test_the_e_values_are_fair_bets_under_the_null(n: int) -> None:
    """E[E_n] = 1 at coverage t and < 1 above it: summed exactly over the binomial law of k."""
    from scipy.stats import binom

    k = np.arange(n + 1)
    for t in (0.8, 0.9, 0.95):
        e = shortfall_e_values(k, np.full(n + 1, n), t)
        assert float(binom.pmf(k, n, t) @ e) == pytest.approx(1.0, rel=1e-9)
        assert float(binom.pmf(k, n, min(0.999, t + 0.02)) @ e) < 1.0
        assert np.all(np.diff(e) <= 0) and e[-1] < e[0]  # more covered rows, less evidence (the cap ties)
    assert shortfall_e_values([0], [0], 0.9).tolist() == [1.0]
    # one shortfall alone is its likelihood ratio
    assert shortfall_e_values([3], [5], 0.9, (0.4,))[0] == pytest.approx((0.5 / 0.9) ** 3 * (0.5 / 0.1) ** 2)


def test_e_bh_by_hand_and_in_slices() -> None:
    rejected, adjusted = e_bh([40.0, 5.0, 12.0, 0.5], 0.1)  # thresholds m/(i·q): 40, 20, 13.3, 10
    assert rejected.tolist() == [True, False, False, False]
    assert adjusted == pytest.approx([0.1, 4 / 15, 4 / 24, 1.0])
    assert e_bh([30.0, 30.0, 30.0, 0.0], 0.1)[0].tolist() == [True, True, True, False]  # 30 ≥ 4/(3·0.1)
    P, y, meta = _random_stream(4, 900)
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac")}, shift=None)
    mon.calibrate(probs=P[:300], y=y[:300], meta=meta[:300])
    mon.observe(probs=P[300:], y=(y[300:] + (np.arange(600) % 3 == 0)) % 4, meta=meta[300:])
    frame = mon.slices(min_rows=5, method="e-bh")
    e = shortfall_e_values(frame["n_covered"], frame["n_labelled"], frame["target"])
    assert frame["e_value"].to_list() == e.tolist()
    flagged, q = e_bh(e, 0.1)
    assert frame["flagged"].to_list() == flagged.tolist() and frame["flagged"].any()
    assert frame["q_value"].to_list() == q.tolist()
    assert "e-Benjamini-Hochberg on anytime-valid e-values" in frame["family"][0]
