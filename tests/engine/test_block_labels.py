"""Block-level label tests: the betting test on bounded values, block null rates, the ledger, dispersion."""

from __future__ import annotations

import math

import numpy as np
import pytest

from calwatch.engine.shift.betting import BernoulliBetting, calibration_null_rate
from calwatch.engine.shift.block_labels import (
    BlockLedger,
    BoundedBetting,
    PairedDispersion,
    block_null_rate,
    effective_rows,
    intraclass_correlation,
)


def test_bounded_betting_by_hand_and_its_stretch() -> None:
    # ε₀ = 0.1, one bet u = 0.5 (λ = 5): factors 1 + 5(x − 0.1): x = 0 -> 0.5, x = 0.3 -> 2, x = 0.5 -> 3.
    t = BoundedBetting([0.1], bet_fractions=(0.5,), threshold=10.0)
    out = t.update(
        np.zeros(4, np.intp), np.array([0.0, 0.3, 0.5, 0.3]), keys=["a", "b", "c", "d"], rows=[10] * 4
    )
    np.testing.assert_allclose(10**out, [0.5, 1.0, 3.0, 6.0], rtol=1e-12)
    assert not t.alarmed_[0]  # 6 < c = 10
    stretch = t.stretch(0)  # the wealth was lowest after "a": the evidence is b..d
    assert (stretch.first, stretch.last, stretch.blocks, stretch.rows) == ("b", "d", 3, 30)
    assert stretch.mean == pytest.approx((0.3 + 0.5 + 0.3) / 3, rel=1e-12)
    t.update(np.zeros(1, np.intp), np.array([0.3]))
    assert t.alarmed_[0]  # 12 ≥ 10


def test_bounded_betting_on_zero_one_values_is_the_row_test() -> None:
    rng = np.random.default_rng(3)
    events = rng.random(500) < 0.15
    bounded = BoundedBetting([0.1])
    ville = BernoulliBetting(0.1, detector="ville", threshold=1e9)
    np.testing.assert_allclose(
        bounded.update(np.zeros(500, np.intp), events.astype(float)),
        ville.update(events),
        rtol=1e-9,
        atol=1e-9,
    )


def test_groups_share_the_family_bound_and_refuse_bad_values() -> None:
    t = BoundedBetting([0.1, 0.2, 0.3], threshold=100.0)
    assert t.log10_threshold == pytest.approx(math.log10(300.0))
    with pytest.raises(ValueError, match=r"values must be numbers in \[0, 1\]"):
        t.update(np.array([0]), np.array([1.5]))
    with pytest.raises(ValueError, match="null_rates"):
        BoundedBetting([0.0])


def test_intraclass_correlation_and_effective_rows_by_hand() -> None:
    assert intraclass_correlation([1, 1, 0, 0], [0, 0, 1, 1]) == (1.0, 2.0)
    rho, m = intraclass_correlation([1, 0, 1, 0], [0, 0, 1, 1])  # within-block spread only
    assert rho < 0 and m == 2.0
    assert effective_rows(1000, 0.1, 11.0) == 500.0
    assert effective_rows(1000, -0.2, 11.0) == 1000.0


def test_block_null_rate_is_the_row_rate_for_independent_rows_and_wider_for_blocks() -> None:
    rng = np.random.default_rng(0)
    independent = rng.random(2000) < 0.1
    keys = np.repeat(np.arange(200), 10)
    null = block_null_rate(0.1, independent, keys, 0.01)
    assert null is not None
    # ρ̂ ≈ 0: about as informative as 2,000 rows, so close to the row test's rate
    assert null.rate == pytest.approx(calibration_null_rate(0.1, 2000, 0.01), abs=0.01)
    clustered = np.repeat(rng.random(200) < 0.1, 10)  # each block all missed or all covered
    wide = block_null_rate(0.1, clustered, keys, 0.01)
    assert wide is not None
    assert wide.rho == pytest.approx(1.0)
    assert wide.effective_rows == pytest.approx(200.0)
    assert wide.rate == pytest.approx(calibration_null_rate(0.1, 200, 0.01) + wide.block_excess, rel=1e-12)
    assert "200 calibration blocks" in wide.words()
    assert block_null_rate(0.1, np.ones(5, bool), np.arange(5), 0.01) is None  # too few to bound


def test_ledger_completes_blocks_when_closed_and_labelled_or_timed_out() -> None:
    ledger = BlockLedger(timeout=2)
    ledger.observe(0, ["a", "a", "b"])
    ledger.observe(1, ["b", "c"])  # "a" closed at batch 0, "b" at batch 1; "c" open
    ledger.label([0], [0], {"miss": np.array([True])})
    assert ledger.complete(1) == []  # "a" has one of its two labels
    ledger.label([0, 0, 1], [1, 2, 0], {"miss": np.array([False, True, True])})
    done = ledger.complete(1)
    assert [(b.key, b.n_rows, b.n_labelled, b.timed_out) for b in done] == [
        ("a", 2, 2, False),
        ("b", 2, 2, False),
    ]
    np.testing.assert_array_equal(done[0].payload["miss"], [True, False])
    assert 0 not in ledger.batch_codes_  # batch 0's blocks are all tested: its codes are dropped
    ledger.observe(2, ["d"])  # closes "c" at batch 2
    ledger.label([1], [1], {"miss": np.array([False])})
    assert [b.key for b in ledger.complete(2)] == ["c"]  # closed and its one row labelled
    ledger.observe(3, ["d"])
    ledger.observe(4, ["e"])  # "d" closes at 4
    assert [b.key for b in ledger.complete(4)] == []
    ledger.label([2], [0], {"miss": np.array([True])})  # one of d's two rows
    assert ledger.complete(5) == []
    late = ledger.complete(6)  # two batches after "d" closed: tested on what it has
    assert [(b.key, b.n_labelled, b.timed_out) for b in late] == [("d", 1, True)]
    ledger.label([3], [0], {"miss": np.array([True])})  # a label after its block was tested: not used
    assert ledger.complete(9) == []


def test_ledger_refuses_a_key_that_comes_back_and_its_checkpoint_restores() -> None:
    ledger = BlockLedger(timeout=None)
    ledger.observe(0, ["a", "b"])
    with pytest.raises(ValueError, match="key 'a' comes back"):
        ledger.check(["b", "a"])
    with pytest.raises(ValueError, match="key 'x' comes back"):
        ledger.check(["x", "y", "x"])
    restore = ledger.checkpoint()
    ledger.observe(1, ["c"])
    ledger.label([0], [0], {"miss": np.array([True])})
    restore()
    assert ledger.open_code_ == 1 and ledger.pending == 2 and ledger.labelled_ == {0: 0, 1: 0}


def test_dispersion_tells_runs_of_correlated_rows_from_a_rate_that_steps_up() -> None:
    rng = np.random.default_rng(1)
    independent, stepped, clustered = PairedDispersion(), PairedDispersion(), PairedDispersion()
    for i in range(200):
        independent.add_run((rng.random(32) < 0.1).astype(float))
        stepped.add_run((rng.random(32) < (0.1 if i < 100 else 0.3)).astype(float))
        clustered.add_run(np.repeat(rng.random(4) < 0.1, 8).astype(float))  # blocks of 8 alike rows
    assert not independent.reading().clustered
    assert not stepped.reading().clustered  # a real drop is not read as clustering
    reading = clustered.reading()
    assert reading.clustered and reading.ratio > 4
    assert "cluster" in reading.words()


@pytest.mark.parametrize(("m", "size"), [(70, 32), (64, 32), (5, 32), (0, 32), (40, None)])
def test_observe_runs_is_observe_with_a_key_per_row_then_close(m: int, size: int | None) -> None:
    runs, keyed = BlockLedger(timeout=1), BlockLedger(timeout=1)
    for ledger in (runs, keyed):
        ledger.observe(0, ["a", "a", "b"])  # an open block the batch closes
    runs.observe_runs(1, m, size)
    keyed.observe(1, [f"1:{i // size}" if size else "1" for i in range(m)])
    keyed.close_open(1)
    for name in ("keys_", "rows_", "labelled_", "closed_at_", "open_code_", "next_code_", "latest_batch_"):
        assert getattr(runs, name) == getattr(keyed, name), name
    np.testing.assert_array_equal(runs.batch_codes_[1], keyed.batch_codes_[1])
    rows = np.arange(m)
    for ledger in (runs, keyed):
        ledger.label(np.ones(m, np.int64), rows, {"miss": rows % 3 == 0})
    got = [(b.key, b.n_rows, b.payload["miss"].tolist()) for b in runs.complete(1)]
    assert got == [(b.key, b.n_rows, b.payload["miss"].tolist()) for b in keyed.complete(1)]
