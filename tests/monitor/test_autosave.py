"""Monitor.autosave: snapshots kept current after observe/label calls, failures never break the stream."""

import shutil
import time
import warnings

import numpy as np
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw
from calwatch.monitor.autosave import AutoSave
from calwatch.snapshot.store import read_manifest

from ..synthetic import softmax_data


def _batch(mon, seed, n=200):
    P, _ = softmax_data(n, seed=seed)
    return mon.observe(probs=P, ids=[f"{seed}-{i}" for i in range(n)])


def _saved_batches(path):
    return read_manifest(path)["status"]["batches"]


def _wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_saves_at_start_and_after_each_batch_then_loads_identically(monitor, tmp_path):
    path = tmp_path / "snap"
    saver = monitor.autosave(path, every_batches=1, every_seconds=None)
    assert saver.saves == 1 and _saved_batches(path) == 0
    for seed in range(3):
        _batch(monitor, seed)
        assert _saved_batches(path) == seed + 1  # written by the time observe() returns
    status = monitor.status()
    assert status["autosaves"] == 4 and status["autosave_errors"] == 0
    loaded = cw.Monitor.load(path)
    assert_frame_equal(loaded.summary(), monitor.summary())
    assert "_autosave" not in vars(loaded)  # the autosaver is not part of the snapshot
    monitor.stop_autosave()
    _batch(monitor, 9)
    assert _saved_batches(path) == 3 and not saver.active


def test_every_batches_waits_for_that_many_and_every_seconds_saves_labels_in_time(monitor, tmp_path):
    path = tmp_path / "snap"
    monitor.autosave(path, every_batches=3, every_seconds=None)
    _batch(monitor, 0)
    _batch(monitor, 1)
    assert _saved_batches(path) == 0
    _batch(monitor, 2)
    assert _saved_batches(path) == 3
    saver = monitor.autosave(path, every_batches=3, every_seconds=0.3)
    _, y = softmax_data(200, seed=0)
    monitor.label([f"0-{i}" for i in range(200)], y)  # no new batch: the timer saves it
    assert _wait_for(lambda: saver.saves == 2)
    assert read_manifest(path)["status"]["rows_labelled"] == 200
    monitor.stop_autosave()


def test_a_failing_save_never_breaks_observe_and_is_counted_in_status(monitor, tmp_path):
    path = tmp_path / "snap"
    saver = monitor.autosave(path, every_batches=1, every_seconds=None)
    shutil.rmtree(path)
    path.mkdir()
    (path / "notes.txt").write_text("not a snapshot")  # save_monitor refuses to overwrite it
    with pytest.warns(RuntimeWarning, match="autosave .* failed .*not a calwatch snapshot"):
        index = _batch(monitor, 0)
    assert index == 0 and monitor.n_batches == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per run of failures, not one per batch
        _batch(monitor, 1)
    assert monitor.status()["autosave_errors"] == 2
    assert "is not a calwatch snapshot" in saver.last_error
    shutil.rmtree(path)  # the next change saves again
    _batch(monitor, 2)
    assert _saved_batches(path) == 3 and saver.last_error == "" and monitor.status()["autosave_errors"] == 2


def test_the_save_runs_after_the_call_released_the_lock(monitor, tmp_path, monkeypatch):
    depths = []
    original = type(monitor).save

    def spy(self, path):
        depths.append(self._guard.depth)  # 0: no guarded call (observe, label) is running
        return original(self, path)

    monkeypatch.setattr(type(monitor), "save", spy)
    monitor.autosave(tmp_path / "snap", every_batches=1, every_seconds=None)
    _batch(monitor, 0)
    _, y = softmax_data(200, seed=0)
    monitor.autosave(tmp_path / "snap", every_batches=None, every_seconds=0.05)
    monitor.label([f"0-{i}" for i in range(10)], y[:10])
    assert _wait_for(lambda: len(depths) == 4)
    assert depths == [0, 0, 0, 0]
    monitor.stop_autosave()


def test_a_second_autosave_replaces_the_first(monitor, tmp_path):
    first = monitor.autosave(tmp_path / "a", every_batches=1)
    second = monitor.autosave(tmp_path / "b", every_batches=1)
    assert not first.active and second.active
    _batch(monitor, 0)
    assert _saved_batches(tmp_path / "a") == 0 and _saved_batches(tmp_path / "b") == 1
    monitor.stop_autosave()


def test_regression_monitors_autosave_too(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=500)
    calibrators = {"mcc": cw.ModularConformalCalibrator(prediction="point")}
    mon = cw.Monitor(task="regression", calibrators=calibrators)
    mon.calibrate(pred=2 * x, y=2 * x + rng.normal(size=500))
    mon.autosave(tmp_path / "reg", every_batches=1, every_seconds=None)
    mon.observe(pred=2 * x[:100], ids=list(range(100)))
    loaded = cw.Monitor.load(tmp_path / "reg")
    assert loaded.n_batches == 1
    assert_frame_equal(loaded.summary(), mon.summary())
    mon.stop_autosave()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"every_batches": 0}, "every_batches must be a positive integer"),
        ({"every_batches": True}, "every_batches must be a positive integer"),
        ({"every_seconds": -1}, "every_seconds must be a positive number"),
        ({"every_seconds": float("nan")}, "every_seconds must be a positive number"),
        ({"every_batches": None, "every_seconds": None}, "cannot both be None"),
    ],
)
def test_bad_arguments_are_named(monitor, tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        monitor.autosave(tmp_path / "snap", **kwargs)
    with pytest.raises(TypeError, match="path must be a folder path"):
        AutoSave(monitor, 3)  # type: ignore[arg-type]
    assert not (tmp_path / "snap").exists()


def test_an_unwritable_first_snapshot_raises_and_keeps_the_earlier_autosaver(monitor, tmp_path):
    first = monitor.autosave(tmp_path / "a")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "data.csv").write_text("1,2")
    with pytest.raises(cw.SnapshotError, match="is not a calwatch snapshot"):
        monitor.autosave(tmp_path / "taken")
    assert first.active
    monitor.stop_autosave()
