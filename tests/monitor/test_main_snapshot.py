"""A snapshot saved by calwatch before the second house move loads, reproduces its views and streams on.

The fixture ``tests/fixtures/main-pets`` was written by ``tests/fixtures/make_main_snapshot.py``
running calwatch at commit 6998b0a (before the package layout moved), with the views that version
gave beside it: a row log, block detectors, an acknowledged warning, a table copied into the
monitor's own row log and its late labels. Whatever moves inside the package, these must hold.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw
from tests.fixtures.make_main_snapshot import continue_stream, views

FIXTURE = Path(__file__).parents[1] / "fixtures" / "main-pets"


def _expected(name: str) -> pl.DataFrame:
    return pl.read_parquet(FIXTURE / "expected" / f"{name}.parquet")


@pytest.fixture
def loaded(tmp_path: Path) -> cw.Monitor:
    # A copy: streaming on and saving must never touch the committed fixture.
    shutil.copytree(FIXTURE / "snapshot", tmp_path / "snapshot")
    return cw.Monitor.load(tmp_path / "snapshot")


def test_the_snapshot_gives_identical_views(loaded: cw.Monitor) -> None:
    for name, frame in views(loaded).items():
        assert_frame_equal(frame, _expected(name))
    status = loaded.status()
    assert status["rows_logged"] > 0 and status["rows_from_tables"] == 600


def test_the_snapshot_keeps_streaming_like_the_original(loaded: cw.Monitor, tmp_path: Path) -> None:
    continue_stream(loaded)
    new_batches = pl.col("batch") >= 11  # stamped with the time they were observed: today
    for name, frame in views(loaded).items():
        expected = _expected(f"{name}_after")
        if name == "summary":
            assert_frame_equal(frame.filter(~new_batches), expected.filter(~new_batches))
            frame, expected = frame.drop("observed_at"), expected.drop("observed_at")
        assert_frame_equal(frame, expected)
    loaded.save(tmp_path / "again")
    assert_frame_equal(cw.Monitor.load(tmp_path / "again").summary(), loaded.summary())
