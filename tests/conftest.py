"""Test-wide settings: hypothesis runs the same examples on every run of ``make test``.

A property test that found a new example on one CI run and not on the next would make CI flaky;
``make test`` therefore derandomises hypothesis (the examples depend on the test only). The long
fuzz profile of ``make bench`` (``benchmarks/bench_fuzz.py``) explores with fresh randomness:
``CALWATCH_HYPOTHESIS_PROFILE=explore``.
"""

import os
from pathlib import Path

import pytest
from hypothesis import settings

_ROOT = Path(__file__).resolve().parents[1]

settings.register_profile("repeatable", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("CALWATCH_HYPOTHESIS_PROFILE", "repeatable"))


# --- Two workers (``pytest -n 2``, pytest-xdist's ``loadgroup``) ------------------------------
# ``make test`` runs the suite on two processes. Tests that share an expensive fixture stay on one
# worker: every module is one group (its module fixtures, e.g. a validity file's fitted pools,
# are built once), the browser tests are one group (one JupyterLab and one Chromium), and the
# cluster tests are one group (one Spark session, one Dask cluster). Each notebook is a group of
# its own: its kernel is its only fixture. Groups go out longest first (the browser tests, the
# notebooks, the Monte Carlo files), so neither worker is left with a long group at the end.

_FIRST = ("tests/ui/", "tests/test_notebooks.py", "tests/scale/", "tests/validity/")


def _group(item: pytest.Item) -> str:
    path = Path(str(item.path)).resolve().relative_to(_ROOT).as_posix()
    if path.startswith("tests/ui/"):
        return "ui"
    if path.startswith("tests/scale/"):
        return "scale"
    if path == "tests/test_notebooks.py":
        return item.nodeid
    return path


def _rank(item: pytest.Item) -> int:
    path = Path(str(item.path)).resolve().relative_to(_ROOT).as_posix()
    return next((i for i, prefix in enumerate(_FIRST) if path.startswith(prefix)), len(_FIRST))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "xdist_group(name): tests that run on one pytest-xdist worker")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))
    items.sort(key=_rank)  # stable: the order inside each group is the collection order
