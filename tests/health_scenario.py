"""Monitors whose health chips sit where the tests need them (the health strip's tests).

``SOURCE`` and ``REGIONS_SOURCE`` are Python source (run by the unit tests with ``exec`` and by
the browser tests as notebook cells).

``SOURCE``: a calibrator that holds its promise and one that breaks it. An overconfident model,
its labels drawn from flatter probabilities than it states, on an exchangeable stream. Split
conformal sets calibrated (10,000 rows) on the same model keep their 90% coverage (``"lac"``:
holding); the softmax risk estimator takes the model at its word and promises a top-1 error far
below the one observed (``"softmax-risk"``: broken). The last batch has no labels yet.

``REGIONS_SOURCE``: one chip in each region of the rule, marginal and per class, with counts
fixed by construction (no sampling decides a state). Every row's probabilities put 0.9 on its
top class and 1/30 on each other one, so every LAC set below is ``{top class}`` and a row is
covered exactly when its label is its top class. Calibration: 100 rows per top class, 97 labelled
with it and 3 with the next class, so each class has 100 calibration rows of which 97 are
covered: the threshold is the top class's score for every α ≥ 0.04, marginal or per class.
The floors (:func:`calwatch.views.health.floors`, δ = 0.01) are those of 400 calibration rows for the
marginal calibrators (0.752, 0.863, 0.922 at targets 0.8, 0.9, 0.95) and of the smallest class's
100 rows for the per-class ones (0.702, 0.821, 0.888). Six batches of 300 rows, all labelled,
75 per class: class ``"late"`` covered 60 of 75 (0.80), the three others 68 of 75 (0.907), 264
of 300 in all (0.88). The last 5 batches pool 1,500 rows, 375 per class:

* marginal 1,320 / 1,500 = 0.880, 95% band [0.862, 0.896]: ``lac-80`` holding (reaches 0.8),
  ``lac-90`` at risk (under 0.9, over its floor 0.863), ``lac-95`` broken (under 0.922);
* class ``"late"`` 300 / 375 = 0.800, band at 1 − 0.05/4 = 98.75% [0.744, 0.849] (the worst of
  the 4 classes): ``class-80`` holding, ``class-90`` at risk (under 0.9, over 0.821),
  ``class-95`` broken (under 0.888).

Shift detectors are off (``shift=None``): the states come from the bands alone.
"""

from calwatch.monitor.monitor import Monitor

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
P, y = overconfident_batch(10000)
mon.calibrate(probs=P, y=y)
for b in range(8):
    P, y = overconfident_batch(300)
    ids = [f"{b}-{i}" for i in range(300)]
    mon.observe(probs=P, ids=ids)
    if b < 7:
        mon.label(ids, y)
"""


REGIONS_SOURCE = """
import numpy as np
import calwatch as cw

REGION_CLASSES = np.array(["on time", "late", "early", "cancelled"])


def region_probs(top):
    P = np.full((len(top), 4), 0.1 / 3)
    P[np.arange(len(top)), top] = 0.9
    return P


def region_rows(covered_by_class, per_class, rng):
    # per class c: covered_by_class[c] rows whose top class is c, the rest topped by the next class
    label = np.repeat(np.arange(4), per_class)
    top = label.copy()
    for c, k in enumerate(covered_by_class):
        top[c * per_class + k : (c + 1) * per_class] = (c + 1) % 4
    order = rng.permutation(len(label))
    return region_probs(top[order]), REGION_CLASSES[label[order]]


regions = cw.Monitor(
    calibrators={
        f"{name}-{round(100 * (1 - alpha))}": cw.SplitConformalClassifier(score="lac", alpha=alpha, **kw)
        for name, kw in (("lac", {}), ("class", {"mondrian": "label"}))
        for alpha in (0.2, 0.1, 0.05)
    },
    classes=list(REGION_CLASSES),
    shift=None,
    name="regions",
)
_region_rng = np.random.default_rng(0)
P, y = region_rows([97, 97, 97, 97], 100, _region_rng)
regions.calibrate(probs=P, y=y)
for b in range(6):
    P, y = region_rows([68, 60, 68, 68], 75, _region_rng)
    ids = [f"r{b}-{i}" for i in range(len(y))]
    regions.observe(probs=P, ids=ids)
    regions.label(ids, y)
"""
#: Each chip of ``REGIONS_SOURCE``'s monitor: its state and, for a per-class promise, the class named.
REGION_STATES = {
    "lac-80": ("holding", None),
    "lac-90": ("at risk", None),
    "lac-95": ("broken", None),
    "class-80": ("holding", "late"),
    "class-90": ("at risk", "late"),
    "class-95": ("broken", "late"),
}


def _run(source: str, name: str) -> Monitor:
    """Run ``source`` (our own, shared with the browser tests' notebooks) and return its ``name``."""
    scope: dict[str, object] = {}
    exec(source, scope)
    monitor = scope[name]
    assert isinstance(monitor, Monitor)
    return monitor


def health_monitor() -> Monitor:
    """The monitor of ``SOURCE`` (see the module docstring)."""
    return _run(SOURCE, "mon")


def regions_monitor() -> Monitor:
    """The monitor of ``REGIONS_SOURCE``: a chip in each region (see the module docstring)."""
    return _run(REGIONS_SOURCE, "regions")
