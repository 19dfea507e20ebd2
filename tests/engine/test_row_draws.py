"""Draws keyed by row id: the same ``u`` for a row on every path, uniform, independent across ids."""

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

from calwatch.engine.conformal.classifier import SplitConformalClassifier
from calwatch.engine.conformal.row_draws import row_uniforms

from ..synthetic import softmax_data


def test_an_id_draws_the_same_u_however_it_is_passed():
    ints = [3, -1, 2**63 + 5, 0]
    want = row_uniforms(7, ints)
    assert np.array_equal(row_uniforms(7, np.array(ints[:2], dtype=np.int64)), want[:2])
    assert np.array_equal(row_uniforms(7, np.array([2**63 + 5], dtype=np.uint64)), want[2:3])
    assert np.array_equal(row_uniforms(7, [np.int32(0)]), want[3:])
    arrow = pa.array(["a", "é", "row-9"]).to_numpy(zero_copy_only=False)  # what a table's id column gives
    assert np.array_equal(row_uniforms(7, arrow), row_uniforms(7, ["a", "é", "row-9"]))
    mixed = row_uniforms(7, [3, "a", (1, 2), 2.5])
    assert mixed[0] == want[0] and mixed[1] == row_uniforms(7, ["a"])[0]
    assert row_uniforms(7, [np.float64(2.5)])[0] == mixed[3]
    # another seed, another stream, an int and its digits: other draws
    assert row_uniforms(8, [3])[0] != want[0] and row_uniforms(7, [3], stream=1)[0] != want[0]
    assert row_uniforms(7, ["3"])[0] != want[0]
    two = row_uniforms(7, ints, columns=2)
    assert two.shape == (4, 2) and np.array_equal(two[:, 0], want) and not np.array_equal(two[:, 1], want)


def test_draws_are_uniform_and_independent_of_neighbouring_ids():
    # 200,000 consecutive ids (the monitor's default ids): Kolmogorov–Smirnov against U(0, 1) and the
    # lag-1 correlation, both at a level a wrong hash fails by orders of magnitude (a raw
    # id / 2⁶⁴ gives D ≈ 1; the sd of the correlation of independent draws is 1/sqrt(n) ≈ 0.0022).
    u = row_uniforms(0, np.arange(200_000))
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 5 / np.sqrt(u.shape[0])
    strings = row_uniforms(0, [f"row-{i}" for i in range(20_000)])
    assert stats.kstest(strings, "uniform").pvalue > 1e-3


def test_a_row_gets_the_same_set_in_any_split_order_and_call():
    P, y = softmax_data(3000, K=6, seed=5)
    clf = SplitConformalClassifier(score="aps", alpha=0.1, seed=3).fit(P[:1000], y[:1000])
    ids = np.arange(1000, 3000)
    whole = clf.predict_sets(P[1000:], ids=ids)
    order = np.random.default_rng(0).permutation(2000)
    parts = np.empty_like(whole)
    for chunk in np.array_split(order, 7):
        parts[chunk] = clf.predict_sets(P[1000:][chunk], ids=ids[chunk])
    assert np.array_equal(parts, whole)
    # the stream is left alone by id-keyed draws, and without ids the stream draws others
    state = clf._predict_rng.bit_generator.state
    clf.predict_sets(P[1000:], ids=ids)
    assert clf._predict_rng.bit_generator.state == state
    assert not np.array_equal(clf.predict_sets(P[1000:]), whole)
    assert np.array_equal(
        clf.label_scores(P[1000:], y[1000:], ids=ids),
        clf.class_scores(P[1000:], ids=ids)[np.arange(2000), y[1000:]],
    )
    with pytest.raises(ValueError, match="ids has 3 values but P has 2000 rows"):
        clf.predict_sets(P[1000:], ids=[1, 2, 3])


def test_a_calibrator_restored_without_the_new_fields_keeps_its_old_sets():
    # A snapshot written before id-keyed draws and top_class holds neither attribute: the class
    # defaults give the old behaviour (stream draws, top class added after the plain threshold).
    P, y = softmax_data(2000, K=4, seed=6)
    old = SplitConformalClassifier(score="aps", alpha=0.1, randomized=True, top_class="added", seed=1)
    old.fit(P[:1000], y[:1000])
    restored = SplitConformalClassifier.__new__(SplitConformalClassifier)
    restored.__dict__.update({k: v for k, v in old.__dict__.items() if k not in ("top_class", "_u_from_ids")})
    assert restored.top_class == "added" and not restored.draws_by_row_id
    rng_state = old._predict_rng.bit_generator.state
    want = old.predict_sets(P[1000:])
    restored._predict_rng.bit_generator.state = rng_state
    assert np.array_equal(restored.predict_sets(P[1000:], ids=np.arange(1000)), want)
