"""The "Where it fails" panels' rows: the ranking and one column's values, from mon.slices()."""

from __future__ import annotations

import numpy as np
import polars as pl

import calwatch as cw
from calwatch.views import dashboard
from calwatch.views.where_it_fails import RANKED, slice_rows

from ..synthetic import softmax_data


def _planted(n=5000, seed=3):
    rng = np.random.default_rng(seed)
    P, y = softmax_data(n, seed=seed)
    meta = pl.DataFrame({"carrier": rng.choice(list("ABCD"), n), "origin": rng.choice(["EWR", "JFK"], n)})
    late = (np.arange(n) >= 1000) & (meta["carrier"].to_numpy() == "B")
    y = y.copy()
    y[late] = rng.integers(0, P.shape[1], late.sum())  # carrier B's labels go random after calibration
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)}, shift=None)
    mon.calibrate(probs=P[:1000], y=y[:1000], meta=meta[:1000])
    for b in range(8):
        rows = slice(1000 + 500 * b, 1500 + 500 * b)
        mon.observe(probs=P[rows], y=y[rows], meta=meta[rows])
    return mon


def test_the_ranking_is_the_frame_s_strongest_evidence_and_the_values_are_the_focus_column_s():
    mon = _planted()
    frame = mon.slices(method="e-bh")  # a live view is re-read after every batch: anytime-valid flags
    rows = slice_rows(mon)
    ranked = [r for r in rows if r["view"] == "ranked"]
    assert [r["slice"] for r in ranked] == frame["slice"].head(RANKED).to_list()
    assert ranked[0]["slice"] == "carrier = B" and ranked[0]["flagged"]
    assert ranked[0]["shortfall"] == ranked[0]["target"] - ranked[0]["coverage"] > 0.2
    values = [r for r in rows if r["view"] == "values"]
    assert all(" & " not in r["by"] for r in values)  # one column's values, no pairs
    focus = {r["slice"] for r in values if r["focus"]}
    assert focus == {f"carrier = {c}" for c in "ABCD"}  # the column of the strongest evidence
    # the stated family travels with every row (what the FDR is controlled over)
    assert {r["fdr_level"] for r in rows} == {0.1} and all(r["family"] for r in rows)
    assert {r["fdr_method"] for r in rows} == {"e-Benjamini-Hochberg on anytime-valid e-values"}
    assert len({r["key"] for r in rows}) == len(rows)


def test_the_panels_show_for_a_monitor_that_slices_only():
    mon = _planted()
    assert {"where_it_fails", "slice_values"} <= set(dashboard.panels_for(mon))
    plain = cw.Monitor(shift=None)
    P, y = softmax_data(300, seed=1)
    plain.calibrate(probs=P[:200], y=y[:200])
    plain.observe(probs=P[200:], y=y[200:])
    assert "where_it_fails" not in dashboard.panels_for(plain)
    assert slice_rows(plain) == []
