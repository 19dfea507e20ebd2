"""Compiled hashing of row ids for the repeated-id check (numba, no GIL).

The duplicate-id check (:mod:`calwatch.scale.duplicates`) hashes every row's id and files the
hash by its top bits; done with polars' row hash, a one-byte ``argsort`` and a gather, it cost
the reading thread more than the parquet decoding did (~160 ns a row). For integer-like ids
(integers, dates, timestamps) the hash here is a SplitMix64 finaliser (Steele, Lea & Flood
2014) — a bijection of the id, so two ids never collide — and the partition is one counting
pass; both release the GIL, so they run on the kernel's worker threads beside the chunk's
statistics.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from calwatch.engine._compiled import compiled
from calwatch.engine.conformal.kernels import splitmix64 as _mix


@compiled
def one_hashes(ids: Any, out: Any) -> None:
    """``out[i] = mix(mix(φ) + id_i)`` over uint64 ids: a bijection, so distinct ids never collide."""
    seed = _mix(np.uint64(0x9E3779B97F4A7C15))
    for i in range(out.shape[0]):
        out[i] = _mix(seed + ids[i])


@compiled
def partition(hashes: Any, shift: int, out: Any, bounds: Any) -> None:
    """``hashes`` grouped by the bits above ``shift`` into ``out``: group ``(hash >> shift) & mask``.

    ``bounds`` has one entry more than there are groups, a power of two ``G``; the mask is
    ``G - 1``, so with ``shift = 64 - log2(G)`` the group is the hash's top bits, and with a
    smaller shift it is the ``log2(G)`` bits just above it. Group ``p`` is
    ``out[bounds[p]:bounds[p + 1]]``. A counting sort: one pass to count each group, one to
    scatter (stable within a group), and no temporary the size of ``hashes``.
    """
    s = np.uint64(shift)
    mask = np.uint64(bounds.shape[0] - 2)
    bounds[:] = 0
    for i in range(hashes.shape[0]):
        bounds[np.intp((hashes[i] >> s) & mask) + 1] += 1
    for p in range(1, bounds.shape[0]):
        bounds[p] += bounds[p - 1]
    fill = bounds[:-1].copy()
    for i in range(hashes.shape[0]):
        group = np.intp((hashes[i] >> s) & mask)
        out[fill[group]] = hashes[i]
        fill[group] += 1


__all__ = ["one_hashes", "partition"]
