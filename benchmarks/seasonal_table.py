"""Seasonal streams: label-free detectors compared at equal *realised* false-alarm rates.

Data: NYC flights 2013, April-December (274 days), each row scored by the late-arrival model of
``calwatch.datasets.flights_task(seed=0)``; rows in time order within each day. Flights of one
day share its weather, so rows are correlated within a day; the days themselves are close to
exchangeable. Every stream is built from whole days:

* **null streams** (seeds 0..S-1): the days shuffled whole; 30 are the calibration (reference)
  days, the other 244 form the stream. Nothing changes: every alarm is false.
* **broken streams** (seeds 1000..1000+S-1): the same construction, and from the 61st stream day
  on the feed stops filling ``dep_delay`` (the model sees 0): a real pipeline failure.

Each tool reports one statistic per stream day (larger = more alarming): calwatch's row-level
confidence martingale (``ConfidenceMartingale``: the day's largest log10 CUSUM), calwatch's
block martingale (``BlockConfidenceMartingale``, days as blocks: log10 S after the day), NannyML
CBPE (estimated accuracy, one-day chunks: distance to its reference chunks' mean in sds),
NannyML univariate drift on the score (Jensen-Shannon, one-day chunks) and alibi-detect's
``CVMDriftOnline`` on the score (largest test statistic / threshold of the day; every 10th row).
See ``seasonal_competitors.py`` for the competitors' configuration.

Equal realised false alarms: for a target rate f, each tool's threshold h_f is set so that a
share f of the null streams ever reaches it (the (1 − f) quantile of the null streams' maxima;
with S streams, f is a multiple of 1/S). At h_f, on the broken streams: how many alarm before the
break (false), how many within 7, 14, 28 and 56 days after it (power), and the median delay.
Each tool's *nominal* rule is reported beside it: how many null streams its own default threshold
alarms on (calwatch block: Ville c = 100; calwatch rows: the anytime CUSUM threshold at δ = 0.01;
NannyML CBPE: 3 sd; alibi: ERT 1,000 → ratio 1).

Run: ``python benchmarks/seasonal_table.py [--streams S] [--no-competitors]`` (competitors need
``bash benchmarks/drift_env.sh``); writes ``benchmarks/results/seasonal_table.txt`` and ``.csv``.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from calwatch.datasets import flights_task, load_flights  # noqa: E402
from calwatch.datasets.tabular import _flight_inputs  # noqa: E402
from calwatch.shift import BlockConfidenceMartingale, CalibrationData, ConfidenceMartingale  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
RESULTS = BENCH_DIR / "results"
DRIFT_PYTHON = BENCH_DIR / ".venv-drift" / "bin" / "python"
COMPETITORS = BENCH_DIR / "seasonal_competitors.py"
N_CALIBRATION_DAYS = 30
BREAK_DAY = 60
RATES = (0.05, 0.1, 0.25)
WITHIN = (7, 14, 28, 56)


@dataclass
class Days:
    """The flights, April-December, in time order, scored twice (intact and with dep_delay = 0)."""

    frame: pl.DataFrame
    probs: np.ndarray
    broken: np.ndarray
    starts: np.ndarray
    ends: np.ndarray


def load_days() -> Days:
    task = flights_task(seed=0)
    frame = load_flights().filter(pl.col("month") >= 4).sort(["month", "day", "sched_dep_time"])
    X = _flight_inputs(frame)
    probs = np.asarray(task.model.predict_proba(X), dtype=np.float64)
    broken = np.asarray(
        task.model.predict_proba(X.with_columns(pl.lit(0.0).alias("dep_delay"))), dtype=np.float64
    )
    day = (frame["month"] * 100 + frame["day"]).to_numpy()
    starts = np.flatnonzero(np.concatenate([[True], day[1:] != day[:-1]]))
    return Days(frame, probs, broken, starts, np.append(starts[1:], len(day)))


def build(days: Days, seed: int, broken: bool) -> dict[str, Any]:
    """One stream: calibration day indices, stream row indices and which probabilities each row uses."""
    order = np.random.default_rng(seed).permutation(len(days.starts))
    cal_days, stream_days = order[:N_CALIBRATION_DAYS], order[N_CALIBRATION_DAYS:]
    cal_rows = np.concatenate([np.arange(days.starts[d], days.ends[d]) for d in cal_days])
    rows = [np.arange(days.starts[d], days.ends[d]) for d in stream_days]
    probs = np.concatenate(
        [(days.broken if broken and j >= BREAK_DAY else days.probs)[r] for j, r in enumerate(rows)]
    )
    day_of_row = np.concatenate([np.full(len(r), j) for j, r in enumerate(rows)])
    return {
        "cal_rows": cal_rows,
        "cal_days": cal_days,
        "rows": np.concatenate(rows),
        "probs": probs,
        "day_of_row": day_of_row,
        "n_days": len(stream_days),
        "seed": seed,
    }


def _keys(days: Days, rows: np.ndarray) -> list[str]:
    month, day = days.frame["month"].to_numpy()[rows], days.frame["day"].to_numpy()[rows]
    return [f"2013-{m:02d}-{d:02d}" for m, d in zip(month, day, strict=True)]


def calwatch_statistics(days: Days, stream: dict[str, Any]) -> dict[str, Any]:
    """Per stream day: the row martingale's largest log10 CUSUM and the block martingale's log10 S."""
    cal_probs = days.probs[stream["cal_rows"]]
    data = CalibrationData(
        cal_probs, np.zeros(len(cal_probs), dtype=np.intp), {}, blocks=_keys(days, stream["cal_rows"])
    )
    out: dict[str, Any] = {}
    start = time.perf_counter()
    rows = ConfidenceMartingale(seed=stream["seed"])
    rows.calibrate(data)
    assert rows.martingale_ is not None
    step = rows.martingale_.step(1.0 - stream["probs"].max(axis=1))
    per_day = np.full(stream["n_days"], -np.inf)
    np.maximum.at(per_day, stream["day_of_row"], step.log_cusum / math.log(10))
    nominal = bool(rows.martingale_.alarm_indices_)
    out["calwatch confidence martingale (rows)"] = {
        "days": per_day.tolist(),
        "seconds": time.perf_counter() - start,
        "nominal": nominal,
    }
    start = time.perf_counter()
    block = BlockConfidenceMartingale(seed=stream["seed"])
    block.calibrate(data)
    keys = _keys(days, stream["rows"])
    bounds = np.flatnonzero(np.concatenate([[True], stream["day_of_row"][1:] != stream["day_of_row"][:-1]]))
    after = []  # log10 S after each day's rows: day j is complete (and tested) once day j + 1 begins
    for lo, hi in zip(bounds, np.append(bounds[1:], len(keys)), strict=True):
        block.observe(stream["probs"][lo:hi], None, keys[lo:hi])
        assert block.martingale_ is not None
        after.append(block.martingale_.log10_martingale_)
    block.observe(np.array([[0.5, 0.5]]), None, ["end"])  # closes the last day
    assert block.martingale_ is not None
    per_day = [*after[1:], block.martingale_.log10_martingale_]
    out["calwatch block martingale (days)"] = {
        "days": per_day,
        "seconds": time.perf_counter() - start,
        "nominal": bool(block.martingale_.alarm_indices_),
    }
    return out


def write_competitor_inputs(days: Days, stream: dict[str, Any], folder: Path) -> None:
    folder.mkdir(parents=True)
    frame = days.frame
    base = pl.datetime(2013, pl.col("month"), pl.col("day"), pl.col("hour"), pl.col("minute"))
    late = frame["late"].to_numpy().astype(int)

    def table(rows: np.ndarray, probs: np.ndarray, with_truth: bool) -> pl.DataFrame:
        part = frame[pl.Series(rows)].select(base.alias("timestamp"))
        out = part.with_columns(
            pl.Series("p_pos", probs[:, 1]),
            pl.Series("y_pred", (probs[:, 1] >= 0.5).astype(int)),
            pl.Series("score", 1.0 - probs.max(axis=1)),
        )
        return out.with_columns(pl.Series("y_true", late[rows])) if with_truth else out

    table(stream["cal_rows"], days.probs[stream["cal_rows"]], True).write_parquet(
        folder / "reference.parquet"
    )
    table(stream["rows"], stream["probs"], False).write_parquet(folder / "stream.parquet")
    (folder / "spec.json").write_text(json.dumps({"seed": stream["seed"]}))


def threshold_at(null_maxima: np.ndarray, rate: float) -> float:
    """The smallest threshold that a share ``rate`` of the null streams (rounded down) reaches."""
    ordered = np.sort(null_maxima)[::-1]
    k = math.floor(rate * len(ordered))  # streams allowed to reach it
    return float(np.nextafter(ordered[k], np.inf)) if k < len(ordered) else -math.inf


def evaluate(null: list[list[float | None]], broken: list[list[float | None]]) -> list[dict[str, Any]]:
    def clean(path: list[float | None]) -> np.ndarray:
        return np.array([-math.inf if v is None or not math.isfinite(v) else v for v in path])

    maxima = np.array([clean(p).max() for p in null])
    rows = []
    for rate in RATES:
        h = threshold_at(maxima, rate)
        early, found, delays = 0, dict.fromkeys(WITHIN, 0), []
        for path in broken:
            hits = np.flatnonzero(clean(path) >= h)
            if hits.size and hits[0] < BREAK_DAY:
                early += 1
                continue
            if hits.size:
                delay = int(hits[0] - BREAK_DAY + 1)
                delays.append(delay)
                for w in WITHIN:
                    found[w] += delay <= w
        realised = float(np.mean(maxima >= h))
        rows.append(
            {
                "rate": rate,
                "realised": realised,
                "threshold": h,
                "early": early,
                "found": found,
                "median_delay": float(np.median(delays)) if delays else None,
                "n": len(broken),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", type=int, default=20)
    parser.add_argument("--no-competitors", action="store_true")
    parser.add_argument("--thin", type=int, default=10)
    args = parser.parse_args()
    start = time.perf_counter()
    days = load_days()
    streams = {f"null-{s}": build(days, s, False) for s in range(args.streams)}
    streams |= {f"broken-{s}": build(days, 1000 + s, True) for s in range(args.streams)}
    results: dict[str, dict[str, Any]] = {name: calwatch_statistics(days, st) for name, st in streams.items()}
    versions = ""
    if not args.no_competitors:
        if not DRIFT_PYTHON.exists():
            sys.exit(
                "benchmarks/.venv-drift is missing: run `bash benchmarks/drift_env.sh` (or --no-competitors)"
            )
        with tempfile.TemporaryDirectory() as tmp:
            for name, st in streams.items():
                write_competitor_inputs(days, st, Path(tmp) / name)
            out = Path(tmp) / "competitors.json"
            subprocess.run(
                [str(DRIFT_PYTHON), str(COMPETITORS), tmp, str(out), "--thin", str(args.thin)], check=True
            )
            competitors = json.loads(out.read_text())
        versions = ", ".join(f"{k} {v}" for k, v in competitors["versions"].items())
        for name, tools in competitors["streams"].items():
            results[name].update(tools)
    tools = list(dict.fromkeys(t for r in results.values() for t in r))
    load = os.getloadavg()
    lines = [
        "Seasonal streams (NYC flights 2013, days shuffled whole): label-free detectors at equal realised "
        "false-alarm rates",
        f"{args.streams} null streams (every alarm false) and {args.streams} broken streams (dep_delay = 0 "
        f"from stream day {BREAK_DAY + 1}); {N_CALIBRATION_DAYS} calibration days, 244 stream days, "
        "~1,000 flights a day",
        f"numpy {np.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {time.perf_counter() - start:.0f} s",
        f"competitors: {versions or 'not run'}",
        "",
        f"{'tool':<42}{'nominal FA':>12}{'f':>6}{'realised':>10}{'early':>7}"
        + "".join(f"{'≤' + str(w) + 'd':>7}" for w in WITHIN)
        + f"{'median delay':>14}",
    ]
    csv = []
    for tool in tools:
        null = [results[f"null-{s}"].get(tool, {}).get("days") for s in range(args.streams)]
        broken = [results[f"broken-{s}"].get(tool, {}).get("days") for s in range(args.streams)]
        if any(p is None for p in null + broken):
            error = next(
                (
                    results[n][tool].get("error")
                    for n in results
                    if tool in results[n] and "error" in results[n][tool]
                ),
                "missing",
            )
            lines.append(f"{tool:<42}  {error}")
            continue
        nominal = [results[f"null-{s}"][tool].get("nominal") for s in range(args.streams)]
        nominal_text = f"{sum(bool(n) for n in nominal)}/{args.streams}" if nominal[0] is not None else "—"
        for row in evaluate(null, broken):
            delay = "—" if row["median_delay"] is None else f"{row['median_delay']:.0f} d"
            lines.append(
                f"{tool:<42}{nominal_text:>12}{row['rate']:>6.2f}{row['realised']:>10.2f}{row['early']:>7}"
                + "".join(f"{row['found'][w]:>7}" for w in WITHIN)
                + f"{delay:>14}"
            )
            csv.append(
                {
                    "tool": tool,
                    **{k: v for k, v in row.items() if k != "found"},
                    **{f"found_within_{w}d": row["found"][w] for w in WITHIN},
                }
            )
    lines += [
        "",
        "nominal FA: null streams on which the tool's own default rule alarms (calwatch only; NannyML and",
        "alibi have no stream-level rule here). f: target false-alarm share; realised: share of null streams",
        "reaching the threshold; early: broken streams alarmed before the break; ≤Nd: broken streams found",
        "within N days of it.",
    ]
    text = "\n".join(lines)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "seasonal_table.txt").write_text(text + "\n")
    pl.DataFrame(csv).write_csv(RESULTS / "seasonal_table.csv")


if __name__ == "__main__":
    main()
