"""The boundary fuzz tests with a long profile: many more examples than `make test` runs.

Runs ``tests/monitor/test_fuzz_boundary.py`` (observe, label, what_if, calibrate with arbitrary
inputs) and ``tests/monitor/test_fuzz_load.py`` (damaged and edited snapshots) with
``CALWATCH_FUZZ_EXAMPLES`` examples per test (default 1,000; `make test` runs 60 and 40), and
prints how many examples ran, how long it took and what failed (a failure is a bug to fix: the
falsifying example is printed by hypothesis). A failing module's whole output (pytest's and
hypothesis's, stdout and stderr) is kept in ``test-artifacts/fuzz/`` and its summary lines printed:
a failure that does not come back on the next run is still on record. `make test` runs the same
examples every time (derandomised, ``tests/conftest.py``); this explores with fresh randomness.

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
            kept = keep_output(module, done)
            print(f"  whole output: {kept}")
            for line in failure_lines(done.stdout):
                print(f"  {line}")
    return 0 if failed == 0 else 1


def keep_output(module: str, done: subprocess.CompletedProcess[str]) -> Path:
    """Write a failing module's whole stdout and stderr to ``test-artifacts/fuzz/``; return the path."""
    folder = ROOT / "test-artifacts" / "fuzz"
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = folder / f"{Path(module).stem}-{stamp}.log"
    path.write_text(f"exit status {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}\n")
    return path


def failure_lines(stdout: str, most: int = 40) -> list[str]:
    """pytest's short summary, hypothesis's falsifying examples and the errors, at most ``most`` lines."""
    marks = ("FAILED ", "ERROR ", "Falsifying example", "E   ", "reproduce_failure")
    return [line for line in stdout.splitlines() if line.startswith(marks) or "Error:" in line][:most]


if __name__ == "__main__":
    raise SystemExit(main())
