"""The boundary fuzz tests with a long profile: many more examples than `make test` runs.

Runs ``tests/monitor/test_fuzz_boundary.py`` (observe, label, what_if, calibrate with arbitrary
inputs) and ``tests/monitor/test_fuzz_load.py`` (damaged and edited snapshots) with
``CALWATCH_FUZZ_EXAMPLES`` examples per test (default 1,000; `make test` runs 60 and 40), and
prints how many examples ran, how long it took and what failed (a failure is a bug to fix: the
falsifying example is printed by hypothesis). `make test` runs the same examples every time
(derandomised, ``tests/conftest.py``); this explores with fresh randomness on every run.

Run: ``python benchmarks/bench_fuzz.py [--examples 1000]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = ("tests/monitor/test_fuzz_boundary.py", "tests/monitor/test_fuzz_load.py")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=1000)
    args = parser.parse_args(argv)
    env = os.environ | {
        "CALWATCH_FUZZ_EXAMPLES": str(args.examples),
        "CALWATCH_HYPOTHESIS_PROFILE": "explore",
    }
    print(f"boundary fuzzing, {args.examples:,} examples per test")
    print(f"{'module':<40}{'tests':>7}{'examples':>10}{'seconds':>9}  result")
    failed = 0
    for module in MODULES:
        start = time.perf_counter()
        command = [sys.executable, "-m", "pytest", module, "-q", "-p", "no:cacheprovider"]
        done = subprocess.run(
            [*command, "--hypothesis-show-statistics"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        elapsed = time.perf_counter() - start
        counts = [
            line.split("passing")[0].split()[-1] for line in done.stdout.splitlines() if " passing, " in line
        ]
        tests, ran = len(counts), sum(int(n) for n in counts)
        result = "all passed" if done.returncode == 0 else "FAILED (see below)"
        print(f"{Path(module).name:<40}{tests:>7}{ran:>10,}{elapsed:>9.0f}  {result}")
        if done.returncode != 0:
            failed += 1
            print(done.stdout[-4000:])
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
