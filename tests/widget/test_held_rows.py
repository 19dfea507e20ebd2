"""The cards' per-batch rows stay bounded: settled batches' rows are columns, read back equal.

A live widget keeps one row per batch and calibrator for the whole stream (a brushed range is
summed from them, a relabelled batch takes its old row out). :class:`calwatch.views.cards.HeldRows`
keeps the latest batches' rows whole and older ones as numpy columns of the fields the cards
read. These tests compare it with the dict it replaced under random writes, relabels of settled
batches and None fields, check that the cards summed from either are identical, and bound the
Python objects it holds however long the stream.
"""

from __future__ import annotations

import random

from calwatch.views.cards import CARD_FIELDS, TEXT_FIELDS, CardTotals, HeldRows


def _row(batch: int, calibrator: str, rng: random.Random) -> dict[str, object]:
    sets = calibrator != "risk"
    n_rows = rng.randrange(1, 1000)
    n_labelled = rng.randrange(0, n_rows + 1)
    return {
        "key": f"{batch}|{calibrator}", "batch": batch, "calibrator": calibrator,
        "kind": "sets" if sets else "risk", "target": rng.choice([0.9, 0.8, None]),
        "n_rows": n_rows, "n_labelled": n_labelled,
        "n_covered": rng.randrange(0, n_labelled + 1) if sets else None,
        "mean_set_size": rng.uniform(1, 3) if sets else None,
        "estimated_error": None if sets else rng.uniform(0, 1),
        "observed_error": None if sets or not n_labelled else rng.random(),
        "admitted_share": None, "coverage": 0.5, "label": "shown whole while recent",
        "estimate_promise": None if sets else rng.choice(["upper bound", "estimate"]),
    }  # fmt: skip


def _card_view(row: object) -> dict[str, object]:
    assert isinstance(row, dict)
    return {name: row.get(name) for name in ("key", "batch", "calibrator", *TEXT_FIELDS, *CARD_FIELDS)}


def test_held_rows_read_like_the_dict_they_replace_and_give_the_same_cards():
    rng = random.Random(0)
    calibrators = ["lac", "aps", "risk"]
    held, twin = HeldRows(keep=8), {}
    for batch in range(300):
        for calibrator in calibrators:
            held[f"{batch}|{calibrator}"] = twin[f"{batch}|{calibrator}"] = _row(batch, calibrator, rng)
        for _ in range(rng.randrange(3)):  # late labels: a batch of any age gets a new row
            old = rng.randrange(batch + 1)
            calibrator = rng.choice(calibrators)
            held[f"{old}|{calibrator}"] = twin[f"{old}|{calibrator}"] = _row(old, calibrator, rng)
    assert len(held) == len(twin)
    assert list(held) == list(twin)  # a dict's order: first write of each key
    for key, row in held.items():
        assert _card_view(row) == _card_view(twin[key])
        assert ("label" in row) == (row["batch"] >= 300 - 1 - 8)  # recent rows stay whole
    assert "7|lac" in held and "7|nobody" not in held and "x|lac" not in held

    def cards(rows, lo=-1, hi=10**9):
        totals = CardTotals(calibrators, {})
        totals.update({k: r for k, r in rows.items() if lo <= r["batch"] <= hi})
        return totals.cards()

    assert cards(held) == cards(twin)  # float sums in the same order: identical
    assert cards(held, 40, 120) == cards(twin, 40, 120)


def test_the_held_rows_of_a_long_stream_hold_a_fixed_number_of_objects():
    rng = random.Random(1)
    held = HeldRows(keep=16)
    for batch in range(100):
        for calibrator in ("lac", "aps"):
            held[f"{batch}|{calibrator}"] = _row(batch, calibrator, rng)
    objects, recent = held.python_objects(), len(held._recent)
    for batch in range(100, 3000):
        for calibrator in ("lac", "aps"):
            held[f"{batch}|{calibrator}"] = _row(batch, calibrator, rng)
    assert held.python_objects() == objects
    assert len(held._recent) == recent == 2 * 17  # the latest keep + 1 batches' rows, whole
    assert len(held) == 6000
