"""Regression CDFs (paper 001; ALGORITHMS.md §3): modular conformal calibration of any regressor's output.

A calibrator of this kind (``cw.ModularConformalCalibrator``) turns each row's base prediction
into a calibrated predictive CDF. Its per-row results are the central credible intervals at the
monitor's levels (and the median), with the base prediction and the random interpolation's draw
kept so a late label is scored with exactly the CDF its row was shown. Its batch statistics are
the intervals' widths and, once labelled, their coverage, the PIT histogram and the CRPS: sums,
a monoid like every kind's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.core.codec import SnapshotError
from calwatch.core.invariants import (
    count_problems,
    counts_problems,
    floats_problems,
    is_count,
    is_counts,
    number_problems,
    order_problems,
    relative_tolerance,
    same_rows_problems,
)
from calwatch.kinds.base import CalibratorKind, IntArray
from calwatch.stream.records import NO_LABEL, BatchRows
from calwatch.stream.row_codec import array_of, float_series

FloatArray = npt.NDArray[np.float64]
#: Bins of the PIT histogram (uniform when the CDFs are calibrated).
PIT_BINS = 10


@dataclass
class RegressionBatchStats:
    """One batch and calibrator: interval widths, and once labelled, coverage, PIT counts, CRPS."""

    levels: tuple[float, ...]
    n_rows: int
    width_sum: FloatArray  # per level, Σ (upper − lower) over all rows
    n_labelled: int = 0
    covered: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    pit_counts: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(PIT_BINS, dtype=np.int64))
    crps_sum: float = 0.0

    #: Its columns in a snapshot's ``batches.parquet`` (``n_rows`` is the batch's own).
    SNAPSHOT_COLUMNS: ClassVar[dict[str, Any]] = {
        "n_labelled": pl.Int64, "levels": pl.List(pl.Float64), "width_sum": pl.List(pl.Float64),
        "covered": pl.List(pl.Int64), "pit_counts": pl.List(pl.Int64), "crps_sum": pl.Float64,
    }  # fmt: skip

    @classmethod
    def empty(cls, n_classes: int = 0) -> RegressionBatchStats:
        """Statistics of no rows (no levels yet: a merge takes the other side's)."""
        return cls(levels=(), n_rows=0, width_sum=np.zeros(0, dtype=np.float64))

    def merge(self, other: RegressionBatchStats) -> RegressionBatchStats:
        """Sums over the rows of both (a monoid: :meth:`empty` is its identity).

        ``covered`` and ``width_sum`` may be empty on one side (no labels yet; a label update
        has no widths): the other side's are taken as they are.

        Examples
        --------
        >>> a = RegressionBatchStats(levels=(0.9,), n_rows=2, width_sum=np.array([3.0]))
        >>> b = RegressionBatchStats.labelled({"pit": np.array([0.5]), "covered_90": np.array([True]),
        ...                                    "crps": np.array([0.25])}, (0.9,))
        >>> ab = a.merge(b)
        >>> ab.n_rows, ab.n_labelled, ab.covered.tolist(), ab.crps_sum, ab.width_sum.tolist()
        (2, 1, [1], 0.25, [3.0])
        """
        return RegressionBatchStats(
            levels=other.levels or self.levels,
            n_rows=self.n_rows + other.n_rows,
            width_sum=_add_sums(self.width_sum, other.width_sum),
            n_labelled=self.n_labelled + other.n_labelled,
            covered=_add_sums(self.covered, other.covered),
            pit_counts=self.pit_counts + other.pit_counts,
            crps_sum=self.crps_sum + other.crps_sum,
        )

    @classmethod
    def labelled(
        cls, scored: dict[str, FloatArray], levels: tuple[float, ...], sign: int = 1
    ) -> RegressionBatchStats:
        """What scored labelled rows add to their batch's statistics (``sign=-1``: take away)."""
        pit = scored["pit"]
        covered = np.array([int(scored[f"covered_{pct(level)}"].sum()) for level in levels], dtype=np.int64)
        bins = np.minimum((pit * PIT_BINS).astype(np.int64), PIT_BINS - 1)
        return cls(
            levels=levels,
            n_rows=0,
            width_sum=np.zeros(0, dtype=np.float64),
            n_labelled=sign * int(pit.shape[0]),
            covered=sign * covered,
            pit_counts=sign * np.bincount(bins, minlength=PIT_BINS).astype(np.int64),
            crps_sum=sign * float(scored["crps"].sum()),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RegressionBatchStats):
            return NotImplemented
        return (
            self.levels == other.levels
            and self.n_rows == other.n_rows
            and self.n_labelled == other.n_labelled
            and self.crps_sum == other.crps_sum
            and all(
                np.array_equal(getattr(self, f), getattr(other, f))
                for f in ("width_sum", "covered", "pit_counts")
            )
        )

    def to_row(self) -> dict[str, Any]:
        """One row of ``batches.parquet``."""
        return {
            "kind": "regression", "n_labelled": self.n_labelled, "levels": list(self.levels),
            "width_sum": self.width_sum.tolist(), "covered": self.covered.tolist(),
            "pit_counts": self.pit_counts.tolist(), "crps_sum": self.crps_sum,
        }  # fmt: skip

    def check(self, n_rows: int) -> list[str]:
        """Violations of these statistics' invariants, for a batch of ``n_rows`` rows (empty when sound).

        ``levels`` is a non-empty tuple of levels in (0, 1); ``self.n_rows`` is the batch's
        ``n_rows``; ``n_labelled ≤ n_rows``; ``width_sum`` has one entry per level, never NaN
        nor negative (``+inf`` for improper CDFs); ``covered`` is empty before any label, else
        one count per level, each at most ``n_labelled``; ``pit_counts`` has ``PIT_BINS``
        non-negative counts summing to ``n_labelled``; ``crps_sum`` is not NaN nor negative.

        Parameters
        ----------
        n_rows : int
            Rows of the batch these statistics describe.

        Returns
        -------
        list of str
            One readable sentence per violation, naming the field, e.g.
            ``"covered[1] (7) > n_labelled (5)"``.

        Examples
        --------
        >>> stats = RegressionBatchStats(levels=(0.5, 0.9), n_rows=2, width_sum=np.array([7.0, 12.0]))
        >>> stats.check(2)
        []
        >>> stats.crps_sum = float("nan")
        >>> stats.check(2)
        ['crps_sum (nan) is NaN']
        """
        problems = count_problems("n_rows", n_rows) + same_rows_problems(self.n_rows, n_rows)
        n_levels = None
        if not (isinstance(self.levels, tuple) and self.levels):
            problems.append(f"levels ({self.levels!r}) is not a non-empty tuple of levels")
        else:
            n_levels = len(self.levels)
            for i, level in enumerate(self.levels):
                wrong = number_problems(f"levels[{i}]", level)
                if not wrong and not 0.0 < float(level) < 1.0:
                    wrong = [f"levels[{i}] ({float(level)!r}) is not in (0, 1)"]
                problems += wrong
        problems += count_problems("n_labelled", self.n_labelled)
        problems += order_problems([("n_labelled", self.n_labelled), ("n_rows", n_rows)])
        tolerance = relative_tolerance(n_rows)
        problems += floats_problems("width_sum", self.width_sum, allow_inf=True, low=-tolerance)
        if (
            isinstance(self.width_sum, np.ndarray)
            and n_levels is not None
            and self.width_sum.shape != (n_levels,)
        ):
            problems.append(
                f"width_sum has shape {self.width_sum.shape}, not one entry per level ({n_levels})"
            )
        covered_empty = isinstance(self.covered, np.ndarray) and self.covered.shape == (0,)
        if covered_empty:
            if is_count(self.n_labelled) and self.n_labelled > 0:
                problems.append(f"covered is empty but n_labelled is {self.n_labelled}")
        else:
            problems += counts_problems("covered", self.covered, n_levels, "the number of levels")
            if is_counts(self.covered) and is_count(self.n_labelled):
                above = np.flatnonzero(self.covered > self.n_labelled)
                if above.size:
                    i = int(above[0])
                    problems.append(f"covered[{i}] ({int(self.covered[i])}) > n_labelled ({self.n_labelled})")
        problems += counts_problems("pit_counts", self.pit_counts, PIT_BINS, "PIT_BINS")
        if is_counts(self.pit_counts, PIT_BINS) and is_count(self.n_labelled):
            total = int(self.pit_counts.sum())
            if total != self.n_labelled:
                problems.append(f"pit_counts sum to {total}, not n_labelled ({self.n_labelled})")
        problems += number_problems("crps_sum", self.crps_sum, low=0.0, tolerance=tolerance, allow_inf=True)
        return problems


def pct(level: float) -> str:
    """A level as it appears in column names: 0.9 -> "90", 0.975 -> "97_5"."""
    return f"{100 * float(level):g}".replace(".", "_")


def row_fields(levels: tuple[float, ...]) -> list[str]:
    """Per-row results a regression monitor keeps for each calibrator (besides ``pred`` and ``u``).

    Examples
    --------
    >>> row_fields((0.5, 0.9))
    ['median', 'lower_50', 'upper_50', 'lower_90', 'upper_90']
    """
    return ["median", *(f"{side}_{pct(level)}" for level in levels for side in ("lower", "upper"))]


@dataclass(frozen=True)
class RegressionOutputs:
    """A regression batch as the monitor hands it to its calibrators.

    ``pred`` is the base prediction as given, ``kept`` the copy kept for the window (shared by
    the calibrators), ``levels`` the monitor's credible levels and ``draws`` the generator of the
    random interpolation's draws (the monitor's copy, kept only once the batch is accepted).
    """

    pred: Any
    kept: Any
    levels: tuple[float, ...]
    draws: np.random.Generator


@dataclass(frozen=True)
class RegressionRows:
    """A calibrator's per-row results on a batch, and what scoring a late label needs."""

    fields: dict[str, FloatArray]  # median and lower/upper per level (:func:`row_fields`)
    u: FloatArray | None  # the random interpolation's draws (None for other interpolations)
    pred: Any  # the base predictions (a list of members for ensembles)
    levels: tuple[float, ...]
    calibrator: Any

    def take(self, rows: IntArray) -> Self:
        """The results of the given rows."""
        pred = [p[rows] for p in self.pred] if isinstance(self.pred, list) else self.pred[rows]
        return type(self)(
            {k: v[rows] for k, v in self.fields.items()},
            None if self.u is None else self.u[rows],
            pred,
            self.levels,
            self.calibrator,
        )


class RegressionKind(CalibratorKind[RegressionRows, RegressionBatchStats]):
    """Modular conformal calibrators of a regression monitor: ``fit(pred, y)``, ``predict_rows``."""

    name = "regression"
    summary_kind = "regression"
    task = "regression"
    stats_type = RegressionBatchStats
    summary_columns: ClassVar[dict[str, Any]] = {}
    panels: ClassVar[tuple[str, ...]] = ("interval_coverage", "interval_width", "pit", "fan")
    rows_field = "regression"

    def claims(self, calibrator: Any) -> bool:
        """Calibrators with ``predict_rows`` (calibrated CDFs per row)."""
        return callable(getattr(calibrator, "predict_rows", None))

    def fit(
        self, key: str, calibrator: Any, outputs: Any, y: Any, *, categories: Any, reference: Any
    ) -> None:
        """Fit on the calibration rows' base predictions and true values."""
        calibrator.fit(outputs.pred, y)

    def apply(self, key: str, calibrator: Any, outputs: RegressionOutputs, categories: Any) -> RegressionRows:
        """The credible intervals of each row (drawing the random interpolation's ``u`` first)."""
        m = _n_rows(outputs.kept)
        u = outputs.draws.uniform(size=m) if calibrator.interpolation == "random" else None
        out = calibrator.predict_rows(outputs.pred, levels=outputs.levels, u=u)
        fields = {name: out[name] for name in row_fields(outputs.levels)}
        return RegressionRows(fields, u, outputs.kept, outputs.levels, calibrator)

    def observed(self, results: RegressionRows, n_classes: int) -> RegressionBatchStats:
        """Rows and the widths of their intervals."""
        widths = np.array(
            [
                (results.fields[f"upper_{pct(v)}"] - results.fields[f"lower_{pct(v)}"]).sum()
                for v in results.levels
            ]
        )
        m = next(iter(results.fields.values())).shape[0]
        return RegressionBatchStats(levels=results.levels, n_rows=int(m), width_sum=widths)

    def labelled(
        self, results: RegressionRows, probs: Any, labels: Any, sign: int = 1
    ) -> RegressionBatchStats:
        """PIT, interval coverage and CRPS of rows with these true values (scored with their CDFs)."""
        return RegressionBatchStats.labelled(self.score(results, labels), results.levels, sign)

    def score(self, results: RegressionRows, y: FloatArray) -> dict[str, FloatArray]:
        """Each row's PIT, interval hits and CRPS for true values ``y``, with the CDF it was shown."""
        scored: dict[str, FloatArray] = results.calibrator.predict_rows(
            results.pred, y, levels=results.levels, u=results.u
        )
        return scored

    def keep(self, rows: BatchRows, key: str, results: RegressionRows) -> None:
        """The draws, the intervals and the (shared) base predictions go to ``rows.regression``."""
        rows.regression.setdefault("per_calibrator", {})[key] = {
            "u": results.u,
            **results.fields,
            "pred": results.pred,
        }

    def results_of(self, rows: BatchRows, key: str, calibrator: Any) -> RegressionRows:
        """The results kept for the batch (its levels are the monitor's, kept beside them)."""
        saved = rows.regression["per_calibrator"][key]
        levels = tuple(rows.regression["levels"])
        fields = {name: saved[name] for name in row_fields(levels)}
        return RegressionRows(fields, saved["u"], saved["pred"], levels, calibrator)

    def write_rows(self, rows: Sequence[BatchRows]) -> tuple[dict[str, pl.Series], dict[str, Any]]:
        """True values, base predictions and each calibrator's draws and results.

        ``y`` (NaN until labelled); base predictions shared by several calibrators (all of one
        monitor's) once: ``pred_<g>``, or ``pred_<g>_<member>`` for an ensemble's members;
        calibrator ``i``'s results ``reg_<i>_median``, ``reg_<i>_lower_<pct>``, ... and its
        draws ``reg_<i>_u`` (random interpolation only).

        Raises
        ------
        SnapshotError
            If the batches keep different calibrators or layouts of base predictions, or base
            predictions that are not numeric arrays.
        """
        if not rows:
            return {}, {"regression_calibrators": [], "regression_fields": []}
        first = rows[0].regression["per_calibrator"]
        keys = list(first)
        fields = [name for name in next(iter(first.values())) if name not in ("pred", "u")]
        groups, members, has_u = _pred_layout(rows[0].regression, keys)
        for batch in rows:
            if list(batch.regression["per_calibrator"]) != keys or _pred_layout(batch.regression, keys) != (
                groups, members, has_u,
            ):  # fmt: skip
                msg = "the window's batches keep different calibrators or base prediction layouts"
                raise SnapshotError(msg)
        columns = {"y": float_series([batch.regression["y"] for batch in rows])}
        for g, n_members in enumerate(members):
            owner = keys[groups.index(g)]
            preds = [batch.regression["per_calibrator"][owner]["pred"] for batch in rows]
            if n_members is None:
                columns[f"pred_{g}"] = float_series(preds)
            else:
                columns |= {f"pred_{g}_{j}": float_series([p[j] for p in preds]) for j in range(n_members)}
        for i, key in enumerate(keys):
            saved = [batch.regression["per_calibrator"][key] for batch in rows]
            for name in fields + (["u"] if has_u[i] else []):
                columns[f"reg_{i}_{name}"] = float_series([s[name] for s in saved])
        return columns, {
            "regression_calibrators": keys, "regression_fields": fields, "regression_u": has_u,
            "pred_group": groups, "pred_members": members,
        }  # fmt: skip

    def read_rows(self, part: pl.DataFrame, mapping: Mapping[str, Any], rows: BatchRows) -> None:
        """True values (their rows labelled), shared base predictions and per-calibrator results.

        The monitor's levels are not among them: the caller adds ``rows.regression["levels"]``.
        """
        y = _floats(part, "y")
        preds: list[Any] = []
        for g, n_members in enumerate(mapping["pred_members"]):
            if n_members is None:
                preds.append(_floats(part, f"pred_{g}"))
            else:
                preds.append([_floats(part, f"pred_{g}_{j}") for j in range(int(n_members))])
        per_calibrator: dict[str, dict[str, Any]] = {}
        for i, key in enumerate(mapping["regression_calibrators"]):
            saved: dict[str, Any] = {"pred": preds[mapping["pred_group"][i]]}
            saved["u"] = _floats(part, f"reg_{i}_u") if mapping["regression_u"][i] else None
            saved |= {name: _floats(part, f"reg_{i}_{name}") for name in mapping["regression_fields"]}
            per_calibrator[key] = saved
        rows.labels = np.where(np.isnan(y), NO_LABEL, 0).astype(np.intp)
        rows.regression = {"y": y, "per_calibrator": per_calibrator}

    def summary_row(self, stats: RegressionBatchStats, n_rows: int) -> dict[str, Any]:
        """The regression monitor builds its own summary (its columns depend on its levels)."""
        return {}

    def row_columns(self, key: str, results: RegressionRows, labels: Any, classes: Any) -> dict[str, Any]:
        """The regression monitor builds its own ``rows()``."""
        return {}

    def target(self, calibrator: Any) -> None:
        """The promise is the monitor's headline level (``RegressionMonitor.targets``)."""
        return


def _pred_layout(store: dict[str, Any], keys: list[str]) -> tuple[list[int], list[int | None], list[bool]]:
    """Which base predictions each calibrator reads (group index), each group's ensemble size, draws."""
    distinct: list[Any] = []
    groups = []
    for key in keys:
        pred = store["per_calibrator"][key]["pred"]
        where = next((g for g, p in enumerate(distinct) if p is pred), None)
        if where is None:
            distinct.append(pred)
            where = len(distinct) - 1
        groups.append(where)
    members = [len(p) if isinstance(p, list) else None for p in distinct]
    has_u = [store["per_calibrator"][key]["u"] is not None for key in keys]
    return groups, members, has_u


def _floats(part: pl.DataFrame, name: str) -> FloatArray:
    """A float64 column of one batch's rows, as an array of its own."""
    return array_of(part, name).astype(np.float64, copy=False)


def _n_rows(kept: Any) -> int:
    first = kept[0] if isinstance(kept, list) else kept
    n_rows = getattr(first, "n_rows", None)
    return int(n_rows) if n_rows is not None else int(np.shape(first)[0])


def _add_sums(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``a + b``, where an empty side (nothing counted yet) adds nothing."""
    if a.shape[0] == 0:
        return b.copy()
    if b.shape[0] == 0:
        return a.copy()
    total: npt.NDArray[Any] = a + b
    return total


__all__ = [
    "PIT_BINS",
    "RegressionBatchStats",
    "RegressionKind",
    "RegressionOutputs",
    "RegressionRows",
    "pct",
    "row_fields",
]
