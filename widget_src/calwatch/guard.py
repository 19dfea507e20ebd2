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
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])


class Guard:
    """A re-entrant lock, how deep the current holder is in guarded calls, and notifications to send."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
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


__all__ = ["Guard", "guard_of", "guarded", "one_moment"]
