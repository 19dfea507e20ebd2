"""Ids repeated anywhere in a table, found across every chunk in bounded memory.

An id names one row for the monitor's life: a label joins every row that carries its id, so an
id in two buckets would be labelled twice (``observe`` refuses a repeated id the same way). The
kernel sees one chunk at a time, so a repeat split over two chunks escapes it. Each chunk's
ids are hashed to 64 bits (:func:`key_hashes`), grouped by the hash's top bits
with a counting sort (:mod:`calwatch.scale.id_hashes`) and appended to one of
:data:`PARTITIONS` files; once the table is read, each file is sorted on its own and equal
neighbours are repeats. A file of more than :data:`SORT_LIMIT` hashes is first split by its
hashes' next six bits, block by block, and so on, so memory stays bounded (a few times
``8·SORT_LIMIT`` bytes) however long the table; disk is ``8·n`` bytes, twice over while a split runs.
A repeated hash is confirmed on the rows themselves before anything is reported, so a hash
collision (probability about ``n²/2⁶⁵``) never rejects a good table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from calwatch.core.scratch import ScratchFolder

PARTITIONS = 64
#: Hashes held in memory before they are written out (8 MiB).
BUFFER = 1 << 20
#: Hashes one partition file may hold to be sorted in memory (8 MiB); a larger one is split first.
SORT_LIMIT = 1 << 20
_BITS = 6  # 2**_BITS == PARTITIONS: the bits that choose a partition, at each level
_SHIFT = np.uint64(64 - _BITS)  # top 6 bits choose the partition


class DuplicateCheck:
    """Collect id hashes chunk by chunk; :meth:`repeated_hashes` once all are in.

    :func:`grouped_hashes` (pure, without the GIL for integer-like keys) can run on a worker
    thread; :meth:`add_grouped` then only files its groups. :meth:`add` does both.
    """

    def __init__(self, id: str) -> None:
        self.id = id
        self._scratch = ScratchFolder("calwatch-ids-")
        self.folder = self._scratch.path
        self._files = [self.folder / f"{p:02d}.u64" for p in range(PARTITIONS)]
        self._pending: list[list[npt.NDArray[np.uint64]]] = [[] for _ in range(PARTITIONS)]
        self._pending_rows = 0

    def add(self, chunk: pa.RecordBatch) -> None:
        """Hash a chunk's ids (written to the partition files every :data:`BUFFER`)."""
        self.add_grouped(grouped_hashes(chunk, self.id))

    def add_grouped(self, grouped: tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]) -> None:
        """File the hashes :func:`grouped_hashes` returned."""
        hashes, bounds = grouped
        for p in np.flatnonzero(np.diff(bounds)).tolist():
            self._pending[p].append(hashes[bounds[p] : bounds[p + 1]])
        self._pending_rows += hashes.shape[0]
        if self._pending_rows >= BUFFER:
            self._flush()

    def _flush(self) -> None:
        for p, parts in enumerate(self._pending):
            if parts:
                with self._files[p].open("ab") as handle:
                    for part in parts:
                        part.tofile(handle)
        self._pending = [[] for _ in range(PARTITIONS)]
        self._pending_rows = 0

    def repeated_hashes(self) -> npt.NDArray[np.uint64]:
        """Hashes seen more than once (usually none)."""
        self._flush()
        found = [r for file in self._files if file.exists() for r in _repeats_in(file, level=1)]
        return np.concatenate(found) if found else np.zeros(0, dtype=np.uint64)

    def close(self) -> None:
        """Remove the partition files."""
        self._scratch.remove()

    def __enter__(self) -> DuplicateCheck:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _repeats_in(file: Path, level: int) -> list[npt.NDArray[np.uint64]]:
    """The hashes repeated in one partition file (whose hashes share their top ``6·level`` bits).

    A file of at most :data:`SORT_LIMIT` hashes is sorted in memory and equal neighbours are the
    repeats. A larger one is read :data:`BUFFER` hashes at a time and split by the next six bits
    into :data:`PARTITIONS` files beside it (removed once searched), and each of those is
    searched the same way: a repeat's copies share all their bits, so they land in one file. Once
    no bits are left (one key repeated more than :data:`SORT_LIMIT` times, after ten splits) the
    file is sorted as it is.
    """
    from calwatch.scale.id_hashes import partition

    count = file.stat().st_size // 8
    shift = 64 - _BITS * (level + 1)
    if count > SORT_LIMIT and shift >= 0:
        # Two buffers of BUFFER hashes, reused: a block read and the same block grouped by the
        # next six bits (a counting sort; an argsort and a gather held four such arrays at once,
        # ~40 MiB at the end of a 10^8-row table's check, its peak).
        parts = [file.with_name(f"{file.name}.{p:02d}") for p in range(PARTITIONS)]
        block = np.empty(min(count, BUFFER), dtype=np.uint64)
        grouped, bounds = np.empty_like(block), np.zeros(PARTITIONS + 1, dtype=np.int64)
        with file.open("rb") as source:
            while n := source.readinto(block.data) // 8:
                partition(block[:n], shift, grouped, bounds)
                for p in np.flatnonzero(np.diff(bounds)).tolist():
                    with parts[p].open("ab") as handle:
                        grouped[bounds[p] : bounds[p + 1]].tofile(handle)
        found: list[npt.NDArray[np.uint64]] = []
        for part in parts:
            if part.exists():
                found.extend(_repeats_in(part, level + 1))
                part.unlink()
        return found
    repeats = repeated(np.fromfile(file, dtype=np.uint64))
    return [repeats] if repeats.shape[0] else []


def repeated(hashes: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """The values seen more than once in ``hashes``, each once, sorted (one sort, equal neighbours)."""
    values = np.sort(hashes)
    found: npt.NDArray[np.uint64] = np.unique(values[1:][values[1:] == values[:-1]])
    return found


def grouped_hashes(chunk: pa.RecordBatch, id: str) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """A chunk's key hashes grouped by partition (their top bits), and each group's bounds."""
    from calwatch.scale.id_hashes import partition

    hashes = key_hashes(chunk, id)
    grouped = np.empty_like(hashes)
    bounds = np.zeros(PARTITIONS + 1, dtype=np.int64)
    partition(hashes, int(_SHIFT), grouped, bounds)
    return grouped, bounds


def _integer_keys(column: pa.Array) -> npt.NDArray[np.uint64] | None:
    """An integer-like column (integers, dates, times, timestamps) as uint64 values; None otherwise."""
    kind = column.type
    if pa.types.is_dictionary(kind) or column.null_count:
        return None
    if pa.types.is_date32(kind) or pa.types.is_time32(kind):
        column = column.view(pa.int32())
    elif (
        pa.types.is_date64(kind)
        or pa.types.is_timestamp(kind)
        or pa.types.is_time64(kind)
        or pa.types.is_duration(kind)
    ):
        column = column.view(pa.int64())
    elif not pa.types.is_integer(kind):
        return None
    values = np.asarray(column.to_numpy(zero_copy_only=False))
    if values.dtype.kind == "u":
        return values.astype(np.uint64, copy=False)
    return values.astype(np.int64, copy=False).view(np.uint64)


def key_hashes(chunk: pa.RecordBatch, id: str) -> npt.NDArray[np.uint64]:
    """A 64-bit hash of each row's id, stable within a run.

    An id must be distinct across the whole table, not only within its bucket, so only the id
    goes in. Integer-like ids: :func:`calwatch.scale.id_hashes.one_hashes` (compiled, a
    bijection of the id: two ids never collide); any other type: polars' hash with fixed seeds.
    """
    ids = _integer_keys(chunk.column(id))
    if ids is not None:
        from calwatch.scale.id_hashes import one_hashes

        out = np.empty(ids.shape[0], dtype=np.uint64)
        one_hashes(ids, out)
        return out
    frame = pl.from_arrow(pa.Table.from_batches([chunk]).select([id]))
    assert isinstance(frame, pl.DataFrame)
    return frame.hash_rows(seed=0).to_numpy().astype(np.uint64, copy=False)


def confirm(
    hashes: npt.NDArray[np.uint64], chunks: Callable[[], Iterator[pa.RecordBatch]], bucket: str, id: str
) -> tuple[Any, int, list[Any]] | None:
    """The first ``(id, times, buckets)`` truly repeated among rows whose id hash is in ``hashes``.

    ``buckets`` are the buckets its rows came in (the same one repeated for a repeat within a bucket).
    """
    seen: dict[Any, list[Any]] = {}
    for chunk in chunks():
        keep = np.isin(key_hashes(chunk, id), hashes)
        if not keep.any():
            continue
        picked = chunk.filter(pa.array(keep))
        for b, i in zip(picked.column(bucket).to_pylist(), picked.column(id).to_pylist(), strict=True):
            seen.setdefault(i, []).append(b)
    repeats = [(i, len(b), b) for i, b in seen.items() if len(b) > 1]
    return repeats[0] if repeats else None


def repeated_id(column: str, row_id: Any, times: int, buckets: Sequence[Any]) -> ValueError:
    """The error for an id seen ``times`` times in a table (every engine's message)."""
    where = sorted({repr(b) for b in buckets})
    place = f"in bucket {where[0]}" if len(where) == 1 else f"in buckets {', '.join(where[:3])}"
    msg = (
        f"id column {column!r}: id {row_id!r} appears {times} times ({place}); an id names one row, "
        "so ids must be distinct across the whole table (a label would otherwise join every copy)"
    )
    return ValueError(msg)


__all__ = [
    "PARTITIONS",
    "SORT_LIMIT",
    "DuplicateCheck",
    "confirm",
    "grouped_hashes",
    "key_hashes",
    "repeated",
    "repeated_id",
]
