"""Overview cards: running per-calibrator sums (CardTotals) agree with pooling the rows afresh,
count a relabelled batch once, and the live widget's cards follow the stream and the brush."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest

import calwatch as cw
from calwatch.views import dashboard
from calwatch.views.cards import CardTotals, overview_rows

from ..synthetic import softmax_data


def _row(batch: int, cal: str, **fields: Any) -> dict[str, Any]:
    return {"batch": batch, "calibrator": cal, **fields}


def test_running_sums_replace_rows_by_key():
    """Hand check: two batches of a set calibrator and a risk estimator; batch 0 is relabelled."""
    totals = CardTotals(["sets", "risk"], {"sets": "Sets", "risk": "Risk"})
    totals.update(
        {
            "0|sets": _row(0, "sets", kind="sets", target=0.9, n_rows=10, n_labelled=0, mean_set_size=2.0),
            "0|risk": _row(0, "risk", kind="risk", n_rows=10, n_labelled=0, estimated_error=0.3),
            "1|sets": _row(1, "sets", kind="sets", target=0.9, n_rows=30, n_labelled=20, n_covered=18,
                           mean_set_size=1.0),
        }
    )  # fmt: skip
    totals.update(  # labels for batch 0 arrive: the same keys again
        {
            "0|sets": _row(0, "sets", kind="sets", target=0.9, n_rows=10, n_labelled=10, n_covered=7,
                           mean_set_size=2.0),
            "0|risk": _row(0, "risk", kind="risk", n_rows=10, n_labelled=10, estimated_error=0.3,
                           observed_error=0.2),
        }
    )  # fmt: skip
    sets, risk = totals.cards()
    assert (sets["n_batches"], sets["n_rows"], sets["n_labelled"], sets["n_covered"]) == (2, 40, 30, 25)
    assert sets["coverage"] == 25 / 30 and sets["mean_set_size"] == (2.0 * 10 + 1.0 * 30) / 40
    assert sets["coverage_lo"] < 25 / 30 < sets["coverage_hi"]
    assert (sets["first_batch"], sets["last_batch"], sets["target"]) == (0, 1, 0.9)
    assert (risk["n_batches"], risk["estimated_error"], risk["observed_error"]) == (1, 0.3, 0.2)
    assert risk["coverage"] is None and sets["estimated_error"] is None
    warned = totals.cards([{"name": "sets: drift", "open": True}, {"name": "model", "open": True}])
    assert [(c["open_warnings"], c["model_warnings"]) for c in warned] == [(1, 1), (0, 1)]
    # An acknowledged warning leaves the open counts, as it leaves the banners: counted apart.
    seen = totals.cards(
        [{"name": "sets: drift", "open": True}, {"name": "model", "open": True, "acknowledged": True}]
    )
    counts = [(c["open_warnings"], c["model_warnings"], c["acknowledged_warnings"]) for c in seen]
    assert counts == [(1, 0, 1), (0, 0, 1)]


def test_cards_of_rows_in_any_order_are_the_same():
    rows = [
        _row(
            b,
            "a",
            kind="sets",
            target=0.9,
            n_rows=10 + b,
            n_labelled=b,
            n_covered=b // 2,
            mean_set_size=1 + b / 7,
        )
        for b in range(12)
    ]
    forward = overview_rows(rows, calibrators=["a"], labels={})
    backward = overview_rows(rows[::-1], calibrators=["a"], labels={})
    assert forward[0] | {"mean_set_size": None} == backward[0] | {"mean_set_size": None}
    assert forward[0]["mean_set_size"] == pytest.approx(backward[0]["mean_set_size"], rel=1e-14)
    brushed = overview_rows(rows, calibrators=["a"], labels={}, batch_range=(3, 5))[0]
    assert (brushed["n_batches"], brushed["first_batch"], brushed["last_batch"]) == (3, 3, 5)


@pytest.fixture
def mon() -> Any:
    P, y = softmax_data(800, seed=5)
    m = cw.Monitor(
        calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1), "risk": cw.RiskEstimator()},
        name="cards",
    )
    return m.calibrate(probs=P, y=y)


def _assert_cards_equal(live: list[dict[str, Any]], fresh: pl.DataFrame) -> None:
    assert [c["key"] for c in live] == fresh["key"].to_list()
    for card, expected in zip(live, fresh.iter_rows(named=True), strict=True):
        for field, value in expected.items():
            if isinstance(value, float):
                assert card[field] == pytest.approx(value, rel=1e-12), field
            else:
                assert card[field] == value, field


def test_live_cards_follow_late_labels_and_the_brush(mon, monkeypatch):
    """The widget updates its sums with each batch's rows; they always equal the cards pooled
    afresh from the monitor (labels arriving one batch late, a relabelled batch), over the
    whole stream and over a brushed range."""
    widget = mon.widget()
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(widget, "send", lambda content, buffers=None: sent.append(content))
    rng = np.random.default_rng(2)
    pending = None
    for b in range(15):
        P, y = softmax_data(int(rng.integers(30, 80)), seed=100 + b)
        ids = [f"{b}-{i}" for i in range(len(y))]
        mon.observe(probs=P, ids=ids)
        if pending is not None:
            mon.label(*pending)
        pending = (ids, y)
        if b == 8:
            mon.label(ids[:5], y[:5])  # part of this batch now, the rest with the next one
    mon.label(*pending)
    latest = sent[-1]["data"]["overview"]
    _assert_cards_equal(latest, dashboard.overview(mon))
    _assert_cards_equal(widget._overview(), dashboard.overview(mon))
    widget.batch_range = (4, 9)
    _assert_cards_equal(widget._overview(), dashboard.overview(mon, batch_range=(4, 9)))


def test_exact_intervals_survive_the_cache_filling_up():
    # The cache starts afresh when full; a call mixing pairs it knew with new ones must still
    # answer every pair (it once lost the known ones and raised KeyError at batch 6,381 of a
    # live stream).
    from calwatch.engine.metrics.intervals import clopper_pearson
    from calwatch.views.cards import ExactIntervals

    bands = ExactIntervals(max_size=8)
    bands.of([(k, 10) for k in range(6)])
    pairs = [(2, 10), (3, 10)] + [(k, 20) for k in range(5)]  # 2 known, 5 new: over the limit
    lo, hi = bands.of(pairs)
    want_lo, want_hi = clopper_pearson([p[0] for p in pairs], [p[1] for p in pairs])
    assert lo == pytest.approx(want_lo.tolist()) and hi == pytest.approx(want_hi.tolist())
    assert len(bands._known) <= 8


def test_a_risk_card_names_its_scopes_and_gives_the_observed_error_its_exact_band():
    from calwatch.engine.metrics.intervals import clopper_pearson

    totals = CardTotals(["r"], {"r": "R"})
    rows = {
        f"{b}|r": {"batch": b, "calibrator": "r", "kind": "risk", "n_rows": 100, "n_labelled": 40,
                   "estimated_error": 0.2, "observed_error": 0.25, "error_band_lo": 0.1 + b / 100,
                   "error_band_hi": 0.3 + b / 100, "estimate_promise": "calibrated estimate with a 95% band"}
        for b in range(3)
    }  # fmt: skip
    totals.update(rows)
    (card,) = totals.cards()
    lo, hi = clopper_pearson(np.array([30]), np.array([120]))  # 0.25 x 40 errors per batch, 3 batches
    assert card["observed_error"] == pytest.approx(0.25)
    assert (card["observed_error_lo"], card["observed_error_hi"]) == pytest.approx((lo[0], hi[0]))
    assert card["coverage_lo"] is None  # a risk card has no coverage band
    # the guarded band is one batch's: the latest batch's, as the card says
    assert (card["latest_error_band_lo"], card["latest_error_band_hi"]) == pytest.approx((0.12, 0.32))
    assert card["last_batch"] == 2
