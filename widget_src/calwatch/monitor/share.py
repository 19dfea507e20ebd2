"""Keeping and showing a monitor: snapshots, autosave, reports, charts, the widget, a served view.

:class:`MonitorSharing` is a part of :class:`~calwatch.monitor.monitor.Monitor` (a mixin). Each method
imports its layer (store, report, charts, widget, server) inside the method, so the stream core
does not depend on them: these are the import contract's declared exceptions (``pyproject.toml``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from calwatch.core.guard import guarded
from calwatch.monitor.autosave import AutoSave
from calwatch.monitor.state import MonitorState

if TYPE_CHECKING:
    import altair as alt

    from calwatch.monitor.monitor import Monitor
    from calwatch.publish.server import DashboardServer
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
        from calwatch.snapshot.store import save_monitor

        return save_monitor(self._as_monitor(), path)

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
        monitor = self._as_monitor()
        saver = AutoSave(monitor, path, every_batches=every_batches, every_seconds=every_seconds)
        with monitor.lock:
            saver.start()
            previous = self.__dict__.get("_autosave")
            self.__dict__["_autosave"] = saver
        if previous is not None:
            previous.stop()
        return saver

    def stop_autosave(self, *, save: bool = True) -> None:
        """Stop autosaving (after saving a change still unsaved, unless ``save=False``)."""
        saver: AutoSave | None = self.__dict__.get("_autosave")
        if saver is not None:
            saver.stop(save=save)

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
        from calwatch.publish.server import serve

        saver: AutoSave | None = self.__dict__.get("_autosave")
        active = saver is not None and saver.active
        if path is None:
            if saver is None or not active:
                msg = "path must name a snapshot folder: this monitor does not autosave (mon.autosave(path))"
                raise ValueError(msg)
            target = saver.path
        else:
            target = Path(path)
            if saver is None or not active or saver.path.resolve() != target.resolve():
                self.autosave(target, every_batches=every_batches, every_seconds=every_seconds)
        return serve(target, host=host, port=port, token=token)

    @guarded
    def report(self, path: str | os.PathLike[str]) -> Path:
        """Write a standalone HTML report (every panel, warnings, notes, configuration, provenance).

        The file opens in any browser with no kernel and no network.
        """
        from calwatch.publish.report import write_report

        return write_report(self._as_monitor(), path)

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
        from calwatch.core.codec import SnapshotError
        from calwatch.snapshot.store import load_monitor

        monitor = load_monitor(path, model=model, embedding_layer=embedding_layer)
        if not isinstance(monitor, cls):
            msg = f"{str(path)!r} holds a {type(monitor).__name__}, not a {cls.__name__}"
            raise SnapshotError(msg)
        return monitor

    def chart(self, kind: str = "coverage") -> alt.Chart | alt.LayerChart:
        """An Altair chart of the stream so far.

        ``kind`` is one of ``"coverage"``, ``"class_coverage"``, ``"set_size"``,
        ``"set_shares"``, ``"set_sizes"``, ``"labels"``. In a notebook it shows as an SVG (and a
        PNG) drawn in the kernel, so an executed notebook keeps it wherever it is read, offline
        and untrusted included (:func:`calwatch.publish.notebook_output.offline_chart`); Altair's own
        renderer is left alone.
        """
        from calwatch.publish.notebook_output import offline_chart
        from calwatch.views import charts

        return offline_chart(charts.build(kind, self._as_monitor()))

    def widget(self) -> MonitorWidget:
        """The live widget of this monitor (one per monitor; display it as often as you like)."""
        if self._widget is None:
            from calwatch.widget import MonitorWidget

            self._widget = MonitorWidget(self._as_monitor())
        return self._widget

    def show(self, *, sidebar: bool = False, title: str | None = None) -> None:
        """Display the live widget inline, or in a JupyterLab side panel (``sidebar=True``).

        Inline, a static copy of the dashboard follows the widget as a second output
        (:mod:`calwatch.publish.notebook_output`): hidden while the live view is drawn next to it,
        refreshed when a cell that changed the stream ends, and what an exported, shared or
        untrusted notebook shows in the widget's place. A side panel is not part of the notebook,
        so it gets none.
        """
        from IPython.display import display

        from calwatch.publish.notebook_output import static_for

        widget = self.widget()
        if sidebar:
            from sidecar import Sidecar

            panel = Sidecar(title=title or self.name)
            with panel:
                display(widget)  # type: ignore[no-untyped-call]
            widget.keep_panel(panel)
        else:
            display(widget)  # type: ignore[no-untyped-call]
            static_for(widget).display()
