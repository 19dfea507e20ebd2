"""Fast checks of the real-model embedding tasks (``calwatch.datasets.embeddings``).

Everything is built small (a text MLP with 8 hidden units, 6 epochs; 8 SVD components; a 16-8
flights MLP trained 8 epochs on 3,000 flights) into a temporary cache folder, so the shared
cache is neither read nor written.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy.special import softmax

import calwatch.datasets.embeddings as de
from calwatch.datasets.embeddings import (
    EmbeddingTask,
    FlightsEncoder,
    Split,
    flights_mlp,
    flights_mlp_task,
    rotten_tomatoes_mlp,
    rotten_tomatoes_task,
)

SMALL_FLIGHTS = {
    "n_train": 3_000,
    "n_calibration": 800,
    "n_test": 600,
    "n_shift": 500,
    "hidden": (16, 8),
    "epochs": 8,
    "progress": False,
}


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A temporary cache folder shared by the tests of this file (each task is built once)."""
    path = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(de, "cache_dir", lambda: path)
        yield path


@pytest.fixture
def tmp_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache folder of this test's own."""
    monkeypatch.setattr(de, "cache_dir", lambda: tmp_path)
    return tmp_path


SMALL_TEXT = {"hidden": 8, "epochs": 6, "min_df": 2, "progress": False}


@pytest.fixture(scope="module")
def text_task(module_cache: Path) -> EmbeddingTask:
    return rotten_tomatoes_task(seed=3, **SMALL_TEXT)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def text_logistic(module_cache: Path) -> EmbeddingTask:
    return rotten_tomatoes_task(seed=3, model="logistic", n_components=8)


@pytest.fixture(scope="module")
def flights(module_cache: Path) -> EmbeddingTask:
    return flights_mlp_task(seed=5, **SMALL_FLIGHTS)  # type: ignore[arg-type]


def _check_split(split: Split, dim: int) -> None:
    E, logits, y = split  # unpacks like the (E, logits, y) tuples Venn-ADMIT takes
    assert E.dtype == np.float32 and E.ndim == 2 and E.shape[1] == dim
    assert logits.dtype == np.float64 and logits.shape == (E.shape[0], 2)
    assert y.dtype == np.intp and y.shape == (E.shape[0],)
    assert np.isfinite(E).all() and np.isfinite(logits).all()
    assert set(np.unique(y)) <= {0, 1}
    assert E.flags.c_contiguous


def test_split_accuracy_hand_case() -> None:
    E = np.zeros((4, 3), dtype=np.float32)
    logits = np.array([[0.0, 1.0], [2.0, -1.0], [0.5, 0.4], [-1.0, 3.0]])
    y = np.array([1, 1, 0, 0], dtype=np.intp)
    split = Split(E, logits, y)
    assert split.n == 4
    assert split.accuracy == 0.5  # rows 0 and 2 right, rows 1 and 3 wrong
    assert split.take(np.array([0, 2], dtype=np.intp)).accuracy == 1.0
    assert np.isnan(split.take(np.array([], dtype=np.intp)).accuracy)


def test_rotten_tomatoes_shapes_and_splits(text_task: EmbeddingTask, text_logistic: EmbeddingTask) -> None:
    task = text_task
    assert task.classes == ("rotten", "fresh")
    for split in (task.train, task.calibration, *task.tests.values()):
        _check_split(split, 8)
    assert (task.E_tr >= 0).all()  # the MLP's hidden layer, after its ReLU
    # 12,808 snippets, each in exactly one split.
    ids = pl.concat([task.rows[s]["snippet"] for s in ("train", "calibration", *task.tests)])
    assert ids.len() == 12_808 and ids.n_unique() == 12_808
    # The shifted set is whole movies that no other split contains.
    seen = set(pl.concat([task.rows[s]["movie"] for s in ("train", "calibration", "in-distribution")]))
    held = set(task.rows["shifted"]["movie"])
    assert held and not held & seen
    assert len(held) == round(0.2 * 508)
    # Row details line up with the arrays.
    for name, split in {"train": task.train, "calibration": task.calibration, **task.tests}.items():
        assert task.rows[name].height == split.n
        assert np.array_equal(task.rows[name]["label"].to_numpy(), split.y)
    # Real, better-than-chance models (majority class: 58% fresh).
    for model in (task, text_logistic):
        assert model.train.accuracy > 0.85  # both fit their training rows (0.90 and 0.97 here)
        assert model.calibration.accuracy > 0.68
        assert model.tests["shifted"].accuracy > 0.65
    # The logistic variant: the same rows; logits [-z/2, z/2]; unit-length SVD rows.
    assert text_logistic.rows["calibration"].equals(task.rows["calibration"])
    for split in (text_logistic.train, text_logistic.calibration, *text_logistic.tests.values()):
        _check_split(split, 8)
    assert np.allclose(text_logistic.logits_ca[:, 0], -text_logistic.logits_ca[:, 1])
    norms = np.linalg.norm(text_logistic.E_ca, axis=1)
    assert np.allclose(norms[norms > 0], 1.0, atol=1e-5)


def test_rotten_tomatoes_cache_and_determinism(module_cache: Path, text_task: EmbeddingTask) -> None:
    names = [p.name for p in module_cache.iterdir() if p.name.startswith("rotten-tomatoes-v1-mlp")]
    assert sorted(Path(n).suffix for n in names) == [".npz", ".npz", ".parquet"]  # arrays, weights, rows
    assert not [p for p in module_cache.iterdir() if p.suffix == ".tmp"]

    def refuse(*_args: object) -> None:
        raise AssertionError("the cached task was rebuilt")

    original = de._build_rotten_tomatoes
    de._build_rotten_tomatoes = refuse  # type: ignore[assignment]
    try:
        again = rotten_tomatoes_task(seed=3, **SMALL_TEXT)  # type: ignore[arg-type]
    finally:
        de._build_rotten_tomatoes = original
    rebuilt = rotten_tomatoes_task(seed=3, refresh=True, **SMALL_TEXT)  # type: ignore[arg-type]
    for other in (again, rebuilt):
        assert np.array_equal(other.E_tr, text_task.E_tr)
        assert np.array_equal(other.logits_ca, text_task.logits_ca)
        assert np.array_equal(other.tests["shifted"].y, text_task.tests["shifted"].y)
    different = rotten_tomatoes_task(seed=4, model="logistic", n_components=8)  # another seed, other movies
    assert set(different.rows["shifted"]["movie"]) != set(text_task.rows["shifted"]["movie"])
    # The stored vectorizer and weights give back the cached outputs.
    import torch

    vectorizer, net = rotten_tomatoes_mlp(seed=3, hidden=8, epochs=6, min_df=2)
    texts = text_task.rows["in-distribution"]["text"].to_list()
    with torch.no_grad():
        x = torch.from_numpy(vectorizer.transform(texts).toarray().astype(np.float32))
        logits, embeddings = net(x).double().numpy(), net.body(x).numpy()
    np.testing.assert_allclose(logits, text_task.tests["in-distribution"].logits, atol=1e-5)
    np.testing.assert_allclose(embeddings, text_task.tests["in-distribution"].E, atol=1e-5)


def test_resplit(text_task: EmbeddingTask) -> None:
    task = text_task
    a = task.resplit(11, n_calibration=3_000, n_test=1_000, n_reference=2_000)
    b = task.resplit(11, n_calibration=3_000, n_test=1_000, n_reference=2_000)
    c = task.resplit(12, n_calibration=3_000, n_test=1_000, n_reference=2_000)
    assert (a.calibration.n, a.tests["in-distribution"].n, a.train.n) == (3_000, 1_000, 2_000)
    assert np.array_equal(a.E_ca, b.E_ca) and not np.array_equal(a.y_ca, c.y_ca)
    assert a.tests["shifted"] is task.tests["shifted"]
    pool = set(pl.concat([task.rows["calibration"]["snippet"], task.rows["in-distribution"]["snippet"]]))
    drawn = pl.concat([a.rows["calibration"]["snippet"], a.rows["in-distribution"]["snippet"]])
    assert drawn.n_unique() == 4_000 and set(drawn) <= pool
    assert set(a.rows["train"]["snippet"]) <= set(task.rows["train"]["snippet"])
    assert np.array_equal(a.rows["calibration"]["label"].to_numpy(), a.y_ca)
    full = task.resplit(0)
    assert full.calibration.n == task.calibration.n
    with pytest.raises(ValueError, match="n_calibration"):
        task.resplit(0, n_calibration=task.calibration.n, n_test=task.tests["in-distribution"].n + 1)
    with pytest.raises(ValueError, match="n_reference"):
        task.resplit(0, n_reference=0)


def test_flights_shapes_months_and_model(flights: EmbeddingTask) -> None:
    task = flights
    assert task.classes == ("on time", "late")
    for split in (task.train, task.calibration, *task.tests.values()):
        _check_split(split, 8)
    sizes = [task.train.n, task.calibration.n, task.tests["in-distribution"].n, task.tests["shifted"].n]
    assert sizes == [3_000, 800, 600, 500]
    for name in ("train", "calibration", "in-distribution"):
        assert task.rows[name]["month"].max() <= 6  # type: ignore[operator]
    assert task.rows["shifted"]["month"].min() >= 10  # type: ignore[operator]
    ids = pl.concat([task.rows[s]["id"] for s in ("train", "calibration", "in-distribution", "shifted")])
    assert ids.n_unique() == ids.len()
    for name, split in {"train": task.train, "calibration": task.calibration, **task.tests}.items():
        assert np.array_equal((task.rows[name]["arr_delay"] > 15).to_numpy(), split.y == 1)
    assert (task.E_tr >= 0).all()  # after the last ReLU
    majority = max(np.mean(task.y_ca), 1 - np.mean(task.y_ca))  # about 0.75 (on time)
    assert task.calibration.accuracy > majority + 0.05  # a real model even when this small
    # The cached weights and encoder give back the cached outputs.
    encoder, net = flights_mlp(seed=5, **SMALL_FLIGHTS)  # type: ignore[arg-type]
    from calwatch.core.models import wrap
    from calwatch.datasets import load_flights

    frame = load_flights().join(task.rows["calibration"].select("id"), on="id", how="semi")
    order = {v: i for i, v in enumerate(task.rows["calibration"]["id"])}
    frame = frame.with_columns(pos=pl.col("id").replace_strict(order)).sort("pos")
    out = wrap(net, embedding_layer="body")(encoder.transform(frame))
    assert out.logits is not None and out.embeddings is not None
    assert np.allclose(out.logits, task.logits_ca, atol=1e-5)
    assert np.allclose(out.embeddings, task.E_ca, atol=1e-5)
    assert np.allclose(out.probs, softmax(task.logits_ca, axis=1), atol=1e-6)


def test_flights_determinism(flights: EmbeddingTask) -> None:
    rebuilt = flights_mlp_task(seed=5, refresh=True, **SMALL_FLIGHTS)  # type: ignore[arg-type]
    assert np.array_equal(rebuilt.y_tr, flights.y_tr)
    # Same seed, same thread count: the same weights up to float32 rounding in the reductions.
    np.testing.assert_allclose(rebuilt.logits_ca, flights.logits_ca, atol=1e-5)
    np.testing.assert_allclose(rebuilt.E_tr, flights.E_tr, atol=1e-5)


def test_encoder_round_trip_and_unknown_values() -> None:
    frame = pl.DataFrame(
        {
            "carrier": ["AA", "UA", "AA"],
            "origin": ["JFK", "LGA", "JFK"],
            "dest": ["BOS", "MIA", "ORD"],
            "weekday": [1, 4, 7],
            "sched_dep_time": [600, 1230, 2359],
            "sched_arr_time": [730, 1500, 100],
            "dep_delay": [-5.0, 0.0, 120.0],
            "distance": [187.0, 1096.0, 740.0],
        }
    )
    encoder = FlightsEncoder.fit(frame)
    assert encoder.vocabularies == (("AA", "UA"), ("JFK", "LGA"), ("BOS", "MIA", "ORD"))
    X = encoder.transform(frame)
    assert X.shape == (3, 2 + 2 + 3 + 9) == (3, encoder.n_features)
    assert np.allclose(X[:, 7:].mean(axis=0), 0.0, atol=1e-6)  # standardised on these rows
    numbers = FlightsEncoder.numbers(frame)
    assert numbers[2, 0] == pytest.approx(np.log(121.0))  # sign(x)·log(1 + |x|)
    assert numbers[2, 1] == pytest.approx(2.0)  # 120 minutes = 2 hours
    assert numbers[0, 3] == pytest.approx(0.0) and numbers[0, 4] == pytest.approx(1.0)  # Monday
    assert numbers[1, 5] == pytest.approx(np.sin(2 * np.pi * 750 / 1440))  # 12:30
    copy = FlightsEncoder.from_arrays(encoder.arrays())
    assert copy.vocabularies == encoder.vocabularies
    unseen = frame.with_columns(dest=pl.Series(["XXX", "BOS", "YYY"]))
    U = copy.transform(unseen)
    assert U[0, 4:7].sum() == 0.0 and U[1, 4] == 1.0  # an unseen airport is all zeros
    assert np.array_equal(U[:, :4], X[:, :4]) and np.array_equal(U[:, 7:], X[:, 7:])


def test_bad_arguments(tmp_cache: Path) -> None:
    with pytest.raises(ValueError, match="train must be in"):
        rotten_tomatoes_task(train=1.2)
    with pytest.raises(ValueError, match="train \\+ calibration"):
        rotten_tomatoes_task(train=0.6, calibration=0.5)
    with pytest.raises(ValueError, match="n_components"):
        rotten_tomatoes_task(model="logistic", n_components=1)
    with pytest.raises(ValueError, match="model must be one of"):
        rotten_tomatoes_task(model="bert")
    with pytest.raises(ValueError, match="dropout"):
        rotten_tomatoes_task(dropout=1.0)
    with pytest.raises(ValueError, match="n_shift"):
        flights_mlp_task(n_shift=0)
    with pytest.raises(ValueError, match="hidden"):
        flights_mlp_task(hidden=())
    with pytest.raises(ValueError, match="epochs"):
        flights_mlp_task(epochs=0)
    with pytest.raises(ValueError, match="January-June rows"):
        flights_mlp_task(n_train=200_000, progress=False)
    assert not list(tmp_cache.iterdir())  # nothing half-built was left behind
