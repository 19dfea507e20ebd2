"""Test-wide settings: hypothesis runs the same examples on every run of ``make test``.

A property test that found a new example on one CI run and not on the next would make CI flaky;
``make test`` therefore derandomises hypothesis (the examples depend on the test only). The long
fuzz profile of ``make bench`` (``benchmarks/bench_fuzz.py``) explores with fresh randomness:
``CALWATCH_HYPOTHESIS_PROFILE=explore``.
"""

import os

from hypothesis import settings

settings.register_profile("repeatable", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("CALWATCH_HYPOTHESIS_PROFILE", "repeatable"))
