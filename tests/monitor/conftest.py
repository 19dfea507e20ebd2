import numpy as np
import pytest

import calwatch as cw


def softmax_data(n, K=4, seed=0, scale=2.0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, K)) * scale
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = (P.cumsum(axis=1) > rng.uniform(size=(n, 1))).argmax(axis=1)
    return P, y


@pytest.fixture
def data():
    return softmax_data


@pytest.fixture
def monitor():
    P, y = softmax_data(2000, seed=1)
    mon = cw.Monitor(
        calibrators={
            "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1),
            "lac-by-class": cw.SplitConformalClassifier(score="lac", alpha=0.1, mondrian="label"),
        },
        window=2500,
    )
    return mon.calibrate(probs=P, y=y)
