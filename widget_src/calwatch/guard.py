"""One lock per monitor: every public call runs under it, and listeners hear of changes after it.

calwatch's concurrency model. A monitor may be fed from a background thread (a queue consumer, a
serving callback) while the notebook and the widget read it and its controls call into it:

* every public method of a monitor runs under the monitor's re-entrant lock (:func:`guarded`),
  so mutations are serialised and each read sees one moment of the stream (a summary never
  mixes a batch's rows with another call's labels);
* a mutating call computes first and commits at the end, so a call that raises leaves the
  monitor as it was;
* listeners (the widget) are told of a change only after the call that made it has released
  the lock, in the thread that made it; they read the monitor through its public methods, or
  hold :attr:`Monitor.lock <calwatch.monitor.Monitor.lock>` to read several things at once.
  Nothing waits on the front end while holding the lock.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])


class FairRLock:
    """A re-entrant lock handed to the threads that wait for it in the order they came (FIFO).

    ``threading.RLock`` is not fair: the thread that releases it usually takes it again before a
    waiting thread has woken up. With four producer threads calling ``observe`` back to back, the
    labeller and the readers waited so long that the labels fell behind the window and had to
    come from the row log on disk (``benchmarks/bench_concurrency.py``: 4,308 rows/s and a
    reader p95 of 1.1 s). Here a release hands the lock straight to the oldest waiter, so every
    caller waits for at most the calls queued before it. Same interface as ``RLock`` for
    ``with``, ``acquire(blocking, timeout)`` and ``release``; about a microsecond more per call.
    """

    __slots__ = ("_count", "_mutex", "_owner", "_waiters")

    def __init__(self) -> None:
        self._mutex = threading.Lock()  # guards the fields below, held for a few instructions
        self._owner: int | None = None  # thread ident of the holder
        self._count = 0  # re-entry depth of the holder
        self._waiters: deque[tuple[int, threading.Lock]] = deque()  # (ident, gate), oldest first

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock (again, if this thread holds it); wait in line if another thread does."""
        me = threading.get_ident()
        with self._mutex:
            if self._owner == me:
                self._count += 1
                return True
            if self._owner is None:  # free (a release with waiters hands it over: none wait now)
                self._owner, self._count = me, 1
                return True
            if not blocking:
                return False
            gate = threading.Lock()
            gate.acquire()
            entry = (me, gate)
            self._waiters.append(entry)
        if gate.acquire(timeout=timeout if timeout >= 0 else -1):
            return True  # handed over by release(): owner and count are already ours
        with self._mutex:
            try:
                self._waiters.remove(entry)
            except ValueError:  # handed over just as the wait timed out: it is ours
                pass
            else:
                return False
        gate.acquire()  # already released by the hand-over: returns at once
        return True

    def release(self) -> None:
        """Leave the lock (once per acquire); the last release hands it to the oldest waiter."""
        with self._mutex:
            if self._owner != threading.get_ident():
                msg = "cannot release a lock this thread does not hold"
                raise RuntimeError(msg)
            self._count -= 1
            if self._count:
                return
            if self._waiters:
                owner, gate = self._waiters.popleft()
                self._owner, self._count = owner, 1
                gate.release()
            else:
                self._owner = None

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "unlocked" if self._owner is None else f"held by {self._owner} ({self._count})"
        return f"<FairRLock {state}, {len(self._waiters)} waiting>"


class Guard:
    """A re-entrant lock, how deep the current holder is in guarded calls, and notifications to send."""

    def __init__(self) -> None:
        self.lock = FairRLock()
        self.depth = 0
        self.pending: list[tuple[int, ...]] = []


class Guarded(Protocol):
    """What :func:`guarded` needs of an object."""

    @property
    def _guard(self) -> Guard: ...

    def _send_notifications(self, batches: tuple[int, ...]) -> None: ...


def guard_of(obj: Any) -> Guard:
    """The object's guard, created on first use (also for objects rebuilt without ``__init__``)."""
    found: Guard = obj.__dict__.get("_guard_state") or obj.__dict__.setdefault("_guard_state", Guard())
    return found


def guarded(method: F) -> F:
    """Run ``method`` under its object's lock; send the notifications it queued once the lock is free.

    Notifications queued by a call that raises are dropped (the call changed nothing).
    """

    @functools.wraps(method)
    def wrapper(self: Guarded, /, *args: Any, **kwargs: Any) -> Any:
        guard = self._guard
        with guard.lock:
            guard.depth += 1
            try:
                result = method(self, *args, **kwargs)
            finally:
                guard.depth -= 1
                pending: list[tuple[int, ...]] = []
                if guard.depth == 0:
                    pending, guard.pending = guard.pending, []
        for batches in pending:
            self._send_notifications(batches)
        return result

    return cast(F, wrapper)


def one_moment(view: F) -> F:
    """Run a view of a monitor (its first argument) under the monitor's lock.

    A view that reads several things (window records and their rows, summaries, notes) must read
    them at one moment: between two reads a producer thread may move a batch out of the window
    (its rows become ``None``) or label it. The lock is re-entrant, so views calling views (and
    the widget, which already holds it) nest freely. Nothing here waits on a front end.
    """

    @functools.wraps(view)
    def wrapper(monitor: Any, /, *args: Any, **kwargs: Any) -> Any:
        with guard_of(monitor).lock:
            return view(monitor, *args, **kwargs)

    return cast(F, wrapper)


__all__ = ["FairRLock", "Guard", "guard_of", "guarded", "one_moment"]
