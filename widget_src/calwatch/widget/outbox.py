"""What the live widget sends its views: upserts merged by dataset and key, at most one per interval.

A producer thread can call ``observe`` and ``label`` far faster than a browser can draw: each
update is a JSON message that the page parses and applies to several Vega views. Sent one per
call, they queue in the server and the page; the kernel -> screen latency grows with that backlog,
and the page's own controls (the α slider, a note) wait behind it. The outbox therefore sends an
update at once when the last send is at least ``interval_s`` old (the leading edge: a single call
is never delayed), and while calls keep coming faster than that it merges them: per dataset, the
newest row of each key, exactly what the front end's ``mergeUpdates`` does with a backlog, so the
views end in the same state. A timer thread sends what was merged once ``interval_s`` has passed
(the trailing edge), so no update waits longer than that.

A merged message carries the highest ``seq`` it covers and the earliest kernel start time
(``t0``) among the calls it merges: the latency a page measures includes the time rows waited
here. Other messages (a view's replay) and the synced traits the widget sets with an update
(status line, warnings, α info) go through the same queue, so they reach the views in the order
they were made; traits are merged too (the newest value of each).

With ``interval_s = 0`` every update is sent as it comes (no kernel, hence no browser: a script or
a test).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Row = dict[str, Any]

#: Seconds the timer thread waits with nothing to send before it ends.
IDLE_EXIT_S = 5.0


class Outbox:
    """Merges the widget's upserts and sends them at most once per ``interval_s`` seconds.

    Parameters
    ----------
    send : callable
        Sends one message to every view (the widget's ``send``). Called from the thread that
        flushes: the caller's, or the outbox's timer thread.
    set_traits : callable
        Sets synced traits (a mapping of trait name to value) in one go, after the messages queued
        before them were sent.
    interval_s : float
        Least time between two sends of upserts; ``0`` sends each as it comes.
    on_error : callable, optional
        Told of an error raised while the timer thread sent (default: ignored; the next send
        tries again).

    Notes
    -----
    :meth:`add` and :meth:`put` only queue (cheap; the widget calls them under the monitor's lock,
    in seq order); :meth:`flush` sends, and is called after that lock is released. Two locks: one
    guards what is queued, the other makes sends go out one at a time in queue order.

    Examples
    --------
    >>> sent = []
    >>> box = Outbox(sent.append, lambda traits: None, interval_s=0.0)
    >>> box.add(1, {"batches": [{"key": "0", "n": 1}]})
    >>> box.flush()
    >>> sent
    [{'kind': 'upsert', 'seq': 1, 'data': {'batches': [{'key': '0', 'n': 1}]}}]
    """

    def __init__(
        self,
        send: Callable[[dict[str, Any]], None],
        set_traits: Callable[[Mapping[str, Any]], None],
        *,
        interval_s: float,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        if not interval_s >= 0.0:
            raise ValueError(f"interval_s must be >= 0 seconds; got {interval_s!r}")
        self._send = send
        self._set_traits = set_traits
        self.interval_s = float(interval_s)
        self._on_error = on_error
        self._state = threading.Condition(threading.Lock())  # what is queued; wakes the timer
        self._sending = threading.Lock()  # one sender at a time, in queue order
        #: The upsert being merged: rows by dataset and key, its seq, earliest t0, newest traits.
        self._rows: dict[str, dict[str, Row]] = {}
        self._seq: int | None = None
        self._t0: float | None = None
        self._traits: dict[str, Any] = {}
        #: Ready to send, in order: ("message", dict) or ("traits", dict).
        self._ready: deque[tuple[str, dict[str, Any]]] = deque()
        self._urgent = False
        self._last_sent = -math.inf
        self._due_at: float | None = None
        self._timer: threading.Thread | None = None
        self._closed = False
        self.merged = 0
        """Upserts folded into another before being sent (how much the outbox saved)."""

    # ----------------------------------------------------------------- queueing
    def add(
        self,
        seq: int,
        data: Mapping[str, Sequence[Row]],
        started: float | None = None,
        *,
        traits: Mapping[str, Any] | None = None,
        urgent: bool = False,
    ) -> None:
        """Merges an upsert numbered ``seq`` (higher than any before) into the one being built.

        Rows replace the pending row of their key (a tombstone, ``_deleted: true``, too).
        ``started`` (epoch ms) is when the kernel began the update; ``urgent`` sends it at the
        next :meth:`flush` whatever the interval (a control the user just moved).
        """
        with self._state:
            if self._seq is not None:
                self.merged += 1
            for name, rows in data.items():
                held = self._rows.setdefault(name, {})
                for row in rows:
                    held[row["key"]] = row
            self._seq = seq
            if started is not None:
                self._t0 = started if self._t0 is None else min(self._t0, started)
            if traits:
                self._traits.update(traits)
            self._urgent = self._urgent or urgent

    def put(self, message: dict[str, Any]) -> None:
        """Queues a message after the upsert being merged (sent at the next :meth:`flush`)."""
        with self._state:
            self._cut()
            self._ready.append(("message", message))

    @property
    def pending(self) -> bool:
        """Whether an upsert is being merged and not sent yet."""
        with self._state:
            return self._seq is not None

    # ----------------------------------------------------------------- sending
    def flush(self, *, force: bool = False) -> None:
        """Sends what is due: everything queued, and the merged upsert if its interval has passed.

        A merged upsert that is not due yet is left to the timer thread, which sends it at most
        ``interval_s`` after the previous send. ``force`` sends it now.
        """
        with self._state:
            if self._seq is not None:
                wait = self._last_sent + self.interval_s - time.monotonic()
                if force or self._urgent or wait <= 0.0 or self._closed:
                    self._cut()
                else:
                    self._schedule(wait)
            if not self._ready:
                return
        self._send_ready()

    def close(self) -> None:
        """Sends what is left and stops the timer thread."""
        with self._state:
            self._closed = True
            self._state.notify_all()
        self.flush(force=True)
        timer = self._timer
        if timer is not None and timer is not threading.current_thread():
            timer.join(timeout=5.0)

    def _cut(self) -> None:
        """Moves the upsert being merged (and its traits) to the ready queue (hold ``_state``)."""
        if self._seq is not None:
            message: dict[str, Any] = {
                "kind": "upsert",
                "seq": self._seq,
                "data": {name: list(rows.values()) for name, rows in self._rows.items() if rows},
            }
            if self._t0 is not None:
                message["t0"] = self._t0
            self._ready.append(("message", message))
            self._rows, self._seq, self._t0 = {}, None, None
            self._last_sent = time.monotonic()
        if self._traits:
            self._ready.append(("traits", self._traits))
            self._traits = {}
        self._urgent = False
        self._due_at = None

    def _send_ready(self) -> None:
        with self._sending:
            while True:
                with self._state:
                    if not self._ready:
                        return
                    kind, item = self._ready.popleft()
                if kind == "message":
                    self._send(item)
                else:
                    self._set_traits(item)

    def _schedule(self, wait: float) -> None:
        """Has the timer thread flush in ``wait`` seconds (hold ``_state``)."""
        due = time.monotonic() + wait
        if self._due_at is not None and self._due_at <= due:
            return
        self._due_at = due
        if self._timer is None:
            name = f"calwatch widget outbox {id(self):x}"
            self._timer = threading.Thread(target=self._run_timer, name=name, daemon=True)
            self._timer.start()
        self._state.notify_all()

    def _run_timer(self) -> None:
        while True:
            with self._state:
                while not self._closed and (self._due_at is None or self._due_at > time.monotonic()):
                    if self._due_at is None:
                        # Idle: the thread ends after a while (a widget dropped without close()
                        # leaves no thread behind); the next deferred send starts a new one.
                        if not self._state.wait(IDLE_EXIT_S) and self._due_at is None:
                            self._timer = None
                            return
                    else:
                        self._state.wait(self._due_at - time.monotonic())
                if self._closed:
                    return
                self._due_at = None
            try:
                self.flush(force=True)
            except Exception as err:  # a view that went away: the next update tries again
                if self._on_error is not None:
                    self._on_error(err)


__all__ = ["Outbox"]
