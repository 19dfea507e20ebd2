"""Snapshots: save / load round trips, atomic writes, and refusing corrupt or foreign state."""

import json
import math
from collections import deque
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from sklearn.linear_model import LogisticRegression

import calwatch as cw
from calwatch.core.codec import SnapshotError, StateDecoder, StateEncoder
from calwatch.snapshot.store import read_manifest
from calwatch.views import charts

from ..synthetic import PET_CLASSES, pets_monitor, softmax_data

CLASSES = PET_CLASSES


def _stream(seed=0, *, calibrators=None, window=100_000):
    return pets_monitor(seed, calibrators=calibrators, window=window)


def _continue(mon, start=50):
    names = np.array(CLASSES)
    P, y = softmax_data(500, seed=start, scale=0.4)
    mon.observe(probs=P, ids=[f"c-{i}" for i in range(500)])
    mon.label([f"b5-{i}" for i in range(400)], names[softmax_data(400, seed=105, scale=0.5)[1]])
    mon.label([f"c-{i}" for i in range(500)], names[y])
    return mon


def _equal_views(a, b, *, drop=()):
    assert_frame_equal(a.summary().drop(*drop), b.summary().drop(*drop))
    assert_frame_equal(a.class_coverage(), b.class_coverage())
    assert_frame_equal(a.set_size_counts(), b.set_size_counts())
    assert_frame_equal(a.rows(), b.rows())
    assert_frame_equal(a.warnings(), b.warnings())
    assert_frame_equal(a.notes(), b.notes())
    assert a.status() == b.status()


def test_round_trip_reproduces_every_view(tmp_path):
    mon = _stream()
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    _equal_views(mon, loaded)
    assert loaded.name == "pets"
    assert loaded.classes_.tolist() == CLASSES
    assert loaded.calibration_ == mon.calibration_
    for kind in charts.chart_kinds(mon):
        assert charts.build(kind, loaded).to_dict() == charts.build(kind, mon).to_dict(), kind


def test_loaded_monitor_keeps_streaming_like_the_original(tmp_path):
    """Calibrators, ACI levels, random generators and martingales continue exactly."""
    mon = _stream()
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    _continue(mon)
    _continue(loaded)
    _equal_views(mon, loaded, drop=("observed_at",))
    assert mon.shift_watch.look_rows() == loaded.shift_watch.look_rows()
    assert loaded.calibrators["aci"].alpha_t_ == mon.calibrators["aci"].alpha_t_
    assert len(mon.warnings()) > 0  # the drifted batches did raise warnings, so the log is compared


def test_detectors_shared_between_monitor_and_shift_layer_stay_shared(tmp_path):
    from calwatch.shift import ConfidenceMartingale

    detectors = [ConfidenceMartingale()]
    P, y = softmax_data(1000, seed=1)
    mon = cw.Monitor(shift=detectors).calibrate(probs=P, y=y)
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    assert loaded._shift_spec[0] is loaded.shift_watch.detectors[0]


def test_window_expiry_and_auto_ids_survive(tmp_path):
    mon = _stream(window=1000)
    assert mon.status()["rows_in_window"] < mon.status()["rows_seen"]
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    _equal_views(mon, loaded)
    P, _ = softmax_data(10, seed=7)
    assert loaded.observe(probs=P) == mon.observe(probs=P)
    assert loaded.rows(batch=6)["id"].to_list() == mon.rows(batch=6)["id"].to_list()


def test_tuple_ids_and_categories_round_trip(tmp_path):
    P, y = softmax_data(1000, seed=2)
    cats = np.where(P[:, 0] > 0.3, "hi", "lo")
    mon = cw.Monitor(
        calibrators={"cat": cw.SplitConformalClassifier(score="lac", mondrian="category")}, shift=None
    )
    mon.calibrate(probs=P, y=y, categories=cats)
    mon.observe(probs=P[:20], ids=[("a", i) for i in range(20)], categories=cats[:20])
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    assert loaded.rows()["id"].to_list() == [("a", i) for i in range(20)]  # tuples, not lists
    assert_frame_equal(mon.rows().drop("id"), loaded.rows().drop("id"))
    report = loaded.label([("a", 3)], [y[3]])
    assert report.matched == 1


def test_model_is_reattached_on_load(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 3))
    y = (X[:, 0] + rng.normal(size=600) > 0).astype(int)
    model = LogisticRegression().fit(X[:300], y[:300])
    mon = cw.Monitor(model, shift=None).calibrate(X[300:500], y[300:500])
    mon.save(tmp_path / "snap")
    manifest = read_manifest(tmp_path / "snap")
    assert manifest["model"] == "sklearn.linear_model._logistic.LogisticRegression"
    without = cw.Monitor.load(tmp_path / "snap")
    with pytest.raises(ValueError, match=r"Monitor.load\(path, model=model\)"):
        without.observe(X[500:])
    with_model = cw.Monitor.load(tmp_path / "snap", model=model)
    assert with_model.observe(X[500:]) == 0
    mon.observe(X[500:])
    assert_frame_equal(mon.rows(), with_model.rows())


def test_saving_again_replaces_the_snapshot_atomically(tmp_path):
    mon = _stream()
    target = tmp_path / "snap"
    mon.save(target)
    _continue(mon)
    mon.save(target)
    assert cw.Monitor.load(target).status() == mon.status()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap"]  # no temporary folders left


def test_a_failed_save_keeps_the_old_snapshot(tmp_path, monkeypatch):
    mon = _stream()
    target = tmp_path / "snap"
    mon.save(target)
    before = read_manifest(target)

    def broken(self, *args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(pl.DataFrame, "write_parquet", broken)
    _continue(mon)
    with pytest.raises(OSError, match="disk full"):
        mon.save(target)
    monkeypatch.undo()
    assert read_manifest(target) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap"]


def test_refuses_to_overwrite_a_folder_that_is_not_a_snapshot(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "thesis.txt").write_text("precious")
    with pytest.raises(SnapshotError, match="not a calwatch snapshot"):
        _stream().save(folder)
    assert (folder / "thesis.txt").read_text() == "precious"


def test_unsaveable_state_is_refused_before_anything_is_written(tmp_path):
    class Foreign:  # a calibrator defined outside calwatch, holding a scikit-learn model
        def __init__(self):
            self.inner = cw.SplitConformalClassifier(score="lac")
            self.model = LogisticRegression()

        def fit(self, P, y):
            self.inner.fit(P, y)
            return self

        def predict_sets(self, P):
            return self.inner.predict_sets(P)

    P, y = softmax_data(500, seed=3)
    mon = cw.Monitor(calibrators={"foreign": Foreign()}, shift=None).calibrate(probs=P, y=y)
    with pytest.raises(SnapshotError, match=r"calibrators'\]\['foreign'\].*cannot be saved"):
        mon.save(tmp_path / "snap")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def snapshot(tmp_path):
    path = tmp_path / "snap"
    _stream().save(path)
    return path


def test_truncated_file_is_reported(snapshot):
    data = (snapshot / "rows.parquet").read_bytes()
    (snapshot / "rows.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(SnapshotError, match=r"truncated or altered: rows\.parquet"):
        cw.Monitor.load(snapshot)


def test_corrupted_bytes_are_reported(snapshot):
    data = bytearray((snapshot / "arrays.parquet").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (snapshot / "arrays.parquet").write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match=r"corrupted: arrays\.parquet does not match its checksum"):
        cw.Monitor.load(snapshot)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: (p / "manifest.json").unlink(), "has no manifest.json"),
        (lambda p: (p / "manifest.json").write_text("{not json"), "manifest.json .* is corrupted"),
        (lambda p: (p / "state.json").unlink(), "incomplete: state.json is missing"),
    ],
)
def test_missing_or_broken_files_are_reported(snapshot, damage, message):
    damage(snapshot)
    with pytest.raises(SnapshotError, match=message):
        cw.Monitor.load(snapshot)


def _rewrite_state(snapshot, edit):
    """Change state.json and re-sign it, as an attacker who can write the folder would."""
    state = json.loads((snapshot / "state.json").read_text())
    edit(state)
    (snapshot / "state.json").write_text(json.dumps(state))
    manifest = json.loads((snapshot / "manifest.json").read_text())
    import hashlib

    data = (snapshot / "state.json").read_bytes()
    manifest["files"]["state.json"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (snapshot / "manifest.json").write_text(json.dumps(manifest))


def test_a_snapshot_naming_code_outside_calwatch_is_refused(snapshot, tmp_path):
    marker = tmp_path / "pwned"

    def inject(state):
        state["monitor"]["name"] = {"$": "function", "name": "os:system"}
        state["monitor"]["_tolerance"] = {"$": "object", "class": "subprocess:Popen", "id": 999, "attrs": {}}

    _rewrite_state(snapshot, inject)
    with pytest.raises(SnapshotError, match="not part of calwatch: refusing to load it"):
        cw.Monitor.load(snapshot)
    assert not marker.exists()


def test_a_snapshot_with_object_arrays_is_refused(snapshot):
    frame = pl.read_parquet(snapshot / "arrays.parquet")
    frame = frame.with_columns(pl.lit("|O").alias("dtype"))
    frame.write_parquet(snapshot / "arrays.parquet")
    manifest = json.loads((snapshot / "manifest.json").read_text())
    import hashlib

    data = (snapshot / "arrays.parquet").read_bytes()
    manifest["files"]["arrays.parquet"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (snapshot / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SnapshotError, match="dtype '\\|O', which snapshots never hold"):
        cw.Monitor.load(snapshot)


def test_codec_round_trips_plain_values_exactly():
    rng = np.random.default_rng(5)
    rng.random(3)
    value = {
        "nan": math.nan,
        "inf": -math.inf,
        "tuple_keys": {("a", 1): [1, 2.5, None]},
        "set": {3, 1},
        "deque": deque([1, 2], maxlen=4),
        "when": datetime(2026, 11, 22, 8, 0, tzinfo=UTC),
        "f32": np.float32(0.1),
        "labels": np.array(["a", "bb"]),
        "objects": np.array(["x", 2], dtype=object),
        "rng": rng,
        "$": "a key that looks like a tag",
    }
    enc = StateEncoder()
    tree = json.loads(json.dumps(enc.encode(value), allow_nan=False))
    back = StateDecoder(enc.arrays).decode(tree)
    assert math.isnan(back["nan"]) and back["inf"] == -math.inf
    assert back["tuple_keys"] == {("a", 1): [1, 2.5, None]}
    assert back["set"] == {1, 3} and back["deque"] == deque([1, 2], maxlen=4)
    assert back["deque"].maxlen == 4 and back["when"] == value["when"]
    assert back["f32"].dtype == np.float32 and back["f32"] == np.float32(0.1)
    assert back["labels"].tolist() == ["a", "bb"] and back["objects"].tolist() == ["x", 2]
    assert back["rng"].random() == rng.random()  # the generator continues where it was
    assert back["$"] == "a key that looks like a tag"


def test_notes_are_validated_and_kept(tmp_path, monkeypatch):
    mon = _stream()
    monkeypatch.setenv("CALWATCH_AUTHOR", "reviewer")
    note = mon.note("  check the owls  ")
    assert (note.text, note.author, note.batch) == ("check the owls", "reviewer", None)
    with pytest.raises(ValueError, match="text must be a non-empty string"):
        mon.note("   ")
    with pytest.raises(ValueError, match=r"batch must be the index of an observed batch \(0..5\)"):
        mon.note("x", batch=6)
    with pytest.raises(ValueError, match="episode must be a warning number"):
        mon.note("x", episode=999)
    notes = mon.notes()
    assert notes["author"].to_list() == ["ana", "reviewer"]
    assert notes["text"][0] == "drift starts <b>here</b>"  # stored as typed; views escape it
    assert Path(mon.save(tmp_path / "s")).is_dir()
    assert_frame_equal(cw.Monitor.load(tmp_path / "s").notes(), notes)
