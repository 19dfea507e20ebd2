"""Model adapters: scikit-learn, torch (with embeddings), callables, precomputed arrays."""

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression
from sklearn.svm import LinearSVC

import calwatch as cw
from calwatch.core.models import ModelOutputs


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    return X, names


def test_sklearn_predict_proba_with_string_classes(iris):
    X, y = iris
    model = LogisticRegression(max_iter=500).fit(X, y)
    out = cw.wrap(model)(X[:10])
    assert out.probs.dtype == np.float64
    np.testing.assert_allclose(out.probs, model.predict_proba(X[:10]))
    # log-probabilities are valid logits: softmax gives the probabilities back
    from scipy.special import softmax

    np.testing.assert_allclose(softmax(out.logits, axis=1), out.probs, rtol=1e-12)
    mon = cw.Monitor(model, calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.2)})
    mon.calibrate(X[::2], y[::2])
    assert mon.classes_.tolist() == ["setosa", "versicolor", "virginica"]
    mon.observe(X[1::2], ids=np.arange(75))
    assert mon.label(np.arange(75), y[1::2]).matched == 75
    assert mon.summary()["n_labelled"][0] == 75


def test_sklearn_decision_function_only(iris):
    X, y = iris
    model = LinearSVC().fit(X, y)
    out = cw.wrap(model)(X[:5])
    np.testing.assert_allclose(out.logits, model.decision_function(X[:5]))
    np.testing.assert_allclose(out.probs.sum(axis=1), 1.0)
    binary = LinearSVC().fit(X[:100], y[:100])
    two = cw.wrap(binary)(X[:5])
    d = binary.decision_function(X[:5])
    np.testing.assert_allclose(two.probs[:, 1], 1 / (1 + np.exp(-d)))


def test_torch_module_with_embedding_layer():
    torch = pytest.importorskip("torch", reason="torch is installed by `make test`")
    torch.manual_seed(0)
    net = torch.nn.Sequential()
    net.add_module("hidden", torch.nn.Linear(4, 8))
    net.add_module("act", torch.nn.ReLU())
    net.add_module("head", torch.nn.Linear(8, 3))
    X = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
    out = cw.wrap(net, embedding_layer="act", batch_size=16)(X)
    with torch.no_grad():
        logits = net(torch.as_tensor(X)).double().numpy()
        hidden = torch.relu(net.hidden(torch.as_tensor(X))).numpy()
    # The adapter runs the net in batches of 16, the reference in one batch of 50: float32 matmul kernels
    # may block the sums differently by batch size, so outputs agree to float32 precision (eps ≈ 1.2e-7)
    # scaled by the size of the values summed, not bit for bit.
    f32 = float(np.finfo(np.float32).eps)
    logit_scale = float(np.abs(logits).max())
    np.testing.assert_allclose(out.logits, logits, rtol=64 * f32, atol=64 * f32 * logit_scale)
    # probs are the softmax of the adapter's own logits, in float64: exact to float64 precision.
    expected_probs = np.exp(out.logits) / np.exp(out.logits).sum(1, keepdims=True)
    np.testing.assert_allclose(out.probs, expected_probs, rtol=1e-10)
    assert out.embeddings is not None and out.embeddings.dtype == np.float32
    hidden_scale = float(np.abs(hidden).max())
    np.testing.assert_allclose(out.embeddings, hidden, rtol=64 * f32, atol=64 * f32 * hidden_scale)
    assert net.training  # the adapter restores the module's mode
    with pytest.raises(ValueError, match="embedding_layer 'nope' is not a layer"):
        cw.wrap(net, embedding_layer="nope")


def test_callable_probs_and_logits():
    P = np.array([[0.2, 0.8], [0.6, 0.4]])
    assert np.array_equal(cw.wrap(lambda X: P)(None).probs, P)
    out = cw.wrap(lambda X: np.log(P), output="logits")(None)
    np.testing.assert_allclose(out.probs, P)
    with pytest.raises(ValueError, match="model\\(X\\) rows must sum to 1"):
        cw.wrap(lambda X: P * 0.9)(None)


def test_precomputed_outputs_validation():
    with pytest.raises(ValueError, match="probs is required"):
        ModelOutputs.from_arrays()
    with pytest.raises(ValueError, match="embeddings must have shape"):
        ModelOutputs.from_arrays(np.array([[0.5, 0.5]]), embeddings=np.zeros((2, 3)))


@pytest.mark.parametrize("bad", [42, "model", np.zeros((3, 2))])
def test_unsupported_models_get_a_clear_error(bad):
    with pytest.raises(TypeError, match="model"):
        cw.wrap(bad)
