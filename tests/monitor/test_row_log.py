"""The row log: a label is never lost for lateness, and counts exactly as it would have in the window.

A monitor with a small window and the row log (the default) must hold, after any sequence of
observes and late labels (relabels included), the statistics, detector looks, warnings and ACI
level of a twin whose window holds every row — on a real task (scikit-learn's digits, K = 10).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import calwatch as cw
from calwatch.stream.row_log import RowLog
from tests.scale.logs import DIFFERENT_BY_DESIGN, real_task


def _monitor(window: int, *, row_log: Any = True, shift: Any = "default") -> cw.Monitor:
    task = real_task("digits")
    mon = cw.Monitor(
        calibrators={
            "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
            "aps-by-label": cw.SplitConformalClassifier(score="aps", alpha=0.1, mondrian="label"),
            "risk": cw.RiskEstimator(method="temperature"),
            "aci": cw.Adaptive(cw.SplitConformalClassifier(score="lac", alpha=0.1)),
        },
        window=window, row_log=row_log, shift=shift,
    )  # fmt: skip
    return mon.calibrate(probs=task.P_cal, y=task.y_cal)


def _same(a: cw.Monitor, b: cw.Monitor) -> None:
    for view in ("summary", "class_coverage", "warnings"):
        x = getattr(a, view)().drop(DIFFERENT_BY_DESIGN, strict=False)
        y = getattr(b, view)().drop(DIFFERENT_BY_DESIGN, strict=False)
        assert x.equals(y), view
    if a.shift_watch is not None and b.shift_watch is not None:
        assert a.shift_watch.look_rows() == b.shift_watch.look_rows()
    assert a.calibrators["aci"].alpha_t_ == b.calibrators["aci"].alpha_t_
    sa, sb = a.status(), b.status()
    for key in ("rows_seen", "rows_labelled", "rows_pending", "labels_unmatched", "batches"):
        assert sa[key] == sb[key], key


def _stream(mons: list[cw.Monitor], n_batches: int, m: int, seed: int = 0) -> list[tuple[list[str], Any]]:
    task = real_task("digits")
    rng = np.random.default_rng(seed)
    batches = []
    for b in range(n_batches):
        rows = rng.integers(0, task.P.shape[0], size=m)
        ids = [f"{b}-{i}" for i in range(m)]
        for mon in mons:
            mon.observe(probs=task.P[rows], ids=ids)
        batches.append((ids, task.y[rows]))
    return batches


def test_labels_a_million_rows_late_count_as_if_they_came_at_once() -> None:
    late, at_once = _monitor(100_000), _monitor(10**7, row_log=False)
    batches = _stream([late, at_once], n_batches=110, m=10_000)
    for ids, y in batches[:10]:  # 10^6 rows and more have passed since these were observed
        wrong = (y + 3) % 10
        reports = [mon.label(ids[::3], wrong[::3]) for mon in (late, at_once)]
        assert reports[0] == reports[1] and reports[0].matched == len(ids[::3])
        reports = [mon.label(ids, y) for mon in (late, at_once)]  # relabels most, first labels the rest
        assert reports[0] == reports[1] and reports[0].relabelled == len(ids[::3])
    _same(late, at_once)
    status = late.status()
    assert status["rows_in_window"] == 100_000 and status["labels_from_log"] == 10 * (10_000 + 3_334)
    assert status["rows_logged"] == 1_000_000


def test_a_label_for_an_id_reused_after_its_row_left_goes_to_the_newest_row() -> None:
    task = real_task("digits")
    mon, twin = _monitor(100, shift=None), _monitor(100, shift=None, row_log=False)
    P = task.P[:100]
    for m in (mon, twin):
        m.observe(probs=P, ids=[f"x{i}" for i in range(100)])
        m.observe(probs=P, ids=[f"y{i}" for i in range(100)])  # batch 0 leaves the window
        m.observe(probs=P, ids=[f"x{i}" for i in range(100)])  # x-ids again, batch 1 leaves
    report = mon.label(["x5"], [int(task.y[5])])
    assert report.batches == (2,)  # the newest row of the id, as in the window
    assert mon.label(["y5"], [int(task.y[5])]).batches == (1,)  # from the row log


def test_a_label_reads_the_newest_parts_only_until_its_ids_are_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts are read newest first, 1, 2, 4... at a time, and no further once every id is found.

    An id reused across parts counts in its newest row only, as in the window; an unknown id
    reads the whole log (and is counted unmatched).
    """
    import polars as pl

    from calwatch.stream import row_log

    task = real_task("digits")
    mon = _monitor(100, shift=None)
    mon._row_log.part_rows = 100  # type: ignore[attr-defined]  # one part per batch that leaves
    P = task.P[:100]
    for b in range(12):  # x-ids in batches 0 and 6: logged twice, in parts 0 and 6
        mon.observe(probs=P, ids=[f"{'x' if b % 6 == 0 else b}-{i}" for i in range(100)])
    assert len(mon._row_log.parts) == 11  # type: ignore[attr-defined]
    read: list[list[str]] = []
    scan = pl.scan_parquet

    def counting(files, *args, **kwargs):  # type: ignore[no-untyped-def]
        rows = [f for f in ([files] if isinstance(files, str) else files) if Path(f).name.startswith("rows-")]
        if rows and (not read or read[-1] != rows):  # row parts (the label log has its own); the
            read.append(rows)  # second pass over the same parts (the hits' rows) counted once
        return scan(files, *args, **kwargs)

    monkeypatch.setattr(row_log.pl, "scan_parquet", counting)
    assert mon.label(["10-1", "10-2"], [0, 1]).batches == (10,)
    assert [len(r) for r in read] == [1]  # the newest part only
    read.clear()
    assert mon.label(["x-5"], [int(task.y[5])]).batches == (6,)  # newest row of the reused id
    assert [len(r) for r in read] == [1, 2, 4]  # parts 10; 9-8; 7-4: found in part 6, stop
    read.clear()
    report = mon.label(["7-3", "never-seen"], [0, 0])
    assert report.batches == (7,) and report.unmatched == 1
    assert sum(len(r) for r in read) == 11  # an unknown id: the whole log was read


def test_rows_read_before_the_lock_count_as_if_read_under_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``label`` reads logged rows before it takes the monitor's lock; what happens in between counts.

    Between the read and the locked call, another thread may relabel the same rows, push the
    window's rows into new parts, or log more: the call must still equal a twin that kept every
    row in memory, and under the lock read only the parts written since (never the old ones).
    """
    import polars as pl

    from calwatch.stream import row_log

    task = real_task("digits")
    mon, twin = _monitor(200, shift="default"), _monitor(10**6, row_log=False)
    mon._row_log.part_rows = 100  # type: ignore[attr-defined]  # one part per batch that leaves
    P, y = task.P[:100], task.y[:100]
    for b in range(6):
        for m in (mon, twin):
            m.observe(probs=P, ids=[f"{b}-{i}" for i in range(100)])
    for m in (mon, twin):  # the label log holds batch 1's first labels
        m.label([f"1-{i}" for i in range(0, 100, 2)], (y[::2] + 1) % 10)
    ids = [f"1-{i}" for i in range(0, 100, 4)] + [f"2-{i}" for i in range(30)] + [f"5-{i}" for i in range(10)]
    ids.append("never-seen")
    labels = np.concatenate([y[::4], y[:30], y[:10], [0]])
    prefetched = mon._labels.prefetch_logged(ids)
    assert prefetched is not None and sorted(prefetched.hits) == [1, 2]  # batch 5 is in the window
    for m in (mon, twin):  # another thread, meanwhile: relabels batch 1, moves batch 5 to the log
        m.label([f"1-{i}" for i in range(0, 100, 8)], y[::8])
        for b in (6, 7):
            m.observe(probs=P, ids=[f"{b}-{i}" for i in range(100)])
    read: list[str] = []
    scan = pl.scan_parquet

    def counting(files, *args, **kwargs):  # type: ignore[no-untyped-def]
        read.extend(Path(f).name for f in ([files] if isinstance(files, str) else files))
        return scan(files, *args, **kwargs)

    monkeypatch.setattr(row_log.pl, "scan_parquet", counting)
    report = mon._label_locked(ids, labels, prefetched)
    assert report == twin.label(ids, labels)
    assert report.batches == (1, 2, 5) and report.unmatched == 1 and report.relabelled == 25
    old_parts = {p["file"] for p in mon._row_log.parts[: prefetched.parts_seen]}  # type: ignore[attr-defined]
    assert read and not old_parts & set(read)  # under the lock: the new parts and labels only
    _same(mon, twin)


def test_the_row_log_survives_save_and_load(tmp_path: Path) -> None:
    mon, twin = _monitor(1_000), _monitor(10**6, row_log=False)
    batches = _stream([mon, twin], n_batches=12, m=500, seed=1)
    ids, y = batches[0]
    for m in (mon, twin):
        m.label(ids[:100], (y[:100] + 1) % 10)
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    for m in (loaded, twin):
        m.label(ids, y)  # relabels 100 rows whose first label the log kept across the save
    _same(loaded, twin)
    assert loaded.status()["rows_logged"] == mon.status()["rows_logged"] == 5_000


def test_aci_takes_a_correction_read_from_the_row_log_as_one_in_the_window() -> None:
    """A logged row's corrected label moves ACI as in the window: to the final labels' level."""
    task = real_task("digits")
    corrected, final_only = _monitor(1_000, shift=None), _monitor(1_000, shift=None)
    batches = _stream([corrected, final_only], n_batches=4, m=500, seed=3)
    ids, y = batches[0]  # batch 0 has left the window (batches 2 and 3 fill it)
    corrected.label(ids, (y + 3) % 10)  # wrong, applied from the log...
    wrong = corrected.calibrators["aci"].alpha_t_
    assert corrected.label(ids, y).relabelled == 500  # ...corrected from the log
    final_only.label(ids, y)
    assert corrected.status()["labels_from_log"] == 1_000
    a, b = corrected.calibrators["aci"].alpha_t_, final_only.calibrators["aci"].alpha_t_
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)  # the same steps summed in another order
    assert abs(wrong - b) > 1  # the wrong labels' level was far off
    for mon in (corrected, final_only):  # the sets taken after the correction: equal
        mon.observe(probs=task.P[:500], ids=[f"4-{i}" for i in range(500)])
    assert corrected.rows(batch=4)["set_aci"].to_list() == final_only.rows(batch=4)["set_aci"].to_list()


def test_a_tampered_row_log_is_refused(tmp_path: Path) -> None:
    mon = _monitor(1_000, shift=None)
    _stream([mon], n_batches=4, m=500)
    mon.save(tmp_path / "snap")
    part = next((tmp_path / "snap" / "rowlog").glob("rows-*.parquet"))
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.unlink()  # a hard link: write a new file, not through the link
    part.write_bytes(bytes(data))
    with pytest.raises(cw.SnapshotError, match="does not match its checksum"):
        cw.Monitor.load(tmp_path / "snap")


def test_a_label_call_that_fails_changes_neither_the_monitor_nor_the_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mon, twin = _monitor(1_000), _monitor(10**6, row_log=False)
    batches = _stream([mon, twin], n_batches=6, m=500, seed=2)
    ids, y = batches[0]
    mon.label(ids[:50], (y[:50] + 1) % 10)
    twin.label(ids[:50], (y[:50] + 1) % 10)
    watch = mon.shift_watch
    assert watch is not None
    calls = {"n": 0}
    original = type(watch).labelled

    def fails(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        raise MemoryError("injected")

    monkeypatch.setattr(type(watch), "labelled", fails)
    before = mon.summary(), mon.status()
    with pytest.raises(MemoryError):
        mon.label(ids, y)
    assert calls["n"] == 1
    assert mon.summary().equals(before[0]) and mon.status() == before[1]
    monkeypatch.setattr(type(watch), "labelled", original)
    for m in (mon, twin):
        m.label(ids, y)
    _same(mon, twin)


def test_a_full_disk_never_stops_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    def full(self: RowLog) -> None:
        raise OSError(28, "No space left on device")

    mon = _monitor(1_000, shift=None)
    assert mon._row_log is not None
    mon._row_log.part_rows = 1
    monkeypatch.setattr(RowLog, "flush", full)
    batches = _stream([mon], n_batches=4, m=500)
    status = mon.status()
    assert status["row_log_errors"] == 2 and status["rows_logged"] == 0
    assert status["rows_pending"] == 1_000  # the window's; the lost rows wait for nothing
    ids, y = batches[0]
    report = mon.label(ids[:10], y[:10])
    assert (report.matched, report.unmatched) == (0, 10)


def test_row_log_argument_is_checked(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="row_log must be True, False or a folder path"):
        cw.Monitor(row_log=3)  # type: ignore[arg-type]
    mon = cw.Monitor(row_log=tmp_path / "log", window=10)
    task = real_task("digits")
    mon.calibrate(probs=task.P_cal, y=task.y_cal)
    for b in range(3):
        mon.observe(probs=task.P[:10], ids=[f"{b}-{i}" for i in range(10)])
    assert mon.status()["rows_logged"] == 20
    assert mon._row_log is not None and mon._row_log.folder == tmp_path / "log"
    mon._row_log.flush()
    assert len(list((tmp_path / "log").glob("rows-*.parquet"))) == 1
