"""Small torch MLPs of the example embedding tasks: build, train, and weights as plain arrays.

This module holds the networks behind :func:`~calwatch.datasets.embeddings.rotten_tomatoes_task`
and :func:`~calwatch.datasets.embeddings.flights_mlp_task`: an MLP whose ``body`` output is the
embedding and whose ``head`` gives two logits, its seeded training with Adam on one torch
thread, and its ``state_dict`` to and from arrays (so weights are cached in ``.npz`` files,
never pickled). torch is imported on first use.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.intp]


def _mlp(n_features: int, hidden: tuple[int, ...], *, dropout: float = 0.0) -> Any:
    """``Sequential(body=..., head=Linear(hidden[-1], 2))``; ``body``'s output is the embedding.

    ``body`` is ``[Dropout(dropout)] + [Linear, ReLU] * len(hidden)`` (no dropout layer when 0).
    """
    import torch

    layers: list[Any] = [torch.nn.Dropout(dropout)] if dropout > 0 else []
    width = n_features
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    return torch.nn.Sequential(OrderedDict(body=torch.nn.Sequential(*layers), head=torch.nn.Linear(width, 2)))


@contextmanager
def _one_torch_thread() -> Iterator[None]:
    """Run torch on one thread inside the block (restored after).

    These networks are small (mini-batches of 64-256 rows): on a busy 2-core machine, one thread
    trained the text MLP 4 times faster than two (31 s against 131 s), with the same result.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _train_mlp(
    inputs: Callable[[npt.NDArray[np.int64]], Any],
    y: IntArray,
    n_features: int,
    hidden: tuple[int, ...],
    *,
    epochs: int,
    seed: int,
    progress: bool,
    batch: int = 256,
    dropout: float = 0.0,
    weight_decay: float = 0.0,
    desc: str = "MLP",
) -> Any:
    """Train :func:`_mlp` with Adam (lr 1e-3) and cross-entropy on mini-batches ``inputs(rows)``."""
    import torch
    from tqdm.auto import tqdm

    with _one_torch_thread(), torch.random.fork_rng(devices=[]):  # the caller's global RNG is untouched
        torch.manual_seed(seed)
        net = _mlp(n_features, hidden, dropout=dropout)
        generator = torch.Generator().manual_seed(seed)
        labels = torch.from_numpy(y.astype(np.int64))
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=weight_decay)
        loss_fn = torch.nn.CrossEntropyLoss()
        net.train()
        bar = tqdm(range(epochs), desc=desc, unit="epoch", disable=not progress)
        for _ in bar:
            order = torch.randperm(len(labels), generator=generator)
            total = 0.0
            for start in range(0, len(labels), batch):
                rows = order[start : start + batch]
                optimizer.zero_grad()
                loss = loss_fn(net(inputs(rows.numpy())), labels[rows])
                loss.backward()
                optimizer.step()
                total += float(loss.detach()) * len(rows)
            bar.set_postfix(loss=f"{total / len(labels):.4f}")
        net.eval()
    return net


def _state_arrays(net: Any) -> dict[str, npt.NDArray[Any]]:
    """A torch module's ``state_dict`` as numpy arrays under ``param/<name>``."""
    return {f"param/{k}": v.detach().cpu().numpy() for k, v in net.state_dict().items()}


def _load_state(net: Any, arrays: dict[str, npt.NDArray[Any]]) -> Any:
    """Load ``param/<name>`` arrays into ``net``; eval mode."""
    import torch

    state = {
        k.removeprefix("param/"): torch.from_numpy(v) for k, v in arrays.items() if k.startswith("param/")
    }
    net.load_state_dict(state)
    net.eval()
    return net
