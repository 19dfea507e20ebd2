"""Fuzzing the monitor's boundary: an input works or is refused by name, and a refusal changes nothing.

Hypothesis throws arbitrary arrays (dtypes, shapes, NaN/inf, 0-d and empty, object arrays),
pandas/polars inputs, ids (duplicates, unhashable, mixed) and levels at ``observe``, ``label``,
``what_if`` and ``calibrate``. Every call must either succeed or raise ``ValueError``/``TypeError``
whose message names the argument at fault, and a refused call must leave the monitor's views and
counters exactly as they were. (``Monitor.load`` of damaged snapshots is fuzzed in
``test_store.py`` and ``test_snapshot_invariants.py``.)
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from polars.testing import assert_frame_equal

import calwatch as cw

from ..synthetic import softmax_data

K = 3
ARGUMENTS = ("probs", "logits", "ids", "y", "alpha", "categories", "embeddings", "X", "calibrators", "batch")
DTYPES = st.sampled_from(
    [np.float64, np.float32, np.int64, np.int8, np.bool_, np.complex128, np.uint8, np.dtype("U3"), object]
)
ELEMENTS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.integers(-(10**6), 10**6),
    st.sampled_from([0.0, 1.0, 1.0 / K, -1.0, 1e308, -1e308]),
)


@st.composite
def arrays(draw, rows=None):
    """Arrays of any of several dtypes and shapes, probable and improbable ones."""
    shape = draw(
        st.sampled_from(
            [(), (0,), (0, K), (rows or 4,), (rows or 4, K), (rows or 4, K + 1), (rows or 4, 1), (2, K, 1)]
        )
    )
    dtype = draw(DTYPES)
    if dtype is object or np.dtype(dtype).kind in "US":
        size = int(np.prod(shape))
        return np.array([draw(st.text(max_size=3))] * max(size, 1), dtype=dtype)[:size].reshape(shape)
    values = draw(hnp.arrays(np.float64, shape, elements=ELEMENTS))
    with np.errstate(all="ignore"):
        return values.astype(dtype)


@st.composite
def probabilities(draw, rows=4):
    """Mostly valid probabilities, sometimes perturbed, in several containers."""
    P = softmax_data(rows, K=K, seed=draw(st.integers(0, 10**6)))[0]
    how = draw(
        st.sampled_from(["ok", "nan", "negative", "unnormalised", "float32", "list", "pandas", "polars"])
    )
    if how == "nan":
        P[draw(st.integers(0, rows - 1)), 0] = np.nan
    elif how == "negative":
        P[0, 0] = -0.1
    elif how == "unnormalised":
        P = P * 1.5
    elif how == "float32":
        P = P.astype(np.float32)
    elif how == "list":
        return P.tolist()
    elif how == "pandas":
        return pd.DataFrame(P)
    elif how == "polars":
        return pl.DataFrame(P)
    return P


IDS = st.one_of(
    st.none(),
    st.lists(st.integers(0, 20), min_size=0, max_size=6),
    st.lists(st.text(max_size=2), min_size=0, max_size=6),
    st.lists(st.one_of(st.integers(0, 5), st.text(max_size=1), st.tuples(st.integers(0, 2))), max_size=6),
    st.just([[1], [2], [3], [4]]),  # unhashable
    st.just(np.arange(8).reshape(2, 4)),  # 2-d
    st.just("abcd"),  # a string is not a sequence of ids
)
LABELS = st.one_of(
    st.lists(st.integers(-2, K + 1), max_size=6),
    st.lists(st.sampled_from([0, 1, 2, "0", None, 1.5, float("nan")]), max_size=6),
    arrays(),
)


@pytest.fixture(scope="module")
def monitor():
    mon = cw.Monitor(
        calibrators={
            "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
            "by-class": cw.SplitConformalClassifier(score="aps", alpha=0.1, mondrian="label"),
            "risk": cw.RiskEstimator(),
        }
    )
    P, y = softmax_data(600, K=K, seed=0)
    mon.calibrate(probs=P, y=y)
    mon.observe(probs=softmax_data(50, K=K, seed=1)[0], ids=[f"seed-{i}" for i in range(50)])
    return mon


def _state(mon):
    return (
        mon.summary().drop("observed_at"),
        mon.class_coverage(),
        mon.rows(),
        mon.warnings(),
        pl.DataFrame([mon.status()]),
    )


def _same(before, after):
    for a, b in zip(before, after, strict=True):
        assert_frame_equal(a, b)


def _refused_by_name(err):
    assert isinstance(err, ValueError | TypeError), repr(err)
    message = str(err)
    assert any(name in message for name in ARGUMENTS), f"no argument named in: {message!r}"


FUZZ = settings(
    max_examples=int(os.environ.get("CALWATCH_FUZZ_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@FUZZ
@given(probs=st.one_of(probabilities(), arrays()), ids=IDS, y=st.one_of(st.none(), LABELS))
def test_observe_takes_or_refuses_by_name(monitor, probs, ids, y):
    before = _state(monitor)
    try:
        monitor.observe(probs=probs, ids=ids, y=y)
    except Exception as err:
        _refused_by_name(err)
        _same(before, _state(monitor))


@FUZZ
@given(ids=IDS, y=LABELS)
def test_label_takes_or_refuses_by_name(monitor, ids, y):
    before = _state(monitor)
    try:
        monitor.label(ids, y)
    except Exception as err:
        _refused_by_name(err)
        _same(before, _state(monitor))


@FUZZ
@given(
    alpha=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(-2, 2),
        st.text(max_size=2),
        st.none(),
        st.just([0.1]),
    )
)
def test_what_if_takes_or_refuses_by_name(monitor, alpha):
    before = _state(monitor)
    try:
        monitor.what_if(alpha)
    except Exception as err:
        _refused_by_name(err)
    _same(before, _state(monitor))


@FUZZ
@given(probs=st.one_of(probabilities(rows=40), arrays(rows=40)), y=st.one_of(st.none(), LABELS))
def test_calibrate_takes_or_refuses_by_name(monitor, probs, y):
    before = _state(monitor)
    calibrators = {key: id(cal) for key, cal in monitor.calibrators.items()}
    try:
        monitor.calibrate(probs=probs, y=y)
    except Exception as err:
        _refused_by_name(err)
        _same(before, _state(monitor))
        assert {key: id(cal) for key, cal in monitor.calibrators.items()} == calibrators
