"""The monitor's lock is re-entrant and fair: waiters get it in the order they came."""

from __future__ import annotations

import threading
import time

import pytest

from calwatch.guard import FairRLock


def test_reentry_release_and_errors():
    lock = FairRLock()
    with lock, lock:  # re-entrant
        assert lock.acquire(blocking=False)
        lock.release()
    with pytest.raises(RuntimeError, match="does not hold"):
        lock.release()
    assert lock.acquire() and "held by" in repr(lock)
    lock.release()
    assert "unlocked" in repr(lock)


def test_other_threads_wait_time_out_or_give_up():
    lock = FairRLock()
    lock.acquire()
    results: list[object] = []

    def other() -> None:
        results.append(lock.acquire(blocking=False))
        start = time.monotonic()
        results.append(lock.acquire(timeout=0.05))
        results.append(time.monotonic() - start >= 0.04)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert results == [False, False, True]
    assert "0 waiting" in repr(lock)  # the timed-out waiter left the line
    lock.release()
    assert lock.acquire(blocking=False)  # free again: nobody was handed it
    lock.release()


def test_waiters_get_the_lock_in_the_order_they_came():
    lock = FairRLock()
    order: list[int] = []
    lock.acquire()
    threads = []
    for i in range(5):
        thread = threading.Thread(target=lambda i=i: (lock.acquire(), order.append(i), lock.release()))
        thread.start()
        threads.append(thread)
        while f"{i + 1} waiting" not in repr(lock):  # in line before the next one starts
            time.sleep(0.001)
    lock.release()
    for thread in threads:
        thread.join(timeout=10)
    assert order == [0, 1, 2, 3, 4]


def test_a_waiter_is_not_starved_by_threads_that_take_it_back_to_back():
    """Four threads re-take the lock at once after each release; a fifth still gets it in turn.

    With ``threading.RLock`` the releasing thread usually wins again: the fifth waited for many
    of the others' turns (the labeller in ``bench_concurrency`` fell behind the window so).
    """
    lock = FairRLock()
    stop = threading.Event()
    turns = [0]

    def hog() -> None:
        while not stop.is_set():
            with lock:
                turns[0] += 1
                time.sleep(0.0005)

    hogs = [threading.Thread(target=hog) for _ in range(4)]
    for thread in hogs:
        thread.start()
    waited = []
    try:
        for _ in range(20):
            before = turns[0]
            with lock:
                waited.append(turns[0] - before)  # others' turns while this one waited
    finally:
        stop.set()
        for thread in hogs:
            thread.join(timeout=10)
    assert max(waited) <= 8  # about one turn of each thread queued before it (RLock: dozens)
