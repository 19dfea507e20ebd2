"""The row log: what a late label needs of every row that left the window, on disk.

A monitor keeps raw rows only for its window (100,000 rows by default). A label whose row has
left it used to be counted as unmatched and dropped; a team whose labels come a day after 10⁶
predictions lost every one. Now each batch that leaves the window is written, rows and all
(ids, probabilities, each calibrator's per-row results, labels so far), as one parquet part of a
:class:`RowLog`, in the layout of a snapshot's ``rows.parquet`` (:mod:`calwatch.stream.row_codec`);
a late label finds its row there and updates its batch's statistics exactly as it would have in
the window. Memory stays bounded by the window; disk grows by the rows' size
(for ``K`` classes and ``c`` set calibrators about ``8K + c·⌈K/8⌉ + 16`` bytes a row before
parquet's compression).

Parts never change once written. Labels given to logged rows are kept beside them in a
:class:`LabelLog` (parquet parts keyed by (id, batch)), so a relabel takes the row's previous
label out of the counts. Both logs are staged while a call computes and committed only when the
monitor commits, so they always agree with its statistics.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.core.codec import SnapshotError
from calwatch.core.heap import release_free_memory
from calwatch.core.scratch import ScratchFolder
from calwatch.stream.records import NO_LABEL, BatchRecord, BatchRows
from calwatch.stream.row_codec import array_of, decode_ids, decode_rows, encode_ids, encode_rows

#: Column names of the label logs (prefixed so they never clash with a table's own columns).
ID, BUCKET, LABEL, SEQ = "__cw_id", "__cw_bucket", "__cw_label", "__cw_seq"
BATCH, ROW = "__cw_batch", "__cw_row"
#: Rows per row group of a part: a late label reads the row groups of its rows' batches only
#: (a 100,000-row part at K = 10: ~15 ms for 1,000 labels instead of ~50 ms for the whole part).
PART_ROW_GROUP_ROWS = 4096
#: Per-calibrator fields of :class:`~calwatch.stream.records.BatchRows` in parts of the first
#: layout (:func:`_generic_rows`): key -> array, and key -> name -> array.
_KEYED = ("packed_sets", "risks")
_NESTED = ("admit", "selective", "extra")
_ANY_BUCKET: Any = object()  # previous(): every bucket


class LabelLog:
    """Labels applied to rows kept on disk, keyed by (id, bucket): the previous label, for relabels.

    Each labelling call stages its ``(ID, BUCKET, LABEL)`` parts while it computes and commits
    them once the monitor has taken its statistics (or discards them if it failed).
    """

    def __init__(self, folder: Path | None = None) -> None:
        self._scratch: ScratchFolder | None = None  # a folder of its own, when none is given
        if folder is None:
            self._scratch = ScratchFolder("calwatch-labels-")
            folder = self._scratch.path
        self.folder = folder
        self.parts: list[Path] = []
        self._staged: list[Path] = []
        # The buckets each part holds (read once per part, or known when it was staged): a row's
        # current label reads only the parts of its bucket, however long the log has grown.
        self._buckets: dict[Path, frozenset[Any]] = {}

    def previous(
        self, ids: pl.LazyFrame, *, parts: Sequence[Path] | None = None, bucket: Any = _ANY_BUCKET
    ) -> pl.LazyFrame | None:
        """``(ID, BUCKET, LABEL)``: the last label of each logged row whose id is in ``ids``'s ``ID``.

        ``parts`` (default: all of :attr:`parts`) are the label parts searched, a later part
        winning; with ``bucket``, only that bucket's rows are looked at and only the parts holding
        it are read. Parts never change once committed, so this may run without the monitor's
        lock on a slice of :attr:`parts` taken under it. None while no part is searched.
        """
        files = list(self.parts if parts is None else parts)
        if bucket is not _ANY_BUCKET:
            files = [part for part in files if bucket in self.buckets_of(part)]
        if not files:
            return None
        log = pl.scan_parquet([str(part) for part in files])
        if bucket is not _ANY_BUCKET:
            log = log.filter(pl.col(BUCKET) == bucket)
        known = log.join(ids.select(ID), on=ID, how="semi")
        return known.group_by([ID, BUCKET]).agg(pl.col(LABEL).sort_by(SEQ).last())

    def buckets_of(self, part: Path) -> frozenset[Any]:
        """The buckets a committed part holds (read from the file the first time it is asked)."""
        known = self._buckets.get(part)
        if known is None:
            held = pl.scan_parquet(part).select(pl.col(BUCKET).unique()).collect()
            known = frozenset(held[BUCKET].to_list())
            self._buckets[part] = known
        return known

    def stage(self, rows: pl.DataFrame) -> None:
        """Write labelled rows ``(ID, BUCKET, LABEL)`` as a staged part (in the log after :meth:`commit`)."""
        if rows.height == 0:
            return
        staged = self.folder / f".staged-{uuid.uuid4().hex[:8]}.parquet"
        seq = pl.lit(len(self.parts), pl.Int64).alias(SEQ)
        rows.select(ID, BUCKET, LABEL).with_columns(seq).write_parquet(staged)
        self._staged.append(staged)
        self._buckets[staged] = frozenset(rows[BUCKET].unique().to_list())

    def commit(self) -> None:
        """Make the staged parts part of the log (one labelling call, one sequence number)."""
        for staged in self._staged:
            part = self.folder / f"labels-{len(self.parts):06d}-{staged.stem.rsplit('-', 1)[-1]}.parquet"
            staged.replace(part)
            self._buckets[part] = self._buckets.pop(staged)
            self.parts.append(part)
        self._staged = []

    def discard(self) -> None:
        """Drop the staged parts (their call failed)."""
        for staged in self._staged:
            staged.unlink(missing_ok=True)
            self._buckets.pop(staged, None)
        self._staged = []


@dataclass(frozen=True)
class LoggedRows:
    """Rows of one batch found in the row log: their raw rows (current labels) and their ids."""

    batch: int
    rows: BatchRows


@dataclass(frozen=True)
class Prefetched:
    """What :meth:`RowLog.prefetch` read without the monitor's lock, for :meth:`RowLog.find` under it.

    Attributes
    ----------
    log : RowLog
        The log it read (a monitor that loaded a snapshot since has another: then it is unused).
    parts_seen, label_parts_seen : int
        How many row parts and label parts it read; later ones are read under the lock.
    searched : frozenset
        The ids it looked for.
    hits : dict of int to BatchRows
        The rows it found, per batch, with their labels as of ``label_parts_seen``.
    """

    log: RowLog
    parts_seen: int
    label_parts_seen: int
    searched: frozenset[Hashable]
    hits: dict[int, BatchRows]


def _listed(part: dict[str, Any]) -> dict[str, Any]:
    """A part's index entry as JSON takes it: its batches (a column in memory) as a list."""
    batches = part.get("batches")
    return part | {"batches": batches.tolist()} if isinstance(batches, np.ndarray) else part


class RowLog:
    """Every row that left a monitor's window, batch by batch, as immutable parquet parts.

    Parameters
    ----------
    folder : path, optional
        Where the parts go (default: a new temporary folder, removed with the log).
    part_rows : int
        Rows gathered in memory before they are written as one part (few, large parts keep a
        late label's search to a few files).
    """

    def __init__(self, folder: str | os.PathLike[str] | None = None, *, part_rows: int = 100_000) -> None:
        # A folder of its own goes with the log, or with a later process if this one is killed.
        self._scratch: ScratchFolder | None = None
        if folder is None:
            self._scratch = ScratchFolder("calwatch-rowlog-")
            folder = self._scratch.path
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.parts: list[dict[str, Any]] = []  # {"file", "batches" (an array), "rows", "mapping", "sha256"}
        self.labels = LabelLog(self.folder)
        self.rows_logged = 0
        self.rows_unlabelled = 0  # logged rows still waiting for a label (counted in rows_pending)
        self.labels_applied = 0
        self.part_rows = int(part_rows)
        self._pending: list[tuple[int, list[Hashable], npt.NDArray[np.intp]]] = []
        self.buffer: list[BatchRecord] = []  # left the window, not written yet (rows kept)
        self._buffered_rows = 0

    # ------------------------------------------------------------------ writing
    def spill(self, records: Sequence[BatchRecord]) -> None:
        """Take the rows of batches leaving the window; written out once ``part_rows`` are gathered.

        The records' rows must still be set; the log keeps its own reference to them.
        """
        for record in records:
            if record.rows is not None:
                self.rows_unlabelled += record.n_rows - record.n_labelled
                self.buffer.append(BatchRecord(record.index, record.name, record.observed_at, record.n_rows,
                                               {}, record.rows))  # fmt: skip
                self._buffered_rows += record.n_rows
        if self._buffered_rows >= self.part_rows:
            try:
                self.flush()
            except BaseException:  # a full disk: these rows are given up (their labels go unmatched)
                self.rows_unlabelled -= sum(_unlabelled(r.rows) for r in self.buffer)
                self.buffer, self._buffered_rows = [], 0
                raise
            release_free_memory()  # the part's rows are freed: give the heap's free pages back

    def flush(self) -> None:
        """Write the gathered rows as one part."""
        if not self.buffer:
            return
        present = self.buffer
        frame, mapping = encode_rows(present)
        path = self.folder / f"rows-{len(self.parts):06d}-{uuid.uuid4().hex[:8]}.parquet"
        frame.write_parquet(path, row_group_size=PART_ROW_GROUP_ROWS)
        self.parts.append({
            "file": path.name, "batches": np.fromiter((r.index for r in present), np.int64, len(present)),
            "rows": frame.height,
            "mapping": mapping, "sha256": file_sha256(path),
        })  # fmt: skip
        self.rows_logged += frame.height
        self.buffer, self._buffered_rows = [], 0

    # ------------------------------------------------------------------ reading
    def find(self, ids: list[Hashable], prefetched: Prefetched | None = None) -> list[LoggedRows]:
        """The logged rows of these ids, per batch (a row's labels are its current ones).

        An id logged in several batches (ids may be reused once their row left the window) is
        found in its latest batch, as :meth:`Monitor.label` finds the newest row of an id.

        ``prefetched`` (from :meth:`prefetch`, read without the monitor's lock) answers for the
        parts and labels it saw; only what was logged since is read here. Runs under the lock.
        """
        if not (self.parts or self.buffer) or not ids:
            return []
        found: list[LoggedRows] = []
        wanted = set(ids)
        for record in reversed(self.buffer):  # newest first
            assert record.rows is not None
            hit = np.flatnonzero([i in wanted for i in record.rows.ids])
            if hit.shape[0]:
                found.append(LoggedRows(record.index, take_rows(record.rows, hit)))
                wanted.difference_update(record.rows.ids[i] for i in hit)
        use = prefetched if prefetched is not None and prefetched.log is self else None
        seen = 0 if use is None else use.parts_seen
        hits = self._search(self.parts[seen:], wanted)  # parts written since the prefetch: newer
        labels_seen = dict.fromkeys(hits, 0)
        if use is not None and wanted <= use.searched:
            # Every id still wanted was looked for in the older parts, without the lock.
            for batch, rows in use.hits.items():
                keep = np.flatnonzero([i in wanted for i in rows.ids])
                if keep.shape[0]:
                    hits[batch], labels_seen[batch] = take_rows(rows, keep), use.label_parts_seen
        elif seen:
            older = self._search(self.parts[:seen], wanted)
            hits.update(older)
            labels_seen.update(dict.fromkeys(older, 0))
        label_parts = list(self.labels.parts)
        for batch in sorted(hits):
            rows = _with_labels(self.labels, batch, hits[batch], label_parts[labels_seen[batch] :])
            found.append(LoggedRows(batch, rows))
        return found

    def prefetch(self, ids: list[Hashable], parts_seen: int, label_parts_seen: int) -> Prefetched:
        """Look for ids in the first ``parts_seen`` row parts, labels from the first ``label_parts_seen``.

        Safe without the monitor's lock: committed parts never change and the lists only grow,
        so reading a prefix of each is reading one moment. A label call does this slow part (the
        parquet reads) before it takes the lock, and :meth:`find` under the lock reads only what
        was logged since; producers and readers do not wait on the disk.
        """
        hits = self._search(self.parts[:parts_seen], set(ids))
        label_parts = self.labels.parts[:label_parts_seen]
        for batch, rows in hits.items():
            hits[batch] = _with_labels(self.labels, batch, rows, label_parts)
        return Prefetched(self, parts_seen, label_parts_seen, frozenset(ids), hits)

    def _search(self, parts: Sequence[dict[str, Any]], wanted: set[Hashable]) -> dict[int, BatchRows]:
        """The rows of ``wanted`` ids in these parts, per batch (found ids leave ``wanted``).

        Newest parts first, a few more each round, until every id is found: a row's newest batch
        wins, so older parts can only hold rows of ids already found. Labels come for recent rows,
        so a label call reads the newest part or two, not the whole log (one that names an
        unknown id still reads every part). Labels are those the rows had when written.
        """
        hits_by_batch: dict[int, BatchRows] = {}
        end, take = len(parts), 1
        while end > 0 and wanted:
            chunk, end, take = parts[max(0, end - take) : end], max(0, end - take), 2 * take
            found_now: set[Hashable] = set()
            for mapping, group in _by_layout(chunk):
                needle = [i for i in wanted if _id_fits(i, mapping["id_kind"])]
                if not needle:
                    continue
                keys = encode_ids(needle)[1]
                files = [str(self.folder / p["file"]) for p in group]
                wanted_ids = pl.col("id").is_in(keys.implode())
                # Two passes: the ids and batches alone (cheap), then the whole rows of the row
                # groups in those batches' range only (parts are written in batch order, in row
                # groups of PART_ROW_GROUP_ROWS, whose batch statistics let the reader skip the rest).
                where = pl.scan_parquet(files).select("id", "batch").filter(wanted_ids).collect()
                if where.height == 0:
                    continue
                low, high = where["batch"].min(), where["batch"].max()
                span = pl.col("batch").is_between(low, high)
                rows_found = pl.scan_parquet(files).filter(span & wanted_ids).collect()
                # an id logged twice counts in its latest batch only
                rows_found = rows_found.sort("batch").unique("id", keep="last", maintain_order=True)
                for (batch,), rows in rows_found.group_by(["batch"], maintain_order=True):
                    logged = (
                        _generic_rows(rows, mapping) if "fields" in mapping else decode_rows(rows, mapping)
                    )
                    hits_by_batch[int(batch)] = logged
                    found_now.update(logged.ids)
            wanted.difference_update(found_now)
        return hits_by_batch

    def stage_labels(self, batch: int, ids: list[Hashable], labels: npt.NDArray[np.intp]) -> None:
        """Stage new labels of logged rows (they count once :meth:`commit_labels` is called)."""
        encoded = encode_ids(ids)[1]
        frame = pl.DataFrame({ID: encoded, BUCKET: pl.Series([batch] * len(ids), dtype=pl.Int64),
                              LABEL: pl.Series(np.asarray(labels, dtype=np.int64))})  # fmt: skip
        self.labels.stage(frame)
        self._pending.append((batch, ids, labels))

    def commit_labels(self, first_labels: int) -> None:
        """The staged labels are now the monitor's (rows still in memory take them too).

        ``first_labels`` of them went to rows that had none.
        """
        self.labels.commit()
        self.rows_unlabelled -= first_labels
        buffered = {r.index: r.rows for r in self.buffer}
        for batch, ids, labels in self._pending:
            rows = buffered.get(batch)
            if rows is not None:
                where = {row_id: k for k, row_id in enumerate(rows.ids)}
                rows.labels[[where[i] for i in ids]] = labels
            self.labels_applied += len(ids)
        self._pending = []

    def discard_labels(self) -> None:
        """Forget the staged labels (their call failed)."""
        self.labels.discard()
        self._pending = []

    # ------------------------------------------------------------------ snapshots
    def describe(self) -> dict[str, Any]:
        """The log's index for a snapshot: its parts (file, batches, rows, column mapping, checksum)."""
        return {
            "parts": [_listed(p) for p in self.parts], "labels": [p.name for p in self.labels.parts],
            "labels_sha256": [file_sha256(p) for p in self.labels.parts], "rows_logged": self.rows_logged,
            "labels_applied": self.labels_applied, "rows_unlabelled": self.rows_unlabelled,
        }  # fmt: skip

    def files(self) -> list[Path]:
        """Every file of the log."""
        return [self.folder / p["file"] for p in self.parts] + list(self.labels.parts)

    @classmethod
    def restore(cls, folder: Path, index: dict[str, Any]) -> RowLog:
        """A log whose parts are hard links (or copies) of a snapshot's ``rowlog/`` files.

        Raises
        ------
        SnapshotError
            If a file is missing or its checksum differs from the index.
        """
        log = cls()
        try:
            for part in index["parts"]:
                source = inside(folder, part["file"])
                check_file(source, str(part["sha256"]))
                link_or_copy(source, log.folder / source.name)
                log.parts.append(dict(part))
            for name, sha in zip(index["labels"], index["labels_sha256"], strict=True):
                source = inside(folder, name)
                check_file(source, str(sha))
                link_or_copy(source, log.folder / source.name)
                log.labels.parts.append(log.folder / source.name)
            log.rows_logged = int(index["rows_logged"])
            log.labels_applied = int(index["labels_applied"])
            log.rows_unlabelled = int(index["rows_unlabelled"])
        except (KeyError, TypeError, ValueError) as err:
            msg = f"rowlog/index.json is malformed: {err}"
            raise SnapshotError(msg) from err
        return log


def _with_labels(labels: LabelLog, batch: int, rows: BatchRows, parts: Sequence[Path]) -> BatchRows:
    """The rows with the labels these label parts gave them (in order: a later part wins)."""
    if not parts:
        return rows
    ids = encode_ids(rows.ids)[1]
    found = labels.previous(pl.DataFrame({ID: ids}).lazy(), parts=parts, bucket=batch)
    later = pl.DataFrame() if found is None else found.collect()
    if later.height:
        where = {key: k for k, key in enumerate(ids.to_list())}
        for key, label in zip(later[ID].to_list(), later[LABEL].to_list(), strict=True):
            rows.labels[where[key]] = int(label)
    return rows


def _unlabelled(rows: BatchRows | None) -> int:
    return 0 if rows is None else int((rows.labels == NO_LABEL).sum())


def take_rows(rows: BatchRows, index: npt.NDArray[np.intp]) -> BatchRows:
    """A copy of some rows of a batch (labels included, so staging a label never changes the log)."""
    return BatchRows(
        ids=[rows.ids[i] for i in index], probs=rows.probs[index], labels=rows.labels[index].copy(),
        packed_sets={k: v[index] for k, v in rows.packed_sets.items()},
        categories=None if rows.categories is None else rows.categories[index],
        risks={k: v[index] for k, v in rows.risks.items()},
        admit={k: {n: a[index] for n, a in d.items()} for k, d in rows.admit.items()},
        selective={k: {n: a[index] for n, a in d.items()} for k, d in rows.selective.items()},
        extra={k: {n: a[index] for n, a in d.items()} for k, d in rows.extra.items()},
        slice_codes=None if rows.slice_codes is None else rows.slice_codes[index],
    )  # fmt: skip


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def inside(folder: Path, name: Any) -> Path:
    """The file ``name`` names in the snapshot's ``folder``, refused unless it is a plain name in it.

    A snapshot may be sent by anyone: a name that is absolute, holds a separator or ``..``, or
    resolves (symbolic links followed) outside the folder is refused with one message that does
    not say whether such a path exists.

    Examples
    --------
    >>> inside(Path("/tmp/snap/rowlog"), "part-0.parquet").name
    'part-0.parquet'
    """
    text = str(name)
    plain = (
        bool(text) and text not in {".", ".."} and "/" not in text and "\\" not in text and "\0" not in text
    )
    if plain:
        path = folder / text
        root = folder.resolve()
        try:
            if path.resolve().is_relative_to(root):
                return path
        except (OSError, RuntimeError):  # a link loop
            pass
    msg = (
        f"the snapshot's {folder.name}/ names {text!r}, which is not a file of the snapshot: "
        "refusing to load it"
    )
    raise SnapshotError(msg)


def check_file(path: Path, sha: str) -> None:
    """Raise ``SnapshotError`` unless ``path`` is a file whose SHA-256 is ``sha``."""
    if not path.is_file():
        msg = f"the snapshot's {path.parent.name}/ lacks {path.name}"
        raise SnapshotError(msg)
    if file_sha256(path) != sha:
        msg = f"the snapshot's file {path.parent.name}/{path.name} does not match its checksum"
        raise SnapshotError(msg)


def link_or_copy(source: Path, target: Path) -> None:
    """A hard link to ``source`` at ``target`` (parts never change), or a copy across file systems."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


# ---------------------------------------------------------------------------- parts
def _id_fits(row_id: Hashable, kind: str) -> bool:
    """Whether a part whose ids were written as ``kind`` (:func:`encode_ids`) can hold ``row_id``."""
    if kind == "int":
        return type(row_id) is int
    if kind == "str":
        return type(row_id) is str
    return True


def _by_layout(parts: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Parts grouped by their column mapping (parts of one layout are scanned together)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for part in parts:
        groups.setdefault(json.dumps(part["mapping"], sort_keys=True), []).append(part)
    return [(group[0]["mapping"], group) for group in groups.values()]


def _generic_rows(frame: pl.DataFrame, mapping: dict[str, Any]) -> BatchRows:
    """One batch's rows from a part of the row log's first layout, read as they were written.

    Parts are written in the snapshot's layout (:mod:`calwatch.stream.row_codec`) now; those
    written before named each per-calibrator field ``<field>/<j>`` (``mapping["fields"][j]`` is
    ``[field, key]`` or ``[field, key, name]``; packed sets as fixed-size arrays of bytes). A
    snapshot may still hold such parts, and late labels find their rows in them.
    """
    rows = BatchRows(
        ids=decode_ids(frame["id"].to_list(), str(mapping["id_kind"])),
        probs=np.asarray(frame["probs"].to_numpy(), dtype=np.float64),
        packed_sets={},
        labels=array_of(frame, "label").astype(np.intp),
        categories=frame["category"].to_numpy() if "category" in frame.columns else None,
    )
    for j, spec in enumerate(mapping["fields"]):
        values = array_of(frame, f"{spec[0]}/{j}")
        if spec[0] in _KEYED:
            getattr(rows, spec[0])[spec[1]] = values
        else:
            getattr(rows, spec[0]).setdefault(spec[1], {})[spec[2]] = values
    if rows.labels.size and rows.labels.min() < NO_LABEL:
        msg = "the row log holds labels outside the classes"
        raise SnapshotError(msg)
    return rows


__all__ = [
    "BATCH",
    "BUCKET",
    "ID",
    "LABEL",
    "ROW",
    "SEQ",
    "LabelLog",
    "LoggedRows",
    "Prefetched",
    "RowLog",
    "check_file",
    "file_sha256",
    "link_or_copy",
    "take_rows",
]
