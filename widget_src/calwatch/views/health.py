"""Health at a glance: one state per calibrator (holding, at risk, broken), for the dashboard's strip.

The rule lives here, in one function (:func:`health`), so every view draws the same verdict: the
live widget (from its per-batch rows, only the last :data:`SPARK_BATCHES` batches, each update),
the HTML report, the static notebook output and the served view (from :meth:`Monitor.summary`,
:meth:`Monitor.class_coverage` and :meth:`Monitor.warnings`). The front end only draws what it
gets (``js/health.ts``; the overview cards take their colour from the same state).

Notes
-----
**The recent band.** Of the last :data:`SPARK_BATCHES` batches, the most recent
:data:`RECENT_BATCHES` with labels are pooled: ``k`` covered of ``n`` labelled rows. The band is
the exact (Clopper-Pearson) interval ``[lo, hi]`` of ``k / n`` at confidence
:data:`BAND_CONFIDENCE` (0.95).

**The floor.** Split conformal promises coverage ``t = 1 − α`` on average over calibration
draws; the one draw a monitor got fixes a coverage that may sit somewhat under ``t``. The floor
``f = 1 − ε₀`` (:func:`floors`) is the coverage of a *valid* calibrator at its worst plausible
draw (``ε₀`` the 99% quantile of its threshold's miss rate over draws of its ``n`` calibration
rows; the smallest class's for a per-class promise). ``t − f`` is the *calibration slack*:
8 points at ``t = 0.9`` with 100 rows in the smallest class, 1.6 with 2,000 rows. PAC sets
promise their coverage given the draw already: ``f = t``, no slack.

**The rule for a coverage promise**, on the band's upper end ``hi``:

* **holding** when ``hi ≥ t``: the band reaches the target (or lies above it); the data cannot
  tell the coverage from the promise;
* **at risk** (amber) when ``f ≤ hi < t``: the band lies wholly below the target, but within the
  calibration slack. The promise as stated is not being met; the shortfall is one a valid
  calibrator could show with an unlucky calibration set, so it is not proof of a fault. The chip
  says so ("below 90%, within calibration slack");
* **broken** when ``hi < f``: below anything a valid calibrator at its worst plausible draw
  would give; or whenever an open coverage-drop warning names the calibrator (a sequential test
  of the promise itself, with its false-alarm bound; acknowledged or not).

Why not "holding" down to the floor, as before: a band wholly under the target says, with 95%
confidence, that fewer rows are covered than promised. Calling that holding hides exactly what
the strip is for (a user saw "holding" for 25 batches at 0.822 [0.804, 0.838] against "90%
coverage (per class)"). The slack decides between amber and red only: it says how the shortfall
may have arisen, not that the promise is kept.

**A per-class promise** (``mondrian="label"``: ``1 − α`` within every true class) is judged on
its worst class. Only classes with at least :data:`MIN_CLASS_ROWS` (30) labelled rows among
the pooled batches are judged: with fewer, one row moves the class's coverage by more than 3
points and its band spans most of [0.7, 1] at ``t = 0.9``, so it says little either way; such
classes wait for labels. With ``K`` classes judged, each class's band is taken at confidence
``1 − 0.05 / K`` (Bonferroni: the ``K`` bands hold simultaneously with probability ≥ 0.95, so
picking the lowest one does not make a fluke look like a fault). The *worst class* is the one
with the lowest upper end ``hi_c`` (ties: lower coverage, then name); the rule above applied to
``hi_c`` with the calibrator's target and floor gives the class verdict. The marginal band is
judged too; the chip takes the worse of the two verdicts, and names the worst class whenever its
verdict is at least as bad ("class 'late': 0.670 [0.600, 0.740], below 0.821 (90% less its
calibration slack)"). With no class judged yet, the marginal band alone decides.

**The other rules**, in order after the band: the latest labelled batch's own band wholly below
the floor, another open warning naming the calibrator (its conformity martingale), or an open
warning naming no calibrator (a label-free shift of the model's inputs or confidence) make a
holding promise **at risk**; with no labelled row in the last batches it is **waiting**. A risk
estimator is broken when the observed error's band lies wholly on the wrong side of its estimate
(see :func:`health`).

Comparisons of a band's end with the target or floor allow a few units in the last place of a
float64 (:data:`TOLERANCE`): both are computed (``1 − α``, a Beta quantile), and a band's end
equal to the target up to rounding reaches it.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from calwatch.engine.metrics.intervals import clopper_pearson
from calwatch.engine.shift.betting import calibration_null_rate, has_finite_threshold
from calwatch.engine.shift.monitors import DEFAULT_CALIBRATION_DELTA

if TYPE_CHECKING:
    import polars as pl

    from calwatch.monitor.monitor import Monitor

#: Labelled batches pooled for a calibrator's state (the most recent ones with labels).
RECENT_BATCHES = 5
#: Batches the sparkline shows; the state looks no further back (older labels say nothing of now).
SPARK_BATCHES = 20
#: The states, best first. ``waiting``: no labelled row among the recent batches and no warning.
STATES = ("holding", "waiting", "at risk", "broken")
#: Confidence of the recent band; a per-class promise's ``K`` class bands share its error rate.
BAND_CONFIDENCE = 0.95
#: Labelled rows (among the pooled batches) a class needs before a per-class promise is judged on it.
MIN_CLASS_ROWS = 30
#: Relative slack of the band-versus-target comparisons: a few float64 units in the last place.
TOLERANCE = 4 * sys.float_info.epsilon
#: Summary kinds whose promise is a coverage target (``target`` column).
_COVERAGE_KINDS = ("sets", "regression")
#: The verdicts of a coverage band, mildest first.
_VERDICTS = ("holding", "at risk", "broken")


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
def _band(k: int, n: int, confidence: float = BAND_CONFIDENCE) -> tuple[float | None, float | None]:
    """The Clopper-Pearson band of ``k / n`` (remembered: a live view asks for the same counts)."""
    lo, hi = clopper_pearson([k], [n], confidence)
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


def per_class_calibrators(monitor: Monitor) -> list[str]:
    """The calibrators whose promise holds within every true class (``mondrian="label"`` sets).

    :func:`health` judges these on their worst class (from :meth:`Monitor.class_coverage`).
    """
    targets = monitor.targets() if callable(getattr(monitor, "targets", None)) else {}
    return [
        key
        for key, cal in monitor.calibrators.items()
        if getattr(cal, "mondrian", None) == "label" and key in targets
    ]


def reaches(x: float, reference: float) -> bool:
    """Whether ``x ≥ reference``, up to :data:`TOLERANCE` (relative, at least absolute near 0).

    Examples
    --------
    >>> reaches(0.9, 1 - 0.1), reaches(0.9 - 1e-17, 0.9), reaches(0.8999, 0.9)
    (True, True, False)
    """
    return x >= reference - TOLERANCE * max(1.0, abs(reference))


def coverage_state(hi: float, target: float, floor: float) -> str:
    """A coverage band's verdict from its upper end: holding, at risk or broken (see the module notes).

    Parameters
    ----------
    hi : float
        Upper end of the band.
    target : float
        The promised coverage ``t``.
    floor : float
        The lowest coverage the calibration draw allows ``f ≤ t`` (:func:`floors`).

    Returns
    -------
    str
        ``"holding"`` when ``hi ≥ t``, ``"at risk"`` when ``f ≤ hi < t``, ``"broken"`` when
        ``hi < f``.

    Examples
    --------
    >>> [coverage_state(hi, 0.9, 0.863) for hi in (0.905, 0.9, 0.894, 0.863, 0.838)]
    ['holding', 'holding', 'at risk', 'at risk', 'broken']
    """
    if reaches(hi, target):
        return "holding"
    return "at risk" if reaches(hi, floor) else "broken"


@dataclass(frozen=True)
class ClassBand:
    """The worst class of a per-class promise: its pooled counts and band, and how it was chosen.

    Attributes
    ----------
    name : str
        The class.
    n_covered, n_labelled : int
        Covered and labelled rows of the class among the pooled batches.
    lo, hi : float
        Its Clopper-Pearson band at ``confidence``.
    confidence : float
        ``1 − (1 − BAND_CONFIDENCE) / n_classes`` (Bonferroni over the classes judged).
    n_classes : int
        Classes judged (those with at least ``min_rows`` labelled rows).
    """

    name: str
    n_covered: int
    n_labelled: int
    lo: float
    hi: float
    confidence: float
    n_classes: int

    @property
    def value(self) -> float:
        """The class's pooled coverage."""
        return self.n_covered / self.n_labelled


def worst_class(
    counts: Mapping[str, tuple[int, int]],
    *,
    min_rows: int = MIN_CLASS_ROWS,
    confidence: float = BAND_CONFIDENCE,
) -> ClassBand | None:
    """The class with the lowest band among those with ``min_rows`` labelled rows (None: none has).

    Parameters
    ----------
    counts : mapping of str to (int, int)
        Per class, ``(n_covered, n_labelled)`` pooled over the recent batches.
    min_rows : int
        Labelled rows a class needs to be judged (≥ 1).
    confidence : float
        Family-wise confidence: each of the ``K`` judged classes' bands is taken at
        ``1 − (1 − confidence) / K``.

    Returns
    -------
    ClassBand or None
        The judged class with the lowest upper end (ties: lower coverage, then name).

    Examples
    --------
    >>> w = worst_class({"on time": (95, 100), "late": (20, 30), "rare": (0, 5)})
    >>> w.name, w.n_classes, w.confidence, round(w.hi, 3)
    ('late', 2, 0.975, 0.844)
    """
    if min_rows < 1:
        msg = f"min_rows must be >= 1; got {min_rows}"
        raise ValueError(msg)
    judged = {name: kn for name, kn in counts.items() if kn[1] >= min_rows}
    if not judged:
        return None
    level = 1.0 - (1.0 - confidence) / len(judged)
    bands = []
    for name, (k, n) in judged.items():
        lo, hi = _band(k, n, level)
        assert lo is not None
        assert hi is not None
        bands.append(ClassBand(name, k, n, lo, hi, level, len(judged)))
    return min(bands, key=lambda b: (b.hi, b.value, b.name))


def health(
    summary: pl.DataFrame | Iterable[Mapping[str, Any]],
    warnings: pl.DataFrame | Iterable[Mapping[str, Any]],
    *,
    calibrators: Sequence[str] | None = None,
    qualifiers: Mapping[str, str] | None = None,
    floors: Mapping[str, float] | None = None,
    classes: pl.DataFrame | Iterable[Mapping[str, Any]] | None = None,
    per_class: Collection[str] = (),
    recent: int = RECENT_BATCHES,
    spark: int = SPARK_BATCHES,
    stated: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Each calibrator's promise and state: holding, at risk, broken (or waiting for labels).

    Only the last ``spark`` batches of the stream count (the sparkline's); of those, the most
    recent ``recent`` batches with labels are pooled (labelled rows summed) into the *recent
    band*: the 95% Clopper-Pearson interval of the pooled coverage (of the pooled error rate for
    a risk estimator). The state, first rule that applies (the module notes give the math and
    the why):

    1. **broken**: an open coverage-drop warning names the calibrator (``"<calibrator>: coverage
       drop"`` or ``"...: class coverage drop"``: a test of the promise itself, with its
       false-alarm bound; acknowledged or not, since acknowledging does not mend coverage), or
       its recent band lies wholly on the wrong side of its promise beyond any slack (coverage:
       upper end < its floor, the target less the slack its calibration draw allows, see
       :func:`floors`, for the pooled band or, for a per-class promise, its worst class's; risk:
       the error's lower bound > the estimate on the same labelled rows, or, for an estimate of
       the error itself rather than an upper one (``estimate_promise`` without "upper"), its
       upper bound < the estimate);
    2. **at risk**: the coverage band (or the worst class's) lies wholly below the target but
       within the calibration slack (floor ≤ upper end < target); the latest labelled batch's
       own band lies wholly on the wrong side (coverage: below the floor); another open warning
       names it (its conformity martingale: the scores behind the promise changed, which may or
       may not cost coverage); or an open warning names no calibrator (a label-free shift of the
       model's inputs or confidence: it threatens every promise, whatever the labels say);
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
    classes : polars.DataFrame or iterable of mappings, optional
        Rows of :meth:`Monitor.class_coverage` per batch (``batch, calibrator, class,
        n_labelled, n_covered``) for the batches of ``summary`` at least; read for the
        calibrators of ``per_class`` only.
    per_class : collection of str
        Calibrators whose promise holds within every class (see :func:`per_class_calibrators`):
        judged on their worst class too (:func:`worst_class`).
    recent : int
        Labelled batches pooled into the recent band.
    spark : int
        Batches the sparkline shows and the state looks back over.
    stated : mapping of str to mapping, optional
        Each calibrator's promise before any batch (``{"kind": ..., "target": ...}``, what a
        summary row would say): a calibrated monitor states its promises while it waits for the
        first batch, instead of "no stated promise".

    Returns
    -------
    list of dict
        One row per calibrator, keyed by its name: ``key, calibrator, kind, promise, state,
        reason`` (one line: why), ``value, lo, hi`` (pooled recent coverage, or error rate, and
        its band), ``reference`` (the floor it is judged against, or the estimated error of the
        same rows), ``target`` (the promised coverage, null for other kinds),
        ``n_labelled, n_batches, first_batch, last_batch`` (what was pooled), ``episodes``
        (open warnings naming it), ``spark`` (``[batch, value, reference]`` per batch, value
        null without labels), and for a per-class promise its worst class: ``worst_class,
        class_value, class_lo, class_hi, class_n_labelled, class_confidence, n_classes`` (null
        for other promises, or while no class has :data:`MIN_CLASS_ROWS` labelled rows).

    Examples
    --------
    >>> rows = [{"batch": b, "calibrator": "lac", "kind": "sets", "target": 0.9, "n_rows": 100,
    ...          "n_labelled": 100, "n_covered": 70 if b > 1 else 91} for b in range(4)]
    >>> [(h["promise"], h["state"]) for h in health(rows, [])]
    [('90% coverage', 'broken')]
    >>> h = health(rows[:2], [])[0]
    >>> h["state"], h["reason"]
    ('holding', 'coverage 0.910 [0.861, 0.946] reaches 90% over the last 2 labelled batches (200 rows)')
    >>> h = health(rows[:2], [], floors={"lac": 0.7}, recent=1)[0]  # batch 1 alone: 91 / 100
    >>> h["state"], h["reason"]
    ('holding', 'coverage 0.910 [0.836, 0.958] reaches 90% over the last 1 labelled batch (100 rows)')
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
    named, model_wide = _open_warnings(warnings, order)
    by_class = _class_counts(classes, [key for key in order if key in per_class])
    quals = qualifiers or {}
    lows = floors or {}
    promised = stated or {}  # before any batch: what a first summary row would say
    return [
        _chip(
            key,
            by_cal[key],
            _Warnings(named[key], model_wide),
            _Judge.of(by_cal[key] or [promised.get(key, {})], lows.get(key), per_class=key in per_class),
            by_class.get(key, {}),
            quals.get(key, ""),
            recent,
        )
        for key in order
    ]


def _open_warnings(
    warnings: pl.DataFrame | Iterable[Mapping[str, Any]], order: Sequence[str]
) -> tuple[dict[str, list[Mapping[str, Any]]], list[Mapping[str, Any]]]:
    """Open warnings by the calibrator they name, and those naming none (model-wide)."""
    named: dict[str, list[Mapping[str, Any]]] = {key: [] for key in order}
    model_wide: list[Mapping[str, Any]] = []
    for w in _rows(warnings):
        if not w.get("open"):
            continue
        owner = named_calibrator(str(w.get("name", "")), order)
        (named[owner] if owner is not None else model_wide).append(w)
    return named, model_wide


#: Per calibrator, batch and class: ``(n_covered, n_labelled)``.
_ClassCounts = dict[str, dict[int, dict[str, tuple[int, int]]]]


def _class_counts(
    classes: pl.DataFrame | Iterable[Mapping[str, Any]] | None, keys: Collection[str]
) -> _ClassCounts:
    """Covered and labelled rows per calibrator of ``keys``, batch and class (of ``class_coverage``)."""
    out: _ClassCounts = {key: {} for key in keys}
    if classes is None or not keys:
        return out
    for r in _rows(classes):
        key, batch = str(r.get("calibrator")), r.get("batch")
        if key not in out or batch is None or r.get("class") is None:
            continue
        out[key].setdefault(int(batch), {})[str(r["class"])] = (
            _count(r, "n_covered"),
            _count(r, "n_labelled"),
        )
    return out


def _pooled_classes(
    by_batch: Mapping[int, Mapping[str, tuple[int, int]]], batches: Iterable[int]
) -> dict[str, tuple[int, int]]:
    """Per class, covered and labelled rows summed over ``batches``."""
    out: dict[str, tuple[int, int]] = {}
    for b in batches:
        for name, (k, n) in by_batch.get(b, {}).items():
            k0, n0 = out.get(name, (0, 0))
            out[name] = (k0 + k, n0 + n)
    return out


def _tests_promise(name: str) -> bool:
    """Whether a warning comes from a test of coverage itself (not of the scores behind it)."""
    return "coverage drop" in name


def _since(w: Mapping[str, Any]) -> str:
    first = w.get("first_batch")
    return f"{w.get('name', '')} since batch {first}" if first is not None else str(w.get("name", ""))


@dataclass(frozen=True)
class _Warnings:
    """The open warnings a chip looks at: those naming its calibrator, and the model-wide ones."""

    named: list[Mapping[str, Any]]
    model_wide: list[Mapping[str, Any]]


@dataclass(frozen=True)
class _Measure:
    """Pooled value (coverage or error rate), its band, and what it is judged against."""

    value: float
    lo: float | None
    hi: float | None
    reference: float | None


@dataclass(frozen=True)
class _Judge:
    """What a calibrator promises and how its rows are measured against it."""

    kind: str
    target: float | None
    floor: float | None
    upper: bool
    per_class: bool

    @classmethod
    def of(cls, rows: Sequence[Mapping[str, Any]], floor: float | None, *, per_class: bool) -> _Judge:
        """The promise read from a calibrator's rows (the latest one's kind and target)."""
        kind = str(rows[-1].get("kind") or "") if rows else ""
        target = _num(rows[-1], "target") if rows else None
        # A risk estimate promises an upper bound (InvCP: "upper estimate (conservative)") or the
        # error itself (a calibration map): the first breaks one way, the second both ways.
        upper = kind != "risk" or not rows or "upper" in str(rows[-1].get("estimate_promise") or "upper")
        floor = target if floor is None or target is None else min(floor, target)
        return cls(kind, target, floor, upper, per_class and kind in _COVERAGE_KINDS)

    @property
    def coverage(self) -> bool:
        """Whether the promise is a coverage target."""
        return self.kind in _COVERAGE_KINDS and self.target is not None

    @property
    def risk(self) -> bool:
        """Whether the promise is a risk estimate."""
        return self.kind == "risk"

    @property
    def what(self) -> str:
        """What the band measures, in words: "coverage" or "error"."""
        return "coverage" if self.coverage else "error"

    def measure(self, part: Sequence[Mapping[str, Any]]) -> _Measure | None:
        """Value, band and reference of pooled rows: coverage vs its floor, or error vs its estimate."""
        m = sum(_count(r, "n_labelled") for r in part)
        if m == 0:
            return None
        if self.coverage:
            k = sum(_count(r, "n_covered") for r in part)
            return _Measure(k / m, *_band(k, m), self.floor)
        if self.risk:
            errors = sum(round((_num(r, "observed_error") or 0.0) * _count(r, "n_labelled")) for r in part)
            est = sum((_num(r, "estimated_error_labelled") or 0.0) * _count(r, "n_labelled") for r in part)
            return _Measure(errors / m, *_band(errors, m), est / m)
        return None

    def coverage_verdict(self, x: _Measure, worst: ClassBand | None, over: str) -> tuple[str, str]:
        """Holding, at risk or broken of a coverage promise, with its reason (worst class named)."""
        assert self.target is not None
        assert self.floor is not None
        assert x.hi is not None
        marginal = coverage_state(x.hi, self.target, self.floor)
        text = f"{self._said(f'coverage {_f(x.value)} [{_f(x.lo)}, {_f(x.hi)}]', marginal)} {over}"
        if not self.per_class:
            return marginal, text
        if worst is None:
            return marginal, f"{text}; no class has {MIN_CLASS_ROWS} labelled rows yet"
        by_class = coverage_state(worst.hi, self.target, self.floor)
        if _VERDICTS.index(marginal) > _VERDICTS.index(by_class):
            return marginal, text
        band = f"class '{worst.name}': {_f(worst.value)} [{_f(worst.lo)}, {_f(worst.hi)}]"
        which = (
            f"worst of {worst.n_classes} {'class' if worst.n_classes == 1 else 'classes'} with"
            f" ≥ {MIN_CLASS_ROWS} labelled rows, {_pct(worst.confidence)} bands (Bonferroni)"
        )
        return by_class, f"{self._said(band, by_class)}; {which} {over}"

    def _said(self, band: str, verdict: str) -> str:
        """A band and its verdict in words: "... reaches 90%", "..., below 90%, within calibration slack"."""
        assert self.target is not None
        assert self.floor is not None
        if verdict == "holding":
            return f"{band} reaches {_pct(self.target)}"
        if verdict == "at risk":
            return f"{band}, below {_pct(self.target)}, within calibration slack (floor {self.floor:.3f})"
        if self.floor < self.target:
            return f"{band}, below {self.floor:.3f} ({_pct(self.target)} less its calibration slack)"
        return f"{band}, below {_pct(self.target)}"

    def risk_side(self, x: _Measure | None) -> str | None:
        """Where a risk estimator's observed error lies wholly: "above" or "below" its estimate, or None."""
        if x is None or x.reference is None:
            return None
        if x.lo is not None and x.lo > x.reference:  # the error is surely above its estimate
            return "above"
        if not self.upper and x.hi is not None and x.hi < x.reference:
            return "below"
        return None


def _chip(
    key: str,
    rows: list[Mapping[str, Any]],
    warnings: _Warnings,
    judge: _Judge,
    class_counts: Mapping[int, Mapping[str, tuple[int, int]]],
    qualifier: str,
    recent: int,
) -> dict[str, Any]:
    n_labelled = [_count(r, "n_labelled") for r in rows]
    labelled = [r for r, m in zip(rows, n_labelled, strict=True) if m > 0]
    pooled = labelled[-recent:]
    measured = judge.measure(pooled)
    worst = (
        worst_class(_pooled_classes(class_counts, (int(r["batch"]) for r in pooled)))
        if judge.per_class and measured is not None
        else None
    )
    state, reason = _verdict(rows, labelled, pooled, warnings, judge, measured, worst)
    n = sum(_count(r, "n_labelled") for r in pooled)
    return {
        "key": key,
        "calibrator": key,
        "kind": judge.kind,
        "promise": _promise(judge.kind, judge.target, rows, recent, qualifier, judge.upper),
        "state": state,
        "reason": reason,
        "value": measured.value if measured else None,
        "lo": measured.lo if measured else None,
        "hi": measured.hi if measured else None,
        "reference": measured.reference if measured else None,
        "target": judge.target,
        "n_labelled": n,
        "n_batches": len(pooled),
        "first_batch": pooled[0]["batch"] if pooled else None,
        "last_batch": pooled[-1]["batch"] if pooled else None,
        "episodes": [int(w["episode"]) for w in warnings.named if w.get("episode") is not None],
        "spark": _spark(rows, n_labelled, judge),
        "worst_class": worst.name if worst else None,
        "class_value": worst.value if worst else None,
        "class_lo": worst.lo if worst else None,
        "class_hi": worst.hi if worst else None,
        "class_n_labelled": worst.n_labelled if worst else None,
        "class_confidence": worst.confidence if worst else None,
        "n_classes": worst.n_classes if worst else None,
    }


def _verdict(
    rows: list[Mapping[str, Any]],
    labelled: list[Mapping[str, Any]],
    pooled: list[Mapping[str, Any]],
    warnings: _Warnings,
    judge: _Judge,
    measured: _Measure | None,
    worst: ClassBand | None,
) -> tuple[str, str]:
    """The state and its reason, first rule that applies (see :func:`health`)."""
    n = sum(_count(r, "n_labelled") for r in pooled)
    over = f"over the last {len(pooled)} labelled {'batch' if len(pooled) == 1 else 'batches'} ({n:,} rows)"
    drops = [w for w in warnings.named if _tests_promise(str(w.get("name", "")))]
    if drops:
        return "broken", "open warning: " + "; ".join(_since(w) for w in drops)
    band = _band_verdict(judge, measured, worst, over)
    if band is not None and band[0] != "holding":
        return band
    latest = _latest_below(judge, labelled)
    if latest:
        return "at risk", latest
    if warnings.named:
        return "at risk", "open warning: " + "; ".join(_since(w) for w in warnings.named)
    if warnings.model_wide:
        return "at risk", "open warning on the model: " + "; ".join(_since(w) for w in warnings.model_wide)
    if not rows:
        return "waiting", "no batches yet"
    if band is not None:
        return band
    if judge.coverage or judge.risk:
        return "waiting", f"no labels in the last {len(rows)} batches yet"
    return "holding", "no open warning (no coverage to check)"


def _band_verdict(
    judge: _Judge, measured: _Measure | None, worst: ClassBand | None, over: str
) -> tuple[str, str] | None:
    """The recent band's verdict and reason (None: nothing measured, or a kind without a number)."""
    if measured is None:
        return None
    if judge.coverage:
        return judge.coverage_verdict(measured, worst, over)
    return _risk_verdict(judge, measured, over) if judge.risk else None


def _risk_verdict(judge: _Judge, x: _Measure, over: str) -> tuple[str, str]:
    """Broken or holding of a risk estimator's pooled error against its estimate."""
    band = f"error {_f(x.value)} [{_f(x.lo)}, {_f(x.hi)}]"
    side = judge.risk_side(x)
    if side is not None:
        return "broken", f"{band} {side} its estimate {_f(x.reference)} {over}"
    return "holding", f"{band} reaches its estimate {_f(x.reference)} {over}"


def _latest_below(judge: _Judge, labelled: list[Mapping[str, Any]]) -> str:
    """Why the latest labelled batch alone is on the wrong side ("" when it is not).

    Coverage: its own band wholly below the floor; risk: as for the pooled band.
    """
    x = judge.measure(labelled[-1:])
    if x is None:
        return ""
    b = labelled[-1]["batch"]
    band = f"batch {b}: {judge.what} {_f(x.value)} [{_f(x.lo)}, {_f(x.hi)}]"
    if judge.coverage:
        assert judge.floor is not None
        assert judge.target is not None
        if x.hi is None or reaches(x.hi, judge.floor):
            return ""
        slack = f" ({_pct(judge.target)} less its calibration slack)" if judge.floor < judge.target else ""
        return f"{band} below {judge.floor:.3f}{slack}" if slack else f"{band} below {_pct(judge.target)}"
    side = judge.risk_side(x)
    return f"{band} {side} its estimate {_f(x.reference)}" if side else ""


def _spark(rows: list[Mapping[str, Any]], n_labelled: list[int], judge: _Judge) -> list[list[Any]]:
    """``[batch, value, reference]`` per batch: coverage and target, error and estimate, or kept accuracy."""
    out: list[list[Any]] = []
    for r, m in zip(rows, n_labelled, strict=True):
        if judge.coverage:
            out.append([r["batch"], _count(r, "n_covered") / m if m else None, judge.target])
        elif judge.risk:
            out.append([r["batch"], _num(r, "observed_error") if m else None, _num(r, "estimated_error")])
        else:
            out.append([r["batch"], _num(r, "kept_accuracy"), None])
    return out


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
        if est is not None:  # the scope of that number, apart from the card's whole stream
            scope = f"last {len(part)} batch{'es' if len(part) != 1 else ''}"
            qualifier = f"{qualifier}, {scope}" if qualifier else scope
    elif kind == "selective":
        text = "calibrated kept rows"
    else:
        text = "no stated promise"
    return f"{text} ({qualifier})" if qualifier else text
