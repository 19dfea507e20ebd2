"""The row log gives the heap's free pages back after each part it writes (glibc's malloc_trim)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import calwatch as cw
from calwatch.core import heap
from calwatch.stream import row_log

from ..synthetic import softmax_data


def test_release_free_memory_asks_glibc_where_there_is_one():
    asked = heap.release_free_memory()
    assert asked is (heap._malloc_trim() is not None)
    if sys.platform.startswith("linux") and "musl" not in sys.version:
        assert asked  # these machines run glibc


def test_each_part_the_row_log_writes_is_followed_by_a_trim(monkeypatch: pytest.MonkeyPatch):
    trims: list[int] = []
    monkeypatch.setattr(row_log, "release_free_memory", lambda: trims.append(1) or True)
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)}, window=200)
    P, y = softmax_data(500, seed=0)
    mon.calibrate(probs=P, y=y)
    mon._row_log.part_rows = 300  # type: ignore[attr-defined]
    for b in range(12):  # 1,200 rows: 1,000 leave the window, in parts of >= 300 rows
        P, _ = softmax_data(100, seed=b + 1)
        mon.observe(probs=P, ids=np.arange(100 * b, 100 * (b + 1)))
    parts = len(mon._row_log.parts)  # type: ignore[attr-defined]
    assert parts == 3 and len(trims) == parts
