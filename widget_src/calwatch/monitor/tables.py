"""Prediction logs as streams: :meth:`Monitor.observe_table` and :meth:`Monitor.label_table`.

:class:`Tables` is a collaborator of :class:`~calwatch.monitor.Monitor`, which delegates to it;
the work is done by :mod:`calwatch.scale.table`, imported when first called.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from calwatch.monitor.labels import LabelReport
    from calwatch.monitor.monitor import Monitor


class Tables:
    """Observing and labelling prediction logs out of core (for :class:`~calwatch.monitor.Monitor`).

    Stateless: it reads and changes the monitor it is given.
    """

    def __init__(self, monitor: Monitor) -> None:
        self.m: Monitor = monitor

    def observe_table(
        self,
        source: Any,
        *,
        id: str,
        probs: str | Sequence[str],
        bucket: str,
        label: str | None = None,
        category: str | None = None,
        meta: str | Sequence[str] | None = None,
        chunk_rows: int = 250_000,
        progress: bool | None = None,
    ) -> tuple[int, ...]:
        """See :meth:`Monitor.observe_table`."""
        from calwatch.scale.table import observe_table

        return observe_table(
            self.m, source, id=id, probs=probs, bucket=bucket, label=label, category=category, meta=meta,
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
        """See :meth:`Monitor.label_table`."""
        from calwatch.scale.table import label_table

        return label_table(self.m, source, id=id, label=label, chunk_rows=chunk_rows, progress=progress)
