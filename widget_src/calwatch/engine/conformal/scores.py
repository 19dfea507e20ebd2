"""Nonconformity scores for classification (ALGORITHMS.md §1): LAC, APS and RAPS.

Larger scores mean less conforming. Every function here is vectorised over rows and works on
float64 probability matrices ``P`` of shape ``(m, K)``. Ties in ``P`` are broken by class index
(the lower index ranks first), the same way everywhere, so a class's score is computed
identically at calibration and at prediction time.

Many classes (``K > PARTIAL_MIN_CLASSES``): APS/RAPS prediction sets and label scores are
computed from each row's top block of ``T`` classes (``np.argpartition``, then a sort of the
block alone) instead of a sort of the whole row, and are bit for bit those of the full sort
(:func:`prediction_sets`, :func:`label_scores`). Why that is exact:

* the scores of the first ``T`` ranks use the same floating-point operations in both paths
  (:func:`_rank_order_scores`: a sequential running sum, then elementwise terms), so the
  block's scores are the full sort's first ``T`` scores, bit for bit;
* along the rank order every score, deterministic or randomised, APS or RAPS, never decreases
  *in floating point*: the running sum ``c_j = fl(c_{j−1} + p_j)`` never decreases (``p_j ≥
  0``), the randomised term ``d_j = fl(fl(1 − u)·p_j)`` never increases (the ranks sort ``p``
  down, ``u`` is the row's), the penalty ``fl(λ·max(0, j + 1 − k_reg))`` never decreases, and
  rounding is monotone, so ``fl(fl(c_j − d_j) + e_j)`` is non-decreasing. So with one
  threshold per row the set is a prefix of the ranks, and the block's last score ``> t``
  proves that no class past the block is in (per-class thresholds: ``> max_c t_c``);
* the partition picks the top block arbitrarily among classes tied with the ``(T+1)``-th
  largest probability; those positions hold the same *values* as in the full sort (so the same
  scores) but maybe other *classes*, so a row whose set may reach them is not decided;
* rows not decided are redone with a block 8 times wider, then by the full sort.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

ScoreName = Literal["lac", "aps", "raps"]
SCORE_NAMES: tuple[ScoreName, ...] = ("lac", "aps", "raps")

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

#: APS/RAPS sets and label scores use the partial order above this many classes; at or below
#: it a full sort of the (short) rows is as fast.
PARTIAL_MIN_CLASSES = 64
#: Width of the first top block. A 90% set of a useful model rarely reaches past its first
#: few classes; a row whose answer may lie past its block is redone with a block
#: ``_BLOCK_GROWTH`` times wider, and by a full sort once the block would pass half the row.
FIRST_BLOCK = 32
#: Two-class APS scores of this many rows or more take the compiled pass (a prediction log's
#: chunks); fewer stay in numpy, so a small batch never waits for numba's import.
COMPILED_FROM = 1 << 14
_BLOCK_GROWTH = 8
#: The partial path works through the rows in chunks of about this many matrix entries
#: (bounded memory: ``np.argpartition`` returns an index per entry).
_CHUNK_ENTRIES = 1 << 20


def row_argmax(P: FloatArray) -> IntArray:
    """``P.argmax(axis=1)`` (the first of tied maxima), ~10x faster for two classes.

    numpy reduces each short row with a call of its own; for ``K = 2`` one comparison of the
    two columns gives the same index (class 1 only when strictly larger).
    """
    if P.ndim == 2 and P.shape[1] == 2:
        return np.greater(P[:, 1], P[:, 0]).view(np.uint8).astype(np.intp)
    top: IntArray = P.argmax(axis=1)
    return top


def descending_order(P: FloatArray) -> IntArray:
    """Class indices of each row sorted by decreasing probability, ties by lower index first."""
    return _descending_order(P)[0]


def _descending_order(P: FloatArray) -> tuple[IntArray, IntArray, FloatArray]:
    """``descending_order(P)``, its flat indices into ``P.ravel()``, and the sorted rows.

    Same result as ``np.argsort(-P, axis=1, kind="stable")`` at half the cost: the default
    (unstable, SIMD) sort, then a stable re-sort of the rows holding exact ties, the only rows
    where the two can differ.
    """
    m, K = P.shape
    order = np.ascontiguousarray(np.argsort(P, axis=1)[:, ::-1])
    flat = (order + (np.arange(m) * K)[:, None]).ravel()
    sorted_p = P.ravel()[flat].reshape(m, K)
    ties = sorted_p[:, 1:] == sorted_p[:, :-1]
    if np.count_nonzero(ties):
        tied = np.flatnonzero(ties.any(axis=1))
        order[tied] = np.argsort(-P[tied], axis=1, kind="stable")
        flat = (order + (np.arange(m) * K)[:, None]).ravel()
        sorted_p = P.ravel()[flat].reshape(m, K)
    return order, flat, sorted_p


def lac_scores(P: FloatArray) -> FloatArray:
    """LAC score ``1 - p_c`` for every class of every row, shape ``(m, K)``."""
    return 1.0 - P


def aps_scores(
    P: FloatArray,
    u: FloatArray | None = None,
    *,
    raps_lambda: float = 0.0,
    raps_k_reg: int = 0,
) -> FloatArray:
    """APS (or RAPS) score of every class of every row, shape ``(m, K)``.

    ``s(x, c) = Σ_{c' ranked before c} p_c' + u·p_c + λ·max(0, rank(c) − k_reg)`` with ``rank``
    1-based. ``u=None`` means the deterministic form ``u = 1``; otherwise ``u`` holds one uniform
    draw per row, shared by all classes of that row.
    """
    m, K = P.shape
    if K == 2:
        return _aps_scores_two(P, u, raps_lambda, raps_k_reg)
    _, flat, cumulative = _descending_order(P)
    _rank_order_scores(cumulative, u, raps_lambda, raps_k_reg)
    scores = np.empty(m * K)
    scores[flat] = cumulative.ravel()  # put_along_axis as one flat scatter
    return scores.reshape(m, K)


def _aps_scores_two(P: FloatArray, u: FloatArray | None, raps_lambda: float, raps_k_reg: int) -> FloatArray:
    """:func:`aps_scores` of two classes without a sort: the same operations, so the same bits.

    The order of a row is its top class ``t`` (class 1 only when strictly more probable, as
    the stable sort breaks ties) then the other ``o``; the rank-order scores are
    :func:`_rank_order_scores`'s two columns written out, in one compiled pass
    (:func:`calwatch.engine.conformal.kernels.aps_two_rows`): ``c_0 = p_t``,
    ``c_1 = fl(p_o + p_t)``, each less ``fl(fl(1 − u)·p)`` when randomised, plus the RAPS
    penalty of its rank. A dozen numpy passes with their temporaries cost ~10x more.
    """
    penalty = np.zeros(2)
    if raps_lambda > 0.0:
        penalty = raps_lambda * np.maximum(0.0, np.arange(1, 3, dtype=np.float64) - raps_k_reg)
    if P.shape[0] < COMPILED_FROM:  # the same operations in numpy: a small batch never imports numba
        return _aps_scores_two_numpy(P, u, penalty, raps_lambda > 0.0)
    from calwatch.engine.conformal.kernels import aps_two_rows  # compiled on first use

    scores = np.empty(P.shape, dtype=np.float64)
    draws = np.zeros(1) if u is None else np.ascontiguousarray(u, dtype=np.float64)
    aps_two_rows(P, draws, u is not None, raps_lambda > 0.0, float(penalty[0]), float(penalty[1]), scores)
    return scores


def _aps_scores_two_numpy(
    P: FloatArray, u: FloatArray | None, penalty: FloatArray, penalised: bool
) -> FloatArray:
    """:func:`_aps_scores_two` in numpy (elementwise, the same operations in the same order)."""
    top = np.greater(P[:, 1], P[:, 0])
    p_top = np.where(top, P[:, 1], P[:, 0])
    p_other = np.where(top, P[:, 0], P[:, 1])
    first = p_top
    second = p_other + p_top
    if u is not None:
        keep = 1.0 - u
        first = first - keep * p_top
        second = second - keep * p_other
    if penalised:
        first = first + penalty[0]
        second = second + penalty[1]
    scores = np.empty(P.shape, dtype=np.float64)
    scores[:, 0] = np.where(top, second, first)
    scores[:, 1] = np.where(top, first, second)
    return scores


def _rank_order_scores(
    cumulative: FloatArray, u: FloatArray | None, raps_lambda: float, raps_k_reg: int
) -> None:
    """In place: each row's probabilities in rank order become the scores of those ranks.

    Column ``j`` becomes ``fl(fl(c_j − fl(fl(1 − u)·p_j)) + fl(λ·max(0, j + 1 − k_reg)))`` with
    ``c_j = fl(c_{j−1} + p_j)`` the sequential running sum (the ``u`` term only when ``u`` is
    given, the ``λ`` term only when ``λ > 0``). Everything but the running sum is elementwise,
    and the running sum adds along the row in order (the column loop and ``np.cumsum`` add the
    same pairs), so the first ``T`` columns come out the same, bit for bit, whether the row was
    sorted in full or only its top ``T`` classes: the partial path rests on this.
    """
    T = cumulative.shape[1]
    sorted_p = cumulative.copy() if u is not None else None
    if T <= 64:  # row-wise cumsum column by column: the same sums, ~2x faster than np.cumsum here
        for c in range(1, T):
            cumulative[:, c] += cumulative[:, c - 1]
    else:
        np.cumsum(cumulative, axis=1, out=cumulative)
    if sorted_p is not None and u is not None:
        cumulative -= (1.0 - u)[:, None] * sorted_p
    if raps_lambda > 0.0:
        ranks = np.arange(1, T + 1, dtype=np.float64)
        cumulative += raps_lambda * np.maximum(0.0, ranks - raps_k_reg)


def class_scores(
    P: FloatArray,
    score: ScoreName,
    *,
    u: FloatArray | None = None,
    raps_lambda: float = 0.0,
    raps_k_reg: int = 0,
) -> FloatArray:
    """Score of every class of every row for the named score, shape ``(m, K)``."""
    if score == "lac":
        return lac_scores(P)
    if score == "aps":
        return aps_scores(P, u)
    return aps_scores(P, u, raps_lambda=raps_lambda, raps_k_reg=raps_k_reg)


def label_scores(
    P: FloatArray,
    y: IntArray,
    score: ScoreName,
    *,
    u: FloatArray | None = None,
    raps_lambda: float = 0.0,
    raps_k_reg: int = 0,
) -> FloatArray:
    """Score of the given label of each row, shape ``(m,)``.

    Bit for bit ``class_scores(P, score, ...)[rows, y]``, so that calibration scores are the
    scores the same row would get at prediction time; for APS/RAPS with many classes it is
    computed from each row's top block (module docstring), without the full score matrix.
    """
    rows = np.arange(P.shape[0])
    if score == "lac":
        return 1.0 - P[rows, y]
    lam, k_reg = (raps_lambda, raps_k_reg) if score == "raps" else (0.0, 0)
    if P.shape[1] > PARTIAL_MIN_CLASSES:
        return _label_scores_partial(P, y, u, lam, k_reg)
    all_scores = aps_scores(P, u, raps_lambda=lam, raps_k_reg=k_reg)
    return all_scores[rows, y]


def prediction_sets(
    P: FloatArray,
    score: ScoreName,
    thresholds: Any,
    *,
    u: FloatArray | None = None,
    raps_lambda: float = 0.0,
    raps_k_reg: int = 0,
) -> BoolArray:
    """``class_scores(P, score, ...) <= thresholds``: the same booleans, without the score matrix.

    Parameters
    ----------
    P : ndarray of shape (m, K)
        Probabilities (non-negative rows summing to 1, as :func:`check_probabilities
        <calwatch.engine._validation.check_probabilities>` returns them; the partial path's
        exactness needs ``P ≥ 0`` and ``u`` in ``[0, 1]``).
    score : {"lac", "aps", "raps"}
        The nonconformity score.
    thresholds : float or ndarray
        ``q̂`` broadcastable to ``(m, K)``: a scalar or ``(1, 1)`` (one for all rows), ``(m, 1)``
        (one per row, Mondrian by category) or ``(1, K)`` (one per class, Mondrian by label).
        ``+inf`` puts every class in.
    u, raps_lambda, raps_k_reg
        As for :func:`class_scores`.

    Returns
    -------
    ndarray of shape (m, K), bool
        ``out[i, c]`` is ``s(x_i, c) ≤ q̂``, bit for bit the comparison of the full score matrix.

    Notes
    -----
    APS and RAPS with ``K > PARTIAL_MIN_CLASSES`` take the partial path (module docstring):
    ``O(m·K)`` selection plus a sort of each row's top block, instead of sorting whole rows;
    thresholds of any other shape take the full path.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> P = rng.dirichlet(np.full(300, 0.05), size=200)
    >>> u = rng.uniform(size=200)
    >>> fast = prediction_sets(P, "raps", 0.8, u=u, raps_lambda=0.01, raps_k_reg=2)
    >>> full = class_scores(P, "raps", u=u, raps_lambda=0.01, raps_k_reg=2) <= 0.8
    >>> bool(np.array_equal(fast, full))
    True
    """
    m, K = P.shape
    thr = np.asarray(thresholds, dtype=np.float64)
    if thr.ndim < 2:
        thr = thr.reshape((1,) * (2 - thr.ndim) + thr.shape)
    known_shape = thr.ndim == 2 and thr.shape in {(1, 1), (m, 1), (1, K)}
    if score == "lac":
        if known_shape:
            return _lac_sets(P, thr)
        lac: BoolArray = lac_scores(P) <= thr
        return lac
    lam, k_reg = (raps_lambda, raps_k_reg) if score == "raps" else (0.0, 0)
    if K <= PARTIAL_MIN_CLASSES or not known_shape:
        full: BoolArray = aps_scores(P, u, raps_lambda=lam, raps_k_reg=k_reg) <= thr
        return full
    return _aps_sets_partial(P, thr, u, lam, k_reg)


#: LAC sets are compared in row chunks of about this many entries, through one reused buffer.
_LAC_CHUNK_ENTRIES = 1 << 17


def _lac_sets(P: FloatArray, thr: FloatArray) -> BoolArray:
    """``1 − P <= thr`` (``thr`` of shape ``(1, 1)``, ``(m, 1)`` or ``(1, K)``), chunk by chunk.

    The same elementwise operations, so the same booleans; but ``1 − P`` never exists whole:
    each chunk's goes through a cache-sized buffer (2.5x faster at K = 1,000, 1.6x at K = 10).
    """
    m, K = P.shape
    out = np.empty((m, K), dtype=bool)
    step = max(1, _LAC_CHUNK_ENTRIES // K)
    buffer = np.empty((min(step, m), K), dtype=np.float64)
    per_row = thr.shape[0] == m and m > 1
    for start in range(0, m, step):
        chunk = P[start : start + step]
        scores = buffer[: chunk.shape[0]]
        np.subtract(1.0, chunk, out=scores)
        limit = thr[start : start + step] if per_row else thr
        np.less_equal(scores, limit, out=out[start : start + step])
    return out


# ------------------------------------------------------------------------ the partial path
def _top_block(P: FloatArray, T: int) -> tuple[IntArray, FloatArray, IntArray]:
    """Each row's ``T`` most probable classes in rank order, their probabilities, and trust.

    Returns
    -------
    order : ndarray of shape (n, T)
        Class indices by decreasing probability, ties by lower class index (as the full sort).
    sorted_p : ndarray of shape (n, T)
        Their probabilities: the full sort's first ``T`` values, bit for bit.
    first_tied : ndarray of shape (n,)
        The first position holding the ``(T+1)``-th largest probability ``v`` (``T`` when
        none does). The partition chose among the classes tied at ``v`` arbitrarily, so from
        there on a position's class may differ from the full sort's (its value may not).
    """
    n, K = P.shape
    kth = K - T - 1
    part = np.argpartition(P, kth, axis=1)  # ascending: the T largest land after kth
    top = np.sort(part[:, kth + 1 :], axis=1)  # by class index, so a stable sort breaks ties
    rows = np.arange(n)
    next_p = P[rows, part[:, kth]]
    values = P[rows[:, None], top]
    rank = np.argsort(-values, axis=1, kind="stable")
    order = np.take_along_axis(top, rank, axis=1)
    sorted_p = np.take_along_axis(values, rank, axis=1)
    tied = sorted_p == next_p[:, None]  # a trailing run: every block value is ≥ v
    first_tied = np.where(tied[:, -1], tied.argmax(axis=1), T).astype(np.intp)
    return order, sorted_p, first_tied


def _partial_schedule(
    P: FloatArray,
    rows: IntArray,
    block: Callable[[IntArray, int], BoolArray],
    full: Callable[[IntArray], None],
) -> None:
    """Run ``block(chunk, T)`` over the rows in chunks, widening ``T`` for the rows it leaves.

    ``block`` handles the chunk's rows its top ``T`` block decides and returns the mask of
    those it does not; they are redone ``_BLOCK_GROWTH`` times wider, and by ``full(rows)`` (a
    full sort) once the block would pass half the row. When a chunk leaves most of its rows
    undecided, the chunks after it start wider at once (the data need it), so rows whose sets
    reach deep (e.g. deterministic APS on peaked rows) cost about one full sort, not the
    partitions of every width on the way to it.
    """
    K = P.shape[1]
    step = max(1, _CHUNK_ENTRIES // K)
    T = FIRST_BLOCK
    pending = rows
    while pending.shape[0]:
        undecided: list[IntArray] = []
        for start in range(0, pending.shape[0], step):
            chunk = pending[start : start + step]
            if T > K // 2:  # a block this wide costs about a sort
                full(chunk)
                continue
            left = chunk[block(chunk, T)]
            undecided.append(left)
            if 2 * left.shape[0] > chunk.shape[0]:
                T *= _BLOCK_GROWTH
        pending = np.concatenate(undecided) if undecided else pending[:0]
        T *= _BLOCK_GROWTH


def _take_rows(P: FloatArray, rows: IntArray) -> FloatArray:
    """``P[rows]``, as a view when the rows are consecutive (the first pass over all rows)."""
    if rows.shape[0] and int(rows[-1]) - int(rows[0]) + 1 == rows.shape[0]:
        return P[int(rows[0]) : int(rows[-1]) + 1]
    return P[rows]


def _aps_sets_partial(
    P: FloatArray, thr: FloatArray, u: FloatArray | None, lam: float, k_reg: int
) -> BoolArray:
    """APS/RAPS sets from top blocks; ``thr`` of shape ``(1, 1)``, ``(m, 1)`` or ``(1, K)``."""
    m, K = P.shape
    out = np.zeros((m, K), dtype=bool)
    flat_out = out.reshape(-1)
    class_thr: FloatArray | None = None
    if thr.shape == (1, K):
        # One threshold per class: ``+inf`` classes are in every set; past the block, a class
        # is out when its score exceeds the largest finite threshold.
        class_thr = thr[0]
        always = class_thr == np.inf
        out[:, always] = True
        bounded = class_thr[~always & ~np.isnan(class_thr)]  # a NaN threshold admits nothing
        if bounded.shape[0] == 0:
            return out
        row_bound = np.full(m, float(bounded.max()))
    else:
        row_bound = np.ascontiguousarray(np.broadcast_to(thr[:, 0], (m,)))
    everything = row_bound == np.inf
    out[everything] = True

    def block(rows: IntArray, T: int) -> BoolArray:
        return _block_sets(P, rows, T, u, lam, k_reg, class_thr, row_bound, flat_out)

    def full(rows: IntArray) -> None:
        scores = aps_scores(P[rows], None if u is None else u[rows], raps_lambda=lam, raps_k_reg=k_reg)
        out[rows] = scores <= (class_thr[None, :] if class_thr is not None else row_bound[rows, None])

    _partial_schedule(P, np.flatnonzero(~everything), block, full)
    return out


def _block_sets(
    P: FloatArray,
    rows: IntArray,
    T: int,
    u: FloatArray | None,
    lam: float,
    k_reg: int,
    class_thr: FloatArray | None,
    row_bound: FloatArray,
    flat_out: BoolArray,
) -> BoolArray:
    """Write the sets of the rows decided by their top ``T`` block; return the undecided mask.

    A row is decided when its block's last score exceeds its bound (the row's threshold, or the
    largest finite class threshold): scores never decrease along the ranks (module docstring),
    so no class past the block is in; and when its set cannot reach a position whose class the
    partition may have chosen differently (from ``first_tied`` on).
    """
    K = P.shape[1]
    bound = row_bound[rows]
    order, scores, first_tied = _top_block(_take_rows(P, rows), T)
    _rank_order_scores(scores, None if u is None else u[rows], lam, k_reg)
    inside = scores <= (class_thr[order] if class_thr is not None else bound[:, None])
    undecided = scores[:, -1] <= bound
    if (first_tied < T).any():
        reach = inside if class_thr is None else scores <= bound[:, None]
        past_tie = np.arange(T)[None, :] >= first_tied[:, None]
        undecided |= (reach & past_tie).any(axis=1)
    decided = ~undecided
    flat_out[(rows[decided, None] * K + order[decided])[inside[decided]]] = True
    return undecided


def _label_scores_partial(
    P: FloatArray, y: IntArray, u: FloatArray | None, lam: float, k_reg: int
) -> FloatArray:
    """Label scores from top blocks: a row is done when its label sits before ``first_tied``."""
    out = np.empty(P.shape[0], dtype=np.float64)

    def block(rows: IntArray, T: int) -> BoolArray:
        order, scores, first_tied = _top_block(_take_rows(P, rows), T)
        _rank_order_scores(scores, None if u is None else u[rows], lam, k_reg)
        hit = order == y[rows, None]
        pos = hit.argmax(axis=1)
        local = np.arange(rows.shape[0])
        done = hit[local, pos] & (pos < first_tied)
        out[rows[done]] = scores[local[done], pos[done]]
        undecided: BoolArray = ~done
        return undecided

    def full(rows: IntArray) -> None:
        scores = aps_scores(P[rows], None if u is None else u[rows], raps_lambda=lam, raps_k_reg=k_reg)
        out[rows] = scores[np.arange(rows.shape[0]), y[rows]]

    _partial_schedule(P, np.arange(P.shape[0]), block, full)
    return out


def label_ranks(P: FloatArray, y: IntArray) -> IntArray:
    """1-based rank of label ``y`` in each row (ties by class index), shape ``(m,)``."""
    p_y = P[np.arange(P.shape[0]), y][:, None]
    classes = np.arange(P.shape[1])[None, :]
    before = (p_y < P) | ((p_y == P) & (classes < y[:, None]))
    ranks: IntArray = before.sum(axis=1).astype(np.intp) + 1
    return ranks


def rank_sum_label_scores(
    P: FloatArray,
    y: IntArray,
    score: ScoreName,
    *,
    u: FloatArray | None = None,
    raps_lambda: float = 0.0,
    raps_k_reg: int = 0,
) -> FloatArray:
    """The APS/RAPS (or LAC) score of each row's label, in ``O(K)`` per row without sorting.

    ``s(x, y) = Σ_{c ranked before y} p_c + u·p_y + λ·max(0, rank(y) − k_reg)``, the classes
    ranked before ``y`` being those with a larger probability or an equal one and a lower index
    (the tie rule of :func:`descending_order`): one comparison of the row against ``p_y`` finds
    them, where :func:`label_scores` sorts the row (or its top block, which a label deep in the
    ranking defeats); a compiled scan (:func:`calwatch.engine.conformal.kernels.rank_sum_rows`),
    with no ``rows × K`` temporaries. The sum runs in another order, so the value can differ from
    :func:`label_scores`' in the last bits: use it where scores need only be consistent among
    themselves (a conformity martingale scores its calibration rows and its stream with it),
    not where they are compared with thresholds from ``label_scores``.

    Examples
    --------
    ``p = (0.5, 0.3, 0.2)``, label 2: ``0.5 + 0.3 + 0.2 = 1.0``; label 1 with ``u = 0.5``:
    ``0.5 + 0.5·0.3 = 0.65``.

    >>> P = np.array([[0.5, 0.3, 0.2], [0.5, 0.3, 0.2]])
    >>> rank_sum_label_scores(P, np.array([2, 1]), "aps", u=np.array([1.0, 0.5])).round(12).tolist()
    [1.0, 0.65]
    """
    m = P.shape[0]
    if score == "lac":
        return 1.0 - P[np.arange(m), y]
    from calwatch.engine.conformal.kernels import rank_sum_rows  # compiled on first use

    out = np.empty(m)
    lam = raps_lambda if score == "raps" else 0.0
    rank_sum_rows(
        np.ascontiguousarray(P, dtype=np.float64), np.ascontiguousarray(y, dtype=np.int64),
        np.empty(0) if u is None else np.ascontiguousarray(u, dtype=np.float64), u is not None,
        float(lam), int(raps_k_reg), out,
    )  # fmt: skip
    return out


def top_probability(P: FloatArray) -> FloatArray:
    """Each row's largest probability, shape ``(m,)`` (the same values as ``P.max(axis=1)``).

    With few classes a column-by-column running maximum beats numpy's reduction along a short
    last axis (about half the time at K = 10); with many, the reduction is used.

    Examples
    --------
    >>> top_probability(np.array([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]])).tolist()
    [0.5, 0.6]
    """
    K = P.shape[1]
    if K > 32 or K == 0:
        out: FloatArray = P.max(axis=1)
        return out
    top = P[:, 0].copy()
    for c in range(1, K):
        np.maximum(top, P[:, c], out=top)
    return top
