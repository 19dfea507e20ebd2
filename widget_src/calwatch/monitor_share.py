"""Keeping and showing a monitor: snapshots, reports, charts, the widget.

:class:`MonitorSharing` is a part of :class:`~calwatch.monitor.Monitor` (a mixin). Each method
imports its layer (store, report, charts, widget) inside the method, so the stream core does not
depend on them: these are the import contract's declared exceptions (``pyproject.toml``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from calwatch.guard import guarded
from calwatch.monitor_state import MonitorState

if TYPE_CHECKING:
    import altair as alt

    from calwatch.monitor import Monitor
    from calwatch.widget import MonitorWidget

IntArray = npt.NDArray[np.intp]


class MonitorSharing(MonitorState):
    """Snapshots, reports, charts and the widget of a monitor (part of :class:`~calwatch.monitor.Monitor`)."""

    _widget: MonitorWidget | None

    def _as_monitor(self) -> Monitor:
        return cast("Monitor", self)  # this class is only ever a part of Monitor

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

        return save_monitor(self._as_monitor(), path)

    @guarded
    def report(self, path: str | os.PathLike[str]) -> Path:
        """Write a standalone HTML report (every panel, warnings, notes, configuration, provenance).

        The file opens in any browser with no kernel and no network.
        """
        from calwatch.report import write_report

        return write_report(self._as_monitor(), path)

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

    def chart(self, kind: str = "coverage") -> alt.Chart | alt.LayerChart:
        """An Altair chart of the stream so far.

        ``kind`` is one of ``"coverage"``, ``"class_coverage"``, ``"set_size"``,
        ``"set_shares"``, ``"set_sizes"``, ``"labels"``.
        """
        from calwatch import charts

        return charts.build(kind, self._as_monitor())

    def widget(self) -> MonitorWidget:
        """The live widget of this monitor (one per monitor; display it as often as you like)."""
        if self._widget is None:
            from calwatch.widget import MonitorWidget

            self._widget = MonitorWidget(self._as_monitor())
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
