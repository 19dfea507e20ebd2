"""The monitor validates each batch once, at its boundary, and its calibrators do not re-check it.

The batch's probabilities become a read-only ``ValidatedProbs`` in ``ModelOutputs``; every
calibrator gets that object (an ``ndarray`` to calibrators that know nothing of it), and the
engine's own calibrators take it without another pass over the data. The sets are bit for bit
those of the calibrator called directly on the raw array, and a saved and reloaded monitor
(whose stored probabilities come back unvouched and are checked again) recomputes the same sets.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
from polars.testing import assert_frame_equal

import calwatch as cw
from calwatch.engine import _validation
from calwatch.engine._validation import ValidatedProbs

K = 80  # above PARTIAL_MIN_CLASSES: APS/RAPS take the partial path


class Spy:
    """A calibrator that records the type of what it is given, and predicts the top class."""

    alpha = 0.1

    def __init__(self) -> None:
        self.seen: list[type] = []

    def fit(self, P_cal: Any, y_cal: Any) -> Spy:
        self.seen.append(type(P_cal))
        return self

    def predict_sets(self, P: Any) -> np.ndarray:
        self.seen.append(type(P))
        sets = np.zeros(P.shape, dtype=bool)
        sets[np.arange(P.shape[0]), np.asarray(P).argmax(axis=1)] = True
        return sets


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.full(K, 0.05), size=n) * (1 + 1e-9)  # off by 1e-9: every row is divided
    y = np.array([rng.choice(K, p=p / p.sum()) for p in P])
    return P, y


def _calibrators() -> dict[str, Any]:
    return {
        "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
        "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1, randomized=True, seed=4),
        "raps": cw.SplitConformalClassifier(score="raps", alpha=0.1, raps_lambda=0.01, raps_k_reg=2),
        "by-class": cw.SplitConformalClassifier(score="aps", alpha=0.2, mondrian="label"),
        "spy": Spy(),
    }


def test_one_check_per_batch_and_the_same_sets_as_direct_calls():
    P_cal, y_cal = _data(400, 0)
    P, y = _data(300, 1)
    mon = cw.Monitor(calibrators=_calibrators(), shift=None)
    mon.calibrate(probs=P_cal, y=y_cal)
    scan = mock.patch.object(_validation, "_range_and_row_sums", wraps=_validation._range_and_row_sums)
    with scan as calls:
        mon.observe(probs=P, y=y)
    assert calls.call_count == 1  # the boundary; none of the five calibrators checked again
    spy = mon._calibrators["spy"]
    assert spy.seen == [ValidatedProbs, ValidatedProbs]

    rows = mon.rows(batch=0)
    for key, calibrator in _calibrators().items():
        if key == "spy":
            continue
        fitted = calibrator.fit(P_cal, np.asarray(y_cal))
        # a randomised calibrator draws each row's u from its id, as the monitor's copy does
        ids = {"ids": rows["id"].to_list()} if getattr(fitted, "draws_by_row_id", False) else {}
        direct = fitted.predict_sets(P, **ids)
        held = np.zeros((P.shape[0], K), dtype=bool)
        for i, classes in enumerate(rows[f"set_{key}"].to_list()):
            held[i, classes] = True
        assert np.array_equal(held, direct), key


def test_a_reloaded_monitor_recomputes_the_same_sets(tmp_path):
    """Stored probabilities come back from a snapshot unvouched and are checked again: the
    check is idempotent, so the recomputed sets are those the calibrators gave."""
    P_cal, y_cal = _data(400, 2)
    P, y = _data(300, 3)
    calibrators = {key: c for key, c in _calibrators().items() if key != "spy"}
    mon = cw.Monitor(calibrators=calibrators, shift=None)
    mon.calibrate(probs=P_cal, y=y_cal)
    mon.observe(probs=P, y=y)
    stored = mon._stream.batches[0].rows.probs
    assert np.array_equal(_validation.check_probabilities(np.array(stored)), stored)
    mon.save(tmp_path / "snap")
    again = cw.Monitor.load(tmp_path / "snap")  # its random streams where the saved monitor's are
    assert_frame_equal(again.what_if(0.1), mon.what_if(0.1))
    assert_frame_equal(again.rows(batch=0), mon.rows(batch=0))
