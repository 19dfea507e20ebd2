import pytest

import calwatch as cw

from ..synthetic import softmax_data


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
