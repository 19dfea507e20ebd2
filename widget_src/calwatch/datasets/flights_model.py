"""The flights MLP of the embedding task: its inputs, its samples of flights, its training.

This module builds what :func:`~calwatch.datasets.embeddings.flights_mlp_task` caches: the
encoding of a flight into network inputs (:class:`FlightsEncoder`), the seeded January-June
and October-December samples, the MLP trained on the first and read out (logits and last
hidden layer) on every split, and the cache key of the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.datasets.cache import save_npz
from calwatch.datasets.tabular import FLIGHT_CATEGORICAL, load_flights
from calwatch.datasets.torch_mlp import _one_torch_thread, _state_arrays, _train_mlp

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.intp]
#: One split's ``(embeddings, logits, labels)``.
SplitArrays = tuple[Float32Array, FloatArray, IntArray]

#: Version of the cached flights MLP and arrays; bump it when :func:`_build_flights_mlp` changes.
FLIGHTS_MLP_VERSION = "1"


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
) -> tuple[dict[str, SplitArrays], pl.DataFrame]:
    import torch

    from calwatch.core.models import wrap

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
    X_tr = torch.from_numpy(encoder.transform(parts["train"]))
    net = _train_mlp(
        lambda rows: X_tr[rows], y_tr, X_tr.shape[1], hidden, epochs=epochs, seed=seed, progress=progress,
        desc="flights MLP",
    )  # fmt: skip
    weights = _state_arrays(net)
    weights["hidden"] = np.array(hidden, dtype=np.int64)
    save_npz(weights_path, {**weights, **encoder.arrays()})
    adapter = wrap(net, embedding_layer="body", batch_size=8192)
    splits: dict[str, SplitArrays] = {}
    for name, part in parts.items():
        with torch.no_grad(), _one_torch_thread():
            out = adapter(encoder.transform(part))
        if out.embeddings is None or out.logits is None:  # pragma: no cover - asked for both above
            msg = "the wrapped MLP returned no logits or no embeddings"
            raise RuntimeError(msg)
        splits[name] = (
            out.embeddings.astype(np.float32),
            out.logits,
            part["late"].to_numpy().astype(np.intp),
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
