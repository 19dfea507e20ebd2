"""What a monitor keeps of a stream: one record per batch, its settled columns, and its rows.

- :mod:`~calwatch.stream.records` — :class:`BatchRecord` (a batch's statistics per calibrator),
  :class:`RecordStore` (every batch's record, with merges over any span);
- :mod:`~calwatch.stream.columns` — the settled columns: statistics of batches whose labels are
  all in, stored column-wise so a long stream costs arrays, not objects;
- :mod:`~calwatch.stream.row_log` — the rows of each batch on disk (parquet), which late labels
  join by id and the dashboard's row table pages through;
- :mod:`~calwatch.stream.slices` — the slice columns a user passes as ``meta=``: their fixed
  encoding and each row's codes;
- :mod:`~calwatch.stream.slice_counts` — mergeable counts per slice, kept per epoch of batches.
"""

from calwatch.stream.columns import StatsColumns
from calwatch.stream.records import (
    BatchRecord,
    BatchRows,
    BatchStats,
    RecordStore,
    StreamState,
    merge_records,
)
from calwatch.stream.row_log import LabelLog, RowLog

__all__ = [
    "BatchRecord", "BatchRows", "BatchStats", "LabelLog", "RecordStore", "RowLog", "StatsColumns",
    "StreamState", "merge_records",
]  # fmt: skip
