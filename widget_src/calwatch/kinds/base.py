"""The calibrator-kind protocol: what the monitor, the store and the views ask of a kind of calibrator.

A *kind* (prediction sets, Venn-ADMIT admission, label-free risk, selective keep/abstain,
adaptive sets) says in one module:

* which calibrators it handles (:meth:`CalibratorKind.claims`) and how one is fitted;
* how a fitted calibrator is applied to a batch's model outputs: typed per-row results
  (:class:`RowResults`), kept in the window's raw rows;
* its per-batch statistics type (:class:`BatchStats`): a monoid, so the statistics of a batch
  are the merge of the statistics of any split of its rows, labels included;
* how labels update those statistics: the labelled rows' contribution is itself a statistic
  (:meth:`CalibratorKind.labelled`), merged in (and merged in negated for a relabel);
* the summary columns and dashboard panels it contributes, and its ``rows()`` columns;
* how its per-row results are written to a table of rows and read back (:attr:`~CalibratorKind.rows_field`,
  :meth:`~CalibratorKind.write_rows`, :meth:`~CalibratorKind.read_rows`): the one codec of
  :mod:`calwatch.stream.row_codec`, behind snapshots' ``rows.parquet`` and the row log.

The monitor loops over its calibrators and asks each one's kind; it never branches on kinds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.core.models import ModelOutputs
from calwatch.stream.records import BatchRecord, BatchRows, BatchStats
from calwatch.stream.row_codec import nested_arrays, nested_series

IntArray = npt.NDArray[np.intp]


class RowResults(Protocol):
    """Per-row results of one calibrator on one batch: arrays aligned with the batch's rows."""

    def take(self, rows: IntArray) -> Self:
        """The results of the given rows only (a part of the batch)."""
        ...


R = TypeVar("R", bound=RowResults)
S = TypeVar("S", bound=BatchStats)


class CalibratorKind(ABC, Generic[R, S]):
    """One kind of calibrator, as the monitor, the store and the views see it.

    Subclasses set the class attributes and implement the abstract methods; one instance of
    each lives in :data:`calwatch.kinds.KINDS`.
    """

    #: The ``kind`` of its statistics in a snapshot's ``batches.parquet``.
    name: ClassVar[str]
    #: The monitors that take its calibrators: ``"classification"`` or ``"regression"``.
    task: ClassVar[str] = "classification"
    #: The ``kind`` column of :meth:`Monitor.summary <calwatch.monitor.monitor.Monitor.summary>`.
    summary_kind: ClassVar[str]
    #: Its statistics type (restored from ``batches.parquet`` by ``from_row``).
    stats_type: ClassVar[type[Any]]
    #: Summary columns it fills, with their dtypes (null for calibrators of other kinds).
    summary_columns: ClassVar[Mapping[str, Any]]
    #: Dashboard panels (chart kinds of :mod:`calwatch.views.charts`) it contributes.
    panels: ClassVar[tuple[str, ...]] = ()
    #: What it needs of ``calibrate(reference=...)``: nothing, the embeddings, or the whole set.
    reference: ClassVar[str | None] = None
    #: Whether it predicts sets (its coverage feeds the coverage-drop detectors and ``what_if``).
    has_sets: ClassVar[bool] = False
    #: Whether its calibrators can be re-tuned on the window without labels (``Monitor.retune``).
    retunable: ClassVar[bool] = False
    #: Whether its calibrators change as labels arrive (:meth:`after_labels`; ACI moves its level).
    learns_from_labels: ClassVar[bool] = False
    #: Chart datasets of its panels built from batch statistics: name -> (schema of a row without
    #: ``batch``, the columns that with ``batch`` identify a row). A ``target`` column is filled
    #: with the calibrator's promise.
    record_datasets: ClassVar[Mapping[str, tuple[Mapping[str, Any], tuple[str, ...]]]] = {}
    #: Chart datasets of its panels built from the window's raw rows: name -> schema of a row
    #: (each row has a unique ``key``).
    window_datasets: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    #: The field of :class:`~calwatch.stream.records.BatchRows` its :meth:`keep` fills, whose
    #: columns it writes (:meth:`write_rows`). Kinds that share a field (plain sets and ACI) share
    #: its writer: the first kind of each field in :data:`calwatch.kinds.KINDS` writes it, for every
    #: calibrator whose results are kept there. ``extra`` (the default) is any kind's own.
    rows_field: ClassVar[str] = "extra"

    @abstractmethod
    def claims(self, calibrator: Any) -> bool:
        """Whether ``calibrator`` is of this kind."""

    def fit(
        self,
        key: str,
        calibrator: Any,
        outputs: ModelOutputs,
        y: IntArray,
        *,
        categories: Any,
        reference: Any,
    ) -> None:
        """Fit ``calibrator`` (in place) on labelled calibration outputs.

        The default fits on the probabilities (or logits, for ``input_kind == "logits"``) and
        the class indices, passing Mondrian categories to ``mondrian="category"`` calibrators.
        """
        inputs, kwargs = calibrator_inputs(calibrator, outputs, categories)
        calibrator.fit(inputs, y, **kwargs)

    @abstractmethod
    def apply(self, key: str, calibrator: Any, outputs: Any, categories: Any) -> R:
        """The fitted calibrator's per-row results on a batch (raises naming ``key`` on bad output).

        ``outputs`` is the batch's :class:`~calwatch.core.models.ModelOutputs` for classification
        kinds, a :class:`~calwatch.kinds.regression.RegressionOutputs` for regression ones.
        """

    @abstractmethod
    def observed(self, results: R, n_classes: int) -> S:
        """Statistics of freshly observed rows (no labels yet)."""

    @abstractmethod
    def labelled(self, results: R, probs: Any, labels: Any, sign: int = 1) -> S:
        """What labelling these rows adds to their batch's statistics (``sign=-1``: takes away).

        ``results`` and ``probs`` are those of the labelled rows only (``labels`` are class
        indices, or true values for regression kinds, whose ``probs`` is None); observed-only fields
        (rows, sizes, estimated sums) are zero, so ``observed(r).merge(labelled(r, p, y))`` is
        the statistics of the rows once labelled.
        """

    @abstractmethod
    def keep(self, rows: BatchRows, key: str, results: R) -> None:
        """Store the per-row results in the window's raw rows of the batch."""

    @abstractmethod
    def results_of(self, rows: BatchRows, key: str, calibrator: Any) -> R:
        """The per-row results kept in the window's raw rows of a batch."""

    def write_rows(self, rows: Sequence[BatchRows]) -> tuple[dict[str, pl.Series], dict[str, Any]]:
        """Columns of :attr:`rows_field` for the rows of these batches, and the mapping that reads them.

        The mapping is JSON-able; it is saved beside the columns and handed to :meth:`read_rows`.
        A kind writes its mapping entries for no batches too, so an empty window's are its task's.
        The default writes ``rows.extra`` generically: ``extra_<i>_<field>`` for the ``i``-th
        calibrator (``extra_calibrators``) and each of its fields (``extra_fields``).
        """
        names = {key: list(fields) for key, fields in rows[0].extra.items()} if rows else {}
        if not names:  # snapshots without such kinds never carry the keys
            return {}, {}
        return nested_series("extra", names, [r.extra for r in rows]), {
            "extra_calibrators": list(names), "extra_fields": names,
        }  # fmt: skip

    def read_rows(self, part: pl.DataFrame, mapping: Mapping[str, Any], rows: BatchRows) -> None:
        """Fill :attr:`rows_field` of one batch's ``rows`` from its ``part`` of the columns (copies).

        ``mapping`` is what :meth:`write_rows` returned, or that of an older snapshot.
        """
        names = {key: mapping["extra_fields"][key] for key in mapping.get("extra_calibrators", [])}
        rows.extra = nested_arrays(part, "extra", names)

    @abstractmethod
    def summary_row(self, stats: S, n_rows: int) -> dict[str, Any]:
        """Its summary columns for one batch (or pooled batches) of ``n_rows`` rows."""

    @abstractmethod
    def row_columns(
        self, key: str, results: R, labels: IntArray, classes: npt.NDArray[Any]
    ) -> dict[str, Any]:
        """Its ``rows()`` columns for one batch (``labels`` is ``-1`` where a row has none)."""

    def record_rows(self, dataset: str, key: str, stats: S, classes: Sequence[str]) -> list[dict[str, Any]]:
        """Rows of one of its :attr:`record_datasets` for one batch (or bucket) and calibrator."""
        return []

    def window_rows(
        self, dataset: str, key: str, calibrator: Any, windows: Sequence[BatchRows]
    ) -> list[dict[str, Any]]:
        """Rows of one of its :attr:`window_datasets` for one calibrator, from the window's rows."""
        return []

    def covered(self, results: R, labels: IntArray) -> npt.NDArray[np.bool_] | None:
        """Whether each labelled row's set holds its label (None for kinds without sets)."""
        return None

    def set_sizes(self, results: R) -> npt.NDArray[np.int64] | None:
        """Each row's set size (None for kinds without sets); slices sum them per cell."""
        return None

    def levels(self, calibrator: Any) -> Any:
        """The calibrator's sets at any level (``ConformalLevels``), when it has them, for ``what_if``."""
        return None

    def retune(
        self, calibrator: Any, coverage: float, key: str, records: Sequence[BatchRecord]
    ) -> tuple[Any, float]:
        """A copy of the calibrator re-tuned on the window's rows, and its new threshold.

        Only for :attr:`retunable` kinds, which also update the window's per-row results and the
        records' statistics in place.
        """
        msg = f"calibrator {key!r} ({self.name}) cannot be re-tuned"
        raise TypeError(msg)

    def after_labels(self, calibrator: Any, results: R, labels: IntArray) -> None:
        """React to newly labelled rows (adaptive calibrators move their level); default: nothing."""

    def after_relabels(self, calibrator: Any, results: R, old: IntArray, new: IntArray) -> None:
        """React to labelled rows whose label was replaced (``old`` → ``new``); default: nothing."""

    def calibrator_columns(self, calibrator: Any) -> dict[str, Any]:
        """Summary columns that describe the calibrator, the same in each of its rows; default: none.

        Listed in :attr:`summary_columns` with the batch columns; the risk kind states here what
        its estimate promises.
        """
        return {}

    def calibrated_columns(self, calibrator: Any, stats: S, n_rows: int) -> dict[str, Any]:
        """Summary columns of one batch that need the calibrator as well as the counts; default: none.

        Listed in :attr:`summary_columns`; the risk kind gives here the guarded estimate's band,
        whose width depends on the batch's size and the calibrator's held-out statistics.
        """
        return {}

    def target(self, calibrator: Any) -> float | None:
        """The coverage the calibrator promises (``1 − ε`` or ``1 − α``), None when it promises none."""
        level = getattr(calibrator, "epsilon", None)
        if level is None:
            level = getattr(calibrator, "alpha", None)
        return None if level is None else 1.0 - float(level)

    def from_row(self, row: Mapping[str, Any]) -> S:
        """Statistics restored from one row of ``batches.parquet``."""
        restored: S = self.stats_type.from_row(row)
        return restored


def calibrator_inputs(calibrator: Any, outputs: ModelOutputs, categories: Any) -> tuple[Any, dict[str, Any]]:
    """The array a calibrator reads (probabilities, or logits) and its keyword arguments.

    ``categories`` is what the rows' groups are for this calibrator: Mondrian categories for a
    ``mondrian="category"`` calibrator, a ``(m, G)`` membership matrix for one that
    ``takes_groups``; the monitor derives both from the rows' slice codes for a calibrator with
    ``groups_from`` (:mod:`calwatch.stream.slice_groups`).

    A calibrator whose randomised draws are keyed by row id (``draws_by_row_id``) gets the
    rows' ids, so every path that scores a row (the monitor, a table's chunks, Spark or Dask
    partitions, a late label's recount) draws the same ``u`` for it.
    """
    kwargs: dict[str, Any] = {}
    if getattr(calibrator, "mondrian", None) == "category":
        kwargs["categories"] = categories
    elif getattr(calibrator, "takes_groups", False):
        kwargs["groups"] = categories  # a family of groups (GroupConditionalConformal): (m, G) booleans
    if outputs.ids is not None and getattr(calibrator, "draws_by_row_id", False):
        kwargs["ids"] = outputs.ids
    if getattr(calibrator, "input_kind", "probs") == "logits":
        return outputs.logits_or_log_probs(), kwargs
    return outputs.probs, kwargs


def int_array(values: Any) -> npt.NDArray[np.int64]:
    """``values`` as an int64 array (a list read from parquet, or an array)."""
    return np.asarray(values, dtype=np.int64)


def null_where(values: pl.Series, missing: npt.NDArray[np.bool_]) -> pl.Series:
    """``values`` with null where ``missing`` (e.g. a row's coverage before its label came)."""
    nulls = pl.repeat(None, len(values), dtype=values.dtype, eager=True)
    return values.zip_with(pl.Series(~missing), nulls)
