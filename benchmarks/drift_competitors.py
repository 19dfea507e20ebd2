"""NannyML, Evidently and alibi-detect on the streams ``shift_table.py`` wrote (run in ``.venv-drift``).

Not a calwatch module: it imports none of calwatch and runs only in the competitors' environment
(``bash benchmarks/drift_env.sh``). ``shift_table.py`` calls it with a folder holding one sub-folder
per stream (``reference.parquet``: the calibration rows, the tools' reference data;
``stream.parquet``: the stream in order; ``embedding_*.npy``; ``spec.json``: chunk size, change row,
column kinds) and reads back one JSON file: per stream and tool, the chunks (chunk tests) or rows
(online detectors) where it alarmed, its run time, or the error it raised.

Configuration (each tool's defaults unless stated):

- NannyML 0.13.1, ``chunk_size`` = the stream's chunk, reference = the calibration rows:
  ``CBPE`` (``classification_binary``, ROC AUC and accuracy, label-free: the stream is given
  without ``y_true``); ``UnivariateDriftCalculator`` on every model input (its default
  Jensen-Shannon method for continuous and categorical columns; a chunk alarms when any column
  does); ``DataReconstructionDriftCalculator`` (PCA reconstruction error). Alerts are NannyML's
  own (default thresholds).
- Evidently 0.7: one ``Report([DataDriftPreset()])`` per chunk against the reference rows; the
  preset's dataset-level verdict (share of drifted columns ≥ its ``drift_share`` = 0.5), and, as a
  more sensitive reading, "any column drifted".
- alibi-detect 0.13.0, ERT = 1,000 rows, window W = 100, reference = 1,000 calibration rows drawn
  at random, the same rows for all three (alibi's online detectors hold n × n reference
  matrices); threshold simulations: 10,000 for CVM (its default), 2,000 for MMD (its default
  1,000 cannot estimate the 1 − 1/ERT quantile; 10,000 took ~7 min per stream here).
  ``CVMDriftOnline`` on the numeric model inputs (per-feature tests, alibi's correction for
  several features) and on the model's ``1 − max p``; ``MMDDriftOnline`` (PyTorch backend on
  the CPU, Gaussian RBF kernel with alibi's median-heuristic bandwidth) on the embedding. Rows
  are fed one at a time; after each detection the detector is reset (``reset_state``) and
  continues. On a stream with a change point it stops at its first detection after the change
  (its time is then for that stretch only). CVM thresholds are distribution-free (they depend
  on the reference size, the windows, the ERT and the number of features only), so each
  (features, reference size) configuration is simulated once and reused on the other streams
  with their own reference rows (``_configure_ref``, alibi's own step).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

# One thread per library, like calwatch's side: on a busy machine, OpenMP thread pools spinning
# against other processes slowed alibi's PyTorch threshold set-up fifteenfold.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ.setdefault("NML_DISABLE_USAGE_LOGGING", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("EVIDENTLY_DISABLE_TELEMETRY", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

ERT = 1_000
WINDOW = 100
N_BOOTSTRAPS = 10_000  # CVM (alibi's default)
N_BOOTSTRAPS_MMD = 2_000  # MMD (alibi's default 1,000 cannot estimate the 1 − 1/ERT quantile)
N_REF_ONLINE = 1_000
DRIFT_SHARE = 0.5


def _errors(fn: Callable[[], dict[str, Any]], tools: list[str]) -> dict[str, Any]:
    """Run ``fn``; on an exception, every tool it covers gets the error text instead."""
    try:
        return fn()
    except Exception as error:  # a competitor failing is a result to report
        text = f"{type(error).__name__}: {error}".strip()
        traceback.print_exc()
        return {tool: {"kind": "chunk", "error": text[:500]} for tool in tools}


def _chunk(alarms: list[int], seconds: float, note: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "chunk", "alarms": alarms, "seconds": seconds}
    if note is not None:
        out["note"] = note
    return out


# ------------------------------------------------------------------------------ NannyML
def run_nannyml(spec: dict[str, Any], ref: pd.DataFrame, stream: pd.DataFrame) -> dict[str, Any]:
    import nannyml as nml

    features = spec["categorical"] + spec["numeric"]
    chunk = spec["chunk"]
    n_chunks = spec["n_rows"] // chunk
    analysis = stream.drop(columns=["y_true"])
    out: dict[str, Any] = {}

    def alerts(frame: pd.DataFrame, columns: list[tuple[str, ...]]) -> list[int]:
        if frame.shape[0] != n_chunks:
            msg = f"NannyML made {frame.shape[0]} chunks, expected {n_chunks}"
            raise RuntimeError(msg)
        hit = np.zeros(frame.shape[0], dtype=bool)
        for column in columns:
            hit |= frame[column].fillna(False).to_numpy(dtype=bool)
        return np.flatnonzero(hit).tolist()

    def cbpe() -> dict[str, Any]:
        start = time.perf_counter()
        estimator = nml.CBPE(
            problem_type="classification_binary",
            y_pred_proba="p_pos",
            y_pred="y_pred",
            y_true="y_true",
            metrics=["roc_auc", "accuracy"],
            chunk_size=chunk,
        )
        estimator.fit(ref)
        frame = estimator.estimate(analysis).filter(period="analysis").to_df()
        seconds = (time.perf_counter() - start) / 2
        return {
            f"nannyml cbpe {m}": _chunk(alerts(frame, [(m, "alert")]), seconds)
            for m in ("roc_auc", "accuracy")
        }

    def univariate() -> dict[str, Any]:
        start = time.perf_counter()
        calc = nml.UnivariateDriftCalculator(
            column_names=features, treat_as_categorical=spec["categorical"], chunk_size=chunk
        )
        calc.fit(ref)
        frame = calc.calculate(analysis).filter(period="analysis").to_df()
        columns = [c for c in frame.columns if c[-1] == "alert"]
        methods = sorted({c[1] for c in columns})
        return {
            "nannyml univariate": {
                "kind": "chunk",
                "alarms": alerts(frame, columns),
                "seconds": time.perf_counter() - start,
                "note": f"methods {methods}",
            }
        }

    def multivariate() -> dict[str, Any]:
        start = time.perf_counter()
        calc = nml.DataReconstructionDriftCalculator(column_names=features, chunk_size=chunk)
        calc.fit(ref)
        frame = calc.calculate(analysis).filter(period="analysis").to_df()
        return {
            "nannyml multivariate": {
                "kind": "chunk",
                "alarms": alerts(frame, [("reconstruction_error", "alert")]),
                "seconds": time.perf_counter() - start,
            }
        }

    out.update(_errors(cbpe, ["nannyml cbpe roc_auc", "nannyml cbpe accuracy"]))
    out.update(_errors(univariate, ["nannyml univariate"]))
    out.update(_errors(multivariate, ["nannyml multivariate"]))
    return out


# ----------------------------------------------------------------------------- Evidently
def run_evidently(spec: dict[str, Any], ref: pd.DataFrame, stream: pd.DataFrame) -> dict[str, Any]:
    def run() -> dict[str, Any]:
        from evidently import DataDefinition, Dataset, Report
        from evidently.presets import DataDriftPreset

        features = spec["categorical"] + spec["numeric"]
        definition = DataDefinition(
            numerical_columns=spec["numeric"], categorical_columns=spec["categorical"]
        )
        reference = Dataset.from_pandas(ref[features], data_definition=definition)
        chunk = spec["chunk"]
        dataset_drift: list[int] = []
        any_column: list[int] = []
        methods: set[str] = set()
        start = time.perf_counter()
        for b in range(spec["n_rows"] // chunk):
            current = Dataset.from_pandas(
                stream[features].iloc[b * chunk : (b + 1) * chunk].reset_index(drop=True),
                data_definition=definition,
            )
            snapshot = Report([DataDriftPreset(drift_share=DRIFT_SHARE)]).run(current, reference).dict()
            count = share = None
            for metric in snapshot["metrics"]:
                name = metric["metric_name"]
                if name.startswith("DriftedColumnsCount"):
                    count, share = metric["value"]["count"], metric["value"]["share"]
                elif name.startswith("ValueDrift"):
                    methods.add(metric["config"].get("method", "?"))
            if count is None or share is None:
                msg = "DataDriftPreset returned no DriftedColumnsCount"
                raise RuntimeError(msg)
            if share >= DRIFT_SHARE:
                dataset_drift.append(b)
            if count >= 1:
                any_column.append(b)
        seconds = (time.perf_counter() - start) / 2
        note = f"methods {sorted(methods)}"
        return {
            "evidently dataset drift": _chunk(dataset_drift, seconds, note),
            "evidently any column": _chunk(any_column, seconds, note),
        }

    return _errors(run, ["evidently dataset drift", "evidently any column"])


# -------------------------------------------------------------------------- alibi-detect
_CVM_CACHE: dict[tuple[int, int], Any] = {}


def _cvm(x_ref: np.ndarray) -> Any:
    """A CVMDriftOnline on ``x_ref``; thresholds simulated once per (reference size, features)."""
    from alibi_detect.cd import CVMDriftOnline

    key = (x_ref.shape[0], x_ref.shape[1])
    detector = _CVM_CACHE.get(key)
    if detector is None:
        detector = CVMDriftOnline(
            x_ref, ert=ERT, window_sizes=[WINDOW], n_bootstraps=N_BOOTSTRAPS, batch_size=64, verbose=False
        )
        _CVM_CACHE[key] = detector
    else:  # same thresholds (distribution-free), this stream's reference rows
        detector.x_ref = x_ref
        detector._configure_ref()
    detector.reset_state()
    return detector


def _online(detector: Any, x: np.ndarray, change_row: int | None) -> tuple[list[int], float]:
    alarms: list[int] = []
    start = time.perf_counter()
    for t in range(x.shape[0]):
        if detector.predict(x[t])["data"]["is_drift"]:
            alarms.append(t)
            detector.reset_state()
            if change_row is not None and t >= change_row:
                break
    return alarms, time.perf_counter() - start


def run_alibi(
    spec: dict[str, Any], ref: pd.DataFrame, stream: pd.DataFrame, folder: Path, seed: int
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(ref.shape[0], size=min(N_REF_ONLINE, ref.shape[0]), replace=False))
    change = spec["change_row"]
    out: dict[str, Any] = {}

    def cvm(name: str, columns: list[str]) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            start = time.perf_counter()
            detector = _cvm(ref[columns].to_numpy(dtype=np.float32)[rows])
            setup = time.perf_counter() - start
            alarms, seconds = _online(detector, stream[columns].to_numpy(dtype=np.float32), change)
            return {name: {"kind": "row", "alarms": alarms, "seconds": seconds + setup, "setup": setup}}

        return run

    def mmd() -> dict[str, Any]:
        import torch
        from alibi_detect.cd import MMDDriftOnline

        torch.manual_seed(seed)
        emb_ref = np.load(folder / "embedding_reference.npy")[rows]
        emb = np.load(folder / "embedding_stream.npy")
        start = time.perf_counter()
        detector = MMDDriftOnline(
            emb_ref,
            ert=ERT,
            window_size=WINDOW,
            backend="pytorch",
            n_bootstraps=N_BOOTSTRAPS_MMD,
            device="cpu",
            verbose=False,
        )
        setup = time.perf_counter() - start
        alarms, seconds = _online(detector, emb, change)
        result = {"kind": "row", "alarms": alarms, "seconds": seconds + setup, "setup": setup}
        return {"alibi mmd embedding": result}

    out.update(_errors(cvm("alibi cvm features", spec["numeric"]), ["alibi cvm features"]))
    out.update(_errors(cvm("alibi cvm score", ["score"]), ["alibi cvm score"]))
    out.update(_errors(mmd, ["alibi mmd embedding"]))
    for name in ("alibi cvm features", "alibi cvm score", "alibi mmd embedding"):
        out[name]["kind"] = "row"
    return out


# ---------------------------------------------------------------------------------- main
def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("nannyml", "evidently", "alibi-detect", "torch", "numpy", "pandas", "scikit-learn"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--streams", nargs="+", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    results: dict[str, Any] = {}
    for name in args.streams:
        folder = args.folder / name
        spec = json.loads((folder / "spec.json").read_text())
        ref = pd.read_parquet(folder / "reference.parquet")
        stream = pd.read_parquet(folder / "stream.parquet")
        tools: dict[str, Any] = {}
        runs: list[tuple[str, Callable[..., dict[str, Any]], tuple[Any, ...]]] = [
            ("NannyML", run_nannyml, (spec, ref, stream)),
            ("Evidently", run_evidently, (spec, ref, stream)),
            ("alibi-detect", run_alibi, (spec, ref, stream, folder, args.seed)),
        ]
        for label, run, run_args in runs:
            start = time.perf_counter()
            tools.update(run(*run_args))
            print(f"  {label} on {name}: {time.perf_counter() - start:.0f} s", flush=True)
        results[name] = tools
    meta = {
        "versions": ", ".join(f"{k} {v}" for k, v in versions().items()),
        "NannyML": "chunk_size = the stream's chunk; reference = calibration rows; default thresholds; "
        "CBPE label-free (no y_true in the stream); univariate: any column alerts",
        "Evidently": f"Report([DataDriftPreset(drift_share={DRIFT_SHARE})]) per chunk "
        "vs the calibration rows",
        "alibi-detect": f"ERT {ERT:,}, window {WINDOW}, {N_BOOTSTRAPS:,} (CVM) and {N_BOOTSTRAPS_MMD:,} "
        "(MMD) threshold simulations, reference "
        f"{N_REF_ONLINE:,} random calibration rows; reset after each detection; stops at the first "
        "detection after the change",
    }
    notes = {
        f"{tool} ({stream})": r["note"]
        for stream, tools in results.items()
        for tool, r in tools.items()
        if "note" in r and stream in ("flights", "adult")
    }
    meta.update(notes)
    args.out.write_text(json.dumps({"streams": results, "meta": meta}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
