"""Monitor snapshots on disk: a folder of parquet tables and JSON, written atomically, no pickle.

Layout of a snapshot folder::

    manifest.json     format, versions, when, the model's description, and a size + SHA-256 of
                      every other file (checked before anything is read back)
    state.json        the task, calibrators, shift detectors, warning log, notes, class encoder
                      or regression levels (JSON, via :mod:`calwatch.core.codec`)
    arrays.parquet    the numeric arrays state.json refers to (key, dtype, shape, bytes)
    batches.parquet   per-batch statistics of the whole stream, one row per batch and calibrator
                      (set counts, risk, admitted and kept rows; for regression interval widths,
                      coverage per level, PIT counts and the CRPS sum)
    rows.parquet      the raw rows still in the window: ids, and for classification probabilities,
                      packed sets and labels; for regression the true values (NaN until
                      labelled), the base predictions, each calibrator's random-interpolation
                      draws, median and interval bounds (:mod:`calwatch.stream.row_codec`'s
                      layout, the row log's too; its mapping is state.json's ``row_columns``)

The folder is written next to its destination under a temporary name and renamed into place,
so a crash leaves either the old snapshot or the new one, never half of one. Loading verifies
every checksum first and builds a new :class:`~calwatch.monitor.monitor.Monitor` (a
:class:`~calwatch.monitor.regression.RegressionMonitor` for a regression snapshot); a corrupted
or truncated snapshot raises :class:`~calwatch.core.codec.SnapshotError` and changes nothing.
Checksums catch accidents, not impossible numbers, so the decoded values are checked too: each
batch's statistics against their own invariants (``check(n_rows)`` on each statistics type) and
each calibrator's levels and fitted thresholds (:mod:`calwatch.snapshot.checks`; the helpers are in
:mod:`calwatch.core.invariants`); a violation
raises :class:`~calwatch.core.codec.SnapshotError` naming the file, the batch or calibrator and
the field, e.g. ``batches.parquet: batch 3, calibrator 'risk': n_missed (12) > n_labelled (10)``.
The model itself is not saved (its weights belong to its own framework): pass it again to
:meth:`Monitor.load <calwatch.monitor.monitor.Monitor.load>` to keep streaming inputs ``X``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.core.codec import SnapshotError, StateDecoder, StateEncoder, check_dtype
from calwatch.core.frame_cache import CACHES_ATTRIBUTE
from calwatch.core.invariants import problem_message
from calwatch.kinds import KINDS, kind_named
from calwatch.kinds.regression import PIT_BINS, RegressionBatchStats, row_fields
from calwatch.monitor.regression import check_regressor
from calwatch.scale.registry import load_registry, save_registry
from calwatch.snapshot.checks import check_calibrators
from calwatch.stream.records import NO_LABEL, BatchRecord, BatchStats, RecordStore, StreamState
from calwatch.stream.row_codec import decode_rows, encode_rows
from calwatch.stream.row_log import RowLog
from calwatch.stream.slice_counts import SliceStore

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor

FORMAT = "calwatch-snapshot"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DATA_FILES = ("state.json", "arrays.parquet", "batches.parquet", "rows.parquet")
TASKS = ("classification", "regression")
# Monitor attributes that are not state: the model (or its adapter), live views and their listeners.
_TRANSIENT = frozenset(
    {
        "_adapter", "_model", "_listeners", "_widget", "_stream", "_guard_state", "_tables", "_row_log",
        "_autosave", CACHES_ATTRIBUTE,
    }
)  # fmt: skip
#: The row log's index inside a snapshot (its parts sit beside it, each with its own checksum).
ROW_LOG_INDEX = "rowlog/index.json"
#: The observed tables' index (their buckets and label logs sit beside it, with checksums).
TABLES_INDEX = "tables/index.json"
#: Optional files a snapshot may carry, checked like the data files when its manifest lists them.
OPTIONAL_FILES = (ROW_LOG_INDEX, TABLES_INDEX)


# ---------------------------------------------------------------------------- save
def save_monitor(monitor: Monitor, path: str | os.PathLike[str]) -> Path:
    """Write ``monitor`` to the folder ``path`` (replacing an earlier snapshot there).

    Returns
    -------
    Path
        The snapshot folder.

    Raises
    ------
    SnapshotError
        If a calibrator holds state that cannot be saved without pickle (nothing is written),
        or ``path`` is an existing folder that is not a calwatch snapshot.
    """
    target = Path(path)
    if target.exists() and not _is_replaceable(target):
        msg = f"path {str(target)!r} exists and is not a calwatch snapshot: refusing to overwrite it"
        raise SnapshotError(msg)
    task = getattr(monitor, "task", "classification")
    encoder = StateEncoder()
    state = {
        "task": task,
        "monitor": encoder.encode({k: v for k, v in vars(monitor).items() if k not in _TRANSIENT}, "monitor"),
        "stream": _stream_counters(monitor._stream),
    }
    batches = _batches_frame(monitor._stream)
    rows, row_columns = encode_rows(monitor._stream.window_batches(), task)
    state["row_columns"] = row_columns
    row_log: RowLog | None = monitor.__dict__.get("_row_log")
    state["row_log"] = row_log is not None
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        (staging / "state.json").write_text(json.dumps(state, allow_nan=False), encoding="utf-8")
        _arrays_frame(encoder.arrays).write_parquet(staging / "arrays.parquet")
        batches.write_parquet(staging / "batches.parquet")
        rows.write_parquet(staging / "rows.parquet")
        files = list(DATA_FILES)
        if row_log is not None:
            _write_row_log(row_log, staging / "rowlog")
            files.append(ROW_LOG_INDEX)
        tables = monitor.__dict__.get("_tables")
        if tables is not None and tables.sources:
            save_registry(tables, staging / "tables")
            files.append(TABLES_INDEX)
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "calwatch_version": _version(),
            "saved_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "name": monitor.name,
            "task": task,
            "model": monitor.model_description,
            "status": monitor.status(),
            "files": {name: _file_facts(staging / name) for name in files},
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        _sync_folder(staging)
        _swap_into_place(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _write_row_log(row_log: RowLog, folder: Path) -> None:
    """The row log's parts (hard links: parts never change) and its index, into a snapshot."""
    row_log.flush()  # rows that left the window but wait in memory go to a part first
    folder.mkdir()
    for file in row_log.files():
        try:
            os.link(file, folder / file.name)
        except OSError:
            shutil.copyfile(file, folder / file.name)
    (folder / "index.json").write_text(json.dumps(row_log.describe()), encoding="utf-8")


def _is_replaceable(target: Path) -> bool:
    return target.is_dir() and ((target / MANIFEST).is_file() or not any(target.iterdir()))


def _swap_into_place(staging: Path, target: Path) -> None:
    if not target.exists():
        staging.rename(target)
        return
    retired = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
    target.rename(retired)
    try:
        staging.rename(target)
    except BaseException:
        retired.rename(target)
        raise
    shutil.rmtree(retired, ignore_errors=True)


def _sync_folder(folder: Path) -> None:
    for file in folder.iterdir():
        if file.is_dir():
            _sync_folder(file)
            continue
        with open(file, "rb") as handle:
            os.fsync(handle.fileno())


def _file_facts(file: Path) -> dict[str, Any]:
    return {"bytes": file.stat().st_size, "sha256": _sha256(file)}


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _version() -> str:
    from calwatch import __version__

    return __version__


def _stream_counters(stream: StreamState) -> dict[str, int]:
    return {
        "window": stream.window,
        "rows_seen": stream.rows_seen,
        "rows_labelled": stream.rows_labelled,
        "labels_unmatched": stream.labels_unmatched,
        "labels_outside_classes": stream.labels_outside_classes,
        "rows_expired": stream.rows_expired,
    }


#: Columns of ``batches.parquet``: the batch's own, then each kind's statistics
#: (``SNAPSHOT_COLUMNS`` of its statistics type, in :data:`calwatch.kinds.KINDS` order).
_BASE_BATCH_SCHEMA: dict[str, Any] = {
    "batch": pl.Int64, "name": pl.String, "observed_at": pl.Datetime("us", "UTC"), "n_rows": pl.Int64,
    "calibrator": pl.String, "kind": pl.String,
}  # fmt: skip


def _batch_schema() -> dict[str, Any]:
    schema = dict(_BASE_BATCH_SCHEMA)
    stats_types: list[Any] = [*(kind.stats_type for kind in KINDS), RegressionBatchStats]
    for stats_type in stats_types:
        for name, dtype in stats_type.SNAPSHOT_COLUMNS.items():
            schema.setdefault(name, dtype)
    return schema


def _batches_frame(stream: StreamState) -> pl.DataFrame:
    schema = _batch_schema()
    out: dict[str, list[Any]] = {name: [] for name in schema}
    for record in stream.batches:
        per_calibrator: dict[str, Any] = record.stats  # regression monitors keep RegressionBatchStats
        for key, stats in per_calibrator.items():
            values: dict[str, Any] = {
                "batch": record.index, "name": record.name, "observed_at": record.observed_at,
                "n_rows": record.n_rows, "calibrator": key,
            }  # fmt: skip
            values |= stats.to_row()  # each kind writes its own fields, and its kind
            for name in schema:
                out[name].append(values.get(name))
    return pl.DataFrame(out, schema=schema)


def _arrays_frame(arrays: dict[str, npt.NDArray[Any]]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "key": list(arrays),
            "dtype": [a.dtype.str for a in arrays.values()],
            "shape": [list(a.shape) for a in arrays.values()],
            "data": [a.tobytes() for a in arrays.values()],
        },
        schema={"key": pl.String, "dtype": pl.String, "shape": pl.List(pl.Int64), "data": pl.Binary},
    )


# ---------------------------------------------------------------------------- load
def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a snapshot folder, after checking every file's size and checksum."""
    folder = Path(path)
    if not folder.is_dir():
        msg = f"path {str(folder)!r} is not a snapshot folder (no such directory)"
        raise SnapshotError(msg)
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        msg = f"{str(folder)!r} has no {MANIFEST}: it is not a calwatch snapshot, or it is incomplete"
        raise SnapshotError(msg) from err
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        msg = f"{MANIFEST} in {str(folder)!r} is corrupted ({err})"
        raise SnapshotError(msg) from err
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        msg = f"{str(folder)!r} is not a calwatch snapshot ({MANIFEST} has no format {FORMAT!r})"
        raise SnapshotError(msg)
    if manifest.get("format_version") != FORMAT_VERSION:
        msg = (
            f"snapshot format version {manifest.get('format_version')!r} is not supported by this "
            f"calwatch (it reads version {FORMAT_VERSION})"
        )
        raise SnapshotError(msg)
    files = manifest.get("files")
    for name in DATA_FILES:
        facts = files.get(name) if isinstance(files, dict) else None
        file = folder / name
        if not isinstance(facts, dict) or not file.is_file():
            msg = f"snapshot {str(folder)!r} is incomplete: {name} is missing"
            raise SnapshotError(msg)
        if file.stat().st_size != facts.get("bytes"):
            msg = f"snapshot {str(folder)!r} is truncated or altered: {name} has the wrong size"
            raise SnapshotError(msg)
        if _sha256(file) != facts.get("sha256"):
            msg = f"snapshot {str(folder)!r} is corrupted: {name} does not match its checksum"
            raise SnapshotError(msg)
    for name in OPTIONAL_FILES:
        if not (isinstance(files, dict) and name in files):
            continue
        facts = files[name]
        file = folder / name
        if not file.is_file() or not isinstance(facts, dict) or _sha256(file) != facts.get("sha256"):
            msg = f"snapshot {str(folder)!r} is corrupted: {name} is missing or altered"
            raise SnapshotError(msg)
    return manifest


def load_monitor(
    path: str | os.PathLike[str], *, model: Any = None, embedding_layer: str | None = None
) -> Monitor:
    """Rebuild a :class:`~calwatch.monitor.monitor.Monitor` from a snapshot folder.

    Parameters
    ----------
    path : path-like
        A folder written by :func:`save_monitor`.
    model : optional
        The model to re-attach (anything :func:`calwatch.wrap` accepts), so the monitor can keep
        observing inputs ``X``; without it, it observes precomputed ``probs=``.
    embedding_layer : str, optional
        Torch models: the layer whose output is the embedding.

    Raises
    ------
    SnapshotError
        If the folder is not a complete, unaltered snapshot, names classes outside calwatch, or
        holds numbers no monitor could have written (negative or inconsistent counts, levels
        outside (0, 1), NaN thresholds): the message names the file, batch or calibrator, and field.
    """
    from calwatch.core.models import wrap
    from calwatch.monitor.monitor import Monitor
    from calwatch.monitor.regression import RegressionMonitor

    folder = Path(path)
    manifest = read_manifest(folder)
    try:
        state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
        task = state.get("task", "classification")  # snapshots from before regression had no task
        if task not in TASKS:
            msg = f"snapshot {str(folder)!r} holds a monitor of unknown task {task!r}"
            raise SnapshotError(msg)
        arrays = _read_arrays(pl.read_parquet(folder / "arrays.parquet"))
        attrs = StateDecoder(arrays).decode(state["monitor"])
        _check_monitor_attrs(attrs, task)
        check_calibrators(attrs.get("_calibrators", {}))
        stream = _read_stream(
            state["stream"],
            state["row_columns"],
            pl.read_parquet(folder / "batches.parquet"),
            pl.read_parquet(folder / "rows.parquet"),
            task=task,
            levels=attrs.get("levels"),
        )
        if task == "regression":
            _check_regression_state(attrs, state["row_columns"])
        _check_slices(attrs, stream)
        row_log = None
        if task == "classification" and state.get("row_log", True):
            has_index = ROW_LOG_INDEX in manifest["files"]
            index = json.loads((folder / ROW_LOG_INDEX).read_text(encoding="utf-8")) if has_index else None
            row_log = RowLog() if index is None else RowLog.restore(folder / "rowlog", index)
        tables = None
        if TABLES_INDEX in manifest["files"]:
            tables_index = json.loads((folder / TABLES_INDEX).read_text(encoding="utf-8"))
            tables = load_registry(folder / "tables", tables_index)
    except SnapshotError:
        raise
    except Exception as err:  # a malformed file that still matches its checksum: say so, change nothing
        msg = f"snapshot {str(folder)!r} could not be read: {type(err).__name__}: {err}"
        raise SnapshotError(msg) from err
    if task == "regression":
        if embedding_layer is not None:
            msg = "embedding_layer applies to torch classifiers; this snapshot holds a regression monitor"
            raise TypeError(msg)
        check_regressor(model)
        regression = object.__new__(RegressionMonitor)
        regression.__dict__.update(attrs)
        regression._model = model
        regression._adapter = None
        monitor: Monitor = regression
    else:
        monitor = Monitor.__new__(Monitor)
        monitor.__dict__.update(attrs)
        monitor._adapter = None if model is None else wrap(model, embedding_layer=embedding_layer)
    monitor._listeners = []
    monitor._widget = None
    monitor._stream = stream
    if row_log is not None:
        monitor.__dict__["_row_log"] = row_log
        stream.spill = row_log.spill
    if tables is not None:
        monitor.__dict__["_tables"] = tables
    _check_views(monitor, folder)
    return monitor


def _check_monitor_attrs(attrs: Any, task: str) -> None:
    """The decoded monitor has each attribute a monitor of its task has, of the right type."""
    from calwatch.core.classes import ClassEncoder
    from calwatch.kinds import find_kind
    from calwatch.monitor.monitor import Note
    from calwatch.shift.watch import ShiftWatch

    def refuse(field: str, expected: str) -> None:
        value = attrs.get(field, "<missing>") if isinstance(attrs, dict) else "<not an object>"
        msg = f"state.json: monitor.{field} must be {expected}; got {_short(value)}"
        raise SnapshotError(msg)

    if not isinstance(attrs, dict):
        refuse("(whole)", "an object of the monitor's attributes")
    checks: list[tuple[str, Any, str]] = [
        ("name", lambda v: isinstance(v, str), "a string"),
        ("_calibrators", lambda v: isinstance(v, dict) and v and all(isinstance(k, str) for k in v),
         "a non-empty dict of calibrator names"),
        ("_notes", lambda v: isinstance(v, list) and all(isinstance(n, Note) for n in v), "a list of notes"),
        ("provenance", _is_string_dict, "a dict of strings"),
        ("model_description", lambda v: isinstance(v, str), "a string"),
        ("_next_auto_id", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
         "a non-negative integer"),
        ("calibration_", lambda v: v is None or isinstance(v, dict), "None or a dict"),
        ("_shift", lambda v: v is None or isinstance(v, ShiftWatch), "None or the shift detectors"),
    ]  # fmt: skip
    if task == "regression":
        checks.append(("levels", lambda v: isinstance(v, tuple) and bool(v), "a tuple of levels"))
        checks.append(("_draws", lambda v: isinstance(v, np.random.Generator), "a random generator"))
    else:
        checks.append(
            ("_encoder", lambda v: v is None or isinstance(v, ClassEncoder), "None or the class encoder")
        )
        checks.append(("_tolerance", lambda v: isinstance(v, float) and math.isfinite(v) and v > 0,
                       "a positive number"))  # fmt: skip
    for field, ok, expected in checks:
        if field not in attrs or not ok(attrs[field]):
            refuse(field, expected)
    for key, calibrator in attrs["_calibrators"].items():
        kind = find_kind(calibrator)
        if kind is None or kind.task != task:
            msg = f"state.json: calibrator {key!r} ({type(calibrator).__name__}) is not a {task} calibrator"
            raise SnapshotError(msg)


def _check_slices(attrs: dict[str, Any], stream: StreamState) -> None:
    """The slice store (absent before slices, or None) is sound and counts every batch and window row.

    Raises
    ------
    SnapshotError
        Naming what disagrees: the store's own invariants (:meth:`SliceStore.problems`), its
        calibrators, its batches against ``batches.parquet``, the window rows' codes.
    """
    store = attrs.get("_slices")
    if store is None:
        return
    if not isinstance(store, SliceStore):
        msg = f"state.json: monitor._slices must be None or the slice counts; got {_short(store)}"
        raise SnapshotError(msg)
    problems = store.problems()
    unknown = [key for key in store.calibrators if key not in attrs["_calibrators"]]
    if unknown:
        problems.append(f"counts calibrator {unknown[0]!r}, which the monitor does not have")
    if store.n_batches != len(stream.batches):
        problems.append(f"counts {store.n_batches} batches, but batches.parquet holds {len(stream.batches)}")
    width = len(store.encoding.columns)
    for record in stream.window_batches():
        codes = None if record.rows is None else record.rows.slice_codes
        if codes is None or codes.shape[1] != width:
            problems.append(f"the rows of batch {record.index} lack their {width} slice codes")
            break
        if codes.size and np.any(codes.max(axis=0) >= [c.n_codes for c in store.encoding.columns]):
            problems.append(f"the rows of batch {record.index} hold a slice code out of range")
            break
    if problems:
        raise SnapshotError(problem_message("state.json: monitor._slices", problems))


def _check_views(monitor: Monitor, folder: Path) -> None:
    """The loaded monitor's views work: a snapshot whose parts disagree is refused, not half-loaded."""
    try:
        monitor.status()
        monitor.summary()
        monitor.class_coverage(by_batch=False)
        window = monitor.window_records()
        if window:  # the newest batch's rows (all of the window's would cost seconds on a big one)
            monitor.rows(batch=window[-1].index)
        monitor.warnings()
        monitor.notes()
    except Exception as err:  # parts that each passed their checks but do not fit together
        msg = f"snapshot {str(folder)!r} holds a monitor whose parts disagree: {type(err).__name__}: {err}"
        raise SnapshotError(msg) from err


def _is_string_dict(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(x, str) for item in value.items() for x in item)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_regression_state(attrs: dict[str, Any], mapping: dict[str, Any]) -> None:
    """A regression snapshot's levels and window columns agree with its calibrators."""
    levels = attrs.get("levels")
    if not (isinstance(levels, tuple) and levels and all(isinstance(v, float) and 0 < v < 1 for v in levels)):
        msg = f"the snapshot's regression levels are malformed: {levels!r}"
        raise SnapshotError(msg)
    saved = mapping["regression_calibrators"]
    if saved and (saved != list(attrs["_calibrators"]) or mapping["regression_fields"] != row_fields(levels)):
        msg = "rows.parquet holds other calibrators or interval levels than the monitor it belongs to"
        raise SnapshotError(msg)


def _read_arrays(frame: pl.DataFrame) -> dict[str, npt.NDArray[Any]]:
    arrays: dict[str, npt.NDArray[Any]] = {}
    for key, dtype_str, shape, data in frame.iter_rows():
        dtype = check_dtype(np.dtype(dtype_str), f"array {key!r}")
        arrays[key] = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    return arrays


def _read_stream(
    counters: dict[str, int],
    mapping: dict[str, Any],
    batches: pl.DataFrame,
    rows: pl.DataFrame,
    *,
    task: str = "classification",
    levels: Any = None,
) -> StreamState:
    stream = StreamState(int(counters["window"]))
    records: dict[int, BatchRecord] = {}
    for row in batches.iter_rows(named=True):
        record = records.get(row["batch"])
        if record is None:
            record = BatchRecord(
                index=row["batch"],
                name=row["name"],
                observed_at=row["observed_at"],
                n_rows=row["n_rows"],
                stats={},
            )
            records[row["batch"]] = record
        stats: dict[str, Any] = record.stats  # regression monitors keep RegressionBatchStats
        stats[row["calibrator"]] = _checked_stats(_stats_from_row(row), record, row["calibrator"])
    stream.batches = RecordStore(records[i] for i in sorted(records))
    if stream.batches and [r.index for r in stream.batches] != list(range(len(stream.batches))):
        msg = "batches.parquet does not hold consecutive batches 0..n-1"
        raise SnapshotError(msg)
    for record in stream.batches:
        _check_labelled_agree(record)
    for index, part in rows.group_by("batch", maintain_order=True):
        record = stream.batches[int(index[0])]
        record.rows = decode_rows(part, mapping, task)
        if task == "regression":
            record.rows.regression["levels"] = levels  # the monitor's levels score its late labels
        if len(record.rows.ids) != record.n_rows:
            msg = (
                f"rows.parquet holds {len(record.rows.ids)} rows of batch {record.index}, not {record.n_rows}"
            )
            raise SnapshotError(msg)
        if task == "regression" and int((record.rows.labels != NO_LABEL).sum()) != record.n_labelled:
            msg = f"rows.parquet and batches.parquet disagree on the labelled rows of batch {record.index}"
            raise SnapshotError(msg)
        stream._in_window.append(record)
        stream._rows_in_window += record.n_rows
        stream.id_index.update((row_id, (record.index, i)) for i, row_id in enumerate(record.rows.ids))
    for name in ("rows_seen", "rows_labelled", "labels_unmatched", "rows_expired"):
        setattr(stream, name, int(counters[name]))
    stream.labels_outside_classes = int(counters.get("labels_outside_classes", 0))  # absent before
    stream.batches.settle()  # a long stream's old batches as columns, as the live monitor keeps them
    return stream


def _checked_stats(stats: Any, record: BatchRecord, key: str) -> Any:
    """``stats`` if its invariants hold for the batch's rows (its own ``check``), else raise."""
    problems = stats.check(record.n_rows)
    if problems:
        raise SnapshotError(
            problem_message(f"batches.parquet: batch {record.index}, calibrator {key!r}", problems)
        )
    return stats


def _check_labelled_agree(record: BatchRecord) -> None:
    """Every calibrator of a batch counts the same labelled rows (labels are the batch's, not theirs)."""
    counts = {key: int(stats.n_labelled) for key, stats in record.stats.items()}
    if len(set(counts.values())) > 1:
        shown = ", ".join(f"{key!r}: {n}" for key, n in counts.items())
        msg = f"batches.parquet: batch {record.index}: calibrators disagree on n_labelled ({shown})"
        raise SnapshotError(msg)


def _stats_from_row(row: dict[str, Any]) -> BatchStats | RegressionBatchStats:
    """A row of ``batches.parquet`` as the statistics of its kind."""
    if row["kind"] == "regression":
        return _regression_stats_from_row(row)
    try:
        kind = kind_named(row["kind"])
    except KeyError:
        msg = f"batches.parquet has a row of unknown kind {row['kind']!r}"
        raise SnapshotError(msg) from None
    restored: BatchStats = kind.from_row(row)
    return restored


def _regression_stats_from_row(row: dict[str, Any]) -> RegressionBatchStats:
    levels = tuple(float(v) for v in row["levels"])
    stats = RegressionBatchStats(
        levels=levels,
        n_rows=row["n_rows"],
        width_sum=np.asarray(row["width_sum"], dtype=np.float64),
        n_labelled=row["n_labelled"],
        covered=np.asarray(row["covered"], dtype=np.int64),
        pit_counts=np.asarray(row["pit_counts"], dtype=np.int64),
        crps_sum=float(row["crps_sum"]),
    )
    if (
        not levels
        or stats.width_sum.shape != (len(levels),)
        or stats.covered.shape not in ((0,), (len(levels),))
        or stats.pit_counts.shape != (PIT_BINS,)
        or not 0 <= stats.n_labelled <= stats.n_rows
        or int(stats.pit_counts.sum()) != stats.n_labelled
    ):
        msg = f"batches.parquet holds malformed regression statistics for batch {row['batch']}"
        raise SnapshotError(msg)
    return stats
