"""What comes in: a classification monitor's ``calibrate`` and ``observe``.

:class:`Intake` is a collaborator of :class:`~calwatch.monitor.Monitor`: it turns inputs (``X``
through the model, or ``probs=`` / ``logits=``) into checked model outputs, fits every calibrator
on copies (committing only once all fitted), and runs a batch through every calibrator's kind,
its ids checked against the id contract (:func:`calwatch.core.ids.check_id_kind`) before anything
changes. Randomised calibrators draw from their own seeded streams: a rejected batch puts them
back, so the next call draws what it would have drawn.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from calwatch.core.classes import ClassEncoder, as_1d_array
from calwatch.core.ids import check_id_kind, ids_with_kind
from calwatch.core.models import ModelOutputs
from calwatch.engine.shift.blocks import block_keys
from calwatch.kinds import kind_of
from calwatch.kinds.admit import require_embeddings
from calwatch.shift.base import CalibrationData, Detector
from calwatch.shift.watch import ShiftWatch, default_detectors, detectors_kept_on_failure
from calwatch.stream.records import NO_LABEL, BatchRecord, BatchRows, BatchStats
from calwatch.stream.slice_counts import CALIBRATION_VALUES, CalibrationRows, SliceStore
from calwatch.stream.slice_groups import column_indices, groups_for
from calwatch.stream.slices import CodeArray

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor

IntArray = npt.NDArray[np.intp]


class Intake:
    """Calibration and batches coming in (a collaborator of :class:`~calwatch.monitor.Monitor`).

    Stateless: it reads and changes the monitor it is given, whose public methods hold the lock.
    """

    def __init__(self, monitor: Monitor) -> None:
        self.m: Monitor = monitor

    def outputs(
        self, X: Any, probs: Any, logits: Any, *, n_classes: int | None, embeddings: Any = None
    ) -> ModelOutputs:
        """The model's outputs for ``X``, or the given ``probs=`` / ``logits=``, checked."""
        if X is not None and (probs is not None or logits is not None or embeddings is not None):
            msg = "pass either X (inputs for the model) or probs=/logits= (its outputs), not both"
            raise ValueError(msg)
        if X is not None:
            if self.m._adapter is None:
                msg = (
                    "X was given but the monitor has no model: pass probs= instead, Monitor(model), "
                    "or Monitor.load(path, model=model) for a saved monitor"
                )
                raise ValueError(msg)
            if hasattr(X, "__len__") and len(X) == 0:
                msg = "X is empty: a batch needs at least one row"
                raise ValueError(msg)
            outputs = self.m._adapter(X)
            if n_classes is not None and outputs.n_classes != n_classes:
                msg = (
                    f"the model outputs {outputs.n_classes} classes but the monitor was "
                    f"calibrated on {n_classes}"
                )
                raise ValueError(msg)
            return outputs
        if probs is None and logits is None:
            msg = "no data: pass X (with a model) or probs= (precomputed probabilities)"
            raise ValueError(msg)
        return ModelOutputs.from_arrays(
            probs, logits=logits, embeddings=embeddings, n_classes=n_classes, tolerance=self.m._tolerance
        )

    def make_encoder(self, K: int) -> ClassEncoder:
        """The class names of ``K`` output columns: ``classes=``, else the model's, else ``0..K-1``."""
        classes = self.m._fixed_classes
        if classes is None and self.m._adapter is not None:
            classes = self.m._adapter.classes
        if classes is None:
            classes = np.arange(K)
        if len(classes) != K:
            msg = f"classes has {len(classes)} entries but the model outputs {K} columns"
            raise ValueError(msg)
        return ClassEncoder(classes)

    def calibrate(
        self,
        X: Any = None,
        y: Any = None,
        *,
        probs: Any = None,
        logits: Any = None,
        embeddings: Any = None,
        categories: Any = None,
        reference: Any = None,
        blocks: Any = None,
        meta: Any = None,
        slice_bins: Mapping[str, Sequence[Any]] | None = None,
    ) -> Monitor:
        """See :meth:`Monitor.calibrate`."""
        if y is None:
            msg = "y is required: the true labels of the calibration rows"
            raise ValueError(msg)
        outputs = self.outputs(X, probs, logits, n_classes=None, embeddings=embeddings)
        encoder = self.make_encoder(outputs.n_classes)
        y_idx = encoder.encode(y, "y", n_rows=len(outputs))
        block_keys_ = self.calibration_blocks(blocks, len(outputs))
        slices = self.m._slicing.fixed(meta, slice_bins, len(outputs))
        kinds = {key: kind_of(cal) for key, cal in self.m._calibrators.items()}
        admit_keys = [key for key, kind in kinds.items() if kind.reference == "full"]
        uses_reference = admit_keys or any(kind.reference for kind in kinds.values())
        if admit_keys:
            train = self.reference_set(reference, encoder, admit_keys)
        elif reference is not None and uses_reference and isinstance(reference, np.ndarray):
            train = (np.asarray(reference, dtype=np.float32), None, None)  # selectors need embeddings only
        elif reference is not None and uses_reference:
            train = self.reference_set(reference, encoder, admit_keys)
        else:
            train = None
        if reference is not None and not uses_reference:
            msg = (
                "reference must be None: no calibrator uses a reference set (Venn-ADMIT and "
                "selective calibrators do)"
            )
            raise ValueError(msg)
        cal_codes = None if slices is None or meta is None else slices.encoding.codes(meta, len(outputs))
        groups = self.groups(categories, slices, cal_codes, "calibrate")
        fitted = {}
        for key, calibrator in self.m._calibrators.items():
            candidate: Any = copy.deepcopy(calibrator)
            kinds[key].fit(key, candidate, outputs, y_idx, categories=groups[key], reference=train)
            fitted[key] = candidate
        shift = self.m._shift
        if self.m._shift_spec is not None:
            if shift is None:
                detectors: list[Detector] = (
                    default_detectors(
                        fitted, embeddings=outputs.embeddings is not None, blocks=block_keys_ is not None
                    )
                    if isinstance(self.m._shift_spec, str)
                    else list(self.m._shift_spec)
                )
                shift = ShiftWatch(detectors)
            names = [str(c) for c in encoder.classes.tolist()]
            covered = (
                None if block_keys_ is None else self.calibration_covered(fitted, outputs, y_idx, groups)
            )
            shift.calibrate(
                CalibrationData(
                    outputs.probs,
                    y_idx,
                    fitted,
                    outputs.embeddings,
                    names,
                    blocks=block_keys_,
                    covered=covered,
                )
            )
        # Commit only once every calibrator (and detector) fitted.
        self.m._shift = shift
        # The calibration rows' confidence scores, sorted: tables' buckets are tested against them
        # (calwatch.engine.shift.bucket_tests).
        self.m._reference_confidence = np.sort(1.0 - np.asarray(outputs.probs).max(axis=1))
        self.m._rows_in_blocks = block_keys_ is not None
        for key, candidate in fitted.items():
            self.m._calibrators[key] = candidate
        self.m._encoder = encoder
        if slices is not None:
            kept = cal_codes is not None and outputs.probs.size <= CALIBRATION_VALUES
            slices.calibration = (
                CalibrationRows(
                    np.asarray(outputs.probs, dtype=np.float64), y_idx.astype(np.int64), cal_codes
                )
                if kept and cal_codes is not None
                else None
            )
        self.m._slices = slices
        counts = np.bincount(y_idx, minlength=len(encoder))
        self.m.calibration_ = {
            "n_rows": len(outputs),
            "class_counts": dict(zip(encoder.classes.tolist(), counts.tolist(), strict=True)),
            "calibrated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        if self.m._widget is not None:
            self.m._widget.refresh_layout()
        return self.m

    def reference_set(self, reference: Any, encoder: ClassEncoder, keys: list[str]) -> tuple[Any, Any, Any]:
        """``(embeddings, logits, labels)`` of the reference set Venn-ADMIT calibrators need."""
        if reference is None:
            msg = (
                f"reference is required: calibrators {keys} (Venn-ADMIT) need the model's training "
                "set, as (X_ref, y_ref) or precomputed (embeddings, logits, y)"
            )
            raise ValueError(msg)
        if isinstance(reference, dict):
            reference = tuple(reference.get(k) for k in ("embeddings", "logits", "y"))
        if not isinstance(reference, (tuple, list)) or len(reference) not in (2, 3):
            msg = "reference must be (X_ref, y_ref) or (embeddings, logits, y)"
            raise TypeError(msg)
        if len(reference) == 2:
            X_ref, y_ref = reference
            if self.m._adapter is None:
                msg = "reference=(X_ref, y_ref) needs a model; without one pass (embeddings, logits, y)"
                raise ValueError(msg)
            outputs = self.m._adapter(X_ref)
        else:
            E_ref, L_ref, y_ref = reference
            outputs = ModelOutputs.from_arrays(
                None, logits=L_ref, embeddings=E_ref, n_classes=len(encoder), tolerance=self.m._tolerance
            )
        E = require_embeddings(outputs, "reference")
        return (
            E,
            outputs.logits_or_log_probs(),
            encoder.encode(y_ref, "reference labels", n_rows=len(outputs)),
        )

    def observe(
        self,
        X: Any = None,
        *,
        probs: Any = None,
        logits: Any = None,
        embeddings: Any = None,
        ids: Any = None,
        y: Any = None,
        categories: Any = None,
        name: str | None = None,
        blocks: Any = None,
        meta: Any = None,
    ) -> int:
        """See :meth:`Monitor.observe`."""
        encoder = self.m._require_encoder()
        outputs = self.outputs(X, probs, logits, n_classes=len(encoder), embeddings=embeddings)
        m = len(outputs)
        row_ids, id_kind = self.batch_ids(ids, m)
        labels = None if y is None else encoder.encode(y, "y", n_rows=m)
        cats = None if categories is None else as_1d_array(categories, "categories")
        if cats is not None and cats.shape[0] != m:
            msg = f"categories has {cats.shape[0]} values but the batch has {m} rows"
            raise ValueError(msg)
        if cats is not None and not any(
            getattr(cal, "mondrian", None) == "category" and getattr(cal, "groups_from", None) is None
            for cal in self.m._calibrators.values()
        ):
            msg = (
                "categories must be None: no calibrator was built with mondrian='category' (those with "
                "groups_from= take their categories from meta=)"
            )
            raise ValueError(msg)
        row_blocks = self.stream_blocks(blocks, m)
        codes = self.m._slicing.codes(meta, m)
        groups = self.groups(cats, self.m._slices, codes, "observe")
        # Randomised calibrators draw from their own seeded streams while computing: a call that
        # fails puts the streams back, so the next call draws what it would have drawn.
        streams = random_streams(self.m._calibrators.values())
        drawn_from = [stream.bit_generator.state for stream in streams]
        try:
            K = len(encoder)
            results: dict[str, Any] = {}
            stats: dict[str, BatchStats] = {}
            identified = replace(outputs, ids=row_ids)
            for key, cal in self.m._calibrators.items():
                kind = kind_of(cal)
                results[key] = kind.apply(key, cal, identified, groups[key])
                stats[key] = kind.observed(results[key], K)
            # Everything is validated and computed: commit.
            index = len(self.m._stream.batches)
            rows = BatchRows(
                ids=row_ids, probs=outputs.probs, packed_sets={}, labels=np.full(m, NO_LABEL, dtype=np.intp),
                categories=cats, slice_codes=codes,
            )  # fmt: skip
            for key, cal in self.m._calibrators.items():
                kind_of(cal).keep(rows, key, results[key])
            record = BatchRecord(
                index=index,
                name=str(index) if name is None else str(name),
                observed_at=datetime.now(UTC),
                n_rows=m,
                stats=stats,
                rows=rows,
            )
            every_row = np.arange(m)
            newly_labelled = 0
            slice_counts = None if codes is None else self.m._slicing.observed(codes, results)
            if labels is not None:
                record.stats, newly_labelled, _ = self.m._labels.labelled_stats(record, every_row, labels)
                slice_labels = self.m._slicing.labelled(rows, every_row, labels)
                if slice_counts is not None and slice_labels is not None:
                    slice_counts = slice_counts.merge(slice_labels)
                rows.labels[:] = labels
            # Detectors and ACI last (their state changes as they are fed; undone if anything
            # raises), then the stream.
            first_row = self.m._stream.rows_seen
            with detectors_kept_on_failure(self.m._shift):
                if self.m._shift is not None:
                    self.m._shift.observe(
                        index, (first_row, first_row + m - 1), outputs.probs, outputs.embeddings, row_blocks
                    )
                if labels is not None:
                    self.m._labels.feed_labels(
                        [(record, every_row, labels)], latest=index, rows_seen=first_row + m
                    )
            if ids is None:
                self.m._next_auto_id += m
            self.m._id_kind = self.m._id_kind or id_kind
            if slice_counts is not None:
                assert self.m._slices is not None
                self.m._slices.append(index, slice_counts)  # the next batch: checked by codes()
            self.m._stream.append(record)
            self.m._stream.rows_labelled += newly_labelled
            self.m._notify((index,))
            return index
        except BaseException:
            for stream, state in zip(streams, drawn_from, strict=True):
                stream.bit_generator.state = state
            raise

    def groups(
        self, categories: Any, slices: SliceStore | None, codes: CodeArray | None, call: str
    ) -> dict[str, Any]:
        """What each calibrator takes as its rows' groups: its slice groups, or the user's ``categories``.

        A calibrator built with ``groups_from=`` gets its groups from the rows' slice codes
        (:func:`calwatch.stream.slice_groups.groups_for`); every other one gets ``categories``.

        Raises
        ------
        ValueError
            A ``groups_from`` calibrator on rows without slice codes, or naming a column the
            monitor does not slice by (names the calibrator and the columns).
        """
        cats = None if categories is None else as_1d_array(categories, "categories")
        out: dict[str, Any] = {}
        for key, cal in self.m._calibrators.items():
            columns = getattr(cal, "groups_from", None)
            if columns is None:
                out[key] = cats
                continue
            if slices is None or codes is None:
                msg = (
                    f"calibrators[{key!r}] takes its groups from the slice columns {list(columns)}: "
                    f"{call}() needs meta= with them"
                )
                raise ValueError(msg)
            column_indices(slices.encoding, columns, f"calibrators[{key!r}].groups_from")
            out[key] = groups_for(cal, slices.encoding, codes)
        return out

    @staticmethod
    def calibration_covered(
        fitted: dict[str, Any], outputs: ModelOutputs, labels: npt.NDArray[np.intp], groups: Mapping[str, Any]
    ) -> dict[str, npt.NDArray[np.bool_]]:
        """Whether each calibration row lies in each set calibrator's fitted set (for block null rates).

        The block label tests size their calibration-draw slack from how the calibration rows'
        misses cluster in their blocks (:func:`calwatch.engine.shift.block_labels.block_null_rate`).
        Each calibrator is applied to a copy, so a randomised one's own stream does not move.
        """
        out: dict[str, npt.NDArray[np.bool_]] = {}
        for key, cal in fitted.items():
            kind = kind_of(cal)
            if not kind.has_sets:
                continue
            results = kind.apply(key, copy.deepcopy(cal), outputs, groups[key])
            hits = kind.covered(results, labels)
            if hits is not None:
                out[key] = np.asarray(hits, dtype=np.bool_)
        return out

    def calibration_blocks(self, blocks: Any, n: int) -> list[str] | None:
        """``calibrate(blocks=)`` checked: one key per row, a monitor with detectors, used alike each time."""
        if blocks is None:
            keys = None
        elif self.m._shift_spec is None:
            msg = "blocks must be None: block keys are for shift detectors, and this monitor runs none"
            raise ValueError(msg)
        else:
            keys = block_keys(blocks, n, "blocks")
        if (
            self.m._shift is not None
            and isinstance(self.m._shift_spec, str)
            and self.m._shift.uses_blocks != (keys is not None)
        ):
            was = "with" if self.m._shift.uses_blocks else "without"
            msg = (
                f"blocks: this monitor's detectors were first calibrated {was} block keys; pass blocks= "
                "on every calibrate() or on none (or start a new Monitor)"
            )
            raise ValueError(msg)
        return keys

    def stream_blocks(self, blocks: Any, m: int) -> list[str] | None:
        """``observe(blocks=)`` checked against the detectors, before anything changes."""
        uses_blocks = self.m._shift is not None and self.m._shift.uses_blocks
        if blocks is None:
            if uses_blocks:
                msg = "blocks is required: calibrate() was given block keys, so every row needs its block key"
                raise ValueError(msg)
            return None
        if not uses_blocks:
            msg = "blocks must be None: no detector tests blocks (give calibrate() blocks= to use them)"
            raise ValueError(msg)
        keys = block_keys(blocks, m, "blocks")
        assert self.m._shift is not None
        self.m._shift.check_blocks(keys)
        return keys

    def batch_ids(self, ids: Any, m: int) -> tuple[list[Hashable], str | None]:
        """A batch's ids (given, or the next consecutive integers) and their kind, checked.

        Refused (naming ``ids``): a wrong length, unhashable, null or NaN ids, ids repeated
        within the batch or still in the window, and ids of another kind than the monitor's
        (:func:`calwatch.core.ids.check_id_kind`). Rows without ids get the next consecutive
        integers and no kind.
        """
        kind: str | None = None  # consecutive integers are outside the id-type rule (check_id_kind)
        if ids is None:
            row_ids: list[Hashable] = list(range(self.m._next_auto_id, self.m._next_auto_id + m))
        else:
            row_ids, kind = ids_with_kind(ids)
            if len(row_ids) != m:
                msg = f"ids has {len(row_ids)} values but the batch has {m} rows"
                raise ValueError(msg)
            try:
                distinct = len(set(row_ids))
            except TypeError as err:
                msg = "ids must be hashable values (int, str, tuple, ...)"
                raise TypeError(msg) from err
            if distinct != m:
                msg = f"ids must be distinct within a batch; {m - distinct} duplicates found"
                raise ValueError(msg)
        check_id_kind(self.m._id_kind, kind, "ids")
        clash = self.m._stream.first_known_id(row_ids)
        if clash is not None:
            where = self.m._stream.id_index[clash][0]
            msg = f"ids: {clash!r} was already observed (batch {where}, still in the window)"
            raise ValueError(msg)
        return row_ids, kind


def random_streams(objects: Any, depth: int = 2) -> list[np.random.Generator]:
    """The numpy random generators that calwatch objects (and calwatch objects they hold) draw from.

    Calibrators keep their seeded streams as attributes (e.g. a randomised APS's ``u`` draws); a
    wrapper (``cw.Adaptive``) holds its calibrator. ``depth`` bounds the walk.
    """
    found: list[np.random.Generator] = []
    for obj in objects:
        for value in getattr(obj, "__dict__", {}).values():
            if isinstance(value, np.random.Generator):
                found.append(value)
            elif depth > 1 and type(value).__module__.startswith("calwatch."):
                found.extend(random_streams([value], depth - 1))
    return found
