"""Adapters that turn any model into :class:`ModelOutputs` (probabilities, logits, embeddings).

Supported: scikit-learn classifiers (``predict_proba``, else ``decision_function``), torch
``nn.Module`` (softmax of the logits; embeddings from a named layer by a forward hook), a plain
callable returning probabilities or logits, and precomputed arrays (no model at all).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import PROBABILITY_SUM_TOLERANCE, validated_probabilities

FloatArray = npt.NDArray[np.float64]
OutputKind = Literal["probs", "logits"]


@dataclass(frozen=True)
class ModelOutputs:
    """What a model says about a batch of rows.

    Attributes
    ----------
    probs : ndarray of shape (m, K), float64
        Class probabilities; each row sums to 1. The adapters and :meth:`from_arrays` validate
        them once and keep them as a read-only
        :class:`~calwatch.engine._validation.ValidatedProbs`, which the calibrators take without
        checking again.
    logits : ndarray of shape (m, K), float64, or None
        Logits when the model has them (``softmax(logits) == probs``); for scikit-learn models
        with ``predict_proba`` these are log-probabilities, which are valid logits.
    embeddings : ndarray of shape (m, d), float32, or None
        Representations from a named layer, when asked for.
    ids : sequence of hashables, or None
        The rows' ids, where the outputs belong to identified rows (a monitor's batch, a
        logged table's rows): randomised calibrators key their per-row draws by them
        (:func:`~calwatch.engine.conformal.row_draws.row_uniforms`).
    """

    probs: FloatArray
    logits: FloatArray | None = None
    embeddings: npt.NDArray[np.float32] | None = None
    ids: Sequence[Hashable] | npt.NDArray[Any] | None = None

    def __len__(self) -> int:
        return int(self.probs.shape[0])

    @property
    def n_classes(self) -> int:
        """Number of classes ``K``."""
        return int(self.probs.shape[1])

    def logits_or_log_probs(self) -> FloatArray:
        """The logits, or, when the model gave none, log-probabilities (valid logits).

        Zero probabilities map to the smallest finite log so the result stays finite.
        """
        if self.logits is not None:
            return self.logits
        with np.errstate(divide="ignore"):
            logs = np.log(self.probs)
        return np.maximum(logs, np.log(np.finfo(np.float64).tiny))

    @classmethod
    def from_arrays(
        cls,
        probs: Any = None,
        *,
        logits: Any = None,
        embeddings: Any = None,
        name: str = "probs",
        n_classes: int | None = None,
        tolerance: float = PROBABILITY_SUM_TOLERANCE,
    ) -> ModelOutputs:
        """Validate precomputed outputs (probabilities, or logits to softmax).

        ``n_classes`` is the number of columns expected; ``tolerance`` how far a row of
        probabilities may sum from 1.
        """
        from scipy.special import softmax  # on first use: `import calwatch` stays fast

        if probs is None and logits is None:
            msg = f"{name} is required: pass class probabilities of shape (rows, classes)"
            raise ValueError(msg)
        logits_arr = None if logits is None else _as_logits(logits, "logits")
        if probs is None:
            assert logits_arr is not None
            if n_classes is not None and logits_arr.shape[1] != n_classes:
                msg = (
                    f"logits has {logits_arr.shape[1]} columns but the calibrator was fitted on "
                    f"{n_classes} classes"
                )
                raise ValueError(msg)
            P = validated_probabilities(softmax(logits_arr, axis=1), "softmax(logits)", copy=False)
        else:
            P = validated_probabilities(probs, name, n_classes=n_classes, tolerance=tolerance)
            if logits_arr is not None and logits_arr.shape != P.shape:
                msg = f"logits has shape {logits_arr.shape} but {name} has shape {P.shape}"
                raise ValueError(msg)
        emb = None
        if embeddings is not None:
            emb = np.asarray(embeddings, dtype=np.float32)
            if emb.ndim != 2 or emb.shape[0] != P.shape[0]:
                msg = f"embeddings must have shape ({P.shape[0]}, d); got {emb.shape}"
                raise ValueError(msg)
        return cls(P, logits_arr, emb)


class ModelAdapter(Protocol):
    """A wrapped model: call it on a batch of inputs to get :class:`ModelOutputs`."""

    classes: npt.NDArray[Any] | None

    def __call__(self, X: Any) -> ModelOutputs:
        """Outputs of the model for a batch of inputs."""
        ...


def _as_logits(values: Any, name: str) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] < 2:
        msg = f"{name} must have shape (rows, classes ≥ 2); got {arr.shape}"
        raise ValueError(msg)
    if not np.isfinite(arr).all():
        msg = f"{name} contains NaN or inf"
        raise ValueError(msg)
    return arr


def _binary_to_two_columns(decision: FloatArray) -> FloatArray:
    """A binary decision value ``d`` as logits ``[0, d]`` (so softmax gives ``σ(d)``)."""
    return np.column_stack([np.zeros_like(decision), decision])


class SklearnAdapter:
    """A scikit-learn classifier (or pipeline): ``predict_proba``, else ``decision_function``."""

    def __init__(self, model: Any) -> None:
        self.model = model
        classes = getattr(model, "classes_", None)
        self.classes = None if classes is None else np.asarray(classes)

    def __call__(self, X: Any) -> ModelOutputs:
        """Probabilities (and log-probabilities as logits) for a batch of inputs."""
        from scipy.special import softmax  # on first use: `import calwatch` stays fast

        if hasattr(self.model, "predict_proba"):
            P = validated_probabilities(self.model.predict_proba(X), "model.predict_proba(X)")
            with np.errstate(divide="ignore"):
                logits = np.log(P)
            # log(0) = -inf is not a usable logit; clip to the smallest finite log-probability.
            np.maximum(logits, np.log(np.finfo(np.float64).tiny), out=logits)
            return ModelOutputs(P, logits)
        decision = np.asarray(self.model.decision_function(X), dtype=np.float64)
        logits = _binary_to_two_columns(decision) if decision.ndim == 1 else decision
        logits = _as_logits(logits, "model.decision_function(X)")
        return ModelOutputs(validated_probabilities(softmax(logits, axis=1), "softmax(logits)"), logits)


class TorchAdapter:
    """A torch ``nn.Module`` returning logits; optional embeddings from a named layer."""

    def __init__(
        self,
        model: Any,
        *,
        embedding_layer: str | None = None,
        batch_size: int = 1024,
        classes: Any = None,
    ) -> None:
        import torch  # torch is optional: imported only when a torch model is wrapped

        self._torch = torch
        self.model = model
        self.batch_size = int(batch_size)
        self.classes = None if classes is None else np.asarray(classes)
        self.embedding_layer = embedding_layer
        self._layer = None
        if embedding_layer is not None:
            layers = dict(model.named_modules())
            if embedding_layer not in layers:
                names = [name for name in layers if name]
                msg = f"embedding_layer {embedding_layer!r} is not a layer of the model; layers: {names}"
                raise ValueError(msg)
            self._layer = layers[embedding_layer]

    def __call__(self, X: Any) -> ModelOutputs:
        """Logits, softmax probabilities and (if asked) embeddings, in eval mode without grad."""
        from scipy.special import log_softmax  # on first use: `import calwatch` stays fast

        torch = self._torch
        inputs = X if isinstance(X, torch.Tensor) else torch.as_tensor(np.asarray(X), dtype=torch.float32)
        captured: list[Any] = []
        handle = None
        if self._layer is not None:
            handle = self._layer.register_forward_hook(
                lambda _module, _inputs, output: captured.append(output.detach().flatten(1))
            )
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                chunks = [
                    self.model(inputs[start : start + self.batch_size])
                    for start in range(0, int(inputs.shape[0]), self.batch_size)
                ]
        finally:
            if handle is not None:
                handle.remove()
            self.model.train(was_training)
        logits = _as_logits(torch.cat(chunks).double().cpu().numpy(), "model(X)")
        P = validated_probabilities(np.exp(log_softmax(logits, axis=1)), "softmax(logits)")
        emb = None
        if captured:
            emb = torch.cat(captured).float().cpu().numpy()
        return ModelOutputs(P, logits, emb)


class CallableAdapter:
    """A plain function ``f(X) -> (m, K)`` array of probabilities (or logits)."""

    def __init__(
        self, fn: Callable[[Any], Any], *, output: OutputKind = "probs", classes: Any = None
    ) -> None:
        if output not in ("probs", "logits"):
            msg = f"output must be 'probs' or 'logits'; got {output!r}"
            raise ValueError(msg)
        self.fn = fn
        self.output = output
        self.classes = None if classes is None else np.asarray(classes)

    def __call__(self, X: Any) -> ModelOutputs:
        """Call the function and validate what it returns."""
        values = self.fn(X)
        if isinstance(values, ModelOutputs):
            return values
        if self.output == "logits":
            return ModelOutputs.from_arrays(logits=values)
        return ModelOutputs.from_arrays(values, name="model(X)")


def _is_torch_module(model: Any) -> bool:
    return any(
        f"{klass.__module__}.{klass.__qualname__}" == "torch.nn.modules.module.Module"
        for klass in type(model).__mro__
    )


def wrap(
    model: Any,
    *,
    embedding_layer: str | None = None,
    output: OutputKind = "probs",
    classes: Any = None,
    batch_size: int = 1024,
) -> ModelAdapter:
    """Wrap any supported model so that ``adapter(X)`` returns :class:`ModelOutputs`.

    Parameters
    ----------
    model : estimator, torch.nn.Module or callable
        A scikit-learn classifier with ``predict_proba`` or ``decision_function``; a torch
        module returning logits; or a callable returning probabilities (``output="probs"``) or
        logits (``output="logits"``). An adapter returned by ``wrap`` is passed through.
    embedding_layer : str, optional
        Torch only: the name (as in ``model.named_modules()``) of the layer whose output is the
        embedding.
    output : {"probs", "logits"}
        What a plain callable returns.
    classes : array-like, optional
        Class labels, in column order, for models that do not say (torch, callables).
    batch_size : int
        Torch only: rows per forward pass.

    Raises
    ------
    TypeError
        For anything that is not one of the supported kinds of model.
    """
    if isinstance(model, (SklearnAdapter, TorchAdapter, CallableAdapter)):
        return model
    if _is_torch_module(model):
        return TorchAdapter(model, embedding_layer=embedding_layer, batch_size=batch_size, classes=classes)
    if embedding_layer is not None:
        msg = "embedding_layer is only supported for torch modules"
        raise TypeError(msg)
    if hasattr(model, "predict_proba") or hasattr(model, "decision_function"):
        adapter = SklearnAdapter(model)
        if classes is not None:
            adapter.classes = np.asarray(classes)
        return adapter
    if isinstance(model, np.ndarray):
        msg = (
            "model is an array: pass precomputed outputs as probs= (Monitor.calibrate/observe) "
            "and leave model=None"
        )
        raise TypeError(msg)
    if callable(model):
        return CallableAdapter(model, output=output, classes=classes)
    msg = (
        "model must be a scikit-learn classifier (predict_proba or decision_function), a "
        f"torch.nn.Module, or a callable returning probabilities; got {type(model).__name__}"
    )
    raise TypeError(msg)
