"""What a cluster's workers run: the kernel on frozen bytes decoded once, in observe or label mode.

Spark executors and Dask workers receive the frozen monitor as bytes (a Spark broadcast, a Dask
graph key), not as Python objects: :func:`frozen_for` decodes them once per worker process and
keeps them by digest, so a table of thousands of partitions decodes the calibrators once per
process, not once per partition.

In label mode a row's previous label comes from two places, and the later one wins: the label
log (labels applied by earlier label calls, joined by the engine as column :data:`LOGGED`) and
the label column the table had when it was observed (:data:`SOURCE_LABEL`). Neither is copied
to the driver at observe time, so labels already in a billion-row log cost nothing until a
label call touches their rows.

Kernel errors (bad rows) raised on a worker reach the driver wrapped by the engine (Spark's
``PythonException`` carries only the remote traceback as text). :func:`marked` puts the message
between markers that :func:`unmarked` finds again, so the driver re-raises the kernel's own
message, naming the column.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa

from calwatch.scale.columns import LogColumns, label_mask, values
from calwatch.scale.frozen import FrozenMonitor
from calwatch.scale.kernel import partial_statistics
from calwatch.scale.registry import LABEL

#: The previous label that the kernel subtracts, merged on the worker from the next two columns.
PREVIOUS = "__cw_previous"
#: The row's last label from the label log (joined by the engine; null where none).
LOGGED = "__cw_logged"
#: The row's label column as observed (renamed so it never clashes with this call's label).
SOURCE_LABEL = "__cw_source_label"
#: How many frozen monitors a worker process keeps decoded.
CACHED = 4
#: Rows gathered before the kernel runs: engines hand workers small Arrow batches (Spark's
#: ``maxRecordsPerBatch`` is 10,000), and each kernel call has a fixed cost per calibrator.
COALESCE_ROWS = 131_072

Kernel = Callable[..., pa.RecordBatch]

_FROZEN: dict[str, FrozenMonitor] = {}
_OPEN, _CLOSE = "<<calwatch-kernel:", ":calwatch-kernel>>"
_MARKED = re.compile(re.escape(_OPEN) + r"(\w+):(.*?)" + re.escape(_CLOSE), re.DOTALL)


def digest(data: bytes) -> str:
    """A short content hash naming frozen bytes (the cache key on workers)."""
    return hashlib.sha256(data).hexdigest()[:32]


def frozen_for(key: str, data: Callable[[], bytes]) -> FrozenMonitor:
    """The frozen monitor named ``key``, decoded from ``data()`` the first time this process needs it."""
    found = _FROZEN.get(key)
    if found is None:
        found = FrozenMonitor.from_bytes(data())
        while len(_FROZEN) >= CACHED:
            _FROZEN.pop(next(iter(_FROZEN)))
        _FROZEN[key] = found
    return found


def coalesced(batches: Iterable[pa.RecordBatch], rows: int = COALESCE_ROWS) -> Iterator[pa.RecordBatch]:
    """The batches regrouped into batches of at least ``rows`` rows (the last may be smaller)."""
    pending: list[pa.RecordBatch] = []
    gathered = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        gathered += batch.num_rows
        if gathered >= rows:
            yield _combined(pending)
            pending, gathered = [], 0
    if pending:
        yield _combined(pending)


def _combined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    combined: pa.RecordBatch = pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
    return combined


def label_mode_columns(columns: LogColumns) -> LogColumns:
    """The kernel's columns for joined label rows: this call's label and the merged previous one.

    The slice columns (``meta``) stay, so each labelled row's slices are encoded again from the
    observed table's columns.
    """
    return dataclasses.replace(columns, label=LABEL, previous_label=PREVIOUS)


def statistics(
    batch: pa.RecordBatch,
    frozen: FrozenMonitor,
    columns: LogColumns,
    *,
    observed: bool,
    kernel: Kernel = partial_statistics,
) -> pa.RecordBatch:
    """The kernel on one batch; in label mode (``observed=False``) the previous label is merged first.

    ``columns`` is the observed table's :class:`LogColumns`. In label mode the batch holds
    :data:`~calwatch.scale.registry.LABEL` (this call's label) and optionally :data:`LOGGED`
    and :data:`SOURCE_LABEL`. Ids are not checked here: a batch is one slice of a partition, so
    the adapters check that no id repeats anywhere in the whole table (an engine
    aggregation), and joined label rows are distinct by construction.
    """
    if observed:
        return kernel(batch, frozen, columns, observed=True, check_ids=False)
    batch = batch.append_column(PREVIOUS, _previous(batch, frozen))
    return kernel(batch, frozen, label_mode_columns(columns), observed=False, check_ids=False)


def _previous(batch: pa.RecordBatch, frozen: FrozenMonitor) -> pa.Array:
    """Each row's previous label: the label log's where it has one, else the observed label column."""
    m = len(batch)
    index = np.zeros(m, dtype=np.intp)
    have = np.zeros(m, dtype=bool)
    encoder = frozen.encoder
    for name, what in ((LOGGED, "previous label"), (SOURCE_LABEL, "observed label")):
        if name not in batch.schema.names:
            continue
        mask = label_mask(batch, name) & ~have
        if mask.any():
            index[mask] = encoder.encode(values(batch, name)[mask], what)
            have |= mask
    return pa.array(frozen.classes[index], mask=~have)


def marked(err: BaseException) -> str:
    """The error's type and message between markers that survive an engine's wrapping."""
    return f"{_OPEN}{type(err).__name__}:{err}{_CLOSE}"


def unmarked(err: BaseException, renames: dict[str, str] | None = None) -> Exception | None:
    """The kernel error carried in ``err``'s text (``ValueError`` or ``TypeError``), or None.

    ``renames`` maps internal column names (``'__cw_label'``) to the user's, in the message.
    """
    found = _MARKED.search(str(err))
    if found is None:
        return None
    kind, message = found.group(1), found.group(2)
    for internal, user in (renames or {}).items():
        message = message.replace(repr(internal), repr(user))
    return TypeError(message) if kind == "TypeError" else ValueError(message)


def raising_marked(batch: pa.RecordBatch, frozen: FrozenMonitor, columns: LogColumns, *, observed: bool,
                   kernel: Kernel = partial_statistics) -> pa.RecordBatch:  # fmt: skip
    """:func:`statistics`, re-raising a kernel ``ValueError``/``TypeError`` with its message marked.

    Run on workers: the marked message survives the engine's wrapping (see :func:`unmarked`).
    """
    try:
        return statistics(batch, frozen, columns, observed=observed, kernel=kernel)
    except (ValueError, TypeError) as err:
        raise type(err)(marked(err)) from None


__all__ = [
    "CACHED",
    "COALESCE_ROWS",
    "LOGGED",
    "PREVIOUS",
    "SOURCE_LABEL",
    "Kernel",
    "coalesced",
    "digest",
    "frozen_for",
    "label_mode_columns",
    "marked",
    "raising_marked",
    "statistics",
    "unmarked",
]
