"""The streaming :class:`Monitor`: calibrators + stream state + delayed labels + live views."""

from __future__ import annotations

import copy
import getpass
import os
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.classes import ClassEncoder, as_1d_array
from calwatch.engine._validation import PROBABILITY_SUM_TOLERANCE, check_alpha
from calwatch.engine.conformal.classifier import SplitConformalClassifier
from calwatch.engine.errors import NotFittedError
from calwatch.engine.metrics.intervals import clopper_pearson
from calwatch.guard import Guard, guard_of, guarded
from calwatch.ids import as_id_list, uniform_scalar_ids
from calwatch.kinds import KINDS, kind_of
from calwatch.kinds.admit import admitted_accuracy
from calwatch.models import ModelAdapter, ModelOutputs, wrap
from calwatch.shift_watch import CalibrationData, Detector, ShiftWatch, default_detectors
from calwatch.stream import NO_LABEL, BatchRecord, BatchRows, BatchStats, StreamState

if TYPE_CHECKING:
    import altair as alt

    from calwatch.widget import MonitorWidget

IntArray = npt.NDArray[np.intp]
DEFAULT_WINDOW = 100_000
#: Columns of :meth:`Monitor.summary`, in order. Kinds fill the middle ones
#: (:attr:`calwatch.kinds.base.CalibratorKind.summary_columns`); a new kind's columns that are not
#: listed here come after them, before ``in_window``.
SUMMARY_ORDER = (
    "batch", "name", "calibrator", "kind", "target", "n_rows", "n_labelled", "n_pending",
    "n_covered", "coverage", "coverage_lo", "coverage_hi", "mean_set_size", "singleton_share",
    "full_share", "estimated_error", "observed_error", "error_gap", "estimated_error_labelled",
    "alpha_level", "admitted_share", "n_admitted_labelled", "admitted_accuracy", "kept_share",
    "threshold", "n_kept_labelled", "kept_accuracy", "accuracy", "in_window", "observed_at",
)  # fmt: skip
_BASE_SUMMARY: dict[str, Any] = {
    "batch": pl.Int64, "name": pl.String, "calibrator": pl.String, "kind": pl.String,
    "target": pl.Float64, "n_rows": pl.Int64, "n_labelled": pl.Int64, "in_window": pl.Boolean,
    "observed_at": pl.Datetime("us", "UTC"),
}  # fmt: skip


class SetCalibrator(Protocol):
    """What the monitor needs of a set-valued calibrator (e.g. ``SplitConformalClassifier``).

    A calibrator whose ``input_kind`` is ``"logits"`` (``PACConfidenceSets``) is fitted on and
    given logits instead of probabilities. Its target coverage is ``1 − epsilon`` when it has an
    ``epsilon``, else ``1 − alpha``.
    """

    def fit(self, P_cal: Any, y_cal: Any) -> Any:
        """Fit on calibration probabilities (or logits) and class indices."""

    def predict_sets(self, P: Any) -> npt.NDArray[np.bool_]:
        """Boolean ``(m, K)`` prediction sets."""


class RiskCalibrator(Protocol):
    """What the monitor needs of a label-free risk estimator (``kind == "risk"``)."""

    kind: str
    top_k: int

    def fit(self, P_cal: Any, y_cal: Any) -> Any:
        """Fit on calibration probabilities and class indices."""

    def row_risk(self, P: Any) -> npt.NDArray[np.float64]:
        """Estimated probability, per row, that the label is not among the top-k classes."""


Calibrator = SetCalibrator | RiskCalibrator


@dataclass(frozen=True)
class LabelReport:
    """What a :meth:`Monitor.label` call did.

    Attributes
    ----------
    matched : int
        Labels joined to rows in the window.
    unmatched : int
        Labels for ids that are unknown or whose rows left the window (counted, not applied).
    relabelled : int
        Matched rows that already had a label (the new label replaces it).
    batches : tuple of int
        The batches whose labelled metrics changed.
    """

    matched: int
    unmatched: int
    relabelled: int
    batches: tuple[int, ...]


@dataclass(frozen=True)
class Note:
    """A note a user pinned to the stream, a batch or a warning (kept in snapshots and reports)."""

    note_id: int
    text: str
    author: str
    at: str
    batch: int | None = None
    episode: int | None = None


# A listener gets the batches whose statistics changed (live views subscribe to this).
Listener = Callable[[tuple[int, ...]], None]


#: Monitor classes of other tasks, by task name. ``calwatch.regression_monitor`` registers
#: ``"regression"`` when it is imported (``import calwatch`` does), so this module never imports
#: the subclasses that build on it.
TASK_MONITORS: dict[str, type[Monitor]] = {}


class Monitor:
    """Watch whether a model's prediction sets keep their promised coverage on a stream.

    Parameters
    ----------
    model : optional
        Anything :func:`calwatch.wrap` accepts (scikit-learn classifier, torch module,
        callable). ``None``: outputs are passed directly as ``probs=``.
    calibrators : dict of str to calibrator, optional
        Named set-valued calibrators (default: APS at α = 0.1).
    classes : array-like, optional
        Class label of each probability column (default: the model's ``classes_``, else
        ``0..K-1``).
    window : int
        Raw rows kept for late labels and row inspection (default 100,000); per-batch
        statistics are kept for the whole stream.
    name : str
        Shown in the widget and reports.
    embedding_layer : str, optional
        Torch models: layer whose output is kept as the embedding.
    probability_tolerance : float
        How far a row of probabilities may sum from 1.
    shift : "default", list of detectors, or None
        Shift detectors (``calwatch.shift_watch``): ``"default"`` runs a label-free
        martingale on the model's confidence, and per set calibrator a conformity-score
        martingale and a coverage-drop test on labelled rows; their alarms become warnings
        (:meth:`warnings`, the widget's banner); when the model gives embeddings, also a
        label-free martingale on each row's distance to the calibration embeddings. ``None``
        turns them off.
    provenance : dict of str to str, optional
        Where the data and model come from (dataset, version, split...), shown in reports and
        kept in snapshots; also settable later through the ``provenance`` attribute.
    task : {"classification", "regression"}, optional
        ``"regression"`` builds a :class:`~calwatch.regression_monitor.RegressionMonitor`
        (calibrated predictive distributions). Default: inferred from the model (a regressor
        has ``predict`` but neither ``predict_proba`` nor ``decision_function``).

    Examples
    --------
    >>> import calwatch as cw
    >>> mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)})
    >>> mon.calibrate(probs=P_cal, y=y_cal)  # doctest: +SKIP
    >>> mon.observe(probs=P, ids=ids)  # doctest: +SKIP
    >>> mon.label(ids, y)  # doctest: +SKIP
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Monitor:
        """A :class:`~calwatch.regression_monitor.RegressionMonitor` for regression tasks."""
        if cls is Monitor and _is_regression(kwargs.get("task"), args[0] if args else kwargs.get("model")):
            return super().__new__(TASK_MONITORS["regression"])
        return super().__new__(cls)

    def __init__(
        self,
        model: Any = None,
        calibrators: Mapping[str, Calibrator] | None = None,
        *,
        task: str | None = None,
        classes: Any = None,
        window: int = DEFAULT_WINDOW,
        name: str = "calwatch",
        embedding_layer: str | None = None,
        probability_tolerance: float = PROBABILITY_SUM_TOLERANCE,
        shift: str | list[Detector] | None = "default",
        provenance: Mapping[str, str] | None = None,
    ) -> None:
        if task not in (None, "classification"):
            msg = f"task must be 'classification' or 'regression'; got {task!r}"
            raise ValueError(msg)
        self._adapter: ModelAdapter | None = (
            None if model is None else wrap(model, embedding_layer=embedding_layer)
        )
        if calibrators is None:
            calibrators = {"aps": SplitConformalClassifier(score="aps", alpha=0.1)}
        if not isinstance(calibrators, Mapping) or not calibrators:
            msg = "calibrators must be a non-empty dict of name -> calibrator"
            raise TypeError(msg)
        for key, calibrator in calibrators.items():
            if not isinstance(key, str) or not key:
                msg = f"calibrators keys must be non-empty strings; got {key!r}"
                raise TypeError(msg)
            predicts = any(kind.claims(calibrator) for kind in KINDS)
            if predicts and getattr(calibrator, "kind", None) == "risk":
                predicts = hasattr(calibrator, "row_risk")
            if not (hasattr(calibrator, "fit") and predicts):
                msg = (
                    f"calibrators[{key!r}] must have fit(P, y) and predict_sets(P) (or row_risk(P) "
                    f"for a risk estimator, predict_arrays(E, logits) for Venn-ADMIT); got "
                    f"{type(calibrator).__name__}"
                )
                raise TypeError(msg)
        if not (shift is None or shift == "default" or isinstance(shift, list)):
            msg = f"shift must be 'default', a list of detectors or None; got {shift!r}"
            raise ValueError(msg)
        self._init_state(calibrators, window=window, name=name, model=model, provenance=provenance)
        self._fixed_classes = None if classes is None else as_1d_array(classes, "classes")
        self._tolerance = float(probability_tolerance)
        self._shift_spec = shift

    def _init_state(
        self,
        calibrators: Mapping[str, Any],
        *,
        window: int,
        name: str,
        model: Any,
        provenance: Mapping[str, str] | None,
        without_model: str = "none (precomputed outputs)",
    ) -> None:
        """The state every monitor starts from: calibrators, an empty stream, no notes, no shift.

        Shared by :class:`Monitor` and the regression monitor; :func:`calwatch.store.load_monitor`
        restores the same attributes from a snapshot.
        """
        if int(window) != window or window < 1:
            msg = f"window must be a positive integer (rows); got {window!r}"
            raise ValueError(msg)
        self.name = str(name)
        self._calibrators: dict[str, Calibrator] = dict(calibrators)
        self._fixed_classes = None
        self._encoder: ClassEncoder | None = None
        self._stream = StreamState(int(window))
        self._listeners: list[Listener] = []
        self._widget: MonitorWidget | None = None
        self._next_auto_id = 0
        self._shift_spec = None
        self._shift: ShiftWatch | None = None
        self._notes: list[Note] = []
        self.calibration_: dict[str, Any] | None = None
        self.model_description = without_model if model is None else _describe(model)
        self.provenance: dict[str, str] = {str(k): str(v) for k, v in (provenance or {}).items()}

    def __repr__(self) -> str:
        state = "calibrated" if self.calibration_ else "not calibrated"
        return (
            f"Monitor(name={self.name!r}, calibrators={list(self._calibrators)}, {state}, "
            f"batches={len(self._stream.batches)}, rows_seen={self._stream.rows_seen})"
        )

    # ------------------------------------------------------------------ properties
    @property
    def calibrators(self) -> dict[str, Calibrator]:
        """The attached calibrators by name (a copy of the mapping)."""
        return dict(self._calibrators)

    @property
    def classes_(self) -> npt.NDArray[Any]:
        """Class label of each probability column (after :meth:`calibrate`)."""
        return self._require_encoder().classes

    @property
    def window(self) -> int:
        """Raw rows kept for late labels."""
        return self._stream.window

    @property
    def n_batches(self) -> int:
        """Batches observed so far."""
        return len(self._stream.batches)

    @property
    def batch_records(self) -> Sequence[BatchRecord]:
        """Every observed batch, oldest first: its statistics, and its raw rows while in the window.

        ``batch_records[i].index == i``. The records are the monitor's own (read them, do not
        change them); :meth:`summary` and friends are the tabular views of the same numbers.
        """
        return self._stream.batches

    @guarded
    def window_records(self) -> list[BatchRecord]:
        """The batches whose raw rows are still kept (``record.rows`` is set), oldest first."""
        return self._stream.window_batches()

    # ------------------------------------------------------------------ inputs
    def _outputs(
        self, X: Any, probs: Any, logits: Any, *, n_classes: int | None, embeddings: Any = None
    ) -> ModelOutputs:
        if X is not None and (probs is not None or logits is not None or embeddings is not None):
            msg = "pass either X (inputs for the model) or probs=/logits= (its outputs), not both"
            raise ValueError(msg)
        if X is not None:
            if self._adapter is None:
                msg = (
                    "X was given but the monitor has no model: pass probs= instead, Monitor(model), "
                    "or Monitor.load(path, model=model) for a saved monitor"
                )
                raise ValueError(msg)
            if hasattr(X, "__len__") and len(X) == 0:
                msg = "X is empty: a batch needs at least one row"
                raise ValueError(msg)
            outputs = self._adapter(X)
            if n_classes is not None and outputs.n_classes != n_classes:
                msg = (
                    f"the model outputs {outputs.n_classes} classes but the monitor was "
                    f"calibrated on {n_classes}"
                )
                raise ValueError(msg)
            return outputs
        if probs is None and logits is None:
            msg = "no data: pass X (with a model) or probs= (precomputed probabilities)"
            raise ValueError(msg)
        return ModelOutputs.from_arrays(
            probs, logits=logits, embeddings=embeddings, n_classes=n_classes, tolerance=self._tolerance
        )

    def _require_encoder(self) -> ClassEncoder:
        if self._encoder is None:
            msg = "the monitor is not calibrated yet: call calibrate(X, y) or calibrate(probs=..., y=...)"
            raise NotFittedError(msg)
        return self._encoder

    def _make_encoder(self, K: int) -> ClassEncoder:
        classes = self._fixed_classes
        if classes is None and self._adapter is not None:
            classes = self._adapter.classes
        if classes is None:
            classes = np.arange(K)
        if len(classes) != K:
            msg = f"classes has {len(classes)} entries but the model outputs {K} columns"
            raise ValueError(msg)
        return ClassEncoder(classes)

    # ------------------------------------------------------------------ calibrate
    @guarded
    def calibrate(
        self,
        X: Any = None,
        y: Any = None,
        *,
        probs: Any = None,
        logits: Any = None,
        embeddings: Any = None,
        categories: Any = None,
        reference: Any = None,
    ) -> Monitor:
        """Fit every calibrator on labelled calibration data.

        Parameters
        ----------
        X : array-like, optional
            Model inputs (needs a model); or pass ``probs=``.
        y : array-like of shape (n,)
            True labels (class labels as the model names them).
        probs, logits : array-like of shape (n, K), optional
            Precomputed model outputs instead of ``X``.
        embeddings : array-like of shape (n, d), optional
            Precomputed embeddings (Venn-ADMIT), with ``probs=`` / ``logits=``.
        categories : array-like of shape (n,), optional
            Mondrian categories for calibrators built with ``mondrian="category"``.
        reference : tuple or array, optional
            The reference (training) set of Venn-ADMIT calibrators: ``(X_ref, y_ref)`` run
            through the model (which must give embeddings: a torch model with
            ``embedding_layer``), or precomputed ``(embeddings, logits, y)``. Selective
            calibrators use only its embeddings (for their outlier features): without
            Venn-ADMIT calibrators, the embeddings array alone will do.

        Returns
        -------
        Monitor
            ``self``. If any calibrator fails to fit, nothing changes.
        """
        if y is None:
            msg = "y is required: the true labels of the calibration rows"
            raise ValueError(msg)
        outputs = self._outputs(X, probs, logits, n_classes=None, embeddings=embeddings)
        encoder = self._make_encoder(outputs.n_classes)
        y_idx = encoder.encode(y, "y", n_rows=len(outputs))
        kinds = {key: kind_of(cal) for key, cal in self._calibrators.items()}
        admit_keys = [key for key, kind in kinds.items() if kind.reference == "full"]
        uses_reference = admit_keys or any(kind.reference for kind in kinds.values())
        if admit_keys:
            train = self._reference_set(reference, encoder, admit_keys)
        elif reference is not None and uses_reference and isinstance(reference, np.ndarray):
            train = (np.asarray(reference, dtype=np.float32), None, None)  # selectors need embeddings only
        elif reference is not None and uses_reference:
            train = self._reference_set(reference, encoder, admit_keys)
        else:
            train = None
        if reference is not None and not uses_reference:
            msg = (
                "reference must be None: no calibrator uses a reference set (Venn-ADMIT and "
                "selective calibrators do)"
            )
            raise ValueError(msg)
        fitted = {}
        for key, calibrator in self._calibrators.items():
            candidate: Any = copy.deepcopy(calibrator)
            kinds[key].fit(key, candidate, outputs, y_idx, categories=categories, reference=train)
            fitted[key] = candidate
        shift = self._shift
        if self._shift_spec is not None:
            if shift is None:
                detectors: list[Detector] = (
                    default_detectors(fitted, embeddings=outputs.embeddings is not None)
                    if isinstance(self._shift_spec, str)
                    else list(self._shift_spec)
                )
                shift = ShiftWatch(detectors)
            names = [str(c) for c in encoder.classes.tolist()]
            shift.calibrate(CalibrationData(outputs.probs, y_idx, fitted, outputs.embeddings, names))
        # Commit only once every calibrator (and detector) fitted.
        self._shift = shift
        for key, candidate in fitted.items():
            self._calibrators[key] = candidate
        self._encoder = encoder
        counts = np.bincount(y_idx, minlength=len(encoder))
        self.calibration_ = {
            "n_rows": len(outputs),
            "class_counts": dict(zip(encoder.classes.tolist(), counts.tolist(), strict=True)),
            "calibrated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        if self._widget is not None:
            self._widget.refresh_layout()
        return self

    def _reference_set(self, reference: Any, encoder: ClassEncoder, keys: list[str]) -> tuple[Any, Any, Any]:
        """``(embeddings, logits, labels)`` of the reference set Venn-ADMIT calibrators need."""
        if reference is None:
            msg = (
                f"reference is required: calibrators {keys} (Venn-ADMIT) need the model's training "
                "set, as (X_ref, y_ref) or precomputed (embeddings, logits, y)"
            )
            raise ValueError(msg)
        if isinstance(reference, dict):
            reference = tuple(reference.get(k) for k in ("embeddings", "logits", "y"))
        if not isinstance(reference, (tuple, list)) or len(reference) not in (2, 3):
            msg = "reference must be (X_ref, y_ref) or (embeddings, logits, y)"
            raise TypeError(msg)
        if len(reference) == 2:
            X_ref, y_ref = reference
            if self._adapter is None:
                msg = "reference=(X_ref, y_ref) needs a model; without one pass (embeddings, logits, y)"
                raise ValueError(msg)
            outputs = self._adapter(X_ref)
        else:
            E_ref, L_ref, y_ref = reference
            outputs = ModelOutputs.from_arrays(
                None, logits=L_ref, embeddings=E_ref, n_classes=len(encoder), tolerance=self._tolerance
            )
        if outputs.embeddings is None:
            msg = (
                "reference needs embeddings: use a torch model with Monitor(model, embedding_layer=...), "
                "or pass embeddings= with precomputed outputs"
            )
            raise ValueError(msg)
        E = outputs.embeddings
        return (
            E,
            outputs.logits_or_log_probs(),
            encoder.encode(y_ref, "reference labels", n_rows=len(outputs)),
        )

    # ------------------------------------------------------------------ observe
    @guarded
    def observe(
        self,
        X: Any = None,
        *,
        probs: Any = None,
        logits: Any = None,
        embeddings: Any = None,
        ids: Any = None,
        y: Any = None,
        categories: Any = None,
        name: str | None = None,
    ) -> int:
        """Run a batch through the model and every calibrator, and record it.

        Parameters
        ----------
        X : array-like, optional
            Model inputs; or pass the model's outputs as ``probs=`` / ``logits=`` (and
            ``embeddings=`` for Venn-ADMIT calibrators).
        ids : sequence of hashables or a polars/pandas Series, optional
            Row ids, so labels can be joined later with :meth:`label`. Default: consecutive
            integers. Must be distinct within the batch and from rows still in the window.
        y : array-like, optional
            Labels, when they are known at once.
        categories : array-like, optional
            Mondrian categories (for ``mondrian="category"`` calibrators).
        name : str, optional
            Batch name shown in tables and charts (default: its index).

        Returns
        -------
        int
            The batch index. A rejected batch raises and leaves the monitor unchanged.
        """
        encoder = self._require_encoder()
        outputs = self._outputs(X, probs, logits, n_classes=len(encoder), embeddings=embeddings)
        m = len(outputs)
        row_ids = self._batch_ids(ids, m)
        labels = None if y is None else encoder.encode(y, "y", n_rows=m)
        cats = None if categories is None else as_1d_array(categories, "categories")
        if cats is not None and cats.shape[0] != m:
            msg = f"categories has {cats.shape[0]} values but the batch has {m} rows"
            raise ValueError(msg)
        if cats is not None and not any(
            getattr(cal, "mondrian", None) == "category" for cal in self._calibrators.values()
        ):
            msg = "categories must be None: no calibrator was built with mondrian='category'"
            raise ValueError(msg)
        K = len(encoder)
        results: dict[str, Any] = {}
        stats: dict[str, BatchStats] = {}
        for key, cal in self._calibrators.items():
            kind = kind_of(cal)
            results[key] = kind.apply(key, cal, outputs, cats)
            stats[key] = kind.observed(results[key], K)
        # Everything is validated and computed: commit.
        index = len(self._stream.batches)
        rows = BatchRows(
            ids=row_ids, probs=outputs.probs, packed_sets={}, labels=np.full(m, NO_LABEL, dtype=np.intp),
            categories=cats,
        )  # fmt: skip
        for key, cal in self._calibrators.items():
            kind_of(cal).keep(rows, key, results[key])
        record = BatchRecord(
            index=index,
            name=str(index) if name is None else str(name),
            observed_at=datetime.now(UTC),
            n_rows=m,
            stats=stats,
            rows=rows,
        )
        every_row = np.arange(m)
        newly_labelled = 0
        if labels is not None:
            record.stats, newly_labelled, _ = self._labelled_stats(record, every_row, labels)
            rows.labels[:] = labels
        # Detectors and ACI last (their state changes as they are fed), then the stream.
        first_row = self._stream.rows_seen
        if self._shift is not None:
            self._shift.observe(index, (first_row, first_row + m - 1), outputs.probs, outputs.embeddings)
        if labels is not None:
            self._feed_labels([(record, every_row, labels)], latest=index, rows_seen=first_row + m)
        if ids is None:
            self._next_auto_id += m
        self._stream.append(record)
        self._stream.rows_labelled += newly_labelled
        self._notify((index,))
        return index

    def _batch_ids(self, ids: Any, m: int) -> list[Hashable]:
        if ids is None:
            row_ids: list[Hashable] = list(range(self._next_auto_id, self._next_auto_id + m))
        else:
            row_ids = as_id_list(ids)
            if len(row_ids) != m:
                msg = f"ids has {len(row_ids)} values but the batch has {m} rows"
                raise ValueError(msg)
            try:
                distinct = len(set(row_ids))
            except TypeError as err:
                msg = "ids must be hashable values (int, str, tuple, ...)"
                raise TypeError(msg) from err
            if distinct != m:
                msg = f"ids must be distinct within a batch; {m - distinct} duplicates found"
                raise ValueError(msg)
        clash = self._stream.first_known_id(row_ids)
        if clash is not None:
            where = self._stream.id_index[clash][0]
            msg = f"ids: {clash!r} was already observed (batch {where}, still in the window)"
            raise ValueError(msg)
        return row_ids

    # ------------------------------------------------------------------ labels
    @guarded
    def label(self, ids: Any, y: Any) -> LabelReport:
        """Join late labels to the rows they belong to and update those batches' coverage.

        Parameters
        ----------
        ids : sequence of hashables or Series
            Ids given to :meth:`observe`.
        y : array-like
            The true label of each id.

        Returns
        -------
        LabelReport
            How many labels matched rows in the window; labels for unknown or expired ids are
            counted in ``unmatched`` (and in :meth:`status`), never applied silently.
        """
        encoder = self._require_encoder()
        id_list = as_id_list(ids)
        labels = encoder.encode(y, "y", n_rows=len(id_list))
        found, where = self._locate(id_list)
        unmatched = int((~found).sum())
        if not found.any():
            self._stream.labels_unmatched += unmatched
            return LabelReport(0, unmatched, 0, ())
        batch_of, row_of, label_of = where[:, 0], where[:, 1], labels[found]
        by_index = {record.index: record for record in self._stream.window_batches()}
        touched = np.unique(batch_of).tolist()
        groups = []
        updates = []
        relabelled = newly = 0
        for batch_index in touched:
            mask = batch_of == batch_index
            record, rows_b, labels_b = by_index[batch_index], row_of[mask], label_of[mask]
            stats, new_b, relabelled_b = self._labelled_stats(record, rows_b, labels_b)
            updates.append((record, stats, rows_b, labels_b))
            groups.append((record, rows_b, labels_b))
            newly, relabelled = newly + new_b, relabelled + relabelled_b
        # Everything is computed: the detectors and ACI are fed, then the batches change.
        self._feed_labels(groups, latest=len(self._stream.batches) - 1, rows_seen=self._stream.rows_seen)
        for record, stats, rows_b, labels_b in updates:
            assert record.rows is not None
            record.stats = stats
            record.rows.labels[rows_b] = labels_b
        self._stream.rows_labelled += newly
        self._stream.labels_unmatched += unmatched
        self._notify(tuple(touched))
        return LabelReport(where.shape[0], unmatched, relabelled, tuple(touched))

    def _locate(self, id_list: list[Hashable]) -> tuple[npt.NDArray[np.bool_], IntArray]:
        """Which ids are in the window, and the ``(batch, row)`` of each one that is (changes nothing).

        Raises if ids repeat.
        """
        if len(set(id_list)) != len(id_list):
            msg = "ids must be distinct within one label() call"
            raise ValueError(msg)
        positions = list(map(self._stream.id_index.get, id_list))
        found = np.fromiter((p is not None for p in positions), dtype=bool, count=len(positions))
        where = np.asarray([p for p in positions if p is not None], dtype=np.intp).reshape(-1, 2)
        return found, where

    def _labelled_stats(
        self, record: BatchRecord, rows: IntArray, labels: IntArray
    ) -> tuple[dict[str, BatchStats], int, int]:
        """A batch's statistics once these rows carry these labels (the record is not changed).

        Each calibrator's kind turns the labelled rows into a statistic of their own, merged into
        the batch's (a relabel first merges the old labels' statistic with the sign reversed).
        Returns the new statistics, how many rows get their first label and how many a new one.
        """
        assert record.rows is not None
        old = record.rows.labels[rows]
        had = old != NO_LABEL
        probs = record.rows.probs
        stats: dict[str, BatchStats] = {}
        for key, current in record.stats.items():
            cal = self._calibrators[key]
            kind = kind_of(cal)
            results = kind.results_of(record.rows, key, cal)
            delta = kind.labelled(results.take(rows), probs[rows], labels)
            if had.any():
                old_rows = rows[had]
                delta = delta.merge(kind.labelled(results.take(old_rows), probs[old_rows], old[had], sign=-1))
            stats[key] = current.merge(delta)
        return stats, int((~had).sum()), int(had.sum())

    def _feed_labels(
        self, groups: list[tuple[BatchRecord, IntArray, IntArray]], *, latest: int, rows_seen: int
    ) -> None:
        """Give newly labelled rows to the calibrators that learn from labels (ACI) and the detectors.

        Should the detectors fail, the calibrators that learned get their earlier state back.
        """
        learners = {key: cal for key, cal in self._calibrators.items() if kind_of(cal).learns_from_labels}
        saved = {key: copy.deepcopy(vars(cal)) for key, cal in learners.items()}
        try:
            self._feed_adaptive(groups, learners)
            if self._shift is not None and groups:
                self._feed_detectors(groups, latest=latest, rows_seen=rows_seen)
        except BaseException:
            for key, state in saved.items():
                vars(learners[key]).clear()
                vars(learners[key]).update(state)
            raise

    def _feed_detectors(
        self, groups: list[tuple[BatchRecord, IntArray, IntArray]], *, latest: int, rows_seen: int
    ) -> None:
        assert self._shift is not None
        probs = np.concatenate(
            [record.rows.probs[rows] for record, rows, _ in groups if record.rows is not None]
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
            for key, cal in self._calibrators.items()
            if (kind := kind_of(cal)).has_sets
        }
        self._shift.labelled(latest, (rows_seen - 1, rows_seen - 1), probs, labels, covered)

    @guarded
    def admitted_accuracy(self, *, by: str = "true", batches: tuple[int, ...] | None = None) -> pl.DataFrame:
        """Venn-ADMIT's admitted predictions, by class, over the labelled rows of the stream.

        Parameters
        ----------
        by : {"true", "predicted"}
            Stratify by the true class (paper 000's Tables 4-5: accuracy among admitted rows of
            each class) or by the predicted class (what a user acting on them sees: precision).
        batches : tuple of int, optional
            Only these batches (default: all).

        Returns
        -------
        polars.DataFrame
            ``calibrator, class, n_admitted, n_correct, accuracy, accuracy_lo, accuracy_hi,
            target`` (95% Clopper-Pearson interval; the target is ``1 − α``), classes with
            admitted labelled rows only.
        """
        if by not in ("true", "predicted"):
            msg = f"by must be 'true' or 'predicted'; got {by!r}"
            raise ValueError(msg)
        classes = [str(c) for c in self.classes_.tolist()]
        return admitted_accuracy(self._records(batches), classes, self.targets(), by=by)

    def _feed_adaptive(
        self, groups: list[tuple[BatchRecord, IntArray, IntArray]], learners: Mapping[str, Any]
    ) -> None:
        """Give newly labelled rows, with the sets they were shown, to the calibrators that learn (ACI)."""
        for key, cal in learners.items():
            kind = kind_of(cal)
            for record, rows, labels in groups:
                if record.rows is not None and rows.shape[0]:
                    kind.after_labels(cal, kind.results_of(record.rows, key, cal).take(rows), labels)

    # ------------------------------------------------------------------ shift warnings
    @guarded
    def warnings(self) -> pl.DataFrame:
        """The shift warning log: one row per episode, with acknowledgements.

        Columns ``episode, name, threatens, statistic, threshold, false_alarm_control,
        first_batch, last_batch, first_row, last_row, open, explanation, action,
        acknowledged, ack_by, ack_at, ack_note``. Empty without shift detectors.
        """
        if self._shift is None:
            return ShiftWatch([]).warnings()
        return self._shift.warnings()

    @guarded
    def acknowledge(self, episode: int, note: str = "", *, by: str | None = None) -> None:
        """Acknowledge a warning (the note, who and when are kept in the log)."""
        if self._shift is None:
            msg = "there are no warnings to acknowledge: the monitor runs no shift detectors"
            raise ValueError(msg)
        self._shift.acknowledge(int(episode), note, by)
        self._notify(())

    # ------------------------------------------------------------------ what if
    @guarded
    def what_if_calibrators(self) -> list[str]:
        """Set calibrators whose sets can be recomputed at another level (see :meth:`what_if`)."""
        return [key for key, cal in self._calibrators.items() if _levels_of(cal) is not None]

    @guarded
    def what_if(self, alpha: float, calibrators: list[str] | None = None) -> pl.DataFrame:
        """Sets and coverage of the window's rows recomputed at another level ``alpha``.

        Uses each calibrator's fitted calibration scores (no refitting): the threshold is the
        conformal quantile at ``alpha`` of the same scores, so the result is what the monitor
        would have shown had it been built with that ``alpha``. Only the rows still in the window
        can be recomputed; earlier batches are not in the result.

        Parameters
        ----------
        alpha : float
            Miscoverage level in (0, 1).
        calibrators : list of str, optional
            Which calibrators (default: all of :meth:`what_if_calibrators`).

        Returns
        -------
        polars.DataFrame
            One row per window batch and calibrator: ``batch, calibrator, alpha, target, n_rows,
            n_labelled, n_covered, coverage, coverage_lo, coverage_hi, mean_set_size,
            singleton_share``.
        """
        alpha = check_alpha(alpha)
        eligible = self.what_if_calibrators()
        keys = eligible if calibrators is None else list(calibrators)
        for key in keys:
            if key not in eligible:
                msg = (
                    f"calibrators: {key!r} cannot be recomputed at another level (choose from "
                    f"{eligible}: split conformal calibrators without user categories)"
                )
                raise ValueError(msg)
        out: dict[str, list[Any]] = {
            "batch": [], "calibrator": [], "n_rows": [], "n_labelled": [], "n_covered": [],
            "mean_set_size": [], "singleton_share": [],
        }  # fmt: skip
        for key in keys:
            levels = _levels_of(self._calibrators[key])
            assert levels is not None
            for record in self._stream.window_batches():
                rows = record.rows
                assert rows is not None
                sets = levels.sets_at_alpha(rows.probs, alpha)
                labelled = np.flatnonzero(rows.labels != NO_LABEL)
                sizes = sets.sum(axis=1)
                out["batch"].append(record.index)
                out["calibrator"].append(key)
                out["n_rows"].append(record.n_rows)
                out["n_labelled"].append(int(labelled.shape[0]))
                out["n_covered"].append(int(sets[labelled, rows.labels[labelled]].sum()))
                out["mean_set_size"].append(float(sizes.mean()))
                out["singleton_share"].append(float((sizes == 1).mean()))
        schema: dict[str, Any] = {
            "batch": pl.Int64, "calibrator": pl.String, "n_rows": pl.Int64, "n_labelled": pl.Int64,
            "n_covered": pl.Int64, "mean_set_size": pl.Float64, "singleton_share": pl.Float64,
        }  # fmt: skip
        frame = pl.DataFrame(out, schema=schema)
        lo, hi = clopper_pearson(frame["n_covered"].to_numpy(), frame["n_labelled"].to_numpy())
        return frame.with_columns(
            alpha=pl.lit(alpha, dtype=pl.Float64),
            target=pl.lit(1.0 - alpha, dtype=pl.Float64),
            coverage=pl.when(pl.col("n_labelled") > 0).then(pl.col("n_covered") / pl.col("n_labelled")),
            coverage_lo=pl.Series(lo).fill_nan(None),
            coverage_hi=pl.Series(hi).fill_nan(None),
        ).select(
            "batch", "calibrator", "alpha", "target", "n_rows", "n_labelled", "n_covered", "coverage",
            "coverage_lo", "coverage_hi", "mean_set_size", "singleton_share",
        )  # fmt: skip

    # ------------------------------------------------------------------ selective
    @guarded
    def retune(self, coverage: float, calibrator: str | None = None) -> float:
        """Re-tune a selective calibrator's threshold on the window's rows at a new coverage ``ξ``.

        The threshold becomes Eq. 16's on the selector scores of the rows still in the window
        (unlabelled rows count: no label is needed), and the window's kept rows and per-batch
        kept counts are recomputed with it; later batches use it too. Batches that left the
        window keep what was decided then.

        Parameters
        ----------
        coverage : float
            Target share of rows kept, in (0, 1].
        calibrator : str, optional
            Which selective calibrator (default: the only one).

        Returns
        -------
        float
            The new threshold.
        """
        keys = [key for key, cal in self._calibrators.items() if kind_of(cal).retunable]
        if calibrator is None:
            if len(keys) != 1:
                msg = f"calibrator must name one of the selective calibrators {keys}"
                raise ValueError(msg)
            calibrator = keys[0]
        if calibrator not in keys:
            msg = f"calibrator must be one of the selective calibrators {keys}; got {calibrator!r}"
            raise ValueError(msg)
        if not (isinstance(coverage, int | float) and 0.0 < float(coverage) <= 1.0):
            msg = f"coverage must be a number in (0, 1]; got {coverage!r}"
            raise ValueError(msg)
        records = [r for r in self._stream.window_batches() if r.rows is not None]
        if not records:
            msg = "there are no rows in the window to tune on: observe a batch first"
            raise ValueError(msg)
        selector = self._calibrators[calibrator]
        candidate, threshold = kind_of(selector).retune(selector, float(coverage), calibrator, records)
        self._calibrators[calibrator] = candidate
        self._notify(tuple(r.index for r in records))
        return threshold

    # ------------------------------------------------------------------ notes
    @guarded
    def note(
        self, text: str, *, batch: int | None = None, episode: int | None = None, author: str | None = None
    ) -> Note:
        """Pin a note to a batch, to a warning episode, or to the stream as a whole.

        Parameters
        ----------
        text : str
            The note (plain text; views escape it).
        batch : int, optional
            The batch it is about (must have been observed).
        episode : int, optional
            The warning episode it is about (see :meth:`warnings`).
        author : str, optional
            Who wrote it (default: ``$CALWATCH_AUTHOR``, ``$JUPYTERHUB_USER`` or the login name).

        Returns
        -------
        Note
            The stored note, with its id and UTC time.
        """
        if not isinstance(text, str) or not text.strip():
            msg = f"text must be a non-empty string; got {text!r}"
            raise ValueError(msg)
        if batch is not None and not (isinstance(batch, int) and 0 <= batch < len(self._stream.batches)):
            last = len(self._stream.batches) - 1
            msg = f"batch must be the index of an observed batch (0..{last}); got {batch!r}"
            raise ValueError(msg)
        n_warnings = 0 if self._shift is None else len(self._shift.tracker.warnings_)
        if episode is not None and not (isinstance(episode, int) and 0 <= episode < n_warnings):
            msg = f"episode must be a warning number from warnings() (0..{n_warnings - 1}); got {episode!r}"
            raise ValueError(msg)
        note = Note(
            note_id=len(self._notes),
            text=text.strip(),
            author=str(author or "").strip() or default_author(),
            at=datetime.now(UTC).isoformat(timespec="seconds"),
            batch=batch,
            episode=episode,
        )
        self._notes.append(note)
        self._notify(())
        return note

    @guarded
    def notes(self) -> pl.DataFrame:
        """Every note so far: ``note_id, batch, episode, author, at, text``."""
        schema: dict[str, Any] = {
            "note_id": pl.Int64, "batch": pl.Int64, "episode": pl.Int64, "author": pl.String,
            "at": pl.String, "text": pl.String,
        }  # fmt: skip
        rows = [{name: getattr(n, name) for name in schema} for n in self._notes]
        return pl.DataFrame(rows, schema=schema)

    # ------------------------------------------------------------------ snapshots
    @guarded
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Save the monitor to a snapshot folder (parquet + JSON, no pickle), atomically.

        Everything but the model is kept: calibrators' fitted state, per-batch statistics, the
        raw rows of the window, shift detectors, the warning log and notes (for a regression
        monitor: its levels, the base predictions and random draws of the window's rows, and
        their true values). Reload it with :meth:`Monitor.load`, passing the model again to keep
        streaming inputs.
        """
        from calwatch.store import save_monitor

        return save_monitor(self, path)

    @guarded
    def report(self, path: str | os.PathLike[str]) -> Path:
        """Write a standalone HTML report (every panel, warnings, notes, configuration, provenance).

        The file opens in any browser with no kernel and no network.
        """
        from calwatch.report import write_report

        return write_report(self, path)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], *, model: Any = None, embedding_layer: str | None = None
    ) -> Monitor:
        """Load a snapshot written by :meth:`save` (verifying it first; no code is executed).

        A snapshot of a regression monitor loads as a
        :class:`~calwatch.regression_monitor.RegressionMonitor`.

        Parameters
        ----------
        path : path-like
            The snapshot folder.
        model : optional
            The model to re-attach, to keep observing inputs ``X``.
        embedding_layer : str, optional
            Torch models: the layer kept as the embedding.

        Raises
        ------
        SnapshotError
            If the folder is not a complete, unaltered snapshot, or (called on a subclass, e.g.
            ``RegressionMonitor.load``) holds another kind of monitor.
        """
        from calwatch.state_codec import SnapshotError
        from calwatch.store import load_monitor

        monitor = load_monitor(path, model=model, embedding_layer=embedding_layer)
        if not isinstance(monitor, cls):
            msg = f"{str(path)!r} holds a {type(monitor).__name__}, not a {cls.__name__}"
            raise SnapshotError(msg)
        return monitor

    @property
    def shift_watch(self) -> ShiftWatch | None:
        """The shift detectors and their log (None without detectors or before calibrate)."""
        return self._shift

    # ------------------------------------------------------------------ views
    @guarded
    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(batch_indices)`` whenever batches change; returns an unsubscribe."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def _notify(self, batches: tuple[int, ...]) -> None:
        """Tell listeners these batches changed: at once, or once the running call releases the lock."""
        guard = self._guard
        if guard.depth > 0:
            guard.pending.append(batches)
        else:
            self._send_notifications(batches)

    def _send_notifications(self, batches: tuple[int, ...]) -> None:
        for listener in list(self._listeners):
            listener(batches)

    @property
    def _guard(self) -> Guard:
        return guard_of(self)

    @property
    def lock(self) -> threading.RLock:
        """The monitor's lock (re-entrant). Every public method holds it while it runs.

        Hold it to read several views at one moment of a stream that another thread feeds, e.g.
        ``with mon.lock: s, c = mon.summary(), mon.class_coverage()``. Do not wait on anything
        slow (a front end, a network) while holding it.
        """
        return self._guard.lock

    @guarded
    def status(self) -> dict[str, int]:
        """Stream counters: rows seen, labelled, awaiting labels, batches, unmatched labels."""
        s = self._stream
        return {
            "rows_seen": s.rows_seen,
            "rows_labelled": s.rows_labelled,
            "rows_pending": s.rows_pending,
            "batches": len(s.batches),
            "labels_unmatched": s.labels_unmatched,
            "rows_in_window": s.rows_in_window,
        }

    @guarded
    def targets(self) -> dict[str, float]:
        """Target coverage of each set calibrator (``1 − α``, or ``1 − ε`` for PAC sets)."""
        out = {key: kind_of(cal).target(cal) for key, cal in self._calibrators.items()}
        return {key: value for key, value in out.items() if value is not None}

    def _records(self, batches: tuple[int, ...] | None) -> list[BatchRecord]:
        return self._stream.batches if batches is None else [self._stream.batches[i] for i in batches]

    @guarded
    def summary(self, batches: tuple[int, ...] | None = None) -> pl.DataFrame:
        """One row per batch and calibrator: coverage, set sizes, risk and label progress.

        Columns: ``batch, name, calibrator, kind, target, n_rows, n_labelled, n_pending,
        n_covered, coverage, coverage_lo, coverage_hi, mean_set_size, singleton_share,
        full_share, estimated_error, observed_error, error_gap, estimated_error_labelled,
        alpha_level, admitted_share, n_admitted_labelled, admitted_accuracy, in_window,
        observed_at``. ``alpha_level`` is the level at which a set calibrator's sets were taken
        (its ``α``; for ``cw.Adaptive``, the ACI level ``α_t``). The ``admitted_*`` columns are
        Venn-ADMIT's: the share of rows whose prediction it admits, and the accuracy of the
        admitted predictions among labelled rows (null for other calibrators). Selective
        calibrators (``kind == "selective"``) fill ``kept_share, threshold, n_kept_labelled,
        kept_accuracy`` (top-label accuracy of the kept labelled rows) and ``accuracy`` (of all
        labelled rows).

        ``kind`` is ``"sets"`` (coverage of prediction sets, with a 95% Clopper-Pearson
        interval) or ``"risk"`` (a label-free estimate of the top-k error rate, known as soon
        as the batch is observed, next to the observed error rate of its labelled rows;
        ``error_gap`` is the estimate on the labelled rows minus the observed rate, paper 004's
        δ: ≥ 0 means conservative). Columns of the other kind are null, as are labelled
        metrics until a row of the batch is labelled.
        """
        return self.summary_of(self._records(batches))

    @guarded
    def summary_of(self, records: Sequence[BatchRecord]) -> pl.DataFrame:
        """:meth:`summary` of some batch records (observed batches, or merged runs of them).

        Part of the read API the views use: ``records`` come from :attr:`batch_records` or
        :meth:`window_records`, possibly pooled by :func:`calwatch.stream.merge_records` (a bucket
        of consecutive batches drawn as one point); the statistics are counts, so a pooled
        record's summary is exactly that of all its rows.
        """
        targets = self.targets()
        kinds = {key: kind_of(cal) for key, cal in self._calibrators.items()}
        rows: list[dict[str, Any]] = []
        for record in records:
            for key, stats in record.stats.items():
                kind = kinds[key]
                rows.append(
                    {
                        "batch": record.index,
                        "name": record.name,
                        "calibrator": key,
                        "kind": kind.summary_kind,
                        "target": targets.get(key),
                        "n_rows": record.n_rows,
                        "n_labelled": stats.n_labelled,
                        "in_window": record.rows is not None,
                        "observed_at": record.observed_at,
                    }
                    | kind.summary_row(stats, record.n_rows)
                )
        schema = dict(_BASE_SUMMARY)
        for present in kinds.values():
            schema |= present.summary_columns
        frame = pl.DataFrame(rows, schema=schema)
        if "n_covered" not in frame.columns:
            frame = frame.with_columns(n_covered=pl.lit(None, dtype=pl.Int64))
        # Coverage and its exact interval, for the kinds that count covered rows.
        has_coverage = pl.col("n_covered").is_not_null() & (pl.col("n_labelled") > 0)
        covered = frame["n_covered"].fill_null(0).to_numpy()
        trials = np.where(frame["n_covered"].is_not_null().to_numpy(), frame["n_labelled"].to_numpy(), 0)
        lo, hi = clopper_pearson(covered, trials)
        frame = frame.with_columns(
            n_pending=pl.col("n_rows") - pl.col("n_labelled"),
            coverage=pl.when(has_coverage).then(pl.col("n_covered") / pl.col("n_labelled")),
            coverage_lo=pl.Series(lo).fill_nan(None),
            coverage_hi=pl.Series(hi).fill_nan(None),
        )
        missing = {name: dtype for kind in KINDS for name, dtype in kind.summary_columns.items()}
        frame = frame.with_columns(
            pl.lit(None, dtype=dtype).alias(name)
            for name, dtype in missing.items()
            if name not in frame.columns
        )
        known = [name for name in SUMMARY_ORDER if name in frame.columns]
        extra = [name for name in frame.columns if name not in SUMMARY_ORDER]
        return frame.select(*known[:-2], *extra, *known[-2:])

    @guarded
    def set_size_counts(self, batches: tuple[int, ...] | None = None) -> pl.DataFrame:
        """Rows per set size: ``batch, calibrator, size, count`` (sizes with count > 0)."""
        return self.set_size_counts_of(self._records(batches))

    @guarded
    def set_size_counts_of(self, records: Sequence[BatchRecord]) -> pl.DataFrame:
        """:meth:`set_size_counts` of some batch records (see :meth:`summary_of`)."""
        out: dict[str, list[Any]] = {"batch": [], "calibrator": [], "size": [], "count": []}
        with_sets = self._keys_with_sets()
        for record in records:
            for key, stats in record.stats.items():
                if key not in with_sets:
                    continue
                counts: Any = stats  # a set kind's statistics (CalibratorBatchStats)
                sizes = np.flatnonzero(counts.size_counts)
                out["batch"] += [record.index] * len(sizes)
                out["calibrator"] += [key] * len(sizes)
                out["size"] += sizes.tolist()
                out["count"] += counts.size_counts[sizes].tolist()
        schema = {"batch": pl.Int64, "calibrator": pl.String, "size": pl.Int64, "count": pl.Int64}
        return pl.DataFrame(out, schema=schema)

    def _keys_with_sets(self) -> set[str]:
        """Calibrators whose kind predicts sets (their statistics count set sizes and coverage)."""
        return {key for key, cal in self._calibrators.items() if kind_of(cal).has_sets}

    @guarded
    def class_coverage(
        self, batches: tuple[int, ...] | None = None, *, by_batch: bool = True
    ) -> pl.DataFrame:
        """Coverage by true class, per batch or (``by_batch=False``) over the whole stream.

        Columns ``[batch,] calibrator, class, n_labelled, n_covered, coverage, coverage_lo,
        coverage_hi, target``; only classes with labelled rows appear.
        """
        return self.class_coverage_of(self._records(batches), by_batch=by_batch)

    @guarded
    def class_coverage_of(self, records: Sequence[BatchRecord], *, by_batch: bool = True) -> pl.DataFrame:
        """:meth:`class_coverage` of some batch records (see :meth:`summary_of`)."""
        classes = self.classes_
        with_sets = self._keys_with_sets()
        out: dict[str, list[Any]] = {
            "batch": [], "calibrator": [], "class": [], "n_labelled": [], "n_covered": [],
        }  # fmt: skip
        for record in records:
            for key, stats in record.stats.items():
                if key not in with_sets:
                    continue
                counts: Any = stats  # a set kind's statistics (CalibratorBatchStats)
                present = np.flatnonzero(counts.class_labelled)
                out["batch"] += [record.index] * len(present)
                out["calibrator"] += [key] * len(present)
                out["class"] += [str(c) for c in classes[present].tolist()]
                out["n_labelled"] += counts.class_labelled[present].tolist()
                out["n_covered"] += counts.class_covered[present].tolist()
        schema: dict[str, Any] = {
            "batch": pl.Int64, "calibrator": pl.String, "class": pl.String,
            "n_labelled": pl.Int64, "n_covered": pl.Int64,
        }  # fmt: skip
        frame = pl.DataFrame(out, schema=schema)
        if not by_batch:
            frame = (
                frame.group_by("calibrator", "class", maintain_order=True)
                .agg(pl.col("n_labelled").sum(), pl.col("n_covered").sum())
                .sort("calibrator", "class")
            )
        lo, hi = clopper_pearson(frame["n_covered"].to_numpy(), frame["n_labelled"].to_numpy())
        targets = self.targets()
        return frame.with_columns(
            coverage=pl.col("n_covered") / pl.col("n_labelled"),
            coverage_lo=pl.Series(lo, dtype=pl.Float64),
            coverage_hi=pl.Series(hi, dtype=pl.Float64),
            target=pl.col("calibrator").replace_strict(targets, return_dtype=pl.Float64),
        )

    @guarded
    def rows(self, window: int | None = None, *, batch: int | None = None) -> pl.DataFrame:
        """Raw rows still kept in the window, one per row.

        Columns ``batch, id, prediction, confidence, label`` and, per calibrator, ``set_<name>``
        (list of classes), ``size_<name>`` and ``covered_<name>`` (null until labelled); risk
        estimators add ``risk_<name>``; Venn-ADMIT adds ``y_hat_<name>`` (the KNN prediction),
        ``q_<name>``, ``d_<name>``, ``admitted_<name>``, ``p_lower_<name>``, ``p_upper_<name>``;
        selective calibrators add ``score_<name>`` and ``kept_<name>``.

        Parameters
        ----------
        window : int, optional
            Only the most recent ``window`` rows.
        batch : int, optional
            Only the rows of this batch (it must still be in the window).
        """
        classes = self.classes_
        records = self._stream.window_batches()
        if batch is not None:
            records = [r for r in records if r.index == batch]
            if not records:
                msg = f"batch {batch} is not in the window (its raw rows were dropped or never existed)"
                raise ValueError(msg)
        frames = []
        for record in records:
            rows = record.rows
            assert rows is not None
            y_hat = rows.probs.argmax(axis=1)
            has_label = rows.labels != NO_LABEL
            columns: dict[str, Any] = {
                "batch": np.full(record.n_rows, record.index),
                "id": pl.Series("id", rows.ids, dtype=pl.Object)
                if not uniform_scalar_ids(rows.ids)
                else rows.ids,
                "prediction": classes[y_hat].tolist(),
                "confidence": rows.probs.max(axis=1),
                "label": [
                    c if h else None for c, h in zip(classes[rows.labels].tolist(), has_label, strict=True)
                ],
            }
            for key, cal in self._calibrators.items():
                kind = kind_of(cal)
                columns |= kind.row_columns(key, kind.results_of(rows, key, cal), rows.labels, classes)
            frames.append(pl.DataFrame(columns))
        if not frames:
            return pl.DataFrame()
        out = pl.concat(frames, how="vertical_relaxed")
        if window is not None:
            out = out.tail(int(window))
        return out

    # ------------------------------------------------------------------ charts & widget
    def chart(self, kind: str = "coverage") -> alt.Chart | alt.LayerChart:
        """An Altair chart of the stream so far.

        ``kind`` is one of ``"coverage"``, ``"class_coverage"``, ``"set_size"``,
        ``"set_shares"``, ``"set_sizes"``, ``"labels"``.
        """
        from calwatch import charts

        return charts.build(kind, self)

    def widget(self) -> MonitorWidget:
        """The live widget of this monitor (one per monitor; display it as often as you like)."""
        if self._widget is None:
            from calwatch.widget import MonitorWidget

            self._widget = MonitorWidget(self)
        return self._widget

    def show(self, *, sidebar: bool = False, title: str | None = None) -> None:
        """Display the live widget inline, or in a JupyterLab side panel (``sidebar=True``)."""
        from IPython.display import display

        widget = self.widget()
        if sidebar:
            from sidecar import Sidecar

            panel = Sidecar(title=title or self.name)
            with panel:
                display(widget)  # type: ignore[no-untyped-call]
            widget.keep_panel(panel)
        else:
            display(widget)  # type: ignore[no-untyped-call]


def _is_regression(task: Any, model: Any) -> bool:
    """Whether a monitor should watch a regression model (asked for, or inferred from the model)."""
    if task is not None:
        return bool(task == "regression")
    if model is None or not callable(getattr(model, "predict", None)):
        return False
    is_torch = type(model).__module__.startswith("torch")
    return not (is_torch or hasattr(model, "predict_proba") or hasattr(model, "decision_function"))


def _levels_of(calibrator: Any) -> Any:
    """A fitted calibrator's sets at any level, when its kind has them (split conformal, or ACI's)."""
    return kind_of(calibrator).levels(calibrator)


def default_author() -> str:
    """Who is writing: ``$CALWATCH_AUTHOR``, else ``$JUPYTERHUB_USER``, else the login name."""
    for variable in ("CALWATCH_AUTHOR", "JUPYTERHUB_USER"):
        value = os.environ.get(variable, "").strip()
        if value:
            return value
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _describe(model: Any) -> str:
    cls = type(model)
    return f"{cls.__module__}.{cls.__qualname__}"
