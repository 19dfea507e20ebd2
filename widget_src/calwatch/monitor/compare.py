"""Compare two runs: overlay two monitors (or snapshots) on the same panels.

``cw.compare(a, b)`` builds a read-only monitor of the runs' task whose calibrators are both
runs' calibrators, renamed ``"<run>: <name>"``, and whose batches hold both runs' per-batch
statistics side by side (batch ``i`` of one run next to batch ``i`` of the other). Every
per-batch panel (coverage, sets, class coverage, risk, admitted and kept shares, shift
statistics; for regression interval coverage, width and the PIT histogram) then draws the two
runs as separate series, and the warning logs are merged.

Classification: raw rows are not merged (they belong to different models or calibration sets),
so panels that read the raw-row window (reliability, what-if) are empty in a comparison.
Regression: a batch's raw rows are merged when both runs still hold them for the same ids in
the same order with no conflicting true values (two models or two calibrations watching one
stream), so the fan of the latest batch overlays both runs' intervals; otherwise the fan is
empty.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Any

import numpy as np

from calwatch.core.frame_cache import CACHES_ATTRIBUTE
from calwatch.monitor.monitor import Monitor
from calwatch.monitor.regression import RegressionMonitor
from calwatch.shift.watch import ShiftWatch
from calwatch.stream.records import NO_LABEL, BatchRecord, BatchRows, StreamState


def _as_monitor(run: Monitor | str | os.PathLike[str]) -> Monitor:
    if isinstance(run, Monitor):
        return run
    return Monitor.load(run)


def compare(
    a: Monitor | str | os.PathLike[str],
    b: Monitor | str | os.PathLike[str],
    *,
    names: tuple[str, str] = ("A", "B"),
    show: bool = True,
) -> Monitor:
    """Overlay two runs on the same panels (and display the widget).

    Parameters
    ----------
    a, b : Monitor or path-like
        Live monitors, or snapshot folders written by :meth:`Monitor.save`. Both must watch
        the same task: classification runs the same classes, regression runs the same interval
        levels (e.g. two models, or two calibration sets, on the same stream).
    names : tuple of two str
        Run names, prefixed to calibrator and detector names (``"A: lac"``).
    show : bool
        Display the comparison widget (in a notebook).

    Returns
    -------
    Monitor
        A read-only monitor holding both runs (``observe`` and ``label`` refuse); a
        :class:`~calwatch.monitor.regression.RegressionMonitor` for regression runs.

    Raises
    ------
    ValueError
        If a run is not calibrated, or the runs watch different tasks, classes or levels.
    """
    runs = [_as_monitor(a), _as_monitor(b)]
    if len(names) != 2 or names[0] == names[1] or not all(isinstance(n, str) and n for n in names):
        msg = f"names must be two different non-empty strings; got {names!r}"
        raise ValueError(msg)
    for run in runs:
        if run.calibration_ is None:
            msg = f"{run.name!r} is not calibrated: there is nothing to compare"
            raise ValueError(msg)
    tasks = [getattr(run, "task", "classification") for run in runs]
    if tasks[0] != tasks[1]:
        msg = (
            f"cannot compare a {tasks[0]} run with a {tasks[1]} run: {names[0]} ({runs[0].name!r}) "
            f"is {tasks[0]}, {names[1]} ({runs[1].name!r}) is {tasks[1]}"
        )
        raise ValueError(msg)
    regression = tasks[0] == "regression"
    if regression:
        levels = [tuple(getattr(run, "levels", ())) for run in runs]
        if levels[0] != levels[1]:
            msg = f"the runs track different interval levels: {list(levels[0])} vs {list(levels[1])}"
            raise ValueError(msg)
    else:
        classes = [run.classes_.tolist() for run in runs]
        if classes[0] != classes[1]:
            msg = f"the runs watch different classes: {classes[0]} vs {classes[1]}"
            raise ValueError(msg)
    merged = copy.copy(runs[0])
    merged.__dict__.pop("_guard_state", None)  # its own lock, not the run's
    merged.__dict__.pop("_autosave", None)  # the run's autosaver saves the run, not the overlay
    merged.__dict__.pop(CACHES_ATTRIBUTE, None)  # the run's kept reads, not the overlay's
    merged.__dict__.pop("_slices", None)  # one run's slice counts, under its calibrators' names
    merged.name = f"{names[0]}: {runs[0].name} vs {names[1]}: {runs[1].name}"
    merged._calibrators = {
        f"{name}: {key}": cal
        for name, run in zip(names, runs, strict=True)
        for key, cal in run.calibrators.items()
    }
    merged._adapter = None
    merged._listeners = []
    merged._widget = None
    merged._notes = []
    merged.provenance = {
        f"{name}: {key}": value
        for name, run in zip(names, runs, strict=True)
        for key, value in {"monitor": run.name, "model": run.model_description, **run.provenance}.items()
    }
    merged.model_description = (
        f"{names[0]}: {runs[0].model_description}; {names[1]}: {runs[1].model_description}"
    )
    merged._stream = _merged_stream(runs, names)
    if isinstance(merged, RegressionMonitor):
        merged._model = None
        _merge_regression_rows(merged._stream, runs, names)
    merged._shift = _merged_shift(runs, names)
    merged._shift_spec = None
    merged.observe = _read_only  # type: ignore[method-assign]
    merged.label = _read_only  # type: ignore[method-assign]
    merged.calibrate = _read_only  # type: ignore[method-assign]
    if show:
        merged.show()
    return merged


def _read_only(*args: Any, **kwargs: Any) -> Any:
    msg = "a comparison is read-only: stream into the monitors it compares instead"
    raise TypeError(msg)


def _merged_stream(runs: list[Monitor], names: tuple[str, str]) -> StreamState:
    stream = StreamState(max(run.window for run in runs))
    n = max(run.n_batches for run in runs)
    for index in range(n):
        stats: dict[str, Any] = {}
        first: BatchRecord | None = None
        for name, run in zip(names, runs, strict=True):
            if index < run.n_batches:
                record = run._stream.batches[index]
                first = first or record
                stats |= {f"{name}: {key}": value for key, value in record.stats.items()}
        assert first is not None
        stream.batches.append(
            BatchRecord(
                index=index, name=first.name, observed_at=first.observed_at, n_rows=first.n_rows, stats=stats
            )
        )
    for counter in (
        "rows_seen",
        "rows_labelled",
        "labels_unmatched",
        "labels_outside_classes",
        "rows_expired",
    ):
        setattr(stream, counter, int(np.sum([getattr(run._stream, counter) for run in runs])))
    return stream


def _merge_regression_rows(stream: StreamState, runs: list[Monitor], names: tuple[str, str]) -> None:
    """Give each merged batch the raw rows of both runs where they describe the same rows.

    The rows' results are shared with the runs (a comparison is read-only). A true value comes
    from whichever run has it; batches where the runs hold different ids, or different true
    values for one id, keep no raw rows.
    """
    for record in stream.batches:
        parts = [run._stream.batches[record.index].rows for run in runs if record.index < run.n_batches]
        present = [rows for rows in parts if rows is not None]
        if len(present) != len(runs):
            continue
        first, second = present
        if first.ids != second.ids:
            continue
        y_a, y_b = first.regression["y"], second.regression["y"]
        if np.any(~np.isnan(y_a) & ~np.isnan(y_b) & (y_a != y_b)):
            continue
        y = np.where(np.isnan(y_a), y_b, y_a)
        per_calibrator = {
            f"{name}: {key}": saved
            for name, rows in zip(names, present, strict=True)
            for key, saved in rows.regression["per_calibrator"].items()
        }
        record.rows = BatchRows(
            ids=list(first.ids),
            probs=np.zeros((len(first.ids), 0)),
            packed_sets={},
            labels=np.where(np.isnan(y), NO_LABEL, 0).astype(np.intp),
            regression={"y": y, "per_calibrator": per_calibrator, "levels": first.regression["levels"]},
        )
        stream._in_window.append(record)
        stream._rows_in_window += record.n_rows


def _merged_shift(runs: list[Monitor], names: tuple[str, str]) -> ShiftWatch | None:
    watches = [(name, run.shift_watch) for name, run in zip(names, runs, strict=True) if run.shift_watch]
    if not watches:
        return None
    merged = ShiftWatch([])
    episode = 0
    for name, watch in watches:
        assert watch is not None
        for (detector, batch), look in watch.looks.items():
            renamed = dict(look, detector=f"{name}: {detector}")
            if look.get("calibrator"):
                renamed["calibrator"] = f"{name}: {look['calibrator']}"
            merged.looks[(renamed["detector"], batch)] = renamed
        for warning in watch.tracker.warnings_:
            merged.tracker._warnings.append(
                dataclasses.replace(warning, name=f"{name}: {warning.name}", episode=episode)
            )
            ack = watch.acknowledgements.get(warning.episode)
            if ack is not None:
                merged.acknowledgements[episode] = ack
            episode += 1
    return merged
