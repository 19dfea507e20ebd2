"""A snapshot written before the house move (engine subpackages) loads, reproduces its views and streams on.

The fixture ``tests/fixtures/legacy-pets`` was written by ``tests/fixtures/make_legacy_snapshot.py``
running calwatch at commit 7e6a87c, with the views that version gave beside it.
"""

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw
from calwatch.core.codec import LEGACY_MODULES, SnapshotError, resolve_trusted

from ..fixtures.make_legacy_snapshot import continue_stream

FIXTURE = Path(__file__).parents[1] / "fixtures" / "legacy-pets"


def _expected(name):
    return pl.read_parquet(FIXTURE / "expected" / f"{name}.parquet")


def _as_recorded(summary):
    """The summary without ``estimate_promise`` and the band columns, added after the fixture was recorded.

    Their values are checked instead: the fixture's risk estimator is the default, InvCP, which
    states no band.
    """
    assert summary["error_band_lo"].null_count() == summary["error_band_hi"].null_count() == summary.height
    promises = summary.filter(pl.col("kind") == "risk")["estimate_promise"].unique().to_list()
    assert promises == ["upper estimate (conservative)"]
    assert summary.filter(pl.col("kind") != "risk")["estimate_promise"].null_count() == summary.height - len(
        summary.filter(pl.col("kind") == "risk")
    )
    return summary.drop("estimate_promise", "error_band_lo", "error_band_hi")


@pytest.fixture
def loaded(tmp_path):
    # Work on a copy: streaming on and saving must never touch the committed fixture.
    import shutil

    shutil.copytree(FIXTURE / "snapshot", tmp_path / "snapshot")
    return cw.Monitor.load(tmp_path / "snapshot")


def test_old_snapshot_gives_identical_views(loaded):
    assert_frame_equal(_as_recorded(loaded.summary()), _expected("summary"))
    assert_frame_equal(loaded.class_coverage(), _expected("class_coverage"))
    assert_frame_equal(loaded.warnings().drop("ack_at"), _expected("warnings"))
    assert set(loaded.calibrators) == {"lac", "aps-random", "by-class", "aci", "risk", "pac"}
    assert loaded.notes()["text"].to_list() == ["drift starts <b>here</b>", "checked the owls"]


def test_old_snapshot_keeps_streaming_like_the_original(loaded, tmp_path):
    continue_stream(loaded)
    # The two new batches are stamped with the time they were observed: today, not in the fixture.
    new_batches = pl.col("batch") >= 6
    after, expected = _as_recorded(loaded.summary()), _expected("summary_after")
    assert_frame_equal(after.filter(~new_batches), expected.filter(~new_batches))
    assert_frame_equal(after.drop("observed_at"), expected.drop("observed_at"))
    assert_frame_equal(loaded.class_coverage(), _expected("class_coverage_after"))
    # Saved again, it is written with today's module names and loads back the same.
    loaded.save(tmp_path / "again")
    state = (tmp_path / "again" / "state.json").read_text()
    assert not any(f'"{old}:' in state for old in LEGACY_MODULES)
    assert_frame_equal(cw.Monitor.load(tmp_path / "again").summary(), loaded.summary())


def test_every_legacy_module_points_at_a_module_that_exists():
    import importlib

    for old, new in LEGACY_MODULES.items():
        assert old != new
        importlib.import_module(new)


def test_legacy_names_still_refuse_code_outside_calwatch():
    assert (
        resolve_trusted("calwatch.engine.conformal:SplitConformalClassifier") is cw.SplitConformalClassifier
    )
    with pytest.raises(SnapshotError, match="not part of calwatch"):
        resolve_trusted("os:system")
