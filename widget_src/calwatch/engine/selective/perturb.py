"""Simulated dataset shifts for robust selector training (paper 002 §4.4, Alg. 1; ALGORITHMS.md §6).

A perturbation acts on the *rows* the selector is trained on, a :class:`Rows` bundle of the
model's probabilities, the labels, the embeddings and a group code per row. There are two
kinds, and they compose:

- a **reweighting** (:class:`GroupResample`, :class:`ClassPriorShift`, or
  :class:`CustomPerturbation` with ``kind="weights"``) returns a non-negative weight per row;
  the perturbed dataset is a sample drawn with probability proportional to the *product* of
  the weights of every reweighting applied (002's lung-cancer family: random resamplings by
  hospital). Reweightings are cheap and drawn afresh at every training step.
- a **transform** (:class:`FeatureNoise`, :class:`FeatureDropout`, or
  :class:`CustomPerturbation` with ``kind="transform"``) returns new rows of the same length:
  noisy or partly zeroed embeddings, or anything a user callable does to ``(P, E, y, groups)``.
  When the selector is given the model's ``head`` (embeddings → probabilities), the
  probabilities of transformed rows are recomputed from the transformed embeddings, so the
  transform moves the model's outputs and calibration as a real shift would. Without a head
  only the embedding-derived meta features move (the selector learns not to over-trust them).
  Transforms need the meta features recomputed, so the selector applies them once per
  *variant* at fit time (``n_variants`` random chains of the transforms over every training
  row) and samples among the variants during training.

One perturbed dataset of Alg. 1 = a variant (the clean rows or a transformed copy), then a
random subset of the reweightings (each included with probability ½), then a weighted sample.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.intp]
PerturbationKind = Literal["weights", "transform"]


@dataclass(frozen=True)
class Rows:
    """The rows a perturbation acts on.

    Attributes
    ----------
    probs : ndarray of shape (n, K), float64
        The model's probabilities.
    labels : ndarray of shape (n,), intp
        True classes.
    embeddings : ndarray of shape (n, d), float32, or None
        The model's embeddings.
    groups : ndarray of shape (n,), intp, or None
        Group code per row (``0..G-1``).
    """

    probs: FloatArray
    labels: IntArray
    embeddings: Float32Array | None = None
    groups: IntArray | None = None

    def __len__(self) -> int:
        return int(self.labels.shape[0])


class Perturbation:
    """Base class: a reweighting (``kind == "weights"``) or a transform (``"transform"``)."""

    @property
    def kind(self) -> PerturbationKind:
        """``"weights"`` or ``"transform"``."""
        raise NotImplementedError

    def weights(self, rows: Rows, rng: np.random.Generator) -> FloatArray:
        """Non-negative sampling weight per row (reweightings)."""
        raise NotImplementedError

    def transform(self, rows: Rows, rng: np.random.Generator) -> Rows:
        """Perturbed rows of the same length (transforms)."""
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        """Name and options, for a calibrator's state (``None`` for user callables)."""
        raise NotImplementedError


def _check_positive(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        msg = f"{name} must be a positive number; got {value!r}"
        raise TypeError(msg)
    if not np.isfinite(value) or value <= 0:
        msg = f"{name} must be a positive number; got {value!r}"
        raise ValueError(msg)
    return float(value)


def _check_range(value: Any, name: str, upper: float) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError) as err:
        msg = f"{name} must be a pair (low, high); got {value!r}"
        raise TypeError(msg) from err
    if not 0.0 <= lo <= hi <= upper:
        msg = f"{name} must satisfy 0 ≤ low ≤ high ≤ {upper}; got {value!r}"
        raise ValueError(msg)
    return lo, hi


def _dirichlet_weights(
    codes: IntArray, n_codes: int, strength: float, rng: np.random.Generator
) -> FloatArray:
    """Row weights giving code ``c`` a share ``π_c`` of the sample, ``π ~ Dirichlet(strength · π̂)``.

    ``π̂`` is the codes' own shares in the rows: the draw is centred on no shift, and its
    spread shrinks as ``strength`` grows (share ``c`` has sd ``sqrt(π̂_c(1 − π̂_c)/(strength + 1))``).
    """
    counts = np.bincount(codes, minlength=n_codes).astype(np.float64)
    present = counts > 0
    shares = np.zeros(n_codes)
    alpha = strength * counts[present] / counts.sum()
    # tiny parameters underflow numpy's Dirichlet sampler to 0/0: draw Gamma variates in log space
    log_gamma = np.log(rng.gamma(alpha + 1.0)) + np.log(rng.uniform(size=alpha.shape[0])) / alpha
    draw = np.exp(log_gamma - log_gamma.max())
    shares[present] = draw / draw.sum()
    per_row = np.divide(shares, counts, out=np.zeros(n_codes), where=present)
    out: FloatArray = per_row[codes]
    return out


@dataclass(frozen=True, repr=True)
class GroupResample(Perturbation):
    """Resample rows by group: group shares drawn from ``Dirichlet(strength · π̂)``.

    ``π̂`` are the groups' shares in the rows, so shifts are centred on none; a small
    ``strength`` gives harsh shifts (a few groups dominate), a large one mild ones. Needs
    ``groups`` at fit time (e.g. the hospital, the site, the carrier).

    Examples
    --------
    >>> rows = Rows(np.full((4, 2), 0.5), np.array([0, 1, 0, 1]), groups=np.array([0, 0, 1, 1]))
    >>> w = GroupResample().weights(rows, np.random.default_rng(0))
    >>> round(float(w[0] + w[1] + w[2] + w[3]), 12), bool(w[0] == w[1])
    (1.0, True)
    """

    strength: float = 10.0

    @property
    def kind(self) -> PerturbationKind:
        """``"weights"``."""
        return "weights"

    def __post_init__(self) -> None:
        _check_positive(self.strength, "strength")

    def weights(self, rows: Rows, rng: np.random.Generator) -> FloatArray:
        """Row weights ``π_g / n_g``."""
        if rows.groups is None:
            msg = "GroupResample needs groups: pass groups= to fit"
            raise ValueError(msg)
        return _dirichlet_weights(rows.groups, int(rows.groups.max()) + 1, self.strength, rng)

    def to_json(self) -> dict[str, Any]:
        """Name and options."""
        return {"name": "GroupResample", "strength": self.strength}


@dataclass(frozen=True, repr=True)
class ClassPriorShift(Perturbation):
    """Label shift by resampling: class shares drawn from ``Dirichlet(strength · π̂)``.

    ``π̂`` are the classes' shares in the rows. The default ``strength = 10`` moves a 30%
    class share by about ±14 points (sd ``sqrt(.3 · .7 / 11)``).

    Examples
    --------
    >>> rows = Rows(np.full((3, 2), 0.5), np.array([0, 0, 1]))
    >>> w = ClassPriorShift().weights(rows, np.random.default_rng(0))
    >>> bool(w[0] == w[1]), round(float(w.sum()), 12)
    (True, 1.0)
    """

    strength: float = 10.0

    @property
    def kind(self) -> PerturbationKind:
        """``"weights"``."""
        return "weights"

    def __post_init__(self) -> None:
        _check_positive(self.strength, "strength")

    def weights(self, rows: Rows, rng: np.random.Generator) -> FloatArray:
        """Row weights ``π_y / n_y``."""
        return _dirichlet_weights(rows.labels, rows.probs.shape[1], self.strength, rng)

    def to_json(self) -> dict[str, Any]:
        """Name and options."""
        return {"name": "ClassPriorShift", "strength": self.strength}


@dataclass(frozen=True, repr=True)
class FeatureNoise(Perturbation):
    """Gaussian noise on the embeddings: ``E + σ · sd · N(0, 1)``, ``σ ~ U(scale)`` per draw.

    ``sd`` is each dimension's standard deviation over the rows. Needs embeddings.

    Examples
    --------
    >>> rows = Rows(np.full((2, 2), 0.5), np.array([0, 1]), np.array([[0.0, 1.0], [2.0, 3.0]], np.float32))
    >>> FeatureNoise(scale=(0.0, 0.0)).transform(rows, np.random.default_rng(0)).embeddings.tolist()
    [[0.0, 1.0], [2.0, 3.0]]
    """

    scale: tuple[float, float] = (0.0, 1.0)

    @property
    def kind(self) -> PerturbationKind:
        """``"transform"``."""
        return "transform"

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", _check_range(self.scale, "scale", np.inf))

    def transform(self, rows: Rows, rng: np.random.Generator) -> Rows:
        """Noisy embeddings (probabilities untouched here; see the module docstring)."""
        E = _need_embeddings(rows, "FeatureNoise")
        sigma = rng.uniform(*self.scale)
        sd = E.std(axis=0, dtype=np.float64)
        noisy = E + (sigma * sd)[None, :] * rng.standard_normal(E.shape)
        return replace(rows, embeddings=noisy.astype(np.float32))

    def to_json(self) -> dict[str, Any]:
        """Name and options."""
        return {"name": "FeatureNoise", "scale": list(self.scale)}


@dataclass(frozen=True, repr=True)
class FeatureDropout(Perturbation):
    """Embedding entries set to zero independently with probability ``p ~ U(rate)`` per draw.

    Examples
    --------
    >>> rows = Rows(np.full((1, 2), 0.5), np.array([0]), np.ones((1, 4), np.float32))
    >>> FeatureDropout(rate=(1.0, 1.0)).transform(rows, np.random.default_rng(0)).embeddings.tolist()
    [[0.0, 0.0, 0.0, 0.0]]
    """

    rate: tuple[float, float] = (0.0, 0.5)

    @property
    def kind(self) -> PerturbationKind:
        """``"transform"``."""
        return "transform"

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", _check_range(self.rate, "rate", 1.0))

    def transform(self, rows: Rows, rng: np.random.Generator) -> Rows:
        """Embeddings with dropped (zeroed) entries."""
        E = _need_embeddings(rows, "FeatureDropout")
        p = rng.uniform(*self.rate)
        keep = rng.random(E.shape) >= p
        return replace(rows, embeddings=np.where(keep, E, np.float32(0.0)).astype(np.float32))

    def to_json(self) -> dict[str, Any]:
        """Name and options."""
        return {"name": "FeatureDropout", "rate": list(self.rate)}


class CustomPerturbation(Perturbation):
    """A user callable ``fn(rows, rng)``: weights (``kind="weights"``) or new rows (``"transform"``).

    A ``"weights"`` callable returns ``n`` non-negative finite weights, not all zero; a
    ``"transform"`` callable returns a :class:`Rows` of the same length and classes (it may
    change probabilities, embeddings or both).

    Examples
    --------
    >>> late = CustomPerturbation(lambda rows, rng: 1.0 + rows.labels, kind="weights")
    >>> late.weights(Rows(np.full((2, 2), 0.5), np.array([0, 1])), np.random.default_rng(0)).tolist()
    [1.0, 2.0]
    """

    def __init__(
        self, fn: Callable[[Rows, np.random.Generator], Any], *, kind: PerturbationKind = "transform"
    ) -> None:
        unchecked: Any = fn  # annotated callable, but user input: check at run time
        if not callable(unchecked):
            msg = f"fn must be callable; got {fn!r}"
            raise TypeError(msg)
        if kind not in ("weights", "transform"):
            msg = f"kind must be 'weights' or 'transform'; got {kind!r}"
            raise ValueError(msg)
        self.fn = fn
        self._kind: PerturbationKind = kind

    def __repr__(self) -> str:
        return f"CustomPerturbation({self.fn!r}, kind={self._kind!r})"

    @property
    def kind(self) -> PerturbationKind:
        """As given to the constructor."""
        return self._kind

    def weights(self, rows: Rows, rng: np.random.Generator) -> FloatArray:
        """The callable's weights, checked."""
        w = np.asarray(self.fn(rows, rng), dtype=np.float64)
        if w.shape != (len(rows),) or not np.isfinite(w).all() or (w < 0).any() or not (w > 0).any():
            msg = f"a weights perturbation must return {len(rows)} finite non-negative weights, not all 0"
            raise ValueError(msg)
        return w

    def transform(self, rows: Rows, rng: np.random.Generator) -> Rows:
        """The callable's rows, checked."""
        out = self.fn(rows, rng)
        if not isinstance(out, Rows) or len(out) != len(rows) or out.probs.shape != rows.probs.shape:
            msg = f"a transform perturbation must return Rows of the same shape ({len(rows)} rows)"
            raise ValueError(msg)
        return out

    def to_json(self) -> dict[str, Any]:
        """User callables cannot be stored: only their description."""
        return {"name": "CustomPerturbation", "kind": self.kind, "repr": repr(self.fn)}


def _need_embeddings(rows: Rows, name: str) -> Float32Array:
    if rows.embeddings is None:
        msg = f"{name} acts on embeddings: pass embeddings= to fit"
        raise ValueError(msg)
    return rows.embeddings


def check_perturbations(perturbations: Any) -> tuple[Perturbation, ...]:
    """Validate a sequence of :class:`Perturbation` (plain callables are rejected: wrap them)."""
    if perturbations is None:
        return ()
    if isinstance(perturbations, Perturbation) or not isinstance(perturbations, Sequence):
        msg = f"perturbations must be a list of Perturbation objects; got {perturbations!r}"
        raise TypeError(msg)
    out = tuple(perturbations)
    for p in out:
        if not isinstance(p, Perturbation):
            msg = (
                f"perturbations must hold Perturbation objects (wrap a function in "
                f"CustomPerturbation(fn, kind=...)); got {p!r}"
            )
            raise TypeError(msg)
    return out


def from_json(payload: dict[str, Any]) -> Perturbation | None:
    """Rebuild a built-in perturbation from :meth:`Perturbation.to_json` (``None`` for custom)."""
    name = payload.get("name")
    if name == "GroupResample":
        return GroupResample(strength=float(payload["strength"]))
    if name == "ClassPriorShift":
        return ClassPriorShift(strength=float(payload["strength"]))
    if name == "FeatureNoise":
        return FeatureNoise(scale=tuple(payload["scale"]))
    if name == "FeatureDropout":
        return FeatureDropout(rate=tuple(payload["rate"]))
    return None


def apply_transforms(
    rows: Rows,
    transforms: Sequence[Perturbation],
    rng: np.random.Generator,
    head: Callable[[Float32Array], Any] | None,
) -> Rows:
    """A random non-empty chain of ``transforms`` (each kept with probability ½), then ``head``."""
    chosen = [t for t in transforms if rng.random() < 0.5]
    if not chosen and transforms:
        chosen = [transforms[int(rng.integers(len(transforms)))]]
    out = rows
    for t in chosen:
        out = t.transform(out, rng)
    if head is not None and out.embeddings is not None and out.embeddings is not rows.embeddings:
        out = replace(out, probs=_head_probs(head, out.embeddings, rows.probs.shape))
    return out


def _head_probs(head: Callable[[Float32Array], Any], E: Float32Array, shape: tuple[int, ...]) -> FloatArray:
    from calwatch.engine._validation import check_probabilities

    P = np.asarray(head(E))
    if P.shape != shape:
        msg = f"head must map embeddings to probabilities of shape {shape}; got {P.shape}"
        raise ValueError(msg)
    return check_probabilities(P, "head(embeddings)")


def sample_weights(
    rows: Rows, reweightings: Sequence[Perturbation], rng: np.random.Generator
) -> FloatArray | None:
    """Product of the weights of a random subset of ``reweightings`` (each with prob. ½)."""
    weights: FloatArray | None = None
    for p in reweightings:
        if rng.random() < 0.5:
            w = p.weights(rows, rng)
            weights = w if weights is None else weights * w
    return weights


__all__ = [
    "ClassPriorShift",
    "CustomPerturbation",
    "FeatureDropout",
    "FeatureNoise",
    "GroupResample",
    "Perturbation",
    "Rows",
    "apply_transforms",
    "check_perturbations",
    "from_json",
    "sample_weights",
]
