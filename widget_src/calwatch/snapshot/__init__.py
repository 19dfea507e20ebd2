"""Saving a monitor to a folder and loading it back, without executing code.

- :mod:`~calwatch.snapshot.store` — the folder layout (manifest, arrays, row log, table pins) and
  :func:`save_monitor` / :func:`load_monitor`;
- :mod:`~calwatch.snapshot.checks` — the checks a loaded calibrator passes before a monitor uses it.

The codec itself (JSON plus arrays, trusted names only) is :mod:`calwatch.core.codec`, since the
row log below uses it too.
"""

from calwatch.snapshot.checks import check_calibrators
from calwatch.snapshot.store import load_monitor, read_manifest, save_monitor

__all__ = ["check_calibrators", "load_monitor", "read_manifest", "save_monitor"]
