"""Overview cards: one status card per calibrator, from per-batch summary rows.

A card pools a calibrator's batches: coverage is covered over labelled rows (with a 95%
Clopper-Pearson band), mean set size, estimated and observed error and admitted share are
row-weighted means, and open warnings are counted by the calibrator they name.

:class:`CardTotals` keeps the running sums behind the cards. A live widget updates it with the
rows of the batches an update touched (a row replaced by key takes its old contribution out), so
the cards cost the same at batch 10 and at batch 100,000; :func:`overview_rows` pools a list of
rows in one go (a brushed range, a report).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from calwatch.engine.metrics.intervals import clopper_pearson

#: Running sums of a card: counts, and row- or label-weighted sums of the per-batch means.
_SUMS = ("n_batches", "n_rows", "n_labelled", "n_covered", "_size", "_est", "_obs", "_adm", "_adm_rows")


def _contribution(row: Mapping[str, Any]) -> dict[str, float]:
    """What one per-batch row adds to its calibrator's sums."""
    n_rows, n_lab = int(row.get("n_rows") or 0), int(row.get("n_labelled") or 0)
    admitted = row.get("admitted_share")
    return {
        "n_batches": 1, "n_rows": n_rows, "n_labelled": n_lab, "n_covered": int(row.get("n_covered") or 0),
        "_size": float(row.get("mean_set_size") or 0.0) * n_rows,
        "_est": float(row.get("estimated_error") or 0.0) * n_rows,
        "_obs": float(row.get("observed_error") or 0.0) * n_lab,
        "_adm": float(admitted) * n_rows if admitted is not None else 0.0,
        "_adm_rows": n_rows if admitted is not None else 0,
    }  # fmt: skip


class ExactIntervals:
    """Clopper-Pearson 95% intervals remembered by (successes, trials), the new ones computed in one call.

    A live view asks for the same counts again and again (a batch arrives without labels: no
    count changes); remembering them saves the quantile computations.

    Examples
    --------
    >>> bands = ExactIntervals()
    >>> lo, hi = bands.of([(9, 10), (0, 0)])
    >>> round(lo[0], 4), round(hi[0], 4), lo[1], hi[1]
    (0.555, 0.9975, None, None)
    """

    def __init__(self, max_size: int = 4096) -> None:
        self._known: dict[tuple[int, int], tuple[float | None, float | None]] = {}
        self._max_size = max_size

    def of(self, pairs: Sequence[tuple[int, int]]) -> tuple[list[float | None], list[float | None]]:
        """Low and high bounds of each ``(successes, trials)``; None (not NaN) where ``trials == 0``."""
        missing = list(dict.fromkeys(p for p in pairs if p not in self._known))
        if missing:
            if len(self._known) + len(missing) > self._max_size:
                # Full: start afresh, and compute every pair asked for now (the ones that were
                # known are gone with the rest).
                self._known.clear()
                missing = list(dict.fromkeys(pairs))
            k, n = zip(*missing, strict=True)
            lo, hi = clopper_pearson(np.array(k, dtype=np.float64), np.array(n, dtype=np.float64))
            for pair, a, b in zip(missing, lo.tolist(), hi.tolist(), strict=True):
                self._known[pair] = (_finite(a), _finite(b))
        found = [self._known[p] for p in pairs]
        return [f[0] for f in found], [f[1] for f in found]


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


class CardTotals:
    """Per-calibrator sums of per-batch summary rows, kept current as rows arrive or change.

    Rows are keyed (``"batch|calibrator"``): :meth:`update` with a key seen before replaces that
    row (its old contribution is taken out), so a relabelled batch is counted once. Each row
    costs O(1); :meth:`cards` costs O(calibrators).

    Parameters
    ----------
    calibrators : sequence of str
        Calibrator names, in card order; rows of other calibrators are ignored.
    labels : mapping of str to str
        Display label per calibrator (default: its name).
    intervals : ExactIntervals, optional
        Where the cards' coverage bands are remembered (default: computed afresh).

    Examples
    --------
    >>> totals = CardTotals(["a"], {"a": "A"})
    >>> row = {"batch": 0, "calibrator": "a", "kind": "sets", "target": 0.9, "n_rows": 10,
    ...        "n_labelled": 4, "n_covered": 3, "mean_set_size": 1.5}
    >>> totals.update({"0|a": row})
    >>> totals.update({"0|a": row | {"n_labelled": 10, "n_covered": 9}})  # labels arrived
    >>> card = totals.cards()[0]
    >>> card["label"], card["n_batches"], card["coverage"], card["mean_set_size"]
    ('A', 1, 0.9, 1.5)
    """

    def __init__(
        self, calibrators: Sequence[str], labels: Mapping[str, str], intervals: ExactIntervals | None = None
    ) -> None:
        self.rows: dict[str, Mapping[str, Any]] = {}
        self._intervals = intervals
        self._cards: dict[str, dict[str, Any]] = {
            name: {"key": name, "label": labels.get(name, name), "kind": None, "target": None,
                   "_described_by": -math.inf, "first_batch": None, "last_batch": None}
            | dict.fromkeys(_SUMS, 0)
            for name in calibrators
        }  # fmt: skip

    def update(self, rows: Mapping[str, Mapping[str, Any]]) -> None:
        """Add ``rows`` by key, replacing rows already held under the same key."""
        for key, row in rows.items():
            old = self.rows.get(key)
            if old is not None:
                self._add(old, -1)
            self._add(row, +1)
            self.rows[key] = row

    def _add(self, row: Mapping[str, Any], sign: int) -> None:
        card = self._cards.get(str(row.get("calibrator")))
        batch = row.get("batch")
        if card is None or batch is None:
            return
        for name, value in _contribution(row).items():
            card[name] += sign * value
        if sign < 0:
            return  # a replaced row: its batch stays, so do the batch range, kind and target
        card["first_batch"] = batch if card["first_batch"] is None else min(card["first_batch"], batch)
        card["last_batch"] = batch if card["last_batch"] is None else max(card["last_batch"], batch)
        if batch >= card["_described_by"]:  # the kind and target of the latest batch
            card["_described_by"] = batch
            card["kind"] = row.get("kind") or card["kind"]
            if row.get("target") is not None:
                card["target"] = row["target"]

    def cards(self, warnings: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
        """One card per calibrator that has rows of a known kind, or no rows yet."""
        open_by: dict[str, int] = {}
        model_wide = 0
        for w in warnings:
            if not w.get("open"):
                continue
            name = str(w.get("name", ""))
            prefix = name.split(":", 1)[0] if ":" in name else None
            if prefix in self._cards:
                open_by[prefix] = open_by.get(prefix, 0) + 1
            else:
                model_wide += 1
        cards = [c for c in self._cards.values() if c["kind"] is not None or c["n_batches"] == 0]
        keys = [c["key"] for c in cards if c["kind"] == "sets" and c["n_labelled"] > 0]
        pairs = [(int(self._cards[k]["n_covered"]), int(self._cards[k]["n_labelled"])) for k in keys]
        intervals = self._intervals or ExactIntervals()
        bands = dict(zip(keys, zip(*intervals.of(pairs), strict=True), strict=True)) if keys else {}
        return [_card(c, bands.get(c["key"]), open_by.get(c["key"], 0), model_wide) for c in cards]


def _card(c: Mapping[str, Any], band: Any, open_warnings: int, model_warnings: int) -> dict[str, Any]:
    sets, risk = c["kind"] == "sets", c["kind"] == "risk"
    n_rows, n_lab = c["n_rows"], c["n_labelled"]
    return {
        "key": c["key"], "calibrator": c["key"], "label": c["label"], "kind": c["kind"] or "",
        "target": c["target"], "n_batches": c["n_batches"], "n_rows": n_rows, "n_labelled": n_lab,
        "n_covered": c["n_covered"] if sets else None,
        "coverage": c["n_covered"] / n_lab if sets and n_lab else None,
        "coverage_lo": band[0] if band is not None else None,
        "coverage_hi": band[1] if band is not None else None,
        "mean_set_size": c["_size"] / n_rows if sets and n_rows else None,
        "estimated_error": c["_est"] / n_rows if risk and n_rows else None,
        "observed_error": c["_obs"] / n_lab if risk and n_lab else None,
        "admitted_share": c["_adm"] / c["_adm_rows"] if c["_adm_rows"] else None,
        "open_warnings": open_warnings,
        "model_warnings": model_warnings,
        "first_batch": c["first_batch"], "last_batch": c["last_batch"],
    }  # fmt: skip


def overview_rows(
    batch_rows: Iterable[Mapping[str, Any]],
    *,
    calibrators: Sequence[str],
    labels: Mapping[str, str],
    warnings: Sequence[Mapping[str, Any]] = (),
    batch_range: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """One status card per calibrator from per-batch ``batches`` rows (those in ``batch_range``).

    Examples
    --------
    >>> rows = [{"batch": 0, "calibrator": "a", "kind": "sets", "target": 0.9, "n_rows": 10,
    ...          "n_labelled": 10, "n_covered": 9, "mean_set_size": 1.5}]
    >>> card = overview_rows(rows, calibrators=["a"], labels={"a": "a"})[0]
    >>> card["coverage"], card["n_labelled"], card["mean_set_size"], card["open_warnings"]
    (0.9, 10, 1.5, 0)
    """
    lo, hi = (batch_range[0], batch_range[1]) if batch_range else (-math.inf, math.inf)
    totals = CardTotals(calibrators, labels)
    inside = (r for r in batch_rows if r.get("batch") is not None and lo <= r["batch"] <= hi)
    totals.update({f"{r['batch']}|{r.get('calibrator')}": r for r in inside})
    return totals.cards(warnings)
