"""The streaming :class:`Monitor`: calibrators + stream state + delayed labels + live views."""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.core.classes import ClassEncoder, as_1d_array
from calwatch.core.guard import Guard, guard_of, guarded, guarded_urgent, guarded_yielding
from calwatch.core.models import ModelAdapter, wrap
from calwatch.core.who import default_author
from calwatch.engine._validation import PROBABILITY_SUM_TOLERANCE
from calwatch.engine.conformal.classifier import SplitConformalClassifier
from calwatch.engine.conformal.group_conditional import GroupConditionalConformal
from calwatch.engine.errors import NotFittedError
from calwatch.kinds import KINDS, kind_of
from calwatch.monitor.attach import Attach
from calwatch.monitor.autosave import AutoSave
from calwatch.monitor.intake import Intake
from calwatch.monitor.labels import LabelJoin, LabelReport
from calwatch.monitor.reads import Reads
from calwatch.monitor.share import Sharing
from calwatch.monitor.slice_fix import FixMethod, SliceFix
from calwatch.monitor.slicing import By, Slicing
from calwatch.monitor.tables import Tables
from calwatch.monitor.tasks import CLASS_LABELS, LabelValues
from calwatch.shift.base import Detector
from calwatch.shift.watch import ShiftWatch
from calwatch.stream.records import BatchRecord, StreamState
from calwatch.stream.row_log import Prefetched, RowLog

if TYPE_CHECKING:
    from pathlib import Path

    import altair as alt

    from calwatch.publish.server import DashboardServer
    from calwatch.stream.slice_counts import SliceStore
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


class GroupSetCalibrator(Protocol):
    """A set calibrator over a family of groups (``GroupConditionalConformal``), its groups from slices.

    The monitor gives it each row's groups, from the slice columns it names in ``groups_from``
    (:mod:`calwatch.stream.slice_groups`).
    """

    groups_from: tuple[str, ...] | None

    def fit(self, P_cal: Any, y_cal: Any, groups: Any) -> Any:
        """Fit on calibration probabilities, class indices and group memberships."""

    def predict_sets(self, P: Any, groups: Any) -> npt.NDArray[np.bool_]:
        """Boolean ``(m, K)`` prediction sets."""


Calibrator = SetCalibrator | GroupSetCalibrator | RiskCalibrator


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

    #: The task's side of a label (classes here; real values for a regression monitor).
    _task_labels: ClassVar[LabelValues] = CLASS_LABELS
    #: The kind of every id the monitor holds ("integers", "strings"...), fixed by its first
    #: observed rows on any path (:func:`calwatch.core.ids.check_id_kind`); None before any row, and
    #: in snapshots saved before the rule (then fixed by the next rows).
    _id_kind: str | None = None
    #: The calibration rows' confidence scores, sorted (set by ``calibrate``): a table's buckets are
    #: tested against them (:mod:`calwatch.engine.shift.bucket_tests`).
    _reference_confidence: npt.NDArray[np.float64]
    #: Whether ``calibrate(blocks=)`` said rows come in blocks (days, sessions): the slice tests,
    #: which count rows as independent, then say so (False in snapshots saved before the flag).
    _rows_in_blocks: bool = False
    #: The slice columns' encoding and counts (:mod:`calwatch.stream.slice_counts`), fixed by the first
    #: ``calibrate(meta=)``; None without slices, and in snapshots saved before them.
    _slices: SliceStore | None = None

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
            grouped = getattr(calibrator, "groups_from", None) is not None
            if getattr(calibrator, "takes_groups", False) and not grouped:
                msg = (
                    f"calibrators[{key!r}]: a {type(calibrator).__name__} in a monitor takes its groups from "
                    "slice columns: build it with groups_from=[column, ...] (the columns of calibrate(meta=))"
                )
                raise ValueError(msg)
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
        self._calibrators: dict[str, Any] = dict(calibrators)
        self._fixed_classes = None
        self._encoder: ClassEncoder | None = None
        self._stream = StreamState(int(window))
        self._listeners: list[Listener] = []
        self._widget: MonitorWidget | None = None
        self._next_auto_id = 0
        self._shift_spec = None
        self._shift: ShiftWatch | None = None
        self._notes: list[Note] = []
        self._slices = None
        self.calibration_: dict[str, Any] | None = None
        self.model_description = without_model if model is None else _describe(model)
        self.provenance: dict[str, str] = {str(k): str(v) for k, v in (provenance or {}).items()}

    def __repr__(self) -> str:
        state = "calibrated" if self.calibration_ else "not calibrated"
        return (
            f"Monitor(name={self.name!r}, calibrators={list(self._calibrators)}, {state}, "
            f"batches={len(self._stream.batches)}, rows_seen={self._stream.rows_seen})"
        )

    # ------------------------------------------------------------------ collaborators
    # Stateless helpers over this monitor's state, one per concern; the public methods below
    # hold the lock and delegate to them.
    @property
    def _intake(self) -> Intake:
        return Intake(self)

    @property
    def _labels(self) -> LabelJoin:
        return LabelJoin(self)

    @property
    def _reads(self) -> Reads:
        return Reads(self)

    @property
    def _sharing(self) -> Sharing:
        return Sharing(self)

    @property
    def _tables(self) -> Tables:
        return Tables(self)

    @property
    def _slicing(self) -> Slicing:
        return Slicing(self)

    @property
    def _slice_fix(self) -> SliceFix:
        return SliceFix(self)

    @property
    def _attach(self) -> Attach:
        return Attach(self)

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
    def _require_encoder(self) -> ClassEncoder:
        if self._encoder is None:
            msg = "the monitor is not calibrated yet: call calibrate(X, y) or calibrate(probs=..., y=...)"
            raise NotFittedError(msg)
        return self._encoder

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
        meta: Any = None,
        slice_bins: Mapping[str, Sequence[Any]] | None = None,
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
        meta : polars, pandas or pyarrow table (or dict of columns), optional
            Columns to slice the stream by (:meth:`slices`), one row per calibration row:
            numbers, text, categories, booleans, dates. Their encoding is fixed here, from
            these rows (:mod:`calwatch.stream.slices`): a number is cut at its quantiles into 5
            bins (``hour ≥ 18``) unless it has at most 10 distinct values (each kept); text
            keeps its 20 most frequent values, the rest is "other"; every column has a
            "missing" code. Every later :meth:`observe` must then pass ``meta=`` with the same
            columns. Only before the first batch; a later ``calibrate`` keeps the encoding.
        slice_bins : dict of str to sequence, optional
            Your own cut points for numeric (or date) columns of ``meta``, instead of quantiles:
            ``{"hour": [6, 12, 18]}`` gives ``hour < 6``, ``6 ≤ hour < 12``, …, ``hour ≥ 18``.

        Returns
        -------
        Monitor
            ``self``. If any calibrator fails to fit, or ``meta`` is refused (the message names
            the column), nothing changes.
        """
        return self._intake.calibrate(
            X,
            y,
            probs=probs,
            logits=logits,
            embeddings=embeddings,
            categories=categories,
            reference=reference,
            blocks=blocks,
            meta=meta,
            slice_bins=slice_bins,
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
        meta: Any = None,
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
        meta : polars, pandas or pyarrow table (or dict of columns), optional
            The batch's slice columns, one row per row, required when :meth:`calibrate` was
            given ``meta=`` (and refused when it was not): the same columns, each holding the
            same kind of values as then. Each row's codes are kept with the row, so a late
            label counts in its row's slices.

        Returns
        -------
        int
            The batch index. A rejected batch raises and leaves the monitor unchanged (a bad
            ``meta`` names its column: a wrong length, nested or unhashable values, another type
            than at calibration).
        """
        return self._intake.observe(
            X,
            probs=probs,
            logits=logits,
            embeddings=embeddings,
            ids=ids,
            y=y,
            categories=categories,
            name=name,
            blocks=blocks,
            meta=meta,
        )

    # ------------------------------------------------------------------ labels
    def label(self, ids: Any, y: Any, *, outside_classes: str = "raise") -> LabelReport:
        """Join late labels to the rows they belong to and update those batches' coverage.

        Parameters
        ----------
        ids : sequence of hashables or Series
            Ids given to :meth:`observe`.
        y : array-like
            The true label of each id.
        outside_classes : {"raise", "skip"}
            A label that is not one of the classes: ``"raise"`` (the default) refuses the whole
            call, changing nothing; ``"skip"`` applies the other labels and counts the skipped
            ones in the report's ``skipped`` and in ``status()["labels_outside_classes"]`` (a
            live feed where one bad label must not hold back a batch's labels).

        Returns
        -------
        LabelReport
            How many labels matched rows (in the window or, for rows that left it, in the row
            log); labels for unknown ids are counted in ``unmatched`` (and in :meth:`status`),
            never applied silently.

        Notes
        -----
        A second label for a row replaces the first in every count (coverage, class coverage,
        errors). The two sequential consumers treat it differently, each soundly:

        - The shift detectors keep the first label: they took the row in when it came, a
          relabel is not a new observation for them, and feeding it again would double-count
          the row in their tests (whose false-alarm bounds assume each row once).
        - ``cw.Adaptive`` takes the correction: its level is a plain sum of per-row steps,
          ``α_{T+1} = α_1 + γ Σ_t (α − err_t)``, so a row whose label changes from ``y_old`` to
          ``y_new`` moves it by ``γ (err_old − err_new)``, ``err = 1{y ∉ C}`` with ``C`` the set
          the row was shown at observe time (kept with the row, or in the row log). Nothing clips
          ``α_t``, so when the correction comes before the next :meth:`observe`, ``α_t`` (and
          every set taken afterwards) equals that of a stream that only received the final
          labels, up to float rounding; after it, ``α_t`` moves by the same amount but the sets
          taken in between were built at the uncorrected level. A relabel to the same label, or
          one whose set holds (or misses) both labels, moves nothing.

        A call that raises leaves ACI's level and the detectors as they were.

        A label whose row left the window is applied from the row log (:mod:`calwatch.stream.row_log`)
        exactly as it would have been in the window: however late a label comes, it counts.
        Those rows are read from disk before the call takes the monitor's lock (the parts are
        immutable), so a producer thread does not wait on the row log.
        """
        if outside_classes not in ("raise", "skip"):
            msg = f"outside_classes must be 'raise' or 'skip'; got {outside_classes!r}"
            raise ValueError(msg)
        prefetched = self._labels.prefetch_logged(ids)  # before the lock: the row log's parts are immutable
        return self._label_locked(ids, y, prefetched, skip_outside=outside_classes == "skip")

    @guarded_urgent
    def _label_locked(
        self, ids: Any, y: Any, prefetched: Prefetched | None, *, skip_outside: bool = False
    ) -> LabelReport:
        return self._labels.join(ids, y, prefetched, skip_outside=skip_outside)

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

    # ------------------------------------------------------------------ reads
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
        return self._reads.admitted_accuracy(by=by, batches=batches)

    @guarded
    def warnings(self) -> pl.DataFrame:
        """The shift warning log: one row per episode, with acknowledgements.

        Columns ``episode, name, threatens, statistic, threshold, false_alarm_control,
        first_batch, last_batch, first_row, last_row, open, explanation, action,
        acknowledged, ack_by, ack_at, ack_note``. Empty without shift detectors.
        """
        return self._reads.warnings()

    @guarded
    def what_if_calibrators(self) -> list[str]:
        """Set calibrators whose sets can be recomputed at another level (see :meth:`what_if`)."""
        return self._reads.what_if_calibrators()

    @guarded
    def what_if(
        self, alpha: float, calibrators: list[str] | None = None, *, batches: Iterable[int] | None = None
    ) -> pl.DataFrame:
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
        batches : iterable of int, optional
            Only these batches (default: every window batch); those not in the window are left
            out. A live view recomputes only the batches that changed since its last call: a
            batch's rows at ``alpha`` depend on nothing else.

        Returns
        -------
        polars.DataFrame
            One row per window batch and calibrator: ``batch, calibrator, alpha, target, n_rows,
            n_labelled, n_covered, coverage, coverage_lo, coverage_hi, mean_set_size,
            singleton_share``.
        """
        return self._reads.what_if(alpha, calibrators, batches=batches)

    @guarded
    def status(self) -> dict[str, int]:
        """Stream counters: rows seen, labelled, awaiting labels, batches, unmatched labels.

        ``classes_untested`` counts the (calibrator, class) pairs that a per-class detector
        cannot test (too few calibration rows; :meth:`notices` says which).
        ``detectors_on_correlated_rows`` counts the label-based detectors whose labelled rows
        look correlated (they come in runs): their row-level alarms are held back and whole
        batches decide until ``blocks=`` is given (:meth:`notices` says which and why).
        ``admitting_nothing`` counts the Venn-ADMIT calibrators that admit under 1% of rows
        (:meth:`notices` says why and what to try). ``rows_from_tables``
        counts rows observed from tables (:meth:`observe_table`, ``calwatch.scale.spark``,
        ``calwatch.scale.dask``); their unlabelled rows count in ``rows_pending``. With the row log on
        (the default), ``rows_logged`` counts rows that left the window and were kept on disk
        (their unlabelled rows count in ``rows_pending``: a label may still come),
        ``labels_from_log`` the labels applied to them, ``row_log_errors`` rows the log could not
        keep (a full disk: their labels go unmatched). Once :meth:`autosave` has run, ``autosaves``
        counts the snapshots it wrote and ``autosave_errors`` the saves that failed (the last
        error: the autosaver's ``last_error``).
        """
        return self._reads.status()

    @guarded
    def sources(self) -> str:
        """Where table batches came from, one phrase per engine (``""`` when none did).

        For example ``"spark: 1,204,331,000 rows, 365 buckets; polars: 2,000,000 rows, 30 buckets"``
        (``polars`` is :meth:`observe_table`'s engine); the widget's status line shows it.
        """
        return self._reads.sources()

    @guarded
    def notices(self) -> pl.DataFrame:
        """What the monitor does by rule rather than by the book, one row per rule applied.

        A class too rare for its own conformal threshold (``mondrian="label"`` with fewer than
        ``⌈(1−α)/α⌉`` calibration rows, or below the calibrator's ``kappa``) gets the full set:
        that class is in every set, as the per-class guarantee requires when nothing can be
        learnt about it; a class too rare for a per-class coverage test gets none. Neither is an
        error, and a user should know. Columns ``calibrator, detector`` (null for a calibrator's
        own rule), ``classes`` (how many), ``examples`` (the first few names) and ``message``.
        """
        return self._reads.notices()

    @guarded
    def targets(self) -> dict[str, float]:
        """Target coverage of each set calibrator (``1 − α``, or ``1 − ε`` for PAC sets)."""
        return self._reads.targets()

    @guarded
    def summary(self, batches: tuple[int, ...] | None = None) -> pl.DataFrame:
        """One row per batch and calibrator: coverage, set sizes, risk and label progress.

        Columns: ``batch, name, calibrator, kind, target, n_rows, n_labelled, n_pending,
        n_covered, coverage, coverage_lo, coverage_hi, mean_set_size, singleton_share,
        full_share, estimated_error, observed_error, error_gap, estimated_error_labelled,
        error_band_lo, error_band_hi, estimate_promise, alpha_level, admitted_share,
        n_admitted_labelled, admitted_accuracy, in_window, observed_at``. ``alpha_level`` is the
        level at which a set calibrator's sets were taken (its ``α``; for ``cw.Adaptive``, the ACI
        level ``α_t``). The ``admitted_*`` columns are
        Venn-ADMIT's: the share of rows whose prediction it admits, and the accuracy of the
        admitted predictions among labelled rows (null for other calibrators). Selective
        calibrators (``kind == "selective"``) fill ``kept_share, threshold, n_kept_labelled,
        kept_accuracy`` (top-label accuracy of the kept labelled rows) and ``accuracy`` (of all
        labelled rows).

        ``kind`` is ``"sets"`` (coverage of prediction sets, with a 95% Clopper-Pearson
        interval) or ``"risk"`` (a label-free estimate of the top-k error rate, known as soon
        as the batch is observed, next to the observed error rate of its labelled rows;
        ``error_gap`` is the estimate on the labelled rows minus the observed rate, paper 004's
        δ: ≥ 0 means conservative; ``estimate_promise`` says what the estimate promises:
        ``"upper estimate (conservative)"`` for InvCP, ``"calibrated estimate"`` for the
        calibration maps, ``"calibrated estimate with a 95% band"`` for the guarded one, whose
        ``error_band_lo, error_band_hi`` hold the batch's realised error rate (all its rows,
        labelled or not) with probability ≥ 95% while the batch is drawn like the calibration
        rows: an observed error outside it is evidence of a shift). Columns of the other kind
        are null, as are labelled metrics until a row of the batch is labelled.

        The whole-stream summary is kept between calls and recomputed only for the batches that
        changed since (:mod:`calwatch.core.frame_cache`): a reader polling it while a producer
        streams holds the monitor's lock for the new batches' rows, not the whole stream's.
        """
        return self._reads.summary(batches)

    @guarded
    def summary_of(self, records: Sequence[BatchRecord]) -> pl.DataFrame:
        """:meth:`summary` of some batch records (observed batches, or merged runs of them).

        Part of the read API the views use: ``records`` come from :attr:`batch_records` or
        :meth:`window_records`, possibly pooled by :func:`calwatch.stream.records.merge_records` (a bucket
        of consecutive batches drawn as one point); the statistics are counts, so a pooled
        record's summary is exactly that of all its rows.
        """
        return self._reads.summary_of(records)

    @guarded
    def set_size_counts(self, batches: tuple[int, ...] | None = None) -> pl.DataFrame:
        """Rows per set size: ``batch, calibrator, size, count`` (sizes with count > 0)."""
        return self._reads.set_size_counts(batches)

    @guarded
    def set_size_counts_of(self, records: Sequence[BatchRecord]) -> pl.DataFrame:
        """:meth:`set_size_counts` of some batch records (see :meth:`summary_of`)."""
        return self._reads.set_size_counts_of(records)

    @guarded
    def class_coverage(
        self, batches: tuple[int, ...] | None = None, *, by_batch: bool = True
    ) -> pl.DataFrame:
        """Coverage by true class, per batch or (``by_batch=False``) over the whole stream.

        Columns ``[batch,] calibrator, class, n_labelled, n_covered, coverage, coverage_lo,
        coverage_hi, target``; only classes with labelled rows appear.
        """
        return self._reads.class_coverage(batches, by_batch=by_batch)

    @guarded
    def class_coverage_of(self, records: Sequence[BatchRecord], *, by_batch: bool = True) -> pl.DataFrame:
        """:meth:`class_coverage` of some batch records (see :meth:`summary_of`)."""
        return self._reads.class_coverage_of(records, by_batch=by_batch)

    @guarded
    def slices(
        self,
        calibrator: str | None = None,
        *,
        by: By = None,
        since: int | None = None,
        min_rows: int = 30,
        level: float = 0.1,
        method: str = "bh",
    ) -> pl.DataFrame:
        """Where coverage falls short: every slice of the data tested, with a stated false discovery rate.

        A *slice* is one value of one slice column (``carrier = B6``, ``hour ≥ 18``) or one pair
        of values of two (``carrier = B6 & hour ≥ 18``), as fixed by ``calibrate(meta=)``
        (:meth:`slice_columns`). For every set calibrator and slice with at least ``min_rows``
        labelled rows, the slice's ``k`` covered of ``n`` labelled rows are tested against the
        null "its coverage is at least the target ``t = 1 − α``" by the exact one-sided
        binomial test, ``p = P(Bin(n, t) ≤ k)`` (valid at every ``n``: no approximation); the
        slices whose p-values a Benjamini–Hochberg step-up rejects at ``level`` are ``flagged``.

        What is controlled: the false discovery rate, the expected share of flagged (calibrator,
        slice) pairs whose coverage is in fact at least their target, at most ``level``, over the
        family of the tests this call makes (the ``n_tested`` slices it returns). The coverage
        tested is that of the rows the stream sent, with the calibrators as fitted (a calibrator
        that falls short overall makes every large slice short, and those flags are true).

        Dependence: slices overlap (a row lies in one slice of each column and each pair). Given
        which rows are labelled and in which slices, the covered indicators of the rows are
        independent and every p-value falls as any of them rises, so the p-values are positively
        associated, the case BH is used for; its proof needs positive regression dependence
        (PRDS), which association does not imply in general. ``method="by"`` (Benjamini–Yekutieli)
        controls the FDR under any dependence, at about ``ln(n_tested) + 0.58`` times the
        p-value threshold. The Monte Carlo check on real data is
        ``tests/validity/test_slice_discovery.py``.

        One look, or any: the p-values are fixed-sample. Reading the frame again as the stream
        grows, and acting on any flag seen on the way, is several looks, which BH on them does
        not cover. ``method="e-bh"`` does: each slice's ``e_value`` is a test supermartingale in
        its labelled rows (a mixture of likelihood ratios against shortfalls of 0.01 to 0.4,
        :func:`~calwatch.engine.metrics.discovery.shortfall_e_values`), and e-BH over them
        controls the FDR under any dependence at whatever moment the frame is read and acted on
        (with ``since=`` fixed in advance), for some power at one planned look.

        Parameters
        ----------
        calibrator : str, optional
            One set calibrator (default: every one; kinds without sets, risk estimators and
            selective calibrators, keep no slice counts and are refused by name).
        by : str, tuple of two str, or list of them, optional
            The slices looked at: a column's name (its values), a pair of columns as a tuple
            (the pairs of values; a pair is counted only within the memory budget of
            :mod:`calwatch.stream.slices`), or a list of those. Default: every column and every
            counted pair. The family, and so the correction, is what is looked at.
        since : int, optional
            Count batches from this one on. Counts are kept per epoch of batches (the newest
            one by one, older ones pooled in epochs of 2, 4, 8… batches), so ``since`` inside an
            epoch counts from that epoch's start: ``first_batch`` says where counting began.
        min_rows : int
            Slices with fewer labelled rows are not tested (nor counted in the family).
        level : float
            The FDR level ``q`` (default 0.1).
        method : {"bh", "by", "e-bh"}
            Benjamini–Hochberg (default) or Benjamini–Yekutieli on the p-values, or e-BH on the
            anytime-valid e-values (re-read as the stream grows without inflating the FDR).

        Returns
        -------
        polars.DataFrame
            One row per (calibrator, slice) tested, strongest evidence first (smallest p-value;
            largest e-value for ``method="e-bh"``): ``calibrator``,
            ``slice`` (in words), ``by`` (its column or pair), ``n_rows``, ``n_labelled``,
            ``n_covered``, ``coverage`` with its exact 95% Clopper–Pearson interval
            ``coverage_lo``/``coverage_hi``, ``target``, ``mean_set_size``, ``p_value``,
            ``e_value`` (anytime-valid evidence of a shortfall: large is strong), ``q_value``
            (the adjusted value under ``method``: the smallest level that flags it), ``flagged``;
            and the family the control is stated over, the same in every row: ``fdr_method``,
            ``fdr_level``, ``n_tested``, ``first_batch``, ``last_batch`` and ``family`` (in words).

        Raises
        ------
        ValueError
            If the monitor keeps no slices (calibrated without ``meta=``), or an argument names
            no set calibrator or slice column, or is out of range.
        """
        return self._slicing.slices(
            calibrator, by=by, since=since, min_rows=min_rows, level=level, method=method
        )

    @guarded
    def slice_columns(self) -> pl.DataFrame:
        """The slice columns' codes in words, as fixed by ``calibrate(meta=)``.

        Columns ``column``, ``family`` (number, bool, text, date, datetime), ``code``, ``slice``
        (``"hour ≥ 18"``, ``"carrier = B6"``, ``"carrier: other"``, ``"carrier: missing"``) and
        ``paired_with`` (the columns it is counted in pairs with).

        Raises
        ------
        ValueError
            If the monitor keeps no slices.
        """
        return self._slicing.slice_columns()

    @guarded
    def slice_calibrator(
        self,
        by: str | Sequence[str],
        *,
        calibrator: str | None = None,
        alpha: float | None = None,
        method: FixMethod | None = None,
        probs: Any = None,
        y: Any = None,
        meta: Any = None,
    ) -> SplitConformalClassifier | GroupConditionalConformal:
        """A calibrator whose promise holds within every value of the slice column(s) ``by``: fix in one step.

        Fitted on the monitor's own calibration rows with their slice columns (kept by
        ``calibrate(meta=)``), with the score, level and options of ``calibrator``, it is ready
        to preview (:meth:`what_if_slices`) and to use in a monitor: it carries ``groups_from``,
        so ``Monitor(calibrators={..., "by_hour": cal})`` derives each row's groups from
        ``meta=`` at calibration and on every batch (:mod:`calwatch.monitor.slice_fix`).

        Parameters
        ----------
        by : str or sequence of str
            Slice columns (those of :meth:`slice_columns`), e.g. the column of a flagged slice.
        calibrator : str, optional
            The split conformal calibrator whose score and options to keep (default: the first).
        alpha : float, optional
            Miscoverage level (default: that calibrator's). The promise is ``≥ 1 − alpha``
            within every value (every group).
        method : {"mondrian", "group_conditional"}, optional
            ``"mondrian"`` (default for one column): split conformal within each value of the
            column (each pair of values for two columns), a
            :class:`~calwatch.engine.conformal.classifier.SplitConformalClassifier` with
            ``groups_from=by``. ``"group_conditional"`` (default for several columns): one group
            per value of each column, overlapping across columns, a
            :class:`~calwatch.engine.conformal.group_conditional.GroupConditionalConformal`
            (sets at least as large as Mondrian's on no finer a partition; see its docstring).
        probs, y, meta : optional
            Calibration rows to fit on instead of the kept ones (all three, or none): needed
            when the monitor did not keep them (more than ``2**22`` probabilities, or a
            snapshot saved before they were kept).

        Returns
        -------
        SplitConformalClassifier or GroupConditionalConformal
            Fitted. Its promise is for new rows exchangeable with the calibration rows; the
            slices were flagged on the stream's rows, so the fit reuses none of them.

        Raises
        ------
        ValueError
            No slices, a column that is not a slice column, no split conformal calibrator, or
            no calibration rows to fit on (naming what to pass).

        Examples
        --------
        >>> flagged = mon.slices().filter("flagged")  # doctest: +SKIP
        >>> by_hour = mon.slice_calibrator("hour")  # doctest: +SKIP
        >>> mon.what_if_slices(by_hour)  # doctest: +SKIP
        """
        return self._slice_fix.slice_calibrator(
            by, calibrator=calibrator, alpha=alpha, method=method, probs=probs, y=y, meta=meta
        )

    @guarded
    def attach(self, name: str, calibrator: Any) -> None:
        """Add a fitted set calibrator to a monitor that has already streamed, with its whole history.

        Every batch's statistics for it are computed from the batch's rows (probabilities, ids,
        labels, slice codes) as ``observe`` and ``label`` would have, and the slice counts gain
        its coverage, so ``summary()``, ``slices()`` and ``rows()`` are those of a monitor built
        with it and fed the same stream. The step after :meth:`slice_calibrator` and
        :meth:`what_if_slices` (:mod:`calwatch.monitor.attach`).

        Parameters
        ----------
        name : str
            Its name (not one of :attr:`calibrators`).
        calibrator : calibrator
            A fitted set-valued calibrator; with ``groups_from=``, its groups come from each
            row's slice codes.

        Raises
        ------
        ValueError
            A batch whose rows are no longer in memory (it left the window, or came from a
            table): start a monitor with the calibrator instead; a name taken; a calibrator that
            changes as labels arrive (``cw.Adaptive``); slice columns the monitor lacks.
        TypeError
            Not a set calibrator of a classifier.

        Notes
        -----
        The attached calibrator gets no shift detectors (those were fitted at ``calibrate``):
        its coverage is counted and shown, not tested for drift.
        """
        self._attach.attach(name, calibrator)

    @guarded
    def what_if_slices(
        self,
        candidate: Any,
        *,
        by: str | Sequence[str] | None = None,
        name: str = "candidate",
        calibrators: Sequence[str] | None = None,
    ) -> pl.DataFrame:
        """Coverage by slice on the window's labelled rows: the monitor's calibrators and a candidate.

        Shows the effect of a calibrator (e.g. one from :meth:`slice_calibrator`) where the
        slices were flagged, before anything is attached: the window's labelled rows are scored
        by the candidate (their groups from their slice codes) and compared with the sets the
        monitor's calibrators gave them. Rows that left the window are not in it.

        Parameters
        ----------
        candidate : calibrator
            A fitted set-valued calibrator (with ``groups_from=``, its groups come from the
            rows' slice codes).
        by : str or sequence of str, optional
            The slice column(s) to compare on (default: the candidate's first ``groups_from``
            column; two columns give their pairs of values).
        name : str
            The candidate's name in the frame.
        calibrators : sequence of str, optional
            The monitor's set calibrators to compare with (default: all).

        Returns
        -------
        polars.DataFrame
            One row per (calibrator, slice): ``calibrator, candidate, slice, target, n_labelled,
            n_covered, coverage, coverage_lo, coverage_hi, mean_set_size`` (the interval is
            Clopper–Pearson at 95%).
        """
        return self._slice_fix.what_if_slices(candidate, by=by, name=name, calibrators=calibrators)

    @guarded
    def rows(self, window: int | None = None, *, batch: int | None = None) -> pl.DataFrame:
        """Raw rows still kept in the window, one per row.

        Columns ``batch, id, prediction, confidence, label`` and, per calibrator, ``set_<name>``
        (list of classes), ``size_<name>`` and ``covered_<name>`` (null until labelled); risk
        estimators add ``risk_<name>``; Venn-ADMIT adds ``y_hat_<name>`` (the KNN prediction),
        ``q_<name>``, ``d_<name>``, ``admitted_<name>``, ``p_lower_<name>``, ``p_upper_<name>``;
        selective calibrators add ``score_<name>`` and ``kept_<name>``. A monitor calibrated with
        ``meta=`` adds, last, one String column ``slice_<column>`` per slice column: the row's
        value in the words of its slice (``"carrier = B6"``, ``"15 ≤ hour < 18"``,
        ``"carrier: other"``, ``"carrier: missing"``), as the ``slice`` column of :meth:`slices`
        names single-column slices.

        Parameters
        ----------
        window : int, optional
            Only the most recent ``window`` rows.
        batch : int, optional
            Only the rows of this batch (it must still be in the window).
        """
        return self._reads.rows(window, batch=batch)

    # ------------------------------------------------------------------ tables out of core
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
        meta : list of str, optional
            The table's slice columns, required when :meth:`calibrate` was given ``meta=`` (and
            refused when it was not): the same columns, each holding the same kind of values as
            then. Each chunk's columns are encoded with the monitor's fixed encoding, and each
            batch gets the exact slice counts (rows, labelled, covered, set-size sums per cell)
            that :meth:`observe` with ``meta=`` would give its rows: integers, summed over the
            chunks, so no rounding. :meth:`label_table` encodes a labelled row's columns again.
        chunk_rows : int
            Rows read at a time.
        progress : bool, optional
            Show a progress bar (default: when the read takes more than two seconds).

        Returns
        -------
        tuple of int
            The new batches' indices. A rejected table (a missing column, probabilities that
            do not fit the monitor, a repeated id, no ``meta=`` for a monitor that slices, a
            slice column of another type than at calibration...) raises naming the column
            and leaves the monitor unchanged, its slice counts included.

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
        return self._tables.observe_table(
            source,
            id=id,
            probs=probs,
            bucket=bucket,
            label=label,
            category=category,
            meta=meta,
            chunk_rows=chunk_rows,
            progress=progress,
        )

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
        change. For a monitor that slices, each labelled row's slice columns are read again
        from the observed table and encoded as at :meth:`observe_table`, so the slice counts
        (:meth:`slices`) move exactly as :meth:`label` moves them in memory (a relabel takes
        the old label's counts away).

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
        return self._tables.label_table(source, id=id, label=label, chunk_rows=chunk_rows, progress=progress)

    # ------------------------------------------------------------------ keeping and showing
    @guarded
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Save the monitor to a snapshot folder (parquet + JSON, no pickle), atomically.

        Everything but the model is kept: calibrators' fitted state, per-batch statistics, the
        raw rows of the window, shift detectors, the warning log and notes (for a regression
        monitor: its levels, the base predictions and random draws of the window's rows, and
        their true values). Reload it with :meth:`Monitor.load`, passing the model again to keep
        streaming inputs.
        """
        return self._sharing.save(path)

    def autosave(
        self,
        path: str | os.PathLike[str],
        *,
        every_batches: int | None = 1,
        every_seconds: float | None = 5.0,
    ) -> AutoSave:
        """Keep a snapshot at ``path`` current as the stream goes (:mod:`calwatch.monitor.autosave`).

        The snapshot is written now, then by :meth:`save` (atomic) after the observe or label
        call that makes it due: once ``every_batches`` batches have been observed since the last
        save, and at most ``every_seconds`` after any unsaved change (labels, notes included).
        The calls themselves never hold the lock while a save waits, and a failing save never
        breaks them: ``status()["autosave_errors"]`` counts failures and the returned
        autosaver's ``last_error`` says what failed. A second call replaces the first autosaver;
        :meth:`stop_autosave` stops it. ``calwatch serve PATH`` shows the snapshot live.

        Parameters
        ----------
        path : path-like
            The snapshot folder.
        every_batches : int or None
            Batches between saves (``None``: save on time only).
        every_seconds : float or None
            The longest a change waits unsaved (``None``: save on batches only).

        Returns
        -------
        AutoSave
            The autosaver (``saves``, ``errors``, ``last_error``, ``stop()``).

        Raises
        ------
        ValueError, TypeError
            If an argument is out of range or of the wrong type (the message names it).
        SnapshotError
            If the first snapshot cannot be written (e.g. ``path`` is a folder that is not a
            snapshot): the earlier autosaver, if any, goes on.
        """
        return self._sharing.autosave(path, every_batches=every_batches, every_seconds=every_seconds)

    def stop_autosave(self, *, save: bool = True) -> None:
        """Stop autosaving (after saving a change still unsaved, unless ``save=False``)."""
        return self._sharing.stop_autosave(save=save)

    def serve(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        every_batches: int | None = 1,
        every_seconds: float | None = 5.0,
    ) -> DashboardServer:
        """Serve a live, read-only dashboard of this monitor to any browser (:mod:`calwatch.publish.server`).

        The monitor autosaves to ``path`` (:meth:`autosave`, unless it already autosaves there)
        and a server in a background thread shows that snapshot, updated in every open page
        within a second of each save. Open ``server.url`` (it carries a random token; requests
        without it get 403); ``server.stop()`` stops it and leaves the snapshot as it is.

        Parameters
        ----------
        path : path-like, optional
            The snapshot folder (default: the folder this monitor already autosaves to).
        host : str
            Address to listen on (default ``127.0.0.1``: this machine only).
        port : int
            Port (default 0: a free one).
        token : str, optional
            The access token (default: a random one, :func:`secrets.token_urlsafe`).
        every_batches, every_seconds
            The autosave policy when autosaving starts here (see :meth:`autosave`).

        Returns
        -------
        DashboardServer
            The running server (``url``, ``stop()``).

        Raises
        ------
        ValueError
            If ``path`` is None and the monitor does not autosave.
        """
        return self._sharing.serve(
            path, host=host, port=port, token=token, every_batches=every_batches, every_seconds=every_seconds
        )

    @guarded
    def report(self, path: str | os.PathLike[str]) -> Path:
        """Write a standalone HTML report (every panel, warnings, notes, configuration, provenance).

        The file opens in any browser with no kernel and no network.
        """
        return self._sharing.report(path)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], *, model: Any = None, embedding_layer: str | None = None
    ) -> Monitor:
        """Load a snapshot written by :meth:`save` (verifying it first; no code is executed).

        A snapshot of a regression monitor loads as a
        :class:`~calwatch.monitor.regression.RegressionMonitor`.

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
        return Sharing.load(cls, path, model=model, embedding_layer=embedding_layer)

    def chart(self, kind: str = "coverage") -> alt.Chart | alt.LayerChart:
        """An Altair chart of the stream so far.

        ``kind`` is one of ``"coverage"``, ``"class_coverage"``, ``"set_size"``,
        ``"set_shares"``, ``"set_sizes"``, ``"labels"``. In a notebook it shows as an SVG (and a
        PNG) drawn in the kernel, so an executed notebook keeps it wherever it is read, offline
        and untrusted included (:func:`calwatch.publish.notebook_output.offline_chart`); Altair's own
        renderer is left alone.
        """
        return self._sharing.chart(kind)

    def widget(self) -> MonitorWidget:
        """The live widget of this monitor (one per monitor; display it as often as you like)."""
        return self._sharing.widget()

    def show(self, *, sidebar: bool = False, title: str | None = None) -> None:
        """Display the live widget inline, or in a JupyterLab side panel (``sidebar=True``).

        Inline, a static copy of the dashboard follows the widget as a second output
        (:mod:`calwatch.publish.notebook_output`): hidden while the live view is drawn next to it,
        refreshed when a cell that changed the stream ends, and what an exported, shared or
        untrusted notebook shows in the widget's place. A side panel is not part of the notebook,
        so it gets none.
        """
        return self._sharing.show(sidebar=sidebar, title=title)


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
