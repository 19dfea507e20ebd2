"""NannyML, Evidently and whylogs on ``bench_table.py``'s parquet prediction log (in their venvs).

Not a calwatch module: it imports none of calwatch and runs only in the competitors' environments
(``bash benchmarks/drift_env.sh`` for NannyML and Evidently, ``bash benchmarks/whylogs_env.sh``
for whylogs, which needs numpy < 2). ``bench_table.py`` calls it once per tool, each in a fresh
process so the peak RSS printed is the tool's own, with the log (``id``, ``day``, ``p0``, ``p1``;
no labels: they come later) and a labelled reference (``p1``, ``y_true``), and reads back one JSON
line: rows, seconds, chunks, peak RSS, and what was computed.

What each tool does, label-free as calwatch's table paths are (the log has no labels), with one
chunk per ``day`` as calwatch has one batch per day:

- NannyML 0.13.1: the whole log read into pandas (NannyML takes a data frame), ``y_pred`` =
  ``p1 >= 0.5``, ``CBPE(problem_type="classification_binary", metrics=["roc_auc",
  "accuracy"])`` fitted on the reference and estimated on every chunk (``chunk_size`` = the
  log's rows / days). Timed: the read, the fit and the estimate.
- Evidently 0.7: one ``Report([DataDriftPreset()])`` per day on ``p0`` and ``p1`` (prediction
  drift) against the reference, over the first ``--rows`` rows (default all; at ~40 k rows/s a
  10⁷-row log takes minutes, so ``bench_table.py`` passes a prefix and says so). Timed: reading
  those days with pyarrow and every report.
- whylogs 1.6.4: ``why.log`` profiles (counts, types, a KLL quantile sketch, cardinality) of
  ``p0`` and ``p1`` per day, each row group's part of a day profiled and merged into the day's
  profile (whylogs' mergeable profiles, as its Spark integration uses them), over the first
  ``--rows`` rows (default all); each day's summary read at the end. Timed: the reads, the
  profiles, the merges and the summaries.

Usage: ``.venv-drift/bin/python table_peers.py TOOL LOG REFERENCE [--rows N]`` (``.venv-whylogs``
for ``whylogs``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import warnings
from typing import Any

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("NML_DISABLE_USAGE_LOGGING", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("EVIDENTLY_DISABLE_TELEMETRY", "1")
os.environ.setdefault("WHYLOGS_NO_ANALYTICS", "True")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402


def peak_rss_mib() -> float:
    """This process's peak resident memory (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_nannyml(log: str, reference: pd.DataFrame) -> dict[str, Any]:
    import nannyml as nml

    start = time.perf_counter()
    frame = pq.read_table(log, columns=["id", "day", "p1"]).to_pandas()
    frame["y_pred"] = (frame["p1"] >= 0.5).astype(np.int64)
    days = int(frame["day"].nunique())
    estimator = nml.CBPE(
        problem_type="classification_binary",
        y_pred_proba="p1",
        y_pred="y_pred",
        y_true="y_true",
        metrics=["roc_auc", "accuracy"],
        chunk_size=len(frame) // days,
    )
    estimator.fit(reference)
    result = estimator.estimate(frame).filter(period="analysis").to_df()
    seconds = time.perf_counter() - start
    return {
        "rows": len(frame),
        "seconds": seconds,
        "chunks": int(result.shape[0]),
        "what": "CBPE roc_auc + accuracy per chunk (label-free), whole log in pandas",
    }


def run_evidently(log: str, reference: pd.DataFrame, rows: int | None) -> dict[str, Any]:
    from evidently import DataDefinition, Dataset, Report
    from evidently.presets import DataDriftPreset

    columns = ["p0", "p1"]
    definition = DataDefinition(numerical_columns=columns)
    ref = reference.assign(p0=1.0 - reference["p1"])[columns]
    reference_set = Dataset.from_pandas(ref, data_definition=definition)
    start = time.perf_counter()
    table = pq.ParquetFile(log)
    done = chunks = 0
    for group in range(table.num_row_groups):
        frame = table.read_row_group(group, columns=["day", *columns]).to_pandas()
        if rows is not None:
            frame = frame.iloc[: max(0, rows - done)]
        for _, day in frame.groupby("day", sort=True):
            current = Dataset.from_pandas(day[columns].reset_index(drop=True), data_definition=definition)
            Report([DataDriftPreset()]).run(current, reference_set).dict()
            chunks += 1
        done += len(frame)
        if rows is not None and done >= rows:
            break
    return {
        "rows": done,
        "seconds": time.perf_counter() - start,
        "chunks": chunks,
        "what": "Report([DataDriftPreset()]) on p0, p1 per day (label-free)",
    }


def run_whylogs(log: str, rows: int | None) -> dict[str, Any]:
    import whylogs as why

    columns = ["p0", "p1"]
    start = time.perf_counter()
    table = pq.ParquetFile(log)
    days: dict[Any, Any] = {}  # day -> its profile view, merged over the row groups that hold it
    done = 0
    for group in range(table.num_row_groups):
        frame = table.read_row_group(group, columns=["day", *columns]).to_pandas()
        if rows is not None:
            frame = frame.iloc[: max(0, rows - done)]
        for day, part in frame.groupby("day", sort=True):
            view = why.log(pandas=part[columns]).view()
            days[day] = view if day not in days else days[day].merge(view)
        done += len(frame)
        if rows is not None and done >= rows:
            break
    summaries = [view.to_pandas() for view in days.values()]  # what a dashboard would read
    return {
        "rows": done,
        "seconds": time.perf_counter() - start,
        "chunks": len(summaries),
        "what": "why.log profiles of p0, p1 per day, merged over row groups (label-free)",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("tool", choices=["nannyml", "evidently", "whylogs"])
    parser.add_argument("log")
    parser.add_argument("reference")
    parser.add_argument("--rows", type=int, default=None, help="Evidently, whylogs: the first N rows only")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    reference = pd.read_parquet(args.reference)
    if args.tool == "nannyml":
        out = run_nannyml(args.log, reference)
    elif args.tool == "whylogs":
        out = run_whylogs(args.log, args.rows)
    else:
        out = run_evidently(args.log, reference, args.rows)
    out["peak_rss_mib"] = peak_rss_mib()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
