"""The Monitor: calibrators attached to a model, batches streamed through them, labels joined late.

- :mod:`~calwatch.monitor.monitor` — :class:`Monitor`, one class whose methods read top to bottom,
  each delegating to a collaborator: :mod:`~calwatch.monitor.intake` (calibrate, observe),
  :mod:`~calwatch.monitor.labels` (late labels), :mod:`~calwatch.monitor.reads` (summaries,
  coverage, rows, status), :mod:`~calwatch.monitor.tables` (tables streamed out of core),
  :mod:`~calwatch.monitor.share` (save, load, report, serve, show);
- :mod:`~calwatch.monitor.tasks` — what a task decides about labels (one label path for all);
- :mod:`~calwatch.monitor.regression` — the regression task (intervals instead of sets);
- :mod:`~calwatch.monitor.compare` — two monitors side by side;
- :mod:`~calwatch.monitor.autosave` — a snapshot rewritten in the background.
"""

from calwatch.monitor.compare import compare
from calwatch.monitor.labels import LabelReport
from calwatch.monitor.monitor import Monitor, Note, register_task
from calwatch.monitor.regression import RegressionMonitor

__all__ = ["LabelReport", "Monitor", "Note", "RegressionMonitor", "compare", "register_task"]
