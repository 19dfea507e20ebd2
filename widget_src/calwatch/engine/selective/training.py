"""Alg. 1 of paper 002: training the S-MMCE selector's network on simulated shifts.

This module trains the network of
:class:`~calwatch.engine.selective.calibrator.SelectiveCalibrator`, and does nothing else: it
builds transformed variants of the training rows (:mod:`calwatch.engine.selective.perturb`)
and their standardised meta features, draws ``n_perturbations`` perturbed datasets per step,
ranks them by their selective calibration error at coverage ``ξ`` (or its AUC over ``ξ``),
steps Adam on the S-MMCE loss (:mod:`calwatch.engine.selective.loss`, Eq. 15) of the ``kappa``
worst, and stops early on a held-out dev split. It returns the trained parts; the calibrator
commits them, so an interrupted fit leaves it as it was.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from calwatch.engine.metrics.calibration import (
    DEFAULT_COVERAGES,
    _binned_error,
    _reduce,
    _threshold,
    default_bins,
)
from calwatch.engine.selective.features import MetaFeatures
from calwatch.engine.selective.loss import make_selector_network, smmce_loss
from calwatch.engine.selective.perturb import Perturbation, Rows, apply_transforms, sample_weights

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.intp]
RankBy = Literal["coverage", "auc"]


class TrainingOptions(Protocol):
    """The options of Alg. 1 that :func:`train_selector` reads (a ``SelectiveCalibrator``'s)."""

    coverage: float
    kappa: int
    n_perturbations: int
    sample_size: int
    epochs: int
    steps_per_epoch: int
    learning_rate: float
    q: float
    kernel_width: float
    lambda1: float | None
    lambda2: float | None
    n_variants: int
    dev_fraction: float
    patience: int
    rank_by: RankBy
    head: Callable[[Float32Array], Any] | None
    progress: bool
    seed: int


def _group_codes(groups: Any, n: int) -> IntArray:
    arr = np.asarray(groups)
    if arr.ndim != 1 or arr.shape[0] != n:
        msg = f"groups must be a 1-D array with one entry per row ({n}); got shape {arr.shape}"
        raise ValueError(msg)
    _, codes = np.unique(arr, return_inverse=True)
    out: IntArray = codes.astype(np.intp)
    return out


def train_selector(
    options: TrainingOptions,
    clean: Rows,
    family: tuple[Perturbation, ...],
    meta: MetaFeatures,
    rng: np.random.Generator,
) -> tuple[Any, FloatArray, FloatArray, list[dict[str, float]], int]:
    """Train the selector network on ``clean`` rows under the perturbation ``family`` (Alg. 1).

    Parameters
    ----------
    options : TrainingOptions
        The calibrator's training options (``kappa``, ``n_perturbations``, ``epochs``, …).
    clean : Rows
        The (unperturbed) rows to train on.
    family : tuple of Perturbation
        The perturbations: transforms build the variants, reweightings the samples.
    meta : MetaFeatures
        Fitted meta features ``φ_meta``.
    rng : numpy.random.Generator
        The fit's generator (variants, dev split, training draws, in that order).

    Returns
    -------
    net : torch.nn.Module
        The network of the best epoch, in eval mode.
    mean, scale : ndarray
        The standardisation of the meta features (training rows' mean and scale).
    history : list of dict
        Per epoch: ``epoch``, ``train_loss``, ``dev``.
    best_epoch : int
        The epoch whose weights were kept.
    """
    import torch
    from tqdm.auto import tqdm

    n_fit = len(clean)

    # variants: the clean rows and transformed copies, with their meta features
    transforms = [p for p in family if p.kind == "transform"]
    reweightings = [p for p in family if p.kind == "weights"]
    variant_rows = [clean]
    if transforms:
        variant_rows += [
            apply_transforms(clean, transforms, rng, options.head) for _ in range(options.n_variants)
        ]
    feats = [meta.transform(v.probs, v.embeddings) for v in variant_rows]
    reduced = [_reduce(v.probs, v.labels, "auto") for v in variant_rows]

    # train/dev split and standardisation on the clean training rows
    order = rng.permutation(n_fit)
    n_dev = round(options.dev_fraction * n_fit)
    dev_idx, train_idx = np.sort(order[:n_dev]), np.sort(order[n_dev:])
    mean = feats[0][train_idx].mean(axis=0)
    scale = feats[0][train_idx].std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)
    F = np.stack([(f - mean) / scale for f in feats]).astype(np.float32)  # (V+1, n_fit, d)
    R = np.stack([r for r, _ in reduced])
    Y = np.stack([o for _, o in reduced])

    def subset(idx: IntArray) -> Rows:
        return Rows(
            clean.probs[idx],
            clean.labels[idx],
            None if clean.embeddings is None else clean.embeddings[idx],
            None if clean.groups is None else clean.groups[idx],
        )

    def draw(idx: IntArray, sub: Rows, gen: np.random.Generator) -> tuple[int, IntArray]:
        variant = int(gen.integers(len(variant_rows)))
        w = sample_weights(sub, reweightings, gen)
        p = None if w is None else w / w.sum()
        return variant, idx[gen.choice(idx.shape[0], size=options.sample_size, replace=True, p=p)]

    train_rows = subset(train_idx)
    dev_draws: list[tuple[int, IntArray]] = []
    if n_dev >= 2:
        dev_rng = np.random.default_rng([options.seed, 1])
        dev_rows = subset(dev_idx)
        dev_draws = [draw(dev_idx, dev_rows, dev_rng) for _ in range(max(2 * options.n_perturbations, 32))]

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(options.seed)
        net = make_selector_network(F.shape[2])
    optimiser = torch.optim.Adam(net.parameters(), lr=options.learning_rate)
    best_state = copy.deepcopy(net.state_dict())
    best_dev, best_epoch, waited = np.inf, 0, 0
    history: list[dict[str, float]] = []
    total = options.epochs * options.steps_per_epoch
    with tqdm(total=total, desc="S-MMCE selector", disable=not options.progress, leave=False) as bar:
        for epoch in range(1, options.epochs + 1):
            net.train()
            losses = []
            for _ in range(options.steps_per_epoch):
                draws = [draw(train_idx, train_rows, rng) for _ in range(options.n_perturbations)]
                x = torch.from_numpy(np.stack([F[v, i] for v, i in draws]))
                r = np.stack([R[v, i] for v, i in draws])
                o = np.stack([Y[v, i] for v, i in draws])
                logits = net(x).squeeze(-1)
                errors = _criteria(
                    r, o, logits.detach().numpy().astype(np.float64), options.coverage, options.rank_by
                )
                worst = np.argsort(errors, kind="stable")[-options.kappa :]
                loss = smmce_loss(
                    torch.from_numpy(r[worst].astype(np.float32)),
                    torch.from_numpy(o[worst].astype(np.float32)),
                    logits[torch.from_numpy(worst)],
                    q=options.q,
                    width=options.kernel_width,
                    lambda1=options.lambda1,
                    lambda2=options.lambda2,
                ).mean()
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                losses.append(float(loss.detach()))
                bar.update(1)
            dev = _dev_criterion(net, F, R, Y, dev_draws, options) if dev_draws else float("nan")
            history.append({"epoch": epoch, "train_loss": float(np.mean(losses)), "dev": dev})
            bar.set_postfix(loss=f"{np.mean(losses):.4g}", dev=f"{dev:.4g}")
            if not dev_draws or dev < best_dev:
                best_dev, best_epoch, waited = dev, epoch, 0
                best_state = copy.deepcopy(net.state_dict())
            else:
                waited += 1
                if waited >= options.patience:
                    break
    net.load_state_dict(best_state)
    net.eval()
    return net, mean, scale, history, best_epoch


def _criteria(r: FloatArray, o: FloatArray, g: FloatArray, coverage: float, rank_by: RankBy) -> FloatArray:
    """Selective ℓ2 calibration error of each dataset (rows of r, o, g) at ξ or as an AUC."""
    out = np.empty(r.shape[0])
    grid = [coverage] if rank_by == "coverage" else DEFAULT_COVERAGES.tolist()
    for b in range(r.shape[0]):
        values = []
        for xi in grid:
            kept = g[b] >= _threshold(g[b], xi)
            values.append(_binned_error(r[b][kept], o[b][kept], "l2", default_bins(int(kept.sum()))))
        if rank_by == "coverage":
            out[b] = values[0]
        else:
            x = np.asarray(grid)
            v = np.asarray(values)
            out[b] = float(np.sum(np.diff(x) * (v[1:] + v[:-1]) / 2.0))
    return out


def _dev_criterion(
    net: Any,
    F: Float32Array,
    R: FloatArray,
    Y: FloatArray,
    draws: list[tuple[int, IntArray]],
    options: TrainingOptions,
) -> float:
    """Mean criterion of the worst ``kappa/n_perturbations`` share of the dev datasets."""
    import torch

    net.eval()
    with torch.no_grad():
        x = torch.from_numpy(np.stack([F[v, i] for v, i in draws]))
        g = net(x).squeeze(-1).numpy().astype(np.float64)
    errors = _criteria(
        np.stack([R[v, i] for v, i in draws]),
        np.stack([Y[v, i] for v, i in draws]),
        g,
        options.coverage,
        options.rank_by,
    )
    k = max(1, round(len(draws) * options.kappa / options.n_perturbations))
    return float(np.sort(errors)[-k:].mean())


__all__ = ["TrainingOptions", "train_selector"]
