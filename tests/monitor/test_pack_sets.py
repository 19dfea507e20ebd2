"""The set packer equals ``np.packbits(sets, axis=1)`` bit for bit, for every class count."""

import numpy as np
import pytest

from calwatch.kinds.sets import SetRows, pack_sets


@pytest.mark.parametrize("K", [1, 2, 3, 7, 8, 9, 15, 16, 17, 40])
@pytest.mark.parametrize("m", [0, 1, 33, 5_000])
def test_pack_sets_is_packbits(K: int, m: int) -> None:
    rng = np.random.default_rng(K * 1_000 + m)
    sets = rng.random((m, K)) < rng.uniform(0.05, 0.95)
    packed = pack_sets(sets)
    expected = np.packbits(sets, axis=1)
    assert packed.dtype == np.uint8 and packed.flags.c_contiguous
    np.testing.assert_array_equal(packed, expected)
    np.testing.assert_array_equal(SetRows.from_sets(sets).sets, sets)  # and back


def test_a_column_slice_packs_like_a_copy() -> None:
    wide = np.random.default_rng(0).random((100, 12)) < 0.5
    view = wide[:, 2:7]  # not contiguous
    np.testing.assert_array_equal(pack_sets(view), np.packbits(np.ascontiguousarray(view), axis=1))
