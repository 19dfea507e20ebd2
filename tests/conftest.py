"""Test-wide settings: hypothesis runs the same examples on every run of ``make test``.

A property test that found a new example on one CI run and not on the next would make CI flaky;
``make test`` therefore derandomises hypothesis (the examples depend on the test only). The long
fuzz profile of ``make bench`` (``benchmarks/bench_fuzz.py``) explores with fresh randomness:
``CALWATCH_HYPOTHESIS_PROFILE=explore``.
"""

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

_ROOT = Path(__file__).resolve().parents[1]

settings.register_profile("repeatable", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("CALWATCH_HYPOTHESIS_PROFILE", "repeatable"))


# --- Two workers (``pytest -n 2``, pytest-xdist) ----------------------------------------------
# ``make test`` runs the suite on two processes. Tests that share an expensive fixture stay on one
# worker: every module is one work unit (its module fixtures, e.g. a validity file's fitted pools,
# are built once), the browser tests are one unit (one JupyterLab and one Chromium), and the
# cluster tests are one unit (one Spark session, one Dask cluster). Each notebook is a unit of its
# own: its kernel is its only fixture. Units go out longest first (the browser tests, the
# notebooks, the Monte Carlo files), so neither worker is left with a long unit at the end.
# The units come from a scheduler of our own, keyed by node id: pytest-xdist 3.8's
# ``xdist_group`` marks rename node ids through ``Item._nodeid``, which pytest 9.2 no longer reads.

_FIRST = ("tests/ui/", "tests/test_notebooks.py", "tests/scale/", "tests/validity/")


def work_unit(nodeid: str) -> str:
    """The work unit of a test: tests of one unit run on one worker, in collection order.

    Examples
    --------
    >>> work_unit("tests/ui/test_widget_browser.py::test_widget_in_jupyterlab")
    'ui'
    >>> work_unit("tests/test_notebooks.py::test_notebook_runs[01-quickstart.ipynb]")
    'tests/test_notebooks.py::test_notebook_runs[01-quickstart.ipynb]'
    >>> work_unit("tests/engine/test_pac.py::test_binomial_k_star_matches_an_exact_sum[1-0.5-0.75]")
    'tests/engine/test_pac.py'
    """
    if nodeid.startswith("tests/ui/"):
        return "ui"
    if nodeid.startswith("tests/scale/"):
        return "scale"
    if nodeid.startswith("tests/test_notebooks.py::"):
        return nodeid
    return nodeid.split("::", 1)[0]


def _rank(item: pytest.Item) -> int:
    path = Path(str(item.path)).resolve().relative_to(_ROOT).as_posix()
    return next((i for i, prefix in enumerate(_FIRST) if path.startswith(prefix)), len(_FIRST))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: the order inside each unit is the collection order


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's module scheduler with :func:`work_unit` as the unit (``-n 2 --dist loadscope``)."""
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return WorkUnitScheduling(config, log)
