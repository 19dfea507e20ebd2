"""How long ``import calwatch`` takes in a fresh interpreter (target: at most 300 ms).

Each repeat starts a new Python process and times the import inside it, so nothing is cached in
the interpreter (the OS file cache is warm after the first repeat, as it is for a user). For
scale, the same is measured for the libraries calwatch cannot avoid importing: numpy, and
numpy + polars. Heavy dependencies (scipy.stats, torch, faiss, altair, anywidget) load on first
use, so they are not part of ``import calwatch``; the last column lists which of them were.

Run: ``python benchmarks/bench_import.py [--repeats 7]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence

from _common import machine_line, median

TARGET_MS = 300.0
HEAVY = (
    "scipy.stats",
    "torch",
    "faiss",
    "altair",
    "anywidget",
    "ipywidgets",
    "sklearn",
    "calwatch.datasets.tabular",
)
CASES = {
    "numpy": "import numpy",
    "numpy + polars": "import numpy, polars",
    "calwatch": "import calwatch",
}


def time_import(statement: str) -> tuple[float, list[str]]:
    """Seconds the statement takes in a fresh interpreter, and which heavy modules it loaded."""
    probe = (
        "import sys, time\n"
        "t = time.perf_counter()\n"
        f"{statement}\n"
        "elapsed = time.perf_counter() - t\n"
        f"print(elapsed, *[m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    ).stdout.split()
    return float(out[0]), out[1:]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    loadavg = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"import time, median of {args.repeats} fresh interpreters (target: calwatch ≤ {TARGET_MS:.0f} ms)")
    print(machine_line(loadavg))
    print(f"{'import':<16}{'median ms':>11}{'min ms':>9}  heavy modules loaded")
    results = {}
    for name, statement in CASES.items():
        runs = [time_import(statement) for _ in range(args.repeats)]
        times = [1000 * t for t, _ in runs]
        results[name] = median(times)
        print(f"{name:<16}{median(times):>11.0f}{min(times):>9.0f}  {', '.join(runs[-1][1]) or '-'}")
    verdict = "PASS" if results["calwatch"] <= TARGET_MS else "FAIL"
    own = results["calwatch"] - results["numpy + polars"]
    print(f"calwatch's own share (beyond numpy + polars): {own:.0f} ms; target {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
