"""NannyML CBPE on the chunks of ``risk_guarded_table.py`` (runs in ``.venv-drift`` only).

Not a calwatch module: it imports none of calwatch and runs only in the competitors' environment
(``bash benchmarks/drift_env.sh``). ``risk_guarded_table.py`` writes one sub-folder per run with
``reference.parquet`` (the calibration rows: ``p_pos``, ``y_pred``, ``y_true``) and
``stream.parquet`` (the stream's rows in chunk order: ``p_pos``, ``y_pred``; no labels), and a
``chunk_size``; this script reads back, per run and chunk, NannyML 0.13.1 ``CBPE``'s estimated
accuracy (``classification_binary``, ``chunk_size`` rows a chunk), its confidence band (the
estimate ± 3 sampling errors, NannyML's ``lower/upper_confidence_boundary``) and its alert (the
estimate outside the thresholds NannyML sets from the reference chunks: mean ± 3 sd).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ.setdefault("NML_DISABLE_USAGE_LOGGING", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def run_cbpe(folder: Path, chunk_size: int) -> dict[str, list[float | bool | None]]:
    import nannyml as nml

    reference = pd.read_parquet(folder / "reference.parquet")
    stream = pd.read_parquet(folder / "stream.parquet")
    cbpe = nml.CBPE(
        problem_type="classification_binary",
        y_pred_proba="p_pos",
        y_pred="y_pred",
        y_true="y_true",
        metrics=["accuracy"],
        chunk_size=chunk_size,
    )
    cbpe.fit(reference)
    frame = cbpe.estimate(stream).filter(period="analysis").to_df()

    def column(name: str) -> list[float | None]:
        values = frame[("accuracy", name)].to_numpy(dtype=float)
        return [float(v) if np.isfinite(v) else None for v in values]

    return {
        "estimate": column("value"),
        "lower": column("lower_confidence_boundary"),
        "upper": column("upper_confidence_boundary"),
        "alert": [bool(a) for a in frame[("accuracy", "alert")].to_numpy()],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--chunk-size", type=int, required=True)
    args = parser.parse_args()
    import nannyml

    start = time.perf_counter()
    runs = {sub.name: run_cbpe(sub, args.chunk_size) for sub in sorted(args.folder.iterdir()) if sub.is_dir()}
    payload = {
        "versions": {"nannyml": nannyml.__version__},
        "seconds": time.perf_counter() - start,
        "runs": runs,
    }
    args.out.write_text(json.dumps(payload))


if __name__ == "__main__":
    main()
