"""Fuzzing ``Monitor.load``: a damaged or edited snapshot loads, or is refused with ``SnapshotError``.

Hypothesis damages a real snapshot (the pets monitor: every kind of calibrator, detectors, notes)
in the ways files get damaged or edited: flipped bytes, truncation, a value anywhere in
``state.json`` replaced by another JSON value, a cell of ``batches.parquet`` changed, each edit
re-signed in the manifest so that the checksums pass. ``load`` must either give a monitor whose
views work, or raise :class:`~calwatch.core.codec.SnapshotError`: never another exception, and
never code run from the snapshot.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import calwatch as cw
from calwatch.core.codec import SnapshotError

from ..synthetic import pets_monitor
from .snapshot_files import resign

FILES = ("state.json", "arrays.parquet", "batches.parquet", "rows.parquet")
FUZZ = settings(
    max_examples=int(os.environ.get("CALWATCH_FUZZ_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz") / "pets"
    pets_monitor().save(folder)
    return folder


@pytest.fixture
def copy_of(template, tmp_path):
    counter = iter(range(10**9))

    def fresh():
        target = tmp_path / f"snap-{next(counter)}"
        shutil.copytree(template, target)
        return target

    return fresh


def _loads_or_refuses(snap: Path) -> None:
    try:
        mon = cw.Monitor.load(snap)
    except SnapshotError:
        return
    # It loaded: every view must work on what it holds.
    mon.summary()
    mon.class_coverage()
    mon.rows()
    mon.warnings()
    mon.notes()


def _paths(tree, prefix=()):
    """Every path to a value in a JSON tree."""
    yield prefix
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            yield from _paths(value, (*prefix, i))


def _replace(tree, path, value):
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(tree, dict):
        return {k: (_replace(v, rest, value) if k == head else v) for k, v in tree.items()}
    return [(_replace(v, rest, value) if i == head else v) for i, v in enumerate(tree)]


@FUZZ
@given(name=st.sampled_from(FILES), where=st.floats(0, 1, exclude_max=True), flip=st.integers(1, 255))
def test_flipped_bytes_are_refused(copy_of, name, where, flip):
    snap = copy_of()
    data = bytearray((snap / name).read_bytes())
    data[int(where * len(data))] ^= flip
    (snap / name).write_bytes(bytes(data))
    with pytest.raises(SnapshotError):  # not re-signed: the checksum catches it
        cw.Monitor.load(snap)


@FUZZ
@given(name=st.sampled_from(FILES), keep=st.floats(0, 1, exclude_max=True), signed=st.booleans())
def test_truncated_files_load_or_are_refused(copy_of, name, keep, signed):
    snap = copy_of()
    data = (snap / name).read_bytes()
    (snap / name).write_bytes(data[: int(keep * len(data))])
    if signed:
        resign(snap, name)
    _loads_or_refuses(snap)


@FUZZ
@given(data=st.data(), value=JSON_VALUES)
def test_any_edit_of_the_state_loads_or_is_refused(copy_of, data, value):
    snap = copy_of()
    state = json.loads((snap / "state.json").read_text())
    paths = list(_paths(state))
    path = data.draw(st.sampled_from(paths))
    (snap / "state.json").write_text(json.dumps(_replace(state, path, value)))
    resign(snap, "state.json")
    _loads_or_refuses(snap)


@FUZZ
@given(data=st.data())
def test_any_cell_of_batches_parquet_edited_loads_or_is_refused(copy_of, data):
    snap = copy_of()
    frame = pl.read_parquet(snap / "batches.parquet")
    column = data.draw(st.sampled_from(frame.columns))
    row = data.draw(st.integers(0, frame.height - 1))
    dtype = frame.schema[column]
    if dtype == pl.String:
        value = data.draw(st.text(max_size=6) | st.none())
    elif dtype == pl.Int64:
        value = data.draw(st.none() | st.integers(-(2**40), 2**40))
    elif dtype == pl.Float64:
        value = data.draw(st.none() | st.floats(allow_nan=True, allow_infinity=True, width=64))
    elif isinstance(dtype, pl.List):
        inner = st.integers(-5, 10**6) if dtype.inner == pl.Int64 else st.floats(allow_nan=True, width=64)
        value = data.draw(st.none() | st.lists(inner, max_size=8))
    else:
        return  # datetimes: not a number anything is computed from
    values = frame[column].to_list()
    values[row] = value
    frame = frame.with_columns(pl.Series(column, values, dtype=dtype))
    frame.write_parquet(snap / "batches.parquet")
    resign(snap, "batches.parquet")
    _loads_or_refuses(snap)
