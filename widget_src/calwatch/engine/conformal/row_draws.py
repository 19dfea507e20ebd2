"""Uniform draws keyed by row id: the same ``u`` for a row wherever and whenever it is scored.

A randomised conformal score ``s(x, y; u)`` needs one ``u ~ U(0, 1)`` per test row, independent
of everything else. Drawing it from one sequential random stream makes the draw depend on the
order in which rows are scored: a table split across Spark partitions, or a prediction log read
in chunks, would draw other values than the in-memory monitor did for the same rows. Here
``u`` is a keyed hash of the row's id instead,

    u(id) = ⌊h(key, id) / 2¹¹⌋ · 2⁻⁵³,        h: a 64-bit mix keyed by (seed, stream),

so every path draws the same ``u`` for the same row, independently of the others. For the
validity of the sets this is as good as a random stream: ``u`` is independent of the row's
features and label (the id carries no information about them), uniform on the 2⁵³ grid of
``[0, 1)`` like numpy's own doubles, and distinct ids give (pseudo-)independent draws. A
fixed, public function of the id means a user who *chooses* ids after seeing ``u`` could bias
one row; ids assigned before prediction (row numbers, keys of a log) cannot.

Hashes (all stable across processes, machines and Python versions; Python's ``hash`` is not):

- integers (Python, numpy; any size, taken modulo 2⁶⁴): SplitMix64's finaliser
  (Steele, Lea & Flood 2014) of ``id + key``, applied twice, vectorised in numpy;
- strings: BLAKE2b with an 8-byte digest, keyed by ``key``, of the UTF-8 bytes; bytes alike
  with another tag;
- floats, booleans, tuples and anything else: BLAKE2b of a typed ``repr``.

An integer id and the string of its digits are different ids and get different draws, as
they are different ids for the monitor.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
U64 = npt.NDArray[np.uint64]

_MASK = (1 << 64) - 1
#: Integer ids drawn by the compiled pass from this many rows (a prediction log's chunks); fewer
#: stay in numpy, so a small batch never waits for numba's import.
COMPILED_FROM = 1 << 14
_GOLDEN = 0x9E3779B97F4A7C15


def _mix(z: U64) -> U64:
    """SplitMix64's finaliser on an array of uint64 (a bijection with full avalanche)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def stream_key(seed: int, stream: int) -> int:
    """The 64-bit key of draw stream ``stream`` of a calibrator seeded ``seed``.

    Examples
    --------
    >>> stream_key(0, 0) != stream_key(0, 1) != stream_key(1, 0)
    True
    """
    z = np.array([(int(seed) * _GOLDEN + int(stream) + 1) & _MASK], dtype=np.uint64)
    with np.errstate(over="ignore"):
        return int(_mix(_mix(z))[0])


def _hash_other(key: int, value: Any) -> int:
    if isinstance(value, str):
        data, tag = value.encode("utf-8"), b"s"
    elif isinstance(value, bytes):
        data, tag = value, b"b"
    else:
        data, tag = f"{type(value).__name__}:{value!r}".encode(), b"o"
    digest = hashlib.blake2b(tag + data, digest_size=8, key=key.to_bytes(8, "little")).digest()
    return int.from_bytes(digest, "little")


def _integer_array(ids: Any) -> U64 | None:
    """The ids as uint64 (two's complement, modulo 2⁶⁴) when every one is an integer, else None.

    Only a 1-D integer array or a sequence of Python ints qualifies: ``np.asarray`` of tuple ids
    would make a 2-D array of their parts.
    """
    if isinstance(ids, np.ndarray):
        if ids.ndim == 1 and ids.dtype.kind == "i":
            return ids.astype(np.int64, copy=False).view(np.uint64)
        if ids.ndim == 1 and ids.dtype.kind == "u":
            return ids.astype(np.uint64, copy=False)
        return None
    if set(map(type, ids)) != {int}:  # bools, numpy scalars, strings ...: hashed one by one
        return None
    try:  # the common case: every id fits int64 (numpy converts the list in C)
        return np.array(ids, dtype=np.int64).view(np.uint64)
    except OverflowError:
        return np.array([v & _MASK for v in ids], dtype=np.uint64)


def _integer_hashes(values: U64, key: int) -> U64:
    with np.errstate(over="ignore"):
        return _mix(_mix(values + np.uint64(key)))


def row_uniforms(
    seed: int, ids: Sequence[Hashable] | npt.NDArray[Any], *, stream: int = 0, columns: int = 1
) -> FloatArray:
    """One ``U(0, 1)`` draw per row id (``columns`` per row), the same wherever it is computed.

    Parameters
    ----------
    seed : int
        The calibrator's seed.
    ids : sequence of hashables, or a 1-D array
        Row ids (ints, strings, or any hashable with a stable ``repr``); numpy scalars count as
        the Python values they hold, so an id read from an Arrow column draws what the same id
        passed as a Python value draws.
    stream : int
        Which of the calibrator's draw streams (independent of one another).
    columns : int
        Draws per row: the result has shape ``(m,)`` for 1, else ``(m, columns)``.

    Returns
    -------
    ndarray of float64
        Values on the grid ``k · 2⁻⁵³``, ``0 ≤ u < 1``.

    Examples
    --------
    >>> u = row_uniforms(0, [1, 2, 3])
    >>> bool(((0 <= u) & (u < 1)).all()), bool(row_uniforms(0, np.array([2]))[0] == u[1])
    (True, True)
    """
    m = len(ids)
    integers = _integer_array(ids) if m else np.zeros(0, dtype=np.uint64)
    values: list[Any] = []
    is_int = np.zeros(0, dtype=bool)
    if integers is None:
        values = [v.item() if isinstance(v, np.generic) else v for v in ids]
        is_int = np.array([type(v) is int for v in values], dtype=bool)
        int_values = np.array([v & _MASK for v, i in zip(values, is_int, strict=True) if i], dtype=np.uint64)
    out = np.empty((m, columns), dtype=np.float64)
    for column in range(columns):
        key = stream_key(seed, stream * 1024 + column)
        if integers is not None and m >= COMPILED_FROM:
            from calwatch.engine.conformal.kernels import integer_uniforms  # compiled on first use

            draws = np.empty(m, dtype=np.float64)
            integer_uniforms(integers, np.uint64(key), draws)
            out[:, column] = draws
            continue
        if integers is not None:
            h = _integer_hashes(integers, key)
        else:
            h = np.zeros(m, dtype=np.uint64)
            h[is_int] = _integer_hashes(int_values, key)
            others = np.flatnonzero(~is_int)
            h[others] = np.array([_hash_other(key, values[i]) for i in others.tolist()], dtype=np.uint64)
        out[:, column] = (h >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return out[:, 0] if columns == 1 else out


__all__ = ["row_uniforms", "stream_key"]
