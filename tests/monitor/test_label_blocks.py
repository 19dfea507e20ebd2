"""Label-based detectors on correlated rows: blocks=, the default's runs check, and their words.

The streams are repeated measurements: each unit is observed ``size`` times with nearly the same
probabilities and one true label, so its rows are all covered or all missed together. Every
unit is drawn from one law (nothing changes) unless a test shifts the labels.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

import calwatch as cw

K = 4
LABEL_TESTS = ("coverage drop", "conformity martingale")


def units(
    rng: np.random.Generator, n_units: int, size: int, start: int = 0
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``n_units`` units of ``size`` rows each: probabilities, labels, unit keys."""
    base = rng.dirichlet(np.ones(K) * 0.7, n_units)
    y = (base.cumsum(axis=1) > rng.random((n_units, 1))).argmax(axis=1)
    noise = rng.dirichlet(np.ones(K) * 200, (n_units, size))
    P = 0.9 * base[:, None, :] + 0.1 * noise
    P = (P / P.sum(axis=2, keepdims=True)).reshape(-1, K)
    return P, np.repeat(y, size), np.repeat(np.arange(start, start + n_units), size)


def monitor() -> cw.Monitor:
    return cw.Monitor(
        calibrators={
            "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
            "by-class": cw.SplitConformalClassifier(score="lac", alpha=0.1, mondrian="label"),
        }
    )


def stream(
    seed: int,
    *,
    blocks: bool,
    size: int = 10,
    batches: int = 30,
    shift_from: int | None = None,
    late: int = 2,
    save_at: tuple[int, Path] | None = None,
) -> cw.Monitor:
    """Calibrate on 300 units, stream ``batches`` batches of 10 units, labels ``late`` batches late."""
    rng = np.random.default_rng(seed)
    mon = monitor()
    n_cal = 3000 // size
    P, y, b = units(rng, n_cal, size)
    mon.calibrate(probs=P, y=y, blocks=b if blocks else None)
    pending: list[tuple[Any, Any]] = []
    next_id = 0
    for batch in range(batches):
        P, y, b = units(rng, 100 // size, size, start=10_000 + batch * 100)
        if shift_from is not None and batch >= shift_from:
            flip = rng.random(y.shape[0]) < 0.3
            y = np.where(flip, rng.integers(0, K, y.shape[0]), y)
        ids = np.arange(next_id, next_id + y.shape[0])
        next_id += y.shape[0]
        mon.observe(probs=P, ids=ids, blocks=b if blocks else None)
        pending.append((ids, y))
        while len(pending) > late:
            i, labels = pending.pop(0)
            mon.label(i, labels)
        if save_at is not None and batch == save_at[0]:
            mon.save(save_at[1])
    for i, labels in pending:
        mon.label(i, labels)
    return mon


def label_warnings(mon: cw.Monitor) -> list[dict[str, Any]]:
    return [w for w in mon.warnings().to_dicts() if any(t in w["name"] for t in LABEL_TESTS)]


def test_correlated_rows_raise_no_label_warning_and_say_so() -> None:
    mon = stream(0, blocks=False)
    assert label_warnings(mon) == []
    notices = mon.notices().to_dicts()
    correlated = [n for n in notices if n["examples"] == "correlated rows"]
    assert {n["detector"] for n in correlated} >= {"lac: coverage drop", "lac: conformity martingale"}
    assert all("blocks=" in n["message"] and "held back" in n["message"] for n in correlated)
    assert mon.status()["detectors_on_correlated_rows"] == len(correlated)


def test_with_blocks_the_same_stream_is_quiet_and_states_a_block_null() -> None:
    mon = stream(0, blocks=True)
    assert label_warnings(mon) == []
    assert mon.status()["detectors_on_correlated_rows"] == 0
    drop = next(d for d in mon._shift.detectors if d.name == "lac: coverage drop")  # type: ignore[union-attr]
    assert drop.blocks_ is not None
    assert drop.blocks_.blocks_tested_ == 299  # every unit but the last (no later key has closed it)
    null = drop.blocks_.nulls_[0]
    assert null is not None and null.rho > 0.9  # units: all rows covered or none
    assert 250 <= null.effective_rows <= 310  # ~ one row per calibration unit


def test_a_real_drop_on_blocks_alarms_and_its_words_agree_with_its_evidence() -> None:
    mon = stream(3, blocks=True, shift_from=10, batches=40)
    warnings = {w["name"]: w for w in label_warnings(mon)}
    assert "lac: coverage drop" in warnings
    text = warnings["lac: coverage drop"]["explanation"]
    rate, allowed = (
        float(v) for v in re.search(r"block miss rate was ([\d.]+)% against ε₀ = ([\d.]+)%", text).groups()
    )  # type: ignore[union-attr]
    assert rate > allowed
    assert warnings["lac: coverage drop"]["first_batch"] >= 10
    assert "blocks" in warnings["lac: coverage drop"]["false_alarm_control"]


def test_row_level_explanations_cite_a_stretch_above_the_allowed_rate() -> None:
    # independent rows (units of one row), labels flipped from batch 8 to 16, then healthy again
    rng = np.random.default_rng(5)
    mon = monitor()
    P, y, _ = units(rng, 3000, 1)
    mon.calibrate(probs=P, y=y)
    for batch in range(30):
        P, y, _ = units(rng, 300, 1)
        if 8 <= batch < 16:
            y = np.where(rng.random(y.shape[0]) < 0.3, rng.integers(0, K, y.shape[0]), y)
        ids = np.arange(batch * 300, batch * 300 + 300)
        mon.observe(probs=P, ids=ids)
        mon.label(ids, y)
    drops = [w for w in label_warnings(mon) if w["name"] == "lac: coverage drop"]
    assert drops
    for w in drops:
        found = re.search(r"missed \(([\d.]+)%, against the allowed ([\d.]+)%\)", w["explanation"])
        assert found is not None, w["explanation"]
        assert float(found.group(1)) > float(found.group(2)), w["explanation"]
    assert mon.status()["detectors_on_correlated_rows"] == 0


def test_a_snapshot_keeps_open_blocks_and_streams_on_like_the_original(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    mon = monitor()
    P, y, b = units(rng, 300, 10)
    mon.calibrate(probs=P, y=y, blocks=b)
    feed = []
    for batch in range(24):
        P, y, b = units(rng, 10, 10, start=10_000 + batch * 100)
        if batch >= 8:
            y = np.where(rng.random(y.shape[0]) < 0.3, rng.integers(0, K, y.shape[0]), y)
        feed.append((P, y, b, np.arange(batch * 100, batch * 100 + 100)))

    def step(target: cw.Monitor, batch: int) -> None:
        P, _, b, ids = feed[batch]
        target.observe(probs=P, ids=ids, blocks=b)
        if batch >= 2:  # labels two batches late
            _, y_late, _, ids_late = feed[batch - 2]
            target.label(ids_late, y_late)

    for batch in range(13):
        step(mon, batch)
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    for batch in range(13, 24):
        step(mon, batch)
        step(loaded, batch)
    columns = ["name", "statistic", "first_batch", "last_batch", "explanation", "false_alarm_control"]
    assert label_warnings(mon), "the shifted labels should alarm"
    assert mon.warnings().select(columns).equals(loaded.warnings().select(columns))


@pytest.mark.parametrize(
    ("blocks", "message"),
    [
        (np.arange(5), "blocks must hold one key per row: expected 10, got 5"),
        ([None] * 10, r"blocks\[0\] is missing"),
        (np.full(10, 7), "key '7' names calibration rows too"),
    ],
)
def test_bad_blocks_are_refused_and_change_nothing(blocks: Any, message: str) -> None:
    rng = np.random.default_rng(0)
    mon = monitor()
    P, y, b = units(rng, 100, 5)
    mon.calibrate(probs=P, y=y, blocks=b)
    P, y, b = units(rng, 2, 5, start=500)
    mon.observe(probs=P, blocks=b, ids=np.arange(10))
    before = (mon.status(), mon.warnings().height)
    with pytest.raises((ValueError, TypeError), match=message):
        mon.observe(probs=P, blocks=blocks, ids=np.arange(10, 20))
    assert (mon.status(), mon.warnings().height) == before
    with pytest.raises(ValueError, match="key '500' comes back"):
        mon.observe(probs=P, blocks=np.r_[np.full(5, 502), np.full(5, 500)], ids=np.arange(10, 20))
    assert (mon.status(), mon.warnings().height) == before


def test_every_label_warning_cites_evidence_on_the_side_it_claims() -> None:
    """Independent rows, most labels of class 0 flipped in batches 8–19: texts agree with statistics."""
    rng = np.random.default_rng(11)
    mon = monitor()
    P, y, _ = units(rng, 3000, 1)
    mon.calibrate(probs=P, y=y)
    for batch in range(30):
        P, y, _ = units(rng, 300, 1)
        if 8 <= batch < 20:
            y = np.where((y == 0) & (rng.random(y.shape[0]) < 0.9), rng.integers(1, K, y.shape[0]), y)
        ids = np.arange(batch * 300, batch * 300 + 300)
        mon.observe(probs=P, ids=ids)
        mon.label(ids, y)
    warnings = label_warnings(mon)
    assert {"by-class: class coverage drop", "lac: conformity martingale"} <= {w["name"] for w in warnings}
    for w in warnings:
        text = w["explanation"]
        if "coverage drop" in w["name"]:
            found = re.search(r"missed \(([\d.]+)%, against the allowed ([\d.]+)%\)", text)
            assert found is not None, text
            assert float(found.group(1)) > float(found.group(2)), text
        else:  # a martingale: its stretch's p-values stray from uniform, or the text says it is their order
            found = re.search(r"average ([\d.]+) with (\d+)% below 0.1 and (\d+)% above 0.9", text)
            assert found is not None, text
            mean, low, high = float(found.group(1)), int(found.group(2)), int(found.group(3))
            assert abs(mean - 0.5) >= 0.05 or abs(low - 10) >= 4 or abs(high - 10) >= 4 or "order" in text, (
                text
            )
        if w["name"] == "by-class: class coverage drop":  # the flipped rows' new classes are missed
            assert re.match(r"class '[123]': ", text), text
