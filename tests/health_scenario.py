"""A monitor with a calibrator that holds its promise and one that breaks it (the health strip's tests).

``SOURCE`` is Python source (run by the unit tests with ``exec`` and by the browser test as a
notebook cell): an overconfident model, its labels drawn from flatter probabilities than it
states, on an exchangeable stream. Split conformal sets calibrated on the same model keep their
90% coverage (``"lac"``: holding); the softmax risk estimator takes the model at its word and
promises a top-1 error far below the one observed (``"softmax-risk"``: broken). The last batch
has no labels yet.
"""

SOURCE = """
import numpy as np
import calwatch as cw

HEALTH_CLASSES = np.array(["cat", "dog", "owl", "<b>emu</b>"])
_rng = np.random.default_rng(0)


def overconfident_batch(n):
    logits = _rng.normal(size=(n, 4)) * 2.5
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    Q = np.sqrt(P)
    Q /= Q.sum(axis=1, keepdims=True)
    return P, HEALTH_CLASSES[(Q.cumsum(axis=1) > _rng.uniform(size=(n, 1))).argmax(axis=1)]


mon = cw.Monitor(
    calibrators={
        "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
        "softmax-risk": cw.RiskEstimator(method="softmax"),
    },
    classes=list(HEALTH_CLASSES),
    name="health",
)
P, y = overconfident_batch(2000)
mon.calibrate(probs=P, y=y)
for b in range(8):
    P, y = overconfident_batch(300)
    ids = [f"{b}-{i}" for i in range(300)]
    mon.observe(probs=P, ids=ids)
    if b < 7:
        mon.label(ids, y)
"""


def health_monitor():
    """The scenario's monitor (see the module docstring)."""
    scope: dict[str, object] = {}
    exec(SOURCE, scope)  # our own source, shared with the browser test's notebook
    return scope["mon"]
