"""The one way the engine compiles a loop: numba, without the GIL, cached on disk.

Some statistics are recursions over rows (a betting capital, a p-value against every earlier
row) or per-row scans that numpy can only do with large temporaries; compiled, each is one pass
of a few operations per element. Modules holding such kernels (``*/kernels.py``) import this,
and are themselves imported only when a kernel first runs, so ``import calwatch`` never loads
numba; the first call compiles the kernel (or loads it from the on-disk cache).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from numba import njit

F = TypeVar("F", bound=Callable[..., Any])


def compiled(fn: F) -> F:
    """Compile ``fn`` without the Python interpreter (no GIL), cached on disk."""
    return cast("F", njit(cache=True, nogil=True)(fn))


__all__ = ["compiled"]
