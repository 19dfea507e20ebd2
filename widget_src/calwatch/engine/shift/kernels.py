"""Compiled row-by-row loops of the shift detectors (numba), each the recursion's own definition.

The detectors' statistics are recursions over rows: a betting capital, a Shiryaev-Roberts or
CUSUM statistic, a conformal p-value against every row before. numpy can only unroll them into
prefix products, cumulative log-sum-exps and merge-sort counts, a dozen array passes per batch
with a transcendental per element; a monitor with its default detectors then spent 8-10× the
time of the monitor itself. Compiled, each recursion is one pass of a few floating-point
operations per row and bet, the recursion exactly as written, so these loops are also the
clearest statement of what is computed.

``numba`` is imported when a detector first runs (not by ``import calwatch``); each kernel is
compiled on its first call and cached on disk (``cache=True``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from calwatch.engine._compiled import compiled as _jit


@_jit
def _ville_log10(count: int, n: int, log_up: Any, log_down: Any, log_bets: float, terms: Any) -> float:
    """Ville's mixture ``log10 mean_j exp(E log_up_j + (n − E) log_down_j)`` after ``n`` rows, ``E`` events.

    A log-sum-exp over the bets (``terms`` is scratch space of one entry per bet), so a capital
    far past float64's range still has a finite logarithm.
    """
    top = -np.inf
    for j in range(log_down.shape[0]):
        terms[j] = count * log_up[j] + (n - count) * log_down[j]
        top = max(top, terms[j])
    total = 0.0
    for j in range(log_down.shape[0]):
        total += math.exp(terms[j] - top)
    return (math.log(total) + top - log_bets) / math.log(10.0)


@_jit
def _sr_step(sr: Any, up: Any, down: Any, hit: bool) -> float:
    """One row of the Shiryaev-Roberts statistics ``R_j ← F_j(1 + R_j)`` (in place); their mean."""
    n_bets: int = down.shape[0]
    total = 0.0
    for j in range(n_bets):
        factor = up[j] if hit else down[j]
        sr[j] = factor * (1.0 + sr[j])
        total += sr[j]
    return total / n_bets


@_jit
def betting_rows(
    events: Any,
    groups: Any,
    log_up: Any,
    log_down: Any,
    sr: Any,
    rows: Any,
    counts: Any,
    alarmed: Any,
    ville: bool,
    thresholds: Any,
    trace: Any,
    alarm: Any,
) -> None:
    """Advance betting tests over rows in arrival order, each row in its group's test.

    Parameters
    ----------
    events : bool (m,)
        The rows' events.
    groups : int64 (m,)
        The rows' groups (every one tested).
    log_up : float64 (g, j)
        ``log(1 + λ_j(1 − ε₀))`` per group and bet.
    log_down : float64 (j,)
        ``log(1 − u_j)``.
    sr : float64 (g, j)
        Shiryaev-Roberts ``R_j`` per group, linear scale, updated in place (``R ← F(1 + R)``, reset
        to 0 after an alarm; before an alarm ``R_j ≤ j·c``, far inside float64's range).
    rows, counts : int64 (g,)
        Rows and events per group, updated in place (Ville's closed form reads them).
    alarmed : bool (g,)
        Whether a group's Ville test has alarmed (its alarm is sticky: raised once).
    ville : bool
        Ville's mixture ``log mean_j exp(E log_up_j + (n − E) log_down_j)`` instead of
        Shiryaev-Roberts.
    thresholds : float64 (m,)
        The alarm threshold ``c`` at each row (linear scale).
    trace : float64 (m,)
        Out: ``log10`` of the row's group statistic after the row.
    alarm : bool (m,)
        Out: the row raised an alarm.
    """
    n_bets = log_down.shape[0]
    log_bets = math.log(n_bets)
    up = np.exp(log_up)
    down = np.exp(log_down)
    terms = np.empty(n_bets)
    for t in range(events.shape[0]):
        g = groups[t]
        hit = events[t]
        rows[g] += 1
        if hit:
            counts[g] += 1
        if ville:
            value = _ville_log10(counts[g], rows[g], log_up[g], log_down, log_bets, terms)
            trace[t] = value
            if value >= math.log10(thresholds[t]) and not alarmed[g]:
                alarm[t] = True
                alarmed[g] = True
            continue
        mean = _sr_step(sr[g], up[g], down, hit)
        trace[t] = math.log10(mean)
        if mean >= thresholds[t]:
            alarm[t] = True
            for j in range(n_bets):
                sr[g, j] = 0.0


@_jit
def _enter(tree: Any, counts: Any, cell: int, size: int, theta: float) -> float:
    """Add one row to the grid bag and return its smoothed p-value (``size``: the bag with it)."""
    counts[cell] += 1
    n_cells = tree.shape[0] - 1
    i = cell + 1
    while i <= n_cells:  # the row joins the bag
        tree[i] += 1
        i += i & -i
    upto = _prefix(tree, cell + 1)  # rows in cells ≤ cell
    equal: int = counts[cell]  # the rows in its cell: equal to it
    return ((size - upto) + theta * equal) / size


@_jit
def _prefix(tree: Any, i: int) -> int:
    """Rows in the first ``i`` cells (Fenwick prefix sum)."""
    total = 0
    while i > 0:
        total += tree[i]
        i -= i & -i
    return total


@_jit
def fenwick_build(counts: Any) -> Any:
    """The Fenwick tree (1-based, int64) of counts per cell, in ``O(cells)``."""
    n = counts.shape[0]
    tree = np.zeros(n + 1, dtype=np.int64)
    for i in range(1, n + 1):
        tree[i] += counts[i - 1]
        parent = i + (i & -i)
        if parent <= n:
            tree[parent] += tree[i]
    return tree


@_jit
def _jump(capital: Any, jump: float, p: float) -> float:
    """One row of the simple jumper: move ``capital`` (sum 1, in place); return ``log(S_n/S_{n−1})``."""
    keep = 1.0 - jump
    pooled = jump / 3.0 * (capital[0] + capital[1] + capital[2])
    half = p - 0.5
    c0 = (keep * capital[0] + pooled) * (1.0 - half)
    c1 = keep * capital[1] + pooled
    c2 = (keep * capital[2] + pooled) * (1.0 + half)
    total = c0 + c1 + c2
    capital[0], capital[1], capital[2] = c0 / total, c1 / total, c2 / total
    return math.log(total)


@_jit
def simple_jumper_rows(p: Any, jump: float, capital: Any) -> Any:
    """Vovk's simple jumper over p-values, row by row: each row's log factor ``log(S_n / S_{n−1})``.

    The capital ``C`` on the bets ``ε ∈ {−1, 0, 1}`` moves to ``D_n M C``: a share ``J`` of the
    total is pooled and shared out evenly, ``C_ε ← (1 − J) C_ε + (J/3) S``, then each bet is paid
    ``f_ε(p) = 1 + ε(p − ½)``. ``capital`` (normalised to sum 1) is updated in place, kept at
    sum 1 with the log of the growth carried separately.
    """
    out = np.empty(p.shape[0])
    for t in range(p.shape[0]):
        out[t] = _jump(capital, jump, p[t])
    return out


@_jit
def _log1p_sr(log_sr: float) -> float:
    """``log(1 + R)`` from ``log R`` (a log-add-exp with 0, exact for tiny and huge ``R``)."""
    if log_sr > 0.0:
        return log_sr + math.log1p(math.exp(-log_sr))
    return math.log1p(math.exp(log_sr))


@_jit
def change_statistics(
    log_factors: Any, log_cusum: float, log_sr: float, log_thresholds: Any, out_cusum: Any, out_sr: Any
) -> Any:
    """CUSUM and Shiryaev-Roberts on a martingale's factors, restarted after each alarm.

    ``log γ_n = log F_n + max(0, log γ_{n−1})`` (restart: ``γ = 1``) and
    ``log R_n = log F_n + log(1 + R_{n−1})`` (restart: ``R = 0``), each alarming at
    ``≥ log c_n`` (``log_thresholds``, one per row: constant, or growing with the rows seen).
    Writes each row's value (before any restart) to ``out_cusum`` and ``out_sr`` and returns
    the alarm flags, shape (m, 2): CUSUM's, then Shiryaev-Roberts's. The state after the batch
    is the last value, or the restart value where the last row alarmed.
    """
    m = log_factors.shape[0]
    alarms = np.zeros((m, 2), dtype=np.bool_)
    for t in range(m):
        f = log_factors[t]
        log_cusum = f + max(0.0, log_cusum)
        log_sr = f + _log1p_sr(log_sr)
        out_cusum[t] = log_cusum
        out_sr[t] = log_sr
        if log_cusum >= log_thresholds[t]:
            alarms[t, 0] = True
            log_cusum = 0.0
        if log_sr >= log_thresholds[t]:
            alarms[t, 1] = True
            log_sr = -np.inf
    return alarms


@_jit
def _martingale_row(
    p: float, jump: float, capital: Any, state: Any, log_threshold: float, out: Any, alarms: Any
) -> None:
    """One row after its p-value: the jumper's factor, ``log S``, CUSUM and Shiryaev-Roberts."""
    f = _jump(capital, jump, p)
    state[0] += f
    state[1] = f + max(0.0, state[1])
    state[2] = f + _log1p_sr(state[2])
    out[0], out[1], out[2], out[3] = p, state[0], state[1], state[2]
    if state[1] >= log_threshold:
        alarms[0] = True
        state[1] = 0.0
    if state[2] >= log_threshold:
        alarms[1] = True
        state[2] = -np.inf


@_jit
def martingale_rows(
    tree: Any,
    counts: Any,
    cells: Any,
    theta: Any,
    size: int,
    jump: float,
    capital: Any,
    state: Any,
    log_thresholds: Any,
    out: Any,
    alarms: Any,
) -> None:
    """A conformal test martingale over a batch of grid scores, every step fused, row by row.

    Per row: the p-value against the grid bag (:func:`_enter`), then
    :func:`martingale_from_p_values`' row: one pass instead of several and no glue between them.

    Parameters
    ----------
    tree : int64 (cells + 1,)
        Fenwick tree of the bag's counts per grid cell (1-based), updated in place.
    counts : int64 (cells,)
        The counts per cell themselves, updated in place too.
    cells : int64 (m,)
        The rows' cells (0-based, inside the tree).
    theta : float64 (m,)
        The tie-breaking draws.
    size : int
        Scores in the bag before the batch.
    jump, capital, state, log_thresholds, out, alarms
        As for :func:`martingale_from_p_values`.
    """
    for t in range(cells.shape[0]):
        size += 1
        p = _enter(tree, counts, cells[t], size, theta[t])
        _martingale_row(p, jump, capital, state, log_thresholds[t], out[t], alarms[t])


@_jit
def martingale_from_p_values(
    p: Any, jump: float, capital: Any, state: Any, log_thresholds: Any, out: Any, alarms: Any
) -> None:
    """The martingale's rows from given p-values (the bag of sorted runs computes those).

    Per row the simple jumper's factor ``F`` (:func:`simple_jumper_rows`; ``capital`` updated in
    place), ``log S += log F``, CUSUM ``log γ = log F + max(0, log γ)`` and Shiryaev-Roberts
    ``log R = log F + log(1 + R)``, each restarted at ``≥ log c`` (:func:`change_statistics`).

    Parameters
    ----------
    p : float64 (m,)
        The p-values.
    jump : float
        The jump rate ``J``.
    capital : float64 (3,)
        The capital (sum 1), updated in place.
    state : float64 (3,)
        ``log S``, ``log γ`` and ``log R`` before the batch; updated in place (after restarts).
    log_thresholds : float64 (m,)
        ``log c`` at each row.
    out : float64 (m, 4)
        Out: the p-value, ``log S``, ``log γ`` and ``log R`` (before a restart) of each row.
    alarms : bool (m, 2)
        Out: CUSUM's and Shiryaev-Roberts's alarms.
    """
    for t in range(p.shape[0]):
        _martingale_row(p[t], jump, capital, state, log_thresholds[t], out[t], alarms[t])


@_jit
def epoch_of(rows: int, epoch_rows: int) -> int:
    """The epoch ``k`` (0-based) of an anytime threshold that holds row ``rows`` (1-based).

    Epoch ``k`` (1-based) ends at ``N_k = B·2^(k−1)``: the smallest ``k`` with ``rows ≤ N_k``,
    in integers (``1 + max(0, ⌈log2(rows/B)⌉)`` without rounding). ``epoch_rows = 0``: a constant
    threshold, epoch 0 always.
    """
    if epoch_rows <= 0:
        return 0
    k = 0
    end = epoch_rows
    while rows > end:
        end *= 2
        k += 1
    return k


@_jit
def martingale_grid(
    scores: Any,
    resolution: float,
    lo: int,
    hi: int,
    tree: Any,
    counts: Any,
    theta: Any,
    size: int,
    seen: int,
    jump: float,
    capital: Any,
    state: Any,
    log_table: Any,
    epoch_rows: int,
    which: int,
    p_out: Any,
    s_out: Any,
    cusum_out: Any,
    sr_out: Any,
    alarms: Any,
) -> int:
    """A conformal test martingale's whole batch on a grid bag: scores in, statistics out.

    :func:`martingale_rows` with the steps around it: each score is put on the grid
    (``⌊score / resolution⌋``) and the batch is refused, before anything changes, unless every
    cell lies in the bag's range ``[lo, hi]`` (an infinite score, or one outside the range:
    the caller grows the bag or moves to sorted runs, and calls again); row ``seen + t + 1``
    alarms at ``log_table[epoch_of(seen + t + 1, epoch_rows)]``.

    Parameters
    ----------
    scores : float64 (m,)
        The batch's scores (no NaN: the caller checks).
    tree, counts, theta, size, jump, capital
        As for :func:`martingale_rows`.
    seen : int
        Stream rows before the batch.
    state : float64 (4,)
        ``log S``, ``log γ``, ``log R`` and ``max log S`` before the batch; updated in place.
    log_table : float64 (epochs,)
        ``log c`` per epoch (one entry and ``epoch_rows = 0``: a constant threshold).
    which : int
        The statistic whose alarms are counted: 0 Ville (``log S ≥ log c``), 1 CUSUM, 2
        Shiryaev-Roberts.
    p_out, s_out, cusum_out, sr_out : float64 (m,)
        Out: each row's p-value, ``log S``, ``log γ`` and ``log R`` (before a restart).
    alarms : bool (3, m)
        Out (False in): Ville's, CUSUM's and Shiryaev-Roberts's alarm at each row.

    Returns
    -------
    int
        The rows at which statistic ``which`` alarmed, or ``-1`` when the batch was refused.
    """
    m = scores.shape[0]
    for t in range(m):
        v = np.floor(scores[t] / resolution)
        if not (v >= lo and v <= hi):  # also an infinite score
            return -1
    n_alarms = 0
    for t in range(m):
        cell = int(np.floor(scores[t] / resolution) - lo)
        size += 1
        p = _enter(tree, counts, cell, size, theta[t])
        log_threshold = log_table[epoch_of(seen + t + 1, epoch_rows)]
        f = _jump(capital, jump, p)
        state[0] += f
        state[1] = f + max(0.0, state[1])
        state[2] = f + _log1p_sr(state[2])
        state[3] = max(state[3], state[0])
        p_out[t], s_out[t], cusum_out[t], sr_out[t] = p, state[0], state[1], state[2]
        if state[0] >= log_threshold:
            alarms[0, t] = True
        if state[1] >= log_threshold:
            alarms[1, t] = True
            state[1] = 0.0
        if state[2] >= log_threshold:
            alarms[2, t] = True
            state[2] = -np.inf
        if alarms[which, t]:
            n_alarms += 1
    return n_alarms


@_jit
def betting_batch(
    events: Any,
    groups: Any,
    testable: Any,
    log_up: Any,
    log_down: Any,
    sr: Any,
    rows: Any,
    counts: Any,
    alarmed: Any,
    ville: bool,
    table: Any,
    epoch_rows: int,
    trace: Any,
    batch_rows: Any,
    batch_events: Any,
    peak: Any,
    last: Any,
    alarm_groups: Any,
    alarm_rows: Any,
) -> int:
    """:func:`betting_rows` for a batch, with each group's threshold and summary of the batch.

    Row ``t`` goes to group ``groups[t]`` (every row to group 0 when ``groups`` is empty); rows
    of groups that are not ``testable`` are skipped. The batch is refused, before anything
    changes, when a group is outside ``0..g−1``. Each row alarms at its group's threshold
    ``table[epoch_of(rows[g], epoch_rows)]`` (its own row count, this row included).

    Parameters
    ----------
    events, log_up, log_down, sr, rows, counts, alarmed, ville
        As for :func:`betting_rows` (the state updated in place).
    groups : int64 (m,) or (0,)
        The rows' groups.
    testable : bool (g,)
        The groups with a test.
    table : float64 (epochs,)
        The threshold ``c`` per epoch (linear scale; one entry and ``epoch_rows = 0``: constant).
    trace : float64 (m,) or (0,)
        Out: ``log10`` of the row's group statistic after the row (untouched for skipped rows);
        an empty array skips it (Shiryaev-Roberts then takes one logarithm per group, not per
        row: ``log10`` is increasing, so the peak's logarithm is the logarithms' peak).
    batch_rows, batch_events : int64 (g,)
        Out (zeros in): per group, its rows and events in the batch.
    peak, last : float64 (g,)
        Out (``-inf`` in): per group, its highest and its last ``log10`` statistic in the batch.
    alarm_groups, alarm_rows : int64 (m,)
        Out: the alarms in arrival order, their group and row in the group's own count (from 0).

    Returns
    -------
    int
        The number of alarms, or ``-1 − t`` when row ``t``'s group is outside ``0..g−1``.
    """
    m = events.shape[0]
    g_count = testable.shape[0]
    grouped = groups.shape[0] > 0
    record = trace.shape[0] > 0
    if grouped:
        for t in range(m):
            if groups[t] < 0 or groups[t] >= g_count:
                return -1 - t
    n_bets = log_down.shape[0]
    log_bets = math.log(n_bets)
    up = np.exp(log_up)
    down = np.exp(log_down)
    terms = np.empty(n_bets)
    n_alarms = 0
    for t in range(m):
        g = groups[t] if grouped else 0
        if not testable[g]:
            continue
        hit = events[t]
        rows[g] += 1
        if hit:
            counts[g] += 1
            batch_events[g] += 1
        batch_rows[g] += 1
        threshold = table[epoch_of(rows[g], epoch_rows)]
        alarm = False
        if ville:
            value = _ville_log10(counts[g], rows[g], log_up[g], log_down, log_bets, terms)  # log10 already
            if value >= math.log10(threshold) and not alarmed[g]:
                alarm = True
                alarmed[g] = True
        else:
            value = _sr_step(sr[g], up[g], down, hit)  # the mean, linear: its log10 below
            if value >= threshold:
                alarm = True
                for j in range(n_bets):
                    sr[g, j] = 0.0
        if record:
            trace[t] = value if ville else math.log10(value)
        if batch_rows[g] == 1 or value > peak[g]:
            peak[g] = value
        last[g] = value
        if alarm:
            alarm_groups[n_alarms] = g
            alarm_rows[n_alarms] = rows[g] - 1
            n_alarms += 1
    if not ville:
        for g in range(g_count):
            if batch_rows[g] > 0:
                peak[g] = math.log10(peak[g])
                last[g] = math.log10(last[g])
    return n_alarms


@_jit
def _bin_of(s: float, bins: int) -> int:
    """``⌊s·bins⌋`` clamped to ``[0, bins]``: non-decreasing in ``s`` (floating-point products are)."""
    x = s * bins
    if x <= 0.0:
        return 0
    if x >= bins:
        return bins
    return int(x)


@_jit
def _search_within(reference: Any, s: float, lo: int, hi: int, inclusive: bool) -> int:
    """The first position in ``[lo, hi)`` of sorted ``reference`` past every ``r < s`` (``r ≤ s``)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        below = reference[mid] <= s if inclusive else reference[mid] < s
        if below:
            lo = mid + 1
        else:
            hi = mid
    return lo


@_jit
def confidence_mid_ranks(reference: Any, bins: int, P: Any, groups: Any, out: Any) -> None:
    """Add each row's doubled mid-rank of ``1 − max_c P[i, c]`` against ``reference`` to its group.

    ``2·(#{r < s} + ½·#{r = s}) = #{r < s} + #{r ≤ s}``, an integer: ``out[groups[i]]`` (int64)
    sums it exactly in any order. The row's maximum is taken in the same pass (no score array,
    no per-group call). A binary search over the whole sorted ``reference`` costs ~50 ns a row
    (mispredicted branches); instead ``start[b]`` counts the reference values of bins below
    ``b = ⌊s·bins⌋``: since the bin is non-decreasing in the value, those are all ``< s`` and
    those of bins above are all ``> s``, so both counts lie in ``[start[b], start[b + 1]]``,
    a range that is usually empty (a few ns a row, the same integers).
    """
    start = np.zeros(bins + 2, dtype=np.int64)
    for r in reference:
        start[_bin_of(r, bins) + 1] += 1
    for b in range(1, bins + 2):
        start[b] += start[b - 1]
    K = P.shape[1]
    for i in range(P.shape[0]):
        top = P[i, 0]
        for c in range(1, K):
            if P[i, c] > top:
                top = P[i, c]
        s = 1.0 - top
        b = _bin_of(s, bins)
        lo, hi = start[b], start[b + 1]
        left = _search_within(reference, s, lo, hi, False)
        out[groups[i]] += left + _search_within(reference, s, left, hi, True)
