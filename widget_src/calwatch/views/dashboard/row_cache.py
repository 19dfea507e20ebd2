"""What the window panels keep between draws: each window batch's rows sorted by confidence, and counts.

A redraw after one new batch sorts that batch only and merges it into the window's sorted runs;
a batch whose labels changed is re-read (its statistics object is replaced, never changed in
place, so it is the cache's version key).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import polars as pl

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor


#: A window batch's labelled rows by confidence: confidences, whether the top label is right.
Run = tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]
#: Per set calibrator: rows, singleton rows and summed set sizes, by predicted class.
SetCounts = dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]]
#: Past this many tied confidences a run is merged by sorting the whole window again.
_MAX_TIES = 64


def _version(record: Any) -> Any:
    """What changes when a batch's labels change: its statistics are replaced (never changed in place)."""
    return next(iter(record.stats.values()))


def _sorted_runs(
    runs: dict[int, Run],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
    """Rows of ``runs`` (by batch, in batch order) by (confidence, batch, row): confidences, hits, batches."""
    parts = list(runs.values())
    conf = np.concatenate([c for c, _ in parts]) if parts else np.zeros(0)
    hit = np.concatenate([h for _, h in parts]) if parts else np.zeros(0, dtype=bool)
    batch = np.repeat(np.fromiter(runs, dtype=np.int64, count=len(runs)), [c.shape[0] for c, _ in parts])
    # Each run is sorted (ties in row order) and runs come in batch order: a stable sort gives
    # the order of the rows taken in stream order.
    order = np.argsort(conf, kind="stable")
    return conf[order], hit[order], batch[order]


class _SortedWindow:
    """The labelled rows of some window batches sorted by (confidence, batch, row)."""

    def __init__(self, wanted: int | None, runs: dict[int, tuple[Any, Run]]) -> None:
        self.wanted = wanted
        self.versions = {batch: version for batch, (version, _) in runs.items()}
        self.conf, self.hit, self.batch = _sorted_runs({batch: run for batch, (_, run) in runs.items()})

    def update(self, stale: list[int], fresh: dict[int, tuple[Any, Run]]) -> bool:
        """Take out the rows of ``stale`` batches and merge in those of ``fresh`` ones (in batch order).

        False (and nothing changed) when too many confidences tie to merge them.
        """
        if stale:
            keep = ~np.isin(self.batch, stale)
            base_conf, base_hit, base_batch = self.conf[keep], self.hit[keep], self.batch[keep]
        else:
            base_conf, base_hit, base_batch = self.conf, self.hit, self.batch
        kept = [b for b in self.versions if b not in stale]
        if not fresh:
            self.conf, self.hit, self.batch = base_conf, base_hit, base_batch
            self.versions = {b: self.versions[b] for b in kept}
            return True
        conf, hit, batch = _sorted_runs({b: run for b, (_, run) in fresh.items()})
        # Equal confidences go after the rows of earlier batches, before those of later ones.
        if not kept or min(fresh) > max(kept):  # the usual case: labels of the newest batches
            at = np.searchsorted(base_conf, conf, side="right")
        elif max(fresh) < min(kept):
            at = np.searchsorted(base_conf, conf, side="left")
        else:
            at = np.searchsorted(base_conf, conf, side="left")
            hi = np.searchsorted(base_conf, conf, side="right")
            tied = np.flatnonzero(hi > at)
            if tied.shape[0] > _MAX_TIES:
                return False
            for i in tied.tolist():  # a tie group is sorted by batch
                at[i] += np.searchsorted(base_batch[at[i] : hi[i]], batch[i])
        # Rows of fresh batches at one place go in their own (confidence, batch, row) order.
        self.conf = np.insert(base_conf, at, conf)
        self.hit = np.insert(base_hit, at, hit)
        self.batch = np.insert(base_batch, at, batch)
        self.versions = {b: self.versions[b] for b in kept} | {b: v for b, (v, _) in fresh.items()}
        return True


class RowCache:
    """What the window panels derive from a batch's raw rows, kept across refreshes of a live view.

    A batch's probabilities and prediction sets do not change once it is observed, and its labels
    change only in a call that replaces its statistics. So a refresh of the window panels merges
    in the batches that arrived or changed since the last one and takes out those that left:
    the reliability diagram's rows stay sorted by confidence (a merge, not a sort of the window)
    and the set counts by class are running sums. Results are those of a computation from scratch
    (integer counts; the same sorted order). It holds about 40 bytes per window row.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[Any, dict[str, Any]]] = {}
        self._sorted: _SortedWindow | None = None
        self._sums: tuple[dict[int, SetCounts], SetCounts] | None = None
        #: The what-if panel's rows at one α: per batch, (its rows, their version, its rows at α).
        self._what_if: tuple[float, dict[int, tuple[Any, Any, pl.DataFrame]]] | None = None

    def what_if(self, monitor: Monitor, alpha: float, batches: Sequence[int]) -> pl.DataFrame:
        """:meth:`Monitor.what_if` at ``alpha`` for the window batches ``batches``, in its order.

        A batch's rows at ``alpha`` depend only on its probabilities (fixed once observed), its
        labels (which change only by replacing its statistics: :func:`_version`) and the fitted
        calibration scores (a calibrate builds a new cache), so only the batches that arrived or
        changed since the last call at the same ``alpha`` are recomputed: about two per call of a
        stream with labels one batch late, instead of the whole window.
        """
        records = {r.index: r for r in monitor.window_records()}
        held = self._what_if[1] if self._what_if is not None and self._what_if[0] == alpha else {}
        fresh = [
            b
            for b in batches
            if (entry := held.get(b)) is None
            or entry[0] is not records[b].rows
            or entry[1] is not _version(records[b])
        ]
        if fresh:
            computed = monitor.what_if(alpha, batches=fresh)
            parts = computed.partition_by("batch", as_dict=True, maintain_order=True)
            for b in fresh:
                part = parts.get((b,), computed.clear())
                held[b] = (records[b].rows, _version(records[b]), part)
        self._what_if = (alpha, {b: held[b] for b in batches})
        frames = [held[b][2] for b in batches]
        if not frames:
            return monitor.what_if(alpha, batches=())
        order = {key: i for i, key in enumerate(monitor.what_if_calibrators())}
        rank = pl.col("calibrator").replace_strict(order, return_dtype=pl.Int64)
        return pl.concat(frames).sort(rank, "batch", maintain_order=True)

    def prune(self, monitor: Monitor) -> None:
        """Drop the per-batch entries of batches that are no longer in the window."""
        kept = {r.index for r in monitor.window_records()}
        for index in [i for i in self._entries if i not in kept]:
            del self._entries[index]

    def values(self, record: Any) -> dict[str, Any]:
        """The cached values of a window batch (a new entry if its rows changed)."""
        entry = self._entries.get(record.index)
        if entry is None or entry[0] is not record.rows:
            entry = self._entries[record.index] = (record.rows, {})
        return entry[1]

    def sorted_window(
        self, records: Sequence[Any], wanted: int | None, run: Callable[[Any], Run]
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
        """The labelled rows of ``records`` (``run`` of each) by confidence, kept from the last call."""
        versions = {r.index: _version(r) for r in records}
        state = self._sorted
        if state is not None and state.wanted == wanted:
            stale = [b for b, v in state.versions.items() if versions.get(b) is not v]
            fresh = [r for r in records if state.versions.get(r.index) is not versions[r.index]]
            # a merge copies the arrays once: unless most batches changed, cheaper than a sort
            if fresh and len(stale) + len(fresh) < len(records):
                if state.update(stale, {r.index: (versions[r.index], run(r)) for r in fresh}):
                    return state.conf, state.hit
            elif not fresh:
                if stale:
                    state.update(stale, {})
                return state.conf, state.hit
        state = self._sorted = _SortedWindow(wanted, {r.index: (versions[r.index], run(r)) for r in records})
        return state.conf, state.hit

    def window_sums(self, records: Sequence[Any], counts: Callable[[Any], SetCounts]) -> SetCounts:
        """Set counts of ``records`` summed per calibrator, kept from the last call.

        The last call's sums, less the batches that left, plus those that arrived: integer counts,
        so the sum of them all.
        """
        parts, totals = self._sums if self._sums is not None else ({}, {})
        wanted = {r.index: r for r in records}
        for batch in [b for b in parts if b not in wanted]:
            for key, old in parts.pop(batch).items():
                for total, value in zip(totals[key], old, strict=True):
                    total -= value
        for index, record in wanted.items():
            if index in parts:
                continue
            added = parts[index] = counts(record)
            for key, (n, single, size) in added.items():
                if key not in totals:
                    K = n.shape[0]
                    totals[key] = (np.zeros(K, np.int64), np.zeros(K, np.int64), np.zeros(K, np.int64))
                for total, value in zip(totals[key], (n, single, size), strict=True):
                    total += value
        self._sums = (parts, totals)
        return totals
