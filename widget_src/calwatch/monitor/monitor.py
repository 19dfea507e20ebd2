"""The streaming :class:`Monitor`: calibrators + stream state + delayed labels + live views."""

from __future__ import annotations

import copy
import os
import threading
import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.core.classes import ClassEncoder, as_1d_array
from calwatch.core.guard import Guard, guard_of, guarded, guarded_yielding
from calwatch.core.ids import check_id_kind, ids_with_kind
from calwatch.core.models import ModelAdapter, ModelOutputs, wrap
from calwatch.core.who import default_author
from calwatch.engine._validation import PROBABILITY_SUM_TOLERANCE
from calwatch.engine.conformal.classifier import SplitConformalClassifier
from calwatch.engine.errors import NotFittedError
from calwatch.engine.shift.blocks import block_keys
from calwatch.kinds import KINDS, kind_of
from calwatch.kinds.admit import require_embeddings
from calwatch.monitor.labels import LabelReport, MonitorLabels
from calwatch.monitor.reads import MonitorReads
from calwatch.monitor.share import MonitorSharing
from calwatch.monitor.tables import MonitorTables
from calwatch.shift.base import CalibrationData, Detector
from calwatch.shift.watch import ShiftWatch, default_detectors, detectors_kept_on_failure
from calwatch.stream.records import NO_LABEL, BatchRecord, BatchRows, BatchStats, StreamState
from calwatch.stream.row_log import RowLog

if TYPE_CHECKING:
    from calwatch.widget import MonitorWidget

IntArray = npt.NDArray[np.intp]
DEFAULT_WINDOW = 100_000


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


#: Monitor classes of other tasks, by task name, filled by :func:`register_task` (the package's
#: ``__init__`` registers ``"regression"``), so this module never imports the subclasses that
#: build on it.
TASK_MONITORS: dict[str, type[Monitor]] = {}


def register_task(task: str, monitor_class: type[Any]) -> None:
    """Make ``Monitor(task=task)`` build a ``monitor_class`` (a subclass of :class:`Monitor`).

    Raises
    ------
    TypeError
        If ``monitor_class`` is not a subclass of :class:`Monitor`.
    """
    if not (isinstance(monitor_class, type) and issubclass(monitor_class, Monitor)):
        msg = f"monitor_class must be a subclass of Monitor; got {monitor_class!r}"
        raise TypeError(msg)
    TASK_MONITORS[task] = monitor_class


class Monitor(MonitorLabels, MonitorReads, MonitorSharing, MonitorTables):
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
        Shift detectors (:mod:`calwatch.shift`): ``"default"`` runs a label-free
        martingale on the model's confidence, and per set calibrator a conformity-score
        martingale and a coverage-drop test on labelled rows; their alarms become warnings
        (:meth:`warnings`, the widget's banner); when the model gives embeddings, also a
        label-free martingale on each row's distance to the calibration embeddings. ``None``
        turns them off.
    provenance : dict of str to str, optional
        Where the data and model come from (dataset, version, split...), shown in reports and
        kept in snapshots; also settable later through the ``provenance`` attribute.
    row_log : bool or path
        Keep the rows that leave the window on disk (:mod:`calwatch.stream.row_log`), so a label is
        never lost for lateness: ``True`` (default) in a temporary folder, a path for a folder
        of your choice, ``False`` to drop them (late labels for them are then unmatched). The
        log is part of :meth:`save`.
    task : {"classification", "regression"}, optional
        ``"regression"`` builds a :class:`~calwatch.monitor.regression.RegressionMonitor`
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
        """A :class:`~calwatch.monitor.regression.RegressionMonitor` for regression tasks."""
        if cls is Monitor and _is_regression(kwargs.get("task"), args[0] if args else kwargs.get("model")):
            if "regression" not in TASK_MONITORS:
                msg = "no monitor is registered for regression: import calwatch (its __init__ registers it)"
                raise RuntimeError(msg)
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
        row_log: bool | str | os.PathLike[str] = True,
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
            predicts = any(kind.claims(calibrator) and kind.task == "classification" for kind in KINDS)
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
        if not isinstance(row_log, (bool, str, os.PathLike)):
            msg = f"row_log must be True, False or a folder path; got {row_log!r}"  # type: ignore[unreachable]
            raise TypeError(msg)
        self._row_log = None if row_log is False else RowLog(None if row_log is True else row_log)
        self._stream.spill = None if self._row_log is None else self._row_log.spill

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

        Shared by :class:`Monitor` and the regression monitor; :func:`calwatch.snapshot.store.load_monitor`
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
        blocks: Any = None,
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
        blocks : array-like of shape (n,), optional
            For seasonal streams: each calibration row's block key (its day, say). The default
            label-free martingales then test whole blocks instead of rows
            (:mod:`calwatch.engine.shift.blocks`): their promise holds when the stream's
            blocks are exchangeable with the calibration blocks, however correlated the rows
            within a block. Every later :meth:`observe` must then pass ``blocks=`` too.

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
        block_keys_ = self._calibration_blocks(blocks, len(outputs))
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
                    default_detectors(
                        fitted, embeddings=outputs.embeddings is not None, blocks=block_keys_ is not None
                    )
                    if isinstance(self._shift_spec, str)
                    else list(self._shift_spec)
                )
                shift = ShiftWatch(detectors)
            names = [str(c) for c in encoder.classes.tolist()]
            covered = (
                None if block_keys_ is None else self._calibration_covered(fitted, outputs, y_idx, categories)
            )
            shift.calibrate(
                CalibrationData(
                    outputs.probs,
                    y_idx,
                    fitted,
                    outputs.embeddings,
                    names,
                    blocks=block_keys_,
                    covered=covered,
                )
            )
        # Commit only once every calibrator (and detector) fitted.
        self._shift = shift
        # The calibration rows' confidence scores, sorted: tables' buckets are tested against them
        # (calwatch.engine.shift.bucket_tests).
        self._reference_confidence = np.sort(1.0 - np.asarray(outputs.probs).max(axis=1))
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
        E = require_embeddings(outputs, "reference")
        return (
            E,
            outputs.logits_or_log_probs(),
            encoder.encode(y_ref, "reference labels", n_rows=len(outputs)),
        )

    # ------------------------------------------------------------------ observe
    @guarded_yielding
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
        blocks: Any = None,
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
        blocks : array-like of shape (m,), optional
            Each row's block key (its day, say), required when :meth:`calibrate` was given
            ``blocks=``. The rows of a block arrive together, possibly over several batches: a
            block is tested once a row with another key arrives, and a complete block's key may
            not come back.

        Returns
        -------
        int
            The batch index. A rejected batch raises and leaves the monitor unchanged.
        """
        encoder = self._require_encoder()
        outputs = self._outputs(X, probs, logits, n_classes=len(encoder), embeddings=embeddings)
        m = len(outputs)
        row_ids, id_kind = self._batch_ids(ids, m)
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
        row_blocks = self._stream_blocks(blocks, m)
        # Randomised calibrators draw from their own seeded streams while computing: a call that
        # fails puts the streams back, so the next call draws what it would have drawn.
        streams = random_streams(self._calibrators.values())
        drawn_from = [stream.bit_generator.state for stream in streams]
        try:
            K = len(encoder)
            results: dict[str, Any] = {}
            stats: dict[str, BatchStats] = {}
            identified = replace(outputs, ids=row_ids)
            for key, cal in self._calibrators.items():
                kind = kind_of(cal)
                results[key] = kind.apply(key, cal, identified, cats)
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
            # Detectors and ACI last (their state changes as they are fed; undone if anything
            # raises), then the stream.
            first_row = self._stream.rows_seen
            with detectors_kept_on_failure(self._shift):
                if self._shift is not None:
                    self._shift.observe(
                        index, (first_row, first_row + m - 1), outputs.probs, outputs.embeddings, row_blocks
                    )
                if labels is not None:
                    self._feed_labels([(record, every_row, labels)], latest=index, rows_seen=first_row + m)
            if ids is None:
                self._next_auto_id += m
            self._id_kind = self._id_kind or id_kind
            self._stream.append(record)
            self._stream.rows_labelled += newly_labelled
            self._notify((index,))
            return index
        except BaseException:
            for stream, state in zip(streams, drawn_from, strict=True):
                stream.bit_generator.state = state
            raise

    @staticmethod
    def _calibration_covered(
        fitted: dict[str, Any], outputs: ModelOutputs, labels: npt.NDArray[np.intp], categories: Any
    ) -> dict[str, npt.NDArray[np.bool_]]:
        """Whether each calibration row lies in each set calibrator's fitted set (for block null rates).

        The block label tests size their calibration-draw slack from how the calibration rows'
        misses cluster in their blocks (:func:`calwatch.engine.shift.block_labels.block_null_rate`).
        Each calibrator is applied to a copy, so a randomised one's own stream does not move.
        """
        cats = None if categories is None else as_1d_array(categories, "categories")
        out: dict[str, npt.NDArray[np.bool_]] = {}
        for key, cal in fitted.items():
            kind = kind_of(cal)
            if not kind.has_sets:
                continue
            results = kind.apply(key, copy.deepcopy(cal), outputs, cats)
            hits = kind.covered(results, labels)
            if hits is not None:
                out[key] = np.asarray(hits, dtype=np.bool_)
        return out

    def _calibration_blocks(self, blocks: Any, n: int) -> list[str] | None:
        """``calibrate(blocks=)`` checked: one key per row, a monitor with detectors, used alike each time."""
        if blocks is None:
            keys = None
        elif self._shift_spec is None:
            msg = "blocks must be None: block keys are for shift detectors, and this monitor runs none"
            raise ValueError(msg)
        else:
            keys = block_keys(blocks, n, "blocks")
        if (
            self._shift is not None
            and isinstance(self._shift_spec, str)
            and self._shift.uses_blocks != (keys is not None)
        ):
            was = "with" if self._shift.uses_blocks else "without"
            msg = (
                f"blocks: this monitor's detectors were first calibrated {was} block keys; pass blocks= "
                "on every calibrate() or on none (or start a new Monitor)"
            )
            raise ValueError(msg)
        return keys

    def _stream_blocks(self, blocks: Any, m: int) -> list[str] | None:
        """``observe(blocks=)`` checked against the detectors, before anything changes."""
        uses_blocks = self._shift is not None and self._shift.uses_blocks
        if blocks is None:
            if uses_blocks:
                msg = "blocks is required: calibrate() was given block keys, so every row needs its block key"
                raise ValueError(msg)
            return None
        if not uses_blocks:
            msg = "blocks must be None: no detector tests blocks (give calibrate() blocks= to use them)"
            raise ValueError(msg)
        keys = block_keys(blocks, m, "blocks")
        assert self._shift is not None
        self._shift.check_blocks(keys)
        return keys

    def _batch_ids(self, ids: Any, m: int) -> tuple[list[Hashable], str | None]:
        """A batch's ids (given, or the next consecutive integers) and their kind, checked.

        Refused (naming ``ids``): a wrong length, unhashable, null or NaN ids, ids repeated
        within the batch or still in the window, and ids of another kind than the monitor's
        (:func:`calwatch.core.ids.check_id_kind`). Rows without ids get the next consecutive
        integers and no kind.
        """
        kind: str | None = None  # consecutive integers are outside the id-type rule (check_id_kind)
        if ids is None:
            row_ids: list[Hashable] = list(range(self._next_auto_id, self._next_auto_id + m))
        else:
            row_ids, kind = ids_with_kind(ids)
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
        check_id_kind(self._id_kind, kind, "ids")
        clash = self._stream.first_known_id(row_ids)
        if clash is not None:
            where = self._stream.id_index[clash][0]
            msg = f"ids: {clash!r} was already observed (batch {where}, still in the window)"
            raise ValueError(msg)
        return row_ids, kind

    # ------------------------------------------------------------------ shift warnings
    @guarded
    def acknowledge(self, episode: int, note: str = "", *, by: str | None = None) -> None:
        """Acknowledge a warning (the note, who and when are kept in the log)."""
        if self._shift is None:
            msg = "there are no warnings to acknowledge: the monitor runs no shift detectors"
            raise ValueError(msg)
        self._shift.acknowledge(int(episode), note, by)
        self._notify(())

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
        """Call every listener; one that raises is reported as a warning, not as the call's error.

        The call that made the change has committed it by now: raising here would tell its caller
        (often a producer thread) that an applied ``observe`` or ``label`` failed, and a retry
        would then be refused or count twice. The other listeners still hear of the change.
        """
        for listener in list(self._listeners):
            try:
                listener(batches)
            except Exception as err:  # a view's failure must not undo or hide a commit
                msg = (
                    f"calwatch: listener {listener!r} raised {type(err).__name__}: {err} while told of "
                    f"batches {list(batches)[:10]}; the call that changed them was applied"
                )
                warnings.warn(msg, RuntimeWarning, stacklevel=2)

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

    # ------------------------------------------------------------------ charts & widget


def _is_regression(task: Any, model: Any) -> bool:
    """Whether a monitor should watch a regression model (asked for, or inferred from the model)."""
    if task is not None:
        return bool(task == "regression")
    if model is None or not callable(getattr(model, "predict", None)):
        return False
    is_torch = type(model).__module__.startswith("torch")
    return not (is_torch or hasattr(model, "predict_proba") or hasattr(model, "decision_function"))


def _describe(model: Any) -> str:
    cls = type(model)
    return f"{cls.__module__}.{cls.__qualname__}"


__all__ = [
    "DEFAULT_WINDOW",
    "TASK_MONITORS",
    "LabelReport",
    "Monitor",
    "Note",
    "default_author",
    "register_task",
]


def random_streams(objects: Any, depth: int = 2) -> list[np.random.Generator]:
    """The numpy random generators that calwatch objects (and calwatch objects they hold) draw from.

    Calibrators keep their seeded streams as attributes (e.g. a randomised APS's ``u`` draws); a
    wrapper (``cw.Adaptive``) holds its calibrator. ``depth`` bounds the walk.
    """
    found: list[np.random.Generator] = []
    for obj in objects:
        for value in getattr(obj, "__dict__", {}).values():
            if isinstance(value, np.random.Generator):
                found.append(value)
            elif depth > 1 and type(value).__module__.startswith("calwatch."):
                found.extend(random_streams([value], depth - 1))
    return found
