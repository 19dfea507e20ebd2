"""Risk estimators and logit-based set calibrators inside the Monitor."""

import numpy as np
import polars as pl
import pytest

import calwatch as cw

from ..synthetic import softmax_data


class SoftmaxRisk:
    """The simplest risk estimator (paper 004's SMX): P(label ∉ top-k) = 1 − Σ top-k p."""

    kind = "risk"
    method = "softmax"

    def __init__(self, top_k=1):
        self.top_k = top_k

    def fit(self, P, y):
        self.fitted_ = True
        return self

    def row_risk(self, P):
        return 1.0 - np.sort(P, axis=1)[:, ::-1][:, : self.top_k].sum(axis=1)


class LogitThreshold:
    """A set calibrator that reads logits: keeps classes within `margin` of the top logit."""

    input_kind = "logits"
    epsilon, delta = 0.1, 0.05

    def __init__(self, margin=1.0):
        self.margin = margin

    def fit(self, logits, y):
        self.seen_logits_ = np.asarray(logits)
        return self

    def predict_sets(self, logits):
        return logits >= logits.max(axis=1, keepdims=True) - self.margin


@pytest.fixture
def mon():
    P, y = softmax_data(2000, K=5, seed=1)
    m = cw.Monitor(
        calibrators={
            "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1),
            "smx": SoftmaxRisk(),
            "smx-top2": SoftmaxRisk(top_k=2),
            "margin": LogitThreshold(),
        }
    )
    return m.calibrate(probs=P, y=y)


def test_risk_is_known_before_labels_and_compared_once_they_arrive(mon):
    P, y = softmax_data(400, K=5, seed=2)
    mon.observe(probs=P, ids=range(400))
    risk = mon.summary().filter(pl.col("kind") == "risk").sort("calibrator")
    expected = {"smx": 1 - P.max(axis=1), "smx-top2": 1 - np.sort(P, axis=1)[:, -2:].sum(axis=1)}
    for row in risk.iter_rows(named=True):
        assert row["estimated_error"] == pytest.approx(expected[row["calibrator"]].mean())
        assert row["observed_error"] is None and row["coverage"] is None and row["target"] is None
    mon.label(list(range(300)), y[:300])
    risk = {r["calibrator"]: r for r in mon.summary().filter(pl.col("kind") == "risk").iter_rows(named=True)}
    order = np.argsort(-P[:300], axis=1, kind="stable")
    top1_miss = order[:, 0] != y[:300]
    top2_miss = (order[:, 0] != y[:300]) & (order[:, 1] != y[:300])
    assert risk["smx"]["observed_error"] == pytest.approx(top1_miss.mean())
    assert risk["smx-top2"]["observed_error"] == pytest.approx(top2_miss.mean())
    assert risk["smx"]["estimated_error_labelled"] == pytest.approx(expected["smx"][:300].mean())
    assert risk["smx"]["error_gap"] == pytest.approx(expected["smx"][:300].mean() - top1_miss.mean())
    # the set calibrator's coverage is unaffected by the risk rows next to it
    aps = mon.summary().filter(pl.col("calibrator") == "aps").row(0, named=True)
    assert aps["kind"] == "sets" and aps["n_labelled"] == 300 and aps["estimated_error"] is None


def test_relabelling_updates_observed_error(mon):
    P, y = softmax_data(100, K=5, seed=3)
    mon.observe(probs=P, ids=range(100), y=y)
    top = P.argmax(axis=1)
    mon.label(list(range(100)), top)  # now every label is the top class: no misses
    row = mon.summary().filter(pl.col("calibrator") == "smx").row(0, named=True)
    assert row["n_labelled"] == 100 and row["observed_error"] == 0.0


def test_logit_calibrators_get_logits(mon):
    P, _ = softmax_data(50, K=5, seed=4)
    logits = np.log(P) + 3.0  # any shift: still logits of P
    mon.observe(logits=logits)
    margin = mon.calibrators["margin"]
    np.testing.assert_allclose(margin.seen_logits_.shape, (2000, 5))
    row = mon.summary().filter(pl.col("calibrator") == "margin").row(0, named=True)
    expected = (logits >= logits.max(axis=1, keepdims=True) - 1.0).sum(axis=1).mean()
    assert row["mean_set_size"] == pytest.approx(expected)
    assert row["target"] == pytest.approx(0.9)  # 1 − ε


def test_risk_rows_in_rows_frame_and_charts(mon):
    from calwatch.views import charts

    P, y = softmax_data(30, K=5, seed=5)
    mon.observe(probs=P, y=y)
    rows = mon.rows()
    np.testing.assert_allclose(rows["risk_smx"].to_numpy(), 1 - P.max(axis=1))
    assert "risk" in charts.chart_kinds(mon)
    labels = charts.calibrator_labels(mon)
    assert labels["margin"] == "margin: PAC ε=0.1, δ=0.05"
    assert labels["smx-top2"] == "smx-top2: softmax, top-2"
    data = charts.datasets(mon)
    assert set(data["set_sizes"]["calibrator"].unique()) == {"aps", "margin"}
    spec = mon.chart("risk").to_dict()
    # [0]: the x span; then the band (shaded), the estimate (solid), the observed rate (dashed)
    assert spec["layer"][1]["layer"][0]["encoding"]["y2"]["field"] == "band_hi"
    assert spec["layer"][1]["layer"][1]["encoding"]["y"]["field"] == "estimated_error"
    assert "risk" in mon.widget()._chart_order


def test_risk_only_monitor_has_no_set_charts():
    from calwatch.views import charts

    P, y = softmax_data(500, K=3, seed=6)
    mon = cw.Monitor(calibrators={"smx": SoftmaxRisk()}).calibrate(probs=P, y=y)
    assert charts.chart_kinds(mon) == ["risk", "risk_gap", "shift", "labels"]
    assert mon.targets() == {}


def test_bad_risk_output_rejected_and_state_kept(mon):
    class Broken(SoftmaxRisk):
        def row_risk(self, P):
            return np.zeros(3)

    P, y = softmax_data(200, K=5, seed=7)
    bad = cw.Monitor(calibrators={"broken": Broken()}).calibrate(probs=P, y=y)
    with pytest.raises(TypeError, match="returned risks of shape"):
        bad.observe(probs=P[:10])
    assert bad.n_batches == 0


def test_pac_sets_in_the_monitor_match_the_engine():
    from calwatch.engine.pac.sets import PACConfidenceSets

    P, y = softmax_data(3000, K=5, seed=8)
    mon = cw.Monitor(calibrators={"pac": PACConfidenceSets(epsilon=0.1, delta=0.05)})
    mon.calibrate(probs=P, y=y)
    Pt, yt = softmax_data(500, K=5, seed=9)
    mon.observe(probs=Pt, y=yt)
    pac = mon.calibrators["pac"]
    expected = pac.predict_sets(np.maximum(np.log(Pt), np.log(np.finfo(float).tiny)))
    row = mon.summary().row(0, named=True)
    assert row["target"] == pytest.approx(0.9)
    assert row["mean_set_size"] == pytest.approx(expected.sum(axis=1).mean())
    assert row["n_covered"] == int(expected[np.arange(500), yt].sum())
    from calwatch.views import charts

    assert charts.calibrator_labels(mon)["pac"] == "pac: PAC ε=0.1, δ=0.05"


@pytest.mark.parametrize("method", ["invcp", "softmax", "temperature", "platt", "histogram", "isotonic"])
def test_every_risk_method_runs_in_the_monitor_like_the_engine(method):
    P, y = softmax_data(3000, K=5, seed=10)
    mon = cw.Monitor(calibrators={"r": cw.RiskEstimator(method=method, top_k=2)}).calibrate(probs=P, y=y)
    Pt, yt = softmax_data(400, K=5, seed=11)
    mon.observe(probs=Pt, ids=range(400))
    row = mon.summary().row(0, named=True)
    assert row["estimated_error"] == pytest.approx(mon.calibrators["r"].estimate(Pt))
    mon.label(list(range(400)), yt)
    order = np.argsort(-Pt, axis=1, kind="stable")[:, :2]
    missed = (order != yt[:, None]).all(axis=1)
    row = mon.summary().row(0, named=True)
    assert row["observed_error"] == pytest.approx(missed.mean())


def test_each_risk_estimate_is_labelled_by_what_it_promises(tmp_path):
    # InvCP bounds the miss rate from above (paper 004: conservative); the calibration maps
    # estimate it; a custom estimator without ``promise`` gets no label rather than a wrong one.
    P, y = softmax_data(1500, seed=21)
    mon = cw.Monitor(
        calibrators={
            "invcp": cw.RiskEstimator(method="invcp"),
            "iso": cw.RiskEstimator(method="isotonic"),
            "smx": SoftmaxRisk(),
            "lac": cw.SplitConformalClassifier(),
        },
        shift=None,
    )
    mon.calibrate(probs=P[:1000], y=y[:1000])
    mon.observe(probs=P[1000:], y=y[1000:])
    promise = dict(mon.summary().select("calibrator", "estimate_promise").iter_rows())
    assert promise == {
        "invcp": "upper estimate (conservative)",
        "iso": "calibrated estimate",
        "smx": None,
        "lac": None,
    }
    from calwatch.views.charts import calibrator_labels

    labels = calibrator_labels(mon)
    assert labels["invcp"] == "invcp: invcp, top-1, upper estimate (conservative)"
    assert labels["iso"] == "iso: isotonic, top-1, calibrated estimate"
    assert labels["smx"] == "smx: softmax, top-1"
    mon.report(tmp_path / "report.html")
    html = (tmp_path / "report.html").read_text()
    assert "upper estimate (conservative)" in html and "calibrated estimate" in html


def test_guarded_estimator_in_the_monitor_says_its_band_and_survives_a_snapshot(tmp_path):
    P, y = softmax_data(3000, K=4, seed=7)
    mon = cw.Monitor(
        calibrators={"guarded": cw.RiskEstimator(method="guarded", delta=0.1, seed=4)}, shift=None
    )
    mon.calibrate(probs=P[:2000], y=y[:2000])
    mon.observe(probs=P[2000:], y=y[2000:])
    row = mon.summary().row(0, named=True)
    assert row["estimate_promise"] == "calibrated estimate with a 90% band"
    fitted = mon.calibrators["guarded"]
    assert row["estimated_error"] == pytest.approx(fitted.estimate(P[2000:]), rel=1e-12)
    low, high = fitted.band(P[2000:])
    assert low <= row["observed_error"] <= high  # calibrated synthetic model, drawn like the calibration rows
    # The summary carries the band: the same numbers up to the order of the float sums.
    assert row["error_band_lo"] == pytest.approx(low, rel=1e-12)
    assert row["error_band_hi"] == pytest.approx(high, rel=1e-12)
    # A pooled record is one batch of its rows: its band is that of all of them (narrower).
    mon.observe(probs=P[:500])
    from calwatch.stream.records import merge_records

    pooled = mon.summary_of([merge_records(mon.batch_records)]).row(0, named=True)
    both = np.concatenate([P[2000:], P[:500]])
    assert (pooled["error_band_lo"], pooled["error_band_hi"]) == pytest.approx(fitted.band(both), rel=1e-12)
    assert pooled["error_band_hi"] - pooled["error_band_lo"] < high - low
    mon.save(tmp_path / "snap")
    back = cw.Monitor.load(tmp_path / "snap").calibrators["guarded"]
    assert (back.delta, back.seed, back.n_holdout_) == (0.1, 4, 1000)
    assert back.band(P[2000:]) == (low, high)


def test_risk_chart_shades_the_band_of_the_guarded_estimator_only():
    import json
    import re

    import vl_convert

    P, y = softmax_data(3000, K=4, seed=7)

    def shaded(calibrators):
        """The area (px²) enclosed by each band of the risk chart, drawn by Vega."""
        mon = cw.Monitor(calibrators=calibrators, shift=None).calibrate(probs=P[:2000], y=y[:2000])
        mon.observe(probs=P[2000:2500], y=y[2000:2500])
        mon.observe(probs=P[2500:])
        svg = vl_convert.vegalite_to_svg(json.dumps(mon.chart("risk").to_dict()))
        areas = re.findall(r'aria-roledescription="area mark"[^>]*d="([^"]+)"', svg)
        out = []
        for d in areas:  # a polygon of straight segments: the shoelace formula
            xy = np.array(re.findall(r"(-?[\d.]+),(-?[\d.]+)", d), dtype=float)
            x, y_ = xy[:, 0], xy[:, 1]
            out.append(abs(float(np.dot(x, np.roll(y_, -1)) - np.dot(y_, np.roll(x, -1)))) / 2)
        return sorted(out)

    # One area per risk estimator: the guarded one's encloses its band, InvCP's (no band) none.
    invcp_only = shaded({"invcp": cw.RiskEstimator()})
    assert len(invcp_only) == 1 and invcp_only[0] < 1e-6
    both = shaded({"guarded": cw.RiskEstimator(method="guarded"), "invcp": cw.RiskEstimator()})
    assert len(both) == 2 and both[0] < 1e-6 and both[1] > 100
