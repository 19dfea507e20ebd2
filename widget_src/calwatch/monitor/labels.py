"""Late labels: how :meth:`Monitor.label <calwatch.monitor.monitor.Monitor.label>` joins them to their rows.

:class:`LabelJoin` is a collaborator of :class:`~calwatch.monitor.Monitor`, one path for classification
and regression (the task says how a label is checked and stored: :mod:`calwatch.monitor.tasks`). A
call finds each id's batch and row, has each calibrator's kind compute the labelled rows' statistics (merged
into the batch's, a relabel's old labels merged with the sign reversed; the rows' slice counts
likewise, :mod:`calwatch.monitor.slicing`), feeds the detectors and
the calibrators that learn from labels (ACI also takes the relabels' corrections), and only then
changes the batches: all or nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from calwatch.core.ids import as_id_list, check_id_kind, ids_with_kind
from calwatch.engine._validation import stacked_rows
from calwatch.kinds import kind_of
from calwatch.shift.watch import detectors_kept_on_failure
from calwatch.stream.records import BatchRecord, BatchRows
from calwatch.stream.row_log import Prefetched
from calwatch.stream.row_log import take_rows as _take

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor

IntArray = npt.NDArray[np.intp]


@dataclass(frozen=True)
class LabelReport:
    """What a :meth:`Monitor.label` call did.

    Attributes
    ----------
    matched : int
        Labels joined to their rows (in the window, or in the row log for rows that left it).
    unmatched : int
        Labels for ids that match no row (counted, not applied): unknown ids, or rows that left
        the window of a monitor without a row log (``row_log=False``).
    relabelled : int
        Matched rows that already had a label (the new label replaces it).
    batches : tuple of int
        The batches whose labelled metrics changed.
    skipped : int
        Labels outside the classes, skipped (``label(..., outside_classes="skip")``).
    """

    matched: int
    unmatched: int
    relabelled: int
    batches: tuple[int, ...]
    skipped: int = 0


class LabelJoin:
    """Joining late labels to their rows (a collaborator of :class:`~calwatch.monitor.Monitor`).

    One path for every task: the monitor's task (:mod:`calwatch.monitor.tasks`) says how a label
    is checked and stored; finding the rows, each kind's statistics and the all-or-nothing commit
    are the same for classes and for real values. Stateless: it reads and changes its monitor,
    whose public methods hold the lock.
    """

    def __init__(self, monitor: Monitor) -> None:
        self.m: Monitor = monitor

    def prefetch_logged(self, ids: Any) -> Prefetched | None:
        """The row log's rows of the ids not in the window, read without the monitor's lock.

        A hint, read without the lock: how far the log goes, then which ids the window lacks
        (a window may move meanwhile). The locked call reads under the lock whatever the hint
        missed (ids that left the window since, parts written since: :meth:`RowLog.find`), so
        the result is exact however stale the hint. Anything unusual (bad ids, a log replaced by
        ``load``) leaves the work to the locked call, which raises the proper error.
        """
        row_log = self.m.__dict__.get("_row_log")
        if row_log is None or not row_log.parts:
            return None
        try:
            id_list = as_id_list(ids)
            seen = (len(row_log.parts), len(row_log.labels.parts))
            index = self.m._stream.id_index
            missing = [i for i in id_list if i not in index]
            return row_log.prefetch(missing, *seen) if missing and len(set(missing)) == len(missing) else None
        except Exception:  # the locked call validates and reads again
            return None

    def join(
        self, ids: Any, y: Any, prefetched: Prefetched | None, *, skip_outside: bool = False
    ) -> LabelReport:
        """:meth:`Monitor.label` under the lock: ids and labels checked, then joined, all or nothing."""
        id_list, kind = ids_with_kind(ids)
        check_id_kind(self.m._id_kind, kind, "ids", auto_ids=self.m._next_auto_id > 0)
        values, kept = self.m._task_labels.checked(self.m, y, len(id_list), skip_outside=skip_outside)
        skipped = 0 if kept is None else int((~kept).sum())
        if kept is not None and skipped:
            id_list = [i for i, k in zip(id_list, kept.tolist(), strict=True) if k]
        report = self._join_labels(id_list, values, prefetched)
        if skipped:
            self.m._stream.labels_outside_classes += skipped
            report = replace(report, skipped=skipped)
        return report

    def _join_labels(self, id_list: list[Any], labels: Any, prefetched: Prefetched | None) -> LabelReport:
        """The join on checked ids and stored label values."""
        m = self.m
        task = m._task_labels
        found, where = self.locate(id_list)
        row_log = m.__dict__.get("_row_log")
        logged = self._logged(row_log, id_list, labels, found, prefetched)
        matched = where.shape[0] + sum(len(rows.ids) for _, rows, _ in logged)
        unmatched = len(id_list) - matched
        if matched == 0:
            m._stream.labels_unmatched += unmatched
            return LabelReport(0, unmatched, 0, ())
        batch_of, row_of, label_of = where[:, 0], where[:, 1], labels[found]
        by_index = {record.index: record for record in m._stream.window_batches()}
        # Logged batches are older than the window's: taking them first keeps the batch order.
        parts = [(m._stream.batches[b], rows, np.arange(len(rows.ids)), labs) for b, rows, labs in logged]
        for batch_index in np.unique(batch_of).tolist():
            mask = batch_of == batch_index
            record = by_index[batch_index]
            assert record.rows is not None
            parts.append((record, record.rows, row_of[mask], label_of[mask]))
        groups = []
        corrections = []
        updates = []
        relabelled = newly = newly_logged = 0
        for record, rows, rows_b, labels_b in parts:
            view = record if rows is record.rows else _with_rows(record, rows)
            stats, new_b, relabelled_b = self.labelled_stats(view, rows_b, labels_b)
            # the rows' slices take the labels too (a relabel takes the old label's counts away)
            slices = m._slicing.labelled(rows, rows_b, labels_b)
            updates.append((record, stats, rows, rows_b, labels_b, slices))
            # A relabel replaces the row's label in every count. The detectors' tests took the row in
            # when its first label came: it is not a new observation for them, and counting it
            # again would bias their bounds. ACI's level is a sum of per-row steps: a changed label
            # swaps the row's step (``corrections``: rows, old labels, new labels).
            old_b = task.stored(rows)[rows_b]
            first = task.missing(old_b)
            if first.any():
                groups.append((view, rows_b[first], labels_b[first]))
            changed = ~first & (old_b != labels_b)
            if changed.any():
                corrections.append((view, rows_b[changed], old_b[changed], labels_b[changed]))
            newly, relabelled = newly + new_b, relabelled + relabelled_b
            newly_logged += new_b if rows is not record.rows else 0
        # Everything is computed: the detectors and ACI are fed, the row log stages its labels,
        # then the batches change.
        try:
            with detectors_kept_on_failure(m._shift):
                self.feed_labels(
                    groups,
                    latest=len(m._stream.batches) - 1,
                    rows_seen=m._stream.rows_seen,
                    corrections=corrections,
                )
            for record, _, rows, _, labels_b, _ in updates:
                if rows is not record.rows:
                    assert row_log is not None
                    row_log.stage_labels(record.index, rows.ids, labels_b)
        except BaseException:
            if row_log is not None:
                row_log.discard_labels()
            raise
        for record, stats, rows, rows_b, labels_b, slices in updates:
            m._stream.batches.set_stats(record, stats)
            if slices is not None:
                assert m._slices is not None
                m._slices.add(record.index, slices)
            if rows is record.rows:
                task.write(rows, rows_b, labels_b)
        if row_log is not None and logged:
            row_log.commit_labels(newly_logged)
        m._stream.rows_labelled += newly
        m._stream.labels_unmatched += unmatched
        touched = tuple(sorted({record.index for record, *_ in updates}))
        m._notify(touched)
        return LabelReport(matched, unmatched, relabelled, touched)

    @staticmethod
    def _logged(
        row_log: Any,
        id_list: list[Hashable],
        labels: IntArray,
        found: npt.NDArray[np.bool_],
        prefetched: Prefetched | None = None,
    ) -> list[tuple[int, BatchRows, IntArray]]:
        """The rows of ids not in the window that the row log holds: ``(batch, rows, labels)``.

        Rows come in the order of ``id_list`` within each batch (the detectors take labelled rows
        in arrival order), batches oldest first.
        """
        if row_log is None or found.all():
            return []
        missing = np.flatnonzero(~found)
        position = {id_list[i]: int(i) for i in missing}
        out = []
        for hit in row_log.find([id_list[i] for i in missing], prefetched):
            order = np.argsort([position[i] for i in hit.rows.ids], kind="stable")
            rows = _take(hit.rows, order)
            out.append((hit.batch, rows, labels[[position[i] for i in rows.ids]]))
        return out

    def locate(self, id_list: list[Hashable]) -> tuple[npt.NDArray[np.bool_], IntArray]:
        """Which ids are in the window, and the ``(batch, row)`` of each one that is (changes nothing).

        Raises if ids repeat.
        """
        if len(set(id_list)) != len(id_list):
            msg = "ids must be distinct within one label() call"
            raise ValueError(msg)
        positions = list(map(self.m._stream.id_index.get, id_list))
        found = np.fromiter((p is not None for p in positions), dtype=bool, count=len(positions))
        where = np.asarray([p for p in positions if p is not None], dtype=np.intp).reshape(-1, 2)
        return found, where

    def labelled_stats(
        self, record: BatchRecord, rows: IntArray, labels: Any
    ) -> tuple[dict[str, Any], int, int]:
        """A batch's statistics once these rows carry these labels (the record is not changed).

        Each calibrator's kind turns the labelled rows into a statistic of their own, merged into
        the batch's (a relabel first merges the old labels' statistic with the sign reversed).
        Returns the new statistics, how many rows get their first label and how many a new one.
        """
        assert record.rows is not None
        task = self.m._task_labels
        old = task.stored(record.rows)[rows]
        had = ~task.missing(old)
        probs = record.rows.probs
        stats: dict[str, Any] = {}
        for key, current in record.stats.items():
            cal = self.m._calibrators[key]
            kind = kind_of(cal)
            results = kind.results_of(record.rows, key, cal)
            delta = kind.labelled(results.take(rows), probs[rows], labels)
            if had.any():
                old_rows = rows[had]
                delta = delta.merge(kind.labelled(results.take(old_rows), probs[old_rows], old[had], sign=-1))
            stats[key] = current.merge(delta)
        return stats, int((~had).sum()), int(had.sum())

    def feed_labels(
        self,
        groups: list[tuple[BatchRecord, IntArray, IntArray]],
        *,
        latest: int,
        rows_seen: int,
        corrections: Sequence[tuple[BatchRecord, IntArray, IntArray, IntArray]] = (),
    ) -> None:
        """Give newly labelled rows to the calibrators that learn from labels (ACI) and the detectors.

        ``corrections`` (rows whose label changed: record, rows, old labels, new labels) go to
        the calibrators that learn only. Should anything fail, the calibrators that learned get
        their earlier state back (corrections included); the callers (``label``, ``observe``)
        put the detectors back
        (:func:`calwatch.shift.watch.detectors_kept_on_failure`).
        """
        learners = {key: cal for key, cal in self.m._calibrators.items() if kind_of(cal).learns_from_labels}
        saved = {key: copy.deepcopy(vars(cal)) for key, cal in learners.items()}
        try:
            self._feed_adaptive(groups, learners, corrections)
            if self.m._shift is not None and groups:
                self._feed_detectors(groups, latest=latest, rows_seen=rows_seen)
        except BaseException:
            for key, state in saved.items():
                vars(learners[key]).clear()
                vars(learners[key]).update(state)
            raise

    def _feed_detectors(
        self, groups: list[tuple[BatchRecord, IntArray, IntArray]], *, latest: int, rows_seen: int
    ) -> None:
        assert self.m._shift is not None
        probs = stacked_rows(
            [(record.rows.probs, rows) for record, rows, _ in groups if record.rows is not None]
        )
        labels = np.concatenate([labels for _, _, labels in groups])
        covered = {
            key: np.concatenate(
                [
                    kind.covered(kind.results_of(record.rows, key, cal).take(rows), labels)
                    for record, rows, labels in groups
                    if record.rows is not None
                ]
            )
            for key, cal in self.m._calibrators.items()
            if (kind := kind_of(cal)).has_sets
        }
        where = (
            np.concatenate(
                [np.full(rows.shape[0], record.index, dtype=np.int64) for record, rows, _ in groups]
            ),
            np.concatenate([np.asarray(rows, dtype=np.int64) for _, rows, _ in groups]),
        )
        self.m._shift.labelled(latest, (rows_seen - 1, rows_seen - 1), probs, labels, covered, where)

    def _feed_adaptive(
        self,
        groups: list[tuple[BatchRecord, IntArray, IntArray]],
        learners: Mapping[str, Any],
        corrections: Sequence[tuple[BatchRecord, IntArray, IntArray, IntArray]] = (),
    ) -> None:
        """Give labelled rows, with the sets they were shown, to the calibrators that learn (ACI).

        Corrections first (they replace labels of rows fed before), then the rows' first labels.
        ACI's level is a sum of per-row steps ``γ (α − err)``, ``err = 1{y ∉ C}`` with ``C`` the
        set the row was shown at observe time, so a label changed from ``y_old`` to ``y_new``
        adds ``γ (err_old − err_new)`` (:meth:`calwatch.Adaptive.correct`).
        """
        for key, cal in learners.items():
            kind = kind_of(cal)
            for record, rows, old, new in corrections:
                if record.rows is not None and rows.shape[0]:
                    kind.after_relabels(cal, kind.results_of(record.rows, key, cal).take(rows), old, new)
            for record, rows, labels in groups:
                if record.rows is not None and rows.shape[0]:
                    kind.after_labels(cal, kind.results_of(record.rows, key, cal).take(rows), labels)


def _with_rows(record: BatchRecord, rows: BatchRows) -> BatchRecord:
    """The record as the label path reads it, with rows read back from the row log."""
    return BatchRecord(record.index, record.name, record.observed_at, record.n_rows, record.stats, rows)
