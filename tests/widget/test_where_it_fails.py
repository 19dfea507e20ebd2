"""The "Where it fails" panels' rows: the ranking and one column's values, from mon.slices()."""

from __future__ import annotations

import calwatch as cw
from calwatch.views import dashboard
from calwatch.views.where_it_fails import RANKED, slice_rows

from ..synthetic import planted_slice_monitor, softmax_data


def test_the_ranking_is_the_frame_s_strongest_evidence_and_the_values_are_the_focus_column_s():
    mon = planted_slice_monitor()
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
    mon = planted_slice_monitor()
    assert {"where_it_fails", "slice_values"} <= set(dashboard.panels_for(mon))
    plain = cw.Monitor(shift=None)
    P, y = softmax_data(300, seed=1)
    plain.calibrate(probs=P[:200], y=y[:200])
    plain.observe(probs=P[200:], y=y[200:])
    assert "where_it_fails" not in dashboard.panels_for(plain)
    assert slice_rows(plain) == []
