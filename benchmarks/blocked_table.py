"""Blocked streams (issue 36): label-based false alarms on real blocked data, and detection delay.

Run: ``.venv/bin/python benchmarks/blocked_table.py [--streams 40] [--power-streams 20]
[--tag before] [--note TEXT]``; writes ``benchmarks/results/blocked_table{_TAG}.txt`` (the table,
with the command that made it at the top) and ``.csv`` (one row per stream run).

Data and streams: ``tests/validity/blocked_data.py`` (shared with
``tests/validity/test_blocked_streams.py``). Every monitor is ``Monitor(shift="default")`` with
marginal APS and LAC by label at α = 0.1, fed ``probs=`` from a real classifier.

**Null streams** (every alarm false). Four real datasets whose rows come in blocks, none used
elsewhere in the project: COVID-19 tests by day (``covid_testing``), answers by respondent
(``verbagg``), pupils by school (``hsb82``), police stops by day (``mpls_stops``). A
gradient-boosting classifier is trained on a seeded 30% of the blocks. Per stream (seed ``s``), the
other blocks are shuffled **whole**; the first ``n_cal`` calibrate, the rest stream in that order,
a few consecutive blocks a batch. Each stream runs four ways: labels with the batch or two batches
late, and with the defaults (no block keys) or with ``blocks=`` (``calibrate(blocks=)``,
``observe(blocks=)``). Counted per way: streams with any label-based warning (``coverage drop``,
``class coverage drop``, ``conformity martingale``); for the defaults, streams whose
``mon.notices()`` mention correlated rows, and streams that alarm without such a notice; streams
with a label-free warning (the confidence martingale, or its block version). The control: the
same rows shuffled one by one (rows exchangeable), defaults, the same batch sizes.

The bound: the union of the default label-based detectors' stated false-alarm bounds is 0.09 per
stream (two conformity martingales at 0.01, two coverage-drop tests at 0.01 + 0.01 for the
calibration draw, one class coverage-drop test at 0.01 + 2 × 0.01). ``bound`` is the most alarmed
streams of R that this allows at Monte Carlo error 0.01 (``P(Bin(R, 0.09) > bound) ≤ 0.01``).

**Power** (real shifts, one block a batch; delay = blocks after the change until the first
label-based alarm, read from the detectors' per-batch looks; with late labels the alarm comes at
the batch observed when the labels arrive):

* ``nycflights13``: the late-arrival model of ``calwatch.datasets.flights_task(seed=0)``
  (trained on January-March). 30 random days of September-November calibrate; the other 61 stream
  in date order, then December in date order (late share 13-17% → 33%). Alarms before December
  count as ``early`` (date order is not exchangeable with the calibration days, so some are
  expected without blocks).
* ``hsb82``: 40 public schools calibrate, 20 more public schools stream, then every held-out
  Catholic school (their pupils outscore public pupils of the same SES: the model, which does see
  the sector, covers the lower-scoring class at 0.76 instead of 0.90 there).
* ``verbagg``: 80 women calibrate, 40 more women stream, then every held-out man (men answer the
  "do" items differently: class coverage 0.78 instead of 0.90).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import csv  # noqa: E402
import shlex  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the data module shared with the validity test: tests/validity

from tests.validity.blocked_data import (  # noqa: E402
    SETTINGS,
    BlockedTask,
    StreamOutcome,
    StreamPlan,
    allowed_false_alarms,
    blocked_task,
    date_order_plan,
    flights_by_day,
    group_shift_plan,
    rows_as_blocks,
    run_stream,
    shuffled_plan,
)

import calwatch  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
#: Union of the default label-based detectors' stated false-alarm bounds, per stream (module docstring).
DELTA_TOTAL = 0.09
LABEL_DELAYS = (0, 2)
MODES = ("default", "blocks=")
#: Power: found within this many blocks of the change.
WITHIN = 10


@dataclass
class Run:
    """One stream run four ways: its study, dataset, seed, settings and outcome."""

    study: str
    dataset: str
    seed: int
    mode: str  # "default", "blocks=" or "control"
    label_delay: int
    outcome: StreamOutcome
    change: int | None = None

    def row(self) -> dict[str, Any]:
        """The run as a CSV row."""
        out = self.outcome
        first = out.first_label_alarm(0)
        after = None if self.change is None else out.first_label_alarm(self.change)
        return {
            "study": self.study,
            "dataset": self.dataset,
            "seed": self.seed,
            "mode": self.mode,
            "label_delay": self.label_delay,
            "batches": out.n_batches,
            "rows": out.n_rows,
            "label_alarm": int(out.label_alarm),
            "label_warnings": len(out.label_warnings),
            "label_detectors": ";".join(sorted({name for name, _ in out.label_warnings})),
            "first_label_alarm_batch": "" if first is None else first,
            "correlated_notice": int(out.correlated_notice),
            "label_free_alarm": int(bool(out.label_free_warnings)),
            "change_batch": "" if self.change is None else self.change,
            "delay_blocks": "" if after is None or self.change is None else after - self.change,
            "early": "" if self.change is None else int(first is not None and first < self.change),
            "seconds": round(out.seconds, 3),
        }


def _fmt(count: int, total: int) -> str:
    return f"{count}/{total}"


def _delay_text(delays: Sequence[int]) -> str:
    if not delays:
        return "—"
    return f"{statistics.median(delays):.0f} ({min(delays)}-{max(delays)})"


def null_study(name: str, streams: int, log: Callable[[str], None]) -> tuple[BlockedTask, list[Run]]:
    """All null streams of one dataset: four ways each, and the row-shuffled control (two ways)."""
    task = blocked_task(name)
    settings = SETTINGS[name]
    control_task = rows_as_blocks(task)
    rows_per_block = len(task.labels) / task.n_blocks
    control_cal = round(settings.n_cal * rows_per_block)
    control_batch = round(settings.blocks_per_batch * rows_per_block)
    runs = []
    start = time.perf_counter()
    for seed in range(streams):
        plan = shuffled_plan(task, seed, n_cal=settings.n_cal, blocks_per_batch=settings.blocks_per_batch)
        rows_plan = shuffled_plan(control_task, seed, n_cal=control_cal, blocks_per_batch=control_batch)
        for delay in LABEL_DELAYS:
            for mode in MODES:
                out = run_stream(task, plan, use_blocks=mode == "blocks=", label_delay=delay)
                runs.append(Run("null", name, seed, mode, delay, out))
            out = run_stream(control_task, rows_plan, use_blocks=False, label_delay=delay)
            runs.append(Run("null", name, seed, "control", delay, out))
    log(f"{name}: {streams} streams in {time.perf_counter() - start:.0f} s")
    return task, runs


def power_study(
    study: str, task: BlockedTask, make_plan: Callable[[int], StreamPlan], streams: int
) -> list[Run]:
    """Streams with a real shift: each seed run with and without blocks=, labels with the batch and late."""
    runs = []
    for seed in range(streams):
        plan = make_plan(seed)
        for delay in LABEL_DELAYS:
            for mode in MODES:
                out = run_stream(task, plan, use_blocks=mode == "blocks=", label_delay=delay)
                runs.append(Run(study, task.name, seed, mode, delay, out, plan.change_block))
    return runs


def _source() -> str:
    """Where calwatch was imported from, and the repository's commit (with '+ changes' if dirty)."""
    where = Path(calwatch.__file__).resolve().parent
    if not where.is_relative_to(REPO):
        return f"calwatch imported from {where} (outside this checkout)"
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "widget_src"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        head, dirty = "?", ""
    tree = f"repository at {head}" + (" + uncommitted changes under widget_src" if dirty else "")
    return f"calwatch imported from {where} ({tree})"


def _pick(runs: list[Run], mode: str, delay: int) -> list[StreamOutcome]:
    return [r.outcome for r in runs if r.mode == mode and r.label_delay == delay]


def null_table(tasks: dict[str, BlockedTask], runs: list[Run], streams: int) -> list[str]:
    """The null streams' table: one line per dataset and label timing."""
    bound = allowed_false_alarms(streams, DELTA_TOTAL)
    head = (
        f"{'dataset':<14}{'block':<8}{'rows':>7}{'blocks':>7}{'trn/cal/str':>13}{'rows/str':>9}{'batches':>8}"
        f"  {'labels':<8}{'FA default':>11}{'FA blocks=':>11}{'bound':>6}{'notice':>8}{'FA w/o ntc':>11}"
        f"{'LF default':>11}{'LF blocks=':>11}{'ctrl FA':>8}{'ctrl ntc':>9}"
    )
    lines = [head]
    for name, task in tasks.items():
        settings = SETTINGS[name]
        mine = [r for r in runs if r.dataset == name]
        default0 = [r.outcome for r in mine if r.mode == "default" and r.label_delay == 0]
        rows_per_stream = statistics.median(o.n_rows for o in default0)
        batches = statistics.median(o.n_batches for o in default0)
        n_stream = task.n_blocks - settings.n_cal
        for delay in LABEL_DELAYS:
            default, blocks, control = (_pick(mine, mode, delay) for mode in (*MODES, "control"))
            first = delay == LABEL_DELAYS[0]
            labels = "w/ batch" if delay == 0 else f"{delay} late"
            lines.append(
                (
                    f"{name:<14}{task.block:<8}{task.n_rows_total:>7,}{task.n_blocks_total:>7}"
                    f"{f'{task.n_train_blocks}/{settings.n_cal}/{n_stream}':>13}"
                    f"{rows_per_stream:>9,.0f}{batches:>8.0f}"
                    if first
                    else f"{'':<14}{'':<8}{'':>7}{'':>7}{'':>13}{'':>9}{'':>8}"
                )
                + f"  {labels:<8}"
                + f"{_fmt(sum(o.label_alarm for o in default), streams):>11}"
                + f"{_fmt(sum(o.label_alarm for o in blocks), streams):>11}"
                + f"{'≤' + str(bound):>6}"
                + f"{_fmt(sum(o.correlated_notice for o in default), streams):>8}"
                + f"{_fmt(sum(o.label_alarm and not o.correlated_notice for o in default), streams):>11}"
                + f"{_fmt(sum(bool(o.label_free_warnings) for o in default), streams):>11}"
                + f"{_fmt(sum(bool(o.label_free_warnings) for o in blocks), streams):>11}"
                + f"{_fmt(sum(o.label_alarm for o in control), streams):>8}"
                + f"{_fmt(sum(o.correlated_notice for o in control), streams):>9}"
            )
    return lines


def detector_lines(runs: list[Run], streams: int) -> list[str]:
    """Which label-based detectors warned, in how many streams (labels with the batch and late pooled)."""
    lines = []
    for name in dict.fromkeys(r.dataset for r in runs):
        for mode in (*MODES, "control"):
            counts: Counter[str] = Counter()
            for r in runs:
                if r.dataset == name and r.mode == mode:
                    counts.update({n for n, _ in r.outcome.label_warnings})
            text = ", ".join(f"{n} {c}" for n, c in sorted(counts.items())) or "none"
            lines.append(f"  {name:<14}{mode:<9}{text}")
    return [*lines, f"  (counts of the {2 * streams} runs per line: {streams} streams × 2 label timings)"]


def power_table(runs: list[Run]) -> list[str]:
    """The power table: one line per study, label timing and mode."""
    lines = [
        f"{'study':<34}{'labels':<10}{'mode':<9}{'streams':>8}{'early':>7}{'found':>7}"
        f"{'≤' + str(WITHIN) + ' blk':>8}{'  delay, blocks: median (range)':<30}"
    ]
    for study in dict.fromkeys(r.study for r in runs):
        for delay in LABEL_DELAYS:
            for mode in MODES:
                mine = [r for r in runs if r.study == study and r.mode == mode and r.label_delay == delay]
                assert mine[0].change is not None
                delays = []
                early = 0
                for r in mine:
                    first = r.outcome.first_label_alarm(0)
                    early += first is not None and first < (r.change or 0)
                    after = r.outcome.first_label_alarm(r.change or 0)
                    if after is not None:
                        delays.append(after - (r.change or 0))
                labels = "w/ batch" if delay == 0 else f"{delay} late"
                lines.append(
                    f"{study:<34}{labels:<10}{mode:<9}{len(mine):>8}{early:>7}{len(delays):>7}"
                    f"{sum(d <= WITHIN for d in delays):>8}  {_delay_text(delays):<30}"
                )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    """Run every study and write the table and the per-run CSV."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=40, help="null streams per dataset (≥ 20)")
    parser.add_argument("--power-streams", type=int, default=20, help="streams per power study")
    parser.add_argument("--datasets", nargs="*", default=sorted(SETTINGS), choices=sorted(SETTINGS))
    parser.add_argument("--tag", default="", help="written as blocked_table_TAG.txt/.csv")
    parser.add_argument("--note", default="", help="a line for the header (e.g. which code ran)")
    args = parser.parse_args(argv)
    env = f"PYTHONPATH={shlex.quote(os.environ['PYTHONPATH'])} " if os.environ.get("PYTHONPATH") else ""
    command = env + shlex.join(
        ["python", "benchmarks/blocked_table.py", *(sys.argv[1:] if argv is None else argv)]
    )
    start = time.perf_counter()

    def log(text: str) -> None:
        print(f"[{time.perf_counter() - start:6.0f} s] {text}", flush=True)

    tasks: dict[str, BlockedTask] = {}
    runs: list[Run] = []
    for name in args.datasets:
        tasks[name], more = null_study(name, args.streams, log)
        runs += more
    power: list[Run] = []
    flights = flights_by_day()
    studies: list[tuple[str, BlockedTask, Callable[[int], StreamPlan]]] = [
        (
            "nycflights13: Sep-Nov → December",
            flights,
            lambda s: date_order_plan(flights, s, n_cal=30),
        ),
    ]
    if "hsb82" in tasks:
        hsb = tasks["hsb82"]
        studies.append(
            (
                "hsb82: public → Catholic schools",
                hsb,
                lambda s: group_shift_plan(hsb, s, n_cal=40, n_before=20),
            )
        )
    if "verbagg" in tasks:
        verb = tasks["verbagg"]
        studies.append(
            ("verbagg: women → men", verb, lambda s: group_shift_plan(verb, s, n_cal=80, n_before=40))
        )
    for study, task, make_plan in studies:
        t0 = time.perf_counter()
        power += power_study(study, task, make_plan, args.power_streams)
        log(f"{study}: {args.power_streams} streams in {time.perf_counter() - t0:.0f} s")
    seconds = time.perf_counter() - start
    load = os.getloadavg()
    example = {name: run_stream_shape(tasks[name]) for name in tasks}
    lines = [
        command,
        "",
        "Blocked streams (issue 36): label-based warnings on block-shuffled real streams, and delay on "
        "real shifts",
        _source(),
        *([args.note] if args.note else []),
        f"numpy {np.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {seconds:.0f} s",
        "Monitor(shift='default'), calibrators aps (marginal APS) and lac-by-class (LAC, mondrian='label'), "
        "α = 0.1",
        "",
        f"NULL STREAMS: blocks shuffled whole, {args.streams} streams per dataset (every alarm is false)",
        *null_table(tasks, runs, args.streams),
        "",
        "rows, blocks: the whole dataset; trn/cal/str: training, calibration and stream blocks; rows/str, "
        "batches: per stream (median)",
        f"FA default / FA blocks=: streams with any label-based warning, without / with block keys; bound: "
        f"the most that δ_total = {DELTA_TOTAL} allows",
        "notice: default streams whose notices() mention correlated rows; FA w/o ntc: default streams "
        "that warn without one",
        "LF: streams with a label-free warning (confidence martingale; with blocks=, its block version)",
        "ctrl FA / ctrl ntc: the control (rows shuffled one by one, defaults): label-based warnings / "
        "correlated-rows notices",
        "",
        "Label-based detectors that warned (streams):",
        *detector_lines(runs, args.streams),
        "",
        f"POWER: real shifts, one block a batch, {args.power_streams} streams each",
        *power_table(power),
        "",
        "early: streams with a label-based alarm before the change; found: an alarm at or after it; "
        f"≤{WITHIN} blk: within {WITHIN} blocks of it;",
        "delay: blocks from the change to the first label-based alarm at or after it (with labels 2 late, "
        "an alarm the changed",
        "blocks caused comes 2 or more blocks after it; sooner: an alarm already under way, see early).",
        "",
        "Batches per null stream: " + ", ".join(f"{k} {v}" for k, v in example.items()),
    ]
    text = "\n".join(line.rstrip() for line in lines)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    stem = "blocked_table" + (f"_{args.tag}" if args.tag else "")
    (RESULTS / f"{stem}.txt").write_text(text + "\n")
    rows = [r.row() for r in runs + power]
    with (RESULTS / f"{stem}.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def run_stream_shape(task: BlockedTask) -> str:
    """Rows a batch of a dataset's null streams (median), as text."""
    settings = SETTINGS[task.name]
    rows = settings.blocks_per_batch * float(np.median(task.ends - task.starts))
    return f"{settings.blocks_per_batch} {task.block}(s), ~{rows:.0f} rows"


if __name__ == "__main__":
    main()
