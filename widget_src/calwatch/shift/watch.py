"""The monitor's shift layer: its detectors, the default set, and the warning log.

:class:`ShiftWatch` feeds the detectors as batches and labels come; an
:class:`~calwatch.engine.shift.monitors.EpisodeTracker` turns their alarms into one warning per
episode; warnings can be acknowledged, with a note, and the acknowledgement is kept in the log.
:func:`default_detectors` builds ``Monitor(shift="default")``'s set.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from calwatch.core.who import default_author
from calwatch.engine.shift.monitors import (
    EpisodeTracker,
    MonitorResult,
    ShiftWarning,
)
from calwatch.shift.base import (
    CalibrationData,
    Detector,
    FloatArray,
    IntArray,
)
from calwatch.shift.label_free import (
    BlockConfidenceMartingale,
    BlockDistanceMartingale,
    ConfidenceMartingale,
    ReferenceDistanceMartingale,
)
from calwatch.shift.looks import LookStore
from calwatch.shift.on_labels import ClassCoverageDropDetector, CoverageDropDetector, LabelMartingale


@contextlib.contextmanager
def detectors_kept_on_failure(watch: ShiftWatch | None) -> Iterator[None]:
    """Run the block; should it raise, put the detectors back as they were.

    :meth:`ShiftWatch.kept_on_failure` (nothing to do without detectors).
    """
    if watch is None:
        yield
        return
    with watch.kept_on_failure():
        yield


def default_detectors(
    calibrators: dict[str, Any], *, embeddings: bool = False, blocks: bool = False
) -> list[Detector]:
    """The detectors ``Monitor(shift="default")`` runs for these calibrators.

    ``embeddings``: whether the model gives embeddings (adds the reference distance martingale).
    ``blocks``: whether ``calibrate()`` was given block keys; the label-free martingales then
    test whole blocks (:class:`BlockConfidenceMartingale`, :class:`BlockDistanceMartingale`),
    for streams whose rows are exchangeable only block by block (days, hours).
    """
    detectors: list[Detector] = [BlockConfidenceMartingale() if blocks else ConfidenceMartingale()]
    if embeddings:
        detectors.append(BlockDistanceMartingale() if blocks else ReferenceDistanceMartingale())
    for key, cal in calibrators.items():
        if getattr(cal, "kind", None) == "risk":
            continue
        if hasattr(cal, "label_scores"):
            detectors.append(LabelMartingale(key))
        if getattr(cal, "alpha", None) is not None:
            detectors.append(CoverageDropDetector(key))
        if getattr(cal, "mondrian", None) == "label":
            detectors.append(ClassCoverageDropDetector(key))
    return detectors


@dataclass
class Acknowledgement:
    """Who acknowledged a warning, when, and what they noted."""

    by: str
    at: str
    note: str


class _Changes:
    """What a :meth:`ShiftWatch.kept_on_failure` block would undo: checkpoints and looks written."""

    __slots__ = ("looks", "restores")

    def __init__(self) -> None:
        self.restores: dict[int, Callable[[], None]] = {}  # id(detector) -> its checkpoint
        self.looks: list[tuple[tuple[str, int], dict[str, Any] | None]] = []  # (key, what it held)

    def adopt(self, inner: _Changes) -> None:
        """Take over what a nested block that succeeded would undo (this block's checkpoints are older)."""
        for key, restore in inner.restores.items():
            self.restores.setdefault(key, restore)
        self.looks.extend(inner.looks)


@dataclass
class ShiftWatch:
    """The monitor's detectors, their per-batch statistics and the warning log."""

    detectors: list[Detector]
    patience: int = 3
    tracker: EpisodeTracker = field(init=False)
    acknowledgements: dict[int, Acknowledgement] = field(default_factory=dict)
    looks: LookStore = field(default_factory=LookStore)  # (detector, batch) -> look, as columns

    def __post_init__(self) -> None:
        names = [d.name for d in self.detectors]
        if len(set(names)) != len(names):
            msg = f"shift detectors must have distinct names; got {names}"
            raise ValueError(msg)
        self.tracker = EpisodeTracker(patience=self.patience)

    def _after_decode(self) -> None:
        """A snapshot written before :class:`~calwatch.shift.looks.LookStore` kept the looks as a dict."""
        looks = self.__dict__.get("looks")
        if isinstance(looks, dict):
            self.looks = LookStore(looks)

    def checkpoint(self) -> Callable[[], None]:
        """A function that puts every detector, the looks and the warning episodes back as they are now.

        The monitor takes one before it feeds a batch or labels to the detectors and calls it if
        anything raises, so a failed ``observe`` or ``label`` leaves the detectors as they were
        (each detector's own checkpoint copies only what its update changes: a few arrays of
        the size of its state, never the data it has seen).
        """
        restores = [detector.checkpoint() for detector in self.detectors]
        looks = self.looks.copy()
        tracker = self.tracker
        warnings = list(tracker._warnings)
        episodes = {name: list(state) for name, state in tracker._open.items()}

        def restore() -> None:
            for undo in restores:
                undo()
            self.looks = looks.copy()
            tracker._warnings = list(warnings)
            tracker._open = {name: list(state) for name, state in episodes.items()}

        return restore

    @contextlib.contextmanager
    def kept_on_failure(self) -> Iterator[None]:
        """Run the block; should it raise, put every detector, the looks and the episodes back.

        :meth:`checkpoint` for one block, paying only for what the block changes: a detector's
        checkpoint is taken when the block first feeds it (:meth:`observe` feeds only the
        label-free ones), and the looks are not copied (a copy grows with the stream): the block
        keeps a journal of the looks it writes, with what each held before, and a failure undoes
        them in reverse order. The warning episodes are copied (one entry per episode). Blocks
        may nest; an inner block that succeeds hands what it would undo to the outer one.
        """
        tracker = self.tracker
        warnings = list(tracker._warnings)
        episodes = {name: list(state) for name, state in tracker._open.items()}
        outer: _Changes | None = self.__dict__.get("_changes")
        changes = self.__dict__["_changes"] = _Changes()
        try:
            yield
        except BaseException:
            for undo in changes.restores.values():
                undo()
            for key, look in reversed(changes.looks):
                if look is None:
                    del self.looks[key]
                else:
                    self.looks[key] = look
            tracker._warnings = warnings
            tracker._open = episodes
            raise
        else:
            if outer is not None:
                outer.adopt(changes)
        finally:
            if outer is None:
                del self.__dict__["_changes"]
            else:
                self.__dict__["_changes"] = outer

    def _feeding(self, detector: Detector) -> None:
        """About to feed ``detector``: inside :meth:`kept_on_failure`, take its checkpoint first (once)."""
        changes: _Changes | None = self.__dict__.get("_changes")
        if changes is not None and id(detector) not in changes.restores:
            changes.restores[id(detector)] = detector.checkpoint()

    def calibrate(self, data: CalibrationData) -> None:
        """Fit every detector (fresh state: warnings and looks of an earlier calibration stay)."""
        for detector in self.detectors:
            detector.calibrate(data)
        self.calibration_keys_ = set(data.blocks) if data.blocks is not None else set()

    def _record(
        self, detector: Detector, result: MonitorResult | None, batch: int, rows: tuple[int, int]
    ) -> None:
        if result is None:
            return
        calibrator = getattr(detector, "calibrator", None)
        key = (result.name, batch)
        previous = self.looks.get(key)
        changes: _Changes | None = self.__dict__.get("_changes")
        if changes is not None:  # inside kept_on_failure(): what the key held, to undo
            changes.looks.append((key, previous))
        self.looks[key] = {
            "batch": batch,
            "detector": result.name,
            "calibrator": calibrator,
            "log10_statistic": result.statistic if math.isfinite(result.statistic) else None,
            "log10_threshold": result.threshold,
            "alarm": result.alarm or bool(previous and previous["alarm"]),
        }
        self.tracker.observe(result, batch=batch, rows=rows)

    def observe(
        self,
        batch: int,
        rows: tuple[int, int],
        probs: FloatArray,
        embeddings: npt.NDArray[np.float32] | None = None,
        blocks: list[str] | None = None,
    ) -> None:
        """Feed a newly observed batch to the label-free detectors (``blocks``: per-row block keys)."""
        for detector in self.detectors:
            if detector.needs_labels:
                observed = getattr(detector, "observed", None)
                if observed is not None:  # label tests register the rows their labels will join
                    self._feeding(detector)
                    observed(batch, probs.shape[0], blocks)
                continue
            self._feeding(detector)
            if getattr(detector, "uses_blocks", False):
                result = detector.observe(probs, embeddings, blocks)  # type: ignore[call-arg]
            elif getattr(detector, "needs_embeddings", False):
                result = detector.observe(probs, embeddings)  # type: ignore[call-arg]
            else:
                result = detector.observe(probs)
            self._record(detector, result, batch, rows)

    @property
    def uses_blocks(self) -> bool:
        """Whether a detector tests whole blocks (then ``observe`` needs each row's block key)."""
        return any(getattr(d, "uses_blocks", False) for d in self.detectors) or bool(
            self.__dict__.get("calibration_keys_")
        )

    def check_blocks(self, blocks: list[str]) -> None:
        """Raise ``ValueError`` (changing nothing) if a block detector would refuse these keys.

        A key that named calibration rows is refused too: a block split between calibration and
        the stream would be tested against itself.
        """
        calibration_keys: set[str] = self.__dict__.get("calibration_keys_") or set()
        if calibration_keys:
            shared = calibration_keys.intersection(blocks)
            if shared:
                key = min(shared)
                msg = (
                    f"blocks: key {key!r} names calibration rows too; a block must lie wholly in the "
                    "calibration data or wholly in the stream (give stream blocks keys of their own)"
                )
                raise ValueError(msg)
        for detector in self.detectors:
            check = getattr(detector, "check_blocks", None)
            if check is not None:
                check(blocks)

    def labelled(
        self,
        batch: int,
        rows: tuple[int, int],
        probs: FloatArray,
        labels: IntArray,
        covered: dict[str, npt.NDArray[np.bool_]],
        where: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None,
    ) -> None:
        """Feed newly labelled rows (arrival order) to the label-based detectors.

        ``batch`` is the latest batch at the time: their looks are charted there. ``where``:
        each row's batch and position in it, which the block-aware label tests need to join a
        label to its block (or batch).
        """
        if labels.shape[0] == 0:
            return
        for detector in self.detectors:
            if detector.needs_labels:
                self._feeding(detector)
                if where is not None and getattr(detector, "uses_positions", False):
                    result = detector.labelled(probs, labels, covered, where=where, now=batch)  # type: ignore[call-arg]
                else:
                    result = detector.labelled(probs, labels, covered)
                self._record(detector, result, batch, rows)

    def acknowledge(self, episode: int, note: str = "", by: str | None = None) -> Acknowledgement:
        """Acknowledge a warning; the note, who and when are kept in the log."""
        if not 0 <= episode < len(self.tracker.warnings_):
            msg = f"episode must be one of 0..{len(self.tracker.warnings_) - 1}; got {episode!r}"
            raise ValueError(msg)
        who = by if by is not None else default_author()
        ack = Acknowledgement(by=who, at=datetime.now(UTC).isoformat(timespec="seconds"), note=str(note))
        self.acknowledgements[episode] = ack
        return ack

    def notices(self) -> list[dict[str, Any]]:
        """What the detectors do by rule (e.g. classes too rare to test), one dict per rule applied."""
        out = []
        for detector in self.detectors:
            notice = getattr(detector, "notice", None)
            found = notice() if callable(notice) else None
            if found is not None:
                out.append(found)
        return out

    def warning_records(self) -> list[dict[str, Any]]:
        """Every warning so far as plain dicts (oldest first), with its acknowledgement."""
        out = []
        for warning in self.tracker.warnings_:
            ack = self.acknowledgements.get(warning.episode)
            out.append(_warning_dict(warning, ack))
        return out

    def warnings(self) -> pl.DataFrame:
        """The warning log as a polars frame (one row per episode)."""
        schema: dict[str, Any] = {
            "episode": pl.Int64, "name": pl.String, "threatens": pl.String, "statistic": pl.Float64,
            "threshold": pl.Float64, "false_alarm_control": pl.String, "first_batch": pl.Int64,
            "last_batch": pl.Int64, "first_row": pl.Int64, "last_row": pl.Int64, "open": pl.Boolean,
            "explanation": pl.String, "action": pl.String, "acknowledged": pl.Boolean,
            "ack_by": pl.String, "ack_at": pl.String, "ack_note": pl.String,
        }  # fmt: skip
        return pl.DataFrame(self.warning_records(), schema=schema)

    def look_rows(self, batches: tuple[int, ...] | None = None) -> list[dict[str, Any]]:
        """The per-batch detector statistics (for the shift chart)."""
        wanted = None if batches is None else set(batches)
        return [dict(look) for (_, batch), look in self.looks.items() if wanted is None or batch in wanted]


def _warning_dict(warning: ShiftWarning, ack: Acknowledgement | None) -> dict[str, Any]:
    return {
        "episode": warning.episode,
        "name": warning.name,
        "threatens": warning.threatens,
        "statistic": warning.statistic if math.isfinite(warning.statistic) else None,
        "threshold": warning.threshold,
        "false_alarm_control": warning.false_alarm_control,
        "first_batch": warning.first_batch,
        "last_batch": warning.last_batch,
        "first_row": warning.rows[0],
        "last_row": warning.rows[1],
        "open": warning.open,
        "explanation": warning.explanation,
        "action": warning.action,
        "acknowledged": ack is not None,
        "ack_by": None if ack is None else ack.by,
        "ack_at": None if ack is None else ack.at,
        "ack_note": None if ack is None else ack.note,
    }
