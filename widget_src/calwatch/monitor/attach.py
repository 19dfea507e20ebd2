"""Attaching a fitted calibrator to a monitor that has already streamed, as if there from the start.

:class:`Attach` is a collaborator of :class:`~calwatch.monitor.Monitor`. ``Monitor.attach`` adds
a fitted set calibrator (the one :meth:`Monitor.slice_calibrator
<calwatch.monitor.monitor.Monitor.slice_calibrator>` builds, say) and gives it the history it
would have had: every batch's statistics are computed from the batch's rows (probabilities, ids,
labels, slice codes) exactly as ``observe`` and ``label`` would have, and the slice counts of
every epoch gain its covered rows and set sizes. So the monitor's ``summary()``, ``slices()`` and
``rows()`` equal those of a monitor built with the calibrator and fed the same stream
(``tests/monitor/test_attach.py``).

What it needs: every batch's rows. Rows stay in the window (``window=`` rows, 100,000 by
default); batches that left it (kept only on disk by the row log, or as settled statistics) and
table batches (``observe_table``, Spark, Dask: their rows stay in the table) cannot be
recomputed here, so a monitor with any such batch refuses, naming them. Start a monitor with the
calibrator then (``Monitor(calibrators={..., name: cal})``).

What it does not get: shift detectors (the monitor's detectors were fitted with its
calibrators at ``calibrate``; the new one's coverage is counted and shown, not tested for
drift), and calibrators that change as labels arrive (``cw.Adaptive``) are refused, since their
history depends on the order labels came in.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from calwatch.core.models import ModelOutputs
from calwatch.kinds import kind_of
from calwatch.stream.records import NO_LABEL
from calwatch.stream.slice_counts import SliceCounts, SliceStore
from calwatch.stream.slice_groups import column_indices, groups_for

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor


class Attach:
    """Adding a calibrator mid-stream (a collaborator of :class:`~calwatch.monitor.Monitor`).

    Stateless: it reads and changes the monitor it is given, whose public methods hold the lock.
    """

    def __init__(self, monitor: Monitor) -> None:
        self.m = monitor

    def attach(self, name: str, calibrator: Any) -> None:
        """See :meth:`Monitor.attach`."""
        self._check(name, calibrator)
        kind = kind_of(calibrator)
        records = list(self.m._stream.batches)
        missing = [r.index for r in records if r.rows is None]
        if missing:
            shown = ", ".join(str(i) for i in missing[:5]) + (", …" if len(missing) > 5 else "")
            msg = (
                f"attach needs every batch's rows to give {name!r} its history, and {len(missing)} "
                f"batch(es) have none in memory (batches {shown}: they left the window, or came from a "
                f"table); start a monitor with it instead: Monitor(calibrators={{..., {name!r}: calibrator}})"
            )
            raise ValueError(msg)
        store = self.m._slices
        K = len(self.m._require_encoder())
        working = copy.deepcopy(calibrator)  # a randomised calibrator's stream moves only on commit
        stats: list[Any] = []
        results: list[Any] = []
        counts: list[SliceCounts] = []
        for record in records:
            rows = record.rows
            assert rows is not None
            groups = None
            if getattr(working, "groups_from", None) is not None:
                assert store is not None
                assert rows.slice_codes is not None
                groups = groups_for(working, store.encoding, rows.slice_codes)
            elif getattr(working, "mondrian", None) == "category":
                groups = rows.categories
            outputs = ModelOutputs(probs=rows.probs, ids=rows.ids)
            result = kind.apply(name, working, outputs, groups)
            batch_stats = kind.observed(result, K)
            labelled = np.flatnonzero(rows.labels != NO_LABEL)
            if labelled.size:
                delta = kind.labelled(result.take(labelled), rows.probs[labelled], rows.labels[labelled])
                batch_stats = batch_stats.merge(delta)
            stats.append(batch_stats)
            results.append(result)
            if store is not None:
                counts.append(
                    _slice_counts(store, name, kind, result, rows.slice_codes, labelled, rows.labels)
                )
        new_store = None if store is None else _with_calibrator(store, name, counts)
        # Everything is computed: commit.
        for record, batch_stats, result in zip(records, stats, results, strict=True):
            assert record.rows is not None
            kind.keep(record.rows, name, result)
            self.m._stream.batches.set_stats(record, {**record.stats, name: batch_stats})
        self.m._calibrators[name] = working
        if new_store is not None:
            self.m._slices = new_store
        if self.m._widget is not None:
            self.m._widget.refresh_layout()
        self.m._notify(tuple(r.index for r in records))

    def _check(self, name: str, calibrator: Any) -> None:
        """Refuse what cannot be attached, naming the argument (nothing changes)."""
        if not isinstance(name, str) or not name:
            msg = f"name must be a non-empty string; got {name!r}"
            raise TypeError(msg)
        if name in self.m._calibrators:
            msg = f"name: {name!r} is already a calibrator of this monitor ({list(self.m._calibrators)})"
            raise ValueError(msg)
        self.m._require_encoder()
        try:
            kind = kind_of(calibrator)
        except TypeError as err:
            msg = f"calibrator: {err}"
            raise TypeError(msg) from err
        if not kind.has_sets or kind.task != "classification":
            msg = f"calibrator: attach takes set calibrators of a classifier; got a {kind.name} calibrator"
            raise TypeError(msg)
        if kind.learns_from_labels:
            msg = (
                "calibrator: one that changes as labels arrive (cw.Adaptive) has a history that depends on "
                "the order they came in; start a monitor with it instead"
            )
            raise ValueError(msg)
        columns = getattr(calibrator, "groups_from", None)
        if columns is not None:
            if self.m._slices is None:
                msg = (
                    f"calibrator: it takes its groups from slice columns {list(columns)}, and this monitor "
                    "has none"
                )
                raise ValueError(msg)
            column_indices(self.m._slices.encoding, columns, "calibrator.groups_from")
        elif getattr(calibrator, "mondrian", None) == "category" and any(
            r.rows is not None and r.rows.categories is None for r in self.m._stream.batches
        ):
            msg = (
                "calibrator: a mondrian='category' calibrator needs each batch's categories, which were "
                "not given"
            )
            raise ValueError(msg)


def _slice_counts(
    store: SliceStore,
    name: str,
    kind: Any,
    result: Any,
    codes: Any,
    labelled: npt.NDArray[np.intp],
    labels: npt.NDArray[np.intp],
) -> SliceCounts:
    """One batch's slice counts for the new calibrator alone: set sizes, then its labelled rows' coverage."""
    alone = SliceStore(store.encoding, (name,))
    out = alone.observed(codes, {name: kind.set_sizes(result)})
    if labelled.size:
        covered = np.asarray(kind.covered(result.take(labelled), labels[labelled]), dtype=np.bool_)
        out = out.merge(alone.labelled(codes[labelled], {name: covered}))
    return out


def _with_calibrator(store: SliceStore, name: str, per_batch: list[SliceCounts]) -> SliceStore:
    """A copy of the store with the new calibrator's counts added to every epoch.

    An epoch's counts are rows ``0`` (rows), ``1`` (labelled), ``2 + k`` (covered by calibrator
    ``k``) and ``2 + c + k`` (its set-size sums): the new calibrator becomes ``k = c``, its two
    rows summed over the epoch's batches (integers: exact).
    """
    c = len(store.calibrators)
    epochs: list[npt.NDArray[np.int64]] = []
    for start, length, counts in zip(store.starts, store.lengths, store.epochs, strict=True):
        mine = per_batch[start]
        for b in range(start + 1, start + length):
            mine = mine.merge(per_batch[b])
        covered, sizes = mine.counts[2], mine.counts[3]
        grown = np.concatenate([counts[: 2 + c], covered[None, :], counts[2 + c :], sizes[None, :]])
        epochs.append(grown.astype(np.int64))
    return SliceStore(
        store.encoding,
        (*store.calibrators, name),
        list(store.starts),
        list(store.lengths),
        epochs,
        store.calibration,
    )


__all__ = ["Attach"]
