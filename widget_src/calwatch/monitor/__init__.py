"""The Monitor: calibrators attached to a model, batches streamed through them, labels joined late.

- :mod:`~calwatch.monitor.monitor` — :class:`Monitor`, one class whose methods read top to bottom;
- its collaborators: :mod:`~calwatch.monitor.labels` (late labels), :mod:`~calwatch.monitor.reads`
  (summaries, coverage, rows, status), :mod:`~calwatch.monitor.share` (save, load, report, serve,
  show), :mod:`~calwatch.monitor.tables` (tables streamed out of core) and
  :mod:`~calwatch.monitor.state` (what they share);
- :mod:`~calwatch.monitor.regression` — the regression task (intervals instead of sets);
- :mod:`~calwatch.monitor.compare` — two monitors side by side;
- :mod:`~calwatch.monitor.autosave` — a snapshot rewritten in the background.
"""

from calwatch.monitor.compare import compare
from calwatch.monitor.labels import LabelReport
from calwatch.monitor.monitor import Monitor, Note, register_task
from calwatch.monitor.regression import RegressionMonitor

__all__ = ["LabelReport", "Monitor", "Note", "RegressionMonitor", "compare", "register_task"]
