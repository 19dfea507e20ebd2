"""Split and Mondrian conformal classification (ALGORITHMS.md §1).

:class:`SplitConformalClassifier` turns any probability model into prediction sets with
marginal coverage ``≥ 1 − α`` (or, Mondrian, coverage ``≥ 1 − α`` within every category: every
true label, or any user taxonomy), and conformal p-values for every class.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import check_alpha, check_groups_from, check_labels, check_probabilities
from calwatch.engine.conformal.quantiles import conformal_quantile, p_values_against
from calwatch.engine.conformal.row_draws import row_uniforms
from calwatch.engine.conformal.scores import (
    SCORE_NAMES,
    ScoreName,
    class_scores,
    label_ranks,
    label_scores,
    prediction_sets,
    rank_sum_label_scores,
    row_argmax,
)
from calwatch.engine.errors import NotFittedError

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]
MondrianName = Literal["label", "category"]
TuneName = Literal["size", "adapt"]
TopClassName = Literal["calibrated", "added"]

#: λ grid searched by ``tune=`` for RAPS (Angelopoulos et al. 2021, §3).
RAPS_LAMBDA_GRID: tuple[float, ...] = (0.001, 0.01, 0.05, 0.1, 0.2, 0.5)
#: Share of the calibration rows held out to tune RAPS when ``tune`` is set.
RAPS_TUNE_FRACTION = 0.2
#: Set-size strata for the size-stratified coverage violation (the "adapt" tuning).
_SSCV_SIZE_EDGES = (1, 2, 4, 11, 101, 1001)


class SplitConformalClassifier:
    """Split (or Mondrian) conformal prediction sets on top of any classifier's probabilities.

    Parameters
    ----------
    score : {"lac", "aps", "raps"}
        Nonconformity score: LAC ``1 − p_y``; APS, the probability mass ranked at or above ``y``;
        RAPS, APS plus ``λ·max(0, rank(y) − k_reg)``.
    alpha : float
        Miscoverage level; the target coverage is ``1 − alpha``.
    mondrian : {None, "label", "category"}
        ``None``: one threshold for all rows (marginal coverage). ``"label"``: one threshold per
        true class (class-conditional coverage). ``"category"``: one threshold per category of
        the array passed as ``categories`` to ``fit`` and ``predict_sets`` (passing
        ``categories`` with ``mondrian=None`` also selects this).
    randomized : bool, optional
        Randomise APS/RAPS scores with ``u ~ U(0, 1)`` per row (and break p-value ties at
        random) for exact rather than conservative coverage. ``False`` uses ``u = 1``.
        Default (None): ``True`` for APS and RAPS, ``False`` for LAC (whose score has no ``u``).
        Given the rows' ids (``ids=``, as the monitor and its table paths pass them), each
        test row's ``u`` is a keyed hash of the calibrator's seed and the row's id
        (:func:`~calwatch.engine.conformal.row_draws.row_uniforms`), so any split of a table,
        on any machine, draws the same ``u`` for the same row; without ids it comes from the
        calibrator's seeded stream.
    raps_lambda, raps_k_reg : float, int
        RAPS regularisation; ignored by LAC and APS.
    tune : {None, "size", "adapt"}
        RAPS only: choose ``k_reg`` and ``λ`` on a held-out 20% of the calibration rows, for the
        smallest sets ("size") or the most even coverage across set sizes ("adapt").
    kappa : int
        Mondrian guard: a category with fewer than ``kappa`` calibration rows gets the full set.
    top_class : {"calibrated", "added"}, optional
        How the top class ``ŷ`` joins every set (the convention of every paper calwatch
        implements: no empty sets). ``"calibrated"``: the conformal score of ``ŷ`` counts as 0,
        ``s'(x, y) = s(x, y)·1{y ≠ ŷ(x)}``, *both* in calibration and in the sets, so the
        threshold ``q̂`` is the conformal quantile of ``s'``: ``ŷ`` is always in, and the set
        ``{y : s'(x, y) ≤ q̂}`` covers ``≥ 1 − α`` by the ordinary split conformal argument,
        at most ``1 − α + 1/(n+1)`` with continuous scores (randomised APS/RAPS) whenever the
        top-1 accuracy is below ``1 − α`` (above it, ``{ŷ}`` alone covers more than asked and
        no non-empty set can do less). ``"added"``: ``q̂`` from the plain scores, ``ŷ`` added
        afterwards, which only adds coverage: at α = 0.1 deterministic APS with ``ŷ`` added
        covers 0.91–1.00 on the real tasks whose model is confident (full sets of 2 on three
        binary ones), randomised APS with ``ŷ`` added 0.909–0.944, where
        ``"calibrated"`` covers 0.896–0.904 with sets no larger than MAPIE's and TorchCP's
        randomised APS (``benchmarks/results/defaults_table.txt``). Default (None): ``"calibrated"`` for
        randomised scores, ``"added"`` otherwise (LAC and deterministic APS keep the sets they
        always had).
    allow_empty : bool
        ``True``: the plain conformal set ``{c : s(x, c) ≤ q̂}``, possibly empty, whose mean
        coverage is exactly ``1 − ⌊(n+1)α⌋/(n+1)`` for continuous scores (MAPIE's and TorchCP's
        sets); ``top_class`` does not apply.
    seed : int
        Seed for randomisation and the tuning split.
    groups_from : str or sequence of str, optional
        For a :class:`~calwatch.monitor.monitor.Monitor`: the slice columns (its
        ``calibrate/observe(meta=)`` columns) whose values are the Mondrian categories, so a
        row's category is its slice (``hour = 15 ≤ hour < 18``; with two columns, the pair of
        values) and the promise holds within each. Implies ``mondrian="category"``; the
        calibrator itself only records the names (``fit``/``predict_sets`` still take
        ``categories``). :meth:`Monitor.slice_calibrator
        <calwatch.monitor.monitor.Monitor.slice_calibrator>` builds one from a flagged column.

    Attributes
    ----------
    quantiles_ : float or dict
        The fitted threshold ``q̂``: one float, or ``{category: q̂}`` for Mondrian (class index
        for ``mondrian="label"``). ``inf`` means "every class".
    n_classes_ : int
        Number of classes seen at fit time.
    category_counts_ : dict
        Calibration rows per category (Mondrian only).

    Examples
    --------
    >>> P = np.array([[0.7, 0.2, 0.1], [0.5, 0.4, 0.1], [0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
    >>> c = SplitConformalClassifier(score="lac", alpha=0.4).fit(P, np.array([0, 1, 2, 0]))
    >>> c.quantiles_
    0.5
    >>> c.predict_sets(np.array([[0.55, 0.45, 0.0]])).tolist()
    [[True, False, False]]
    """

    #: A calibrator restored from a snapshot written before ``top_class`` and id-keyed draws
    #: existed has neither attribute: these class defaults give it the sets it always had.
    top_class: TopClassName = "added"
    _u_from_ids: bool = False
    #: Calibrators restored from snapshots written before ``groups_from`` take no slice columns.
    groups_from: tuple[str, ...] | None = None

    def __init__(
        self,
        *,
        score: ScoreName = "lac",
        alpha: float = 0.1,
        mondrian: MondrianName | None = None,
        randomized: bool | None = None,
        raps_lambda: float = 0.01,
        raps_k_reg: int = 1,
        tune: TuneName | None = None,
        kappa: int = 0,
        top_class: TopClassName | None = None,
        allow_empty: bool = False,
        seed: int = 0,
        groups_from: str | Sequence[str] | None = None,
    ) -> None:
        if score not in SCORE_NAMES:
            msg = f"score must be one of {SCORE_NAMES}; got {score!r}"
            raise ValueError(msg)
        if mondrian not in (None, "label", "category"):
            msg = f"mondrian must be None, 'label' or 'category'; got {mondrian!r}"
            raise ValueError(msg)
        columns = check_groups_from(groups_from)
        if columns is not None and mondrian == "label":
            msg = "groups_from makes the slices the Mondrian categories: it needs mondrian=None or 'category'"
            raise ValueError(msg)
        if tune not in (None, "size", "adapt"):
            msg = f"tune must be None, 'size' or 'adapt'; got {tune!r}"
            raise ValueError(msg)
        if tune is not None and score != "raps":
            msg = f"tune={tune!r} tunes RAPS's λ and k_reg; it needs score='raps', got {score!r}"
            raise ValueError(msg)
        if not (math.isfinite(raps_lambda) and raps_lambda >= 0):
            msg = f"raps_lambda must be a finite number ≥ 0; got {raps_lambda!r}"
            raise ValueError(msg)
        if int(raps_k_reg) != raps_k_reg or raps_k_reg < 0:
            msg = f"raps_k_reg must be an integer ≥ 0; got {raps_k_reg!r}"
            raise ValueError(msg)
        if int(kappa) != kappa or kappa < 0:
            msg = f"kappa must be an integer ≥ 0; got {kappa!r}"
            raise ValueError(msg)
        if top_class not in (None, "calibrated", "added"):
            msg = f"top_class must be None, 'calibrated' or 'added'; got {top_class!r}"
            raise ValueError(msg)
        if top_class is not None and allow_empty:
            msg = "top_class must be None with allow_empty=True (the top class is not forced in)"
            raise ValueError(msg)
        self.score: ScoreName = score
        self.alpha = check_alpha(alpha)
        self.groups_from = columns
        self.mondrian: MondrianName | None = "category" if columns is not None else mondrian
        self.randomized = score != "lac" if randomized is None else bool(randomized)
        self.top_class: TopClassName = (
            ("calibrated" if self.randomized else "added") if top_class is None else top_class
        )
        self.raps_lambda = float(raps_lambda)
        self.raps_k_reg = int(raps_k_reg)
        self.tune = tune
        self.kappa = int(kappa)
        self.allow_empty = bool(allow_empty)
        self.seed = int(seed)

    def __repr__(self) -> str:
        options = [f"score={self.score!r}", f"alpha={self.alpha!r}"]
        if self.groups_from is not None:
            options.append(f"groups_from={list(self.groups_from)!r}")
        elif self.mondrian is not None:
            options.append(f"mondrian={self.mondrian!r}")
        if self.randomized != (self.score != "lac"):
            options.append(f"randomized={self.randomized!r}")
        if self.top_class != ("calibrated" if self.randomized else "added") and not self.allow_empty:
            options.append(f"top_class={self.top_class!r}")
        if self.score == "raps":
            options += [f"raps_lambda={self.raps_lambda!r}", f"raps_k_reg={self.raps_k_reg!r}"]
        if self.tune is not None:
            options.append(f"tune={self.tune!r}")
        if self.kappa:
            options.append(f"kappa={self.kappa!r}")
        if self.allow_empty:
            options.append("allow_empty=True")
        return f"SplitConformalClassifier({', '.join(options)})"

    # ------------------------------------------------------------------ fitting
    def fit(self, P_cal: Any, y_cal: Any, categories: Any = None) -> SplitConformalClassifier:
        """Compute calibration scores and the conformal threshold(s).

        Parameters
        ----------
        P_cal : array-like of shape (n, K)
            Model probabilities of the calibration rows.
        y_cal : array-like of shape (n,)
            Their true class indices in ``0..K-1``.
        categories : array-like of shape (n,), optional
            Mondrian category of each calibration row (any comparable values).

        Returns
        -------
        SplitConformalClassifier
            ``self``, fitted.
        """
        P = check_probabilities(P_cal, "P_cal", copy=False)
        n, K = P.shape
        y = check_labels(y_cal, K, "y_cal", n_rows=n)
        mode = self._mondrian_mode(categories, fitting=True)
        groups: npt.NDArray[Any] | None = None
        if mode == "category":
            groups = _as_category_array(categories, "categories", n)
        rng = np.random.default_rng(self.seed)
        lam, k_reg = self.raps_lambda, self.raps_k_reg
        if self.tune is not None:
            P, y, groups, lam, k_reg = self._tune_raps(P, y, groups, rng)
        self.raps_lambda_ = lam
        self.raps_k_reg_ = k_reg
        u = np.asarray(rng.uniform(size=P.shape[0]), dtype=np.float64) if self.randomized else None
        scores = label_scores(P, y, self.score, u=u, raps_lambda=lam, raps_k_reg=k_reg)
        self._u_from_ids = True
        if self._top_calibrated:
            scores[y == P.argmax(axis=1)] = 0.0
        self.n_classes_ = K
        self.n_calibration_ = int(P.shape[0])
        self.mode_: Literal["marginal", "label", "category"] = mode
        self._predict_rng = np.random.default_rng([self.seed, 1])
        if mode == "marginal":
            self.quantiles_: float | dict[Any, float] = conformal_quantile(scores, self.alpha)
            self._sorted_scores: dict[Any, FloatArray] = {None: np.sort(scores)}
            self.category_counts_: dict[Any, int] = {}
            return self
        keys = y if mode == "label" else groups
        assert keys is not None
        if mode == "label":
            uniq: npt.NDArray[Any] = np.arange(K)
            inverse = y
        else:
            uniq, inverse = np.unique(keys, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(len(uniq) + 1))
        self._sorted_scores = {}
        self.quantiles_ = {}
        self.category_counts_ = {}
        for index, key in enumerate(uniq.tolist()):
            group_scores = scores[order[bounds[index] : bounds[index + 1]]]
            count = int(group_scores.shape[0])
            self.category_counts_[key] = count
            self._sorted_scores[key] = np.sort(group_scores)
            guarded = count == 0 or count < self.kappa
            self.quantiles_[key] = math.inf if guarded else conformal_quantile(group_scores, self.alpha)
        self._category_keys = uniq
        self._category_thresholds = np.array([self.quantiles_[k] for k in uniq.tolist()])
        return self

    def _mondrian_mode(self, categories: Any, *, fitting: bool) -> Literal["marginal", "label", "category"]:
        if not fitting:
            mode = self.mode_
            if mode == "category" and categories is None:
                msg = "categories is required at predict time: the calibrator was fitted with categories"
                raise ValueError(msg)
            if mode != "category" and categories is not None:
                msg = "categories must be None: the calibrator was fitted without categories"
                raise ValueError(msg)
            return mode
        if self.mondrian == "label":
            if categories is not None:
                msg = "categories must be None with mondrian='label' (the label is the category)"
                raise ValueError(msg)
            return "label"
        if self.mondrian == "category" or categories is not None:
            if categories is None:
                msg = "categories is required at fit time: mondrian='category'"
                raise ValueError(msg)
            return "category"
        return "marginal"

    def _tune_raps(
        self,
        P: FloatArray,
        y: IntArray,
        groups: npt.NDArray[Any] | None,
        rng: np.random.Generator,
    ) -> tuple[FloatArray, IntArray, npt.NDArray[Any] | None, float, int]:
        """Pick RAPS's ``k_reg`` and ``λ`` on a held-out share; return the remaining rows."""
        n = P.shape[0]
        n_tune = round(RAPS_TUNE_FRACTION * n)
        if n_tune < 20 or n - n_tune < 20:
            msg = f"tune={self.tune!r} needs at least 100 calibration rows; got {n}"
            raise ValueError(msg)
        perm = rng.permutation(n)
        tune_rows, keep_rows = perm[:n_tune], perm[n_tune:]
        P_t, y_t = P[tune_rows], y[tune_rows]
        # k_reg: the (1 − α) conformal quantile of the true label's rank (RAPS, Alg. "pick k_reg").
        k_reg = conformal_quantile(label_ranks(P_t, y_t).astype(np.float64), self.alpha)
        k_reg_int = P.shape[1] if math.isinf(k_reg) else min(int(k_reg), P.shape[1])
        half = n_tune // 2
        best_lam, best_value = RAPS_LAMBDA_GRID[0], math.inf
        for lam in RAPS_LAMBDA_GRID:
            s_fit = label_scores(P_t[:half], y_t[:half], "raps", raps_lambda=lam, raps_k_reg=k_reg_int)
            q = conformal_quantile(s_fit, self.alpha)
            S = prediction_sets(P_t[half:], "raps", q, raps_lambda=lam, raps_k_reg=k_reg_int)
            S[np.arange(S.shape[0]), P_t[half:].argmax(axis=1)] = True
            if self.tune == "size":
                value = float(S.sum(axis=1).mean())
            else:
                value = _size_stratified_violation(S, y_t[half:], self.alpha)
            if value < best_value - 1e-12:
                best_lam, best_value = lam, value
        kept_groups = None if groups is None else groups[keep_rows]
        return P[keep_rows], y[keep_rows], kept_groups, best_lam, k_reg_int

    # --------------------------------------------------------------- prediction
    def _check_fitted(self) -> None:
        if not hasattr(self, "quantiles_"):
            msg = "this SplitConformalClassifier is not fitted yet: call fit(P_cal, y_cal) first"
            raise NotFittedError(msg)

    @property
    def _top_calibrated(self) -> bool:
        """Whether the top class's score counts as 0 (``top_class="calibrated"``, not ``allow_empty``)."""
        return self.top_class == "calibrated" and not self.allow_empty

    @property
    def draws_by_row_id(self) -> bool:
        """Whether ``ids=`` keys its randomised draws (randomised, and fitted by this version).

        The monitor passes row ids only to calibrators that say so; a randomised calibrator
        restored from an older snapshot keeps drawing from its seeded stream, as it did.
        """
        return self.randomized and self._u_from_ids

    def _draw_u(self, m: int, ids: Any = None, stream: int = 0, columns: int = 1) -> FloatArray | None:
        """``u ~ U(0, 1)`` per row (``columns`` per row): keyed by row id when given, else from the stream.

        None unless randomised. Stream 0 is the scores' ``u``, stream 1 the p-values' tie-breaks.
        """
        if not self.randomized:
            return None
        if ids is not None and self._u_from_ids:
            if len(ids) != m:
                msg = f"ids has {len(ids)} values but P has {m} rows"
                raise ValueError(msg)
            return row_uniforms(self.seed, ids, stream=stream, columns=columns)
        size = m if columns == 1 else (m, columns)
        return np.asarray(self._predict_rng.uniform(size=size))

    def class_scores(self, P: Any, *, ids: Any = None, _validated: bool = False) -> FloatArray:
        """Nonconformity score of every class for each row, shape ``(m, K)``.

        Randomised scores draw ``u`` keyed by ``ids`` when given, else fresh from the
        calibrator's seeded stream. With ``top_class="calibrated"`` the top class scores 0.
        """
        self._check_fitted()
        Pv = P if _validated else check_probabilities(P, "P", n_classes=self.n_classes_, copy=False)
        u = self._draw_u(Pv.shape[0], ids)
        S = class_scores(Pv, self.score, u=u, raps_lambda=self.raps_lambda_, raps_k_reg=self.raps_k_reg_)
        if self._top_calibrated:
            S[np.arange(Pv.shape[0]), Pv.argmax(axis=1)] = 0.0
        return S

    def label_scores(self, P: Any, y: Any, *, ids: Any = None, same_bits_as_sets: bool = True) -> FloatArray:
        """Nonconformity score ``s(x, y)`` of the given labels, shape ``(m,)``.

        Bit for bit ``class_scores(P)[rows, y]`` (the same draws of ``u``), without the score
        matrix where there are many classes: the scores whose conformal quantile is the
        threshold (0 for the top class with ``top_class="calibrated"``).
        ``same_bits_as_sets=False`` sums the classes ranked
        before ``y`` in another order, in ``O(K)`` per row without sorting
        (:func:`~calwatch.engine.conformal.scores.rank_sum_label_scores`): the same score to
        the last bits, for uses that compare these scores only among themselves (the monitor's
        conformity martingale), and much faster where labels sit deep in large-K rankings.
        """
        self._check_fitted()
        Pv = check_probabilities(P, "P", n_classes=self.n_classes_, copy=False)
        yv = check_labels(y, self.n_classes_, "y", n_rows=Pv.shape[0])
        u = self._draw_u(Pv.shape[0], ids)
        scores = label_scores if same_bits_as_sets else rank_sum_label_scores
        out = scores(Pv, yv, self.score, u=u, raps_lambda=self.raps_lambda_, raps_k_reg=self.raps_k_reg_)
        if self._top_calibrated:
            out[yv == Pv.argmax(axis=1)] = 0.0
        return out

    def sets_within(self, P: Any, thresholds: Any, *, ids: Any = None, _validated: bool = False) -> BoolArray:
        """``class_scores(P) <= thresholds``, bit for bit, without the score matrix where it can.

        ``thresholds`` is a scalar, ``(m, 1)`` or ``(1, K)`` (see
        :func:`~calwatch.engine.conformal.scores.prediction_sets`); randomised scores draw
        ``u`` exactly as :meth:`class_scores` does. The top class is in wherever its threshold
        is ``≥ 0`` when ``top_class="calibrated"`` (its score is 0); otherwise no top class is
        added.
        """
        self._check_fitted()
        Pv = P if _validated else check_probabilities(P, "P", n_classes=self.n_classes_, copy=False)
        m = Pv.shape[0]
        u = self._draw_u(m, ids)
        sets = prediction_sets(
            Pv, self.score, thresholds, u=u, raps_lambda=self.raps_lambda_, raps_k_reg=self.raps_k_reg_
        )
        if self._top_calibrated and m:
            limits = np.broadcast_to(np.asarray(thresholds, dtype=np.float64), (m, Pv.shape[1]))
            _add_top_class(sets, Pv, lambda rows, top: limits[rows, top] >= 0.0)
        return sets

    def _row_thresholds(self, m: int, categories: Any) -> FloatArray:
        """Threshold per row and class, broadcastable to ``(m, K)``."""
        mode = self._mondrian_mode(categories, fitting=False)
        if mode == "marginal":
            return np.full((1, 1), self.quantiles_, dtype=np.float64)
        if mode == "label":
            return self._category_thresholds[None, :].astype(np.float64)
        cats = _as_category_array(categories, "categories", m)
        index, known = _lookup_categories(self._category_keys, cats)
        thresholds = np.full(m, math.inf)
        thresholds[known] = self._category_thresholds[index[known]]
        return thresholds[:, None]

    def predict_sets(self, P: Any, categories: Any = None, *, ids: Any = None) -> BoolArray:
        """Prediction sets as a boolean matrix, the top class always included (no empty sets).

        ``out[i, c]`` is True when class ``c`` is in row ``i``'s set. With ``allow_empty=True``
        the top class is not added.

        Parameters
        ----------
        P : array-like of shape (m, K)
            Model probabilities.
        categories : array-like of shape (m,), optional
            Mondrian categories (required when fitted with categories). A category never seen
            at fit time gets the full set.
        ids : sequence of hashables, optional
            Row ids: a randomised calibrator draws each row's ``u`` from its id (the same sets
            for the same row whenever and wherever it is predicted).
        """
        self._check_fitted()
        Pv = check_probabilities(P, "P", n_classes=self.n_classes_, copy=False)
        thresholds = self._row_thresholds(Pv.shape[0], categories)
        sets = self.sets_within(Pv, thresholds, ids=ids, _validated=True)
        if self.allow_empty:
            return sets
        if self.mode_ == "label":
            # One threshold per class: another class can be in while the top class is out.
            _add_top_class(sets, Pv)
            return sets
        # One threshold per row, and every score is non-decreasing in the class's probability
        # rank, so the top class is already in every non-empty set: only empty rows need it.
        # (A full argmax over short rows costs more than the rest of LAC's predict_sets.)
        empty = np.flatnonzero(~_any_per_row(sets))
        if empty.size:
            sets[empty, row_argmax(Pv[empty])] = True
        return sets

    def p_values(self, P: Any, categories: Any = None, *, ids: Any = None) -> FloatArray:
        """Conformal p-value of every class for each row, shape ``(m, K)``, float64.

        ``(1 + #{j : s_j ≥ s(x, c)}) / (n + 1)`` against the calibration scores of the row's
        category (of class ``c`` for ``mondrian="label"``); randomised tie-breaking when
        ``randomized=True``. Without randomisation, ``p > α`` exactly when ``c`` is in the set
        before the top class is added. A category with no calibration rows gets p-value 1.
        ``ids`` key the randomised draws as in :meth:`predict_sets`.
        """
        self._check_fitted()
        Pv = check_probabilities(P, "P", n_classes=self.n_classes_, copy=False)
        m, K = Pv.shape
        S = self.class_scores(Pv, ids=ids, _validated=True)
        theta = None
        if self.randomized:
            drawn = self._draw_u(m, ids, stream=1, columns=K)
            assert drawn is not None
            theta = drawn.reshape(m, K)
        mode = self._mondrian_mode(categories, fitting=False)
        if mode == "marginal":
            return p_values_against(self._sorted_scores[None], S, theta)
        out = np.ones((m, K), dtype=np.float64)
        if mode == "label":
            for c in range(K):
                col_theta = None if theta is None else theta[:, c]
                out[:, c] = p_values_against(self._sorted_scores[c], S[:, c], col_theta)
            return out
        cats = _as_category_array(categories, "categories", m)
        index, known = _lookup_categories(self._category_keys, cats)
        keys = self._category_keys.tolist()
        for code in np.unique(index[known]).tolist():
            rows = known & (index == code)
            sub_theta = None if theta is None else theta[rows]
            out[rows] = p_values_against(self._sorted_scores[keys[code]], S[rows], sub_theta)
        return out


def _add_top_class(
    sets: BoolArray, P: FloatArray, where: Callable[[IntArray | slice, Any], BoolArray] | None = None
) -> None:
    """In place: ``sets[i, top_i] |= where(rows, top)[i]`` (``True`` when ``where`` is None).

    ``top_i`` is row ``i``'s first most probable class. With two classes the two columns are
    updated whole (``where(slice, column)`` gives a column's values), instead of a gather and a
    scatter at ``(row, top)`` pairs: the same booleans, ~5x faster on a prediction log's chunks.
    """
    m, K = P.shape
    if K == 2:
        second = np.greater(P[:, 1], P[:, 0])
        if where is None:
            sets[:, 0] |= ~second
            sets[:, 1] |= second
            return
        allowed = np.where(second, where(slice(None), 1), where(slice(None), 0))
        sets[:, 0] |= allowed & ~second
        sets[:, 1] |= allowed & second
        return
    rows, top = np.arange(m), row_argmax(P)
    if where is None:
        sets[rows, top] = True
    else:
        sets[rows, top] |= where(rows, top)


def _any_per_row(sets: BoolArray) -> BoolArray:
    """``sets.any(axis=1)``, ~8x faster on short rows.

    Below 256 classes the row counts are summed as uint8 by ``einsum`` (no overflow: at most
    255), one pass; ``any(axis=1)`` reduces each short row with a call of its own.
    """
    if sets.shape[1] < 256:
        counts = np.einsum("ij->i", sets.view(np.uint8))
        nonzero: BoolArray = counts != 0
        return nonzero
    return np.asarray(sets.any(axis=1))


def _as_category_array(categories: Any, name: str, n_rows: int) -> npt.NDArray[Any]:
    if hasattr(categories, "to_numpy"):
        categories = categories.to_numpy()
    arr = np.asarray(categories)
    if arr.ndim != 1 or arr.shape[0] != n_rows:
        msg = f"{name} must be a 1-D array with one category per row ({n_rows}); got shape {arr.shape}"
        raise ValueError(msg)
    return arr


def _lookup_categories(keys: npt.NDArray[Any], cats: npt.NDArray[Any]) -> tuple[IntArray, BoolArray]:
    """Index of each value of ``cats`` in the sorted ``keys``, and whether it was found."""
    if keys.shape[0] == 0:
        return np.zeros(cats.shape[0], dtype=np.intp), np.zeros(cats.shape[0], dtype=bool)
    try:
        index = np.searchsorted(keys, cats)
    except TypeError as err:
        msg = f"categories must be comparable with the fitted categories {keys[:3].tolist()}…"
        raise TypeError(msg) from err
    clipped = np.minimum(index, keys.shape[0] - 1)
    known = keys[clipped] == cats
    return clipped.astype(np.intp), np.asarray(known, dtype=bool)


def _size_stratified_violation(sets: BoolArray, y: IntArray, alpha: float) -> float:
    """Largest gap between coverage within a set-size stratum and ``1 − α`` (RAPS's SSCV)."""
    sizes = sets.sum(axis=1)
    covered = sets[np.arange(sets.shape[0]), y]
    worst = 0.0
    for lo, hi in itertools.pairwise(_SSCV_SIZE_EDGES):
        stratum = (sizes >= lo) & (sizes < hi)
        if stratum.any():
            worst = max(worst, abs(float(covered[stratum].mean()) - (1.0 - alpha)))
    return worst
