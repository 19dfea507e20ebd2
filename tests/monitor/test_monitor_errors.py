"""Bad input gets a clear error naming the argument, and a rejected call changes nothing."""

import numpy as np
import pytest

import calwatch as cw

from ..synthetic import softmax_data


def snapshot(mon):
    return (
        mon.summary().drop("observed_at").to_dicts(),
        mon.status(),
        mon.rows().to_dicts() if mon.n_batches else None,
        mon.class_coverage().to_dicts() if mon.n_batches else None,
    )


@pytest.fixture
def streaming(monitor):
    P, y = softmax_data(100, seed=20)
    monitor.observe(probs=P, ids=[f"r{i}" for i in range(100)])
    monitor.label([f"r{i}" for i in range(50)], y[:50])
    return monitor


def good_probs(n=10, seed=21):
    return softmax_data(n, seed=seed)[0]


def nan_probs():
    P = good_probs()
    P[3, 1] = np.nan
    return P


def bad_sum():
    P = good_probs()
    P[2] *= 1.1
    return P


def negative():
    P = good_probs()
    P[0, :2] = [-0.2, P[0, 0] + P[0, 1] + 0.2]
    return P


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"probs": nan_probs()}, ValueError, "probs contains NaN or inf"),
        ({"probs": bad_sum()}, ValueError, "probs rows must sum to 1"),
        ({"probs": negative()}, ValueError, r"probs must hold probabilities in \[0, 1\]"),
        ({"probs": good_probs()[:, :3]}, ValueError, "fitted on 4 classes"),
        ({"probs": np.zeros((0, 4))}, ValueError, "probs is empty"),
        ({"probs": good_probs().astype(str)}, TypeError, "numeric"),
        ({"probs": good_probs()[0]}, ValueError, "2-D array"),
        ({"probs": good_probs(), "ids": list(range(9))}, ValueError, "ids has 9 values"),
        ({"probs": good_probs(), "ids": [1] * 10}, ValueError, "ids must be distinct"),
        ({"probs": good_probs(), "ids": [[1]] * 10}, TypeError, "ids must be hashable"),
        (
            {"probs": good_probs(), "ids": ["r5", *(f"s{i}" for i in range(9))]},
            ValueError,
            "'r5' was already observed",
        ),
        ({"probs": good_probs(), "ids": ["s0", *range(9)]}, ValueError, "ids mix strings and integers"),
        ({"probs": good_probs(), "ids": list(range(10))}, ValueError, "this monitor's ids are strings"),
        ({"probs": good_probs(), "ids": [*(f"s{i}" for i in range(9)), None]}, ValueError, "null id at pos"),
        ({"probs": good_probs(), "ids": [0.5] * 9 + [float("nan")]}, ValueError, "NaN id at position 9"),
        ({"probs": good_probs(), "y": [0] * 9 + [7]}, ValueError, "y holds labels outside"),
        ({"probs": good_probs(), "y": [0] * 3}, ValueError, "y has 3 labels"),
        ({}, ValueError, "no data"),
        ({"probs": good_probs(), "categories": ["a"] * 10}, ValueError, "categories must be None"),
    ],
)
def test_rejected_batch_leaves_monitor_unchanged(streaming, kwargs, error, message):
    before = snapshot(streaming)
    with pytest.raises(error, match=message):
        streaming.observe(**kwargs)
    assert snapshot(streaming) == before
    # and the monitor still works afterwards
    streaming.observe(probs=good_probs())
    assert streaming.n_batches == 2


@pytest.mark.parametrize(
    ("ids", "y", "error", "message"),
    [
        (["r60", "r61"], [0, 9], ValueError, "y holds labels outside the known classes"),
        (["r60", "r61"], [0], ValueError, "y has 1 labels but there are 2 rows"),
        (["r60", "r60"], [0, 1], ValueError, "ids must be distinct"),
        ("r60", [0], TypeError, "ids must be a sequence"),
        (["r60", "r61"], [np.nan, 1.0], ValueError, "y contains NaN"),
    ],
)
def test_rejected_labels_leave_monitor_unchanged(streaming, ids, y, error, message):
    before = snapshot(streaming)
    with pytest.raises(error, match=message):
        streaming.label(ids, y)
    assert snapshot(streaming) == before


def test_calibrate_failure_keeps_previous_calibration(monitor):
    before = {k: c.quantiles_ for k, c in monitor.calibrators.items()}
    P, y = softmax_data(50, seed=30)
    y = y.copy()
    y[0] = 11
    with pytest.raises(ValueError, match="y holds labels outside"):
        monitor.calibrate(probs=P, y=y)
    assert {k: c.quantiles_ for k, c in monitor.calibrators.items()} == before


def test_usage_errors():
    mon = cw.Monitor()
    with pytest.raises(cw.NotFittedError, match="not calibrated yet"):
        mon.observe(probs=good_probs())
    with pytest.raises(ValueError, match="no model"):
        mon.calibrate(np.zeros((3, 2)), [0, 1, 0])
    with pytest.raises(ValueError, match="y is required"):
        mon.calibrate(probs=good_probs())
    with pytest.raises(ValueError, match="window must be"):
        cw.Monitor(window=0)
    with pytest.raises(TypeError, match="must have fit"):
        cw.Monitor(calibrators={"x": object()})
    with pytest.raises(TypeError, match="non-empty dict"):
        cw.Monitor(calibrators={})
    with pytest.raises(TypeError, match="model must be"):
        cw.Monitor(model=42)


def test_named_labels_on_integer_classes_suggest_classes() -> None:
    rng = np.random.default_rng(0)
    mon = cw.Monitor(shift=None)
    with pytest.raises(ValueError, match=r"classes \[0, 1\]: \['no', 'yes'\]\. With probs="):
        mon.calibrate(probs=rng.dirichlet(np.ones(2), 50), y=np.array(["no", "yes"])[rng.integers(0, 2, 50)])
    named = cw.Monitor(shift=None, classes=["no", "yes"])
    named.calibrate(probs=rng.dirichlet(np.ones(2), 50), y=np.array(["no", "yes"])[rng.integers(0, 2, 50)])
    with pytest.raises(ValueError, match=r"outside the known classes \['no', 'yes'\]: \['maybe'\]$"):
        named.calibrate(probs=rng.dirichlet(np.ones(2), 3), y=["no", "yes", "maybe"])


def test_labels_outside_the_classes_are_refused_naming_the_option_or_skipped_and_counted(tmp_path) -> None:
    rng = np.random.default_rng(1)
    mon = cw.Monitor(shift=None, classes=["cat", "dog", "owl"])
    mon.calibrate(
        probs=rng.dirichlet(np.ones(3), 200), y=np.array(["cat", "dog", "owl"])[rng.integers(0, 3, 200)]
    )
    mon.observe(probs=rng.dirichlet(np.ones(3), 6), ids=[f"r{i}" for i in range(6)])
    before = mon.summary()
    with pytest.raises(
        ValueError, match=r"\['fox'\] \(label\(\.\.\., outside_classes='skip'\) skips such labels"
    ):
        mon.label(["r0", "r1", "r2"], ["cat", "fox", "dog"])
    assert mon.summary().equals(before) and mon.status()["labels_outside_classes"] == 0
    report = mon.label(["r0", "r1", "r2"], ["cat", "fox", "dog"], outside_classes="skip")
    assert (report.matched, report.unmatched, report.skipped) == (2, 0, 1)
    assert mon.summary()["n_labelled"].to_list() == [2]
    assert mon.status()["labels_outside_classes"] == 1
    mon.save(tmp_path / "snap")
    assert cw.Monitor.load(tmp_path / "snap").status()["labels_outside_classes"] == 1
    with pytest.raises(ValueError, match="outside_classes must be 'raise' or 'skip'"):
        mon.label(["r3"], ["cat"], outside_classes="drop")
