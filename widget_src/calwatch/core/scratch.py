"""Scratch folders that do not outlive their process, even one killed with ``kill -9``.

The row log, its label log and the duplicate-id check of a table write their parts to a new
temporary folder, removed when the object is collected or the interpreter exits
(:func:`weakref.finalize`). A process that never gets there (``SIGKILL``, the OOM killer, a
crashed kernel) used to leave the folder behind, and a row log's parts are the rows of every
batch that left the window: gigabytes in ``/tmp`` after a long stream.

Each folder made here therefore carries a lock its process holds for as long as it lives: the
file ``.owner`` inside it, locked with ``flock(LOCK_EX)`` through a descriptor the folder's
:class:`ScratchFolder` keeps open. The kernel drops that lock when the process ends, however it
ends. Making a new folder first sweeps the temporary directory: a folder of ours (our prefix and
an ``.owner`` file) whose lock can be taken has no living owner, and is removed. The lock file
is locked before it gets its name (it is made under another name, locked, then renamed), so a
sweep never sees the name of a lock nobody holds yet. Folders made by other programs, or by
calwatch before it kept these locks, have no ``.owner`` and are never touched.

Where ``fcntl`` is missing (Windows) folders are made and removed as before, without the sweep.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import weakref
from pathlib import Path

if sys.platform != "win32":
    import fcntl

#: The lock file inside every scratch folder; held locked by the folder's process while it lives.
OWNER = ".owner"


class ScratchFolder:
    """A new temporary folder, removed with this object, at exit, or by a later process's sweep.

    Parameters
    ----------
    prefix : str
        Start of the folder's name (``calwatch-rowlog-``, ...); the sweep looks at these only.

    Attributes
    ----------
    path : Path
        The folder.
    """

    def __init__(self, prefix: str) -> None:
        sweep_orphans(prefix)
        self.path = Path(tempfile.mkdtemp(prefix=prefix))
        self._lock_fd = _hold_owner_lock(self.path)
        self._finalizer = weakref.finalize(self, _remove, str(self.path), self._lock_fd, os.getpid())

    def remove(self) -> None:
        """Remove the folder now (it is removed with this object otherwise)."""
        self._finalizer()


def _hold_owner_lock(folder: Path) -> int | None:
    """Lock ``folder/.owner`` for this process's lifetime; the descriptor (None without fcntl)."""
    if sys.platform == "win32":  # pragma: no cover
        return None
    staged = folder / f"{OWNER}.{os.getpid()}"
    fd = os.open(staged, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(staged, folder / OWNER)  # the name appears already locked
    except BaseException:
        os.close(fd)
        raise
    return fd


def _remove(path: str, lock_fd: int | None, owner_pid: int) -> None:
    if os.getpid() != owner_pid:  # a forked child exiting: the folder is its parent's
        return
    shutil.rmtree(path, ignore_errors=True)
    if lock_fd is not None:
        with contextlib.suppress(OSError):
            os.close(lock_fd)


def sweep_orphans(prefix: str, directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the scratch folders of ``prefix`` whose process is gone; the folders removed.

    A folder is an orphan when it holds an ``.owner`` file whose lock can be taken without
    waiting (its owner would hold it). The lock is kept while the folder is removed, so two
    sweeping processes never race over one folder. Never raises: a folder that cannot be read or
    removed is left for a later sweep.

    Parameters
    ----------
    prefix : str
        Start of the folders' names.
    directory : path, optional
        Where to look (default: :func:`tempfile.gettempdir`).
    """
    if sys.platform == "win32":  # pragma: no cover
        return []
    removed: list[Path] = []
    root = Path(tempfile.gettempdir() if directory is None else directory)
    try:
        candidates = [p for p in root.iterdir() if p.name.startswith(prefix)]
    except OSError:
        return removed
    for folder in candidates:
        try:
            fd = os.open(folder / OWNER, os.O_RDWR | os.O_CLOEXEC)
        except OSError:  # not ours, not a folder, or already gone
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its process is alive
            os.close(fd)
            continue
        try:
            shutil.rmtree(folder, ignore_errors=True)
            if not folder.exists():
                removed.append(folder)
        finally:
            os.close(fd)
    return removed
