"""The regression monitor: calibrated predictive distributions on a stream, labels late or never.

``cw.Monitor(model, task="regression", calibrators={...})`` (or a model with ``predict`` and no
``predict_proba``) builds a :class:`RegressionMonitor`. Its calibrators are
:class:`~calwatch.engine.regression.calibrator.ModularConformalCalibrator` (paper 001): each turns the
model's base prediction of a row (a point, an interval, quantiles, a distribution or an
ensemble) into a calibrated CDF. Per batch the monitor keeps the width of the central credible
intervals; when labels arrive, the rows' PIT values ``F(y | x)``, whether each interval covered
its label, and the CRPS. Raw rows (base predictions, the random interpolation's draws, labels)
stay for a window so late labels are scored with exactly the CDF the row was shown.

Regression monitors save and load as snapshots like classification monitors
(:meth:`~calwatch.monitor.monitor.Monitor.save`, :meth:`~calwatch.monitor.monitor.Monitor.load`,
:mod:`calwatch.snapshot.store`): a loaded copy gives the same views, scores late labels of the window's
rows exactly as the original would, and keeps streaming.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.core.guard import guarded, guarded_yielding
from calwatch.core.ids import uniform_scalar_ids
from calwatch.engine.metrics.intervals import clopper_pearson
from calwatch.kinds import kind_of
from calwatch.kinds.regression import (
    PIT_BINS,
    RegressionBatchStats,
    RegressionKind,
    RegressionOutputs,
    pct,
)
from calwatch.monitor.monitor import DEFAULT_WINDOW, Monitor
from calwatch.monitor.tasks import VALUE_LABELS, LabelValues, true_values
from calwatch.stream.records import BatchRecord, BatchRows

FloatArray = npt.NDArray[np.float64]
#: Central credible levels whose intervals are tracked (the widest is the headline one).
DEFAULT_LEVELS = (0.5, 0.9)


class RegressionMonitor(Monitor):
    """Watch whether a regression model's calibrated predictive distributions keep their promise.

    Parameters
    ----------
    model : optional
        A regressor with ``predict(X)`` (its output is the base prediction: a point for most
        scikit-learn models), or a callable ``X -> base prediction``. ``None``: pass ``pred=``.
    calibrators : dict of str to ModularConformalCalibrator, optional
        Default: ``{"mcc": ModularConformalCalibrator(prediction="point")}``.
    levels : tuple of float
        Central credible levels tracked per row (default 0.5 and 0.9; the last is the headline).
    window : int
        Raw rows kept for late labels.
    name : str
        Shown in the widget and reports.
    provenance : dict of str to str, optional
        Where the data and model come from.

    Examples
    --------
    >>> import calwatch as cw
    >>> mon = cw.Monitor(task="regression")
    >>> type(mon).__name__
    'RegressionMonitor'
    """

    task = "regression"

    #: Labels are true values (floats), joined by the same path as classes (:mod:`calwatch.monitor.tasks`).
    _task_labels: ClassVar[LabelValues] = VALUE_LABELS

    def __init__(
        self,
        model: Any = None,
        calibrators: Mapping[str, Any] | None = None,
        *,
        levels: tuple[float, ...] = DEFAULT_LEVELS,
        window: int = DEFAULT_WINDOW,
        name: str = "calwatch",
        provenance: Mapping[str, str] | None = None,
        shift: Any = None,
        task: str = "regression",
        **unused: Any,
    ) -> None:
        from calwatch.engine.regression.calibrator import ModularConformalCalibrator

        if unused:
            msg = f"a regression monitor does not take {sorted(unused)}"
            raise TypeError(msg)
        if task != "regression":
            msg = f"task must be 'regression' for a RegressionMonitor; got {task!r}"
            raise ValueError(msg)
        if shift is not None:
            msg = "shift detectors are not available for regression monitors yet: pass shift=None"
            raise ValueError(msg)
        if calibrators is None:
            calibrators = {"mcc": ModularConformalCalibrator(prediction="point")}
        if not isinstance(calibrators, Mapping) or not calibrators:
            msg = "calibrators must be a non-empty dict of name -> ModularConformalCalibrator"
            raise TypeError(msg)
        for key, cal in calibrators.items():
            if not (isinstance(key, str) and key and callable(getattr(cal, "predict_rows", None))):
                msg = (
                    f"calibrators[{key!r}] must be a ModularConformalCalibrator (fit(pred, y), "
                    f"predict_rows(pred, y)); got {type(cal).__name__}"
                )
                raise TypeError(msg)
        checked = tuple(float(level) for level in levels)
        if (
            not checked
            or any(not 0.0 < level < 1.0 for level in checked)
            or list(checked) != sorted(set(checked))
        ):
            msg = f"levels must be increasing values in (0, 1); got {levels!r}"
            raise ValueError(msg)
        check_regressor(model)
        self._init_state(
            calibrators,
            window=window,
            name=name,
            model=model,
            provenance=provenance,
            without_model="none (precomputed predictions)",
        )
        self._adapter = None
        self._model = model
        self.levels = checked
        self._draws = np.random.default_rng(0)

    # ------------------------------------------------------------------ inputs
    def _predictions(self, X: Any, pred: Any) -> Any:
        if (X is None) == (pred is None):
            msg = "pass either X (inputs for the model) or pred= (its base predictions)"
            raise ValueError(msg)
        if pred is not None:
            return pred
        if self._model is None:
            msg = (
                "X was given but the monitor has no model: pass pred= instead, or Monitor(model, "
                "task='regression'), or Monitor.load(path, model=model) for a saved monitor"
            )
            raise ValueError(msg)
        predict = getattr(self._model, "predict", None)
        return predict(X) if callable(predict) else self._model(X)

    def _is_ensemble(self, pred: Any) -> bool:
        """Whether ``pred`` is a list of member predictions (for ensemble calibrators)."""
        return isinstance(pred, (list, tuple)) and any(
            getattr(cal, "prediction", None) == "ensemble" for cal in self._regressors().values()
        )

    def _n_rows(self, pred: Any) -> int:
        first = pred[0] if self._is_ensemble(pred) and len(pred) else pred
        n_rows = getattr(first, "n_rows", None)  # a CDFPrediction knows its rows
        if n_rows is None:
            shape = np.shape(first)
            if not shape:
                msg = f"pred must hold one base prediction per row; got {type(first).__name__}"
                raise ValueError(msg)
            n_rows = shape[0]
        return int(n_rows)

    def _kept(self, pred: Any) -> Any:
        """The base predictions kept for the window: float64 arrays (a list of them for ensembles).

        Distributions given as a :class:`~calwatch.engine.regression.scores.CDFPrediction` are
        kept as they are (they are callables: such a monitor cannot be saved).
        """
        if self._is_ensemble(pred):
            return [self._kept_member(p) for p in pred]
        return self._kept_member(pred)

    @staticmethod
    def _kept_member(pred: Any) -> Any:
        if callable(getattr(pred, "cdf", None)):
            return pred
        return np.array(pred, dtype=np.float64)  # a copy: the caller may reuse its array

    @property
    def classes_(self) -> npt.NDArray[Any]:
        """Regression has no classes (an empty array)."""
        return np.array([], dtype=object)

    def _regressors(self) -> dict[str, Any]:
        return dict(self._calibrators)

    @guarded
    def targets(self) -> dict[str, float]:
        """Target coverage of each calibrator's headline interval (its level)."""
        return dict.fromkeys(self._calibrators, self.levels[-1])

    @guarded
    def what_if_calibrators(self) -> list[str]:
        """None: a regression monitor recomputes nothing at another level (see ``levels``)."""
        return []

    # ------------------------------------------------------------------ calibrate
    @guarded
    def calibrate(
        self, X: Any = None, y: Any = None, *, pred: Any = None, **unused: Any
    ) -> RegressionMonitor:
        """Fit every calibrator on labelled calibration rows (``X`` through the model, or ``pred=``).

        Returns
        -------
        RegressionMonitor
            ``self``. If any calibrator fails to fit, nothing changes.
        """
        if unused:
            msg = f"a regression monitor's calibrate() does not take {sorted(unused)}"
            raise TypeError(msg)
        if y is None:
            msg = "y is required: the true values of the calibration rows"
            raise ValueError(msg)
        base = self._predictions(X, pred)
        fitted = {key: copy.deepcopy(cal).fit(base, y) for key, cal in self._regressors().items()}
        self._calibrators = fitted
        values = np.asarray(y, dtype=np.float64)
        self.calibration_ = {
            "n_rows": int(values.shape[0]),
            "y_range": [float(values.min()), float(values.max())],
            "calibrated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        if self._widget is not None:
            self._widget.refresh_layout()
        return self

    # ------------------------------------------------------------------ observe
    @guarded_yielding
    def observe(
        self,
        X: Any = None,
        *,
        pred: Any = None,
        ids: Any = None,
        y: Any = None,
        name: str | None = None,
        **unused: Any,
    ) -> int:
        """Run a batch through the model and every calibrator, and record it.

        Returns
        -------
        int
            The batch index. A rejected batch raises and leaves the monitor unchanged.
        """
        if unused:
            msg = f"a regression monitor's observe() does not take {sorted(unused)}"
            raise TypeError(msg)
        if self.calibration_ is None:
            msg = "the monitor is not calibrated yet: call calibrate(X, y) or calibrate(pred=..., y=...)"
            from calwatch.engine.errors import NotFittedError

            raise NotFittedError(msg)
        base = self._predictions(X, pred)
        m = self._n_rows(base)
        if m == 0:
            msg = "the batch is empty: a batch needs at least one row"
            raise ValueError(msg)
        row_ids, id_kind = self._intake.batch_ids(ids, m)
        values = None if y is None else true_values(y, m)
        draws = copy.deepcopy(self._draws)  # advanced only once the batch is accepted
        # One shared copy of the batch's base predictions is kept for the window.
        outputs = RegressionOutputs(base, self._kept(base), self.levels, draws)
        rows = BatchRows(
            ids=row_ids, probs=np.zeros((m, 0)), packed_sets={}, labels=np.full(m, -1, dtype=np.intp),
            regression={"y": np.full(m, np.nan), "per_calibrator": {}, "levels": self.levels},
        )  # fmt: skip
        stats: dict[str, Any] = {}
        for key, cal in self._regressors().items():
            kind = kind_of(cal)
            results = kind.apply(key, cal, outputs, None)
            stats[key] = kind.observed(results, 0)
            kind.keep(rows, key, results)
        index = len(self._stream.batches)
        record = BatchRecord(
            index=index,
            name=str(index) if name is None else str(name),
            observed_at=datetime.now(UTC),
            n_rows=m,
            stats=stats,
            rows=rows,
        )
        newly = 0
        if values is not None:
            record.stats, newly, _ = self._labels.labelled_stats(record, np.arange(m), values)
            assert record.rows is not None
            record.rows.regression["y"][:] = values
            record.rows.labels[:] = 0  # marks the rows as labelled for the generic counters
        # Everything is computed: commit.
        if ids is None:
            self._next_auto_id += m
        self._id_kind = self._id_kind or id_kind
        self._draws = draws
        self._stream.append(record)
        self._stream.rows_labelled += newly
        self._notify((index,))
        return index

    # ------------------------------------------------------------------ views
    @guarded
    def summary(self, batches: tuple[int, ...] | None = None) -> pl.DataFrame:
        """One row per batch and calibrator.

        Columns ``batch, name, calibrator, kind ("regression"), target, n_rows, n_labelled,
        n_pending, n_covered, coverage, coverage_lo, coverage_hi`` (of the headline interval,
        95% Clopper-Pearson), ``mean_width`` (headline), ``mean_width_<pct>`` and
        ``coverage_<pct>`` per level, ``crps`` (mean over labelled rows), ``in_window``,
        ``observed_at``.
        """
        return self.summary_of(self._reads.records(batches))

    @guarded
    def summary_of(self, records: Sequence[BatchRecord]) -> pl.DataFrame:
        """:meth:`summary` of some batch records (see :meth:`Monitor.summary_of`)."""
        rows: list[dict[str, Any]] = []
        head = pct(self.levels[-1])
        for record in records:
            for key, stats in _regression_stats(record).items():
                n_lab = stats.n_labelled
                covered = (
                    stats.covered if stats.covered.shape[0] else np.zeros(len(self.levels), dtype=np.int64)
                )
                row: dict[str, Any] = {
                    "batch": record.index, "name": record.name, "calibrator": key, "kind": "regression",
                    "target": self.levels[-1], "n_rows": record.n_rows, "n_labelled": n_lab,
                    "n_covered": int(covered[-1]), "crps": stats.crps_sum / n_lab if n_lab else None,
                    "in_window": record.rows is not None, "observed_at": record.observed_at,
                }  # fmt: skip
                for i, level in enumerate(self.levels):
                    row[f"mean_width_{pct(level)}"] = float(stats.width_sum[i]) / record.n_rows
                    row[f"coverage_{pct(level)}"] = int(covered[i]) / n_lab if n_lab else None
                rows.append(row)
        frame = pl.DataFrame(rows, infer_schema_length=None) if rows else self._empty_summary()
        lo, hi = clopper_pearson(frame["n_covered"].to_numpy(), frame["n_labelled"].to_numpy())
        return frame.with_columns(
            n_pending=pl.col("n_rows") - pl.col("n_labelled"),
            coverage=pl.col(f"coverage_{head}"),
            coverage_lo=pl.Series(lo, dtype=pl.Float64).fill_nan(None),
            coverage_hi=pl.Series(hi, dtype=pl.Float64).fill_nan(None),
            mean_width=pl.col(f"mean_width_{head}"),
        )

    def _empty_summary(self) -> pl.DataFrame:
        schema: dict[str, Any] = {
            "batch": pl.Int64, "name": pl.String, "calibrator": pl.String, "kind": pl.String,
            "target": pl.Float64, "n_rows": pl.Int64, "n_labelled": pl.Int64, "n_covered": pl.Int64,
            "crps": pl.Float64, "in_window": pl.Boolean, "observed_at": pl.Datetime("us", "UTC"),
        }  # fmt: skip
        for level in self.levels:
            schema[f"mean_width_{pct(level)}"] = pl.Float64
            schema[f"coverage_{pct(level)}"] = pl.Float64
        return pl.DataFrame(schema=schema)

    @guarded
    def pit_histogram(self, batches: tuple[int, ...] | None = None) -> pl.DataFrame:
        """PIT values of labelled rows, binned per batch: ``batch, calibrator, bin, lo, hi, count``."""
        return self.pit_histogram_of(self._reads.records(batches))

    @guarded
    def pit_histogram_of(self, records: Sequence[BatchRecord]) -> pl.DataFrame:
        """:meth:`pit_histogram` of some batch records (see :meth:`Monitor.summary_of`)."""
        out: dict[str, list[Any]] = {
            "batch": [],
            "calibrator": [],
            "bin": [],
            "lo": [],
            "hi": [],
            "count": [],
        }
        for record in records:
            for key, stats in _regression_stats(record).items():
                for b, count in enumerate(stats.pit_counts.tolist()):
                    if count:
                        out["batch"].append(record.index)
                        out["calibrator"].append(key)
                        out["bin"].append(b)
                        out["lo"].append(b / PIT_BINS)
                        out["hi"].append((b + 1) / PIT_BINS)
                        out["count"].append(count)
        schema: dict[str, Any] = {
            "batch": pl.Int64, "calibrator": pl.String, "bin": pl.Int64, "lo": pl.Float64, "hi": pl.Float64,
            "count": pl.Int64,
        }  # fmt: skip
        return pl.DataFrame(out, schema=schema)

    @guarded
    def rows(self, window: int | None = None, *, batch: int | None = None) -> pl.DataFrame:
        """Raw rows in the window, with each calibrator's median, intervals and (labelled) PIT.

        Columns ``batch, id, label`` and per calibrator ``median_<name>``, ``lower_<pct>_<name>``
        / ``upper_<pct>_<name>`` per level, and ``pit_<name>`` once labelled.
        """
        records = self._stream.window_batches()
        if batch is not None:
            records = [r for r in records if r.index == batch]
            if not records:
                msg = f"batch {batch} is not in the window (its raw rows were dropped or never existed)"
                raise ValueError(msg)
        frames = []
        for record in records:
            assert record.rows is not None
            store = record.rows.regression
            y = store["y"]
            ids = record.rows.ids
            columns: dict[str, Any] = {
                "batch": np.full(record.n_rows, record.index),
                "id": ids if uniform_scalar_ids(ids) else pl.Series("id", ids, dtype=pl.Object),
                "label": [None if np.isnan(v) else float(v) for v in y],
            }
            labelled = np.flatnonzero(~np.isnan(y))
            for key, cal in self._regressors().items():
                saved = store["per_calibrator"][key]
                columns[f"median_{key}"] = saved["median"]
                for level in self.levels:
                    columns[f"lower_{pct(level)}_{key}"] = saved[f"lower_{pct(level)}"]
                    columns[f"upper_{pct(level)}_{key}"] = saved[f"upper_{pct(level)}"]
                pit = np.full(record.n_rows, np.nan)
                if labelled.shape[0]:
                    kind = kind_of(cal)
                    assert isinstance(kind, RegressionKind)  # a regression monitor takes no other kind
                    results = kind.results_of(record.rows, key, cal).take(labelled)
                    pit[labelled] = kind.score(results, y[labelled])["pit"]
                columns[f"pit_{key}"] = [None if np.isnan(v) else float(v) for v in pit]
            frames.append(pl.DataFrame(columns))
        if not frames:
            return pl.DataFrame()
        out = pl.concat(frames, how="vertical_relaxed")
        return out if window is None else out.tail(int(window))


def check_regressor(model: Any) -> None:
    """Raise unless ``model`` is None, has ``predict(X)`` or is callable (what a regression monitor runs)."""
    if model is not None and not (callable(getattr(model, "predict", None)) or callable(model)):
        msg = f"model must have predict(X) or be callable; got {type(model).__name__}"
        raise TypeError(msg)


def _regression_stats(record: BatchRecord) -> dict[str, RegressionBatchStats]:
    out: dict[str, Any] = record.stats
    return out
