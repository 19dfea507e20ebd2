"""Vega-Lite drawn as SVG by vl-convert in a short-lived child process: the kernel keeps no JavaScript heap.

vl-convert draws with Vega inside an embedded JavaScript engine (V8, through Deno) that lives as
long as the process that imported it, and keeps the heap it grew (its pages are small anonymous
mappings of 256 KiB, never given back). The dashboard's static copy
(:mod:`calwatch.publish.notebook_output`) is drawn again every 30 s or more while a stream runs, for as
long as the stream runs: measured in one process with the soak's monitor (K = 10, three
calibrators, 1,000-row batches, the static copy drawn every 700 batches), the process's small
anonymous mappings went from 3 to 46 MiB and its anonymous memory grew by ~20 MiB per 10⁴
batches, where without the SVG drawing both stayed flat (3.2 MiB; 246-248 MiB). Drawn by
:func:`vegalite_to_svg` instead, in a child process that exits, the JavaScript heap is gone with
it. The SVG is the same, byte for byte.

It costs time, not memory: ~0.75 s a drawing here (a Python interpreter and V8 starting) where
a warm in-process drawing takes ~0.15 s. The static copy is redrawn at most every 30 s and in
at most 5% of the time, off the monitor's lock, so that is affordable; a chart the user asks
for (``Monitor.chart``) is drawn in the kernel, where its speed matters and it happens once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

#: Seconds a drawing may take before the child is stopped.
TIMEOUT_S = 120.0
#: What the child runs: the spec (JSON) from stdin, the SVG to stdout, nothing of calwatch imported.
_CHILD = (
    "import json, sys\n"
    "import vl_convert\n"
    "svg = vl_convert.vegalite_to_svg(json.load(sys.stdin))\n"
    "sys.stdout.buffer.write(svg.encode('utf-8'))\n"
)


def vegalite_to_svg(spec: dict[str, Any], *, timeout_s: float = TIMEOUT_S) -> str:
    """A Vega-Lite spec drawn as SVG by vl-convert in a child process running this interpreter.

    Parameters
    ----------
    spec : dict
        The Vega-Lite spec, data inline (JSON-serialisable).
    timeout_s : float
        Seconds before the child is stopped.

    Returns
    -------
    str
        The SVG, as ``vl_convert.vegalite_to_svg`` draws it.

    Raises
    ------
    RuntimeError
        When the child cannot run or vl-convert refuses the spec (the child's last line of error).
    subprocess.TimeoutExpired
        When the drawing takes longer than ``timeout_s`` (the child is killed).
    """
    if not sys.executable:
        msg = "no Python executable to run vl-convert in a child process"
        raise RuntimeError(msg)
    completed = subprocess.run(
        [sys.executable, "-P", "-c", _CHILD],  # -P: the working folder cannot shadow a module
        input=json.dumps(spec).encode("utf-8"),
        capture_output=True,
        timeout=timeout_s,
        check=False,
    )
    if completed.returncode != 0:
        lines = completed.stderr.decode("utf-8", errors="replace").strip().splitlines()
        msg = f"vl-convert failed in its child process: {lines[-1] if lines else completed.returncode}"
        raise RuntimeError(msg)
    return completed.stdout.decode("utf-8")


__all__ = ["TIMEOUT_S", "vegalite_to_svg"]
