"""The Shift view's lanes: a row per detector (its state in words) and per alarm episode."""

from __future__ import annotations

from calwatch.views.shift_lanes import MEANINGS, lane_rows, warning_state

from ..synthetic import pets_monitor


def test_a_lane_per_detector_and_a_bar_per_episode_in_the_warning_log_s_states():
    mon = pets_monitor()
    rows = lane_rows(mon)
    lanes = [r for r in rows if r["row"] == "lane"]
    episodes = [r for r in rows if r["row"] == "episode"]
    detectors = mon.shift_watch.detectors
    assert [r["detector"] for r in lanes] == [d.name for d in detectors]
    assert [r["order"] for r in lanes] == list(range(len(detectors)))
    warnings = mon.warnings().to_dicts()
    assert [(r["episode"], r["batch"], r["batch_end"], r["state"]) for r in episodes] == [
        (w["episode"], w["first_batch"], w["last_batch"], warning_state(w)) for w in warnings
    ]
    first = warnings[0]
    lane = next(r for r in lanes if r["detector"] == first["name"])
    assert lane["state"] == "open"
    assert lane["words"] == f"alarm open since batch {first['first_batch']}"
    assert lane["meaning"].startswith(MEANINGS["ConfidenceMartingale"])
    assert first["false_alarm_control"] in lane["meaning"]  # what it promises, on hover
    quiet = next(r for r in lanes if r["detector"].endswith("coverage drop"))
    assert quiet["state"] == "quiet" and quiet["words"].startswith("quiet: log10 statistic")
    assert quiet["calibrator"] == quiet["detector"].split(":")[0]  # the calibrator picker filters it
    assert len({r["key"] for r in rows}) == len(rows)  # keyed rows, for the live diff


def test_acknowledging_moves_the_lane_and_its_episode_to_acknowledged():
    mon = pets_monitor()
    mon.acknowledge(0, note="seen", by="bo")
    rows = lane_rows(mon)
    (episode,) = [r for r in rows if r["row"] == "episode"]
    lane = next(r for r in rows if r["row"] == "lane" and r["detector"] == episode["detector"])
    assert episode["state"] == lane["state"] == "acknowledged"
    assert lane["words"].endswith("(acknowledged by bo)")
    assert "(acknowledged)" in episode["words"]


def test_a_monitor_without_detectors_has_no_lanes():
    import calwatch as cw

    assert lane_rows(cw.Monitor(shift=None)) == []
