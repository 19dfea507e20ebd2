"""NannyML and alibi-detect on the day-structured streams of ``seasonal_table.py`` (in ``.venv-drift``).

Not a calwatch module: it imports none of calwatch and runs only in the competitors' environment
(``bash benchmarks/drift_env.sh``). ``seasonal_table.py`` writes one sub-folder per stream
(``reference.parquet``: the calibration days' rows with ``timestamp``, ``p_pos``, ``y_pred``,
``y_true`` and ``score`` = 1 − max p; ``stream.parquet``: the stream's rows in order, without
``y_true``) and reads back one JSON file: per stream and tool, one *statistic per stream day*
(larger = more alarming), so that ``seasonal_table.py`` can set every tool's threshold to the
same realised false-alarm rate on the null streams.

Tools and their per-day statistic:

- NannyML 0.13.1 ``CBPE`` (``classification_binary``, estimated accuracy), chunks of one day
  (``chunk_period="D"`` on ``timestamp``): ``|estimate − mean| / sd`` of its reference chunks
  (the distance NannyML's own default alert, ±3 sd, thresholds);
- NannyML ``UnivariateDriftCalculator`` on ``score`` (its default Jensen-Shannon distance for a
  continuous column), one-day chunks: the distance;
- alibi-detect 0.13.0 ``CVMDriftOnline`` on ``score`` (ERT 1,000, window 100, 1,000 random
  reference rows, 10,000 threshold simulations), fed every ``--thin``-th row (alibi runs row by
  row in Python, ~7,000 rows/s here: the full streams would take hours): per day, the largest
  ``test_stat / threshold`` of the rows fed that day.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ.setdefault("NML_DISABLE_USAGE_LOGGING", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

ERT = 1_000
WINDOW = 100
N_BOOTSTRAPS = 10_000
N_REF_ONLINE = 1_000


def _per_day(stream: pd.DataFrame, frame: pd.DataFrame, values: np.ndarray) -> list[float | None]:
    """NannyML's chunk values in stream-day order (one chunk per calendar day of ``timestamp``)."""
    days = stream["timestamp"].dt.floor("D").drop_duplicates().tolist()
    start_column = next(c for c in frame.columns if c[0] == "chunk" and c[-1] == "start_date")
    starts = pd.to_datetime(frame[start_column]).dt.floor("D").tolist()
    by_day = dict(zip(starts, values.tolist(), strict=True))
    return [None if by_day.get(d) is None or not np.isfinite(by_day[d]) else float(by_day[d]) for d in days]


def nannyml_cbpe(reference: pd.DataFrame, stream: pd.DataFrame) -> dict[str, Any]:
    import nannyml as nml

    out: dict[str, Any] = {}
    start = time.perf_counter()
    cbpe = nml.CBPE(
        problem_type="classification_binary",
        y_pred_proba="p_pos",
        y_pred="y_pred",
        y_true="y_true",
        metrics=["accuracy"],
        timestamp_column_name="timestamp",
        chunk_period="D",
    )
    cbpe.fit(reference)
    ref_frame = cbpe.estimate(reference).filter(period="analysis").to_df()
    ref_values = ref_frame[("accuracy", "value")].to_numpy(dtype=float)
    mean, sd = float(np.nanmean(ref_values)), float(np.nanstd(ref_values))
    frame = cbpe.estimate(stream).filter(period="analysis").to_df()
    z = np.abs(frame[("accuracy", "value")].to_numpy(dtype=float) - mean) / sd
    out["nannyml cbpe accuracy"] = {
        "days": _per_day(stream, frame, z),
        "seconds": time.perf_counter() - start,
    }
    return out


def nannyml_univariate(reference: pd.DataFrame, stream: pd.DataFrame) -> dict[str, Any]:
    import nannyml as nml

    out: dict[str, Any] = {}
    start = time.perf_counter()
    calc = nml.UnivariateDriftCalculator(
        column_names=["score"], timestamp_column_name="timestamp", chunk_period="D"
    )
    calc.fit(reference)
    frame = calc.calculate(stream).filter(period="analysis").to_df()
    method = next(c[1] for c in frame.columns if c[0] == "score" and c[-1] == "value")
    values = frame[("score", method, "value")].to_numpy(dtype=float)
    out["nannyml univariate score"] = {
        "days": _per_day(stream, frame, values),
        "seconds": time.perf_counter() - start,
        "note": method,
    }
    return out


def alibi(
    reference: pd.DataFrame, stream: pd.DataFrame, thin: int, seed: int, cache: dict[str, Any]
) -> dict[str, Any]:
    from alibi_detect.cd import CVMDriftOnline

    rng = np.random.default_rng(seed)
    x_ref = reference["score"].to_numpy(dtype=np.float64)[
        rng.choice(len(reference), N_REF_ONLINE, replace=False)
    ]
    start = time.perf_counter()
    if "cvm" not in cache:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cache["cvm"] = CVMDriftOnline(
                x_ref[:, None], ert=ERT, window_sizes=[WINDOW], n_bootstraps=N_BOOTSTRAPS, verbose=False
            )
    detector = cache["cvm"]
    detector.x_ref = x_ref[:, None]  # thresholds are distribution-free: reuse them (alibi's own step)
    detector._configure_ref()
    detector.reset_state()
    days = stream["timestamp"].dt.floor("D").to_numpy()
    fed = np.arange(0, len(stream), thin)
    scores = stream["score"].to_numpy(dtype=np.float64)
    best: dict[Any, float] = {}
    for i in fed:
        result = detector.predict(scores[i : i + 1])["data"]
        stat = float(np.max(np.atleast_1d(result["test_stat"])))
        limit = float(np.max(np.atleast_1d(result["threshold"])))
        ratio = stat / limit if limit > 0 and np.isfinite(stat) else 0.0
        best[days[i]] = max(best.get(days[i], 0.0), ratio)
    order = pd.unique(days)
    return {
        "alibi cvm online score": {
            "days": [best.get(d) for d in order],
            "seconds": time.perf_counter() - start,
            "note": f"every {thin}th row",
        }
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--thin", type=int, default=10)
    args = parser.parse_args()
    import importlib.metadata as md

    results: dict[str, Any] = {
        "versions": {p: md.version(p) for p in ("nannyml", "alibi-detect", "numpy", "pandas")},
        "streams": {},
    }
    cache: dict[str, Any] = {}
    for sub in sorted(p for p in args.folder.iterdir() if p.is_dir()):
        reference = pd.read_parquet(sub / "reference.parquet")
        stream = pd.read_parquet(sub / "stream.parquet")
        seed = int(json.loads((sub / "spec.json").read_text())["seed"])
        out: dict[str, Any] = {}
        for name in ("nannyml cbpe accuracy", "nannyml univariate score", "alibi cvm online score"):
            try:
                if name == "nannyml cbpe accuracy":
                    out.update(nannyml_cbpe(reference, stream))
                elif name == "nannyml univariate score":
                    out.update(nannyml_univariate(reference, stream))
                else:
                    out.update(alibi(reference, stream, args.thin, seed, cache))
            except Exception as error:  # a competitor failing is a result to report
                out[name] = {"error": f"{type(error).__name__}: {error}"[:500]}
        results["streams"][sub.name] = out
        print(sub.name, {k: round(v.get("seconds", 0.0), 1) for k, v in out.items()}, flush=True)
    args.out.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
