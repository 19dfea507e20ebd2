"""The one codec of batch rows (snapshots' ``rows.parquet``, the row log's parts) round-trips them.

Any batches' rows — classification rows with sets, risk estimates, selective scores and Venn-ADMIT
results, or a regression's true values, shared base predictions and draws; int, string or tuple
ids; with or without Mondrian categories; labelled or not — come back equal from a parquet file
and a JSON mapping. Snapshots written before the codec re-encode to their own ``rows.parquet``,
and the row log still reads parts of its first layout. That a monitor saved, loaded and labelled
late matches the live one is checked for sets and risk (``test_store.py``, ``test_row_log.py``)
and regression (``test_store_regression.py``); here for Venn-ADMIT, selective and categories.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Hashable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import calwatch as cw
from calwatch.engine.regression.calibrator import ModularConformalCalibrator
from calwatch.engine.selective.calibrator import SelectiveCalibrator
from calwatch.engine.venn_admit.admit import VennAdmit
from calwatch.kinds.regression import row_fields
from calwatch.stream.records import BatchRecord, BatchRows
from calwatch.stream.row_codec import decode_rows, encode_ids, encode_rows
from calwatch.stream.row_log import RowLog, file_sha256, take_rows

FIXTURES = Path(__file__).parents[1] / "fixtures"
AT = datetime(2026, 1, 1, tzinfo=UTC)
LEVELS = (0.5, 0.9)
CODEC = settings(max_examples=40, deadline=None)


# ---------------------------------------------------------------------------- comparing rows
def _same_array(a: Any, b: Any, what: str) -> None:
    assert isinstance(b, np.ndarray) and a.dtype == b.dtype, (what, a.dtype, getattr(b, "dtype", b))
    np.testing.assert_array_equal(a, b, err_msg=what)


def _same_rows(a: BatchRows, b: BatchRows) -> None:
    """Equal field by field: values, dtypes, key order, id types, shared base predictions."""
    assert b.ids == a.ids and [type(i) for i in b.ids] == [type(i) for i in a.ids]
    _same_array(a.probs, b.probs, "probs")
    _same_array(a.labels, b.labels, "labels")
    assert (a.categories is None) == (b.categories is None)
    if a.categories is not None and b.categories is not None:
        assert b.categories.tolist() == a.categories.tolist()
    for name in ("packed_sets", "risks"):
        kept, read = getattr(a, name), getattr(b, name)
        assert list(read) == list(kept), name
        for key in kept:
            _same_array(kept[key], read[key], f"{name}[{key!r}]")
    for name in ("admit", "selective", "extra"):
        kept, read = getattr(a, name), getattr(b, name)
        assert {k: list(v) for k, v in read.items()} == {k: list(v) for k, v in kept.items()}, name
        for key, fields in kept.items():
            for field, values in fields.items():
                _same_array(values, read[key][field], f"{name}[{key!r}][{field!r}]")
    if a.regression:
        _same_array(a.regression["y"], b.regression["y"], "y")
        kept, read = a.regression["per_calibrator"], b.regression["per_calibrator"]
        assert list(read) == list(kept)
        for key, saved in kept.items():
            assert sorted(read[key]) == sorted(saved)
            for field, values in saved.items():
                if field == "pred" and isinstance(values, list):
                    for j, member in enumerate(values):
                        _same_array(member, read[key]["pred"][j], f"{key!r} pred {j}")
                elif values is None:
                    assert read[key][field] is None
                else:
                    _same_array(values, read[key][field], f"{key!r} {field}")
        for k1 in kept:  # a base prediction shared by calibrators is read back once, shared
            for k2 in kept:
                assert (read[k1]["pred"] is read[k2]["pred"]) == (kept[k1]["pred"] is kept[k2]["pred"])
    else:
        assert not b.regression


def _round_trip(records: list[BatchRecord], task: str = "classification") -> None:
    """Encode, through a parquet file and JSON, decode each batch: the rows come back equal."""
    frame, mapping = encode_rows(records, task)
    buffer = io.BytesIO()
    frame.write_parquet(buffer)
    buffer.seek(0)
    read = pl.read_parquet(buffer)
    mapping = json.loads(json.dumps(mapping, allow_nan=False))
    parts = {int(batch): part for (batch,), part in read.group_by("batch", maintain_order=True)}
    assert list(parts) == [r.index for r in records]
    for record in records:
        assert record.rows is not None
        part = parts[record.index]
        rows = decode_rows(part, mapping, task)
        if task == "regression":
            rows.regression["levels"] = record.rows.regression["levels"]  # the monitor's, as loading does
        _same_rows(record.rows, rows)


# ---------------------------------------------------------------------------- any rows
def _ids(kind: str, start: int, m: int) -> list[Hashable]:
    if kind == "int":
        return list(range(start, start + m))
    if kind == "str":
        return [f"row-{i}" for i in range(start, start + m)]
    return [("t", i, f"{i % 3}") for i in range(start, start + m)]


@st.composite
def _batch_sizes(draw: st.DrawFn) -> tuple[list[int], str, float, np.random.Generator]:
    sizes = draw(st.lists(st.integers(1, 7), min_size=1, max_size=3))
    id_kind = draw(st.sampled_from(["int", "str", "tuple"]))
    unlabelled = draw(st.sampled_from([0.0, 0.5, 1.0]))  # share of rows without a label yet
    return sizes, id_kind, unlabelled, np.random.default_rng(draw(st.integers(0, 2**32 - 1)))


@st.composite
def classification_batches(draw: st.DrawFn) -> list[BatchRecord]:
    """Batches of any classification kinds' rows, shaped as the kinds keep them."""
    sizes, id_kind, unlabelled, rng = draw(_batch_sizes())
    K = draw(st.integers(2, 12))
    n_sets, n_risks, n_selective, n_admit = (draw(st.integers(0, 2)) for _ in range(4))
    categories = draw(st.sampled_from([None, np.array(["hi", "lo"]), np.array([3, 7])]))
    records = []
    for b, m in enumerate(sizes):
        labels = np.where(rng.random(m) < unlabelled, -1, rng.integers(0, K, m)).astype(np.intp)
        admit = {
            f"va-{j}": {
                "y_hat": rng.integers(0, K, m), "q": rng.random(m), "d": rng.random(m),
                "admitted": rng.random(m) < 0.5, "p_lower": rng.random(m), "p_upper": rng.random(m),
            }
            for j in range(n_admit)
        }  # fmt: skip
        with_sets = [*(f"sets-{j}" for j in range(n_sets)), *admit]  # Venn-ADMIT keeps sets too
        rows = BatchRows(
            ids=_ids(id_kind, 100 * b, m),
            probs=rng.dirichlet(np.ones(K), size=m),
            packed_sets={key: np.packbits(rng.random((m, K)) < 0.5, axis=1) for key in with_sets},
            labels=labels,
            categories=None if categories is None else rng.choice(categories, m),
            risks={f"risk-{j}": rng.random(m) for j in range(n_risks)},
            admit=admit,
            selective={
                f"sel-{j}": {"score": rng.normal(size=m), "kept": rng.random(m) < 0.5}
                for j in range(n_selective)
            },
        )
        records.append(BatchRecord(b, str(b), AT, m, {}, rows))
    return records


@st.composite
def regression_batches(draw: st.DrawFn) -> list[BatchRecord]:
    """Batches of a regression monitor's rows: one base prediction shared by its calibrators, or one each."""
    sizes, id_kind, unlabelled, rng = draw(_batch_sizes())
    n_calibrators = draw(st.integers(1, 3))
    random_u = draw(st.lists(st.booleans(), min_size=n_calibrators, max_size=n_calibrators))
    prediction = draw(st.sampled_from(["point", "quantile", "ensemble"]))
    shared = draw(st.booleans())

    def pred(m: int) -> Any:
        point = rng.normal(size=m)
        if prediction == "point":
            return point
        quantiles = np.column_stack([point - 1, point + 1])
        return quantiles if prediction == "quantile" else [point, quantiles]

    records = []
    for b, m in enumerate(sizes):
        y = np.where(rng.random(m) < unlabelled, np.nan, rng.normal(size=m))
        base = pred(m)
        per_calibrator = {
            f"mcc-{i}": {
                "u": rng.random(m) if random_u[i] else None,
                **{name: rng.normal(size=m) for name in row_fields(LEVELS)},
                "pred": base if shared else pred(m),
            }
            for i in range(n_calibrators)
        }
        rows = BatchRows(
            ids=_ids(id_kind, 100 * b, m),
            probs=np.zeros((m, 0)),
            packed_sets={},
            labels=np.where(np.isnan(y), -1, 0).astype(np.intp),
            regression={"y": y, "per_calibrator": per_calibrator, "levels": LEVELS},
        )
        records.append(BatchRecord(b, str(b), AT, m, {}, rows))
    return records


@CODEC
@given(classification_batches())
def test_any_classification_rows_round_trip(records: list[BatchRecord]) -> None:
    _round_trip(records)


@CODEC
@given(regression_batches())
def test_any_regression_rows_round_trip(records: list[BatchRecord]) -> None:
    _round_trip(records, "regression")


def test_rows_no_kind_writes_are_refused_rather_than_dropped() -> None:
    rows = BatchRows(ids=[0], probs=np.ones((1, 2)) / 2, packed_sets={}, extra={"x": {"v": np.zeros(1)}})
    with pytest.raises(cw.SnapshotError, match=r"\['extra'\] that no registered calibrator kind writes"):
        encode_rows([BatchRecord(0, "0", AT, 1, {}, rows)])


# ---------------------------------------------------------------------------- monitors' rows
def _draw(rng: np.random.Generator, centres: npt.NDArray[np.float64], n: int) -> tuple[Any, Any, Any]:
    y = rng.integers(0, 3, n)
    E = (centres[y] + rng.normal(size=(n, 8))).astype(np.float32)
    return E, E @ centres.T / 8, y


def _every_classification_kind(rng: np.random.Generator) -> cw.Monitor:
    """Venn-ADMIT, a selector, Mondrian sets by category, ACI and risk; a window of 250 rows."""
    centres = rng.normal(size=(3, 8)) * 4
    reference, (E, L, y) = _draw(rng, centres, 300), _draw(rng, centres, 600)
    mon = cw.Monitor(
        calibrators={
            "va": VennAdmit(alpha=0.1, kappa=5, epochs=1, progress=False),
            "sel": SelectiveCalibrator(
                coverage=0.7, seed=0, epochs=1, steps_per_epoch=3, sample_size=64, progress=False, n_threads=1
            ),
            "by-category": cw.SplitConformalClassifier(score="lac", mondrian="category"),
            "aci": cw.Adaptive(cw.SplitConformalClassifier(score="lac", alpha=0.1)),
            "risk": cw.RiskEstimator(),
        },
        window=250, shift=None,
    )  # fmt: skip
    return mon.calibrate(logits=L, embeddings=E, y=y, reference=reference, categories=np.sign(L[:, 0]))


def _streamed_every_kind() -> tuple[cw.Monitor, list[Any]]:
    """Five batches of 100 rows (tuple ids), a third of each labelled; the true labels of each."""
    rng = np.random.default_rng(0)
    mon = _every_classification_kind(rng)
    centres = rng.normal(size=(3, 8)) * 4
    truth = []
    for b in range(5):
        E, L, y = _draw(rng, centres, 100)
        mon.observe(
            logits=L, embeddings=E, ids=[(f"{b}", i) for i in range(100)], categories=np.sign(L[:, 0])
        )
        mon.label([(f"{b}", i) for i in range(0, 100, 3)], y[::3])
        truth.append(y)
    return mon, truth


@pytest.fixture(scope="module")
def streams() -> dict[str, cw.Monitor]:
    """Monitors whose windows hold every kind's rows (not to be changed by the tests)."""
    rng = np.random.default_rng(0)
    regression = cw.Monitor(
        task="regression",
        calibrators={
            "ens": ModularConformalCalibrator(prediction="ensemble"),
            "ens-random": ModularConformalCalibrator(prediction="ensemble", interpolation="random"),
        },
    )

    def ensemble(x: npt.NDArray[np.float64]) -> list[npt.NDArray[np.float64]]:  # a point and a (mean, sd)
        return [x, np.column_stack([x, np.full(x.shape[0], 1.2)])]

    x = rng.normal(size=400)
    regression.calibrate(pred=ensemble(x), y=2 * x + rng.normal(size=400))
    for b in range(3):
        x = rng.normal(size=50)
        regression.observe(pred=ensemble(x), ids=list(range(50 * b, 50 * b + 50)))  # int ids
        regression.label(list(range(50 * b, 50 * b + 20)), 2 * x[:20])
    return {"classification": _streamed_every_kind()[0], "regression": regression}


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_the_windows_of_monitors_round_trip(streams: dict[str, cw.Monitor], task: str) -> None:
    _round_trip(streams[task]._stream.window_batches(), task)


def test_every_kind_saved_loaded_and_labelled_late_counts_as_the_live_monitor(tmp_path: Path) -> None:
    """Rows in the window and in the row log's parts come back; late labels count the same."""
    mon, truth = _streamed_every_kind()
    mon.save(tmp_path / "snap")  # the rows that left the window are written as a part first
    loaded = cw.Monitor.load(tmp_path / "snap")
    assert loaded.rows()["id"].to_list() == mon.rows()["id"].to_list()  # tuples: an object column
    for run in (mon, loaded):
        for b in (0, 3, 4):  # batch 0's rows are in the row log, 3 and 4 in the window
            run.label([(f"{b}", i) for i in range(100)], truth[b])
    assert loaded.status()["labels_from_log"] == mon.status()["labels_from_log"] == 100
    assert_frame_equal(loaded.summary(), mon.summary())
    assert_frame_equal(loaded.rows().drop("id"), mon.rows().drop("id"))


# ---------------------------------------------------------------------------- what was written before
@pytest.mark.parametrize("fixture", ["main-pets", "legacy-pets"])
def test_a_snapshots_window_encodes_to_the_rows_file_it_was_loaded_from(fixture: str, tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / fixture / "snapshot", tmp_path / "snap")
    mon = cw.Monitor.load(tmp_path / "snap")
    frame, mapping = encode_rows(mon._stream.window_batches())
    assert_frame_equal(frame, pl.read_parquet(tmp_path / "snap" / "rows.parquet"))
    assert mapping == json.loads((tmp_path / "snap" / "state.json").read_text())["row_columns"]


def _first_layout_part(records: list[BatchRecord]) -> tuple[pl.DataFrame, dict[str, Any]]:
    """A row-log part as calwatch wrote them before the codec: ``<field>/<j>`` columns."""
    present = [r.rows for r in records if r.rows is not None]
    id_kind, ids = encode_ids([i for rows in present for i in rows.ids])
    columns = {
        "batch": pl.Series(
            np.repeat([r.index for r in records], [r.n_rows for r in records]), dtype=pl.Int64
        ),
        "id": ids,
        "probs": pl.Series(np.concatenate([rows.probs for rows in present])),
        "label": pl.Series(np.concatenate([rows.labels for rows in present]).astype(np.int64)),
    }
    if present[0].categories is not None:
        columns["category"] = pl.Series(np.concatenate([rows.categories for rows in present]))
    fields: list[list[str]] = []
    for group in ("packed_sets", "risks", "admit", "selective"):
        for key, values in getattr(present[0], group).items():
            for name in values if isinstance(values, dict) else [None]:
                parts = [getattr(rows, group)[key] for rows in present]
                columns[f"{group}/{len(fields)}"] = pl.Series(
                    np.concatenate(parts if name is None else [p[name] for p in parts])
                )
                fields.append([group, key] if name is None else [group, key, name])
    return pl.DataFrame(columns), {"id_kind": id_kind, "fields": fields}


def test_the_row_log_reads_parts_of_its_first_layout_beside_new_ones(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    mon = _every_classification_kind(rng)
    centres = rng.normal(size=(3, 8)) * 4
    for b in range(2):
        E, L, _ = _draw(rng, centres, 50)
        mon.observe(logits=L, embeddings=E, ids=[f"{b}-{i}" for i in range(50)], categories=np.sign(L[:, 0]))
    old, new = mon._stream.window_batches()
    log = RowLog(tmp_path / "log")
    frame, mapping = _first_layout_part([old])
    frame.write_parquet(tmp_path / "log" / "rows-old.parquet")
    log.parts.append({
        "file": "rows-old.parquet", "batches": np.array([0]), "rows": frame.height, "mapping": mapping,
        "sha256": file_sha256(tmp_path / "log" / "rows-old.parquet"),
    })  # fmt: skip
    log.spill([new])
    log.flush()
    assert "fields" not in log.parts[1]["mapping"]  # new parts: the snapshot's layout
    found = {hit.batch: hit.rows for hit in log.find(["0-3", "0-7", "1-2"])}
    assert old.rows is not None and new.rows is not None
    _same_rows(take_rows(old.rows, np.array([3, 7])), found[0])
    _same_rows(take_rows(new.rows, np.array([2])), found[1])
