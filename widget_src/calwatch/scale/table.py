"""Out of core on one machine: observe a prediction log and join its late labels, chunk by chunk.

The embedded default behind :meth:`Monitor.observe_table <calwatch.monitor.monitor.Monitor.observe_table>`
and :meth:`Monitor.label_table <calwatch.monitor.monitor.Monitor.label_table>`. A source (a parquet path
or glob, a polars ``LazyFrame``/``DataFrame``, a pyarrow ``Table``/``Dataset``) is read as a polars
lazy query and streamed in chunks of ``chunk_rows`` rows; each chunk goes through the kernel
(:mod:`calwatch.scale.kernel`) and only its small partial statistics are kept, so peak memory
depends on the chunk size and on buckets × calibrators × classes, not on the table's length.

The monitor's lock is held only to freeze the calibrators and to commit: a dashboard reading the
monitor is not blocked while a long table is read.

A monitor that slices (``calibrate(meta=)``) is given the table's slice columns by name
(``meta=[...]``): each chunk's columns are encoded with the monitor's fixed encoding inside the
kernel, each bucket's slice counts are reduced with its other statistics and committed with its
batch (:mod:`calwatch.scale.slice_partials`), and a late label recomputes its row's codes from the
same columns of the observed rows, which the table's registry entry names.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from calwatch.core.ids import arrow_id_kind, check_id_kind
from calwatch.monitor.labels import LabelReport
from calwatch.scale.columns import LogColumns
from calwatch.scale.commit import commit_labels, commit_observed
from calwatch.scale.duplicates import DuplicateCheck, confirm, grouped_hashes, repeated_id
from calwatch.scale.fold import FoldedPartials
from calwatch.scale.frozen import FrozenMonitor, freeze
from calwatch.scale.kernel import partial_statistics
from calwatch.scale.pins import ChangedSourceError, FilePin, check_pins, pin_files
from calwatch.scale.reduce import BucketStatistics, as_frame, bucket_statistics
from calwatch.scale.registry import BUCKET, ID, LABEL, TableSource, registry_of
from calwatch.scale.slice_partials import check_meta, check_meta_types

#: Rows per chunk: large enough that per-chunk overheads vanish, small enough for flat memory.
DEFAULT_CHUNK_ROWS = 250_000
#: Chunks run through the kernel at once (numpy and Arrow release the GIL in the heavy parts).
WORKERS = 2
PREVIOUS = "__cw_previous"


def as_lazy(source: Any, argument: str = "source") -> pl.LazyFrame:
    """A source as a polars lazy query (nothing is read yet).

    Raises
    ------
    TypeError
        For anything but a path or glob of parquet files, a polars LazyFrame/DataFrame or a pyarrow
        Table/Dataset (the message names ``argument``).
    ValueError
        For a path that matches no file.
    """
    import pyarrow.dataset as pads

    if isinstance(source, pl.LazyFrame):
        return source
    if isinstance(source, pl.DataFrame):
        return source.lazy()
    if isinstance(source, pa.Table):
        frame = pl.from_arrow(source)
        assert isinstance(frame, pl.DataFrame)
        return frame.lazy()
    if isinstance(source, pads.Dataset):
        return pl.scan_pyarrow_dataset(source)
    if isinstance(source, (str, os.PathLike)):
        path = str(source)
        if not any(ch in path for ch in "*?[") and not Path(path).exists():
            msg = f"{argument}: {path!r} does not exist (expected a parquet file, folder or glob)"
            raise ValueError(msg)
        if Path(path).is_dir():
            path = str(Path(path) / "**" / "*.parquet")
        return pl.scan_parquet(path)
    msg = (
        f"{argument} must be a parquet path or glob, a polars LazyFrame/DataFrame or a pyarrow "
        f"Table/Dataset; got {type(source).__name__}"
    )
    raise TypeError(msg)


def check_names(frame: pl.LazyFrame, names: Sequence[str], what: str = "the table") -> None:
    """Raise ``ValueError`` naming the first of ``names`` that ``frame`` lacks."""
    present = frame.collect_schema().names()
    for name in names:
        if name not in present:
            msg = f"column {name!r} is not in {what}; it has {present[:20]}"
            raise ValueError(msg)


def arrow_chunks(frame: pl.LazyFrame, chunk_rows: int) -> Iterator[pa.RecordBatch]:
    """The query's rows as Arrow record batches of about ``chunk_rows`` rows, streamed."""
    for chunk in frame.collect_batches(chunk_size=chunk_rows, maintain_order=False):
        yield from chunk.to_arrow(compat_level=pl.CompatLevel.oldest()).to_batches()


def parquet_files(source: Any) -> list[str] | None:
    """The parquet files of a path, folder or glob (sorted, resolved once); None for a table in memory.

    The list is fixed here, when the table is observed: a file that lands in the folder later is
    never read by this table (a label for its rows would join a row the monitor never counted).
    Parquet is read file by file with pyarrow's batch reader, one batch at a time: polars'
    ``collect_batches`` ran ahead of a slower consumer by hundreds of MB on a 10^7-row file, and a
    threaded dataset scanner reads several row groups at once.
    """
    if not isinstance(source, (str, os.PathLike)):
        return None
    path = str(source)
    if not any(ch in path for ch in "*?[") and not Path(path).exists():
        msg = f"source: {path!r} does not exist (expected a parquet file, folder or glob)"
        raise ValueError(msg)
    if any(ch in path for ch in "*?["):
        files = sorted(glob.glob(path, recursive=True))
    elif Path(path).is_dir():
        files = sorted(str(p) for p in Path(path).rglob("*.parquet"))
    else:
        files = [path]
    files = [f for f in files if Path(f).is_file()]
    if not files:
        msg = f"source: {path!r} matches no parquet file"
        raise ValueError(msg)
    return files


def source_chunks(
    files: list[str] | None, frame: pl.LazyFrame, names: list[str], chunk_rows: int
) -> Iterator[pa.RecordBatch]:
    """The ``names`` columns of a source in chunks: pyarrow's batch reader for parquet, else polars."""
    if files is None:
        yield from arrow_chunks(frame.select(names), chunk_rows)
        return
    for file in files:
        with pq.ParquetFile(file, pre_buffer=False, buffer_size=1 << 20) as reader:  # read as it goes
            for batch in reader.iter_batches(batch_size=chunk_rows, columns=names, use_threads=False):
                if batch.num_rows:
                    yield batch


def _progress(total: int | None, enabled: bool | None, what: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="rows", unit_scale=True, desc=what, disable=enabled is False, leave=False,
                delay=2.0)  # fmt: skip


def observe_table(
    monitor: Any,
    source: Any,
    *,
    id: str,
    probs: str | Sequence[str],
    bucket: str,
    label: str | None = None,
    category: str | None = None,
    meta: str | Sequence[str] | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: bool | None = None,
) -> tuple[int, ...]:
    """Observe every row of a prediction log: one batch per bucket, in sorted bucket order.

    See :meth:`Monitor.observe_table <calwatch.monitor.monitor.Monitor.observe_table>`.
    """
    if not (isinstance(chunk_rows, int) and chunk_rows > 0):
        msg = f"chunk_rows must be a positive integer; got {chunk_rows!r}"
        raise ValueError(msg)
    columns = LogColumns.of(id=id, bucket=bucket, probs=probs, label=label, category=category, meta=meta)
    with monitor.lock:
        frozen = freeze(monitor)
        calibrators = dict(monitor._calibrators)
        fixed_kind = monitor._id_kind
    check_meta(frozen.slices, columns)  # before the table is read (the commit checks the counts again)
    names = columns.needed()
    kinds = _IdKinds(columns.id, fixed_kind)
    files = parquet_files(source)
    if files is None:
        frame = as_lazy(source)
        check_names(frame, names)
        check_meta_types(frozen.slices, columns, frame.collect_schema())
        pins: tuple[FilePin, ...] = ()
        items: Iterator[RowGroups | pa.RecordBatch] = source_chunks(None, frame, names, chunk_rows)
    else:
        pins = pin_files(files)  # before any read: a truncated or foreign file is named here
        footers = file_footers(files, names, columns)
        kinds.check(footers[files[0]].schema.to_arrow_schema())  # the others agree (file_footers)
        for footer in footers.values():  # each file's slice columns (each chunk is checked again)
            check_meta_types(frozen.slices, columns, footer.schema.to_arrow_schema())
        items = row_groups(footers, chunk_rows)
        frame = pl.scan_parquet(files)
    location = str(source) if isinstance(source, (str, os.PathLike)) else None
    table_source = TableSource("polars", frame, columns, location=location, pins=pins)
    copy = None if files is not None else RowCopy(table_source.labels.folder)
    folded = FoldedPartials()
    workers = max(1, min(WORKERS, os.cpu_count() or 1))
    try:
        with (
            _progress(None, progress, "observe_table") as bar,
            DuplicateCheck(id) as repeats,
            ThreadPoolExecutor(workers, thread_name_prefix="calwatch-kernel") as pool,
        ):
            running: deque[Future[list[_ChunkResult]]] = deque()

            def settle(future: Future[list[_ChunkResult]]) -> None:
                for part, grouped, labelled in future.result():
                    folded.add(part)
                    repeats.add_grouped(grouped)
                    if labelled is not None:
                        table_source.labels.stage(labelled)
                    bar.update(int(grouped[1][-1]))

            for item in items:
                if isinstance(item, pa.RecordBatch):
                    kinds.check(item.schema)
                    if copy is not None:
                        copy.write(item)
                running.append(pool.submit(_work, item, names, chunk_rows, frozen, columns))
                while len(running) > workers:  # at most `workers` items in flight: memory stays flat
                    settle(running.popleft())
            while running:
                settle(running.popleft())
            _refuse_repeats(repeats, lambda: source_chunks(files, frame, names, chunk_rows), columns)
        reduced = folded.result()
        if reduced is None:
            msg = "source has no rows: nothing to observe"
            raise ValueError(msg)
        buckets = bucket_statistics(as_frame(reduced), frozen, observed=True)
        if files is not None:
            check_pins(pins, "while it was read")
        else:
            assert copy is not None
            table_source.copies = (copy.close(),)
            table_source.pins = pin_files([str(p) for p in table_source.copies])
        table_source.source = table_source.pins
        with monitor.lock:
            same_calibrators(monitor, calibrators)
            check_id_kind(monitor._id_kind, kinds.kind, f"id column {columns.id!r}")
            indices = commit_observed(monitor, buckets, table_source)
            monitor._id_kind = monitor._id_kind or kinds.kind
            table_source.labels.commit()
        return indices
    except BaseException:
        table_source.labels.discard()
        if copy is not None:
            copy.discard()
        raise


class _IdKinds:
    """The one kind of a table's ids (:func:`calwatch.core.ids.arrow_id_kind`), checked chunk by chunk."""

    def __init__(self, column: str, fixed: str | None) -> None:
        self.column, self.fixed, self.kind = column, fixed, fixed

    def check(self, schema: pa.Schema) -> None:
        """Refuse ids of another kind than the monitor's, or than this table's earlier chunks."""
        got = arrow_id_kind(schema.field(self.column).type)
        check_id_kind(self.kind, got, f"id column {self.column!r}")
        self.kind = got


def file_footers(files: Sequence[str], names: Sequence[str], columns: LogColumns) -> dict[str, Any]:
    """Each file's parquet footer, after refusing files that are not one table.

    A file lacking a column, or holding ids or buckets of another type than the first file, is
    refused naming the two files and the column, before a row is read. The footers are read once,
    here: the reading loop takes each file's row groups from them.
    """
    footers: dict[str, Any] = {}
    first: tuple[str, pa.Schema] | None = None
    for file in files:
        try:
            footers[file] = pq.read_metadata(file)
            schema = footers[file].schema.to_arrow_schema()
        except (OSError, pa.ArrowException) as err:
            msg = f"{file}: is not a readable parquet file ({err})"
            raise ChangedSourceError(msg) from err
        for name in names:
            if name not in schema.names:
                msg = f"column {name!r} is not in {file}; it has {schema.names[:20]}"
                raise ValueError(msg)
        if first is None:
            first = (file, schema)
            continue
        for role, name in (("id", columns.id), ("bucket", columns.bucket)):
            a, b = first[1].field(name).type, schema.field(name).type
            if arrow_id_kind(a) != arrow_id_kind(b):
                msg = (
                    f"{role} column {name!r} holds {arrow_id_kind(a)} in {first[0]} and {arrow_id_kind(b)} "
                    f"in {file}: one table's {role}s must have one type"
                )
                raise ValueError(msg)
    return footers


class RowCopy:
    """The monitor's own parquet copy of an in-memory table's log columns, written chunk by chunk.

    A frame can change or vanish after ``observe_table`` returns, and cannot travel in a
    snapshot; its copy can: late labels are joined to it, here and after a load.
    """

    def __init__(self, folder: Path) -> None:
        self.path = folder / f"rows-{uuid.uuid4().hex[:12]}.parquet"
        self._writer: Any = None

    def write(self, chunk: pa.RecordBatch) -> None:
        """Append one chunk (its schema is the first chunk's; a later chunk is cast to it)."""
        import pyarrow.parquet as pq

        if self._writer is None:
            # Plain encoding, no statistics: dictionary-encoding every column cost ten times the
            # write itself (0.3 s against 0.04 s for 10^6 rows of 7 columns); the copy is read
            # back whole by the label join, which needs neither.
            self._writer = pq.ParquetWriter(
                self.path, chunk.schema, compression="snappy", use_dictionary=False, write_statistics=False
            )
        elif chunk.schema != self._writer.schema:
            chunk = chunk.cast(self._writer.schema)
        self._writer.write_batch(chunk)

    def close(self) -> Path:
        """Finish the file; its path."""
        if self._writer is None:  # no rows: observe_table refuses the table anyway
            msg = "source has no rows: nothing to observe"
            raise ValueError(msg)
        self._writer.close()
        return self.path

    def discard(self) -> None:
        """Remove the copy (the table was refused)."""
        if self._writer is not None:
            self._writer.close()
        self.path.unlink(missing_ok=True)


Grouped = tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]
_ChunkResult = tuple[pa.RecordBatch, Grouped, pl.DataFrame | None]


@dataclass(frozen=True)
class RowGroups:
    """Consecutive row groups of one parquet file: a unit of work a worker reads itself."""

    file: str
    groups: tuple[int, ...]


def row_groups(footers: dict[str, Any], rows: int) -> Iterator[RowGroups]:
    """Each file's row groups (from its footer), consecutive ones together until they hold ``rows`` rows.

    Parquet row groups are read by the workers themselves, so the decoding runs in parallel with
    the statistics instead of on this one thread (it was the limit once the kernel got fast);
    consecutive row groups smaller than ``rows`` go together.
    """
    for file, metadata in footers.items():
        yield from file_row_groups(file, metadata, rows)


def file_row_groups(file: str, metadata: Any, rows: int) -> Iterator[RowGroups]:
    """One file's row groups, read from its footer ``metadata``, grouped as :func:`row_groups` groups them."""
    groups: list[int] = []
    gathered = 0
    for g in range(metadata.num_row_groups):
        groups.append(g)
        gathered += metadata.row_group(g).num_rows
        if gathered >= rows:
            yield RowGroups(file, tuple(groups))
            groups, gathered = [], 0
    if groups:
        yield RowGroups(file, tuple(groups))


def item_chunks(
    item: RowGroups | pa.RecordBatch, names: list[str], chunk_rows: int
) -> Iterator[pa.RecordBatch]:
    """The record batches of a unit of work (row groups read in chunks of ``chunk_rows``)."""
    if isinstance(item, pa.RecordBatch):
        yield item
        return
    try:
        with pq.ParquetFile(item.file, pre_buffer=False, buffer_size=1 << 20) as reader:
            batches = reader.iter_batches(batch_size=chunk_rows, row_groups=list(item.groups), columns=names,
                                          use_threads=False)  # fmt: skip
            yield from (batch for batch in batches if batch.num_rows)
    except (OSError, pa.ArrowException) as err:
        msg = f"{item.file}: its row groups {list(item.groups)} cannot be read ({err}); nothing was observed"
        raise ChangedSourceError(msg) from err


def _work(
    item: RowGroups | pa.RecordBatch, names: list[str], chunk_rows: int, frozen: FrozenMonitor,
    columns: LogColumns,
) -> list[_ChunkResult]:  # fmt: skip
    """Each chunk's partial statistics, grouped key hashes and labelled rows, on a worker thread.

    Reading, the kernel and the hashing release the GIL in their heavy parts (Arrow, numpy,
    numba), so the workers run side by side; the calling thread only folds and files.
    """
    out: list[_ChunkResult] = []
    for chunk in item_chunks(item, names, chunk_rows):
        part = partial_statistics(chunk, frozen, columns, check_ids=False)
        labelled = _labelled_rows(chunk, columns) if columns.label is not None else None
        out.append((part, grouped_hashes(chunk, columns.id), labelled))
    return out


def _refuse_repeats(
    repeats: DuplicateCheck, chunks: Callable[[], Iterator[pa.RecordBatch]], columns: LogColumns
) -> None:
    """Raise if an id repeats anywhere in the table (in one bucket or across, across chunks too)."""
    hashes = repeats.repeated_hashes()
    if hashes.shape[0] == 0:
        return
    found = confirm(hashes, chunks, columns.bucket, columns.id)
    if found is not None:
        raise repeated_id(columns.id, *found)


def _labelled_rows(chunk: pa.RecordBatch, columns: LogColumns) -> pl.DataFrame:
    """The ``(ID, BUCKET, LABEL)`` of a chunk's rows that carry a label (for the label log)."""
    assert columns.label is not None
    frame = pl.from_arrow(pa.Table.from_batches([chunk]).select([columns.id, columns.bucket, columns.label]))
    assert isinstance(frame, pl.DataFrame)
    frame = frame.rename({columns.id: ID, columns.bucket: BUCKET, columns.label: LABEL})
    has_label = pl.col(LABEL).is_not_null()
    if frame.schema[LABEL].is_float():
        has_label = has_label & pl.col(LABEL).is_not_nan()
    return frame.filter(has_label)


def same_calibrators(monitor: Any, calibrators: dict[str, Any]) -> None:
    """Raise if the calibrators changed while the table was read (the statistics would not be theirs)."""
    now = monitor._calibrators
    if now.keys() != calibrators.keys() or any(now[k] is not calibrators[k] for k in now):
        msg = "the monitor's calibrators changed while the table was read: nothing was merged; run it again"
        raise RuntimeError(msg)


@dataclass(frozen=True)
class _Labels:
    """One labelling call's labels: a query of columns ``ID`` and ``LABEL``, their count, their id kind."""

    frame: pl.LazyFrame
    count: int
    kind: str


def polars_id_kind(dtype: pl.DataType) -> str:
    """The kind of ids a polars column type holds (:func:`calwatch.core.ids.arrow_id_kind`'s words)."""
    return arrow_id_kind(pl.Series([], dtype=dtype).to_arrow().type)


def read_labels(source: Any, *, id: str, label: str) -> _Labels:
    """The labels of a source, checked: the columns exist, no null label, no id twice.

    Raises
    ------
    ValueError
        Naming the column at fault.
    """
    for argument, value in (("id", id), ("label", label)):
        if not isinstance(value, str) or not value:
            msg = f"{argument} must name a column (a non-empty string); got {value!r}"
            raise ValueError(msg)
    frame = as_lazy(source)
    check_names(frame, [id, label], "the labels table")
    labels = frame.select(pl.col(id).alias(ID), pl.col(label).alias(LABEL))
    facts = labels.select(
        pl.len().alias("n"),
        pl.col(LABEL).null_count().alias("null_labels"),
        pl.col(ID).null_count().alias("null_ids"),
        pl.col(ID).n_unique().alias("distinct"),
    ).collect()
    n, null_labels, null_ids, distinct = facts.row(0)
    id_type = labels.collect_schema()[ID]
    if id_type.is_float():
        null_ids += int(labels.select(pl.col(ID).is_nan().sum()).collect().item())
    check_label_facts(n=n, null_labels=null_labels, null_ids=null_ids, distinct=distinct, id=id, label=label)
    return _Labels(labels, int(n), polars_id_kind(id_type))


def check_label_facts(*, n: int, null_labels: int, null_ids: int, distinct: int, id: str, label: str) -> None:
    """Refuse a labels table with null labels or ids, or an id twice (every engine's labels, one message)."""
    if null_labels:
        msg = f"label column {label!r} has {null_labels} null rows"
        raise ValueError(msg)
    if null_ids:
        msg = f"id column {id!r} has {null_ids} null or NaN rows"
        raise ValueError(msg)
    if distinct != n:
        msg = f"id column {id!r} repeats {n - distinct} ids: label each row once per call"
        raise ValueError(msg)


def label_table(
    monitor: Any,
    source: Any,
    *,
    id: str,
    label: str,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: bool | None = None,
) -> LabelReport:
    """Join late labels by id to the tables the monitor observed, and update the batches they touch.

    See :meth:`Monitor.label_table <calwatch.monitor.monitor.Monitor.label_table>`.
    """
    labels = read_labels(source, id=id, label=label)
    with monitor.lock:
        frozen = freeze(monitor)
        calibrators = dict(monitor._calibrators)
        sources = [s for s in registry_of(monitor).sources if s.engine == "polars"]
        check_id_kind(monitor._id_kind, labels.kind, f"id column {id!r}")
    if not sources:
        msg = (
            "label_table joins labels to tables observed with observe_table, and none was observed: "
            "use label() for rows observed in memory"
        )
        raise ValueError(msg)
    observed = [(s, s.readable()) for s in sources]  # each pinned file checked before a row is read
    if labels.count == 0:
        return LabelReport(0, 0, 0, ())
    frames = {id_of(s): frame for s, frame in observed}
    pins = [pin for s in sources for pin in s.pins]
    try:
        return apply_labels(
            monitor, frozen, calibrators, sources, labels,
            lambda s: _joined_chunks(s, frames[id_of(s)], labels.frame, chunk_rows), progress,
            before_commit=lambda: check_pins(pins, "while labels were joined to it"),
        )  # fmt: skip
    except ValueError as err:  # the kernel names the joined label column: name the user's
        if repr(LABEL) not in str(err):
            raise
        raise ValueError(str(err).replace(repr(LABEL), repr(label))) from None


def apply_labels(
    monitor: Any,
    frozen: FrozenMonitor,
    calibrators: dict[str, Any],
    sources: Sequence[TableSource],
    labels: _Labels,
    chunks_of: Callable[[TableSource], Iterator[pa.RecordBatch]],
    progress: bool | None = None,
    before_commit: Callable[[], object] | None = None,
) -> LabelReport:
    """Run the kernel in label mode over each source's joined rows, then commit all or nothing.

    ``before_commit`` runs once every row is read and before anything is committed (a check
    that may raise, e.g. that no pinned file changed during the read).
    """
    deltas: list[tuple[TableSource, BucketStatistics]] = []
    matched_ids: list[pl.Series] = []
    try:
        with _progress(None, progress, "label_table") as bar:
            for table_source in sources:
                columns = _label_columns(table_source.columns)
                folded = FoldedPartials()
                for chunk in chunks_of(table_source):
                    folded.add(partial_statistics(chunk, frozen, columns, observed=False))
                    rows = _labelled_rows(chunk, columns)
                    table_source.labels.stage(rows)
                    matched_ids.append(rows.get_column(ID))
                    bar.update(len(chunk))
                reduced = folded.result()
                if reduced is not None:
                    deltas += [
                        (table_source, d)
                        for d in bucket_statistics(as_frame(reduced), frozen, observed=False)
                    ]
        matched = distinct_matches(matched_ids)
        unmatched = labels.count - matched
        if before_commit is not None:
            before_commit()
        relabelled = sum(d.n_relabelled for _, d in deltas)
        with monitor.lock:
            same_calibrators(monitor, calibrators)
            touched = commit_labels(monitor, deltas, unmatched=unmatched)
            for table_source in sources:
                table_source.labels.commit()
    except BaseException:
        for table_source in sources:
            table_source.labels.discard()
        raise
    return LabelReport(matched, unmatched, relabelled, touched)


def distinct_matches(ids: list[pl.Series]) -> int:
    """Distinct ids over every source, refusing an id that met rows in two sources.

    Each table's ids are distinct (checked when it was observed), but two tables may hold one
    id; a label cannot tell which row it is for, so the call is refused (nothing is applied)
    rather than labelling both.
    """
    ids = [s for s in ids if s.len()]
    if not ids:
        return 0
    if len({s.dtype for s in ids}) > 1:
        ids = [s.cast(pl.String) for s in ids]
    every = pl.concat(ids)
    distinct = int(every.n_unique())
    if distinct != every.len():
        twice = every.filter(every.is_duplicated()).first()
        msg = (
            f"id {twice!r} was observed in two tables: a label cannot tell which row it is for, so "
            "none of this call's labels was applied. Observe each row under one id across the monitor"
        )
        raise ValueError(msg)
    return distinct


def _label_columns(columns: LogColumns) -> LogColumns:
    """The kernel's columns for joined label rows: this call's label, the row's previous one.

    The slice columns (``meta``) stay: the joined rows carry them from the observed table, so
    the kernel encodes each labelled row's slices again, as they were when it was observed.
    """
    return dataclasses.replace(columns, label=LABEL, previous_label=PREVIOUS)


def id_of(source: TableSource) -> int:
    """A source's identity, as a key (sources are mutable dataclasses, not hashable)."""
    return id(source)


def _joined_chunks(
    source: TableSource, observed: pl.LazyFrame, labels: pl.LazyFrame, chunk_rows: int
) -> Iterator[pa.RecordBatch]:
    """A source's observed rows whose id has a label in this call, with the label and the previous one."""
    columns = source.columns
    needed = [c for c in columns.needed() if c != columns.label]
    rows = observed.select(needed).filter(pl.col(columns.bucket).is_in(list(source.batches)))
    kept, theirs = observed.collect_schema()[columns.id], labels.collect_schema()[ID]
    if kept != theirs and polars_id_kind(kept) == polars_id_kind(theirs):  # e.g. Int32 labels, Int64 rows
        labels = labels.with_columns(pl.col(ID).cast(kept, strict=False))  # out of range: matches nothing
    try:
        joined = rows.join(labels, left_on=columns.id, right_on=ID, how="inner")
        previous = source.labels.previous(labels)
        if previous is None:
            joined = joined.with_columns(pl.lit(None, dtype=labels.collect_schema()[LABEL]).alias(PREVIOUS))
        else:
            keys = [columns.id, columns.bucket]
            joined = joined.join(
                previous.rename({LABEL: PREVIOUS}), left_on=keys, right_on=[ID, BUCKET], how="left"
            )
        yield from arrow_chunks(joined, chunk_rows)
    except pl.exceptions.SchemaError as err:
        msg = f"id: the labels' ids cannot be joined to column {columns.id!r} of the observed table ({err})"
        raise ValueError(msg) from err


__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "apply_labels",
    "arrow_chunks",
    "as_lazy",
    "check_label_facts",
    "distinct_matches",
    "label_table",
    "observe_table",
    "read_labels",
    "same_calibrators",
]
