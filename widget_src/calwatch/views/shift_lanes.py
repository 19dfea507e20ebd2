"""The Shift view's lanes: one per detector, its alarm episodes over the batches, its state in words.

Six detector statistics drawn around one threshold line restart after every alarm: a reader
cannot tell which detector is in alarm, since when, or why. The lanes answer that first. Each
detector gets a lane across the batch axis; each of its warning episodes is a bar from the batch
it began to the last batch of its evidence, coloured by its state (open, acknowledged, closed);
the lane says in words where the detector stands now and, on hover, what its statistic means and
what it promises. Clicking a lane shows that detector's evidence curve alone (the ``shift``
chart, through the ``detector_pick`` signal).

Rows of the ``shift_lanes`` dataset (keyed, small: one per detector and one per episode):

- ``row="lane"``: ``key, detector, calibrator, order, batch, batch_end`` (the stream so far),
  ``state`` (``open``, ``acknowledged``, ``quiet``, ``waiting``), ``words``, ``meaning``;
- ``row="episode"``: ``key, detector, order, episode, batch, batch_end``, ``state`` (``open``,
  ``acknowledged``, ``closed``), ``words`` (one line: since when, the evidence stretch).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor

#: What each detector's statistic means, in plain words, by detector class.
MEANINGS: dict[str, str] = {
    "ConfidenceMartingale": "evidence that the model's confidence no longer looks as on the calibration rows",
    "BlockConfidenceMartingale": "evidence, block by block, that the model's confidence changed",
    "ReferenceDistanceMartingale": "evidence that inputs moved away from the calibration data (embeddings)",
    "BlockDistanceMartingale": "evidence, block by block, that inputs moved away from the calibration data",
    "LabelMartingale": "evidence that labelled rows fit the model worse than calibration rows (conformity)",
    "CoverageDropDetector": "a test that the coverage of labelled rows fell below the promise",
    "ClassCoverageDropDetector": "a test that some class's coverage fell below the promise",
}
_GENERIC = "a sequential test of the stream against the calibration data"


def batch_label(monitor: Monitor, index: int) -> str:
    """``"batch 3"``, or ``"batch 3 (2009 #12)"`` when the batch was observed under a name."""
    records = monitor.batch_records
    if not 0 <= index < len(records):
        return f"batch {index}"
    name = records[index].name
    return f"batch {index}" if name == str(index) else f"batch {index} ({name})"


def warning_state(row: Mapping[str, Any]) -> str:
    """``"open"``, ``"acknowledged"`` (open, a person has seen it) or ``"closed"``."""
    if row.get("open"):
        return "acknowledged" if row.get("acknowledged") else "open"
    return "closed"


def warning_line(monitor: Monitor, row: Mapping[str, Any]) -> str:
    """One warning in one line: name, state since when, evidence stretch, what it threatens."""
    state = warning_state(row)
    first, last = int(row["first_batch"]), int(row["last_batch"])
    since = batch_label(monitor, first)
    stretch = f"batches {first}–{last}" if last != first else f"batch {first}"
    rows = ""
    if row.get("first_row") is not None and row.get("last_row") is not None:
        rows = f", rows {int(row['first_row']):,}–{int(row['last_row']):,}"
    when = {
        "open": f"open since {since}",
        "acknowledged": f"open since {since} (acknowledged)",
        "closed": f"closed (began at {since})",
    }[state]
    return f"{row['name']}: {when}; evidence from {stretch}{rows}; threatens {row['threatens']}"


def _calibrator_of(name: str) -> str | None:
    """``"lac: coverage drop"`` watches calibrator ``lac``; label-free detectors watch the model."""
    return name.split(":", 1)[0] if ":" in name else None


def lane_rows(monitor: Monitor) -> list[dict[str, Any]]:
    """The ``shift_lanes`` rows of a monitor (none without detectors)."""
    watch = monitor.shift_watch
    if watch is None:
        return []
    warnings = watch.warning_records()
    last = max(monitor.n_batches - 1, 0)
    out: list[dict[str, Any]] = []
    for order, detector in enumerate(watch.detectors):
        name = detector.name
        episodes = [w for w in warnings if w["name"] == name]
        open_ = [w for w in episodes if w["open"]]
        look = watch.looks.latest(name)
        if any(not w["acknowledged"] for w in open_):
            state = "open"
        elif open_:
            state = "acknowledged"
        else:
            state = "quiet" if look is not None else "waiting"
        if open_:
            newest = max(open_, key=lambda w: int(w["first_batch"]))
            words = f"alarm {warning_state(newest)} since {batch_label(monitor, int(newest['first_batch']))}"
            if newest.get("ack_by"):
                words += f" (acknowledged by {newest['ack_by']})"
        elif look is not None:
            closed = f"; {len(episodes)} earlier alarm{'s' if len(episodes) != 1 else ''}" if episodes else ""
            stat, limit = look["log10_statistic"], look["log10_threshold"]
            words = f"quiet: log10 statistic {stat:.1f}, alarm at {limit:.1f}{closed}"
            if stat >= limit and hasattr(detector, "dispersion_reading_"):
                # A row-level label test holds its alarms until it can tell whether labelled rows
                # cluster (its bound assumes independent rows): whole batches decide meanwhile.
                words = (
                    f"no alarm: log10 statistic {stat:.1f} crossed {limit:.1f}, but row-level alarms wait "
                    f"until labelled rows are known not to cluster (whole batches decide){closed}"
                )
        else:
            words = "no look yet (a label-based detector waits for labels)"
        what = MEANINGS.get(type(detector).__name__, _GENERIC)
        promise = next((w["false_alarm_control"] for w in episodes if w.get("false_alarm_control")), None)
        meaning = f"{what}; drawn as log10 of the statistic, which alarms at its threshold"
        if promise:
            meaning += f". {promise}"
        out.append({
            "key": f"lane|{name}", "row": "lane", "detector": name, "calibrator": _calibrator_of(name),
            "order": order, "batch": 0, "batch_end": last, "state": state, "words": words,
            "meaning": meaning, "episode": None,
        })  # fmt: skip
        for w in episodes:
            out.append({
                "key": f"episode|{int(w['episode'])}", "row": "episode", "detector": name,
                "calibrator": _calibrator_of(name), "order": order, "batch": int(w["first_batch"]),
                "batch_end": int(w["last_batch"]), "state": warning_state(w),
                "words": warning_line(monitor, w), "meaning": meaning, "episode": int(w["episode"]),
            })  # fmt: skip
    return out


__all__ = ["MEANINGS", "batch_label", "lane_rows", "warning_line", "warning_state"]
