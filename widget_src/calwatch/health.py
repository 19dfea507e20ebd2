"""Health at a glance: one state per calibrator (holding, at risk, broken), for the dashboard's strip.

The rule lives here, in one function (:func:`health`), so every view draws the same verdict: the
live widget (from its per-batch rows, only the last :data:`SPARK_BATCHES` batches, each update),
the HTML report and the served view (from :meth:`Monitor.summary` and :meth:`Monitor.warnings`).
The front end only draws what it gets (``js/health.ts``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from calwatch.engine.metrics.intervals import clopper_pearson
from calwatch.engine.shift.betting import calibration_null_rate, has_finite_threshold
from calwatch.engine.shift.monitors import DEFAULT_CALIBRATION_DELTA

if TYPE_CHECKING:
    import polars as pl

    from calwatch.monitor import Monitor

#: Labelled batches pooled for a calibrator's state (the most recent ones with labels).
RECENT_BATCHES = 5
#: Batches the sparkline shows; the state looks no further back (older labels say nothing of now).
SPARK_BATCHES = 20
#: The states, best first. ``waiting``: no labelled row among the recent batches and no warning.
STATES = ("holding", "waiting", "at risk", "broken")
#: Summary kinds whose promise is a coverage target (``target`` column).
_COVERAGE_KINDS = ("sets", "regression")


def _rows(table: pl.DataFrame | Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    to_dicts = getattr(table, "to_dicts", None)
    return list(to_dicts() if callable(to_dicts) else table)


def _num(row: Mapping[str, Any], field: str) -> float | None:
    value = row.get(field)
    if type(value) is float:  # the common case first: this runs for every row of every update
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, bool):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _count(row: Mapping[str, Any], field: str) -> int:
    value = row.get(field)
    if type(value) is int:
        return value
    number = _num(row, field)
    return 0 if number is None else round(number)


def _pct(level: float) -> str:
    return f"{100 * level:.4g}%"


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


@functools.lru_cache(maxsize=4096)
def _band(k: int, n: int) -> tuple[float | None, float | None]:
    """The 95% Clopper-Pearson band of ``k / n`` (remembered: a live view asks for the same counts)."""
    lo, hi = clopper_pearson([k], [n])
    return (
        float(lo[0]) if math.isfinite(lo[0]) else None,
        float(hi[0]) if math.isfinite(hi[0]) else None,
    )


def named_calibrator(name: str, calibrators: Iterable[str]) -> str | None:
    """The calibrator a warning names (``"<calibrator>: <detector>"``), None for a model-wide one.

    Examples
    --------
    >>> named_calibrator("lac: coverage drop", ["lac", "aps"])
    'lac'
    >>> named_calibrator("confidence martingale", ["lac"]) is None
    True
    """
    hits = [key for key in calibrators if name.startswith(f"{key}:")]
    return max(hits, key=len) if hits else None


def qualifiers(monitor: Monitor) -> dict[str, str]:
    """What each calibrator's promise holds for, in words (its chip: "90% coverage (per class)").

    Per class for ``mondrian="label"`` sets, the PAC confidence δ, adaptive (ACI) levels,
    Venn-ADMIT's admitted rows, a risk estimator's top-k; nothing for plain split conformal.
    """
    out: dict[str, str] = {}
    for key, cal in monitor.calibrators.items():
        name = type(cal).__name__
        delta = getattr(cal, "delta", None)
        if getattr(cal, "kind", None) == "risk":
            out[key] = f"top-{getattr(cal, 'top_k', 1)}"
        elif getattr(cal, "epsilon", None) is not None and delta is not None:
            out[key] = f"PAC, δ={float(delta):g}"
        elif name == "Adaptive":
            out[key] = "adaptive α"
        elif name == "VennAdmit":
            out[key] = "Venn-ADMIT"
        elif getattr(cal, "mondrian", None) == "label":
            out[key] = "per class"
    return out


def floors(monitor: Monitor) -> dict[str, float]:
    """The lowest coverage each set calibrator's promise allows, given its calibration set.

    Split conformal promises coverage ``1 − α`` on average over calibration draws; the draw the
    monitor got fixes a coverage that may sit a little under it. The floor is the coverage of a
    valid calibrator at its worst plausible draw: ``1 − ε₀`` with ``ε₀`` the ``1 − δ`` quantile
    (``δ = 0.01``, as the coverage-drop test uses) of its threshold's miss rate over calibration
    draws (:func:`~calwatch.engine.shift.betting.calibration_null_rate`), from its calibration
    rows (the smallest class's, for ``mondrian="label"``). PAC sets promise their coverage given
    the draw already: their floor is their target. Calibrators without a target have no floor.
    """
    targets = getattr(monitor, "targets", None)
    if monitor.calibration_ is None or not callable(targets):
        return {}
    calibration = monitor.calibration_
    counts = [int(n) for n in dict(calibration.get("class_counts") or {}).values() if int(n) > 0]
    out: dict[str, float] = {}
    for key, target in targets().items():
        cal = monitor.calibrators[key]
        if getattr(cal, "epsilon", None) is not None:
            out[key] = float(target)
            continue
        n = int(getattr(cal, "n_calibration_", None) or calibration.get("n_rows") or 0)
        if getattr(cal, "mondrian", None) == "label" and counts:
            n = min(counts)
        alpha = 1.0 - float(target)
        if n > 0 and 0.0 < alpha < 1.0 and has_finite_threshold(alpha, n):
            out[key] = 1.0 - calibration_null_rate(alpha, n, DEFAULT_CALIBRATION_DELTA)
        else:
            out[key] = float(target)
    return out


def health(
    summary: pl.DataFrame | Iterable[Mapping[str, Any]],
    warnings: pl.DataFrame | Iterable[Mapping[str, Any]],
    *,
    calibrators: Sequence[str] | None = None,
    qualifiers: Mapping[str, str] | None = None,
    floors: Mapping[str, float] | None = None,
    recent: int = RECENT_BATCHES,
    spark: int = SPARK_BATCHES,
) -> list[dict[str, Any]]:
    """Each calibrator's promise and state: holding, at risk, broken (or waiting for labels).

    Only the last ``spark`` batches of the stream count (the sparkline's); of those, the most
    recent ``recent`` batches with labels are pooled (labelled rows summed) into the *recent
    band*: the 95% Clopper-Pearson interval of the pooled coverage (of the pooled error rate for
    a risk estimator). The state, first rule that applies:

    1. **broken**: an open coverage-drop warning names the calibrator (``"<calibrator>: coverage
       drop"`` or ``"...: class coverage drop"``: a test of the promise itself, with its
       false-alarm bound; acknowledged or not, since acknowledging does not mend coverage), or
       its recent band lies wholly on the wrong side of its promise (coverage: upper bound <
       its floor, the target less the slack its calibration draw allows, see :func:`floors`;
       risk: the error's lower bound > the estimate on the same labelled rows, or, for an
       estimate of the error itself rather than an upper one (``estimate_promise`` without
       "upper"), its upper bound < the estimate);
    2. **at risk**: another open warning names it (its conformity martingale: the scores behind
       the promise changed, which may or may not cost coverage), the latest labelled batch's own
       band lies wholly on the wrong side, or an open warning names no calibrator (a label-free
       shift of the model's inputs or confidence: it threatens every promise, whatever the
       labels seen so far say);
    3. **waiting**: no labelled row among the last ``spark`` batches (nothing to check yet);
    4. **holding**: otherwise (the recent band reaches the promise, and no open warning).

    A calibrator whose kind states no number (selective) is judged by the warnings alone.

    Parameters
    ----------
    summary : polars.DataFrame or iterable of mappings
        Rows of :meth:`Monitor.summary` (one per batch and calibrator), or the same rows of the
        last ``spark`` batches at least. Fields read: ``batch, calibrator, kind, target,
        n_rows, n_labelled, n_covered, estimated_error, estimated_error_labelled,
        observed_error, kept_accuracy``.
    warnings : polars.DataFrame or iterable of mappings
        Rows of :meth:`Monitor.warnings` (``episode, name, open, first_batch``).
    calibrators : sequence of str, optional
        Calibrators in chip order (default: their order in ``summary``); one without rows gets
        a ``waiting`` chip.
    qualifiers : mapping of str to str, optional
        What each promise holds for, shown after it (see :func:`qualifiers`).
    floors : mapping of str to float, optional
        The lowest coverage each calibrator's promise allows (see :func:`floors`); default: its
        target (no slack for the calibration draw).
    recent : int
        Labelled batches pooled into the recent band.
    spark : int
        Batches the sparkline shows and the state looks back over.

    Returns
    -------
    list of dict
        One row per calibrator, keyed by its name: ``key, calibrator, kind, promise, state,
        reason`` (one line: why), ``value, lo, hi`` (pooled recent coverage, or error rate, and
        its band), ``reference`` (the floor it is judged against, or the estimated error of the
        same rows), ``target`` (the promised coverage, null for other kinds),
        ``n_labelled, n_batches, first_batch, last_batch`` (what was pooled), ``episodes``
        (open warnings naming it), ``spark`` (``[batch, value, reference]`` per batch, value
        null without labels).

    Examples
    --------
    >>> rows = [{"batch": b, "calibrator": "lac", "kind": "sets", "target": 0.9, "n_rows": 100,
    ...          "n_labelled": 100, "n_covered": 70 if b > 1 else 91} for b in range(4)]
    >>> [(h["promise"], h["state"]) for h in health(rows, [])]
    [('90% coverage', 'broken')]
    >>> h = health(rows[:2], [])[0]
    >>> h["state"], h["reason"]
    ('holding', 'coverage 0.910 [0.861, 0.946] reaches 0.9 over the last 2 labelled batches (200 rows)')
    """
    if recent < 1 or spark < 1:
        msg = f"recent and spark must be >= 1; got recent={recent}, spark={spark}"
        raise ValueError(msg)
    rows = [r for r in _rows(summary) if r.get("batch") is not None and r.get("calibrator") is not None]
    last = max((int(r["batch"]) for r in rows), default=-1)
    shown = [r for r in rows if int(r["batch"]) > last - spark]
    order = (
        list(calibrators)
        if calibrators is not None
        else list(dict.fromkeys(str(r["calibrator"]) for r in rows))
    )
    by_cal: dict[str, list[Mapping[str, Any]]] = {key: [] for key in order}
    for r in sorted(shown, key=lambda r: int(r["batch"])):
        if str(r["calibrator"]) in by_cal:
            by_cal[str(r["calibrator"])].append(r)
    named: dict[str, list[Mapping[str, Any]]] = {key: [] for key in order}
    model_wide: list[Mapping[str, Any]] = []
    for w in _rows(warnings):
        if not w.get("open"):
            continue
        owner = named_calibrator(str(w.get("name", "")), order)
        (named[owner] if owner is not None else model_wide).append(w)
    quals = qualifiers or {}
    lows = floors or {}
    return [
        _chip(key, by_cal[key], named[key], model_wide, quals.get(key, ""), lows.get(key), recent)
        for key in order
    ]


def _tests_promise(name: str) -> bool:
    """Whether a warning comes from a test of coverage itself (not of the scores behind it)."""
    return "coverage drop" in name


def _since(w: Mapping[str, Any]) -> str:
    first = w.get("first_batch")
    return f"{w.get('name', '')} since batch {first}" if first is not None else str(w.get("name", ""))


def _chip(
    key: str,
    rows: list[Mapping[str, Any]],
    named: list[Mapping[str, Any]],
    model_wide: list[Mapping[str, Any]],
    qualifier: str,
    floor: float | None,
    recent: int,
) -> dict[str, Any]:
    kind = str(rows[-1].get("kind") or "") if rows else ""
    target = _num(rows[-1], "target") if rows else None
    coverage = kind in _COVERAGE_KINDS and target is not None
    if floor is None or target is None:
        floor = target
    risk = kind == "risk"
    # A risk estimate promises an upper bound (InvCP: "upper estimate (conservative)") or the
    # error itself (a calibration map): the first breaks one way, the second both ways.
    upper = not risk or not rows or "upper" in str(rows[-1].get("estimate_promise") or "upper")
    n_labelled = [_count(r, "n_labelled") for r in rows]
    labelled = [r for r, m in zip(rows, n_labelled, strict=True) if m > 0]
    pooled = labelled[-recent:]
    n = sum(_count(r, "n_labelled") for r in pooled)

    def judged(
        part: Sequence[Mapping[str, Any]],
    ) -> tuple[float | None, float | None, float | None, float | None]:
        """Value, band and reference of pooled rows: coverage vs target, or error vs its estimate."""
        m = sum(_count(r, "n_labelled") for r in part)
        if m == 0:
            return None, None, None, None
        if coverage:
            k = sum(_count(r, "n_covered") for r in part)
            lo, hi = _band(k, m)
            return k / m, lo, hi, floor
        if risk:
            errors = sum(round((_num(r, "observed_error") or 0.0) * _count(r, "n_labelled")) for r in part)
            est = (
                sum((_num(r, "estimated_error_labelled") or 0.0) * _count(r, "n_labelled") for r in part) / m
            )
            lo, hi = _band(errors, m)
            return errors / m, lo, hi, est
        return None, None, None, None

    def wrong_side(value: float | None, lo: float | None, hi: float | None, ref: float | None) -> bool:
        if value is None or ref is None:
            return False
        if coverage:
            return hi is not None and hi < ref
        above = lo is not None and lo > ref  # risk: the error is surely above its estimate
        return above or (not upper and hi is not None and hi < ref)

    value, lo, hi, ref = judged(pooled)
    latest = judged(labelled[-1:])
    what = "coverage" if coverage else "error"
    over = f"over the last {len(pooled)} labelled {'batch' if len(pooled) == 1 else 'batches'} ({n:,} rows)"
    band = f"{what} {_f(value)} [{_f(lo)}, {_f(hi)}]"
    if coverage and target is not None and floor is not None and floor < target:
        ref_text = f"{floor:.3f} (target {target:g} less its calibration slack)"
    elif coverage and target is not None:
        ref_text = f"{target:g}"
    else:
        ref_text = f"its estimate {_f(ref)}"
    drops = [w for w in named if _tests_promise(str(w.get("name", "")))]
    if drops:
        state, reason = "broken", "open warning: " + "; ".join(_since(w) for w in drops)
    elif wrong_side(value, lo, hi, ref):
        side = "below" if coverage or (hi is not None and ref is not None and hi < ref) else "above"
        state, reason = "broken", f"{band} {side} {ref_text} {over}"
    elif wrong_side(*latest):
        side = (
            "below"
            if coverage or (latest[2] is not None and latest[3] is not None and latest[2] < latest[3])
            else "above"
        )
        b = labelled[-1]["batch"]
        state = "at risk"
        reason = f"batch {b}: {what} {_f(latest[0])} [{_f(latest[1])}, {_f(latest[2])}] {side} {ref_text}"
    elif named:
        state, reason = "at risk", "open warning: " + "; ".join(_since(w) for w in named)
    elif model_wide:
        state, reason = "at risk", "open warning on the model: " + "; ".join(_since(w) for w in model_wide)
    elif not rows:
        state, reason = "waiting", "no batches yet"
    elif value is None and (coverage or risk):
        state, reason = "waiting", f"no labels in the last {len(rows)} batches yet"
    elif value is None:
        state, reason = "holding", "no open warning (no coverage to check)"
    else:
        state, reason = "holding", f"{band} reaches {ref_text} {over}"

    spark_points: list[list[Any]] = []
    for r, m in zip(rows, n_labelled, strict=True):
        if coverage:
            v = _count(r, "n_covered") / m if m else None
            spark_points.append([r["batch"], v, target])
        elif risk:
            spark_points.append(
                [r["batch"], _num(r, "observed_error") if m else None, _num(r, "estimated_error")]
            )
        else:
            spark_points.append([r["batch"], _num(r, "kept_accuracy"), None])
    return {
        "key": key,
        "calibrator": key,
        "kind": kind,
        "promise": _promise(kind, target, rows, recent, qualifier, upper),
        "state": state,
        "reason": reason,
        "value": value,
        "lo": lo,
        "hi": hi,
        "reference": ref,
        "target": target,
        "n_labelled": n,
        "n_batches": len(pooled),
        "first_batch": pooled[0]["batch"] if pooled else None,
        "last_batch": pooled[-1]["batch"] if pooled else None,
        "episodes": [int(w["episode"]) for w in named if w.get("episode") is not None],
        "spark": spark_points,
    }


def _promise(
    kind: str, target: float | None, rows: list[Mapping[str, Any]], recent: int, qualifier: str, upper: bool
) -> str:
    """The promise in words: "90% coverage", "risk ≤ 0.12" or "risk ≈ 0.12", with the qualifier.

    A risk estimator's sign says whether its estimate is an upper bound (≤) or the error itself (≈).
    """
    if kind in _COVERAGE_KINDS and target is not None:
        text = f"{_pct(target)} coverage"
    elif kind == "risk":
        part = rows[-recent:]
        n = sum(_count(r, "n_rows") for r in part)
        est = sum((_num(r, "estimated_error") or 0.0) * _count(r, "n_rows") for r in part) / n if n else None
        sign = "≤" if upper else "≈"
        text = f"risk {sign} estimate" if est is None else f"risk {sign} {est:.3f}"
    elif kind == "selective":
        text = "calibrated kept rows"
    else:
        text = "no stated promise"
    return f"{text} ({qualifier})" if qualifier else text
