"""A snapshot may be sent by anyone: loading it reads nothing outside its folder, imports nothing it names.

Each case edits a saved snapshot and re-signs its manifest (as an attacker who knows the format
would), then loads it: the load is refused with ``SnapshotError``, with one message whether or not
the named outside path exists.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import calwatch as cw
from calwatch.core.codec import SnapshotError, resolve_trusted, snapshot_may_name
from calwatch.stream.row_log import file_sha256

from .snapshot_files import resign


def _saved(folder: Path) -> Path:
    """A snapshot whose row log holds one part of rows and one of labels."""
    rng = np.random.default_rng(0)
    P, y = rng.dirichlet(np.ones(3), 300), rng.integers(0, 3, 300)
    mon = cw.Monitor(
        calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)}, window=100, shift=None
    )
    mon.calibrate(probs=P, y=y)
    for b in range(3):
        mon.observe(probs=P[b * 100 : (b + 1) * 100], ids=[f"r{b}-{i}" for i in range(100)])
    mon.label([f"r0-{i}" for i in range(5)], y[:5])
    mon.save(folder)
    return folder


def _edit_index(snap: Path, edit: dict[str, object]) -> None:
    index_path = snap / "rowlog" / "index.json"
    index = json.loads(index_path.read_text())
    for key, value in edit.items():
        if key == "file":
            index["parts"][0]["file"] = value
        else:
            index[key] = value
    index_path.write_text(json.dumps(index))
    resign(snap, "rowlog/index.json")


@pytest.fixture
def snap(tmp_path: Path) -> Path:
    return _saved(tmp_path / "snap")


def test_an_untouched_snapshot_with_a_row_log_loads(snap: Path) -> None:
    loaded = cw.Monitor.load(snap)
    assert loaded.status()["rows_logged"] == 200


@pytest.mark.parametrize(
    "outside", ["/etc/passwd", "/nonexistent/file", "../outside.parquet", "sub/x.parquet", ".."]
)
def test_a_row_log_part_outside_the_folder_is_refused_alike(snap: Path, tmp_path: Path, outside: str) -> None:
    target = Path(outside) if outside.startswith("/") else snap / "rowlog" / outside
    sha = file_sha256(target) if target.is_file() else "0" * 64
    index = json.loads((snap / "rowlog" / "index.json").read_text())
    index["parts"][0]["sha256"] = sha  # the right checksum, as a careful attacker would write it
    (snap / "rowlog" / "index.json").write_text(json.dumps(index))
    _edit_index(snap, {"file": outside})
    with pytest.raises(SnapshotError, match=r"names .*, which is not a file of the snapshot") as err:
        cw.Monitor.load(snap)
    assert "lacks" not in str(err.value) and "checksum" not in str(err.value)


def test_a_label_part_outside_the_folder_is_refused(snap: Path) -> None:
    _edit_index(snap, {"labels": ["/etc/hostname"], "labels_sha256": [file_sha256(Path("/etc/hostname"))]})
    with pytest.raises(SnapshotError, match="not a file of the snapshot"):
        cw.Monitor.load(snap)


def test_a_symbolic_link_out_of_the_folder_is_refused(snap: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.parquet"
    part = next((snap / "rowlog").glob("rows-*.parquet"))
    shutil.copy(part, outside)
    part.unlink()
    os.symlink(outside, part)  # same name and bytes, but it lives outside the snapshot
    with pytest.raises(SnapshotError, match="not a file of the snapshot"):
        cw.Monitor.load(snap)


def test_the_decoder_refuses_modules_no_snapshot_holds_before_importing_them() -> None:
    assert snapshot_may_name("calwatch.shift.watch") and snapshot_may_name("calwatch.engine.shift.betting")
    for name in (
        "calwatch.__main__:main",
        "calwatch.scale.dask:observe_dask",
        "calwatch.publish.server:serve",
    ):
        with pytest.raises(SnapshotError, match="no snapshot holds"):
            resolve_trusted(name)
    # in a fresh interpreter: refusing must not import the module it names
    code = (
        "import sys\n"
        "from calwatch.core.codec import SnapshotError, resolve_trusted\n"
        "for name in ('calwatch.__main__:main', 'calwatch.scale.dask:x', 'calwatch.demo:run_demo'):\n"
        "    try:\n"
        "        resolve_trusted(name)\n"
        "    except SnapshotError:\n"
        "        pass\n"
        "names = ('calwatch.__main__', 'calwatch.scale.dask', 'calwatch.demo')\n"
        "print(sorted(m for m in names if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_state_naming_the_command_line_module_is_refused(snap: Path) -> None:
    state = (snap / "state.json").read_text()
    edited = state.replace(
        "calwatch.engine.conformal.classifier:SplitConformalClassifier", "calwatch.__main__:main", 1
    )
    assert edited != state
    (snap / "state.json").write_text(edited)
    resign(snap, "state.json")
    with pytest.raises(SnapshotError, match="no snapshot holds"):
        cw.Monitor.load(snap)
