"""Synthetic model outputs for unit tests (real data is used by tests/validity)."""

import numpy as np


def softmax_data(n, K=4, seed=0, scale=2.0):
    """Probabilities from Gaussian logits and labels drawn from them (a calibrated model)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, K)) * scale
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = (P.cumsum(axis=1) > rng.uniform(size=(n, 1))).argmax(axis=1)
    return P, y
