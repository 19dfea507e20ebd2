"""``Monitor.attach``: a calibrator added mid-stream has the history it would have had from the start."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import calwatch as cw

K = 4


def _stream(seed: int, n: int = 1500) -> tuple[Any, Any, pl.DataFrame]:
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.ones(K) * 0.8, n)
    y = (P.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    meta = pl.DataFrame({"g": rng.choice(["a", "b", "c"], n), "x": rng.normal(size=n)})
    hard = meta["g"].to_numpy() == "c"
    flip = hard & (rng.random(n) < 0.4)
    y[flip] = rng.integers(0, K, int(flip.sum()))  # slice g = c is harder
    return P, y, meta


def _monitor(calibrators: dict[str, Any]) -> cw.Monitor:
    return cw.Monitor(calibrators=calibrators, shift=None, window=10**6)


def _feed(mon: cw.Monitor, P: Any, y: Any, meta: pl.DataFrame, plan: list[tuple[int, int, float]]) -> None:
    """Batches [lo, hi), a share labelled at once, the rest two batches later (some relabelled)."""
    pending: list[tuple[list[int], Any]] = []
    for lo, hi, share in plan:
        rows = np.arange(lo, hi)
        now = rows[: int(share * rows.shape[0])]
        mon.observe(probs=P[rows], ids=rows.tolist(), meta=meta[lo:hi])
        if now.size:
            mon.label(now.tolist(), y[now])
        later = rows[now.shape[0] :]
        pending.append((later.tolist(), (y[later] + 1) % K))  # wrong first, fixed below
        if len(pending) > 2:
            ids, labels = pending.pop(0)
            mon.label(ids, labels)
            mon.label(ids[::2], y[np.asarray(ids[::2], dtype=int)])


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**16), cuts=st.lists(st.integers(501, 1499), min_size=1, max_size=4, unique=True))
def test_attach_equals_a_monitor_built_with_it(seed: int, cuts: list[int]) -> None:
    P, y, meta = _stream(seed)
    edges = [500, *sorted(cuts), 1500]
    plan = [(lo, hi, 0.5) for lo, hi in itertools.pairwise(edges)]
    base = {"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)}
    probe = _monitor(dict(base))
    probe.calibrate(probs=P[:500], y=y[:500], meta=meta[:500])
    fixes = {
        "by_g": probe.slice_calibrator("g"),
        "fam": probe.slice_calibrator(["g", "x"]),
        "aps": cw.SplitConformalClassifier(score="aps", alpha=0.2, randomized=True).fit(P[:500], y[:500]),
    }
    built = _monitor({**base, **fixes})
    built.calibrate(probs=P[:500], y=y[:500], meta=meta[:500])
    late = _monitor(dict(base))
    late.calibrate(probs=P[:500], y=y[:500], meta=meta[:500])
    for mon in (built, late):
        _feed(mon, P, y, meta, plan)
    for name, cal in fixes.items():
        late.attach(name, cal)
    assert list(late.calibrators) == list(built.calibrators)
    assert_frame_equal(late.summary().drop("observed_at"), built.summary().drop("observed_at"))
    assert_frame_equal(late.slices(min_rows=1), built.slices(min_rows=1))
    assert_frame_equal(late.rows(), built.rows())
    # and it goes on as the built one does: a new batch, late labels
    for mon in (built, late):
        mon.observe(probs=P[:100], ids=list(range(5000, 5100)), meta=meta[:100], y=y[:100])
        mon.label(list(range(500, 600)), y[500:600])
    assert_frame_equal(late.summary().drop("observed_at"), built.summary().drop("observed_at"))
    assert_frame_equal(late.slices(min_rows=1), built.slices(min_rows=1))


def test_the_fix_in_one_step_by_hand() -> None:
    """Flag, build, preview, attach: the attached calibrator counts what the preview said."""
    P, y, meta = _stream(7)
    mon = _monitor({"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)})
    mon.calibrate(probs=P[:500], y=y[:500], meta=meta[:500])
    mon.observe(probs=P[500:], ids=list(range(500, 1500)), meta=meta[500:], y=y[500:])
    fix = mon.slice_calibrator("g")
    preview = mon.what_if_slices(fix, name="by_g").filter(pl.col("candidate"))
    mon.attach("by_g", fix)
    counted = mon.slices(calibrator="by_g", by="g", min_rows=1).sort("slice")
    assert (
        counted.select("slice", "n_labelled", "n_covered").to_dicts()
        == preview.sort("slice").select("slice", "n_labelled", "n_covered").to_dicts()
    )
    assert mon.summary().filter(pl.col("calibrator") == "by_g").height == 1


def test_what_cannot_be_attached_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    P, y, meta = _stream(3)
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac")}, shift=None, window=400)
    mon.calibrate(probs=P[:500], y=y[:500], meta=meta[:500])
    fix = mon.slice_calibrator("g")
    for b in range(3):
        rows = np.arange(500 + 300 * b, 800 + 300 * b)
        mon.observe(probs=P[rows], ids=rows.tolist(), meta=meta[rows], y=y[rows])
    before = (mon.summary(), mon.slices(min_rows=1), list(mon.calibrators))
    with pytest.raises(ValueError, match=r"batch\(es\) have none in memory \(batches 0"):
        mon.attach("by_g", fix)  # batch 0 left the 400-row window
    with pytest.raises(ValueError, match="already a calibrator"):
        mon.attach("lac", fix)
    with pytest.raises(TypeError, match="non-empty string"):
        mon.attach("", fix)
    with pytest.raises(TypeError, match="set calibrators of a classifier"):
        mon.attach("risk", cw.RiskEstimator())
    with pytest.raises(ValueError, match="order they came in"):
        mon.attach("aci", cw.Adaptive(cw.SplitConformalClassifier()).fit(P[:500], y[:500]))
    plain = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac")}, shift=None)
    plain.calibrate(probs=P[:500], y=y[:500])
    with pytest.raises(ValueError, match="this monitor has none"):
        plain.attach("by_g", fix)
    assert_frame_equal(mon.summary(), before[0])
    assert_frame_equal(mon.slices(min_rows=1), before[1])
    assert list(mon.calibrators) == before[2]
    # and a snapshot of an attached monitor loads and goes on
    ok = _monitor({"lac": cw.SplitConformalClassifier(score="lac")})
    ok.calibrate(probs=P[:500], y=y[:500], meta=meta[:500])
    ok.observe(probs=P[500:800], ids=list(range(500, 800)), meta=meta[500:800], y=y[500:800])
    ok.attach("by_g", ok.slice_calibrator("g"))
    ok.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    assert_frame_equal(loaded.slices(min_rows=1), ok.slices(min_rows=1))
    loaded.observe(probs=P[800:900], ids=list(range(800, 900)), meta=meta[800:900], y=y[800:900])


def test_an_open_widget_shows_the_attached_calibrator() -> None:
    P, y, meta = _stream(5)
    mon = _monitor({"lac": cw.SplitConformalClassifier(score="lac")})
    mon.calibrate(probs=P[:500], y=y[:500], meta=meta[:500])
    widget = mon.widget()
    mon.observe(probs=P[500:900], ids=list(range(500, 900)), meta=meta[500:900], y=y[500:900])
    mon.attach("by_g", mon.slice_calibrator("g"))
    assert widget._calibrators == ["lac", "by_g"]
    assert {r["calibrator"] for r in mon.summary().to_dicts()} == {"lac", "by_g"}
