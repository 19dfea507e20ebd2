"""What every selector of paper 002 shares: inputs, scores, the threshold of Eq. 16, selection.

This module holds the lifecycle common to
:class:`~calwatch.engine.selective.calibrator.SelectiveCalibrator` and
:class:`~calwatch.engine.selective.calibrator.BaselineSelector` (their base class
``_Selector``): checking the rows to score against the fitted classes and embedding width,
scoring them under a thread limit, the threshold ``τ̂ = sup{τ : mean(g̃ ≥ τ) ≥ ξ}`` (Eq. 16,
:func:`~calwatch.engine.metrics.calibration.coverage_threshold`) tuned on the fit rows or on
any unlabelled rows later, and the selection ``g̃ ≥ τ̂``; with the checks of the options and the
reference split that both selectors' ``fit`` use. The selectors themselves live in
:mod:`calwatch.engine.selective.calibrator`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import check_probabilities
from calwatch.engine.errors import NotFittedError
from calwatch.engine.metrics.calibration import _threshold, check_coverage
from calwatch.engine.selective.features import check_embeddings, limit_threads

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]


def _check_float(value: Any, name: str, lo: float, hi: float, *, lo_open: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        msg = f"{name} must be a number; got {value!r}"
        raise TypeError(msg)
    v = float(value)
    ok = (lo < v if lo_open else lo <= v) and v <= hi
    if not ok:
        bracket = "(" if lo_open else "["
        msg = f"{name} must be in {bracket}{lo}, {hi}]; got {value!r}"
        raise ValueError(msg)
    return v


def _reference_split(
    E: Float32Array, reference: Any, fraction: float, rng: np.random.Generator
) -> tuple[IntArray, Float32Array]:
    """The fit rows to train/tune on and the reference embeddings (split off when absent)."""
    n = E.shape[0]
    if reference is not None:
        ref = check_embeddings(reference, "reference", dims=E.shape[1])
        return np.arange(n, dtype=np.intp), ref
    n_ref = round(fraction * n)
    if n_ref < 2 or n - n_ref < 2:
        msg = (
            f"no reference embeddings given and reference_fraction={fraction} of {n} rows leaves "
            "too few rows: pass reference= (the model's training embeddings)"
        )
        raise ValueError(msg)
    order = rng.permutation(n)
    return np.sort(order[n_ref:]).astype(np.intp), E[np.sort(order[:n_ref])]


class _Selector:
    """Shared lifecycle: inputs, threshold (Eq. 16), selection."""

    coverage: float
    n_threads: int | None
    threshold_: float
    n_classes_: int
    dims_: int | None

    def _check_fitted(self) -> None:
        if not hasattr(self, "threshold_"):
            msg = f"this {type(self).__name__} is not fitted yet: call fit(P, y, ...) first"
            raise NotFittedError(msg)

    def _inputs(self, P: Any, embeddings: Any, name: str = "P") -> tuple[FloatArray, Float32Array | None]:
        self._check_fitted()
        probs = check_probabilities(P, name, n_classes=self.n_classes_)
        if self.dims_ is None:
            return probs, None
        if embeddings is None:
            msg = f"embeddings are required: this selector was fitted with {self.dims_}-d embeddings"
            raise ValueError(msg)
        E = check_embeddings(embeddings, "embeddings", n_rows=probs.shape[0], dims=self.dims_)
        return probs, E

    def _scores(self, probs: FloatArray, E: Float32Array | None) -> FloatArray:
        raise NotImplementedError

    def _prepare(self) -> None:
        """Import what scoring needs before threads are limited (torch for the MLP)."""

    def scores(self, P: Any, *, embeddings: Any = None) -> FloatArray:
        """The selector's score per row (higher = keep first), float64.

        Parameters
        ----------
        P : array-like of shape (n, K)
            Model probabilities.
        embeddings : array-like of shape (n, d), optional
            Model embeddings; required when the selector was fitted with embeddings.

        Returns
        -------
        ndarray of shape (n,)
        """
        probs, E = self._inputs(P, embeddings)
        self._prepare()
        with limit_threads(self.n_threads):
            return self._scores(probs, E)

    def tune_scores(self, scores: Any, *, coverage: float | None = None) -> float:
        """Set ``threshold_`` from scores of unlabelled rows (Eq. 16) and return it. Cheap.

        Parameters
        ----------
        scores : array-like of shape (n,)
            Output of :meth:`scores` on the rows to tune on (e.g. the current stream window).
        coverage : float, optional
            A new target coverage ``ξ`` (stored in ``coverage``); default: keep the current one.
        """
        self._check_fitted()
        xi = self.coverage if coverage is None else check_coverage(coverage)
        s = np.asarray(scores, dtype=np.float64)
        if s.ndim != 1 or s.shape[0] == 0 or not np.isfinite(s).all():
            msg = f"scores must be a non-empty 1-D finite array; got shape {s.shape}"
            raise ValueError(msg)
        self.threshold_ = _threshold(s, xi)
        self.coverage = xi
        return self.threshold_

    def tune(self, P: Any, *, embeddings: Any = None, coverage: float | None = None) -> float:
        """Set ``threshold_`` from unlabelled rows (Eq. 16), optionally at a new ``coverage``."""
        return self.tune_scores(self.scores(P, embeddings=embeddings), coverage=coverage)

    def select_scores(self, scores: Any) -> BoolArray:
        """``scores ≥ threshold_``: the rows to keep."""
        self._check_fitted()
        mask: BoolArray = np.asarray(scores, dtype=np.float64) >= self.threshold_
        return mask

    def select(self, P: Any, *, embeddings: Any = None, tune_on: Any = None) -> BoolArray:
        """Which rows to keep (``True``) at the target coverage.

        Parameters
        ----------
        P : array-like of shape (n, K)
            Model probabilities.
        embeddings : array-like of shape (n, d), optional
            Model embeddings (when fitted with them).
        tune_on : None, "batch", array-like or tuple, optional
            Where the threshold comes from. ``None``: ``threshold_`` (the fit rows, or the last
            :meth:`tune`). ``"batch"``: these rows themselves (002 §5.2; coverage on them is
            then ``≥ coverage``). An array ``P_tune`` or a tuple ``(P_tune, E_tune)``: other
            unlabelled rows. ``threshold_`` is not changed; use :meth:`tune` for that.

        Returns
        -------
        ndarray of bool, shape (n,)
        """
        probs, E = self._inputs(P, embeddings)
        self._prepare()
        with limit_threads(self.n_threads):
            s = self._scores(probs, E)
        if tune_on is None:
            tau = self.threshold_
        elif isinstance(tune_on, str):
            if tune_on != "batch":
                msg = f"tune_on must be None, 'batch', P_tune or (P_tune, E_tune); got {tune_on!r}"
                raise ValueError(msg)
            tau = _threshold(s, self.coverage)
        else:
            P_t, E_t = tune_on if isinstance(tune_on, tuple) else (tune_on, None)
            probs_t, E_t = self._inputs(P_t, E_t, name="tune_on")
            with limit_threads(self.n_threads):
                tau = _threshold(self._scores(probs_t, E_t), self.coverage)
        mask: BoolArray = s >= tau
        return mask
