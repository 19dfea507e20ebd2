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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from calwatch.core import paged
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


#: The fields of a per-batch row that the cards read (:func:`_contribution` and ``CardTotals._add``).
CARD_FIELDS = ("n_rows", "n_labelled", "n_covered", "mean_set_size", "estimated_error", "observed_error",
               "admitted_share", "target", "error_band_lo", "error_band_hi")  # fmt: skip
#: The text fields the cards read, kept as codes into one list of the texts seen.
TEXT_FIELDS = ("kind", "estimate_promise")
_INT_FIELDS = frozenset({"n_rows", "n_labelled", "n_covered"})
_FIRST_CAPACITY = 64


class _CardColumns:
    """One calibrator's settled per-batch rows: batch (increasing), order, texts and the card fields.

    A field that is None in the row is marked in its mask (its value column then holds 0), so a
    row read back gives :func:`_contribution` exactly what the row it came from gave.
    """

    __slots__ = ("arrays", "n")

    def __init__(self) -> None:
        self.n = 0
        self.arrays: dict[str, npt.NDArray[Any]] = {
            "batch": paged.empty(_FIRST_CAPACITY, np.int64),
            "order": paged.empty(_FIRST_CAPACITY, np.int64),
        }
        for name in TEXT_FIELDS:
            self.arrays[name] = paged.empty(_FIRST_CAPACITY, np.int32)  # index into HeldRows._texts
        for name in CARD_FIELDS:
            self.arrays[name] = paged.empty(_FIRST_CAPACITY, np.int64 if name in _INT_FIELDS else np.float64)
            self.arrays[f"{name}?"] = paged.empty(_FIRST_CAPACITY, np.bool_)  # None in the row

    def find(self, batch: int) -> int:
        """The row of ``batch``, or -1."""
        batches = self.arrays["batch"][: self.n]
        i = int(np.searchsorted(batches, batch))
        return i if i < self.n and batches[i] == batch else -1

    def put(self, batch: int, values: dict[str, Any]) -> None:
        """Write ``batch``'s row: in place if it is held, else at its place (grown by doubling)."""
        i = self.find(batch)
        if i < 0:
            n = self.n
            if n == self.arrays["batch"].shape[0]:
                for name, old in self.arrays.items():
                    self.arrays[name] = paged.grown(old, n + 1, factor=2.0)
            i = int(np.searchsorted(self.arrays["batch"][:n], batch))
            if i < n:  # an older batch than the last held: shift the later rows up
                for column in self.arrays.values():
                    column[i + 1 : n + 1] = column[i:n]
            self.arrays["batch"][i] = batch
            self.n = n + 1
        for name, value in values.items():
            self.arrays[name][i] = value


class HeldRows(Mapping[str, Mapping[str, Any]]):
    """The per-batch rows behind the cards, by key, compact once their batch is settled.

    A live view keeps a row per batch and calibrator for the whole stream (a brushed range is
    summed from them, and a relabelled batch takes its old row out). A row dict cost ~1.4 kB;
    here the rows of the latest ``keep`` batches stay as they are (the health strip reads them
    whole) and older ones keep only what the cards read, as numpy columns per calibrator (~120
    bytes a row, no Python object per row). Reading an older row gives a dict of those fields
    (``key``, ``batch``, ``calibrator``, :data:`TEXT_FIELDS` and :data:`CARD_FIELDS`), equal to the row's
    own; items come in the order keys were first written, as a dict's would.

    Examples
    --------
    >>> held = HeldRows(keep=1)
    >>> for b in range(3):
    ...     held[f"{b}|a"] = {"key": f"{b}|a", "batch": b, "calibrator": "a", "kind": "sets",
    ...                       "n_rows": 10, "n_labelled": b, "n_covered": None, "extra": "x"}
    >>> held["0|a"]["n_labelled"], held["0|a"]["n_covered"], "extra" in held["0|a"], "extra" in held["2|a"]
    (0, None, False, True)
    >>> list(held)
    ['0|a', '1|a', '2|a']
    """

    def __init__(self, keep: int = 64) -> None:
        self.keep = keep
        self._recent: dict[str, tuple[int, Mapping[str, Any]]] = {}  # key -> (order, row)
        self._columns: dict[str, _CardColumns] = {}
        self._texts: list[Any] = []
        self._text_codes: dict[Any, int] = {}
        self._written = 0
        self._len = 0
        self._newest = -1  # the newest batch seen

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, key: str) -> Mapping[str, Any]:
        held = self._recent.get(key)
        if held is not None:
            return held[1]
        found = self._locate(key)
        if found is None:
            raise KeyError(key)
        return self._row(key, *found)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and (key in self._recent or self._locate(key) is not None)

    def __iter__(self) -> Iterator[str]:
        for key, _ in self.items():
            yield key

    def items(self) -> Iterator[tuple[str, Mapping[str, Any]]]:  # type: ignore[override]
        """Every ``(key, row)`` in the order the keys were first written."""
        orders = [np.fromiter((order for order, _ in self._recent.values()), np.int64, len(self._recent))]
        where: list[tuple[str | None, int]] = [(None, len(self._recent))]
        for calibrator, columns in self._columns.items():
            orders.append(columns.arrays["order"][: columns.n])
            where.append((calibrator, columns.n))
        every = np.concatenate(orders)
        source = np.repeat(np.arange(len(where)), [n for _, n in where])
        position = np.concatenate([np.arange(n) for _, n in where])
        recent = list(self._recent.items())
        for k in np.argsort(every, kind="stable").tolist():
            j, i = int(source[k]), int(position[k])
            if j == 0:
                yield recent[i][0], recent[i][1][1]
            else:
                name = where[j][0]
                assert name is not None
                columns = self._columns[name]
                batch = int(columns.arrays["batch"][i])
                yield f"{batch}|{name}", self._row(f"{batch}|{name}", name, columns, i)

    def __setitem__(self, key: str, row: Mapping[str, Any]) -> None:
        held = self._recent.get(key)
        if held is not None:
            self._recent[key] = (held[0], row)
            return
        found = self._locate(key)
        if found is not None:  # a settled batch relabelled: its columns, in place
            _, columns, i = found
            columns.put(int(columns.arrays["batch"][i]), self._values(row, int(columns.arrays["order"][i])))
            return
        self._recent[key] = (self._written, row)
        self._written += 1
        self._len += 1
        batch = row.get("batch")
        if isinstance(batch, int) and batch > self._newest:
            self._newest = batch
            self._settle()

    def _settle(self) -> None:
        """Move the rows of batches older than the latest ``keep`` into columns."""
        oldest = self._newest - self.keep
        for key, (order, row) in list(self._recent.items()):
            batch, calibrator = row.get("batch"), row.get("calibrator")
            if not (isinstance(batch, int) and batch < oldest and isinstance(calibrator, str)):
                continue  # recent, or a row the columns cannot key (kept whole)
            if key != f"{batch}|{calibrator}":
                continue
            columns = self._columns.get(calibrator)
            if columns is None:
                columns = self._columns[calibrator] = _CardColumns()
            columns.put(batch, self._values(row, order))
            del self._recent[key]

    def _values(self, row: Mapping[str, Any], order: int) -> dict[str, Any]:
        values: dict[str, Any] = {"order": order}
        for name in TEXT_FIELDS:
            text = row.get(name)
            code = self._text_codes.get(text)
            if code is None:
                code = self._text_codes[text] = len(self._texts)
                self._texts.append(text)
            values[name] = code
        for name in CARD_FIELDS:
            value = row.get(name)
            values[f"{name}?"] = value is None
            values[name] = 0 if value is None else value
        return values

    def _locate(self, key: str) -> tuple[str, _CardColumns, int] | None:
        batch, _, calibrator = key.partition("|")
        columns = self._columns.get(calibrator)
        if columns is None or not batch.isdigit():
            return None
        i = columns.find(int(batch))
        return None if i < 0 else (calibrator, columns, i)

    def _row(self, key: str, calibrator: str, columns: _CardColumns, i: int) -> dict[str, Any]:
        arrays = columns.arrays
        row: dict[str, Any] = {"key": key, "batch": int(arrays["batch"][i]), "calibrator": calibrator}
        for name in TEXT_FIELDS:
            row[name] = self._texts[int(arrays[name][i])]
        for name in CARD_FIELDS:
            row[name] = None if arrays[f"{name}?"][i] else arrays[name][i].item()
        return row

    def python_objects(self) -> int:
        """Python objects held beyond the recent rows' (per calibrator one column set), for memory tests."""
        return 6 + sum(2 + len(c.arrays) for c in self._columns.values()) + len(self._texts)


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
        self.rows = HeldRows()  # every batch's row by key; settled ones as columns
        self._intervals = intervals
        self._cards: dict[str, dict[str, Any]] = {
            name: {"key": name, "label": labels.get(name, name), "kind": None, "target": None,
                   "promise": None, "_described_by": -math.inf, "first_batch": None, "last_batch": None}
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
            if row.get("estimate_promise") is not None:  # what a risk estimate promises
                card["promise"] = row["estimate_promise"]
            # A guarded risk estimate's band is of one batch's realised error: the card shows the
            # latest batch's, named as such (the whole stream's rows are not one batch).
            card["latest_band"] = (row.get("error_band_lo"), row.get("error_band_hi"))

    def cards(self, warnings: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
        """One card per calibrator that has rows of a known kind, or no rows yet."""
        open_by: dict[str, int] = {}
        acked_by: dict[str, int] = {}
        model_wide = model_acked = 0
        for w in warnings:
            if not w.get("open"):
                continue
            name = str(w.get("name", ""))
            prefix = name.split(":", 1)[0] if ":" in name else None
            acked = bool(w.get("acknowledged"))  # seen by someone: counted apart, as the banners do
            if prefix in self._cards:
                counts = acked_by if acked else open_by
                counts[prefix] = counts.get(prefix, 0) + 1
            elif acked:
                model_acked += 1
            else:
                model_wide += 1
        cards = [c for c in self._cards.values() if c["kind"] is not None or c["n_batches"] == 0]
        keys = [c["key"] for c in cards if c["kind"] in ("sets", "risk") and c["n_labelled"] > 0]
        # Sets: covered rows of the labelled ones; risk: the labelled rows whose top-k output missed
        # (observed error x labelled rows, a count up to float rounding), each with its exact band.
        pairs = [
            (int(self._cards[k]["n_covered"]), int(self._cards[k]["n_labelled"]))
            if self._cards[k]["kind"] == "sets"
            else (round(self._cards[k]["_obs"]), int(self._cards[k]["n_labelled"]))
            for k in keys
        ]
        intervals = self._intervals or ExactIntervals()
        bands = dict(zip(keys, zip(*intervals.of(pairs), strict=True), strict=True)) if keys else {}
        return [
            _card(c, bands.get(c["key"]), open_by.get(c["key"], 0), model_wide,
                  acked_by.get(c["key"], 0) + model_acked)
            for c in cards
        ]  # fmt: skip


def _card(
    c: Mapping[str, Any], band: Any, open_warnings: int, model_warnings: int, acknowledged: int = 0
) -> dict[str, Any]:
    sets, risk = c["kind"] == "sets", c["kind"] == "risk"
    n_rows, n_lab = c["n_rows"], c["n_labelled"]
    return {
        "key": c["key"], "calibrator": c["key"], "label": c["label"], "kind": c["kind"] or "",
        "target": c["target"], "n_batches": c["n_batches"], "n_rows": n_rows, "n_labelled": n_lab,
        "n_covered": c["n_covered"] if sets else None,
        "coverage": c["n_covered"] / n_lab if sets and n_lab else None,
        "coverage_lo": band[0] if sets and band is not None else None,
        "coverage_hi": band[1] if sets and band is not None else None,
        "mean_set_size": c["_size"] / n_rows if sets and n_rows else None,
        "estimated_error": c["_est"] / n_rows if risk and n_rows else None,
        "estimate_promise": c["promise"] if risk else None,
        "observed_error": c["_obs"] / n_lab if risk and n_lab else None,
        "observed_error_lo": band[0] if risk and band is not None else None,
        "observed_error_hi": band[1] if risk and band is not None else None,
        "latest_error_band_lo": (c.get("latest_band") or (None, None))[0] if risk else None,
        "latest_error_band_hi": (c.get("latest_band") or (None, None))[1] if risk else None,
        "admitted_share": c["_adm"] / c["_adm_rows"] if c["_adm_rows"] else None,
        "open_warnings": open_warnings,
        "model_warnings": model_warnings,
        "acknowledged_warnings": acknowledged,
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
