"""Prediction logs as streams: :meth:`Monitor.observe_table` and :meth:`Monitor.label_table`.

:class:`MonitorTables` is a part of :class:`~calwatch.monitor.monitor.Monitor` (a mixin); the work is done
by :mod:`calwatch.scale.table`, imported when first called.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from calwatch.monitor.state import MonitorState

if TYPE_CHECKING:
    from calwatch.monitor.labels import LabelReport


class MonitorTables(MonitorState):
    """Observing and labelling prediction logs out of core (part of :class:`~calwatch.monitor.Monitor`)."""

    def observe_table(
        self,
        source: Any,
        *,
        id: str,
        probs: str | Sequence[str],
        bucket: str,
        label: str | None = None,
        category: str | None = None,
        chunk_rows: int = 250_000,
        progress: bool | None = None,
    ) -> tuple[int, ...]:
        """Observe a prediction log too large for memory: one batch per bucket, exactly.

        The source is streamed in chunks; each chunk's rows go through the calibrators exactly
        as :meth:`observe` would take them, and only their statistics are kept, so peak memory
        does not grow with the table. Each distinct value of ``bucket``, in sorted order,
        becomes one batch, whose statistics equal those of observing that bucket's rows with
        :meth:`observe` (counts exactly, float sums to rounding).

        Parameters
        ----------
        source : str, Path, polars LazyFrame/DataFrame, pyarrow Table/Dataset
            A parquet file, folder or glob, or a table.
        id : str
            The column of row ids, distinct across the table and of the type of the monitor's
            other ids (integers, strings...); :meth:`label_table` joins on it.
        probs : str or sequence of str
            The probability columns in class order, or one list column of ``K`` values.
        bucket : str
            The column whose values make the batches (a date, an hour, a model version...).
        label : str, optional
            A column of labels already known (null where not).
        category : str, optional
            The Mondrian category column, for ``mondrian="category"`` calibrators.
        chunk_rows : int
            Rows read at a time.
        progress : bool, optional
            Show a progress bar (default: when the read takes more than two seconds).

        Returns
        -------
        tuple of int
            The new batches' indices. A rejected table (a missing column, probabilities that
            do not fit the monitor, a repeated id...) raises naming the column
            and leaves the monitor unchanged.

        Notes
        -----
        The batches keep statistics, not rows. A parquet source is its own row log: its files
        are listed and pinned now (:mod:`calwatch.scale.pins`), so :meth:`label_table` joins
        late labels to exactly the rows observed, however late they come, and refuses a file
        that changed since; a file landing in the folder later is never read. Any other
        source is copied (its log columns) into the monitor's own parquet file, which labels
        join and a snapshot carries. Ids must be distinct across the table and of the
        monitor's id type. The shift detectors and the window's row panels follow rows
        observed with :meth:`observe`; table batches do not feed them. Calibrators that learn
        from labels (ACI) or need embeddings (Venn-ADMIT), and randomised calibrators restored
        from snapshots written before id-keyed draws, are refused with a clear error.
        """
        from calwatch.scale.table import observe_table

        return observe_table(
            self, source, id=id, probs=probs, bucket=bucket, label=label, category=category,
            chunk_rows=chunk_rows, progress=progress,
        )  # fmt: skip

    def label_table(
        self,
        source: Any,
        *,
        id: str,
        label: str,
        chunk_rows: int = 250_000,
        progress: bool | None = None,
    ) -> LabelReport:
        """Join late labels by id to the tables observed with :meth:`observe_table`.

        Each label updates the batch its row came in, however long ago; a second label for a
        row replaces the first in every count. Labels whose id matches no observed row are
        counted in ``unmatched`` (and in :meth:`status`). Only the buckets the labels touch
        change.

        Parameters
        ----------
        source : str, Path, polars LazyFrame/DataFrame, pyarrow Table/Dataset
            The labels table.
        id : str
            Its id column (matched to the observed tables' id column).
        label : str
            Its label column (class labels as the model names them).
        chunk_rows : int
            Rows read at a time.
        progress : bool, optional
            Show a progress bar (default: when the read takes more than two seconds).

        Returns
        -------
        LabelReport
            Labels matched and unmatched, rows relabelled, batches changed.
        """
        from calwatch.scale.table import label_table

        return label_table(self, source, id=id, label=label, chunk_rows=chunk_rows, progress=progress)
