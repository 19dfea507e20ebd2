"""Keeping and showing a monitor: snapshots, autosave, reports, charts, the widget, a served view.

:class:`Sharing` is a collaborator of :class:`~calwatch.monitor.Monitor`, which delegates to it.
Each method imports its layer (store, report, charts, widget, server) inside the method, so the stream core
does not depend on them: these are the import contract's declared exceptions (``pyproject.toml``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from calwatch.monitor.autosave import AutoSave

if TYPE_CHECKING:
    import altair as alt

    from calwatch.monitor.monitor import Monitor
    from calwatch.publish.server import DashboardServer
    from calwatch.widget import MonitorWidget

IntArray = npt.NDArray[np.intp]
#: What ``show()`` says outside a Jupyter kernel (a script, a terminal), instead of printing the
#: dashboard's HTML: where the dashboard can be seen from there.
SHOW_OUTSIDE_NOTEBOOK = (
    "calwatch: {name!r} has a dashboard only in a Jupyter notebook; from a script, write a report "
    "with mon.report('report.html'), or save the monitor and run `calwatch serve <folder>`"
)


class Sharing:
    """Snapshots, reports, charts and the widget of a monitor (for :class:`~calwatch.monitor.Monitor`).

    Stateless: it reads and changes the monitor it is given.
    """

    def __init__(self, monitor: Monitor) -> None:
        self.m: Monitor = monitor

    def save(self, path: str | os.PathLike[str]) -> Path:
        """See :meth:`Monitor.save`."""
        from calwatch.snapshot.store import save_monitor

        return save_monitor(self.m, path)

    def autosave(
        self,
        path: str | os.PathLike[str],
        *,
        every_batches: int | None = 1,
        every_seconds: float | None = 5.0,
    ) -> AutoSave:
        """See :meth:`Monitor.autosave`."""
        monitor = self.m
        saver = AutoSave(monitor, path, every_batches=every_batches, every_seconds=every_seconds)
        with monitor.lock:
            saver.start()
            previous = self.m.__dict__.get("_autosave")
            self.m.__dict__["_autosave"] = saver
        if previous is not None:
            previous.stop()
        return saver

    def stop_autosave(self, *, save: bool = True) -> None:
        """See :meth:`Monitor.stop_autosave`."""
        saver: AutoSave | None = self.m.__dict__.get("_autosave")
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
        """See :meth:`Monitor.serve`."""
        from calwatch.publish.server import serve

        saver: AutoSave | None = self.m.__dict__.get("_autosave")
        active = saver is not None and saver.active
        if path is None:
            if saver is None or not active:
                msg = "path must name a snapshot folder: this monitor does not autosave (mon.autosave(path))"
                raise ValueError(msg)
            target = saver.path
        else:
            target = Path(path)
            if saver is None or not active or saver.path.resolve() != target.resolve():
                self.m.autosave(target, every_batches=every_batches, every_seconds=every_seconds)
        return serve(target, host=host, port=port, token=token)

    def report(self, path: str | os.PathLike[str]) -> Path:
        """See :meth:`Monitor.report`."""
        from calwatch.publish.report import write_report

        return write_report(self.m, path)

    @staticmethod
    def load(
        cls: type[Monitor],
        path: str | os.PathLike[str],
        *,
        model: Any = None,
        embedding_layer: str | None = None,
    ) -> Monitor:
        """See :meth:`Monitor.load` (``cls``: the class it was called on)."""
        from calwatch.core.codec import SnapshotError
        from calwatch.snapshot.store import load_monitor

        monitor = load_monitor(path, model=model, embedding_layer=embedding_layer)
        if not isinstance(monitor, cls):
            msg = f"{str(path)!r} holds a {type(monitor).__name__}, not a {cls.__name__}"
            raise SnapshotError(msg)
        return monitor

    def chart(self, kind: str = "coverage") -> alt.Chart | alt.LayerChart:
        """See :meth:`Monitor.chart`."""
        from calwatch.publish.notebook_output import offline_chart
        from calwatch.views import charts

        return offline_chart(charts.build(kind, self.m))

    def widget(self) -> MonitorWidget:
        """See :meth:`Monitor.widget`."""
        if self.m._widget is None:
            from calwatch.widget import MonitorWidget

            self.m._widget = MonitorWidget(self.m)
        return self.m._widget

    def show(self, *, sidebar: bool = False, title: str | None = None) -> None:
        """See :meth:`Monitor.show`."""
        from IPython.display import display

        from calwatch.publish.notebook_output import in_kernel, static_for

        if not in_kernel():  # a script or a terminal: no page to draw on, and no HTML dumped on stdout
            print(SHOW_OUTSIDE_NOTEBOOK.format(name=self.m.name))
            return
        widget = self.m.widget()
        if sidebar:
            from sidecar import Sidecar

            panel = Sidecar(title=title or self.m.name)
            with panel:
                display(widget)  # type: ignore[no-untyped-call]
            widget.keep_panel(panel)
        else:
            display(widget)  # type: ignore[no-untyped-call]
            static_for(widget).display()
