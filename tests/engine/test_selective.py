"""Selective calibration engine (paper 002): S-MMCE loss, meta features, perturbations, selectors, state."""

import json
import math

import numpy as np
import pytest
import torch

from calwatch.engine.errors import NotFittedError
from calwatch.engine.metrics.calibration import selective_calibration_error
from calwatch.engine.selective.calibrator import (
    BaselineSelector,
    ClassPriorShift,
    CustomPerturbation,
    FeatureDropout,
    FeatureNoise,
    GroupResample,
    MetaFeatures,
    Rows,
    SelectiveCalibrator,
)
from calwatch.engine.selective.features import gaussian_kde_log_density
from calwatch.engine.selective.loss import (
    default_lambdas,
    make_selector_network,
    smmce_loss,
    smmce_loss_numpy,
)
from calwatch.engine.selective.perturb import apply_transforms, sample_weights

# Eight rows for Eq. 15: confidence r, outcome y, selector logit z (g̃ = σ(z)).
R8 = np.array([0.9, 0.15, 0.55, 0.7, 0.3, 0.95, 0.62, 0.05])
Y8 = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0])
Z8 = np.array([1.2, -0.4, 0.0, 2.5, -1.7, 0.3, 0.8, -2.2])


def direct_sum(r, y, g, q, width, l1, l2):
    """Eq. 15 written out once more, term by term (independent of both implementations)."""
    total = sum(
        abs(y[i] - r[i]) ** q * abs(y[j] - r[j]) ** q * g[i] * g[j] * math.exp(-abs(r[i] - r[j]) / width)
        for i in range(8)
        for j in range(8)
    )
    return l1 * total ** (1 / q) - l2 * sum(math.log(v) for v in g)


@pytest.mark.parametrize(
    ("q", "width", "lambdas"), [(2.0, 0.2, None), (1.0, 0.2, (0.5, 0.1)), (2.0, 0.05, (1.0, 0.0))]
)
def test_smmce_loss_equals_the_double_sum_on_eight_rows(q, width, lambdas):
    g = 1 / (1 + np.exp(-Z8))
    l1, l2 = default_lambdas(8) if lambdas is None else lambdas
    expected = direct_sum(R8, Y8, g, q, width, l1, l2)
    kw = {} if lambdas is None else {"lambda1": l1, "lambda2": l2}
    assert smmce_loss_numpy(R8, Y8, g, q=q, width=width, **kw) == pytest.approx(expected, rel=1e-12)
    got = smmce_loss(
        torch.tensor(R8[None], dtype=torch.float64),
        torch.tensor(Y8[None], dtype=torch.float64),
        torch.tensor(Z8[None], dtype=torch.float64),
        q=q,
        width=width,
        **kw,
    )
    assert got.shape == (1,)
    assert float(got[0]) == pytest.approx(expected, rel=1e-10)  # the 1e-12 inside the root only


def test_smmce_default_lambdas_and_gradient():
    assert default_lambdas(1024) == (1 / 32, 1e-2 / 1024)  # App. B.2
    z = torch.tensor(Z8[None], dtype=torch.float64, requires_grad=True)
    loss = smmce_loss(torch.tensor(R8[None]), torch.tensor(Y8[None]), z)
    loss.sum().backward()
    h = 1e-6
    for i in range(8):  # central differences of the numpy double sum
        up, down = Z8.copy(), Z8.copy()
        up[i] += h
        down[i] -= h
        numeric = (
            smmce_loss_numpy(R8, Y8, 1 / (1 + np.exp(-up)))
            - smmce_loss_numpy(R8, Y8, 1 / (1 + np.exp(-down)))
        ) / (2 * h)
        assert float(z.grad[0, i]) == pytest.approx(numeric, rel=1e-5, abs=1e-9)
    # batched: two datasets at once give the two single losses
    two = smmce_loss(torch.tensor(np.stack([R8, R8[::-1]])), torch.tensor(np.stack([Y8, Y8[::-1]])),
                     torch.tensor(np.stack([Z8, Z8[::-1]])))  # fmt: skip
    assert float(two[1]) == pytest.approx(smmce_loss_numpy(R8[::-1], Y8[::-1], 1 / (1 + np.exp(-Z8[::-1]))))


def test_selector_network_is_three_relu_layers_of_64():
    net = make_selector_network(11)
    linear = [m for m in net if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linear] == [(11, 64), (64, 64), (64, 64), (64, 1)]
    assert sum(isinstance(m, torch.nn.ReLU) for m in net) == 3


# ------------------------------------------------------------------ meta features
def test_probability_features_by_hand():
    meta = MetaFeatures(features=["confidence", "predicted_class", "entropy", "distribution"]).fit(None, 3)
    assert meta.names_ == [
        "confidence", "predicted_class[0]", "predicted_class[1]", "predicted_class[2]", "entropy",
        "distribution[0]", "distribution[1]", "distribution[2]",
    ]  # fmt: skip
    F = meta.transform(np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]))
    np.testing.assert_allclose(
        F[0], [0.5, 1, 0, 0, math.log(2), 0.5, 0.5, 0.0]
    )  # tie -> class 0; 0·log 0 = 0
    h = -(0.2 * math.log(0.2) + 0.3 * math.log(0.3) + 0.5 * math.log(0.5))
    np.testing.assert_allclose(F[1], [0.5, 0, 0, 1, h, 0.2, 0.3, 0.5])
    # many classes: one-hot and distribution dropped (002 §4.5)
    assert MetaFeatures(max_classes=2).fit(None, 3).names_ == ["confidence", "entropy"]


def test_embedding_features_match_the_libraries():
    from sklearn.ensemble import IsolationForest
    from sklearn.neighbors import KernelDensity, LocalOutlierFactor
    from sklearn.svm import OneClassSVM

    rng = np.random.default_rng(0)
    ref = rng.normal(size=(300, 5)).astype(np.float32) * np.array([1, 2, 3, 4, 5], np.float32) + 1
    query = rng.normal(size=(40, 5)).astype(np.float32) * 3
    meta = MetaFeatures(subsample=100, n_neighbors=4, seed=3).fit(ref, 2)
    P = np.full((40, 2), 0.5)
    F = meta.transform(P, query)
    names = meta.names_
    # d = 5 ≤ max_dims: standardisation only (population sd of the reference)
    ref64 = ref.astype(np.float64)
    X = ((ref64 - ref64.mean(0)) / ref64.std(0)).astype(np.float32).astype(np.float64)
    Q = ((query.astype(np.float64) - ref64.mean(0)) / ref64.std(0)).astype(np.float32).astype(np.float64)
    sub = X[np.sort(np.random.default_rng(3).choice(300, size=100, replace=False))]
    d = np.sqrt(((Q[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    np.testing.assert_allclose(F[:, names.index("knn")], np.sort(d, axis=1)[:, :4].mean(1), rtol=1e-12)
    h = 100 ** (-1 / 9)  # Scott's rule, d = 5
    from scipy.special import logsumexp

    d2 = ((Q[:, None, :] - sub[None, :, :]) ** 2).sum(-1)
    brute = logsumexp(-d2 / (2 * h * h), axis=1) - math.log(100) - 2.5 * math.log(2 * math.pi * h * h)
    np.testing.assert_allclose(F[:, names.index("kde")], brute, rtol=1e-12)
    moderate = brute > -50  # where scikit-learn's tree bounds are accurate
    kde = KernelDensity(bandwidth=h).fit(sub).score_samples(Q)
    np.testing.assert_allclose(F[moderate, names.index("kde")], kde[moderate], rtol=1e-6)
    forest = IsolationForest(n_estimators=100, random_state=3).fit(X)
    np.testing.assert_allclose(F[:, names.index("isolation_forest")], forest.score_samples(Q), rtol=1e-12)
    svm = OneClassSVM(gamma="scale").fit(sub)
    np.testing.assert_allclose(F[:, names.index("one_class_svm")], svm.score_samples(Q), rtol=1e-9)
    lof = LocalOutlierFactor(n_neighbors=20, novelty=True).fit(sub)
    np.testing.assert_allclose(F[:, names.index("lof")], lof.score_samples(Q), rtol=1e-9)


def test_wide_embeddings_are_whitened_by_pca():
    rng = np.random.default_rng(1)
    ref = (rng.normal(size=(500, 40)) @ rng.normal(size=(40, 40))).astype(np.float32)
    meta = MetaFeatures(features=["knn"], max_dims=8).fit(ref, 2)
    state, _ = meta.state()
    X = state["reference"].astype(np.float64)
    assert X.shape == (500, 8)
    np.testing.assert_allclose(np.cov(X.T), np.eye(8), atol=1e-4)  # float32 storage


def test_kde_by_hand():
    # two points at 0 and 2, h = 1, query 1: log(½(φ(1) + φ(1))) = log φ(1) = −½ − ½ log 2π
    got = gaussian_kde_log_density(np.array([[1.0]]), np.array([[0.0], [2.0]]), 1.0)
    assert got[0] == pytest.approx(-0.5 - 0.5 * math.log(2 * math.pi), abs=1e-14)


# ------------------------------------------------------------------ perturbations
def rows(n=6, seed=0):
    rng = np.random.default_rng(seed)
    p1 = rng.uniform(size=n)
    return Rows(
        np.column_stack([1 - p1, p1]),
        np.array([0, 1] * (n // 2)),
        rng.normal(size=(n, 3)).astype(np.float32),
        np.array([0, 0, 0, 1, 1, 2] * (n // 6)),
    )


def test_reweightings_give_shares_and_compose():
    rng = np.random.default_rng(0)
    base = rows(600)
    for _ in range(20):
        w = GroupResample(strength=5).weights(base, rng)
        assert w.sum() == pytest.approx(1.0)
        for g in range(3):  # one weight per group
            assert np.ptp(w[base.groups == g]) == pytest.approx(0.0, abs=1e-18)
    # Dirichlet(10·π̂) is centred on π̂ = (.5, .5): the class share of positives averages .5
    # (sd of one draw sqrt(.25/11) = .151; over 2000 draws .0034: 4 sd = .0135)
    shares = [ClassPriorShift().weights(base, rng)[base.labels == 1].sum() for _ in range(2000)]
    assert np.mean(shares) == pytest.approx(0.5, abs=0.0135)
    assert np.std(shares) == pytest.approx(math.sqrt(0.25 / 11), rel=0.1)
    # tiny strength: no 0/0 from underflow, still a distribution
    w = GroupResample(strength=1e-3).weights(base, rng)
    assert np.isfinite(w).all() and w.sum() == pytest.approx(1.0)
    # composition: product of the weights chosen
    both = [CustomPerturbation(lambda r, g: np.full(len(r), 2.0), kind="weights")] * 2
    draws = [sample_weights(base, both, np.random.default_rng(s)) for s in range(40)]
    assert {None if w is None else float(w[0]) for w in draws} == {None, 2.0, 4.0}


def test_transforms_and_head():
    base = rows(6)
    rng = np.random.default_rng(0)
    assert np.array_equal(FeatureNoise(scale=(0, 0)).transform(base, rng).embeddings, base.embeddings)
    noisy = FeatureNoise(scale=(2, 2)).transform(base, rng).embeddings
    assert not np.allclose(noisy, base.embeddings)
    dropped = FeatureDropout(rate=(1, 1)).transform(base, rng).embeddings
    assert not dropped.any()
    # with a head, transformed embeddings get new probabilities; the clean rows keep theirs
    head = lambda E: np.column_stack([np.full(len(E), 0.25), np.full(len(E), 0.75)])  # noqa: E731
    out = apply_transforms(base, [FeatureNoise()], rng, head)
    np.testing.assert_allclose(out.probs[:, 1], 0.75)
    assert base.probs[0, 1] != 0.75
    with pytest.raises(ValueError, match="acts on embeddings"):
        FeatureNoise().transform(Rows(base.probs, base.labels), rng)
    with pytest.raises(ValueError, match="needs groups"):
        GroupResample().weights(Rows(base.probs, base.labels), rng)
    with pytest.raises(ValueError, match="finite non-negative"):
        CustomPerturbation(lambda r, g: -np.ones(len(r)), kind="weights").weights(base, rng)
    with pytest.raises(ValueError, match="same shape"):
        CustomPerturbation(lambda r, g: Rows(r.probs[:2], r.labels[:2])).transform(base, rng)
    with pytest.raises(TypeError, match="callable"):
        CustomPerturbation(3)
    with pytest.raises(ValueError, match="strength must be a positive"):
        ClassPriorShift(strength=0)
    with pytest.raises(ValueError, match="0 ≤ low ≤ high ≤ 1"):
        FeatureDropout(rate=(0.2, 1.5))


# ------------------------------------------------------------------ selectors
def toy(n, seed, shifted=0.5):
    """002 Example 4.4: f = X1; rows with X2 = 0 are off by Δ = .3; embeddings reveal X2."""
    rng = np.random.default_rng(seed)
    x1 = rng.uniform(0.05, 0.65, size=n)
    x2 = rng.uniform(size=n) >= shifted
    y = (rng.uniform(size=n) < np.where(x2, x1, np.minimum(x1 + 0.3, 1.0))).astype(int)
    E = np.column_stack([x2 * 4.0, rng.normal(size=n), rng.normal(size=n)]).astype(np.float32)
    return np.column_stack([1 - x1, x1]), y, E, x2, rng.integers(0, 3, size=n)


def fast(**kw):
    base = {
        "epochs": 2,
        "steps_per_epoch": 15,
        "n_perturbations": 8,
        "kappa": 2,
        "sample_size": 128,
        "progress": False,
    }
    base.update(kw)
    return SelectiveCalibrator(**base)


@pytest.mark.slow
def test_fixed_api_prefers_the_calibrated_rows_of_the_toy_example():
    P, y, E, _, g = toy(2000, 0)
    reference = toy(1000, 1, shifted=0.0)[2]  # the model's training rows: all X2 = 1
    s = fast(coverage=0.5, epochs=3, steps_per_epoch=30, learning_rate=3e-3, sample_size=256,
             perturbations=[], dev_fraction=0.0, seed=1)  # fmt: skip
    s.fit(P, y, embeddings=E, groups=g, reference=reference)
    Pt, yt, Et, x2t, _ = toy(4000, 2)
    scores = s.scores(Pt, embeddings=Et)
    assert scores.dtype == np.float64 and scores.min() >= 0 and scores.max() <= 1
    kept = s.select(Pt, embeddings=Et, tune_on="batch")
    assert kept.dtype == bool and kept.mean() >= 0.5
    # A selector blind to X2 keeps X2 = 1 rows at the base rate .5 (sd sqrt(.25/2000) = .011 for
    # 2,000 kept rows; confidence, which only sees X1, keeps .499 here); this seeded run keeps
    # .652, so ≥ .58 (7 sd above blind) fails for a selector that ignores the embeddings.
    # S-MMCE_u bounds calibration by |y − r|², aleatoric noise included, so it also favours
    # confident rows and does not reach the oracle's 1.0 (X2 = 0 rows at x1 = .5 have the same
    # expected |y − r|² as X2 = 1 rows).
    assert x2t[kept].mean() >= 0.58
    full = selective_calibration_error(Pt, yt, np.ones(4000, bool))  # .154
    confidence = BaselineSelector("confidence", coverage=0.5).fit(Pt).select(Pt, tune_on="batch")
    assert selective_calibration_error(Pt, yt, kept) < 0.9 * full  # .130 observed
    assert selective_calibration_error(Pt, yt, kept) < selective_calibration_error(Pt, yt, confidence)  # .168


def test_thresholds_tuning_and_selection_agree():
    P, y, E, _, g = toy(600, 3)
    s = fast(coverage=0.7, seed=1).fit(P, y, embeddings=E, groups=g, reference=toy(200, 9)[2])
    assert s.select(P, embeddings=E).mean() >= 0.7  # tuned on these very rows
    split = fast(coverage=0.7, seed=1).fit(P, y, embeddings=E, groups=g)  # 30% become the reference
    assert split.dims_ == 3 and split.select(P, embeddings=E).mean() > 0.6
    Pt, _, Et, _, _ = toy(300, 4)
    scores = s.scores(Pt, embeddings=Et)
    before = s.threshold_
    batch = s.select(Pt, embeddings=Et, tune_on="batch")
    assert s.threshold_ == before  # select(tune_on=...) leaves threshold_ alone
    assert batch.mean() >= 0.7
    other = s.select(P[:50], embeddings=E[:50], tune_on=(Pt, Et))
    tau = s.tune(Pt, embeddings=Et)
    assert tau == s.tune_scores(scores) == s.threshold_
    np.testing.assert_array_equal(s.select_scores(scores), batch)
    np.testing.assert_array_equal(s.select(P[:50], embeddings=E[:50]), other)
    with pytest.raises(ValueError, match="tune_on must be"):
        s.select(Pt, embeddings=Et, tune_on="window")
    # re-tuning at another coverage on a window's scores (the Monitor's retune)
    s.tune_scores(scores, coverage=0.25)
    assert s.coverage == 0.25 and s.select_scores(scores).mean() >= 0.25
    assert s.select_scores(scores).sum() == math.ceil(0.25 * 300)  # continuous scores: no ties
    with pytest.raises(ValueError, match="coverage must be in"):
        s.tune_scores(scores, coverage=1.2)
    assert s.coverage == 0.25


def test_seeded_and_state_round_trip():
    P, y, E, _, g = toy(500, 5)
    a = fast(seed=7).fit(P, y, embeddings=E, groups=g)
    b = fast(seed=7).fit(P, y, embeddings=E, groups=g)
    c = fast(seed=8).fit(P, y, embeddings=E, groups=g)
    sa = a.scores(P, embeddings=E)
    np.testing.assert_array_equal(sa, b.scores(P, embeddings=E))
    assert not np.array_equal(sa, c.scores(P, embeddings=E))
    assert len(a.history_) >= 1 and 1 <= a.best_epoch_ <= 2
    arrays, info = a.state()
    json.dumps(info)  # JSON-able
    assert all(isinstance(v, np.ndarray) and v.dtype != object for v in arrays.values())
    restored = SelectiveCalibrator.from_state(arrays, json.loads(json.dumps(info)))
    np.testing.assert_array_equal(restored.scores(P, embeddings=E), sa)
    assert restored.threshold_ == a.threshold_ and restored.feature_names_ == a.feature_names_
    assert [type(p) for p in restored.family_] == [ClassPriorShift, GroupResample]  # no head: no transforms
    with pytest.raises(ValueError, match="not a SelectiveCalibrator state"):
        SelectiveCalibrator.from_state(arrays, {**info, "version": 99})


def test_probabilities_only_and_multiclass():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(400, 4)) * 2
    P = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    y = rng.integers(0, 4, size=400)
    s = fast(coverage=0.6, perturbations=[]).fit(P, y)
    assert s.dims_ is None and "entropy" in s.feature_names_ and "distribution[3]" in s.feature_names_
    assert s.features(P).shape == (400, len(s.feature_names_))
    assert s.select(P).mean() >= 0.6
    with pytest.raises(ValueError, match="4 classes"):
        s.scores(P[:, :3] / P[:, :3].sum(1, keepdims=True))


def test_lifecycle_and_option_errors():
    P, y, E, _, _ = toy(100, 6)
    with pytest.raises(NotFittedError, match="not fitted"):
        SelectiveCalibrator().scores(P)
    with pytest.raises(ValueError, match="kappa"):
        SelectiveCalibrator(kappa=5, n_perturbations=4)
    with pytest.raises(ValueError, match="coverage must be in"):
        SelectiveCalibrator(coverage=0)
    with pytest.raises(ValueError, match="features must be"):
        SelectiveCalibrator(features=["margin"])
    with pytest.raises(TypeError, match="Perturbation objects"):
        SelectiveCalibrator(perturbations=[lambda r, g: r])
    with pytest.raises(ValueError, match="no groups"):
        fast(perturbations=[GroupResample()]).fit(P, y, embeddings=E)
    with pytest.raises(ValueError, match="no embeddings"):
        fast(perturbations=[FeatureNoise()]).fit(P, y)
    with pytest.raises(ValueError, match="needs embeddings"):
        fast().fit(P, y, reference=E)
    s = fast(perturbations=[]).fit(P, y, embeddings=E, reference=E)
    with pytest.raises(ValueError, match="embeddings are required"):
        s.scores(P)
    with pytest.raises(ValueError, match="2 dimensions"):
        s.scores(P, embeddings=E[:, :2])
    with pytest.raises(ValueError, match="rows but P has"):
        s.scores(P, embeddings=E[:10])


def test_baselines_share_the_thresholding():
    P, y, E, x2, _ = toy(1000, 7)
    reference = toy(500, 8, shifted=0.0)[2]
    full = BaselineSelector("full", coverage=0.3).fit(P, y)
    assert full.select(P).all()  # constant scores: every row ties at τ̂
    conf = BaselineSelector("confidence", coverage=0.3).fit(P)
    np.testing.assert_array_equal(conf.scores(P), P.max(1))
    assert conf.select(P).mean() >= 0.3
    knn = BaselineSelector("knn", coverage=0.5, n_neighbors=3).fit(P, embeddings=E, reference=reference)
    assert x2[knn.select(P, embeddings=E)].mean() > 0.95  # near the reference = X2 = 1
    for method in ("isolation_forest", "one_class_svm"):
        sel = BaselineSelector(method, coverage=0.5).fit(P, embeddings=E, reference=reference)
        assert sel.select(P, embeddings=E, tune_on="batch").mean() >= 0.5
    arrays, info = knn.state()
    restored = BaselineSelector.from_state(arrays, json.loads(json.dumps(info)))
    np.testing.assert_array_equal(restored.scores(P, embeddings=E), knn.scores(P, embeddings=E))
    assert restored.threshold_ == knn.threshold_
    arrays, info = conf.state()
    assert (
        arrays == {}
        and BaselineSelector.from_state(arrays, info).select(P).tolist() == conf.select(P).tolist()
    )
    with pytest.raises(ValueError, match="needs embeddings"):
        BaselineSelector("knn").fit(P)
    with pytest.raises(ValueError, match="method must be one of"):
        BaselineSelector("entropy")
