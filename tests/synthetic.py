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


#: Class names of the pets stream; one is an HTML injection attempt that views must escape.
PET_CLASSES = ["cat", "dog", "<img src=x onerror=alert(1)>", "owl"]


def pets_monitor(seed=0, *, calibrators=None, window=100_000):
    """A monitor with every kind of calibrator, six batches (the last three drift), late labels, a note."""
    import calwatch as cw

    names = np.array(PET_CLASSES)
    calibrators = calibrators or {
        "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
        "aps-random": cw.SplitConformalClassifier(score="aps", alpha=0.1, randomized=True, seed=3),
        "by-class": cw.SplitConformalClassifier(score="lac", alpha=0.1, mondrian="label"),
        "aci": cw.Adaptive(cw.SplitConformalClassifier(score="lac", alpha=0.1)),
        "risk": cw.RiskEstimator(),
        "pac": cw.PACConfidenceSets(),
    }
    mon = cw.Monitor(calibrators=calibrators, classes=PET_CLASSES, window=window, name="pets")
    P, y = softmax_data(3000, seed=seed)
    mon.calibrate(probs=P, y=names[y])
    for b in range(6):
        P, _ = softmax_data(400, seed=100 + b, scale=2.0 if b < 3 else 0.5)
        mon.observe(probs=P, ids=[f"b{b}-{i}" for i in range(400)])
        if b:
            _, y_prev = softmax_data(400, seed=99 + b, scale=2.0 if b < 4 else 0.5)
            mon.label([f"b{b - 1}-{i}" for i in range(300)], names[y_prev[:300]])
    mon.note("drift starts <b>here</b>", batch=3, author="ana")
    return mon


def stream_monitor(window, K=4, **extra):
    """A calibrated monitor of the set, adaptive and risk kinds (plus ``extra`` calibrators)."""
    import calwatch as cw

    calibrators = {
        "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
        "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1, randomized=True, seed=3),
        "aci": cw.Adaptive(cw.SplitConformalClassifier(score="lac", alpha=0.2), gamma=0.01),
        "risk": cw.RiskEstimator(),
        **extra,
    }
    mon = cw.Monitor(calibrators=calibrators, window=window)
    P, y = softmax_data(500, K=K, seed=0)
    return mon.calibrate(probs=P, y=y)


def three_set_monitor(P_cal, y_cal, row_log, *, window=250):
    """LAC, randomised APS and by-class LAC, a small window and an on-disk row log, calibrated."""
    import calwatch as cw

    return cw.Monitor(
        calibrators={
            "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
            "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1, randomized=True),
            "by-class": cw.SplitConformalClassifier(score="lac", alpha=0.1, mondrian="label"),
        },
        window=window,
        row_log=row_log,
    ).calibrate(probs=P_cal, y=y_cal)


def planted_slice_monitor(n=5000, seed=3, *, named_ids=False):
    """A monitor that slices by carrier and origin, where carrier B's labels go random after calibration.

    "carrier = B" (about a quarter of the rows) falls far short of 90%; the other slices are as the
    calibrated model gives them. 1,000 calibration rows, then eight labelled batches of 500;
    ``named_ids`` names the rows ``b<batch>-<i>`` (else the monitor numbers them).
    """
    import polars as pl

    import calwatch as cw

    rng = np.random.default_rng(seed)
    P, y = softmax_data(n, seed=seed)
    meta = pl.DataFrame({"carrier": rng.choice(list("ABCD"), n), "origin": rng.choice(["EWR", "JFK"], n)})
    late = (np.arange(n) >= 1000) & (meta["carrier"].to_numpy() == "B")
    y[late] = rng.integers(0, P.shape[1], late.sum())
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)}, shift=None)
    mon.calibrate(probs=P[:1000], y=y[:1000], meta=meta[:1000])
    for b in range(8):
        rows = slice(1000 + 500 * b, 1500 + 500 * b)
        ids = [f"b{b}-{i}" for i in range(500)] if named_ids else None
        mon.observe(probs=P[rows], y=y[rows], meta=meta[rows], ids=ids)
    return mon
