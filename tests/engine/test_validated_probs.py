"""Validate once: ``check_probabilities`` is idempotent, and a ``ValidatedProbs`` is not re-checked.

``check_probabilities`` divides a row by its sum only when the sum is off by more than
``renormalise_tolerance(K) = 4·K·ε``; a divided row's sum is within ``(2K − 1)·ε/2`` of 1, so a
second check keeps every row bit for bit. That makes skipping the re-check of a vouched
``ValidatedProbs`` exact (the calibrators see the same bits either way), and a monitor's stored
probabilities re-checked after a save and load equal what its calibrators saw.
"""

from __future__ import annotations

import copy
import pickle
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calwatch.engine import _validation
from calwatch.engine._validation import (
    ValidatedProbs,
    check_probabilities,
    renormalise_tolerance,
    validated_probabilities,
)


@st.composite
def probability_rows(draw: st.DrawFn) -> np.ndarray:
    K = draw(st.sampled_from((2, 3, 10, 100, 1000)))
    m = draw(st.integers(1, 30))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    P = rng.dirichlet(np.full(K, draw(st.sampled_from((0.01, 0.3, 5.0)))), size=m)
    # Rows off by up to the default tolerance (1e-6), by a few ulps, or exact.
    scale = 1.0 + rng.choice([0.0, 1e-16, 1e-13, 1e-9, 9e-7], size=(m, 1)) * rng.choice([-1, 1], size=(m, 1))
    P = P * scale
    if draw(st.booleans()):
        P = P.astype(np.float32)  # float32 outputs: every row ~1e-7 off
    return P


@settings(max_examples=80, deadline=None)
@given(P=probability_rows())
def test_check_is_idempotent_and_row_by_row(P):
    once = check_probabilities(P)
    assert np.array_equal(check_probabilities(once), once)
    assert np.array_equal(check_probabilities(once, copy=False), once)
    assert np.all(np.abs(once.sum(axis=1) - 1.0) <= renormalise_tolerance(P.shape[1]))
    rows = np.arange(P.shape[0])[::2]
    assert np.array_equal(check_probabilities(P[rows]), once[rows])  # a row's result is its own
    assert np.array_equal(check_probabilities(np.asfortranarray(P)), once)  # and not the layout's


def test_rows_close_to_one_are_kept_the_others_divided():
    K = 10
    close = np.full(K, 0.1)  # sums to 1 within an ulp or two
    off = np.full(K, 0.1) * (1 + 1e-9)
    out = check_probabilities(np.stack([close, off]))
    assert np.array_equal(out[0], close)
    assert np.array_equal(out[1], off / off.sum())


def test_copy_false_returns_a_read_only_view_unless_a_row_is_divided():
    P = np.random.default_rng(0).dirichlet(np.ones(5), size=4)
    P /= P.sum(axis=1, keepdims=True)
    view = check_probabilities(P, copy=False)
    assert np.shares_memory(view, P) and not view.flags.writeable
    fresh = check_probabilities(P)
    assert not np.shares_memory(fresh, P) and fresh.flags.writeable
    scaled = P * (1 + 1e-8)
    assert not np.shares_memory(check_probabilities(scaled, copy=False), scaled)


def test_validated_probs_is_read_only_vouched_and_not_checked_again():
    P = np.random.default_rng(1).dirichlet(np.ones(4), size=6) * (1 + 1e-8)
    V = validated_probabilities(P)
    assert isinstance(V, ValidatedProbs) and V.vouched and not V.flags.writeable
    assert np.array_equal(V, check_probabilities(P))
    assert validated_probabilities(V) is V
    with mock.patch.object(_validation, "_range_and_row_sums", side_effect=AssertionError("re-checked")):
        again = check_probabilities(V, n_classes=4)
        assert type(again) is np.ndarray and np.shares_memory(again, V) and not again.flags.writeable
    with pytest.raises(ValueError, match="6 classes"):
        check_probabilities(V, n_classes=6)
    with pytest.raises(ValueError):
        V[0, 0] = 0.5


def test_nothing_derived_from_a_validated_matrix_keeps_the_mark():
    V = validated_probabilities(np.random.default_rng(2).dirichlet(np.ones(3), size=5))
    for derived in (V[1:], V[[0, 2]], V[:, :2], 1.0 - V, V >= 0.5, V.max(axis=1), np.log(V)):
        assert type(derived) is np.ndarray
    assert isinstance(V.sum(), float)
    for kept in (
        V.copy(),
        V.reshape(5, 3),
        np.concatenate([V, V]),
        copy.deepcopy(V),
        pickle.loads(pickle.dumps(V)),
    ):
        assert not getattr(kept, "vouched", False)
        with mock.patch.object(
            _validation, "_range_and_row_sums", wraps=_validation._range_and_row_sums
        ) as scan:
            check_probabilities(kept)
        assert scan.call_count == 1  # an unvouched copy is checked in full


def test_errors_survive_the_chunked_scan():
    P = np.full((5000, 1000), 1e-3)  # 5M entries: scanned chunk by chunk
    for row, value, message in (
        (4321, np.nan, "NaN or inf"),
        (4999, np.inf, "NaN or inf"),
        (7, 1.5, r"\[0, 1\]"),
    ):
        bad = P.copy()
        bad[row, 3] = value
        with pytest.raises(ValueError, match=message):
            check_probabilities(bad)
    bad = P.copy()
    bad[2500] *= 1.01
    with pytest.raises(ValueError, match="row 2500 sums to"):
        check_probabilities(bad)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 300), float32=st.booleans())
def test_two_class_row_sums_are_einsums_bit_for_bit(seed: int, m: int, float32: bool) -> None:
    """K = 2 sums each row with one addition (commutative, so einsum's order cannot matter)."""
    rng = np.random.default_rng(seed)
    p = rng.random(m) ** rng.uniform(0.1, 10)
    P = np.column_stack([1.0 - p, p])
    if float32:  # sums then drift from 1 by ~1e-7, as a float32 model's do
        P = P.astype(np.float32).astype(np.float64)
    lo, hi, sums = _validation._range_and_row_sums(np.ascontiguousarray(P))
    assert np.array_equal(sums, np.einsum("ij->i", P)) and (lo, hi) == (P.min(), P.max())


def test_copy_false_hands_over_the_array_and_copies_only_to_divide() -> None:
    """``copy=False``: a read-only view of the caller's fresh array when no row is divided."""
    P = np.array([[0.25, 0.75], [0.5, 0.5]])
    V = validated_probabilities(P, copy=False)
    assert np.shares_memory(V, P) and not V.flags.writeable and V.vouched
    assert not np.shares_memory(validated_probabilities(P.copy()), P)  # the default copies
    off = np.array([[0.4, 0.4], [0.5, 0.5]])
    W = validated_probabilities(off, tolerance=0.25, copy=False)
    assert not np.shares_memory(W, off) and W.tolist() == [[0.5, 0.5], [0.5, 0.5]]
    assert off.tolist() == [[0.4, 0.4], [0.5, 0.5]]  # the caller's array is never divided in place
