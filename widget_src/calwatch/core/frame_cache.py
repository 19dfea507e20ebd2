"""A whole-stream read kept between calls and recomputed only for the batches that changed.

``Monitor.summary()`` and ``Monitor.class_coverage()`` read every batch the monitor ever saw.
Built from scratch they cost ``O(batches)`` Python work (~0.1 s at 1,000 batches and three
calibrators), and a read holds the monitor's lock while a background producer waits for it.
Their rows are per batch, though, and a batch's rows depend only on that batch's statistics
(replaced, never changed in place, when labels arrive or the calibrators are re-tuned), on
whether its raw rows are still in the window, and on the calibrators. So the frame of the
last call is kept with one *token* per batch (see :meth:`calwatch.stream.records.RecordStore.tokens`);
the next call recomputes the rows of the batches whose token changed (new batches, newly
labelled ones, those that left the window) and splices them into the kept frame. A change of
*context* (the record store, the calibrators, their targets) recomputes everything.

The spliced frame equals the one built from scratch, row order and dtypes included: rows are
grouped by ``batch`` in batch order in both, and a batch's rows come whole from one of the
two parts (a stable sort by ``batch`` puts them back in order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import polars as pl


def same_token(old: object, new: object) -> bool:
    """Whether a batch's token is unchanged.

    Tokens are ints (a settled batch's generation, compared by value) or ``(statistics, in
    window)`` pairs (a recent batch's statistics dict, compared by identity: it is replaced,
    never changed in place; the cache holds it, so its identity cannot be reused).
    """
    if type(new) is int:
        return type(old) is int and old == new
    if type(new) is tuple and type(old) is tuple and len(old) == len(new) == 2:
        return old[0] is new[0] and old[1] is new[1]
    return False


def same_context(old: Sequence[object] | None, new: Sequence[object]) -> bool:
    """Whether two contexts hold the same objects (by identity) and values (by equality)."""
    if old is None or len(old) != len(new):
        return False
    return all(a is b or (type(a) is type(b) and isinstance(a, (str, int, float, bool)) and a == b)
               for a, b in zip(old, new, strict=True))  # fmt: skip


class BatchFrameCache:
    """One read's frame over every batch, with the tokens and context it was computed at.

    Parameters of :meth:`frame`:

    context
        What every row depends on besides its batch (the record store, the calibrator objects,
        their targets, ...): objects compared by identity, ``str``/``int``/``float``/``bool``
        by value. A different context recomputes the whole frame.
    tokens
        One per batch, in batch order (:func:`same_token`).
    compute
        The read for some batch numbers (ascending), a frame with a ``batch`` column whose rows
        are grouped by batch in that order. Called with every batch on a recompute.
    """

    __slots__ = ("_context", "_frame", "_tokens")

    def __init__(self) -> None:
        self._context: tuple[object, ...] | None = None
        self._tokens: list[object] = []
        self._frame: pl.DataFrame | None = None

    def frame(
        self,
        context: tuple[object, ...],
        tokens: list[object],
        compute: Callable[[list[int]], pl.DataFrame],
    ) -> pl.DataFrame:
        """The read over all ``len(tokens)`` batches, recomputing only the changed ones."""
        kept = self._frame
        if kept is None or not same_context(self._context, context) or len(tokens) < len(self._tokens):
            frame = compute(list(range(len(tokens))))
        else:
            old = self._tokens
            changed = [i for i, token in enumerate(tokens) if i >= len(old) or not same_token(old[i], token)]
            if not changed:
                frame = kept
            elif len(changed) == len(tokens):
                frame = compute(changed)
            else:
                fresh = compute(changed)
                unchanged = kept.filter(~pl.col("batch").is_in(changed))
                frame = pl.concat([unchanged, fresh]).sort("batch", maintain_order=True)
        # Commit only once everything above succeeded: a failed read leaves the cache as it was.
        self._context, self._tokens, self._frame = context, tokens, frame
        return frame.clone()


#: The attribute a monitor keeps its caches in: not state (snapshots and copies leave it out).
CACHES_ATTRIBUTE = "_frame_caches"


def frame_cache_of(owner: Any, name: str) -> BatchFrameCache:
    """``owner``'s cache called ``name``, made on first use (kept in its ``__dict__``)."""
    caches: dict[str, BatchFrameCache] = owner.__dict__.setdefault(CACHES_ATTRIBUTE, {})
    cache = caches.get(name)
    if cache is None:
        cache = caches[name] = BatchFrameCache()
    return cache


__all__ = ["CACHES_ATTRIBUTE", "BatchFrameCache", "frame_cache_of", "same_context", "same_token"]
