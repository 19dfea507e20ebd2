"""All or nothing: a call that fails inside changes nothing; a listener that fails undoes nothing.

``observe`` and ``label`` have their own failure-injection tests (``test_concurrency.py``); here
the other calls a user or the widget makes: ``retune``, ``acknowledge``, ``note``, ``what_if``,
and the listeners (the widget, autosave) that hear of a committed change.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw
import calwatch.monitor.monitor as monitor_module
import calwatch.shift.watch as shift_watch_module
from calwatch.engine.selective.calibrator import SelectiveCalibrator

from ..synthetic import softmax_data

FAST = {"epochs": 1, "steps_per_epoch": 3, "sample_size": 64, "progress": False, "n_threads": 1}


def _boom(*args: Any, **kwargs: Any) -> Any:
    raise MemoryError("injected")


def _conformal_monitor() -> cw.Monitor:
    P, y = softmax_data(3000, K=4, seed=1)
    mon = cw.Monitor(
        calibrators={
            "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
            "aps": cw.SplitConformalClassifier(score="aps", alpha=0.1),
        }
    )
    return mon.calibrate(probs=P, y=y)


def _state(mon: cw.Monitor) -> dict[str, pl.DataFrame]:
    return {
        "summary": mon.summary(),
        "class_coverage": mon.class_coverage(),
        "warnings": mon.warnings(),
        "notes": mon.notes(),
        "rows": mon.rows().select(pl.exclude("^set_.*$")),
        "status": pl.DataFrame([mon.status()]),
    }


def _assert_unchanged(before: dict[str, pl.DataFrame], mon: cw.Monitor) -> None:
    after = _state(mon)
    for name, frame in before.items():
        assert_frame_equal(frame, after[name]), name


@pytest.fixture
def warned() -> tuple[cw.Monitor, list[tuple[int, ...]]]:
    """A monitor with an open confidence warning, and a listener's log of what it heard."""
    mon = _conformal_monitor()
    for b in range(3):
        mon.observe(probs=softmax_data(500, K=4, seed=200 + b)[0], ids=range(b * 500, (b + 1) * 500))
    for b in range(3, 9):  # a flatter model: much less confident rows
        mon.observe(
            probs=softmax_data(500, K=4, seed=300 + b, scale=0.3)[0], ids=range(b * 500, (b + 1) * 500)
        )
    assert mon.warnings().height >= 1
    heard: list[tuple[int, ...]] = []
    mon.subscribe(heard.append)
    return mon, heard


def test_a_failing_listener_is_a_warning_and_the_call_stands() -> None:
    """The change is committed before listeners hear of it: one that raises warns, and the
    caller gets the call's result (a producer thread must not retry an applied batch)."""
    mon, twin = _conformal_monitor(), _conformal_monitor()
    heard: list[tuple[int, ...]] = []

    def broken(batches: tuple[int, ...]) -> None:
        raise RuntimeError("the view broke")

    mon.subscribe(broken)
    mon.subscribe(heard.append)
    P, y = softmax_data(500, K=4, seed=7)
    with pytest.warns(RuntimeWarning, match="the view broke.*was applied"):
        assert mon.observe(probs=P, ids=range(500)) == 0
    with pytest.warns(RuntimeWarning, match="the view broke"):
        report = mon.label(list(range(500)), y)
    assert report.matched == 500 and heard == [(0,), (0,)]  # the next listener still heard both
    twin.observe(probs=P, ids=range(500))
    twin.label(list(range(500)), y)
    assert_frame_equal(mon.summary().drop("observed_at"), twin.summary().drop("observed_at"))
    assert mon.status() == twin.status()


def test_acknowledge_failing_inside_changes_nothing(
    warned: tuple[cw.Monitor, list[tuple[int, ...]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    mon, heard = warned
    before = _state(mon)
    monkeypatch.setattr(shift_watch_module, "Acknowledgement", _boom)
    with pytest.raises(MemoryError):
        mon.acknowledge(0, "known", by="ana")
    _assert_unchanged(before, mon)
    assert heard == []  # a failed call tells no listener
    monkeypatch.undo()
    mon.acknowledge(0, "known", by="ana")
    assert mon.warnings().row(0, named=True)["ack_by"] == "ana" and heard == [()]


def test_note_failing_inside_changes_nothing(
    warned: tuple[cw.Monitor, list[tuple[int, ...]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    mon, heard = warned
    before = _state(mon)
    monkeypatch.setattr(monitor_module, "default_author", _boom)
    with pytest.raises(MemoryError):
        mon.note("looked into it", batch=4)
    _assert_unchanged(before, mon)
    assert heard == []
    monkeypatch.undo()
    assert mon.note("looked into it", batch=4, author="ana").note_id == 0  # no id was used up


def test_what_if_failing_inside_changes_nothing(
    warned: tuple[cw.Monitor, list[tuple[int, ...]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    mon, heard = warned
    before = _state(mon)
    alphas = {key: cal.alpha for key, cal in mon.calibrators.items()}
    monkeypatch.setattr(cw.SplitConformalClassifier, "sets_within", _boom)
    with pytest.raises(MemoryError):
        mon.what_if(0.2)
    _assert_unchanged(before, mon)
    assert {key: cal.alpha for key, cal in mon.calibrators.items()} == alphas and heard == []


def test_retune_failing_inside_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure on the last window batch, after the others were recounted: none of them changes."""
    P, y = softmax_data(1500, K=3, seed=0)
    mon = cw.Monitor(
        calibrators={
            "sel": SelectiveCalibrator(coverage=0.7, seed=0, **FAST),
            "lac": cw.SplitConformalClassifier(),
        }
    )
    mon.calibrate(probs=P, y=y)
    data = [softmax_data(300, K=3, seed=10 + b) for b in range(4)]
    for b, (P_b, y_b) in enumerate(data):
        mon.observe(probs=P_b, ids=[f"{b}-{i}" for i in range(300)])
        mon.label([f"{b}-{i}" for i in range(300)], y_b)
    before = _state(mon)
    select_scores = SelectiveCalibrator.select_scores
    calls: list[int] = []

    def fails_on_the_last(self: SelectiveCalibrator, scores: Any) -> Any:
        calls.append(1)
        if len(calls) == len(data):
            raise MemoryError("injected")
        return select_scores(self, scores)

    monkeypatch.setattr(SelectiveCalibrator, "select_scores", fails_on_the_last)
    with pytest.raises(MemoryError):
        mon.retune(0.5)
    assert len(calls) == len(data)
    _assert_unchanged(before, mon)
    assert mon.calibrators["sel"].coverage == 0.7
    monkeypatch.undo()
    threshold = mon.retune(0.5)
    assert mon.summary().filter(pl.col("calibrator") == "sel")["threshold"].unique().to_list() == [threshold]
