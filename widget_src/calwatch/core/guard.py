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
  hold :attr:`Monitor.lock <calwatch.monitor.monitor.Monitor.lock>` to read several things at once.
  Nothing waits on the front end while holding the lock;
* producers do not crowd out a labeller (:func:`guarded_yielding`, :func:`guarded_urgent`):
  observations queue for the lock one at a time, and a label waiting for it goes before the
  observations not yet queued. Otherwise, with N producers a labeller gets one turn in N + 1,
  its rows leave the window while it waits, and every label then comes from the row log on
  disk (about ten times the cost).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])

#: The longest a yielding call waits for urgent ones before it competes for the lock anyway
#: (a courtesy, never a deadlock: an urgent call held up elsewhere does not stop the stream).
YIELD_AT_MOST_S = 1.0


class Guard:
    """A re-entrant lock, how deep the current holder is in guarded calls, and notifications to send.

    Observations (``yielding`` calls) queue for the lock one at a time, through ``turnstile``:
    however many producer threads there are, they hold one place in the lock's queue, so a
    labeller or a reader waits for at most one observation. And while a label (an ``urgent``
    call, counted in ``urgent``) waits for the lock, the next observation waits at ``gate`` until
    it is in (at most :data:`YIELD_AT_MOST_S`). Without this, with N producers a labeller got one
    turn in N + 1 while it needs one per observed batch: it fell behind the window for good.

    ``undelivered`` counts the notifications of committed calls whose listeners have not all
    returned yet (they run after the lock is released). Read under the lock, 0 means every
    listener (a live view among them) has seen every change made so far.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.depth = 0
        self.pending: list[tuple[int, ...]] = []
        self.urgent = 0
        self.gate = threading.Condition(threading.Lock())
        self.turnstile = threading.Lock()
        self.undelivered = 0
        self._counting = threading.Lock()  # undelivered goes up under the lock and down outside it

    def count_undelivered(self, change: int) -> None:
        """Add ``change`` to :attr:`undelivered` (safe from any thread, lock held or not)."""
        with self._counting:
            self.undelivered += change

    @contextlib.contextmanager
    def held(self, *, urgent: bool = False, yielding: bool = False) -> Iterator[None]:
        """Hold the lock: an ``urgent`` caller goes before the ``yielding`` ones not yet queued.

        A thread that already holds the lock takes it again at once (it is re-entering; waiting
        at the turnstile or the gate could deadlock with a producer queued behind it).
        """
        if yielding and not cast(Any, self.lock)._is_owned():
            with self.turnstile:
                if self.urgent:
                    with self.gate:
                        self.gate.wait_for(lambda: self.urgent == 0, timeout=YIELD_AT_MOST_S)
                self.lock.acquire()
        elif urgent:
            with self.gate:
                self.urgent += 1
            try:
                self.lock.acquire()
            finally:
                with self.gate:
                    self.urgent -= 1
                    if self.urgent == 0:
                        self.gate.notify_all()
        else:
            self.lock.acquire()
        try:
            yield
        finally:
            self.lock.release()


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
    return _guarded(method, urgent=False, yielding=False)


def guarded_urgent(method: F) -> F:
    """:func:`guarded`, going before the :func:`guarded_yielding` calls that come while it waits."""
    return _guarded(method, urgent=True, yielding=False)


def guarded_yielding(method: F) -> F:
    """:func:`guarded`, letting the :func:`guarded_urgent` calls already waiting go first."""
    return _guarded(method, urgent=False, yielding=True)


def _guarded(method: F, *, urgent: bool, yielding: bool) -> F:
    @functools.wraps(method)
    def wrapper(self: Guarded, /, *args: Any, **kwargs: Any) -> Any:
        guard = self._guard
        with guard.held(urgent=urgent, yielding=yielding):
            guard.depth += 1
            try:
                result = method(self, *args, **kwargs)
            finally:
                guard.depth -= 1
                pending: list[tuple[int, ...]] = []
                if guard.depth == 0:
                    pending, guard.pending = guard.pending, []
            guard.count_undelivered(len(pending))  # the call committed: its notifications are owed
        try:
            for batches in pending:
                self._send_notifications(batches)
        finally:
            guard.count_undelivered(-len(pending))
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


__all__ = [
    "YIELD_AT_MOST_S",
    "Guard",
    "guard_of",
    "guarded",
    "guarded_urgent",
    "guarded_yielding",
    "one_moment",
]
