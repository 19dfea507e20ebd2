"""Run every ``benchmarks/bench_*.py`` module's ``main()`` in turn (``make bench``).

Each benchmark module must define ``main(argv: Sequence[str] | None = None) -> int``. It is
called with an empty argument list (its defaults). A missed speed or memory target is the
benchmark's result, printed as FAIL in its table, and does not count as a failure here; this
script exits nonzero only when a benchmark fails to run: it cannot be imported, has no
``main``, raises, or returns a nonzero code (a broken run, e.g. wrong results).

Usage: ``python benchmarks/run_all.py [NAME ...]``: with names (``conformal`` or
``bench_conformal``), only those benchmarks run.
"""

from __future__ import annotations

import gc
import importlib.util
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parent


def discover(names: Sequence[str] = ()) -> list[Path]:
    """The ``bench_*.py`` files next to this script, sorted; only ``names`` if given."""
    paths = sorted(BENCH_DIR.glob("bench_*.py"))
    if names:
        wanted = {n.removesuffix(".py").removeprefix("bench_") for n in names}
        paths = [p for p in paths if p.stem.removeprefix("bench_") in wanted]
    return paths


def load(path: Path) -> ModuleType:
    """Import a benchmark file as a module (its folder is put on ``sys.path`` for helpers)."""
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"_calwatch_bench_{path.stem}", path)
    if spec is None or spec.loader is None:
        msg = f"cannot import {path}"
        raise ImportError(msg)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_one(path: Path) -> str | None:
    """Run one benchmark; return None on success, else why it failed to run."""
    try:
        module = load(path)
        main = getattr(module, "main", None)
        if not callable(main):
            return "no main() function"
        code = main([])
    except SystemExit as exc:  # argparse errors, sys.exit inside main
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception:  # report it and go on to the next benchmark
        sys.stdout.flush()
        traceback.print_exc()
        return "raised an exception"
    finally:
        gc.collect()
    if code not in (0, None):
        return f"main() returned {code}"
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
