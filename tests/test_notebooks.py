"""Every notebook in notebooks/ runs top to bottom without errors (headless, nbclient)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
_VENV_PYTHON = REPO / ".venv" / "bin" / "python"
# The project's virtual environment (what `make test` uses), else the interpreter running pytest.
KERNEL_PYTHON = _VENV_PYTHON if _VENV_PYTHON.exists() else Path(sys.executable)
KERNEL_NAME = "calwatch-test"


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, f"no notebooks in {REPO / 'notebooks'}"


@pytest.fixture(scope="module")
def kernel_spec_manager(tmp_path_factory: pytest.TempPathFactory) -> KernelSpecManager:
    """Only one kernel: the project's interpreter (never a system or user kernelspec)."""
    kernels = tmp_path_factory.mktemp("kernels")
    spec_dir = kernels / KERNEL_NAME
    spec_dir.mkdir()
    spec = {
        "argv": [str(KERNEL_PYTHON), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "calwatch (test)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    return KernelSpecManager(kernel_dirs=[str(kernels)], ensure_native_kernel=False)


#: Rows of the prediction-log notebook's log in this test (the notebook itself uses 10^7).
NOTEBOOK_ROWS = "200000"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(
    path: Path, kernel_spec_manager: KernelSpecManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "CALWATCH_NOTEBOOK_ROWS", NOTEBOOK_ROWS
    )  # the kernel inherits this process's environment
    nb = nbformat.read(path, as_version=4)
    km = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=kernel_spec_manager)
    assert km.kernel_spec is not None
    assert km.kernel_spec.argv[0] == str(KERNEL_PYTHON)
    client = NotebookClient(
        nb,
        km=km,
        timeout=600,
        allow_errors=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    try:
        client.execute()  # raises CellExecutionError on the first failing cell
    finally:
        # nbclient shuts down only the kernels it started itself; this one is ours (a kernel left
        # running keeps its threads and a few hundred MB until pytest exits).
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    errors = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert not errors, errors
