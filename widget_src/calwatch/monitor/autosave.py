"""Saving a monitor by itself as the stream goes: every N batches, and no change unsaved for long.

:class:`AutoSave` listens to a monitor (:meth:`Monitor.subscribe
<calwatch.monitor.monitor.Monitor.subscribe>`): listeners run after the call that changed the monitor has
released its lock, so an observe or label call never waits on a save while holding the lock, and
the save itself is the monitor's own atomic :meth:`Monitor.save
<calwatch.monitor.monitor.Monitor.save>` (a crash leaves the old snapshot or the new one). A snapshot is
written

* when ``every_batches`` batches have been observed since the last save, in the thread that
  observed the last of them, right after its call;
* when a change (a batch, late labels, a note, an acknowledgement) has waited ``every_seconds``
  unsaved, from a timer thread: so labels and notes reach the snapshot too, and a throttled
  autosave (``every_batches=None``) writes at most once per ``every_seconds``.

A save that fails never breaks the call that triggered it: the error is counted in
``Monitor.status()["autosave_errors"]``, kept in :attr:`AutoSave.last_error`, and a
:class:`RuntimeWarning` says so once per run of failures; the next change tries again.

Lock order, to stay free of deadlocks: the monitor's lock, then the autosaver's own (never the
reverse while waiting). ``Monitor.status()`` reads the counters without the autosaver's lock.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import warnings
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol


class Saveable(Protocol):
    """What :class:`AutoSave` needs of a monitor."""

    @property
    def lock(self) -> threading.RLock:
        """The monitor's re-entrant lock."""

    @property
    def n_batches(self) -> int:
        """Batches observed so far."""

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write a snapshot to ``path``, atomically."""

    def subscribe(self, listener: Callable[[tuple[int, ...]], None]) -> Callable[[], None]:
        """Call ``listener`` after each change; return an unsubscribe."""


class AutoSave:
    """Keep a snapshot of ``monitor`` at ``path`` current (see the module docstring).

    Build it with :meth:`Monitor.autosave <calwatch.monitor.monitor.Monitor.autosave>`, which also stops
    the monitor's earlier autosaver.

    Parameters
    ----------
    monitor : Monitor
        The monitor to save.
    path : path-like
        The snapshot folder (written with :meth:`Monitor.save`; an existing folder must be a
        calwatch snapshot).
    every_batches : int or None
        Save once this many batches have been observed since the last save (``None``: only on
        time).
    every_seconds : float or None
        Save any change (batches, labels, notes) at most this many seconds after it was made
        (``None``: only on batches).

    Attributes
    ----------
    path : Path
        The snapshot folder.
    saves : int
        Snapshots written so far (the first, when the autosaver starts, included).
    errors : int
        Saves that failed.
    last_error : str
        The last failure (``""`` once a save succeeds again).
    last_saved_at : str or None
        UTC time of the last successful save (ISO 8601).

    Raises
    ------
    TypeError, ValueError
        If an argument is of the wrong type or out of range (the message names it).
    """

    def __init__(
        self,
        monitor: Saveable,
        path: str | os.PathLike[str],
        *,
        every_batches: int | None = 1,
        every_seconds: float | None = 5.0,
    ) -> None:
        if not isinstance(path, (str, os.PathLike)):
            msg = f"path must be a folder path (str or path-like); got {type(path).__name__}"  # type: ignore[unreachable]
            raise TypeError(msg)
        if every_batches is not None and (
            isinstance(every_batches, bool) or not isinstance(every_batches, int) or every_batches < 1
        ):
            msg = f"every_batches must be a positive integer or None; got {every_batches!r}"
            raise ValueError(msg)
        if every_seconds is not None and (
            isinstance(every_seconds, bool)
            or not isinstance(every_seconds, (int, float))
            or not math.isfinite(every_seconds)
            or every_seconds <= 0
        ):
            msg = f"every_seconds must be a positive number of seconds or None; got {every_seconds!r}"
            raise ValueError(msg)
        if every_batches is None and every_seconds is None:
            msg = "every_batches and every_seconds cannot both be None: the autosaver would never save"
            raise ValueError(msg)
        self.path = Path(path)
        self.every_batches = every_batches
        self.every_seconds = None if every_seconds is None else float(every_seconds)
        self.saves = 0
        self.errors = 0
        self.last_error = ""
        self.last_saved_at: str | None = None
        self._monitor = monitor
        self._lock = threading.Lock()
        self._saved_batches = 0
        self._dirty = False
        self._timer: threading.Timer | None = None
        self._stopped = False
        self._unsubscribe: Callable[[], None] | None = None

    def start(self) -> AutoSave:
        """Write the first snapshot now and follow the monitor's changes from then on.

        Raises
        ------
        SnapshotError, OSError
            If the first snapshot cannot be written (e.g. ``path`` is a folder that is not a
            calwatch snapshot): nothing is followed then.
        """
        with self._monitor.lock:
            self._monitor.save(self.path)
            self._saved(self._monitor.n_batches)
            self._unsubscribe = self._monitor.subscribe(self._changed)
        return self

    @property
    def active(self) -> bool:
        """Whether the autosaver still follows the monitor."""
        return not self._stopped and self._unsubscribe is not None

    def stop(self, *, save: bool = True) -> None:
        """Stop following the monitor; first save a change still unsaved (``save=True``).

        A failing final save is recorded like any other (:attr:`last_error`), not raised.
        """
        with self._lock:
            self._cancel_timer()
            pending = self._dirty and not self._stopped
        if save and pending:
            self.save_now()
        with self._lock:
            self._stopped = True
            self._cancel_timer()
            unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()

    def save_now(self) -> bool:
        """Save the monitor now, whatever is due; return whether the snapshot was written."""
        with self._monitor.lock:
            with self._lock:
                self._cancel_timer()
                if self._stopped:
                    return False
            try:
                self._monitor.save(self.path)
            except Exception as err:  # a failing autosave must never break the stream
                self._failed(err)
                return False
            self._saved(self._monitor.n_batches)
            return True

    def describe(self) -> dict[str, Any]:
        """Path, policy and counters, as a dict (for logs and status lines)."""
        return {
            "path": str(self.path),
            "every_batches": self.every_batches,
            "every_seconds": self.every_seconds,
            "active": self.active,
            "saves": self.saves,
            "errors": self.errors,
            "last_error": self.last_error,
            "last_saved_at": self.last_saved_at,
        }

    def __repr__(self) -> str:
        state = "active" if self.active else "stopped"
        return (
            f"AutoSave(path={str(self.path)!r}, every_batches={self.every_batches}, "
            f"every_seconds={self.every_seconds}, {state}, saves={self.saves}, errors={self.errors})"
        )

    # ------------------------------------------------------------------ internals
    def _changed(self, batches: tuple[int, ...]) -> None:
        """The monitor's listener: save if due, else make sure the change is saved in time."""
        try:
            n_batches = self._monitor.n_batches
            with self._lock:
                if self._stopped:
                    return
                self._dirty = True
                due = self.every_batches is not None and n_batches - self._saved_batches >= self.every_batches
                if not due:
                    self._arm_timer()
            if due:
                self._save_if_dirty()
        except Exception as err:  # never let a listener break the call that notified it
            self._failed(err)

    def _save_if_dirty(self) -> None:
        with self._monitor.lock:
            with self._lock:
                if not self._dirty or self._stopped:
                    return  # another thread saved this change meanwhile
                self._cancel_timer()
            try:
                self._monitor.save(self.path)
            except Exception as err:
                self._failed(err)
                return
            self._saved(self._monitor.n_batches)

    def _arm_timer(self) -> None:
        """Under ``self._lock``: a timer that saves the pending change ``every_seconds`` from now."""
        if self.every_seconds is None or self._timer is not None:
            return
        timer = threading.Timer(self.every_seconds, self._on_timer)
        timer.daemon = True
        timer.name = f"calwatch-autosave {self.path.name}"
        self._timer = timer
        timer.start()

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
        try:
            self._save_if_dirty()
        except Exception as err:
            self._failed(err)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _saved(self, n_batches: int) -> None:
        with self._lock:
            self._saved_batches = n_batches
            self._dirty = False
            self.saves += 1
            self.last_error = ""
            self.last_saved_at = datetime.now(UTC).isoformat(timespec="milliseconds")

    def _failed(self, err: BaseException) -> None:
        with self._lock:
            first = self.last_error == ""
            self.errors += 1
            self.last_error = f"{type(err).__name__}: {err}"
            if self.every_seconds is not None and self._dirty and not self._stopped:
                self._arm_timer()  # try again later even if the stream goes quiet
        if first:
            message = f"calwatch autosave to {str(self.path)!r} failed ({self.last_error})"
            with contextlib.suppress(Exception):  # warnings turned into errors must not break the call
                warnings.warn(f"{message}; the stream goes on", RuntimeWarning, stacklevel=2)


__all__ = ["AutoSave", "Saveable"]
