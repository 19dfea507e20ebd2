"""The label-free reference distance martingale: on by default when the model gives embeddings."""

import numpy as np
import polars as pl
import pytest

import calwatch as cw
from calwatch.shift import CalibrationData, ReferenceDistanceMartingale


def _embedded(rng, n, shift=0.0):
    E = rng.normal(size=(n, 6)).astype(np.float32) + np.float32(shift)
    logits = E[:, :3].astype(np.float64)
    y = logits.argmax(axis=1)
    return E, logits, y


def test_default_detectors_include_it_only_with_embeddings():
    rng = np.random.default_rng(0)
    E, L, y = _embedded(rng, 600)
    with_emb = cw.Monitor().calibrate(logits=L, embeddings=E, y=y)
    without = cw.Monitor().calibrate(logits=L, y=y)
    names = [d.name for d in with_emb.shift_watch.detectors]
    assert "reference distance martingale" in names
    assert "reference distance martingale" not in [d.name for d in without.shift_watch.detectors]


def test_scores_are_distances_to_the_indexed_half_mapped_monotonically():
    """Hand check on 4 calibration rows in 1-D: the seeded split indexes two, scores the others."""
    E = np.array([[0.0], [1.0], [3.0], [7.0]], dtype=np.float32)
    det = ReferenceDistanceMartingale(seed=0)
    det.calibrate(CalibrationData(np.full((4, 2), 0.5), np.zeros(4, dtype=np.intp), {}, E))
    reference = np.sort(det.index_.reference[:, 0])
    scored = np.setdiff1d(E[:, 0], reference)
    d = np.abs(scored[:, None] - reference[None, :]).min(axis=1)
    assert det.scale_ == pytest.approx(np.median(d))
    q = np.array([[2.0], [100.0]], dtype=np.float32)
    dq = np.abs(q[:, 0][:, None] - reference[None, :]).min(axis=1)
    assert det._score(dq.astype(np.float64)) == pytest.approx(dq / (dq + det.scale_))
    assert 0 <= det._score(np.array([0.0]))[0] < det._score(np.array([1e9]))[0] < 1


def test_alarms_when_rows_move_away_and_stays_quiet_otherwise():
    rng = np.random.default_rng(1)
    E, L, y = _embedded(rng, 2000)
    detectors = [ReferenceDistanceMartingale(statistic="ville", threshold=100.0)]
    mon = cw.Monitor(shift=detectors).calibrate(logits=L, embeddings=E, y=y)
    for _ in range(5):
        E_b, L_b, _ = _embedded(rng, 400)
        mon.observe(logits=L_b, embeddings=E_b)
    assert mon.warnings().is_empty()
    for _ in range(3):
        E_b, L_b, _ = _embedded(rng, 400, shift=1.5)
        mon.observe(logits=L_b, embeddings=E_b)
    warnings = mon.warnings()
    assert warnings["name"].to_list() == ["reference distance martingale"]
    assert warnings["first_batch"][0] >= 5
    assert "distances of new rows to the calibration embeddings" in warnings["explanation"][0]


def test_a_batch_without_embeddings_is_skipped_not_an_error():
    rng = np.random.default_rng(2)
    E, L, y = _embedded(rng, 500)
    mon = cw.Monitor(shift=[ReferenceDistanceMartingale()]).calibrate(logits=L, embeddings=E, y=y)
    mon.observe(logits=L[:50])
    looks = mon.shift_watch.look_rows()
    assert looks == []


def test_snapshot_keeps_the_reference_index(tmp_path):
    rng = np.random.default_rng(3)
    E, L, y = _embedded(rng, 800)
    mon = cw.Monitor().calibrate(logits=L, embeddings=E, y=y)
    mon.save(tmp_path / "s")
    loaded = cw.Monitor.load(tmp_path / "s")
    E_b, L_b, _ = _embedded(rng, 300, shift=0.3)
    mon.observe(logits=L_b, embeddings=E_b)
    loaded.observe(logits=L_b, embeddings=E_b)
    assert mon.shift_watch.look_rows() == loaded.shift_watch.look_rows()
    assert (
        pl.DataFrame(mon.shift_watch.look_rows())["detector"].to_list()[-1] == "reference distance martingale"
    )


def test_class_coverage_drop_names_the_class_whose_promise_breaks():
    """A by-class calibrator: class 'b' rows start to be missed while the others stay covered."""
    from calwatch.shift import ClassCoverageDropDetector

    from ..synthetic import softmax_data

    P, y = softmax_data(3000, K=3, seed=5)
    names = np.array(["a", "b", "c"])
    cal = cw.SplitConformalClassifier(score="lac", alpha=0.1, mondrian="label")
    mon = cw.Monitor(calibrators={"by-class": cal}, classes=list(names))
    mon.calibrate(probs=P, y=names[y])
    assert "by-class: class coverage drop" in [d.name for d in mon.shift_watch.detectors]
    for b in range(4):  # clean: labels drawn from the model's own probabilities
        P_b, y_b = softmax_data(500, K=3, seed=10 + b)
        mon.observe(probs=P_b, y=names[y_b])
    assert "by-class: class coverage drop" not in mon.warnings()["name"].to_list()
    for b in range(6):  # class 'b' rows now carry the label the model finds least likely
        P_b, y_b = softmax_data(500, K=3, seed=20 + b)
        is_b = y_b == 1
        y_b[is_b] = P_b[is_b].argmin(axis=1)
        y_b[is_b & (y_b != 1)] = 1
        P_b[is_b] = P_b[is_b][:, [1, 0, 2]]  # the model now puts class b's mass elsewhere
        mon.observe(probs=P_b, y=names[y_b])
    warnings = mon.warnings().filter(pl.col("name") == "by-class: class coverage drop")
    assert warnings.height >= 1
    assert warnings["explanation"][0].startswith("class 'b':")
    assert "class 'b'" in warnings["threatens"][0]
    det = next(d for d in mon.shift_watch.detectors if isinstance(d, ClassCoverageDropDetector))
    assert det.test_ is not None and det.test_.n_tests == 3 and det.untested_ == []
    assert det.test_.false_alarm == pytest.approx(0.01 / 3)  # δ/K: the union bound over 3 classes
