"""Run every ``benchmarks/bench_*.py`` module's ``main()`` in turn (``make bench``).

Each benchmark module must define ``main(argv: Sequence[str] | None = None) -> int``. It is
called with an empty argument list (its defaults), in a fresh Python process of its own, so
that one benchmark's imports and allocations do not change another's timings or peak RSS.
A missed speed or memory target is the benchmark's result, printed as FAIL in its table, and
does not count as a failure here; this script exits nonzero only when a benchmark fails to
run: it cannot be imported, has no ``main``, raises, or returns a nonzero code (a broken run,
e.g. wrong results).

Usage: ``python benchmarks/run_all.py [NAME ...]``: with names (``conformal`` or
``bench_conformal``), only those benchmarks run.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent


def discover(names: Sequence[str] = ()) -> list[Path]:
    """The ``bench_*.py`` files next to this script, sorted; only ``names`` if given."""
    paths = sorted(BENCH_DIR.glob("bench_*.py"))
    if names:
        wanted = {n.removesuffix(".py").removeprefix("bench_") for n in names}
        paths = [p for p in paths if p.stem.removeprefix("bench_") in wanted]
    return paths


def run_one(path: Path) -> str | None:
    """Run one benchmark in its own process; return None on success, else why it failed to run."""
    call = (
        "import sys, runpy; sys.path.insert(0, sys.argv[1]); "
        "namespace = runpy.run_path(sys.argv[2]); main = namespace.get('main'); "
        "sys.exit(3 if not callable(main) else (main([]) or 0))"
    )
    completed = subprocess.run([sys.executable, "-c", call, str(path.parent), str(path)], check=False)
    if completed.returncode == 3:
        return "no main() function"
    if completed.returncode != 0:
        return f"exited with code {completed.returncode}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks; 0 when every one ran, 1 otherwise."""
    names = list(sys.argv[1:] if argv is None else argv)
    paths = discover(names)
    if not paths:
        print(f"no benchmarks matched {names or 'bench_*.py'} in {BENCH_DIR}")
        return 1
    failures: dict[str, str] = {}
    timings: dict[str, float] = {}
    for path in paths:
        banner = f" {path.name} "
        print(f"\n{banner:=^96}", flush=True)
        start = time.perf_counter()
        problem = run_one(path)
        timings[path.name] = time.perf_counter() - start
        if problem is not None:
            failures[path.name] = problem
        sys.stdout.flush()
    print(f"\n{' summary ':=^96}")
    for name, seconds in timings.items():
        status = f"FAILED TO RUN: {failures[name]}" if name in failures else "ran"
        print(f"  {name:<40} {seconds:7.1f} s  {status}")
    print("(speed/memory targets: see each benchmark's PASS/FAIL columns above)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
