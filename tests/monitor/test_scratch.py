"""Scratch folders (row log, label log, duplicate check) do not outlive a process killed with -9."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from calwatch.core.scratch import OWNER, ScratchFolder, sweep_orphans
from calwatch.stream.row_log import RowLog

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the sweep needs flock")

# A child that makes a row log (which makes its label log in the same folder), writes a part's
# worth of bytes into it, says where it is, and waits to be killed.
_CHILD = """
import sys
from calwatch.stream.row_log import RowLog
log = RowLog()
(log.folder / "rows-000000-test.parquet").write_bytes(b"x" * 4096)
print(log.folder, flush=True)
sys.stdin.read()
"""


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary directory of the test's own, for this process and its children."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path


def _start_child() -> tuple[subprocess.Popen[str], Path]:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    return child, Path(child.stdout.readline().strip())


def test_a_killed_process_folder_is_swept_and_a_living_one_is_kept(temp_root: Path) -> None:
    killed, orphan = _start_child()
    living, kept = _start_child()
    try:
        assert orphan.parent == temp_root and (orphan / OWNER).exists()
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        assert orphan.exists()  # nothing ran in the killed process to remove it
        foreign = temp_root / "calwatch-rowlog-made-by-hand"  # no .owner: never ours to remove
        foreign.mkdir()
        fresh = ScratchFolder("calwatch-rowlog-")  # a new folder sweeps first
        assert not orphan.exists()
        assert kept.exists() and (kept / "rows-000000-test.parquet").stat().st_size == 4096
        assert foreign.exists() and fresh.path.exists()
        assert sweep_orphans("calwatch-rowlog-") == []  # the living child's and our own are held
    finally:
        living.kill()
        living.wait(timeout=30)
    assert sweep_orphans("calwatch-rowlog-") == [kept]
    assert fresh.path.exists()


def test_a_folder_goes_with_its_object_and_with_remove(temp_root: Path) -> None:
    log = RowLog()
    folder = log.folder
    (folder / "part").write_bytes(b"x")
    del log
    gc.collect()
    assert not folder.exists()
    scratch = ScratchFolder("calwatch-ids-")
    scratch.remove()
    scratch.remove()  # twice is harmless
    assert not scratch.path.exists()
    assert os.listdir(temp_root) == []


def test_a_given_folder_is_never_removed_or_locked(temp_root: Path) -> None:
    given = temp_root / "mine"
    log = RowLog(given)
    del log
    gc.collect()
    assert given.exists() and not (given / OWNER).exists()


def test_a_forked_child_leaves_its_parents_folder(temp_root: Path) -> None:
    scratch = ScratchFolder("calwatch-rowlog-")
    pid = os.fork()
    if pid == 0:  # the child: what its exit runs must not remove the parent's folder
        scratch.remove()
        os._exit(0)
    os.waitpid(pid, 0)
    assert scratch.path.exists()
    scratch.remove()
    assert not scratch.path.exists()
