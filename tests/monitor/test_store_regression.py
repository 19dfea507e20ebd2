"""Snapshots of regression monitors: round trips, late labels after loading, refusing damage."""

import hashlib
import json
import math

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from sklearn.linear_model import LinearRegression

import calwatch as cw
from calwatch.__main__ import main
from calwatch.core.codec import SnapshotError
from calwatch.engine.regression.calibrator import ModularConformalCalibrator
from calwatch.engine.regression.scores import CDFPrediction
from calwatch.monitor.regression import RegressionMonitor
from calwatch.snapshot.store import read_manifest
from calwatch.views import charts

from ..synthetic import pets_monitor


def _tiny():
    """Calibration residuals -2, -1, 1, 2: knots (-3, 0) (-2, .2) (-1, .4) (1, .6) (2, .8) (3, 1)."""
    mon = cw.Monitor(
        task="regression", calibrators={"mcc": ModularConformalCalibrator(prediction="point")}, name="tiny"
    )
    mon.calibrate(pred=np.zeros(4), y=[-2.0, -1.0, 1.0, 2.0])
    mon.observe(pred=[0.0, 10.0], ids=["a", "b"])
    mon.label(["a"], [0.5])
    return mon


def test_hand_computed_snapshot_holds_the_rows_and_statistics(tmp_path):
    mon = _tiny()
    mon.save(tmp_path / "snap")
    assert read_manifest(tmp_path / "snap")["task"] == "regression"
    rows = pl.read_parquet(tmp_path / "snap" / "rows.parquet")
    assert rows["id"].to_list() == ["a", "b"]
    assert rows["pred_0"].to_list() == [0.0, 10.0]
    assert rows["y"][0] == 0.5 and math.isnan(rows["y"][1])  # NaN until labelled
    assert "reg_0_u" not in rows.columns  # linear interpolation draws nothing
    # F(y) = q(y − μ), end knots one mean gap (4/3) beyond the scores: (−10/3, 0) ... (10/3, 1).
    # median 0; q⁻¹(.25) = −2 + (.05/.2)·1 = −1.75; q⁻¹(.05) = −10/3 + (.05/.2)·4/3 = −3
    expected = {
        "median": [0.0, 10.0], "lower_50": [-1.75, 8.25], "upper_50": [1.75, 11.75],
        "lower_90": [-3.0, 7.0], "upper_90": [3.0, 13.0],
    }  # fmt: skip
    for name, values in expected.items():
        assert rows[f"reg_0_{name}"].to_list() == pytest.approx(values, abs=1e-12), name
    batch = pl.read_parquet(tmp_path / "snap" / "batches.parquet").row(0, named=True)
    assert (batch["kind"], batch["levels"]) == ("regression", [0.5, 0.9])
    assert (batch["n_rows"], batch["n_labelled"]) == (2, 1)
    assert batch["width_sum"] == pytest.approx([2 * 3.5, 2 * 6.0])
    assert batch["covered"] == [1, 1]  # 0.5 lies in [−1.75, 1.75]
    assert batch["pit_counts"] == [0, 0, 0, 0, 0, 1, 0, 0, 0, 0]  # q(0.5) = .4 + .75 · .2 = .55
    state = json.loads((tmp_path / "snap" / "state.json").read_text())
    assert state["task"] == "regression"
    assert state["monitor"]["_calibrators"]["mcc"]["class"].endswith("ModularConformalCalibrator")
    assert "via_state" in state["monitor"]["_calibrators"]["mcc"]  # its own state(): no attributes walk

    loaded = cw.Monitor.load(tmp_path / "snap")
    assert type(loaded) is RegressionMonitor
    assert loaded.rows()["pit_mcc"].to_list() == pytest.approx([0.55, None])
    for run in (mon, loaded):
        report = run.label(["b", "z"], [20.0, 1.0])  # far above: PIT 1, outside both intervals
        assert (report.matched, report.unmatched) == (1, 1)
        row = run.summary().row(0, named=True)
        assert (row["n_labelled"], row["n_covered"], row["coverage_50"]) == (2, 1, 0.5)
        assert run.pit_histogram()["count"].to_list() == [1, 1]
    assert_frame_equal(mon.summary(), loaded.summary())
    assert mon.status() == loaded.status()


def _data(rng, n, noise=1.0):
    x = rng.normal(size=n)
    return x, 2 * x + noise * rng.normal(size=n)


def _calibrators():
    return {
        "linear": ModularConformalCalibrator(prediction="point"),
        "random": ModularConformalCalibrator(prediction="point", interpolation="random", seed=1),
        "naf": ModularConformalCalibrator(
            prediction="point", interpolation="naf", naf_epochs=30, progress=False
        ),
    }


def _stream(*, window=100_000, model=None):
    """Four batches (the last two noisier), the first fully and the second half labelled."""
    rng = np.random.default_rng(0)
    x, y = _data(rng, 1500)
    mon = cw.Monitor(
        model,
        task="regression",
        calibrators=_calibrators(),
        levels=(0.5, 0.8, 0.95),
        window=window,
        name="synthetic regression",
        provenance={"data": "y = 2x + noise"},
    )
    if model is None:
        mon.calibrate(pred=2 * x, y=y)
    else:
        mon.calibrate(x.reshape(-1, 1), y)
    batches = [_data(rng, 300, noise=1.0 if b < 2 else 2.0) for b in range(4)]
    for b, (xb, _) in enumerate(batches):
        if model is None:
            mon.observe(pred=2 * xb, ids=[f"{b}-{i}" for i in range(300)], name=f"week {b}")
        else:
            mon.observe(xb.reshape(-1, 1), ids=[f"{b}-{i}" for i in range(300)], name=f"week {b}")
    mon.label([f"0-{i}" for i in range(300)], batches[0][1])
    mon.label([f"1-{i}" for i in range(150)], batches[1][1][:150])
    mon.note("noise doubles here", batch=2, author="ana")
    return mon, batches


def _equal_views(a, b, *, drop=(), rows_without=()):
    assert_frame_equal(a.summary().drop(*drop), b.summary().drop(*drop))
    assert_frame_equal(a.pit_histogram(), b.pit_histogram())
    assert_frame_equal(a.rows().drop(rows_without), b.rows().drop(rows_without))
    assert_frame_equal(a.notes(), b.notes())
    assert a.status() == b.status()


@pytest.fixture(scope="module")
def streamed():
    return _stream()


def test_round_trip_reproduces_every_view(streamed, tmp_path):
    mon, _ = streamed
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    _equal_views(mon, loaded)
    assert (loaded.name, loaded.levels, loaded.window) == (mon.name, mon.levels, mon.window)
    assert (loaded.provenance, loaded.model_description) == (mon.provenance, mon.model_description)
    assert loaded.calibration_ == mon.calibration_
    assert loaded.rows()["pit_naf"].null_count() == 2 * 300 + 150  # unlabelled rows have no PIT
    for kind in charts.chart_kinds(mon):
        assert charts.build(kind, loaded).to_dict() == charts.build(kind, mon).to_dict(), kind


def test_late_labels_and_new_batches_after_loading_match_the_original(tmp_path):
    """Labels for rows saved unlabelled, relabels, new batches with fresh random draws: all equal."""
    mon, batches = _stream()
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    rng = np.random.default_rng(9)
    x_new, y_new = _data(rng, 200, noise=3.0)
    for run in (mon, loaded):
        run.label([f"1-{i}" for i in range(300)], batches[1][1])  # 150 relabels, 150 new
        run.label([f"2-{i}" for i in range(0, 300, 2)], batches[2][1][::2])
        run.label([f"0-{i}" for i in range(10)], batches[0][1][:10] + 5.0)  # corrected labels
        assert run.observe(pred=2 * x_new, ids=[f"new-{i}" for i in range(200)], y=y_new) == 4
    _equal_views(mon, loaded, drop=("observed_at",))
    assert mon.summary().filter(pl.col("batch") == 2)["n_labelled"].to_list() == [150] * 3
    random_u = [
        run._stream.batches[4].rows.regression["per_calibrator"]["random"]["u"] for run in (mon, loaded)
    ]
    np.testing.assert_array_equal(*random_u)  # the draws continued from the saved generator


def test_window_expiry_and_auto_ids_survive(tmp_path):
    mon, _ = _stream(window=600)
    assert mon.status()["rows_in_window"] == 600 < mon.status()["rows_seen"]
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    _equal_views(mon, loaded)
    assert loaded.label(["0-0"], [1.0]).unmatched == 1  # expired with its batch
    x = np.linspace(-1, 1, 5)
    assert loaded.observe(pred=x) == mon.observe(pred=x) == 4
    assert loaded.rows(batch=4)["id"].to_list() == mon.rows(batch=4)["id"].to_list() == [0, 1, 2, 3, 4]


def test_quantile_and_ensemble_predictions_round_trip(tmp_path):
    rng = np.random.default_rng(3)

    def ensemble(n):
        x = rng.normal(size=n)
        y = x + rng.normal(size=n)
        return [x, np.column_stack([x, np.full(n, 1.2)])], y

    pred, y = ensemble(800)
    mon = cw.Monitor(
        task="regression", calibrators={"ens": ModularConformalCalibrator(prediction="ensemble")}
    )
    mon.calibrate(pred=pred, y=y)
    pred, y = ensemble(50)
    mon.observe(pred=pred, ids=[("t", i) for i in range(50)])  # tuple ids
    mon.label([("t", i) for i in range(20)], y[:20])
    mon.save(tmp_path / "snap")
    schema = pl.read_parquet_schema(tmp_path / "snap" / "rows.parquet")
    assert schema["pred_0_0"] == pl.Float64 and schema["pred_0_1"] == pl.Array(pl.Float64, 2)
    loaded = cw.Monitor.load(tmp_path / "snap")
    _equal_views(mon, loaded, rows_without="id")  # object columns do not compare
    assert loaded.rows()["id"].to_list() == mon.rows()["id"].to_list() == [("t", i) for i in range(50)]
    for run in (mon, loaded):
        run.label([("t", i) for i in range(20, 50)], y[20:])
    _equal_views(mon, loaded, rows_without="id")


def test_model_is_reattached_on_load(tmp_path):
    rng = np.random.default_rng(0)
    x, y = _data(rng, 500)
    model = LinearRegression().fit(x[:200].reshape(-1, 1), y[:200])
    mon = cw.Monitor(model, calibrators=_calibrators())  # a regressor: a regression monitor
    mon.calibrate(x[200:400].reshape(-1, 1), y[200:400])
    mon.save(tmp_path / "snap")
    assert read_manifest(tmp_path / "snap")["model"] == "sklearn.linear_model._base.LinearRegression"
    without = cw.Monitor.load(tmp_path / "snap")
    with pytest.raises(ValueError, match=r"Monitor.load\(path, model=model\)"):
        without.observe(x[400:].reshape(-1, 1))
    with pytest.raises(TypeError, match="model must have predict"):
        cw.Monitor.load(tmp_path / "snap", model="not a model")
    with pytest.raises(TypeError, match="embedding_layer applies to torch classifiers"):
        cw.Monitor.load(tmp_path / "snap", model=model, embedding_layer="fc")
    with_model = RegressionMonitor.load(tmp_path / "snap", model=model)
    for run in (mon, with_model):
        run.observe(x[400:].reshape(-1, 1), y=y[400:])
    _equal_views(mon, with_model, drop=("observed_at",))


def test_loading_as_the_wrong_kind_of_monitor_is_refused(tmp_path):
    pets_monitor().save(tmp_path / "pets")
    with pytest.raises(SnapshotError, match="holds a Monitor, not a RegressionMonitor"):
        RegressionMonitor.load(tmp_path / "pets")


def test_reports_of_a_loaded_snapshot_and_from_the_command_line(streamed, tmp_path, capsys):
    mon, _ = streamed
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    page = loaded.report(tmp_path / "loaded.html").read_text()
    assert "synthetic regression" in page and "y = 2x + noise" in page
    assert main(["report", str(tmp_path / "snap")]) == 0
    assert f"wrote {tmp_path / 'snap.html'}" in capsys.readouterr().out
    page = (tmp_path / "snap.html").read_text()
    assert "snapshot saved at" in page and "none (precomputed predictions)" in page


def test_callable_distributions_cannot_be_saved_and_nothing_is_written(tmp_path):
    from scipy import stats

    def dist(mu):
        return CDFPrediction.from_scipy(stats.norm(loc=mu, scale=1.0))

    rng = np.random.default_rng(0)
    x, y = _data(rng, 300)
    calibrator = ModularConformalCalibrator(prediction="distribution", score="cdf")
    mon = cw.Monitor(task="regression", calibrators={"cdf": calibrator})
    mon.calibrate(pred=dist(2 * x), y=y)
    mon.observe(pred=dist(2 * x[:5]))
    with pytest.raises(SnapshotError, match="CDFPrediction cannot be saved in a snapshot"):
        mon.save(tmp_path / "snap")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_save_keeps_the_old_snapshot(tmp_path, monkeypatch):
    mon, batches = _stream()
    target = tmp_path / "snap"
    mon.save(target)
    before = read_manifest(target)

    def broken(self, *args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(pl.DataFrame, "write_parquet", broken)
    mon.label([f"2-{i}" for i in range(300)], batches[2][1])
    with pytest.raises(OSError, match="disk full"):
        mon.save(target)
    monkeypatch.undo()
    assert read_manifest(target) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap"]


# ---------------------------------------------------------------------------- damaged snapshots
@pytest.fixture
def snapshot(streamed, tmp_path):
    path = tmp_path / "snap"
    streamed[0].save(path)
    return path


def _files(path):
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def _load_fails(snapshot, message):
    before = _files(snapshot)
    with pytest.raises(SnapshotError, match=message):
        cw.Monitor.load(snapshot)
    assert _files(snapshot) == before  # loading changes nothing


def test_truncated_file_is_reported(snapshot):
    data = (snapshot / "rows.parquet").read_bytes()
    (snapshot / "rows.parquet").write_bytes(data[: len(data) // 2])
    _load_fails(snapshot, r"truncated or altered: rows\.parquet")


def test_corrupted_bytes_are_reported(snapshot):
    data = bytearray((snapshot / "batches.parquet").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (snapshot / "batches.parquet").write_bytes(bytes(data))
    _load_fails(snapshot, r"corrupted: batches\.parquet does not match its checksum")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: (p / "manifest.json").unlink(), "has no manifest.json"),
        (lambda p: (p / "manifest.json").write_text("{not json"), "manifest.json .* is corrupted"),
        (lambda p: (p / "state.json").unlink(), "incomplete: state.json is missing"),
        (lambda p: (p / "arrays.parquet").unlink(), "incomplete: arrays.parquet is missing"),
    ],
)
def test_missing_or_broken_files_are_reported(snapshot, damage, message):
    damage(snapshot)
    _load_fails(snapshot, message)


def _resign(snapshot, name):
    """Re-sign a file after changing it, as someone who can write the folder would."""
    manifest = json.loads((snapshot / "manifest.json").read_text())
    data = (snapshot / name).read_bytes()
    manifest["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (snapshot / "manifest.json").write_text(json.dumps(manifest))


def _rewrite(snapshot, name, edit):
    if name == "state.json":
        state = json.loads((snapshot / name).read_text())
        edit(state)
        (snapshot / name).write_text(json.dumps(state))
    else:
        edit(pl.read_parquet(snapshot / name)).write_parquet(snapshot / name)
    _resign(snapshot, name)


@pytest.mark.parametrize(
    ("name", "edit", "message"),
    [
        ("state.json", lambda s: s.update(task="ranking"), "unknown task 'ranking'"),
        (
            "state.json",
            lambda s: s["monitor"].update(levels={"$": "tuple", "items": [0.5, 2.0]}),
            r"regression levels are malformed: \(0.5, 2.0\)",
        ),
        (
            "rows.parquet",
            lambda f: f.with_columns(y=pl.when(pl.col("batch") == 3).then(1.0).otherwise(pl.col("y"))),
            "disagree on the labelled rows of batch 3",
        ),
        (
            "state.json",
            lambda s: s["row_columns"]["regression_fields"].pop(),
            "other calibrators or interval",
        ),
        ("rows.parquet", lambda f: f.drop("reg_1_u"), r"could not be read: ColumnNotFoundError"),
        ("rows.parquet", lambda f: f.head(-1), "rows.parquet holds 299 rows of batch 3, not 300"),
        (
            "batches.parquet",
            lambda f: f.with_columns(pit_counts=pl.col("pit_counts").list.head(9)),
            "malformed regression statistics for batch 0",
        ),
        (
            "batches.parquet",
            lambda f: f.with_columns(n_labelled=pl.col("n_labelled") + 1),
            "malformed regression statistics for batch 0",
        ),
    ],
)
def test_malformed_but_signed_files_are_reported(snapshot, name, edit, message):
    _rewrite(snapshot, name, edit)
    _load_fails(snapshot, message)


def test_a_rejected_batch_consumes_no_random_draws():
    """A random calibrator draws u before a later calibrator refuses the batch: nothing is kept."""
    rng = np.random.default_rng(0)
    x, y = _data(rng, 300)
    mon = cw.Monitor(task="regression", calibrators={"random": _calibrators()["random"]})
    mon.calibrate(pred=2 * x, y=y)
    quantile = ModularConformalCalibrator(prediction="quantile", quantile_levels=[0.25, 0.75])
    mon._calibrators["quantile"] = quantile.fit(np.column_stack([2 * x - 1, 2 * x + 1]), y)
    state = mon._draws.bit_generator.state
    with pytest.raises(ValueError, match="pred"):
        mon.observe(pred=2 * x[:5])  # the quantile calibrator needs (m, 2)
    assert mon._draws.bit_generator.state == state
    assert mon.n_batches == 0


def test_hotel_prices_round_trip_with_the_model_reattached(tmp_path):
    """notebooks/03-regression's stream, 250 bookings a month: a loaded copy carries on identically."""
    from calwatch.datasets.regression import hotel_rates_task

    task = hotel_rates_task()
    options = task.calibrator_options
    mon = cw.Monitor(
        task.model,
        task="regression",
        calibrators={
            "linear": ModularConformalCalibrator(**options),
            "random": ModularConformalCalibrator(**options, interpolation="random", seed=0),
        },
        name="Hotel prices",
        provenance={"data": "modeldata::hotel_rates"},
    )
    mon.calibrate(task.X_cal, task.y_cal)
    months = [(m.name, m.X[:250], m.ids[:250], m.y[:250]) for m in task.stream[:4]]
    for name, X, ids, _ in months[:3]:
        mon.observe(X, ids=ids, name=name)
    mon.label(months[0][2], months[0][3])
    mon.label(months[1][2][:100], months[1][3][:100])
    mon.save(tmp_path / "hotel")
    loaded = cw.Monitor.load(tmp_path / "hotel", model=task.model)
    _equal_views(mon, loaded)
    assert read_manifest(tmp_path / "hotel")["model"] == "calwatch.datasets.regression.BoostedRegressor"
    name, X, ids, y = months[3]
    for run in (mon, loaded):
        run.label(months[1][2], months[1][3])
        run.label(months[2][2][::2], months[2][3][::2])
        run.observe(X, ids=ids, name=name)
        run.label(ids[:50], y[:50])
    _equal_views(mon, loaded, drop=("observed_at",))
    summary = loaded.summary()
    assert summary["n_labelled"].to_list() == [250, 250, 250, 250, 125, 125, 50, 50]
    # February, next to the January calibration, covers near 0.9 (0.88 with seed 0); the binomial
    # sd at 250 rows is sqrt(.9·.1/250) = 0.019, so 0.8 is over 4 sd below: the model ran on load
    assert summary.filter(pl.col("batch") == 0)["coverage"].min() > 0.8
