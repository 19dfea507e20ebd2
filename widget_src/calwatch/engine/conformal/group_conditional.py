"""Conformal sets with coverage ``≥ 1 − α`` within each group of a finite, overlapping family.

Mondrian conformal (:class:`~calwatch.engine.conformal.classifier.SplitConformalClassifier`
with ``mondrian="category"``) promises coverage within each category of a *partition*. Here a
row may belong to several groups of a finite family ``𝒢 = {g_1, …, g_G}`` (``carrier = B6``,
``hour ≥ 18`` and their pair, say), or to none, and the promise is per group.

Method: the conservative rule for a finite collection of (overlapping) subsets of the feature
space, as discussed by Barber, Candès, Ramdas & Tibshirani (2021, "The limits of
distribution-free conditional predictive inference", *Information and Inference* 10(2)); the
proof below is self-contained. With calibration scores ``s_j = s(x_j, y_j)`` (LAC ``1 − p_y`` or
deterministic APS, ALGORITHMS.md §1), for each group ``g``:

    n_g = #{j : x_j ∈ g},   k_g = ⌈(n_g + 1)(1 − α)⌉,
    q_g = the k_g-th smallest of {s_j : x_j ∈ g}     (q_g = +∞ when k_g > n_g),

split conformal inside ``g``, never interpolated (ALGORITHMS.md §0). A test row ``x`` in the
groups ``𝒢(x) = {g : x ∈ g}`` gets the largest of their thresholds,

    T(x) = max_{g ∈ 𝒢(x)} q_g            (T(x) = q̂, the marginal threshold, when 𝒢(x) = ∅),
    C(x) = {y : s(x, y) ≤ T(x)} ∪ {ŷ(x)},

``q̂`` being the ``⌈(n+1)(1−α)⌉``-th smallest of all ``n`` scores (split conformal's).

Guarantee. If the calibration rows and the test row are exchangeable and membership is a
fixed function of the row (the same rule at fit and at predict), then for every group ``g``

    P(Y ∈ C(X) | X ∈ g) ≥ 1 − α.

Why: given ``X ∈ g`` and ``n_g``, the ``n_g`` calibration rows of ``g`` and the test row are
exchangeable, so the split conformal rank argument gives ``P(s(X, Y) ≤ q_g | X ∈ g) ≥ 1 − α``;
``T(x) ≥ q_g`` for every ``x ∈ g`` and the sets grow with the threshold (adding ``ŷ`` only adds),
so the coverage inside ``g`` is at least that. The guarantee is over the calibration draw and
the test row, like split conformal's, and holds whatever the overlaps. It is *conservative*:
a row in several groups takes the largest threshold, so on intersections of groups with
different thresholds the coverage exceeds ``1 − α``, and a group whose rows are all in some
other group of larger threshold over-covers as a whole. Where ``g``'s rows are in no other
group, its set before ``ŷ`` joins covers at most ``1 − α + 1/(n_g + 1)`` for continuous scores.

The family must be chosen without looking at these calibration rows' labels: groups picked
*because* the same rows were under-covered (slices flagged on the rows that are then used to
calibrate) reuse the data, and the finite-sample promise no longer holds. Calibrate on other
rows than those the groups were found on.

Too few rows. A group with ``k_g > n_g`` (``n_g < 1/α − 1``: fewer than 9 rows at ``α = 0.1``,
0 rows included) has ``q_g = +∞``: its rows get every class. That is the only way to keep the
promise for it. ``min_group_rows`` extends the guard (``n_g < min_group_rows`` gives ``+∞``
too, like Mondrian's ``kappa``), which trades full sets for fewer thresholds that rest on a
handful of rows (one draw of ``n_g`` rows covers ``1 − α ± sqrt(α(1−α)/(n_g+2))``).

Rows in no group. A row outside every group is treated as split conformal treats every row:
threshold ``q̂``. Its promise is split conformal's *marginal* one (coverage ``1 − α`` on average
over all rows of split conformal's set), not one for the ungrouped rows as a set: if those
rows are harder than average they may be under-covered, and group-wise coverage of an
overlapping family does not bound the coverage over all rows either. To promise either,
add a column: ``~groups.any(axis=1)`` (the rest as a group of its own, ``≥ 1 − α`` within it),
or a column of ``True`` (every row is in it, so ``T(x) ≥ q̂`` everywhere and coverage over all
rows is ``≥ 1 − α``).

Special cases, exactly: a family that partitions the rows is Mondrian conformal by category;
one group holding every row is split conformal.

Why this method. Gibbs, Cherian & Candès (2023, "Conformal prediction with conditional
guarantees", arXiv:2305.12616; JRSS-B 2025) give, for the finite-dimensional class spanned
by the group indicators, sets with the same per-group guarantee that are *exact* rather than
conservative: coverage within each ``g`` exactly ``1 − α`` randomised, at most
``1 − α + d/((n+1)·P(X ∈ g))`` otherwise (``d`` the class's dimension, ``G`` or ``G + 1`` with
an intercept), where this max-rule over-covers on intersections. But each test row needs its
own augmented quantile regression (a linear program over the ``n + 1`` rows and ``d``
coefficients, the test row's imputed score among them): a batch of ``m`` rows costs ``m``
linear programs, and a row's threshold needs the whole calibration set at predict time. Here
``fit`` computes ``G + 1`` order statistics once; a test row costs ``O(G)`` for its threshold
plus its set, independently of every other row, so a stream is scored batch by batch at the
cost of split conformal, and the fitted state is ``G + 1`` numbers (saved and restored as is).
The price is over-coverage where groups overlap: on real diamonds with 15 groups (colors and
clarities, every row in two), coverage 0.907 over all rows against split conformal's 0.900, sets
3% larger, while split conformal leaves the hardest color at 0.882
(``tests/validity/test_group_conditional_validity.py``).

Scores are deterministic (APS with ``u = 1``), so the sets are too. The top class joins every
set afterwards (``top_class="added"`` in :class:`SplitConformalClassifier`'s terms, its default
for these two scores).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from calwatch.engine._validation import check_alpha, check_groups_from, check_labels, check_probabilities
from calwatch.engine.conformal.quantiles import conformal_quantile
from calwatch.engine.conformal.scores import label_scores, prediction_sets, row_argmax
from calwatch.engine.errors import NotFittedError

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]
GroupScoreName = Literal["lac", "aps"]
GROUP_SCORE_NAMES: tuple[GroupScoreName, ...] = ("lac", "aps")

#: Version of :meth:`GroupConditionalConformal.state`'s layout.
STATE_VERSION = 1
#: Row thresholds are taken in row chunks of about this many (row, group) entries.
_CHUNK_ENTRIES = 1 << 18


class GroupConditionalConformal:
    """Conformal prediction sets with coverage ``≥ 1 − α`` within each of a family of groups.

    Parameters
    ----------
    score : {"lac", "aps"}
        Nonconformity score: LAC ``1 − p_y``, or deterministic APS (the probability mass ranked
        at or above ``y``, ``u = 1``).
    alpha : float
        Miscoverage level; the target coverage within each group is ``1 − alpha``.
    min_group_rows : int
        A group with fewer calibration rows than this gets ``q_g = +∞`` (every class for its
        rows). Default 0: only the level's own rule applies (``⌈(n_g+1)(1−α)⌉ > n_g``).
    groups_from : str or sequence of str, optional
        For a :class:`~calwatch.monitor.monitor.Monitor`: the slice columns (its
        ``calibrate/observe(meta=)`` columns) whose values are the groups, one group per value
        of each column (``carrier = B6``, ``hour ≥ 18``…; a row is in one group per column), so
        the promise holds within every value of every column. The calibrator itself only
        records the names (``fit``/``predict_sets`` still take ``groups``); a monitor
        needs it to use this calibrator, and :meth:`Monitor.slice_calibrator
        <calwatch.monitor.monitor.Monitor.slice_calibrator>` builds one from flagged columns.

    Attributes
    ----------
    thresholds_ : ndarray of shape (G,), float64
        ``q_g`` per group (``inf``: every class).
    group_sizes_ : ndarray of shape (G,), intp
        Calibration rows per group, ``n_g``.
    marginal_threshold_ : float
        Split conformal's ``q̂`` over all calibration rows, the threshold of rows in no group.
    n_groups_, n_classes_, n_calibration_ : int
        Groups, classes and calibration rows seen at fit time.
    n_ungrouped_ : int
        Calibration rows in no group.

    Examples
    --------
    Six rows, two overlapping groups (rows 2-3 are in both); LAC scores ``1 − p_y`` are
    ``.125, .25, .75, .375, .5, .625``. At ``α = 0.4`` the rank is ``⌈5·.6⌉ = 3`` in each group
    of 4: ``g0`` (rows 0-3) gives ``.375``, ``g1`` (rows 2-5) ``.625``; over all 6 rows, rank
    ``⌈7·.6⌉ = 5`` gives ``q̂ = .625``.

    >>> P = np.array([[7, 1], [6, 2], [2, 6], [5, 3], [4, 4], [3, 5]]) / 8
    >>> y = np.zeros(6, dtype=int)
    >>> groups = np.array([[1, 0], [1, 0], [1, 1], [1, 1], [0, 1], [0, 1]], dtype=bool)
    >>> c = GroupConditionalConformal(score="lac", alpha=0.4).fit(P, y, groups)
    >>> c.thresholds_.tolist(), c.group_sizes_.tolist(), c.marginal_threshold_
    ([0.375, 0.625], [4, 4], 0.625)
    >>> c.row_thresholds(np.array([[1, 0], [1, 1], [0, 0]], dtype=bool)).tolist()  # g0, max, q̂
    [0.375, 0.625, 0.625]
    """

    #: Groups are given to ``fit`` and ``predict_sets`` as ``groups=`` (the monitor's kinds read this).
    takes_groups = True
    #: Calibrators restored from snapshots written before ``groups_from`` take no slice columns.
    groups_from: tuple[str, ...] | None = None

    def __init__(
        self,
        *,
        score: GroupScoreName = "lac",
        alpha: float = 0.1,
        min_group_rows: int = 0,
        groups_from: str | Sequence[str] | None = None,
    ) -> None:
        if score not in GROUP_SCORE_NAMES:
            msg = f"score must be one of {GROUP_SCORE_NAMES}; got {score!r}"
            raise ValueError(msg)
        if isinstance(min_group_rows, bool) or int(min_group_rows) != min_group_rows or min_group_rows < 0:
            msg = f"min_group_rows must be an integer ≥ 0; got {min_group_rows!r}"
            raise ValueError(msg)
        self.score: GroupScoreName = score
        self.alpha = check_alpha(alpha)
        self.min_group_rows = int(min_group_rows)
        self.groups_from = check_groups_from(groups_from)

    def __repr__(self) -> str:
        options = [f"score={self.score!r}", f"alpha={self.alpha!r}"]
        if self.min_group_rows:
            options.append(f"min_group_rows={self.min_group_rows!r}")
        if self.groups_from is not None:
            options.append(f"groups_from={list(self.groups_from)!r}")
        return f"GroupConditionalConformal({', '.join(options)})"

    @property
    def promise(self) -> str:
        """What the sets promise, in words.

        Examples
        --------
        >>> GroupConditionalConformal(alpha=0.1).promise
        'coverage ≥ 90% within each group; rows in no group: the marginal threshold'
        """
        count = f"each of the {self.n_groups_} groups" if hasattr(self, "n_groups_") else "each group"
        return (
            f"coverage ≥ {100 * (1 - self.alpha):g}% within {count}; rows in no group: the marginal threshold"
        )

    # ------------------------------------------------------------------ fitting
    def fit(self, P_cal: Any, y_cal: Any, groups: Any) -> GroupConditionalConformal:
        """Compute the calibration scores and each group's threshold ``q_g``.

        Parameters
        ----------
        P_cal : array-like of shape (n, K)
            Model probabilities of the calibration rows.
        y_cal : array-like of shape (n,)
            Their true class indices in ``0..K-1``.
        groups : array-like of bool, shape (n, G)
            ``groups[j, g]`` is True when calibration row ``j`` is in group ``g``. A row may be
            in several groups or in none; a group may be empty (its threshold is ``+inf``).

        Returns
        -------
        GroupConditionalConformal
            ``self``, fitted.
        """
        P = check_probabilities(P_cal, "P_cal", copy=False)
        n, K = P.shape
        y = check_labels(y_cal, K, "y_cal", n_rows=n)
        member = _check_groups(groups, "groups", n_rows=n, rows_of="P_cal")
        scores = label_scores(P, y, self.score)
        G = member.shape[1]
        sizes = np.count_nonzero(member, axis=0).astype(np.intp)
        thresholds = np.full(G, math.inf)
        for g in range(G):
            if sizes[g] and sizes[g] >= self.min_group_rows:
                thresholds[g] = conformal_quantile(scores[member[:, g]], self.alpha)
        self.thresholds_: FloatArray = thresholds
        self.group_sizes_: IntArray = sizes
        self.marginal_threshold_ = conformal_quantile(scores, self.alpha)
        self.n_groups_ = G
        self.n_classes_ = K
        self.n_calibration_ = n
        self.n_ungrouped_ = int(n - np.count_nonzero(member.any(axis=1)))
        return self

    # --------------------------------------------------------------- prediction
    def _check_fitted(self) -> None:
        if not hasattr(self, "thresholds_"):
            msg = "this GroupConditionalConformal is not fitted yet: call fit(P_cal, y_cal, groups) first"
            raise NotFittedError(msg)

    def row_thresholds(self, groups: Any) -> FloatArray:
        """Each row's threshold ``T(x) = max_{g ∋ x} q_g`` (``q̂`` for rows in no group), shape ``(m,)``.

        Parameters
        ----------
        groups : array-like of bool, shape (m, G)
            Group membership of the rows, the same ``G`` groups, in the same order, as at fit.
        """
        self._check_fitted()
        member = _check_groups(groups, "groups", n_groups=self.n_groups_)
        return self._row_thresholds(member)

    def _row_thresholds(self, member: BoolArray) -> FloatArray:
        m, G = member.shape
        out = np.empty(m, dtype=np.float64)
        step = max(1, _CHUNK_ENTRIES // max(G, 1))
        masked = np.empty((min(step, m), G), dtype=np.float64)
        for start in range(0, m, step):
            block = member[start : start + step]
            values = masked[: block.shape[0]]
            values.fill(-math.inf)
            np.copyto(values, np.broadcast_to(self.thresholds_, values.shape), where=block)
            out[start : start + step] = values.max(axis=1)
        out[~member.any(axis=1)] = self.marginal_threshold_
        return out

    def predict_sets(self, P: Any, groups: Any) -> BoolArray:
        """Prediction sets as a boolean matrix, the top class always included (no empty sets).

        ``out[i, c]`` is True when class ``c`` is in row ``i``'s set
        ``{c : s(x_i, c) ≤ T(x_i)} ∪ {ŷ(x_i)}``.

        Parameters
        ----------
        P : array-like of shape (m, K)
            Model probabilities.
        groups : array-like of bool, shape (m, G)
            Group membership of the rows, the same ``G`` groups, in the same order, as at fit.

        Returns
        -------
        ndarray of shape (m, K), bool
        """
        self._check_fitted()
        Pv = check_probabilities(P, "P", n_classes=self.n_classes_, copy=False)
        member = _check_groups(groups, "groups", n_rows=Pv.shape[0], rows_of="P", n_groups=self.n_groups_)
        thresholds = self._row_thresholds(member)
        sets = prediction_sets(Pv, self.score, thresholds[:, None])
        # One threshold per row and scores non-decreasing along the probability ranking: the
        # top class is in every non-empty set already, only the empty rows need it.
        empty = np.flatnonzero(~sets.any(axis=1))
        if empty.size:
            sets[empty, row_argmax(Pv[empty])] = True
        return sets

    # ------------------------------------------------------------------ snapshots
    def state(self) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
        """The fitted calibrator as plain arrays and a JSON-able dict (for snapshots; no pickle).

        Returns
        -------
        arrays : dict of str to ndarray
            ``thresholds`` (``q_g``, ``inf`` kept) and ``group_sizes``.
        info : dict
            Options and the fitted scalars (``marginal_threshold`` None for ``+inf``);
            ``json.dumps`` accepts it.
        """
        self._check_fitted()
        marginal = self.marginal_threshold_
        info: dict[str, Any] = {
            "kind": "GroupConditionalConformal",
            "version": STATE_VERSION,
            "params": {
                "score": self.score,
                "alpha": self.alpha,
                "min_group_rows": self.min_group_rows,
                "groups_from": None if self.groups_from is None else list(self.groups_from),
            },
            "marginal_threshold": None if math.isinf(marginal) else marginal,
            "n_classes": self.n_classes_,
            "n_calibration": self.n_calibration_,
            "n_ungrouped": self.n_ungrouped_,
        }
        return {"thresholds": self.thresholds_.copy(), "group_sizes": self.group_sizes_.copy()}, info

    @classmethod
    def from_state(cls, arrays: dict[str, Any], info: dict[str, Any]) -> GroupConditionalConformal:
        """Rebuild a fitted calibrator from :meth:`state`'s output.

        Raises
        ------
        ValueError
            ``info`` is not a state of this class and version, or ``arrays`` lack what it needs.
        """
        if info.get("kind") != "GroupConditionalConformal" or info.get("version") != STATE_VERSION:
            msg = (
                f"not a GroupConditionalConformal state of version {STATE_VERSION}: "
                f"kind={info.get('kind')!r}, version={info.get('version')!r}"
            )
            raise ValueError(msg)
        missing = {"thresholds", "group_sizes"} - set(arrays)
        if missing:
            msg = f"state arrays are missing {sorted(missing)}"
            raise ValueError(msg)
        thresholds = np.asarray(arrays["thresholds"], dtype=np.float64)
        sizes = np.asarray(arrays["group_sizes"]).astype(np.intp)
        if thresholds.ndim != 1 or thresholds.shape != sizes.shape or thresholds.shape[0] == 0:
            msg = "state arrays 'thresholds' and 'group_sizes' must be 1-D, non-empty and of one length"
            raise ValueError(msg)
        obj = cls(**info["params"])
        marginal = info["marginal_threshold"]
        obj.thresholds_ = thresholds
        obj.group_sizes_ = sizes
        obj.marginal_threshold_ = math.inf if marginal is None else float(marginal)
        obj.n_groups_ = int(thresholds.shape[0])
        obj.n_classes_ = int(info["n_classes"])
        obj.n_calibration_ = int(info["n_calibration"])
        obj.n_ungrouped_ = int(info["n_ungrouped"])
        return obj


def _check_groups(
    groups: Any,
    name: str,
    *,
    n_rows: int | None = None,
    rows_of: str = "P",
    n_groups: int | None = None,
) -> BoolArray:
    """``groups`` as a C-ordered boolean ``(rows, G)`` array; errors name the argument.

    Raises
    ------
    TypeError
        A dtype other than bool (0/1 integers included: pass ``mask.astype(bool)``).
    ValueError
        Not 2-D, no group, or a row or group count other than expected.
    """
    if hasattr(groups, "to_numpy"):  # polars or pandas frames of boolean columns
        groups = groups.to_numpy()
    arr = np.asarray(groups)
    if arr.dtype != np.bool_:
        msg = (
            f"{name} must be a boolean array of shape (rows, groups), True where a row is in a"
            f" group; got dtype {arr.dtype}"
        )
        raise TypeError(msg)
    if arr.ndim != 2:
        msg = f"{name} must be a 2-D boolean array of shape (rows, groups); got shape {arr.shape}"
        if arr.ndim == 1:
            msg += " (one group: pass groups[:, None])"
        raise ValueError(msg)
    if arr.shape[1] == 0:
        msg = f"{name} must have at least one group (column); got shape {arr.shape}"
        raise ValueError(msg)
    if n_rows is not None and arr.shape[0] != n_rows:
        msg = f"{name} has {arr.shape[0]} rows but {rows_of} has {n_rows}"
        raise ValueError(msg)
    if n_groups is not None and arr.shape[1] != n_groups:
        msg = f"{name} has {arr.shape[1]} groups (columns) but the calibrator was fitted on {n_groups}"
        raise ValueError(msg)
    out: BoolArray = np.ascontiguousarray(arr)
    return out
