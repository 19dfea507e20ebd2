"""Growing history columns kept in memory the operating system can page out, once they are large.

A monitor keeps every batch's statistics, every detector's looks and every card row for the
whole stream, as numpy columns (:mod:`calwatch.stream.columns`, :mod:`calwatch.shift.looks`,
:mod:`calwatch.views.cards`): about 1.3 KB per batch at three calibrators, so ~130 MiB per 10⁵ batches.
That is the stream's history at batch resolution, and it is what the charts, brushing, late
labels and snapshots read, so it cannot be dropped. In the C heap it is *anonymous* memory:
without swap (the usual container) the kernel can never give it back, and a monitor fed for a
week at one batch a second grows by ~0.8 GiB until it is killed.

:func:`empty` allocates a column of at least :data:`PAGED_FROM_BYTES` in a shared mapping of an
unnamed temporary file (``O_TMPFILE``: nothing is left on disk, even after ``kill -9``) instead.
Its pages are file-backed: once written back (the kernel does that within ~30 s) they are clean
and reclaimable, so the history costs page cache the operating system can take back under
pressure rather than memory it cannot; reads fault them back in from disk. The process's
anonymous memory stays flat however long the stream runs (``RssAnon``; the resident file pages
count as ``RssFile``). The values are the same numpy arrays, bit for bit, in the same dtypes:
only where their bytes live changes.

The file's blocks are reserved up front (``posix_fallocate``), so a full disk is an ``OSError``
here, not a ``SIGBUS`` later; any failure to map (no such directory, no space, a platform
without ``mmap`` through libc) falls back to an ordinary in-memory array. The mapping is made
through libc rather than :mod:`mmap` so that no file descriptor stays open per column (Python's
``mmap`` keeps one; a monitor has hundreds of columns). A forked child shares these pages with
its parent (``MAP_SHARED``): it may read the history, and must not write to it.

The folder is ``$CALWATCH_HISTORY_DIR`` when set, else the system's temporary folder. Where that
is a tmpfs the pages are shared memory instead of disk: no worse than the heap, no better.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
import mmap
import os
import sys
import tempfile
from typing import Any

import numpy as np
import numpy.typing as npt

HISTORY_DIR_ENV = "CALWATCH_HISTORY_DIR"
PAGED_FROM_ENV = "CALWATCH_PAGED_FROM_BYTES"


def _paged_from(default: int = 64 * 1024) -> int:
    """``$CALWATCH_PAGED_FROM_BYTES`` when it is a whole number ≥ 0, else ``default``."""
    text = os.environ.get(PAGED_FROM_ENV, "").strip()
    return int(text) if text.isdigit() else default


#: Columns at least this large (bytes) live in a file mapping; smaller ones in the heap. At 64 KiB
#: (the default) the heap part of a monitor's history is bounded by ~64 KiB per column (a few
#: hundred columns), and a column moves out after ~8,000 batches of one float64 a batch. Set
#: ``$CALWATCH_PAGED_FROM_BYTES`` before import to change it (0: every column; a huge number: none).
PAGED_FROM_BYTES = _paged_from()


class _Mapping:
    """Owns one shared file mapping; unmaps it when the last array viewing it is freed.

    Arrays made from it keep it alive through their ``base`` chain, so the mapping outlives
    every view of it and no view can outlive the mapping.
    """

    __slots__ = ("__array_interface__", "_address", "_length", "_unmap")

    def __init__(self, address: int, length: int, unmap: Any) -> None:
        self._address = address
        self._length = length
        self._unmap = unmap
        self.__array_interface__ = {
            "shape": (length,),
            "typestr": "|u1",
            "data": (address, False),
            "version": 3,
        }

    def __del__(self) -> None:
        self._unmap(self._address, self._length)


@functools.cache
def _libc_mmap() -> tuple[Any, Any] | None:
    """The C library's ``mmap`` and ``munmap`` with their signatures, or None where it has none."""
    if not (sys.platform.startswith("linux") or sys.platform == "darwin"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        map_, unmap = libc.mmap, libc.munmap
    except (OSError, AttributeError):
        return None
    int_ = ctypes.c_int
    map_.argtypes = [ctypes.c_void_p, ctypes.c_size_t, int_, int_, int_, ctypes.c_int64]  # off_t: 64-bit
    map_.restype = ctypes.c_void_p
    unmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    unmap.restype = ctypes.c_int
    return map_, unmap


def history_dir() -> str:
    """The folder for paged columns' (unnamed) files: ``$CALWATCH_HISTORY_DIR`` or the temp folder."""
    return os.environ.get(HISTORY_DIR_ENV) or tempfile.gettempdir()


def _mapped_bytes(length: int) -> npt.NDArray[np.uint8] | None:
    """``length`` zeroed bytes in a shared mapping of a new unnamed file, or None if it cannot be made."""
    calls = _libc_mmap()
    if calls is None:
        return None
    map_, unmap = calls
    try:
        with tempfile.TemporaryFile(dir=history_dir()) as file:
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(file.fileno(), 0, length)  # ENOSPC now, not SIGBUS on a later write
            else:  # macOS: no fallocate; the file is sized, its blocks taken as pages are written
                os.ftruncate(file.fileno(), length)
            address = map_(None, length, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, file.fileno(), 0)
    except OSError:
        return None
    if address is None or address == ctypes.c_void_p(-1).value:  # MAP_FAILED
        return None
    return np.asarray(_Mapping(address, length, unmap))  # the mapping stays open after the file is closed


def empty(shape: int | tuple[int, ...], dtype: npt.DTypeLike) -> npt.NDArray[Any]:
    """An uninitialised array like :func:`numpy.empty`, in a file mapping when it is large.

    Parameters
    ----------
    shape, dtype
        As for :func:`numpy.empty` (C order).

    Returns
    -------
    numpy.ndarray
        A writable array of that shape and dtype. At least :data:`PAGED_FROM_BYTES` large, it views
        a shared mapping of an unnamed temporary file (its ``base`` chain owns the mapping);
        smaller, or where no mapping can be made, it is an ordinary heap array.
    """
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    kind = np.dtype(dtype)
    length = math.prod(shape) * kind.itemsize
    if length < PAGED_FROM_BYTES or kind.hasobject:
        return np.empty(shape, dtype=kind)
    raw = _mapped_bytes(length)
    if raw is None:
        return np.empty(shape, dtype=kind)
    return raw.view(kind).reshape(shape)


def grown(data: npt.NDArray[Any], need: int, *, factor: float = 1.5) -> npt.NDArray[Any]:
    """``data`` with room for at least ``need`` rows: the same array if it has it, else a larger copy.

    Capacity grows by ``factor`` (amortised O(1) appends); the new array comes from :func:`empty`,
    so a column that has grown large moves into a file mapping. Rows past ``len(data)`` are
    uninitialised.
    """
    if need <= len(data):
        return data
    capacity = max(need, int(len(data) * factor) + 1)
    out = empty((capacity, *data.shape[1:]), data.dtype)
    out[: len(data)] = data
    return out


def is_paged(array: npt.NDArray[Any]) -> bool:
    """Whether ``array`` views a file mapping made by :func:`empty`."""
    base: Any = array
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, _Mapping)


def adopted(array: npt.NDArray[Any], dtype: npt.DTypeLike | None = None) -> npt.NDArray[Any]:
    """``array``'s values, cast to ``dtype`` (default its own), in a column from :func:`empty`.

    For columns loaded or widened whole: one copy, straight into the (paged when large) column.
    """
    out = empty(array.shape, array.dtype if dtype is None else dtype)
    out[...] = array
    return out
