"""Fix in one step: a calibrator whose promise holds within each slice of flagged columns, and its preview.

:class:`SliceFix` is a collaborator of :class:`~calwatch.monitor.Monitor`. Once
:meth:`Monitor.slices <calwatch.monitor.monitor.Monitor.slices>` flags slices of a column
(``hour``: ``15 ≤ hour < 18`` under-covered), :meth:`Monitor.slice_calibrator
<calwatch.monitor.monitor.Monitor.slice_calibrator>` builds, in one call, a calibrator that
promises ``≥ 1 − α`` *within every value* of that column, fitted on the monitor's own
calibration rows and their slice codes (:class:`~calwatch.stream.slice_counts.CalibrationRows`):

* one column (or ``method="mondrian"``): split conformal by slice, Mondrian with the column's
  values as categories (pairs of values for two columns): a partition, one threshold per value;
* several columns (or ``method="group_conditional"``): one group per value of each column, the
  groups overlapping across columns, the max rule of
  :class:`~calwatch.engine.conformal.group_conditional.GroupConditionalConformal`.

Both carry ``groups_from=`` (the columns), so a monitor built with them derives each row's
groups from its ``meta=`` codes at calibration and for every batch
(:mod:`calwatch.stream.slice_groups`), the same rule both times as the guarantees require.

Why fitting on the calibration rows is honest: the slices were flagged on the *stream's*
labelled rows, not on the calibration rows, so choosing the groups does not reuse the rows the
thresholds are fitted on. (Calibrating on the very rows the slices were found on would.)

:meth:`Monitor.what_if_slices <calwatch.monitor.monitor.Monitor.what_if_slices>` previews it:
coverage and set size per slice on the window's labelled rows, for each calibrator the monitor
has and for the candidate, side by side, before anything is attached. Those rows are the ones
the slices were flagged on, so the preview shows the effect where it was measured; it is an
estimate with an exact (Clopper–Pearson) interval, while the promise is for new rows
exchangeable with the calibration rows.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.core.models import ModelOutputs
from calwatch.engine.conformal.classifier import SplitConformalClassifier
from calwatch.engine.conformal.group_conditional import GroupConditionalConformal, GroupScoreName
from calwatch.engine.metrics.intervals import clopper_pearson
from calwatch.kinds import kind_of, stored_hits
from calwatch.stream.records import NO_LABEL
from calwatch.stream.slice_counts import CalibrationRows, SliceStore
from calwatch.stream.slice_groups import categories_of, category_words, column_indices, groups_for

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor

FixMethod = Literal["mondrian", "group_conditional"]
#: The columns of :meth:`Monitor.what_if_slices`.
WHAT_IF_SLICES_SCHEMA: dict[str, Any] = {
    "calibrator": pl.String, "candidate": pl.Boolean, "slice": pl.String, "target": pl.Float64,
    "n_labelled": pl.Int64, "n_covered": pl.Int64, "coverage": pl.Float64, "coverage_lo": pl.Float64,
    "coverage_hi": pl.Float64, "mean_set_size": pl.Float64,
}  # fmt: skip


class SliceFix:
    """Calibrators by slice and their preview (a collaborator of :class:`~calwatch.monitor.Monitor`).

    Stateless: it reads the monitor it is given, whose public methods hold the lock.
    """

    def __init__(self, monitor: Monitor) -> None:
        self.m = monitor

    def _store(self) -> SliceStore:
        return self.m._slicing._store()

    # ------------------------------------------------------------------ build
    def slice_calibrator(
        self,
        by: str | Sequence[str],
        *,
        calibrator: str | None = None,
        alpha: float | None = None,
        method: FixMethod | None = None,
        probs: Any = None,
        y: Any = None,
        meta: Any = None,
    ) -> SplitConformalClassifier | GroupConditionalConformal:
        """See :meth:`Monitor.slice_calibrator`."""
        store = self._store()
        columns = [by] if isinstance(by, str) else list(by)
        if not columns:
            msg = "by: name at least one slice column"
            raise ValueError(msg)
        column_indices(store.encoding, columns, "by")
        if method not in (None, "mondrian", "group_conditional"):
            msg = f"method must be None, 'mondrian' or 'group_conditional'; got {method!r}"
            raise ValueError(msg)
        base_key = self._base(calibrator)
        base = self.m._calibrators[base_key]
        chosen: FixMethod = method or ("mondrian" if len(columns) == 1 else "group_conditional")
        level = float(base.alpha) if alpha is None else float(alpha)
        candidate = _candidate(base, chosen, level, columns)
        rows = self._calibration_rows(store, probs, y, meta)
        groups = groups_for(candidate, store.encoding, rows.codes)
        if isinstance(candidate, GroupConditionalConformal):
            candidate.fit(rows.probs, rows.labels, groups)
        else:
            candidate.fit(rows.probs, rows.labels, categories=groups)
        return candidate

    def _base(self, calibrator: str | None) -> str:
        """The calibrator whose score, level and options the fix keeps (split conformal ones)."""
        eligible = [
            key
            for key, cal in self.m._calibrators.items()
            if isinstance(cal, (SplitConformalClassifier, GroupConditionalConformal))
        ]
        if calibrator is None:
            if not eligible:
                msg = (
                    "calibrator: no split conformal calibrator to start from (SplitConformalClassifier or "
                    "GroupConditionalConformal); build one with groups_from= yourself"
                )
                raise ValueError(msg)
            return eligible[0]
        if calibrator not in eligible:
            msg = (
                f"calibrator: {calibrator!r} is not a split conformal calibrator of this monitor ({eligible})"
            )
            raise ValueError(msg)
        return calibrator

    def _calibration_rows(self, store: SliceStore, probs: Any, y: Any, meta: Any) -> CalibrationRows:
        """The monitor's kept calibration rows, or those given (checked and encoded alike)."""
        given = [probs is not None, y is not None, meta is not None]
        if any(given) and not all(given):
            msg = "probs, y and meta go together: the calibration rows to fit on, with their slice columns"
            raise ValueError(msg)
        if all(given):
            encoder = self.m._require_encoder()
            outputs = self.m._intake.outputs(None, probs, None, n_classes=len(encoder), embeddings=None)
            n = len(outputs)
            labels = encoder.encode(y, "y", n_rows=n).astype(np.int64)
            codes = store.encoding.codes(meta, n)
            return CalibrationRows(np.asarray(outputs.probs, dtype=np.float64), labels, codes)
        if store.calibration is None:
            msg = (
                "this monitor did not keep its calibration rows (too many values, or a snapshot saved "
                "before they were kept): pass them as probs=, y= and meta="
            )
            raise ValueError(msg)
        return store.calibration

    # ------------------------------------------------------------------ preview
    def what_if_slices(
        self,
        candidate: Any,
        *,
        by: str | Sequence[str] | None = None,
        name: str = "candidate",
        calibrators: Sequence[str] | None = None,
    ) -> pl.DataFrame:
        """See :meth:`Monitor.what_if_slices`."""
        store = self._store()
        columns = self._preview_columns(candidate, by)
        kind = kind_of(candidate)
        if not kind.has_sets:
            msg = f"candidate: a set-valued calibrator is needed; got {type(candidate).__name__}"
            raise TypeError(msg)
        keys = [k for k in store.calibrators if calibrators is None or k in calibrators]
        unknown = [] if calibrators is None else [k for k in calibrators if k not in store.calibrators]
        if unknown:
            msg = (
                f"calibrators: {unknown} are not set calibrators of this monitor ({list(store.calibrators)})"
            )
            raise ValueError(msg)
        if name in keys:
            msg = f"name: {name!r} is already a calibrator of this monitor; name the candidate otherwise"
            raise ValueError(msg)
        covered: dict[str, list[npt.NDArray[np.bool_]]] = {k: [] for k in [*keys, name]}
        sizes: dict[str, list[npt.NDArray[np.int64]]] = {k: [] for k in [*keys, name]}
        slices: list[npt.NDArray[np.int64]] = []
        probe = copy.deepcopy(candidate)  # a randomised candidate's stream stays where it was
        for record in self.m._stream.window_batches():
            rows = record.rows
            if rows is None or rows.slice_codes is None:
                continue
            labelled = np.flatnonzero(rows.labels != NO_LABEL)
            if not labelled.size:
                continue
            labels = rows.labels[labelled]
            codes = rows.slice_codes[labelled]
            slices.append(categories_of(store.encoding, codes, columns))
            for key in keys:
                _, hits, set_sizes = stored_hits(rows, key, self.m._calibrators[key])
                covered[key].append(hits[labelled])
                sizes[key].append(set_sizes[labelled])
            ids = None if rows.ids is None else [rows.ids[i] for i in labelled.tolist()]
            outputs = ModelOutputs(probs=rows.probs[labelled], ids=ids)
            results = kind.apply(name, probe, outputs, groups_for(probe, store.encoding, codes))
            covered[name].append(np.asarray(kind.covered(results, labels), dtype=np.bool_))
            sizes[name].append(np.asarray(kind.set_sizes(results), dtype=np.int64))
        targets = {k: kind_of(self.m._calibrators[k]).target(self.m._calibrators[k]) for k in keys}
        targets[name] = kind.target(candidate)
        return _by_slice(store, columns, slices, covered, sizes, targets, name)

    def _preview_columns(self, candidate: Any, by: str | Sequence[str] | None) -> list[str]:
        store = self._store()
        if by is None:
            grouped = getattr(candidate, "groups_from", None)
            if grouped is None:
                msg = "by: name the slice column(s) to compare on (the candidate has no groups_from)"
                raise ValueError(msg)
            columns = list(grouped)
            if getattr(candidate, "takes_groups", False) and len(columns) > 1:
                columns = columns[:1]  # a family's groups are per column: preview one column at a time
        else:
            columns = [by] if isinstance(by, str) else list(by)
        column_indices(store.encoding, columns, "by")
        grouped = getattr(candidate, "groups_from", None)
        if grouped is not None:
            column_indices(store.encoding, grouped, "candidate.groups_from")
        return columns


def _candidate(
    base: Any, method: FixMethod, alpha: float, columns: list[str]
) -> SplitConformalClassifier | GroupConditionalConformal:
    """An unfitted calibrator by slice with the base calibrator's score and options."""
    if method == "group_conditional":
        score: GroupScoreName = "lac" if base.score == "lac" else "aps"
        return GroupConditionalConformal(score=score, alpha=alpha, groups_from=columns)
    if isinstance(base, GroupConditionalConformal):
        return SplitConformalClassifier(score=base.score, alpha=alpha, randomized=False, groups_from=columns)
    return SplitConformalClassifier(
        score=base.score, alpha=alpha, randomized=base.randomized, raps_lambda=base.raps_lambda,
        raps_k_reg=base.raps_k_reg, tune=base.tune, kappa=base.kappa,
        top_class=None if base.allow_empty else base.top_class, allow_empty=base.allow_empty, seed=base.seed,
        groups_from=columns,
    )  # fmt: skip


def _by_slice(
    store: SliceStore,
    columns: list[str],
    slices: list[npt.NDArray[np.int64]],
    covered: dict[str, list[npt.NDArray[np.bool_]]],
    sizes: dict[str, list[npt.NDArray[np.int64]]],
    targets: dict[str, float | None],
    name: str,
) -> pl.DataFrame:
    """Coverage and mean set size per (calibrator, slice) of the window's labelled rows."""
    if not slices:
        return pl.DataFrame(schema=WHAT_IF_SLICES_SCHEMA)
    cells = np.concatenate(slices)
    values, index = np.unique(cells, return_inverse=True)
    out: dict[str, list[Any]] = {column: [] for column in WHAT_IF_SLICES_SCHEMA}
    n_labelled = np.bincount(index, minlength=values.shape[0])
    for key in covered:
        hits = np.bincount(index, weights=np.concatenate(covered[key]), minlength=values.shape[0])
        total = np.bincount(index, weights=np.concatenate(sizes[key]), minlength=values.shape[0])
        for v, value in enumerate(values.tolist()):
            out["calibrator"].append(key)
            out["candidate"].append(key == name)
            out["slice"].append(category_words(store.encoding, columns, value))
            out["target"].append(targets[key])
            out["n_labelled"].append(int(n_labelled[v]))
            out["n_covered"].append(round(float(hits[v])))
            out["mean_set_size"].append(float(total[v]) / int(n_labelled[v]))
    frame = pl.DataFrame({k: v for k, v in out.items() if v}, schema_overrides=WHAT_IF_SLICES_SCHEMA)
    lo, hi = clopper_pearson(frame["n_covered"].to_numpy(), frame["n_labelled"].to_numpy())
    return frame.with_columns(
        coverage=pl.col("n_covered") / pl.col("n_labelled"),
        coverage_lo=pl.Series(lo, dtype=pl.Float64),
        coverage_hi=pl.Series(hi, dtype=pl.Float64),
    ).select(list(WHAT_IF_SLICES_SCHEMA))


__all__ = ["WHAT_IF_SLICES_SCHEMA", "FixMethod", "SliceFix"]
