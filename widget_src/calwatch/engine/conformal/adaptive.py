"""Adaptive conformal inference (Gibbs & Candès 2021; SHIFT.md §2).

:class:`Adaptive` wraps a set-valued calibrator and moves the level at which its sets are
taken, ``α_t``, as labels arrive: ``α_{t+1} = α_t + γ (α − err_t)`` with
``err_t = 1{y_t ∉ C_t(α_t)}``. A miss lowers the level (bigger sets), a hit raises it a little.

The recursion telescopes, whatever the data: ``α_{T+1} − α_1 = γ Σ_t (α − err_t)``, so the
realised miss rate after ``T`` labelled rows is *exactly*

    mean(err) − α = (α_1 − α_{T+1}) / (γ T).                                   (identity)

Gibbs & Candès bound the right-hand side by keeping ``α_t`` in ``[−γ, 1 + γ]``: at ``α_t ≤ 0``
the set is every class (no miss, ``α_t`` rises) and at ``α_t ≥ 1`` the set is empty (a miss,
``α_t`` falls), which gives ``|mean(err) − α| ≤ (max(α_1, 1 − α_1) + γ) / (γ T)`` for every
sequence, exchangeable or not.

Variants (which rows share one level):

- *Row by row* (the paper's algorithm): ``update(P, y)``. Row ``t`` of the batch gets its own
  level ``α_t``, the level after rows ``1..t−1``; its set is the calibrator's set at ``α_t``.
  No per-row set is built: the calibrator reports each row's *cover limit* ``a_t``, the level
  below which its label is in the set (sets shrink as ``α`` grows), so ``err_t = 1{α_t ≥ a_t}``
  and the update is a scalar loop over ``m`` floats after one vectorised pass.
  Bound as above, with ``B = 1``.
- *Batched*: ``update(sets, y)`` with the boolean sets that :meth:`Adaptive.predict_sets`
  returned for the batch, all taken at the one level ``α_t`` current when the batch was
  predicted (what a stream monitor shows before the labels arrive). ``α`` is still updated row
  by row in arrival order, but within a batch of ``B`` rows it can drift by ``γB`` before the
  sets react, so ``α_t ∈ [−γB, 1 + γB]`` and the bound becomes
  ``|mean(err) − α| ≤ (max(α_1, 1 − α_1) + γB) / (γT)`` (:meth:`Adaptive.long_run_bound`).

Corrected labels (:meth:`Adaptive.correct`, batched variant): a row's label may be replaced
after it was fed back. Each row's step ``γ (α − err_t)`` enters ``α_t`` as a plain sum and
nothing clips ``α_t``, so replacing its label adds ``γ (err_old − err_new)``, with ``err``
judged against the set the row was shown. When the correction comes before the next sets are
taken, ``α_t`` is that of a stream that only received the final labels (equal up to float
rounding), and the identity holds with the final labels. A correction after the next sets
moves ``α_t`` by the same amount, but those sets were taken at the uncorrected level, so the
trajectories differ from then on (the identity still holds; the bound needs ``B`` raised by
the corrected rows, see :meth:`Adaptive.correct`). The row-by-row variant has no correction:
its ``err_t`` depends on each row's own level ``α_t``, which a correction would move for every
later row.

Sets at the edges (our choice, following the paper): ``α_t ≤ 0`` (in fact any
``α_t < 1/(n+1)``) gives every class. ``α_t ≥ 1`` gives the empty set when the calibrator
allows empty sets (``allow_empty=True``), otherwise just the top class ``ŷ`` (calwatch's
convention, ALGORITHMS.md §0). With the top class always in, a model whose top-1 error is
below ``α`` cannot miss often enough: ``α_t`` then climbs past ``1 + γ`` and the realised
miss rate stays below ``α``. The bound then holds on one side only, the side coverage
needs: ``α_t ≥ −γB`` still, so ``mean(err) ≤ α + (α_1 + γB)/(γT)`` — never less coverage than
promised beyond that slack, possibly more. :attr:`Adaptive.alpha_range_` says whether
``α_t`` stayed inside ``[−γB, 1 + γB]``.

Which calibrators: any object with ``sets_at_alpha(P, alpha) -> bool (m, K)`` (the
:class:`LevelSets` protocol; add ``cover_limits(P, y)`` for the fast row-by-row update), or a
:class:`~calwatch.engine.conformal.classifier.SplitConformalClassifier` (marginal or ``mondrian="label"``),
for which :class:`ConformalLevels` recomputes the conformal quantile ``s_(⌈(n+1)(1−α_t)⌉)`` of
its calibration scores at any ``α_t`` without refitting. Those scores are recomputed through the
calibrator's public ``label_scores`` on the calibration rows handed to :meth:`Adaptive.fit`
(randomised APS draws fresh ``u``: a new, equally valid draw of the randomised scores).
"""

from __future__ import annotations

import math
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.engine._validation import check_alpha, check_labels, check_probabilities
from calwatch.engine.conformal.classifier import SplitConformalClassifier
from calwatch.engine.conformal.quantiles import conformal_rank
from calwatch.engine.errors import NotFittedError

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.intp]

#: Default step size ``γ`` (Gibbs & Candès use 0.005 in their experiments).
DEFAULT_GAMMA = 0.005
# conformal_rank subtracts this from (n+1)(1−α) before ⌈·⌉; cover limits use the same slack so
# that "α < a_t" and "⌈(n+1)(1−α)⌉ ≥ rank" agree at the round levels (α = 0.1, n = 99).
_RANK_SLACK = 1e-9


@runtime_checkable
class LevelSets(Protocol):
    """A fitted set-valued calibrator that can give its sets at any level without refitting.

    ``sets_at_alpha(P, alpha)`` returns a boolean ``(m, K)`` matrix, ``out[i, c]`` True when
    class ``c`` is in row ``i``'s set at miscoverage ``alpha``; ``alpha`` may lie outside
    ``(0, 1)`` (see the module docstring). Sets must shrink as ``alpha`` grows.
    """

    def sets_at_alpha(self, P: Any, alpha: float) -> BoolArray:
        """Prediction sets at miscoverage level ``alpha``."""
        ...


@runtime_checkable
class CoverLimits(Protocol):
    """Optional: the level below which each row's label is in its set (for row-by-row ACI)."""

    def cover_limits(self, P: Any, y: Any) -> FloatArray:
        """``a_i`` with ``y_i ∈ C(x_i; α) ⟺ α < a_i``; ``inf`` when the label is always in."""
        ...


def _order_statistic(sorted_scores: FloatArray, alpha: float) -> float:
    """``s_(k)``, ``k = ⌈(n+1)(1−α)⌉``, for any real ``α``: ``+inf`` if ``k > n``, ``−inf`` if ``k < 1``."""
    n = int(sorted_scores.shape[0])
    k = conformal_rank(n, alpha)
    if k > n:
        return math.inf
    if k < 1:
        return -math.inf
    return float(sorted_scores[k - 1])


class ConformalLevels:
    """A fitted :class:`SplitConformalClassifier`'s sets at any level ``α``, without refitting.

    Holds the sorted calibration scores (per true class for ``mondrian="label"``) and takes
    their conformal quantile ``s_(⌈(n+1)(1−α)⌉)`` at whatever level is asked. Build it with
    :meth:`from_calibrator`. At the calibrator's own ``alpha`` (deterministic scores, no RAPS
    tuning) the thresholds equal its ``quantiles_``.

    Attributes
    ----------
    calibrator : SplitConformalClassifier
        The fitted calibrator whose scores and set rule are used.
    sorted_scores : dict
        ``{None: scores}`` (marginal) or ``{class: scores}`` (by label), each sorted ascending.
    allow_empty : bool
        The calibrator's ``allow_empty``: at ``α ≥ 1`` the set is empty, else the top class.

    Examples
    --------
    Four calibration rows with LAC scores ``.3, .6, .5, .4`` (sorted ``.3 .4 .5 .6``, n = 4):
    ``α = 0.4`` takes ``s_(⌈5·0.6⌉) = s_(3) = .5``; ``α = 0.6`` takes ``s_(2) = .4``.

    >>> P = np.array([[0.7, 0.2, 0.1], [0.5, 0.4, 0.1], [0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
    >>> y = np.array([0, 1, 2, 0])
    >>> cal = SplitConformalClassifier(score="lac", alpha=0.4).fit(P, y)
    >>> levels = ConformalLevels.from_calibrator(cal, P, y)
    >>> round(levels.threshold(0.4), 12), round(levels.threshold(0.6), 12), levels.threshold(0.1)
    (0.5, 0.4, inf)
    """

    def __init__(
        self,
        calibrator: SplitConformalClassifier,
        sorted_scores: dict[Any, FloatArray],
        *,
        allow_empty: bool,
    ) -> None:
        self.calibrator = calibrator
        self.sorted_scores = sorted_scores
        self.allow_empty = bool(allow_empty)

    @classmethod
    def from_calibrator(cls, calibrator: SplitConformalClassifier, P_cal: Any, y_cal: Any) -> ConformalLevels:
        """Levels of a fitted calibrator, from the calibration rows it was fitted on.

        Raises
        ------
        NotFittedError
            The calibrator is not fitted.
        ValueError
            Mondrian by user category (``mondrian="category"``), which needs categories at
            prediction time and is not supported here.
        """
        if not hasattr(calibrator, "quantiles_"):
            msg = "the calibrator is not fitted yet: call fit(P_cal, y_cal) first"
            raise NotFittedError(msg)
        if calibrator.mode_ == "category":
            msg = "ConformalLevels supports marginal and mondrian='label' calibrators, not categories"
            raise ValueError(msg)
        scores = calibrator.label_scores(P_cal, y_cal)
        if calibrator.mode_ == "marginal":
            sorted_scores: dict[Any, FloatArray] = {None: np.sort(scores)}
        else:
            y = check_labels(y_cal, calibrator.n_classes_, "y_cal", n_rows=scores.shape[0])
            sorted_scores = {c: np.sort(scores[y == c]) for c in range(calibrator.n_classes_)}
        return cls(calibrator, sorted_scores, allow_empty=calibrator.allow_empty)

    def _guarded(self, key: Any) -> bool:
        """A Mondrian class with fewer than ``kappa`` (or no) calibration rows: always every class."""
        count = self.sorted_scores[key].shape[0]
        return key is not None and (count == 0 or count < self.calibrator.kappa)

    def threshold(self, alpha: float) -> float | FloatArray:
        """The conformal threshold at level ``alpha``: a float, or one per class (by label)."""
        if None in self.sorted_scores:
            return _order_statistic(self.sorted_scores[None], alpha)
        return np.array(
            [
                math.inf if self._guarded(c) else _order_statistic(self.sorted_scores[c], alpha)
                for c in sorted(self.sorted_scores)
            ]
        )

    def sets_at_alpha(self, P: Any, alpha: float, *, ids: Any = None) -> BoolArray:
        """Sets ``{c : s(x, c) ≤ q̂(α)}``, plus the top class unless ``allow_empty``.

        ``ids``: the rows' ids, so a randomised calibrator draws each row's ``u`` from its id
        (the same ``u`` as the row's own set at the calibrator's level, and the same on every
        call); without them it draws from its seeded stream.
        """
        Pv = check_probabilities(P, "P", n_classes=self.calibrator.n_classes_, copy=False)
        thresholds = np.atleast_1d(np.asarray(self.threshold(alpha), dtype=np.float64))
        sets = self.calibrator.sets_within(Pv, thresholds[None, :], ids=ids, _validated=True)
        if not self.allow_empty:
            sets[np.arange(Pv.shape[0]), Pv.argmax(axis=1)] = True
        return sets

    def cover_limits(self, P: Any, y: Any) -> FloatArray:
        """Each row's cover limit ``a``: its label is in the set at ``α`` exactly when ``α < a``.

        With ``r`` the 1-based rank of the first calibration score ``≥ s(x, y)`` among ``n``,
        the label is in at ``α`` iff ``⌈(n+1)(1−α)⌉ ≥ r``, i.e. ``α < 1 − (r − 1)/(n + 1)``
        (``r = n + 1``, a score above all: only the full sets at ``α < 1/(n+1)`` hold it).
        ``inf`` for the top class (unless ``allow_empty``) and for a guarded Mondrian class.
        """
        Pv = check_probabilities(P, "P", n_classes=self.calibrator.n_classes_, copy=False)
        yv = check_labels(y, self.calibrator.n_classes_, "y", n_rows=Pv.shape[0])
        s = self.calibrator.label_scores(Pv, yv)
        limits = np.empty(s.shape[0], dtype=np.float64)
        if None in self.sorted_scores:
            groups: list[tuple[Any, BoolArray]] = [(None, np.ones(s.shape[0], dtype=bool))]
        else:
            groups = [(c, yv == c) for c in sorted(self.sorted_scores)]
        for key, rows in groups:
            ref = self.sorted_scores[key]
            n = ref.shape[0]
            if self._guarded(key) or n == 0:
                limits[rows] = math.inf
                continue
            rank = np.searchsorted(ref, s[rows], side="left") + 1
            limits[rows] = 1.0 - (rank - 1 + _RANK_SLACK) / (n + 1.0)
        if not self.allow_empty:
            limits[Pv.argmax(axis=1) == yv] = math.inf
        return limits


class Adaptive:
    """Adaptive conformal inference around a set-valued calibrator (Gibbs & Candès 2021).

    Parameters
    ----------
    calibrator : SplitConformalClassifier or LevelSets
        The calibrator to wrap (unfitted or fitted; :meth:`fit` fits it).
    gamma : float
        Step size ``γ > 0`` of ``α_{t+1} = α_t + γ (α − err_t)``. Larger reacts faster and
        lets the level swing more.
    alpha : float, optional
        Target miscoverage; default: the calibrator's ``alpha``.
    alpha_start : float, optional
        The first level ``α_1``; default ``alpha``.

    Attributes
    ----------
    alpha : float
        Target miscoverage ``α``.
    target_coverage : float
        ``1 − α``.
    alpha_t_ : float
        The current level: the next sets are taken at it.
    levels_ : LevelSets
        What gives the sets at any level (the calibrator itself, or its :class:`ConformalLevels`).
    n_updates_ : int
        Labelled rows fed back so far (``T``); a corrected label (:meth:`correct`) is not a new
        row.
    max_batch_rows_ : int
        Largest number of rows that shared one level (1 when only row-by-row updates ran).
    alpha_range_ : tuple of float
        Smallest and largest level reached, ``α_1`` included.

    Examples
    --------
    One ACI step by hand: ``α = 0.1``, ``γ = 0.05``, ``α_1 = 0.1``. A miss gives
    ``α_2 = 0.1 + 0.05·(0.1 − 1) = 0.055``; then a hit gives ``0.055 + 0.05·0.1 = 0.06``.

    >>> P = np.array([[0.7, 0.2, 0.1], [0.5, 0.4, 0.1], [0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
    >>> aci = Adaptive(SplitConformalClassifier(alpha=0.1), gamma=0.05).fit(P, np.array([0, 1, 2, 0]))
    >>> sets = np.array([[True, False, False], [True, False, False]])
    >>> round(aci.update(sets, np.array([1, 0])).alpha_t_, 12)
    0.06
    """

    def __init__(
        self,
        calibrator: Any,
        gamma: float = DEFAULT_GAMMA,
        *,
        alpha: float | None = None,
        alpha_start: float | None = None,
    ) -> None:
        if not (isinstance(gamma, int | float) and math.isfinite(gamma) and gamma > 0):
            msg = f"gamma must be a finite number > 0; got {gamma!r}"
            raise ValueError(msg)
        if alpha is None:
            if not hasattr(calibrator, "alpha"):
                msg = "pass alpha=: the calibrator has no alpha attribute to take the target from"
                raise ValueError(msg)
            alpha = float(calibrator.alpha)
        if alpha_start is not None and not math.isfinite(alpha_start):
            msg = f"alpha_start must be a finite number; got {alpha_start!r}"
            raise ValueError(msg)
        self.calibrator = calibrator
        self.gamma = float(gamma)
        self.alpha = check_alpha(alpha)
        self.alpha_start = None if alpha_start is None else float(alpha_start)

    def __repr__(self) -> str:
        return f"Adaptive({self.calibrator!r}, gamma={self.gamma!r})"

    @property
    def target_coverage(self) -> float:
        """The coverage ``1 − α`` that the long-run miss rate is steered to."""
        return 1.0 - self.alpha

    # ------------------------------------------------------------------ fitting
    def fit(self, P_cal: Any, y_cal: Any) -> Adaptive:
        """Fit the wrapped calibrator on the calibration rows and reset ``α_t`` to ``α_1``.

        Returns
        -------
        Adaptive
            ``self``, fitted.
        """
        self.calibrator.fit(P_cal, y_cal)
        if isinstance(self.calibrator, SplitConformalClassifier):
            self.levels_: LevelSets = ConformalLevels.from_calibrator(self.calibrator, P_cal, y_cal)
        elif isinstance(self.calibrator, LevelSets):
            self.levels_ = self.calibrator
        else:
            msg = (
                f"{type(self.calibrator).__name__} cannot give sets at a chosen level: wrap a "
                "SplitConformalClassifier or an object with sets_at_alpha(P, alpha)"
            )
            raise TypeError(msg)
        self.alpha_1_ = self.alpha if self.alpha_start is None else self.alpha_start
        self.alpha_t_ = self.alpha_1_
        self.n_updates_ = 0
        self.max_batch_rows_ = 1
        self.alpha_range_ = (self.alpha_1_, self.alpha_1_)
        self._n_missed = 0
        self._levels: list[FloatArray] = []
        self._after: list[FloatArray] = []
        self._covered: list[BoolArray] = []
        self._batches: list[IntArray] = []
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "levels_"):
            msg = "this Adaptive is not fitted yet: call fit(P_cal, y_cal) first"
            raise NotFittedError(msg)

    # --------------------------------------------------------------- prediction
    def predict_sets(self, P: Any) -> BoolArray:
        """Prediction sets of every row at the current level ``α_t`` (shape ``(m, K)``)."""
        self._check_fitted()
        return self.levels_.sets_at_alpha(P, self.alpha_t_)

    # ------------------------------------------------------------------ updates
    def update(self, sets_or_P: Any, y: Any) -> Adaptive:
        """Feed back labels in arrival order and move ``α_t``.

        Parameters
        ----------
        sets_or_P : bool array of shape (m, K), or probabilities of shape (m, K)
            Boolean: the sets :meth:`predict_sets` returned for these rows (batched variant,
            every row at the level current when they were predicted). Float: the rows' model
            probabilities (row-by-row variant: row ``t`` judged at its own ``α_t``).
        y : array-like of shape (m,)
            True class indices, in the order the labels arrived.

        Returns
        -------
        Adaptive
            ``self``.
        """
        self._check_fitted()
        arr = np.asarray(sets_or_P)
        if arr.dtype == np.bool_:
            if arr.ndim != 2:
                msg = f"sets must be a 2-D boolean matrix (rows, classes); got shape {arr.shape}"
                raise ValueError(msg)
            yv = check_labels(y, arr.shape[1], "y", n_rows=arr.shape[0])
            covered = np.asarray(arr[np.arange(arr.shape[0]), yv], dtype=bool)
            levels = np.full(covered.shape[0], self.alpha_t_)
            after = self.alpha_t_ + self.gamma * np.cumsum(self.alpha - (~covered).astype(np.float64))
            self.max_batch_rows_ = max(self.max_batch_rows_, int(covered.shape[0]))
        else:
            levels, after, covered = self._row_by_row(arr, y)
        if covered.shape[0] == 0:
            return self
        self.alpha_t_ = float(after[-1])
        lo = min(self.alpha_range_[0], float(after.min()))
        hi = max(self.alpha_range_[1], float(after.max()))
        self.alpha_range_ = (lo, hi)
        self._levels.append(levels)
        self._after.append(after)
        self._covered.append(covered)
        self._batches.append(np.full(covered.shape[0], len(self._batches), dtype=np.intp))
        self.n_updates_ += int(covered.shape[0])
        self._n_missed += int(covered.shape[0] - np.count_nonzero(covered))
        return self

    def correct(self, sets: Any, y_old: Any, y_new: Any) -> Adaptive:
        """Replace labels already fed back (batched variant) and move ``α_t`` as the new ones would have.

        A row fed back with label ``y_old`` moved the level by ``γ (α − err_old)``; had its label
        been ``y_new`` it would have moved it by ``γ (α − err_new)``, with
        ``err = 1{y ∉ C}`` for the set ``C`` the row was shown. The recursion is a plain sum
        (nothing clips ``α_t``), so replacing the labels adds the difference:

            α_t ← α_t + γ Σ_i (err_old,i − err_new,i).

        The realised miss count changes by ``Σ_i (err_new,i − err_old,i)``; ``T``
        (:attr:`n_updates_`) does not (a correction is not a new observation). The identity
        ``α_{T+1} − α_1 = γ Σ_t (α − err_t)`` then holds with each row's *final* label.

        When the correction comes before the next sets are taken (before the next
        :meth:`predict_sets`), no set was built at the wrong level, so ``α_t`` equals that of a
        stream that only ever received the final labels (up to float rounding: the same terms
        summed in another order). Later, it still moves ``α_t`` by exactly that difference, but
        the sets taken in between were built at the uncorrected level, so the two streams'
        levels differ from then on. Such a late correction of ``c`` rows is a jump the sets did
        not react to, like a batch of ``c`` rows: :meth:`long_run_bound` then needs
        ``batch_rows = B + c`` (the identity is exact either way).

        Parameters
        ----------
        sets : bool array of shape (m, K)
            The sets the rows were shown when they were predicted (as given to :meth:`update`).
        y_old : array-like of shape (m,)
            The labels the rows were fed back with.
        y_new : array-like of shape (m,)
            Their corrected labels. A row whose label is unchanged, or whose set holds (or
            misses) both, moves nothing.

        Returns
        -------
        Adaptive
            ``self``.

        Examples
        --------
        ``α = 0.1``, ``γ = 0.05``: a row fed back as a miss (``α_2 = 0.055``), then corrected to
        a label in its set, gives ``0.055 + 0.05 · (1 − 0) = 0.105``, the level of one hit.

        >>> P = np.array([[0.7, 0.2, 0.1], [0.5, 0.4, 0.1], [0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
        >>> aci = Adaptive(SplitConformalClassifier(alpha=0.1), gamma=0.05).fit(P, np.array([0, 1, 2, 0]))
        >>> sets = np.array([[True, False, False]])
        >>> round(aci.update(sets, np.array([1])).alpha_t_, 12)
        0.055
        >>> round(aci.correct(sets, np.array([1]), np.array([0])).alpha_t_, 12)
        0.105
        """
        self._check_fitted()
        arr = np.asarray(sets)
        if arr.dtype != np.bool_ or arr.ndim != 2:
            msg = (
                "sets must be the 2-D boolean matrix (rows, classes) the rows were shown; "
                f"got dtype {arr.dtype}, shape {arr.shape}"
            )
            raise ValueError(msg)
        old = check_labels(y_old, arr.shape[1], "y_old", n_rows=arr.shape[0])
        new = check_labels(y_new, arr.shape[1], "y_new", n_rows=arr.shape[0])
        rows = np.arange(arr.shape[0])
        # Integer counts first, one float step: Σ (err_old − err_new) = misses_old − misses_new.
        missed_old = int(arr.shape[0] - np.count_nonzero(arr[rows, old]))
        missed_new = int(arr.shape[0] - np.count_nonzero(arr[rows, new]))
        if missed_old == missed_new:
            return self
        level = self.alpha_t_ + self.gamma * (missed_old - missed_new)
        self.alpha_t_ = level
        self.alpha_range_ = (min(self.alpha_range_[0], level), max(self.alpha_range_[1], level))
        self._n_missed += missed_new - missed_old
        return self

    def _row_by_row(self, P: Any, y: Any) -> tuple[FloatArray, FloatArray, BoolArray]:
        """Gibbs & Candès's recursion with each row at its own level."""
        if isinstance(self.levels_, CoverLimits):
            limits: list[float] = self.levels_.cover_limits(P, y).tolist()
        else:  # one row at a time through sets_at_alpha: correct, but slow
            return self._row_by_row_slow(P, y)
        alpha, gamma, level = self.alpha, self.gamma, self.alpha_t_
        levels = [0.0] * len(limits)
        covered = [False] * len(limits)
        for t, limit in enumerate(limits):
            levels[t] = level
            hit = level < limit
            covered[t] = hit
            level += gamma * (alpha - (0.0 if hit else 1.0))
        levels_arr = np.asarray(levels, dtype=np.float64)
        covered_arr = np.asarray(covered, dtype=bool)
        after = np.empty_like(levels_arr)
        after[:-1] = levels_arr[1:]
        if after.shape[0]:
            after[-1] = level
        return levels_arr, after, covered_arr

    def _row_by_row_slow(self, P: Any, y: Any) -> tuple[FloatArray, FloatArray, BoolArray]:
        Pv = check_probabilities(P, "P")
        yv = check_labels(y, Pv.shape[1], "y", n_rows=Pv.shape[0])
        level = self.alpha_t_
        levels = np.empty(Pv.shape[0])
        after = np.empty(Pv.shape[0])
        covered = np.empty(Pv.shape[0], dtype=bool)
        for t in range(Pv.shape[0]):
            levels[t] = level
            covered[t] = bool(self.levels_.sets_at_alpha(Pv[t : t + 1], level)[0, yv[t]])
            level += self.gamma * (self.alpha - (0.0 if covered[t] else 1.0))
            after[t] = level
        return levels, after, covered

    # ----------------------------------------------------------------- reporting
    @property
    def coverage_(self) -> float:
        """Realised coverage of all rows fed back so far (``nan`` before any)."""
        self._check_fitted()
        if self.n_updates_ == 0:
            return math.nan
        return 1.0 - self._n_missed / self.n_updates_

    def long_run_gap(self) -> float:
        """``mean(err) − α`` so far; equals ``(α_1 − α_{T+1}) / (γT)`` exactly (the identity)."""
        self._check_fitted()
        if self.n_updates_ == 0:
            return math.nan
        return self._n_missed / self.n_updates_ - self.alpha

    def long_run_bound(self, batch_rows: int | None = None) -> float:
        """``(max(α_1, 1 − α_1) + γB) / (γT)``, the bound on ``|mean(err) − α|`` after ``T`` rows.

        ``B`` (``batch_rows``, default :attr:`max_batch_rows_`) is the most rows that shared
        one level: 1 for the row-by-row variant, where this is Gibbs & Candès's bound. It holds
        for every sequence when ``α_t`` stays in ``[−γB, 1 + γB]`` (always true at the lower
        end; at the upper end when ``α ≥ 1`` gives empty sets, see the module docstring).
        Corrections (:meth:`correct`) that come before the next sets are taken leave it as it
        is; pass ``batch_rows = B + c`` when ``c`` rows were corrected after that.
        """
        self._check_fitted()
        rows = self.max_batch_rows_ if batch_rows is None else int(batch_rows)
        if self.n_updates_ == 0:
            return math.inf
        a1 = self.alpha_1_
        return (max(a1, 1.0 - a1) + self.gamma * rows) / (self.gamma * self.n_updates_)

    def history(self) -> pl.DataFrame:
        """One row per labelled row fed back, in arrival order.

        Columns: ``row`` (0-based arrival index), ``update`` (which :meth:`update` call),
        ``alpha_t`` (the level the row's set was taken at), ``alpha_next`` (the level after its
        update), ``covered`` and ``coverage`` (realised coverage of rows ``0..row``). The rows are
        as they were fed back: a later :meth:`correct` moves :attr:`alpha_t_` and the miss count
        (:attr:`coverage_`, :meth:`long_run_gap`), not these rows.
        """
        self._check_fitted()
        if not self._covered:
            return pl.DataFrame(
                schema={
                    "row": pl.Int64,
                    "update": pl.Int64,
                    "alpha_t": pl.Float64,
                    "alpha_next": pl.Float64,
                    "covered": pl.Boolean,
                    "coverage": pl.Float64,
                }
            )
        covered = np.concatenate(self._covered)
        running = np.cumsum(covered) / np.arange(1, covered.shape[0] + 1)
        return pl.DataFrame(
            {
                "row": np.arange(covered.shape[0], dtype=np.int64),
                "update": np.concatenate(self._batches).astype(np.int64),
                "alpha_t": np.concatenate(self._levels),
                "alpha_next": np.concatenate(self._after),
                "covered": covered,
                "coverage": running,
            }
        )


__all__ = ["DEFAULT_GAMMA", "Adaptive", "ConformalLevels", "CoverLimits", "LevelSets"]
