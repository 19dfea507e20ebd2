"""Monitor(blocks=): block martingales for seasonal streams, checked at the boundary, all or nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import calwatch as cw
from calwatch.shift import BlockConfidenceMartingale, BlockDistanceMartingale


def _day(rng: np.random.Generator, n: int, level: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One day's rows: the day's own weather moves every row's logits together (correlated rows)."""
    weather = rng.normal(scale=0.5) + level
    E = (rng.normal(size=(n, 4)) + weather).astype(np.float32)
    logits = np.column_stack([E[:, 0], E[:, 1] * 0.5, -E[:, 0]]).astype(np.float64)
    y = logits.argmax(axis=1)
    return E, logits, y


def _days(rng: np.random.Generator, n_days: int, rows: int = 120, level: float = 0.0, first: int = 0):
    parts = [_day(rng, rows, level) for _ in range(n_days)]
    E = np.concatenate([p[0] for p in parts])
    L = np.concatenate([p[1] for p in parts])
    y = np.concatenate([p[2] for p in parts])
    keys = [f"d{first + i:03d}" for i in range(n_days) for _ in range(rows)]
    return E, L, y, keys


def _calibrated(seed: int = 0, *, embeddings: bool = False) -> cw.Monitor:
    rng = np.random.default_rng(seed)
    E, L, y, keys = _days(rng, 20)
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)})
    return mon.calibrate(logits=L, y=y, blocks=keys, embeddings=E if embeddings else None)


def _state(mon: cw.Monitor) -> tuple:
    watch = mon.shift_watch
    assert watch is not None
    det = watch.detectors[0]
    assert isinstance(det, BlockConfidenceMartingale) and det.martingale_ is not None
    return (
        mon.n_batches,
        det.blocks_.open_key_,
        int(det.blocks_.open_counts_.sum()),
        list(det.blocks_.closed_),
        det.martingale_.n_seen_,
        det.martingale_.log10_martingale_,
    )


def test_blocks_replace_the_row_martingales_and_state_their_null() -> None:
    mon = _calibrated(embeddings=True)
    watch = mon.shift_watch
    assert watch is not None
    names = [d.name for d in watch.detectors]
    assert names[:2] == ["confidence martingale (blocks)", "reference distance martingale (blocks)"]
    assert isinstance(watch.detectors[1], BlockDistanceMartingale)
    assert "lac: conformity martingale" in names  # label-based detectors are unchanged
    rng = np.random.default_rng(5)
    for day in range(40, 100, 3):  # a big shift: every day's logits move (the bag learns it: many days)
        E, L, _, keys = _days(rng, 3, level=3.0, first=day)
        mon.observe(logits=L, embeddings=E, blocks=keys)
    warnings = mon.warnings()
    found = warnings.filter(warnings["name"] == "confidence martingale (blocks)")
    assert found.height == 1
    text = found["false_alarm_control"][0]
    assert "Ville" in text and "blocks (each whole" in text
    assert "exchangeable with the calibration blocks" in found["explanation"][0]
    assert "reference distance martingale (blocks)" in warnings["name"].to_list()


def test_quiet_days_raise_nothing() -> None:
    mon = _calibrated(1)
    rng = np.random.default_rng(11)
    for day in range(20, 80, 4):
        _, L, _, keys = _days(rng, 4, first=day)
        mon.observe(logits=L, blocks=keys)
    assert mon.warnings().is_empty()
    assert _state(mon)[4] == 59  # every day but the last one (still open) was tested


def test_bad_blocks_are_refused_before_anything_changes() -> None:
    mon = _calibrated()
    rng = np.random.default_rng(2)
    _, L, _, keys = _days(rng, 2, first=30)
    mon.observe(logits=L, blocks=keys)
    before = _state(mon)
    _, L2, _, _ = _days(rng, 1, first=32)
    with pytest.raises(ValueError, match="blocks is required"):
        mon.observe(logits=L2)
    with pytest.raises(ValueError, match="comes back after its block was complete"):
        mon.observe(logits=L2, blocks=["d030"] * len(L2))
    with pytest.raises(ValueError, match="blocks must hold one key per row: expected 120, got 3"):
        mon.observe(logits=L2, blocks=["d032"] * 3)
    with pytest.raises(ValueError, match=r"blocks\[0\] is missing"):
        mon.observe(logits=L2, blocks=[None] * len(L2))
    assert _state(mon) == before
    mon.observe(logits=L2, blocks=["d031"] * len(L2))  # the open day goes on: accepted
    assert _state(mon)[2] == before[2] + len(L2)


def test_blocks_need_detectors_and_the_same_choice_at_every_calibration() -> None:
    rng = np.random.default_rng(3)
    _, L, y, keys = _days(rng, 6)
    with pytest.raises(ValueError, match="blocks must be None: block keys are for shift detectors"):
        cw.Monitor(shift=None).calibrate(logits=L, y=y, blocks=keys)
    plain = cw.Monitor().calibrate(logits=L, y=y)
    with pytest.raises(ValueError, match="blocks must be None: no detector tests blocks"):
        plain.observe(logits=L[:10], blocks=keys[:10])
    with pytest.raises(ValueError, match="first calibrated without block keys"):
        plain.calibrate(logits=L, y=y, blocks=keys)
    with pytest.raises(ValueError, match="at least 4 calibration blocks"):
        cw.Monitor().calibrate(logits=L, y=y, blocks=["a", "b", "c"] * (len(y) // 3))


def test_a_failing_detector_undoes_the_open_block(monkeypatch: pytest.MonkeyPatch) -> None:
    mon = _calibrated()
    rng = np.random.default_rng(4)
    _, L, _, keys = _days(rng, 3, first=30)
    mon.observe(logits=L, blocks=keys)
    before = _state(mon)
    watch = mon.shift_watch
    assert watch is not None

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("injected")

    label_free_last = [d for d in watch.detectors if not d.needs_labels][-1]
    monkeypatch.setattr(label_free_last, "observe", broken)
    _, L2, _, keys2 = _days(rng, 2, first=33)
    with pytest.raises(RuntimeError, match="injected"):
        mon.observe(logits=L2, blocks=keys2)
    assert _state(mon) == before


def test_a_saved_monitor_goes_on_with_its_open_block(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    first = _days(rng, 5, first=30)
    second = _days(rng, 5, first=35)
    # Cut the stream inside day d032 and again inside d037.
    cut_a, cut_b = 2 * 120 + 50, 2 * 120 + 70
    straight = _calibrated()
    straight.observe(logits=first[1][:cut_a], blocks=first[3][:cut_a])
    straight.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    for mon in (straight, loaded):
        mon.observe(logits=first[1][cut_a:], blocks=first[3][cut_a:])
        mon.observe(logits=second[1][:cut_b], blocks=second[3][:cut_b])
    assert _state(loaded) == _state(straight)
