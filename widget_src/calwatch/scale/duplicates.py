"""Ids repeated within a bucket, found across every chunk of a table in bounded memory.

The kernel sees one chunk at a time, so a repeat split over two chunks escapes it. Each chunk's
``(bucket, id)`` pairs are hashed to 64 bits and appended to one of :data:`PARTITIONS` files by
the hash's top bits; once the table is read, each file is sorted on its own and equal
neighbours are repeats. Memory is one partition (``8·n/PARTITIONS`` bytes), disk ``8·n`` bytes.
A repeated hash is confirmed on the rows themselves before anything is reported, so a hash
collision (probability about ``n²/2⁶⁵``) never rejects a good table.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

PARTITIONS = 64
#: Hashes held in memory before they are written out (8 MiB).
BUFFER = 1 << 20
_SHIFT = np.uint64(64 - 6)  # top 6 bits choose the partition


class DuplicateCheck:
    """Collect ``(bucket, id)`` hashes chunk by chunk; :meth:`repeated_hashes` once all are in."""

    def __init__(self, bucket: str, id: str) -> None:
        self.bucket, self.id = bucket, id
        self.folder = Path(tempfile.mkdtemp(prefix="calwatch-ids-"))
        self._files = [self.folder / f"{p:02d}.u64" for p in range(PARTITIONS)]
        self._pending: list[npt.NDArray[np.uint64]] = []
        self._pending_rows = 0

    def add(self, chunk: pa.RecordBatch) -> None:
        """Hash a chunk's ``(bucket, id)`` pairs (written to the partition files every :data:`BUFFER`)."""
        hashes = key_hashes(chunk, self.bucket, self.id)
        self._pending.append(hashes)
        self._pending_rows += hashes.shape[0]
        if self._pending_rows >= BUFFER:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        hashes = np.concatenate(self._pending)
        self._pending, self._pending_rows = [], 0
        part = (hashes >> _SHIFT).astype(np.uint8)
        order = np.argsort(part, kind="stable")  # a radix sort on one byte
        bounds = np.searchsorted(part[order], np.arange(PARTITIONS + 1))
        for p in np.flatnonzero(np.diff(bounds)):
            with self._files[p].open("ab") as handle:
                hashes[order[bounds[p] : bounds[p + 1]]].tofile(handle)

    def repeated_hashes(self) -> npt.NDArray[np.uint64]:
        """Hashes seen more than once (usually none)."""
        self._flush()
        found = []
        for file in self._files:
            if not file.exists():
                continue
            values = np.sort(np.fromfile(file, dtype=np.uint64))
            same = values[1:] == values[:-1]
            if same.any():
                found.append(np.unique(values[1:][same]))
        return np.concatenate(found) if found else np.zeros(0, dtype=np.uint64)

    def close(self) -> None:
        """Remove the partition files."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> DuplicateCheck:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def key_hashes(chunk: pa.RecordBatch, bucket: str, id: str) -> npt.NDArray[np.uint64]:
    """A 64-bit hash of each row's ``(bucket, id)`` (polars' row hash, fixed seeds: stable in a run)."""
    frame = pl.from_arrow(pa.Table.from_batches([chunk]).select([bucket, id]))
    assert isinstance(frame, pl.DataFrame)
    return frame.hash_rows(seed=0).to_numpy().astype(np.uint64, copy=False)


def confirm(
    hashes: npt.NDArray[np.uint64], chunks: Callable[[], Iterator[pa.RecordBatch]], bucket: str, id: str
) -> tuple[Any, Any, int] | None:
    """The first ``(bucket, id, times)`` truly repeated among rows whose key hash is in ``hashes``."""
    wanted = set(hashes.tolist())
    seen: dict[tuple[Any, Any], int] = {}
    for chunk in chunks():
        keep = np.isin(key_hashes(chunk, bucket, id), hashes)
        if not keep.any():
            continue
        picked = chunk.filter(pa.array(keep))
        for b, i in zip(picked.column(bucket).to_pylist(), picked.column(id).to_pylist(), strict=True):
            seen[(b, i)] = seen.get((b, i), 0) + 1
    del wanted
    repeats = [(b, i, n) for (b, i), n in seen.items() if n > 1]
    return repeats[0] if repeats else None


__all__ = ["PARTITIONS", "DuplicateCheck", "confirm", "key_hashes"]
